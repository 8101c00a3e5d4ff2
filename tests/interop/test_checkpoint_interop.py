"""Checkpoints across engines: ours load in deltalake (delta-rs), deltalake's load in ours, and our
writer round-trips every conformance table's state.

No Spark. A checkpoint is proven to be *the* thing read by deleting the commits before it.
"""

from __future__ import annotations

import os
import shutil
import time

import pyarrow as pa
import pytest
from txn_helpers import append, create_table, read_ids, snapshot, txn, write_file

from airflow_delta_provider_apps.engine.actions import RemoveFile
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.interop


def _log(root):
    return os.path.join(root, "_delta_log")


def _drop_commits_before(root, version):
    for n in os.listdir(_log(root)):
        if n.endswith(".json") and n[:20].isdigit() and int(n[:20]) < version:
            os.remove(os.path.join(_log(root), n))


def _dl_paths(dt) -> list[str]:
    return sorted(dt.get_add_actions(flatten=True).column("path").to_pylist())


def _our_table(root, config=None):
    create_table(root, configuration={"delta.checkpointInterval": "1000", **(config or {})})
    for i, p in enumerate(["a", "b", None, "a", "c"]):
        append(root, [i * 10, i * 10 + 1], p, app_id="app", app_version=i)
    row = snapshot(root).files.to_pylist()[0]
    txn(root, operation="DELETE").commit(
        [
            RemoveFile(
                path=row["path"],
                deletion_timestamp=int(time.time() * 1000),
                data_change=True,
                extended_file_metadata=True,
                partition_values=dict(row["partition_values"]),
                size=row["size"],
            )
        ]
    )
    return snapshot(root)


@pytest.mark.parametrize("variant", ["classic", "multi-part", "stats-as-struct"])
def test_our_checkpoint_loads_in_deltalake(tmp_path, variant):
    root = str(tmp_path / "t")
    config = {"delta.checkpoint.writeStatsAsStruct": "true"} if variant == "stats-as-struct" else {}
    snap = _our_table(root, config)
    m = write_checkpoint(storage_for(root), root, snap, part_size=3 if variant == "multi-part" else None)
    assert m["num_parts"] == (3 if variant == "multi-part" else 1)
    _drop_commits_before(root, snap.version)
    ours = sorted(snap.files.column("path").to_pylist())

    dt = deltalake.DeltaTable(root)
    assert dt.version() == snap.version
    assert _dl_paths(dt) == ours
    assert dt.transaction_version("app") == 4
    assert sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == read_ids(root)
    assert dt.metadata().partition_columns == ["p"]
    # stats survive (delta-rs reads them from stats or stats_parsed)
    adds = dt.get_add_actions(flatten=True)
    assert sum(adds.column("num_records").to_pylist()) == len(read_ids(root))
    # and delta-rs keeps writing on top of our checkpoint
    deltalake.write_deltalake(
        root, pa.table({"id": pa.array([7], pa.int64()), "value": ["x"], "p": ["z"]}), mode="append"
    )
    assert snapshot(root).version == snap.version + 1 and 7 in read_ids(root)


def test_deltalake_checkpoint_loads_in_ours(tmp_path):
    root = str(tmp_path / "t")
    for i in range(4):
        data = pa.table(
            {"id": pa.array([i * 10, i * 10 + 1], pa.int64()), "value": ["v", "w"], "p": [f"p{i % 2}", f"p{i % 2}"]}
        )
        deltalake.write_deltalake(root, data, mode="append", partition_by=["p"])
    dt = deltalake.DeltaTable(root)
    dt.delete("id = 10")
    dt = deltalake.DeltaTable(root)
    dt.create_checkpoint()
    version = dt.version()
    assert os.path.exists(os.path.join(_log(root), f"{version:020d}.checkpoint.parquet"))
    _drop_commits_before(root, version)

    snap = load_snapshot(storage_for(root), root)
    assert snap.version == version and snap.log_segment.checkpoint_version == version
    assert sorted(snap.files.column("path").to_pylist()) == _dl_paths(dt)
    assert read_ids(root, snap) == sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist())

    # our transaction commits on top of delta-rs' table, and our next checkpoint is read by delta-rs
    t = OptimisticTransaction(storage_for(root), root, snap, operation="WRITE")
    res = t.commit([write_file(root, [99], "p9")])
    assert res.version == version + 1
    write_checkpoint(storage_for(root), root, load_snapshot(storage_for(root), root))
    _drop_commits_before(root, version + 1)
    dt2 = deltalake.DeltaTable(root)
    assert dt2.version() == version + 1
    assert sorted(dt2.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == read_ids(root)


def test_our_cleanup_leaves_a_table_deltalake_reads(tmp_path):
    from airflow_delta_provider_apps.engine.log.cleanup import cleanup_expired_logs

    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "3", "delta.enableExpiredLogCleanup": "false"})
    for i in range(7):
        append(root, [i], "a")
    old = time.time() - 40 * 86400
    for n in os.listdir(_log(root)):
        if n[:20].isdigit() and int(n[:20]) <= 4:
            os.utime(os.path.join(_log(root), n), (old, old))
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root))
    assert m["checkpoint_version"] == 3 and m["num_deleted_commits"] == 3
    dt = deltalake.DeltaTable(root)
    assert dt.version() == 7 and dt.to_pyarrow_table().num_rows == 7


