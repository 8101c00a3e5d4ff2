"""V2 checkpoints written with sidecars (delta.checkpointPolicy=v2): layout, readers, log cleanup, a crash."""

from __future__ import annotations

import json
import os
import time

import deltalake
import pyarrow.parquet as pq
import pytest
from txn_helpers import read_ids, snapshot, txn, write_file

from airflow_delta_provider_apps.engine.commands.vacuum import vacuum
from airflow_delta_provider_apps.engine.log import checkpoint as ckpt
from airflow_delta_provider_apps.engine.log.cleanup import cleanup_expired_logs
from airflow_delta_provider_apps.engine.log.listing import UUID_CHECKPOINT_RE
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.table import DeltaTable

DAY = 86_400_000
V2 = {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "5"}


def _log(root) -> str:
    return os.path.join(root, "_delta_log")


def _sidecar_dir(root) -> str:
    return os.path.join(root, "_delta_log", "_sidecars")


def _create(root, properties=V2) -> None:
    DeltaTable.create(None, root, schema="id BIGINT, value STRING, p STRING", partition_by=["p"], properties=properties)


def _append(root, i: int) -> None:
    txn(root, operation="WRITE").commit([write_file(root, [i], "a" if i % 2 else "b")])


def _uuid_checkpoints(root) -> dict[int, str]:
    out = {}
    for name in os.listdir(_log(root)):
        m = UUID_CHECKPOINT_RE.match(name)
        if m:
            out[int(m.group(1))] = name
    return out


def _table_30(root) -> None:
    _create(root)
    for i in range(30):
        _append(root, i)


def _add_paths_in_raw_files(root, top_name: str) -> list[str]:
    """The add paths of one V2 checkpoint, read from its raw parquet files (not through our reader)."""
    top = pq.read_table(os.path.join(_log(root), top_name)).to_pylist()
    paths = []
    for row in top:
        if row["sidecar"]:
            side = pq.read_table(os.path.join(_sidecar_dir(root), row["sidecar"]["path"]))
            paths += [a["path"] for a in side.column("add").to_pylist() if a]
    return sorted(paths)


def test_v2_table_of_30_commits_is_read_by_us_and_by_delta_rs(tmp_path):
    root = str(tmp_path / "t")
    _table_30(root)
    snap = snapshot(root)
    assert snap.version == 30
    assert "v2Checkpoint" in snap.protocol.reader_features and "v2Checkpoint" in snap.protocol.writer_features
    # the post-commit checkpoint every 5 commits, UUID-named, no classic ones
    assert sorted(_uuid_checkpoints(root)) == [5, 10, 15, 20, 25, 30]
    assert not [n for n in os.listdir(_log(root)) if n.endswith(".checkpoint.parquet")]
    assert read_ids(root) == list(range(30))
    ours = sorted(snap.files.column("path").to_pylist())
    assert _add_paths_in_raw_files(root, _uuid_checkpoints(root)[30]) == ours

    # only the checkpoint is left to rebuild the state from: every reader must go through its sidecars
    for name in os.listdir(_log(root)):
        if name.endswith(".json") and int(name[:20]) < 30:
            os.remove(os.path.join(_log(root), name))
    snap = snapshot(root)
    assert snap.version == 30 and sorted(snap.files.column("path").to_pylist()) == ours
    assert read_ids(root, snap) == list(range(30))
    # delta-rs 1.6.6 loads the V2 checkpoint (version, file list) but refuses to scan a table with the
    # v2Checkpoint reader feature (also a Spark-written one), so its scan is not compared here
    dt = deltalake.DeltaTable(root)
    assert dt.version() == 30
    assert sorted(dt.get_add_actions(flatten=True).column("path").to_pylist()) == ours


