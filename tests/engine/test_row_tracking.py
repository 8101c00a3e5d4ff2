"""Row tracking without a JVM: row ids assigned at commit from the high water mark (and again above a
winner's after a rebase), stable row ids and commit versions kept by DELETE, UPDATE and OPTIMIZE
(with and without deletion vectors), enabling on an existing table backfills every file; a property
test against a plain-Python model; deltalake reads the same rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.row_tracking import (
    COMMIT_VERSION_COLUMN,
    DOMAIN,
    ROW_ID_COLUMN,
    high_water_mark,
    read_with_row_ids,
)
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction
from airflow_delta_provider_apps.engine.writer import table_write_spec, write_batches

TRACKED = {"delta.enableRowTracking": "true"}


def _batch(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def _ids(t: DeltaTable) -> dict[int, tuple[int, int, str]]:
    """id -> (stable row id, row commit version, v)."""
    rows = read_with_row_ids(t.snapshot()).to_pylist()
    return {r["id"]: (r["row_id"], r["row_commit_version"], r["v"]) for r in rows}


def _check_invariants(t: DeltaTable) -> None:
    """Every live file has row ids; fresh ids are unique and under the high water mark."""
    s = t.snapshot()
    files = s.files.select(["base_row_id", "default_row_commit_version", "stats"]).to_pylist()
    hwm = high_water_mark(s.domain_metadata)
    ranges = []
    for f in files:
        assert f["base_row_id"] is not None and f["default_row_commit_version"] is not None
        n = json.loads(f["stats"])["numRecords"]
        ranges.append((f["base_row_id"], f["base_row_id"] + n - 1))
        assert f["base_row_id"] + n - 1 <= hwm
    ranges.sort()
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))  # fresh ids never overlap
    stable = [r["row_id"] for r in read_with_row_ids(s).to_pylist()]
    assert len(stable) == len(set(stable))


def _deltalake_rows(root: str) -> list:
    deltalake = pytest.importorskip("deltalake")
    dt = deltalake.DeltaTable(root)
    out = deltalake.QueryBuilder().register("t", dt).execute("SELECT id, v FROM t").read_all()
    return sorted(zip(out.column("id").to_pylist(), out.column("v").to_pylist()))


def test_new_table_assigns_row_ids_and_the_high_water_mark(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=TRACKED)
    s = t.snapshot()
    assert {"rowTracking", "domainMetadata"} <= set(s.protocol.writer_features)
    config = s.metadata.configuration
    assert config[ROW_ID_COLUMN].startswith("_row-id-col-") and config[COMMIT_VERSION_COLUMN]
    append_arrow(root, _batch([1, 2, 3]))
    append_arrow(root, _batch([4, 5]))
    s = t.snapshot()
    files = sorted(s.files.select(["base_row_id", "default_row_commit_version"]).to_pylist(), key=str)
    assert files == [
        {"base_row_id": 0, "default_row_commit_version": 1},
        {"base_row_id": 3, "default_row_commit_version": 2},
    ]
    assert json.loads(s.domain_metadata[DOMAIN].configuration) == {"rowIdHighWaterMark": 4}
    assert _ids(t) == {i: (i - 1, 1 if i <= 3 else 2, f"v{i}") for i in range(1, 6)}
    # the materialized columns are not data columns for any reader
    assert read_snapshot_table(t.snapshot()).column_names == ["id", "v"]
    assert _deltalake_rows(root) == [(i, f"v{i}") for i in range(1, 6)]
    commit = json.loads(open(f"{root}/_delta_log/00000000000000000002.json").readline())
    assert commit["commitInfo"]["tags"] == {"delta.rowTracking.preserved": "true"}


@pytest.mark.parametrize("dvs", [False, True], ids=["rewrite", "deletion-vectors"])
def test_dml_and_optimize_keep_stable_ids(tmp_path, dvs):
    root = str(tmp_path / "t")
    props = {**TRACKED, "delta.enableDeletionVectors": str(dvs).lower()}
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=props)
    append_arrow(root, _batch([1, 2, 3]))
    append_arrow(root, _batch([4, 5, 6]))
    before = _ids(t)
    t.delete("id = 2")
    after = _ids(t)
    assert after == {k: v for k, v in before.items() if k != 2}
    t.update({"v": "upper(v)"}, "id IN (3, 4)")
    updated_at = t.snapshot().version
    after = _ids(t)
    for k in (1, 5, 6):  # copied: id and commit version kept
        assert after[k] == before[k]
    for k in (3, 4):  # updated: id kept, commit version of the update
        assert after[k] == (before[k][0], updated_at, f"V{k}")
    t.optimize()
    assert _ids(t) == after
    assert len(t.snapshot().files.column("path")) == 1
    _check_invariants(t)
    assert _deltalake_rows(root) == sorted((k, v[2]) for k, v in after.items())


def test_enabling_on_an_existing_table_backfills_every_file(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    append_arrow(root, _batch([1, 2]))
    append_arrow(root, _batch([3, 4, 5]))
    paths = sorted(t.snapshot().files.column("path").to_pylist())
    t.set_properties(TRACKED)
    s = t.snapshot()
    assert {"rowTracking", "domainMetadata"} <= set(s.protocol.writer_features)
    assert s.metadata.configuration[ROW_ID_COLUMN]
    commit = [json.loads(line) for line in open(f"{root}/_delta_log/{s.version:020d}.json")]
    readds = [a["add"] for a in commit if "add" in a]
    assert sorted(a["path"] for a in readds) == paths and not any(a["dataChange"] for a in readds)
    assert all(a["defaultRowCommitVersion"] == s.version for a in readds)
    assert high_water_mark(s.domain_metadata) == 4
    _check_invariants(t)
    before = _ids(t)
    t.update({"v": "'x'"}, "id = 5")
    t.delete("id = 1")
    after = _ids(t)
    assert after[5][0] == before[5][0] and after[2] == before[2] and 1 not in after
    t.set_properties(TRACKED)  # already enabled: nothing committed
    assert t.snapshot().version == s.version + 2


def test_a_rebase_assigns_ids_above_the_winner(tmp_path):
    """Two appends from the same snapshot: the loser's ids move above the winner's high water mark."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=TRACKED)
    append_arrow(root, _batch([1, 2]))
    stale = load_snapshot(storage_for(root), root)
    spec = table_write_spec(stale)
    adds = [w.add for w in write_batches(spec, _batch([10, 11, 12]).to_batches())]
    append_arrow(root, _batch([3, 4, 5, 6]))  # the winner: ids 2..5
    txn = OptimisticTransaction(storage_for(root), root, stale, operation="WRITE")
    result = txn.commit(adds)
    assert result.conflicts_checked == [2] and result.version == 3
    s = t.snapshot()
    by_version = {r["default_row_commit_version"]: r["base_row_id"] for r in s.files.to_pylist()}
    assert by_version == {1: 0, 2: 2, 3: 6}
    assert high_water_mark(s.domain_metadata) == 8
    _check_invariants(t)


