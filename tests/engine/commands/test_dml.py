"""DELETE and UPDATE against an independent computation, without a JVM (the in-process rewrite path).

Random tables (partitioned or not, several commits, NULLs, NaN, every kind of column in
``sql_strategies``) and random predicates: the rows left equal the plain-Python SQL reference,
``deltalake`` (delta-rs) reads exactly the same rows, and the metrics add up.
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_strategies import ARROW, predicates, rows, table_of

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import AppendOnlyViolationError, InvalidPredicateError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

DDL = "p INT, i BIGINT, d DOUBLE, s STRING, day DATE, b BOOLEAN"
settings_ = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _canon(r: dict) -> tuple:
    return tuple(
        ("nan" if isinstance(v, float) and math.isnan(v) else v) if v is not None else ("null",) for v in r.values()
    )


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((_canon(r) for r in table.select(ARROW.names).to_pylist()), key=repr)


def _make(root, commits, partitioned, properties=None) -> DeltaTable:
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"] if partitioned else None, properties=properties)
    for rs in commits:
        append_arrow(root, table_of(rs))
    return t


def _ours(t: DeltaTable) -> list[tuple]:
    return _rows(read_snapshot_table(t.snapshot()))


def _theirs(root) -> list[tuple]:
    return _rows(deltalake.DeltaTable(root).to_pyarrow_table())


commits = st.lists(st.lists(rows, min_size=0, max_size=12), min_size=1, max_size=3)


@settings_
@given(commits, st.booleans(), predicates())
def test_delete_equals_the_reference(tmp_path_factory, data, partitioned, pred):
    root = str(tmp_path_factory.mktemp("t"))
    text, reference = pred
    t = _make(root, data, partitioned)
    before = t.version()
    all_rows = [r for rs in data for r in rs]
    result = t.delete(text)
    kept = [r for r in all_rows if reference(r) is not True]
    deleted = len(all_rows) - len(kept)
    assert _ours(t) == _rows(table_of(kept))
    assert _theirs(root) == _ours(t)
    m = result["metrics"]
    if deleted == 0:
        assert t.version() == before and result["committed"] is False  # nothing matched: no commit
    else:
        assert t.version() == before + 1 and result["version"] == before + 1
        assert m["numDeletedRows"] == deleted
        removed_rows = _removed_rows(root, result["version"])
        assert removed_rows == m["numDeletedRows"] + m["numCopiedRows"]
        assert m["numFilesAfterSkipping"] <= m["numFilesBeforeSkipping"]
        assert m["numRemovedFiles"] <= m["numFilesAfterSkipping"]


def _removed_rows(root, version) -> int:
    """Rows of the files a commit removed, from their stats in the remove actions."""
    total = 0
    with open(f"{root}/_delta_log/{version:020d}.json") as f:
        for line in f:
            obj = json.loads(line)
            if "remove" in obj:
                total += json.loads(obj["remove"]["stats"])["numRecords"]
    return total


UPDATES = st.sampled_from(
    [
        ({"i": "i + 1"}, lambda r: {"i": None if r["i"] is None else r["i"] + 1}),
        ({"s": "concat(s, '!')"}, lambda r: {"s": None if r["s"] is None else r["s"] + "!"}),
        ({"p": "2", "b": "NOT b"}, lambda r: {"p": 2, "b": None if r["b"] is None else not r["b"]}),
        ({"d": "coalesce(d, 0) * 2"}, lambda r: {"d": (0.0 if r["d"] is None else r["d"]) * 2}),
        (
            {"s": "NULL", "i": "CASE WHEN i > 0 THEN 0 ELSE i END"},
            lambda r: {"s": None, "i": 0 if (r["i"] or 0) > 0 else r["i"]},
        ),
    ]
)


@settings_
@given(commits, st.booleans(), predicates(), UPDATES)
def test_update_equals_the_reference(tmp_path_factory, data, partitioned, pred, change):
    root = str(tmp_path_factory.mktemp("t"))
    text, reference = pred
    sets, apply = change
    t = _make(root, data, partitioned)
    all_rows = [r for rs in data for r in rs]
    result = t.update(sets, text)
    expected = [dict(r, **apply(r)) if reference(r) is True else r for r in all_rows]
    updated = sum(1 for r in all_rows if reference(r) is True)
    assert _ours(t) == _rows(table_of(expected))
    assert _theirs(root) == _ours(t)
    m = result["metrics"]
    assert m["numUpdatedRows"] == updated
    if updated:
        assert _removed_rows(root, result["version"]) == m["numUpdatedRows"] + m["numCopiedRows"]
    else:
        assert result["committed"] is False


def _many_files(tmp_path, n=10):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    for k in range(n):  # one file per commit, ids k*100 .. k*100+9: disjoint min/max ranges
        append_arrow(root, table_of([{"p": k % 2, "i": k * 100 + j} for j in range(10)]))
    return root, t


def test_skipping_is_real_one_file_touched(tmp_path):
    root, t = _many_files(tmp_path)
    result = t.delete("i = 305")
    m = result["metrics"]
    assert m["numFilesBeforeSkipping"] == 10
    assert m["numFilesAfterSkipping"] == 1  # partition p=1 has 5 files, stats leave one
    assert m["numRemovedFiles"] == 1 and m["numAddedFiles"] == 1
    assert m["numDeletedRows"] == 1 and m["numCopiedRows"] == 9
    assert len(_ours(t)) == 99


def test_partition_only_delete_reads_no_data(tmp_path):
    root, t = _many_files(tmp_path)
    # make every data file unreadable: a metadata-only delete must not open any
    import glob

    for f in glob.glob(f"{root}/p=0/*.parquet"):
        open(f, "wb").close()
    result = t.delete("p = 0")
    m = result["metrics"]
    assert m["numRemovedFiles"] == 5 and m["numAddedFiles"] == 0
    assert m["numDeletedRows"] == 50  # from the files' stats
    assert m["scanTimeMs"] == 0 and m["numCopiedRows"] == 0
    log = open(f"{root}/_delta_log/{result['version']:020d}.json").read()
    commit_info = json.loads(log.splitlines()[0])["commitInfo"]
    assert commit_info["operation"] == "DELETE"
    assert json.loads(commit_info["operationParameters"]["predicate"]) == ["(`p` = 0)"]
    assert commit_info["operationMetrics"]["numDeletedRows"] == "50"


def test_delete_everything_and_no_match(tmp_path):
    root, t = _many_files(tmp_path, 3)
    v = t.version()
    r = t.delete("i > 100000")
    assert r["committed"] is False and t.version() == v and r["version"] == v
    r = t.delete()
    assert r["metrics"]["numRemovedFiles"] == 3 and _ours(t) == []


def test_update_moves_rows_to_their_new_partition(tmp_path):
    root, t = _many_files(tmp_path, 2)
    r = t.update({"p": "p + 10"}, "i < 5")
    assert r["metrics"]["numUpdatedRows"] == 5
    parts = sorted(
        {
            a["partition_values"]["p"]
            for a in t.snapshot().files.select(["partition_values"]).to_pylist()
            for a in [{"partition_values": dict(a["partition_values"])}]
        }
    )
    assert parts == ["0", "1", "10"]
    assert _theirs(root) == _ours(t)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda t: t.delete("nope = 1"), InvalidPredicateError),
        (lambda t: t.update({"i": "'x'"}, "p = 1"), InvalidPredicateError),
        (lambda t: t.update({"nope": "1"}), InvalidPredicateError),
        (lambda t: t.update({"i": "s"}), InvalidPredicateError),
        (lambda t: t.delete("i IN (SELECT 1)"), InvalidPredicateError),
        # only None means every row: empty and blank text (a template rendered to '') is refused
        (lambda t: t.delete(""), InvalidPredicateError),
        (lambda t: t.delete("   "), InvalidPredicateError),
        (lambda t: t.delete("\n\t"), InvalidPredicateError),
        (lambda t: t.update({"i": "1"}, ""), InvalidPredicateError),
        (lambda t: t.update({"i": "1"}, " "), InvalidPredicateError),
    ],
)
def test_bad_input_changes_nothing(tmp_path, call, error):
    root, t = _many_files(tmp_path, 2)
    v = t.version()
    files = sorted(p.name for p in (tmp_path / "t").rglob("*.parquet"))
    with pytest.raises(error):
        call(t)
    assert t.version() == v
    assert sorted(p.name for p in (tmp_path / "t").rglob("*.parquet")) == files


def test_append_only_tables_refuse_delete_and_update(tmp_path):
    root = str(tmp_path / "t")
    t = _make(root, [[{"p": 1, "i": 1}]], True, properties={"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyViolationError, match="appendOnly"):
        t.delete("i = 1")
    with pytest.raises(AppendOnlyViolationError):
        t.update({"i": "2"})
    assert t.version() == 1


def test_update_keeps_not_null_enforced(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT NOT NULL, v STRING")
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    with pytest.raises(InvalidPredicateError, match="NOT NULL"):
        t.update({"id": "NULL"})
    from airflow_delta_provider_apps.engine.errors import SchemaMismatchError

    with pytest.raises(SchemaMismatchError):
        t.update({"id": "CASE WHEN id = 1 THEN NULL ELSE id END"})
    assert t.version() == 1


@pytest.mark.parametrize(
    "ddl, predicate, same, other",
    [
        ("x DOUBLE, id BIGINT", "x = 1.0", 1.0, 2.5),
        ("x TIMESTAMP, id BIGINT", "x = TIMESTAMP '2026-01-01 00:00:00'", "2026-01-01", "2026-01-02"),
    ],
)
def test_delete_conflicts_with_an_append_into_the_partition_it_read(tmp_path, ddl, predicate, same, other):
    """Typed read predicates: a concurrent append into the partition a DELETE read conflicts, even
    when the partition value's text differs from the predicate's literal (1 vs 1.0, ISO forms)."""
    import datetime as dt

    from airflow_delta_provider_apps.engine.commands.dml import delete
    from airflow_delta_provider_apps.engine.errors import ConcurrentAppendError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=ddl, partition_by=["x"])
    schema = t.snapshot().schema.to_arrow_schema()

    def rows(x, i):
        if isinstance(x, str):
            x = dt.datetime.fromisoformat(x).replace(tzinfo=dt.UTC)
        return pa.Table.from_pylist([{"x": x, "id": i}], schema=schema)

    append_arrow(root, rows(same, 1))
    append_arrow(root, rows(other, 2))
    snap = t.snapshot()
    append_arrow(root, rows(other, 3))  # another partition: the delete still lands
    assert delete(snap, predicate).to_dict()["committed"] is True
    append_arrow(root, rows(same, 4))
    snap = t.snapshot()
    append_arrow(root, rows(same, 5))  # into the partition the delete reads
    with pytest.raises(ConcurrentAppendError):
        delete(snap, predicate)


@pytest.mark.parametrize("level, conflicts", [("Serializable", True), ("WriteSerializable", False)])
def test_delete_vs_blind_append_into_its_partition_per_isolation_level(tmp_path, level, conflicts):
    from airflow_delta_provider_apps.engine.commands.dml import delete
    from airflow_delta_provider_apps.engine.errors import ConcurrentAppendError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"], properties={"delta.isolationLevel": level})
    append_arrow(root, table_of([{"p": 1, "i": 1}, {"p": 1, "i": 2}]))
    snap = t.snapshot()
    append_arrow(root, table_of([{"p": 1, "i": 1}]))  # a blind append of rows the delete would match
    if conflicts:
        with pytest.raises(ConcurrentAppendError):
            delete(snap, "p = 1 AND i = 1")
    else:
        delete(snap, "p = 1 AND i = 1")
        assert sorted(r[1] for r in _ours(t)) == [1, 2]  # the appended row was not seen by the delete


def test_update_vs_delete_of_the_same_file(tmp_path):
    from airflow_delta_provider_apps.engine.commands.dml import delete, update
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    append_arrow(root, table_of([{"p": 1, "i": 1}, {"p": 1, "i": 2}]))
    snap = t.snapshot()
    delete(t.snapshot(), "i = 1")  # rewrites (removes) the file the update reads
    with pytest.raises(CommitConflictError) as e:
        update(snap, {"i": "i * 10"}, "i = 2")
    # the delete removed the file the update read, and added its rewrite (which holds i = 2)
    assert type(e.value).__name__ in ("ConcurrentAppendError", "ConcurrentDeleteReadError")
    assert sorted(r[1] for r in _ours(t)) == [2]


def test_deletes_of_disjoint_partitions_both_land(tmp_path):
    from airflow_delta_provider_apps.engine.commands.dml import delete

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    append_arrow(root, table_of([{"p": 1, "i": 1}, {"p": 1, "i": 2}]))
    append_arrow(root, table_of([{"p": 2, "i": 3}, {"p": 2, "i": 4}]))
    snap = t.snapshot()
    delete(snap, "p = 1 AND i = 1")
    delete(snap, "p = 2 AND i = 4")  # read the same snapshot, touched another partition's file
    assert sorted(r[1] for r in _ours(t)) == [2, 3]


def test_an_append_whose_stats_cannot_match_the_delete_does_not_conflict(tmp_path):
    """Serializable, same partition, but the appended file's min/max rule it out (delta-rs's
    predicate_matches on stats): the delete lands."""
    from airflow_delta_provider_apps.engine.commands.dml import delete

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    append_arrow(root, table_of([{"p": 1, "i": 1}, {"p": 1, "i": 2}]))
    snap = t.snapshot()
    append_arrow(root, table_of([{"p": 1, "i": 300}]))
    delete(snap, "p = 1 AND i = 1")
    assert sorted(r[1] for r in _ours(t)) == [2, 300]


def test_partition_keys_of_files_match_the_keys_of_written_adds():
    # dynamic partition overwrite matches live files to written partitions through these keys
    from airflow_delta_provider_apps.engine.partitions import partition_key, partition_keys

    files = pa.table(
        {
            "partition_values": pa.array(
                [[("p", "1"), ("q", None)], [("p", "1"), ("q", "x")], [("p", None)]], pa.map_(pa.string(), pa.string())
            )
        }
    )
    keys = partition_keys(files, ["p", "q"]).to_pylist()
    assert keys[0] == partition_key({"p": "1", "q": None}, ["p", "q"])
    assert keys[1] == partition_key({"p": "1", "q": "x"}, ["p", "q"])
    assert keys[2] == partition_key({"p": None, "q": None}, ["p", "q"])
    assert len(set(keys)) == 3


def test_an_append_takes_the_snapshot_it_is_based_on(tmp_path):
    # the command opens its transaction on the given snapshot: an older one is its read version, and
    # a blind append still lands after the commits that came since
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    append_arrow(root, table_of([{"p": 1, "i": 1}]))
    old = t.snapshot()
    append_arrow(root, table_of([{"p": 1, "i": 10}]))
    res = append_arrow(old, table_of([{"p": 2, "i": 20}]))
    assert res.version == old.version + 2
    info = json.loads((tmp_path / "t" / "_delta_log" / f"{res.version:020d}.json").read_text().splitlines()[0])
    assert info["commitInfo"]["readVersion"] == old.version
    assert sorted(r[1] for r in _ours(t)) == [1, 10, 20]