# ------------------------------------------------------------------ conformance corpus
def _tables(manifest):
    return [t for t in manifest["tables"] if t.get("expected_kind") != "error"]


def _state(snap, with_stats=True):
    files = snap.files
    if not with_stats:
        files = files.set_column(files.schema.get_field_index("stats"), "stats", pa.nulls(files.num_rows, pa.string()))
    keys = ["path", "size", "stats", "base_row_id", "default_row_commit_version"]
    rows = files.select(keys).to_pylist()
    pv = files.column("partition_values").to_pylist()
    dv = files.column("deletion_vector").to_pylist()
    fs = sorted(
        (
            r["path"],
            r["size"],
            r["stats"],
            r["base_row_id"],
            r["default_row_commit_version"],
            tuple(sorted(p or [])),
            tuple(sorted((d or {}).items())),
        )
        for r, p, d in zip(rows, pv, dv)
    )
    tombs = sorted(snap.tombstones.column("path").to_pylist())
    return {
        "version": snap.version,
        "files": fs,
        "tombstones": tombs,
        "metadata": snap.metadata,
        "protocol": snap.protocol,
        "txns": {k: v.version for k, v in snap.set_transactions.items()},
        "domains": {k: v.configuration for k, v in snap.domain_metadata.items()},
    }


def test_checkpoint_round_trip_of_conformance_tables(tmp_path, conformance_root, conformance_manifest):
    """For every readable corpus table: our checkpoint of its latest state, read back by our reader
    (commits before it removed), gives the same state; delta-rs reads it too where it reads the
    original. ``now_ms=0`` keeps every tombstone and txn (the corpus is years old)."""
    checked, dl_checked, dl_failed = [], [], []
    for entry in _tables(conformance_manifest):
        src = conformance_root / entry["table_root"]
        dst = tmp_path / entry["name"]
        shutil.copytree(src, dst)
        root = str(dst)
        try:
            before = load_snapshot(storage_for(root), root)
        except DeltaError:
            continue
        try:
            dl_before = deltalake.DeltaTable(root)
            dl_paths_before = _dl_paths(dl_before)
        except Exception:
            dl_paths_before = None
        # remove other checkpoints of this version so ours is the one read
        for n in os.listdir(_log(root)):
            if ".checkpoint" in n and n[:20].isdigit() and int(n[:20]) == before.version:
                os.remove(os.path.join(_log(root), n))
        if os.path.exists(os.path.join(_log(root), "_last_checkpoint")):
            os.remove(os.path.join(_log(root), "_last_checkpoint"))
        write_checkpoint(storage_for(root), root, before, now_ms=0, check_features=False)
        _drop_commits_before(root, before.version)
        after = load_snapshot(storage_for(root), root)
        assert after.log_segment.checkpoint_version == before.version, entry["name"]
        # delta.checkpoint.writeStatsAsJson=false drops JSON stats from checkpoints by design
        with_stats = before.metadata.configuration.get("delta.checkpoint.writeStatsAsJson", "true") != "false"
        assert _state(after, with_stats) == _state(before, with_stats), entry["name"]
        checked.append(entry["name"])
        if dl_paths_before is not None:
            try:
                dt = deltalake.DeltaTable(root)
                got = (dt.version(), _dl_paths(dt))
            except Exception as e:
                dl_failed.append(f"{entry['name']}: {e}")
                continue
            assert got == (before.version, dl_paths_before), entry["name"]
            dl_checked.append(entry["name"])
    print(f"\nround-tripped {len(checked)} tables; delta-rs agreed on {len(dl_checked)}")
    assert len(checked) >= 25
    assert not dl_failed, "delta-rs cannot read our checkpoint of: " + "; ".join(dl_failed)