def test_a_concurrent_write_to_another_domain_still_conflicts(tmp_path):
    """Only the row tracking domain is merged; the domain rule holds for every other one."""
    from airflow_delta_provider_apps.engine.actions import DomainMetadata
    from airflow_delta_provider_apps.engine.errors import ConcurrentTransactionError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=TRACKED)
    stale = t.snapshot()
    mine = DomainMetadata(domain="app.x", configuration="{}")
    OptimisticTransaction(storage_for(root), root, stale).commit([mine])
    with pytest.raises(ConcurrentTransactionError):
        OptimisticTransaction(storage_for(root), root, stale).commit([mine])


def test_suspended_and_enabled_together_is_refused(tmp_path):
    with pytest.raises(DeltaError, match="suspended"):
        DeltaTable.create(
            None,
            str(tmp_path / "t"),
            schema="id BIGINT",
            properties={**TRACKED, "delta.rowTrackingSuspended": "true"},
        )


@pytest.mark.parametrize("key", [ROW_ID_COLUMN, COMMIT_VERSION_COLUMN, "delta.columnMapping.maxColumnId"])
def test_properties_only_the_engine_sets_are_refused(tmp_path, key):
    """delta-spark refuses these from users (the materialized column names are no user property, a
    commit keeps the table's own; maxColumnId is not user-configurable): at CREATE, and on a table
    with or without them, in any case of the key, before anything is written; the ids stay."""
    from functools import partial

    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

    def refused(call, root):
        before = {p.name: p.read_bytes() for p in (tmp_path / root).rglob("*") if p.is_file()}
        with pytest.raises(InvalidArgumentError) as e:
            call()
        assert e.value.problem == f"Cannot set table property {key}: the engine alone sets it"
        assert "delta-spark refuses it too" in e.value.cause and f"remove {key}" in e.value.fix
        assert {p.name: p.read_bytes() for p in (tmp_path / root).rglob("*") if p.is_file()} == before

    props = {**TRACKED, "delta.columnMapping.mode": "name"}
    refused(
        lambda: DeltaTable.create(None, str(tmp_path / "n"), schema="id BIGINT", properties={**props, key: "x"}), "n"
    )
    assert not (tmp_path / "n").exists()
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=props)
    append_arrow(root, _batch([1, 2, 3]))
    t.update({"v": "'u'"}, "id = 2")  # row 2's id now lives in the materialized column
    ids, config = _ids(t), t.snapshot().metadata.configuration
    for value in ["x", config.get(key, "7"), "99"]:  # even the value it has
        refused(partial(t.set_properties, {key.upper(): value}), "t")
        refused(partial(t.set_properties, {"delta.appendOnly": "false", key: value}), "t")
    assert _ids(t) == ids and t.snapshot().metadata.configuration == config
    plain = str(tmp_path / "p")  # a table without row tracking or column mapping alike
    p = DeltaTable.create(None, plain, schema="id BIGINT")
    refused(lambda: p.set_properties({key: "x"}), "p")