def test_checkpoint_files_have_the_protocol_shape(tmp_path, conformance_root):
    root = str(tmp_path / "t")
    _create(root, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "1000"})
    for i in range(5):
        _append(root, i)
    st = storage_for(root)
    m = ckpt.write_checkpoint(st, root, snapshot(root), part_size=2)  # 5 adds -> 3 sidecars
    assert m["num_sidecars"] == 3 and m["num_add_files"] == 5
    top_name = _uuid_checkpoints(root)[5]
    top = pq.read_table(os.path.join(_log(root), top_name))
    rows = top.to_pylist()
    kinds = [next(k for k, v in r.items() if v is not None) for r in rows]
    assert kinds.count("checkpointMetadata") == 1 and kinds.count("protocol") == 1 and kinds.count("metaData") == 1
    assert kinds.count("sidecar") == 3 and "add" not in kinds and "remove" not in kinds
    assert next(r["checkpointMetadata"] for r in rows if r["checkpointMetadata"])["version"] == 5
    sidecars = [r["sidecar"] for r in rows if r["sidecar"]]
    for sc in sidecars:
        path = os.path.join(_sidecar_dir(root), sc["path"])
        assert os.path.getsize(path) == sc["sizeInBytes"]
        assert abs(os.stat(path).st_mtime_ns // 1_000_000 - sc["modificationTime"]) < 2_000
        assert pq.read_schema(path).names == ["add", "remove"]
    assert sorted(os.listdir(_sidecar_dir(root))) == sorted(sc["path"] for sc in sidecars)
    assert _add_paths_in_raw_files(root, top_name) == sorted(snapshot(root).files.column("path").to_pylist())

    lc = json.loads(open(os.path.join(_log(root), "_last_checkpoint")).read())
    assert lc["version"] == 5 and lc["numOfAddFiles"] == 5
    assert lc["size"] == len(rows) + 5  # top-level actions + the sidecars' file actions
    assert lc["v2Checkpoint"]["path"] == top_name
    assert [s["path"] for s in lc["v2Checkpoint"]["sidecarFiles"]] == [s["path"] for s in sidecars]

    # the same layout as Spark's V2 checkpoint (delta-golden v2-checkpoint-parquet)
    golden = conformance_root / "delta-golden" / "v2-checkpoint-parquet" / "delta" / "_delta_log"
    g_top = next(p for p in golden.iterdir() if UUID_CHECKPOINT_RE.match(p.name))
    assert set(pq.read_schema(g_top).names) == set(top.schema.names)
    g_side = next((golden / "_sidecars").iterdir())
    assert pq.read_schema(g_side).names == ["add", "remove"]
    assert pq.read_schema(g_top).field("sidecar").type.names == top.schema.field("sidecar").type.names


def test_checkpoint_policy_v2_set_on_an_existing_table(tmp_path):
    root = str(tmp_path / "t")
    _create(root, {"delta.checkpointInterval": "1000"})
    _append(root, 1)
    t = DeltaTable.for_path(None, root)
    t.checkpoint()
    assert os.path.exists(os.path.join(_log(root), f"{1:020d}.checkpoint.parquet"))
    t.set_properties({"delta.checkpointPolicy": "v2"})
    proto = snapshot(root).protocol
    assert (proto.min_reader_version, proto.min_writer_version) == (3, 7)
    assert "v2Checkpoint" in proto.reader_features and "v2Checkpoint" in proto.writer_features
    _append(root, 2)
    result = t.checkpoint()
    assert sorted(_uuid_checkpoints(root)) == [3]
    assert any(os.path.basename(os.path.dirname(p)) == "_sidecars" for p in result["checkpoint_files"])
    assert read_ids(root) == [1, 2]


def _age(path: str, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def test_log_cleanup_keeps_sidecars_of_retained_checkpoints(tmp_path):
    root = str(tmp_path / "t")
    _table_30(root)
    now = int(time.time() * 1000)
    old = now - 40 * DAY
    for v in range(13):  # commits 0..12 past the 30-day retention: checkpoint 10 is protected
        _age(os.path.join(_log(root), f"{v:020d}.json"), old + v)
    orphan_old = os.path.join(_sidecar_dir(root), f"{3:020d}.checkpoint.0000000001.0000000001.orphan-old.parquet")
    orphan_young = os.path.join(_sidecar_dir(root), f"{3:020d}.checkpoint.0000000001.0000000001.orphan-new.parquet")
    for p in (orphan_old, orphan_young):
        open(p, "wb").write(b"x")
    for name in os.listdir(_sidecar_dir(root)):  # every sidecar old, except one orphan
        if name != os.path.basename(orphan_young):
            _age(os.path.join(_sidecar_dir(root), name), old)
    refs = {v: set(_refs(root, n)) for v, n in _uuid_checkpoints(root).items()}

    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=now)
    assert m["checkpoint_version"] == 10
    assert sorted(_uuid_checkpoints(root)) == [10, 15, 20, 25, 30]
    left = set(os.listdir(_sidecar_dir(root)))
    assert left == set().union(*(refs[v] for v in (10, 15, 20, 25, 30))) | {os.path.basename(orphan_young)}
    assert not refs[5] & left
    assert m["num_deleted_sidecars"] == len(refs[5]) + 1
    # the table still reads from the oldest retained checkpoint
    assert read_ids(root, snapshot(root, version=10)) == list(range(10))
    assert read_ids(root) == list(range(30))


def _refs(root, top_name: str) -> list[str]:
    return [r["path"] for r in pq.read_table(os.path.join(_log(root), top_name)).column("sidecar").to_pylist() if r]


def test_cleanup_deletes_no_sidecar_when_a_retained_checkpoint_is_unreadable(tmp_path):
    root = str(tmp_path / "t")
    _table_30(root)
    now = int(time.time() * 1000)
    for name in os.listdir(_sidecar_dir(root)):
        _age(os.path.join(_sidecar_dir(root), name), now - 40 * DAY)
    with open(os.path.join(_log(root), f"{30:020d}.checkpoint.00000000-0000-0000-0000-000000000000.parquet"), "wb"):
        pass  # empty: not parquet
    before = set(os.listdir(_sidecar_dir(root)))
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=now + 40 * DAY)
    assert m["num_deleted_sidecars"] == 0 and set(os.listdir(_sidecar_dir(root))) == before


