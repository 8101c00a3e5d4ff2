"""MERGE by one hash join in this process (engine/merge/by_hash.py): the path a large source takes
without Spark, forced here on small data by setting its threshold (``HASH_JOIN_ROWS``) to -1. Random
targets in several files, sources and clause lists (every clause kind, conditions, NULL keys with
``=`` and ``<=>``, the rest of ON, partition moves, deletion vectors, the change data feed) equal the
plain-Python reference the other MERGE tests use, and deltalake reads the same rows."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from merge_reference import PROGRAM, Duplicate, assert_changes, build_merge, file_rows, reference, row_key

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.merge import by_file, by_hash
from airflow_delta_provider_apps.engine.progress import reporting_to
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int32()), ("p", pa.int32())])
PROPS = {"": {}, "dv": {"delta.enableDeletionVectors": "true"}, "cdf": {"delta.enableChangeDataFeed": "true"}}


def _arrow(rows) -> pa.Table:
    return pa.Table.from_pylist([dict(r) for r in rows], schema=SCHEMA)


def _chunked(rows) -> pa.Table:
    """The source in one chunk per row (as a large source comes: its rows are looked up chunk by chunk)."""
    return pa.concat_tables([_arrow([r]) for r in rows]) if rows else _arrow([])


def _table(root: str, target, *, partitioned: bool, props: dict) -> DeltaTable:
    """The target in two files (per partition) of row groups of two rows: the keys are read over
    several files and batches, and positions count across batches."""
    create_table(root, schema="id BIGINT, v INT, p INT", partition_by=["p"] if partitioned else None, properties=props)
    small_groups = deltalake.WriterProperties(max_row_group_size=2)
    half = len(target) // 2
    for part in (target[:half], target[half:]):
        if part:
            deltalake.write_deltalake(root, _arrow(part), mode="append", writer_properties=small_groups)
    return DeltaTable(None, root)


def _theirs(root: str) -> list:
    dt = deltalake.DeltaTable(root)  # DataFusion's scan applies deletion vectors
    return pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()).to_pylist()


@pytest.fixture
def by_hash_always(monkeypatch):
    monkeypatch.setattr(by_hash, "HASH_JOIN_ROWS", -1)  # every source, the empty one too
    monkeypatch.setattr(by_file, "INSERT_PART_ROWS", 2)  # the inserted rows made and written in parts


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(*PROGRAM, st.sampled_from(["", "dv", "cdf"]), st.integers(0, 3))
def test_merge_by_hash_equals_the_reference(
    tmp_path_factory, by_hash_always, target, source, clauses, partitioned, on, mode, deleted
):
    root = str(tmp_path_factory.mktemp("m") / "t")
    t = _table(root, target, partitioned=partitioned, props=PROPS[mode])
    if deleted and target:  # rows gone before the merge (with deletion vectors: positions skip them)
        t.delete(f"v = {deleted - 2}")
        target = [r for r in target if r["v"] != deleted - 2]
        t = DeltaTable(None, root)
    version, before = t.version(), file_rows(t.snapshot())
    try:
        want, inserted, changed, feed = reference(target, source, clauses, on[1])
    except Duplicate:
        with pytest.raises(DeltaError, match="multiple source rows matched"):
            build_merge(t, _chunked(source), clauses, on[0]).execute()
        assert DeltaTable(None, root).version() == version
        return
    res = build_merge(t, _chunked(source), clauses, on[0]).execute()
    assert res["strategy"] == "hash_join"
    ours = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted(ours, key=row_key) == sorted(want, key=row_key), (clauses, target, source, on[0])
    assert sorted(_theirs(root), key=row_key) == sorted(want, key=row_key)
    m = res["metrics"]
    assert (m["numSourceRows"], m["numTargetRowsInserted"]) == (len(source), inserted)
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"]) == (changed["u"], changed["d"])
    assert m["numOutputRows"] == m["numTargetRowsCopied"] + m["numTargetRowsUpdated"] + inserted
    removed = [p for p in before if p not in file_rows(DeltaTable(None, root).snapshot())]
    assert m["numTargetFilesRemoved"] == len(removed)
    if mode == "cdf" and res["committed"]:
        assert_changes(root, res["version"], feed, True)


def test_the_plane_joins_a_large_source_by_hash_and_says_so(tmp_path, monkeypatch, caplog):
    """The rule: more source rows than HASH_JOIN_ROWS (and ON with keys) -> hash_join, recorded in
    the result's strategy and logged; at or below it, file by file."""
    root = str(tmp_path / "t")
    t = _table(root, [{"id": i, "v": i, "p": i % 3} for i in range(10)], partitioned=False, props={})
    monkeypatch.setattr(by_hash, "HASH_JOIN_ROWS", 4)
    small = _arrow([{"id": i, "v": -i, "p": 0} for i in range(4)])
    events: list = []
    with caplog.at_level(logging.INFO, logger=by_hash.__name__), reporting_to(events.append):
        assert t.upsert(small, ["id"])["strategy"] == "file_by_file"
        res = DeltaTable(None, root).upsert(_arrow([{"id": i, "v": 100 + i, "p": 1} for i in range(5, 15)]), ["id"])
    assert res["strategy"] == "hash_join"
    # the keys' phase: 5 target rows matched, all in the second of the two files
    matched = [{k: e[k] for k in ("pairs", "files")} for e in events if e["phase"] == "matched"]
    assert matched == [{"pairs": 5, "files": 1}]
    assert {"operation": "MERGE", "phase": "hash_join"} in events
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (5, 5)
    said = [r.getMessage() for r in caplog.records if r.name == by_hash.__name__]
    assert said == [
        "MERGE in this process: file_by_file (4 source rows, hash join above 4)",
        "MERGE in this process: hash_join (10 source rows, hash join above 4)",
    ]
    got = sorted(_theirs(root), key=row_key)
    want = [{"id": i, "v": -i if i < 4 else i, "p": 0 if i < 4 else i % 3} for i in range(5)]
    want += [{"id": i, "v": 100 + i, "p": 1} for i in range(5, 15)]
    assert got == sorted(want, key=row_key)


def test_a_duplicate_match_is_refused_before_any_file_is_written(tmp_path, by_hash_always):
    """An unconditional WHEN MATCHED update whose target row matches two source rows: Delta's error
    from the keys alone (phase 1), so no data file is written and nothing committed."""
    root = tmp_path / "t"
    t = _table(str(root), [{"id": i, "v": i, "p": 0} for i in range(6)], partitioned=False, props={})
    files = set(root.glob("*.parquet"))
    source = _arrow([{"id": 1, "v": 10, "p": 0}, {"id": 1, "v": 11, "p": 0}, {"id": 9, "v": 9, "p": 0}])
    with pytest.raises(DeltaError, match="multiple source rows matched"):
        t.merge(source, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert set(root.glob("*.parquet")) == files
    assert DeltaTable(None, root).version() == t.version()