# ---------------------------------------------------------------------------------------------
# property: stable ids through DELETE, UPDATE and OPTIMIZE against a plain-Python model

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 40), min_size=1, max_size=6)),
        st.tuples(st.just("delete"), st.integers(0, 40)),
        st.tuples(st.just("update"), st.integers(0, 40)),
        st.tuples(st.just("optimize"), st.just(0)),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, dvs=st.booleans())
def test_property_stable_ids_match_a_model(tmp_path_factory, ops, dvs):
    root = str(tmp_path_factory.mktemp("rt") / "t")
    props = {**TRACKED, "delta.enableDeletionVectors": str(dvs).lower()}
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=props)
    model: dict[int, list] = {}  # key -> [id, row id, row commit version, v] (keys are unique rows)
    next_key = 0
    for op, arg in ops:
        if op == "append":
            rows = pa.table(
                {
                    "k": pa.array(range(next_key, next_key + len(arg)), pa.int64()),
                    "id": pa.array(arg, pa.int64()),
                }
            )
            append_arrow(root, pa.table({"id": rows.column("k"), "v": [str(x) for x in arg]}))
            snap = t.snapshot()
            fresh = {r["id"]: r["row_id"] for r in read_with_row_ids(snap).to_pylist() if r["id"] >= next_key}
            assert sorted(fresh.values()) == list(range(min(fresh.values()), min(fresh.values()) + len(arg)))
            for k, x in zip(rows.column("k").to_pylist(), arg):
                model[k] = [x, fresh[k], snap.version, str(x)]
            next_key += len(arg)
        elif op == "delete":
            t.delete(f"CAST(v AS INT) < {arg}")
            model = {k: r for k, r in model.items() if not int(r[3]) < arg}
        elif op == "update":
            result = t.update({"v": "CAST(CAST(v AS INT) + 100 AS STRING)"}, f"CAST(v AS INT) = {arg}")
            for r in model.values():
                if int(r[3]) == arg:
                    r[3], r[2] = str(arg + 100), result["version"]
        else:
            t.optimize()
    got = {r["id"]: (r["row_id"], r["row_commit_version"], r["v"]) for r in read_with_row_ids(t.snapshot()).to_pylist()}
    assert got == {k: (r[1], r[2], r[3]) for k, r in model.items()}
    _check_invariants(t)
    assert _deltalake_rows(root) == sorted((k, r[3]) for k, r in model.items())


def test_an_append_racing_the_enabling_commit_conflicts(tmp_path):
    """A file prepared without row ids must not land after row tracking was enabled under it."""
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    append_arrow(root, _batch([1]))
    stale = t.snapshot()
    adds = [w.add for w in write_batches(table_write_spec(stale), _batch([2]).to_batches())]
    t.set_properties(TRACKED)
    with pytest.raises(CommitConflictError, match="row tracking"):
        OptimisticTransaction(storage_for(root), root, stale).commit(adds)
    _check_invariants(t)


def test_removes_checkpoints_and_restore_carry_the_ids(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=TRACKED)
    append_arrow(root, _batch([1, 2, 3]))
    before = _ids(t)
    t.update({"v": "'x'"}, "id = 2")
    commit = [json.loads(line) for line in open(f"{root}/_delta_log/{t.snapshot().version:020d}.json")]
    (remove,) = [a["remove"] for a in commit if "remove" in a]
    assert (remove["baseRowId"], remove["defaultRowCommitVersion"]) == (0, 1)  # its file's values
    t.checkpoint()
    s = load_snapshot(storage_for(root), root)  # from the checkpoint: ids and the mark survive it
    assert s.log_segment.checkpoint_version == s.version
    assert high_water_mark(s.domain_metadata) == high_water_mark(t.snapshot().domain_metadata)
    assert read_with_row_ids(s).sort_by("id").to_pylist() == read_with_row_ids(t.snapshot()).sort_by("id").to_pylist()
    t.restore(1)  # the restored file comes back with its ids
    assert _ids(t) == before
    _check_invariants(t)