def test_crash_between_sidecars_and_top_level_file_leaves_the_table_readable(tmp_path, monkeypatch):
    root = str(tmp_path / "t")
    _create(root, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "1000"})
    for i in range(4):
        _append(root, i)
    st = storage_for(root)
    ckpt.write_checkpoint(st, root, snapshot(root))
    _append(root, 4)
    real = ckpt.put_new

    def crash_on_top_level(storage, path, data, now_ms):
        if os.path.basename(os.path.dirname(path)) != "_sidecars":
            raise OSError("killed")
        return real(storage, path, data, now_ms)

    monkeypatch.setattr(ckpt, "put_new", crash_on_top_level)
    with pytest.raises(OSError, match="killed"):
        ckpt.write_checkpoint(st, root, snapshot(root))
    monkeypatch.setattr(ckpt, "put_new", real)
    assert sorted(_uuid_checkpoints(root)) == [4]
    assert len(os.listdir(_sidecar_dir(root))) == 2  # the orphan is there, unreferenced
    snap = snapshot(root)
    assert snap.version == 5 and read_ids(root, snap) == [0, 1, 2, 3, 4]
    assert deltalake.DeltaTable(root).version() == 5
    assert json.loads(open(os.path.join(_log(root), "_last_checkpoint")).read())["version"] == 4
    # the next checkpoint is written whole
    ckpt.write_checkpoint(st, root, snapshot(root))
    assert sorted(_uuid_checkpoints(root)) == [4, 5]
    assert read_ids(root) == [0, 1, 2, 3, 4]


def test_vacuum_leaves_the_log_and_sidecars_alone(tmp_path):
    root = str(tmp_path / "t")
    _create(root)
    for i in range(6):
        _append(root, i)
    before = {}
    for d, _, names in os.walk(_log(root)):
        for n in names:
            before[os.path.join(d, n)] = os.path.getsize(os.path.join(d, n))
    old = int(time.time() * 1000) - 40 * DAY
    for p in before:
        _age(p, old)
    stray = os.path.join(root, "p=a", "stray.parquet")  # an unreferenced data file: VACUUM's to delete
    open(stray, "wb").write(b"x")
    _age(stray, old)
    vacuum(snapshot(root), 0, enforce_retention_duration=False)
    assert not os.path.exists(stray)
    assert all(os.path.exists(p) for p in before)
    assert any(os.path.basename(os.path.dirname(p)) == "_sidecars" for p in before)


def test_spark_written_v2_table_appended_and_checkpointed_by_us(tmp_path, conformance_root):
    import shutil
    import uuid

    import pyarrow as pa

    from airflow_delta_provider_apps.engine.actions import AddFile

    root = str(tmp_path / "golden")
    shutil.copytree(conformance_root / "delta-golden" / "v2-checkpoint-parquet" / "delta", root)
    name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    pq.write_table(pa.table({"id": pa.array([100, 101], pa.int64())}), os.path.join(root, name))
    size = os.path.getsize(os.path.join(root, name))
    add = AddFile(path=name, partition_values={}, size=size, modification_time=0, data_change=True)
    txn(root, operation="WRITE").commit([add])
    ckpt.write_checkpoint(storage_for(root), root, snapshot(root))
    assert sorted(_uuid_checkpoints(root)) == [2, 3]
    assert len(_add_paths_in_raw_files(root, _uuid_checkpoints(root)[3])) == 5  # Spark's 4 files + ours
    for name in os.listdir(_log(root)):  # read from our checkpoint alone
        if name.endswith(".json"):
            os.remove(os.path.join(_log(root), name))
    snap = snapshot(root)
    assert snap.version == 3 and read_ids(root, snap) == list(range(10)) + [100, 101]
    assert deltalake.DeltaTable(root).version() == 3