def test_supported_but_not_enabled_assigns_fresh_ids_only(tmp_path):
    """``delta.feature.rowTracking=supported`` alone: every add gets ids, rewrites keep none (the
    protocol: writers cannot preserve before row tracking is enabled)."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None, root, schema="id BIGINT, v STRING", properties={"delta.feature.rowTracking": "supported"}
    )
    append_arrow(root, _batch([1, 2]))
    t.update({"v": "'x'"}, "id = 2")
    s = t.snapshot()
    assert ROW_ID_COLUMN not in s.metadata.configuration
    assert sorted(s.files.column("base_row_id").to_pylist()) == [2]  # the rewrite's fresh ids
    assert high_water_mark(s.domain_metadata) == 3
    with pytest.raises(DeltaError, match="not enabled"):
        read_with_row_ids(s)


def test_column_mapping(tmp_path):
    root = str(tmp_path / "t")
    props = {**TRACKED, "delta.columnMapping.mode": "name"}
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=props)
    append_arrow(root, _batch([1, 2, 3]))
    before = _ids(t)
    t.rename_column("v", "w")
    t.delete("id = 1")
    rows = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in read_with_row_ids(t.snapshot()).to_pylist()}
    assert rows == {2: before[2][:2], 3: before[3][:2]}
    t.update({"w": "'u'"}, "id = 3")
    t.optimize()
    rows = {r["id"]: r["row_id"] for r in read_with_row_ids(t.snapshot()).to_pylist()}
    assert rows == {2: before[2][0], 3: before[3][0]}
    _check_invariants(t)


def test_another_writers_row_ids_are_read_and_kept(conformance_root, tmp_path):
    """delta-rs's ``table_with_liquid_clustering`` (written by Databricks: row tracking, deletion
    vectors, liquid clustering). Read in place: the stable ids are the file's ``baseRowId`` values,
    under the high water mark; writing it is refused for ``liquid`` (not for row tracking). Then a
    copy whose log drops the liquid feature and domain (what DROP FEATURE would leave) is written:
    DELETE, UPDATE and OPTIMIZE keep Databricks' ids, and deltalake reads the same rows."""
    import shutil

    from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError

    source = conformance_root / "delta-rs" / "table_with_liquid_clustering"
    t = DeltaTable.for_path(None, str(source))
    s = t.snapshot()
    rows = read_with_row_ids(s).to_pylist()
    assert sorted((r["id"], r["row_id"], r["row_commit_version"]) for r in rows) == [(i, i, 0) for i in range(10)]
    assert high_water_mark(s.domain_metadata) == 9
    with pytest.raises(UnsupportedFeatureError, match="liquid"):
        t.delete("id = 1")

    root = tmp_path / "t"
    shutil.copytree(source, root)
    (root / "_delta_log" / "00000000000000000000.crc").unlink()
    log = root / "_delta_log" / "00000000000000000000.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    kept = []
    for a in actions:
        if a.get("domainMetadata", {}).get("domain") == "delta.liquid":
            continue
        if "protocol" in a:
            a["protocol"]["writerFeatures"].remove("liquid")
        if "metaData" in a:
            a["metaData"]["configuration"].pop("delta.liquid.clusteringColumns")
        kept.append(a)
    log.write_text("".join(json.dumps(a) + "\n" for a in kept))
    t = DeltaTable.for_path(None, str(root))
    t.delete("id = 1")
    result = t.update({"id": "id + 100"}, "id = 5")
    t.optimize()
    got = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in read_with_row_ids(t.snapshot()).to_pylist()}
    expected = {i: (i, 0) for i in range(10) if i not in (1, 5)}
    expected[105] = (5, result["version"])
    assert got == expected
    assert high_water_mark(t.snapshot().domain_metadata) >= 9
    _check_invariants(t)
    deltalake = pytest.importorskip("deltalake")
    theirs = (
        deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(root))).execute("SELECT id FROM t").read_all()
    )
    assert sorted(theirs.column("id").to_pylist()) == sorted(expected)


def test_change_data_files_hold_no_row_tracking_columns(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None, root, schema="id BIGINT, v STRING", properties={**TRACKED, "delta.enableChangeDataFeed": "true"}
    )
    append_arrow(root, _batch([1, 2]))
    t.update({"v": "'x'"}, "id = 2")
    changes = pa.Table.from_batches(list(t.changes(2, 2)))
    assert changes.column_names[:2] == ["id", "v"] and not any(c.startswith("_row-") for c in changes.column_names)
    assert sorted(changes.column("_change_type").to_pylist()) == ["update_postimage", "update_preimage"]


def test_racing_writers_never_share_row_ids(tmp_path):
    """Four writers appending at once: every commit that lost the race took ids above its winners'."""
    import threading

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=TRACKED)
    errors = []

    def writer(w: int) -> None:
        try:
            for i in range(5):
                append_arrow(root, _batch([w * 100 + i * 10 + j for j in range(w + 1)]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    s = t.snapshot()
    assert s.version == 20 and high_water_mark(s.domain_metadata) == 5 * (1 + 2 + 3 + 4) - 1
    _check_invariants(t)  # fresh ids disjoint, stable ids unique
    assert sorted(r["row_id"] for r in read_with_row_ids(s).to_pylist()) == list(range(50))
