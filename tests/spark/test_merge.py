"""MERGE against an independent reference: random targets, sources and clause lists (every clause kind,
conditions, orders) merged by our engine in Spark equal a plain-Python reading of Delta's semantics;
deltalake (delta-rs) reads the same rows; the metric invariants hold; duplicate matches fail and
change nothing; NULL keys never match."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from merge_reference import PROGRAM, Duplicate, assert_changes, build_merge, file_rows, reference, row, row_key
from txn_helpers import snapshot

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.dv import dv_file_path
from airflow_delta_provider_apps.engine.errors import DeltaError, InvalidArgumentError
from airflow_delta_provider_apps.engine.progress import reporting_to
from airflow_delta_provider_apps.engine.spark.plane import SparkPlane

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

DDL = "id BIGINT, v INT, p INT"


@pytest.fixture(params=["threads", "tasks", "join", "hash"])
def execution(request, monkeypatch):
    """Every execution of MERGE: file by file in the driver's threads (small candidates), file by file
    in Spark tasks (the ``file_tasks`` fixture), Spark's join (forced by a zero size limit for
    the shipped source), and one hash join in the driver (a large source on a local master: forced
    by a threshold below every source)."""
    from airflow_delta_provider_apps.engine.merge import by_hash
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    if request.param == "tasks":
        request.getfixturevalue("file_tasks")
    if request.param == "join":
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    if request.param == "hash":
        monkeypatch.setattr(by_hash, "HASH_JOIN_ROWS", -1)
    return request.param


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(*PROGRAM, st.sampled_from(["", "dv", "cdf", "dv+cdf"]))
def test_merge_equals_the_reference(spark, tmp_path_factory, execution, target, source, clauses, partitioned, on, mode):
    """``dv``: the table writes deletion vectors: file by file and by join alike, the changed target
    rows are marked and only the updated and inserted rows written.
    ``cdf``: the table records the change data feed: the merge's changes equal the reference's
    (and deltalake's ``load_cdf``)."""
    root = str(tmp_path_factory.mktemp("m") / "t")
    dv, cdf = "dv" in mode, "cdf" in mode
    props = {"delta.enableDeletionVectors": "true"} if dv else {}
    if cdf:
        props["delta.enableChangeDataFeed"] = "true"
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"] if partitioned else None, properties=props)
    if target:
        t.append(spark.createDataFrame([(r["id"], r["v"], r["p"]) for r in target], DDL))
    t = DeltaTable.for_path(spark, root)
    version = t.version()
    before = file_rows(t.snapshot())
    src = spark.createDataFrame([(r["id"], r["v"], r["p"]) for r in source], DDL)
    try:
        want, inserted, changed, feed = reference(target, source, clauses, on[1])
    except Duplicate:
        with pytest.raises(DeltaError, match="multiple source rows matched"):
            build_merge(t, src, clauses, on[0]).execute()
        assert DeltaTable.for_path(spark, root).version() == version
        return
    res = build_merge(t, src, clauses, on[0]).execute()
    got = [r.asDict() for r in DeltaTable.for_path(spark, root).to_df().collect()]
    assert sorted(got, key=row_key) == sorted(want, key=row_key), (clauses, target, source, on[0])
    dt = deltalake.DeltaTable(root)
    if dv:  # deltalake's DataFusion scan applies deletion vectors
        theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()).to_pylist()
    else:
        theirs = dt.to_pyarrow_table().to_pylist()
    assert sorted(theirs, key=row_key) == sorted(want, key=row_key)
    m = res["metrics"]
    assert m["numSourceRows"] == len(source)
    assert m["numTargetRowsInserted"] == inserted
    assert m["numTargetRowsUpdated"] == changed["u"] and m["numTargetRowsDeleted"] == changed["d"]
    assert m["numOutputRows"] == m["numTargetRowsCopied"] + m["numTargetRowsUpdated"] + inserted
    # the removed files held exactly the rows copied, updated and deleted (from the log's own stats)
    after = file_rows(DeltaTable.for_path(spark, root).snapshot())
    removed = [p for p in before if p not in after]
    assert m["numTargetFilesRemoved"] == len(removed)
    if dv:  # marked: no row copied; the files that left held only changed rows
        assert m["numTargetRowsCopied"] == 0
        assert sum(before[p] for p in removed) <= changed["u"] + changed["d"]
    else:
        assert sum(before[p] for p in removed) == m["numTargetRowsCopied"] + changed["u"] + changed["d"]
    if cdf and res["committed"]:
        assert_changes(root, res["version"], feed, not dv)


def test_a_join_merge_into_an_empty_table_with_clauses_of_every_kind_only_inserts(spark, tmp_path, monkeypatch):
    """No candidate file: the join's second phase is the source alone, and only the insert clauses'
    values are computed from it (a NOT MATCHED BY SOURCE update reads target columns it does not have;
    found by the property test)."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    res = (
        t.merge(spark.createDataFrame([(1, 2, 0)], DDL), "target.id = source.id")
        .when_not_matched_insert({"id": "source.id", "v": "source.v"})
        .when_not_matched_by_source_update({"v": "target.v * 2"})
        .execute()
    )
    assert res["strategy"] == "join" and res["metrics"]["numTargetRowsInserted"] == 1
    assert [tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect()] == [(1, 2, None)]


def test_a_join_merge_that_rewrites_a_file_it_did_not_change_records_only_its_inserts(spark, tmp_path, monkeypatch):
    """By join with NOT MATCHED clauses a file holding a matched row is rewritten even when no clause
    changes that row; on a table with the change data feed the commit then carries change files (an
    empty one when nothing changed), so its copies never read as deleted and inserted rows (both found
    by the property test)."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, properties={"delta.enableChangeDataFeed": "true"})
    t.append(spark.createDataFrame([(0, 1, 0), (1, 1, 0)], DDL).coalesce(1))
    res = (
        DeltaTable.for_path(spark, root)
        .merge(spark.createDataFrame([(0, 9, 0), (5, 5, 0)], DDL), "target.id = source.id")
        .when_matched_update({"v": "source.v"}, "source.v > 100")
        .when_not_matched_insert_all()
        .execute()
    )
    assert res["strategy"] == "join" and res["metrics"]["numTargetRowsInserted"] == 1
    assert_changes(root, res["version"], [({"id": 5, "v": 5, "p": 0}, "insert")], True)
    # every source row matched and no clause fired: the file is rewritten as it was, and an empty
    # change file says that nothing changed (without one the rewrite read as 2 deletes and 2 inserts)
    res = (
        DeltaTable.for_path(spark, root)
        .merge(spark.createDataFrame([(0, 9, 0), (1, 9, 0)], DDL), "target.id <=> source.id")
        .when_matched_update({"v": "source.v"}, "source.v > 100")
        .when_not_matched_insert_all()
        .execute()
    )
    m = res["metrics"]
    assert res["committed"] and m["numTargetRowsCopied"] >= 2 and m["numTargetChangeFilesAdded"] == 1
    assert_changes(root, res["version"], [], True)
    assert sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect()) == [
        (0, 1, 0),
        (1, 1, 0),
        (5, 5, 0),
    ]


def test_upsert_touches_only_the_file_holding_its_key(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    for k in range(4):  # four files with disjoint id ranges
        t.append(spark.createDataFrame([(k * 100 + i, i, 0) for i in range(50)], DDL).coalesce(1))
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame([(205, 99, 0)], DDL)
    m = t.merge(src, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    assert m["numTargetFilesAfterSkipping"] == 1 and m["numTargetFilesRemoved"] == 1
    assert m["numTargetRowsUpdated"] == 1 and m["numTargetRowsCopied"] == 49
    rows = {r["id"]: r["v"] for r in DeltaTable.for_path(spark, root).to_df().collect()}
    assert len(rows) == 200 and rows[205] == 99


def test_many_source_keys_in_two_clusters_read_only_the_files_of_those_clusters(spark, tmp_path):
    """Over 1000 distinct keys become value ranges split at the widest gaps, not one min/max range:
    updates inside the first file's ids and inserts past the last id read one file of four."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    for k in range(4):
        t.append(spark.createDataFrame([(k * 10_000 + i, i, 0) for i in range(2_000)], DDL).coalesce(1))
    rows = [(i, -1, 0) for i in range(1_500)] + [(100_000 + i, 7, 0) for i in range(1_500)]
    src = spark.createDataFrame(rows, DDL)
    m = DeltaTable.for_path(spark, root).upsert(src, ["id"])
    assert m["numTargetFilesBeforeSkipping"] == 4 and m["numTargetFilesAfterSkipping"] == 1
    assert m["numTargetRowsUpdated"] == 1_500 and m["numTargetRowsInserted"] == 1_500
    got = {r["id"]: r["v"] for r in DeltaTable.for_path(spark, root).to_df().collect()}
    assert len(got) == 8_000 + 1_500 and got[1_499] == -1 and got[1_500] == 1_500 and got[101_499] == 7


def test_insert_only_merge_removes_no_file_and_null_keys_never_match(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    t.append(spark.createDataFrame([(1, 1, 0), (None, 2, 0)], DDL))
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame([(1, 5, 0), (None, 6, 0), (3, 7, 0)], DDL)
    m = t.merge(src, "target.id = source.id").when_not_matched_insert_all().execute()
    assert m["numTargetFilesRemoved"] == 0 and m["numTargetRowsInserted"] == 2
    got = sorted((r["id"] is None, r["id"], r["v"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert got == [(False, 1, 1), (False, 3, 7), (True, None, 2), (True, None, 6)]


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda b: b.when_matched_delete().when_matched_update_all(), "Only the last WHEN MATCHED"),
        (lambda b: b, "at least one WHEN clause"),
        (lambda b: b.when_matched_update({"nope": "1"}), "unknown column 'nope'"),
        (lambda b: b.when_not_matched_insert({"id": "target.id"}), "Unknown column 'target.id'"),
        (lambda b: b.when_matched_update({"v": "'x'"}), "Cannot use 'x' as an integer"),
    ],
)
def test_bad_merges_are_clear_errors_before_anything_runs(spark, tmp_path, build, match):
    root = str(tmp_path / "t")
    DeltaTable.create(spark, root, schema=DDL)
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame([(1, 1, 0)], DDL)
    with pytest.raises(InvalidArgumentError, match=match):
        build(t.merge(src, "target.id = source.id")).execute()
    assert t.version() == 0


def test_cli_merge_with_clauses_and_a_source_query(spark, tmp_path, capsys):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps import cli

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    t.append(spark.createDataFrame([(1, 1, 0), (2, 2, 0), (3, 3, 0)], DDL))
    src = tmp_path / "changes.parquet"
    ops = {"id": pa.array([1, 2, 4, 5], pa.int64()), "v": pa.array([10, 20, 40, 50], pa.int32())}
    pq.write_table(pa.table({**ops, "p": pa.array([0] * 4, pa.int32()), "op": ["U", "D", "I", "noop"]}), src)
    clauses = [
        {"when": "matched", "then": "delete", "condition": "source.op = 'D'"},
        {"when": "matched", "then": "update", "set": {"v": "source.v"}},
        {"when": "not_matched", "then": "insert_all"},
    ]
    argv = ["merge", "--table-uri", root, "--source", str(src), "--predicate", "target.id = source.id"]
    argv += ["--clauses", json.dumps(clauses), "--source-query", "SELECT * FROM source WHERE op != 'noop'"]
    code = cli.main(argv, spark=spark)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0, out
    res = json.loads(out[-1])
    got = sorted((r["id"], r["v"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert got == [(1, 10), (3, 3), (4, 40)]
    assert (res["operation"], res["version"]) == ("MERGE", 2)
    m = res["metrics"]
    assert (m["numSourceRows"], m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetRowsInserted"]) == (
        3,
        1,
        1,
        1,
    )


def test_upsert_refuses_duplicate_keys_and_dedupe_by_keeps_the_latest(spark, tmp_path, execution):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    t.append(spark.createDataFrame([(1, 1, 0), (2, 2, 0)], DDL))
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame(
        [(1, 10, 0, 1), (1, 11, 0, 2), (3, 30, 0, 1), (None, 5, 0, 1), (None, 6, 0, 2)],
        "id BIGINT, v INT, p INT, seq INT",
    )
    with pytest.raises(InvalidArgumentError, match="duplicate keys"):
        t.upsert(src, ["id"])
    assert t.version() == 1
    res = t.upsert(src, ["id"], dedupe_by="seq")
    got = sorted((r["id"] is None, r["id"], r["v"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    # id 1 takes seq 2's value; NULL keys never match and are not deduplicated: both inserted
    assert got == [(False, 1, 11), (False, 2, 2), (False, 3, 30), (True, None, 5), (True, None, 6)]
    assert (res["numTargetRowsUpdated"], res["numTargetRowsInserted"]) == (1, 3)


def test_concurrent_appends_conflict_only_inside_the_merged_key_range(spark, tmp_path):
    from airflow_delta_provider_apps.engine.commands.merge import MergeClause, merge
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"])
    t.append(spark.createDataFrame([(i, i, i % 2) for i in range(10)], DDL))
    src = spark.createDataFrame([(3, 30, 1), (4, 40, 0)], DDL)
    clauses = [MergeClause("matched", "update", None, None), MergeClause("not_matched", "insert", None, None)]

    def run(stale):
        return merge(stale, src, "target.id = source.id", clauses, plane=SparkPlane(spark)).to_dict()

    stale = DeltaTable.for_path(spark, root).snapshot()
    t.append(spark.createDataFrame([(500, 5, 0)], DDL))  # a key the source does not hold: no conflict
    res = run(stale)
    assert res["version"] == 3 and res["numTargetRowsUpdated"] == 2

    stale = DeltaTable.for_path(spark, root).snapshot()
    t.append(spark.createDataFrame([(4, 99, 0)], DDL))  # into the merged key range: a conflict
    with pytest.raises(CommitConflictError):
        run(stale)
    assert DeltaTable.for_path(spark, root).version() == 4


def test_concurrent_deletes_conflict_only_on_files_the_merge_read(spark, tmp_path):
    """A DELETE that lands while a merge runs fails the merge (retryably) when it rewrote a file the
    merge read (as in Delta, the check for files added in the read range comes first:
    ConcurrentAppend; else ConcurrentDeleteRead), and does not when it removed a file the merge
    pruned away; no row is lost or doubled either way."""
    from airflow_delta_provider_apps.engine.commands.merge import MergeClause, merge
    from airflow_delta_provider_apps.engine.errors import ConcurrentAppendError, ConcurrentDeleteReadError

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"])
    for p in (0, 1):  # one file per partition
        t.append(spark.createDataFrame([(i, i, p) for i in range(10) if i % 2 == p], DDL).coalesce(1))
    clauses = [MergeClause("matched", "update", None, None), MergeClause("not_matched", "insert", None, None)]
    src = spark.createDataFrame([(3, 30, 1), (11, 110, 1)], DDL)  # keys only in partition p=1

    def run(stale):
        return merge(
            stale, src, "target.id = source.id AND target.p = source.p", clauses, plane=SparkPlane(spark)
        ).to_dict()

    stale = DeltaTable.for_path(spark, root).snapshot()
    DeltaTable.for_path(spark, root).delete("p = 0")  # a file the merge never reads: no conflict
    res = run(stale)
    assert res["numTargetFilesAfterSkipping"] == 1 and res["numTargetRowsUpdated"] == 1
    rows = {r["id"]: r["v"] for r in DeltaTable.for_path(spark, root).to_df().collect()}
    assert rows == {1: 1, 3: 30, 5: 5, 7: 7, 9: 9, 11: 110}

    stale = DeltaTable.for_path(spark, root).snapshot()
    version = stale.version
    DeltaTable.for_path(spark, root).delete("id = 5")  # rewrites the p=1 file holding key 3, which the merge reads
    with pytest.raises((ConcurrentAppendError, ConcurrentDeleteReadError)) as failed:
        run(stale)
    assert failed.value.retryable
    assert DeltaTable.for_path(spark, root).version() == version + 1  # only the delete landed
    rows = {r["id"]: r["v"] for r in DeltaTable.for_path(spark, root).to_df().collect()}
    assert rows == {1: 1, 3: 30, 7: 7, 9: 9, 11: 110}

    stale = DeltaTable.for_path(spark, root).snapshot()
    DeltaTable.for_path(spark, root).delete("p = 1")  # removes the files the merge reads, adds none
    with pytest.raises(ConcurrentDeleteReadError):
        run(stale)
    assert DeltaTable.for_path(spark, root).to_df().count() == 0


def test_merge_schema_adds_the_source_columns_in_the_same_commit(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    t.append(spark.createDataFrame([(1, 1, 0), (2, 2, 0)], DDL))
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame([(2, 20, 0, "b"), (3, 30, 0, "c")], "id BIGINT, v INT, p INT, tag STRING")
    with pytest.raises(DeltaError, match="unknown column .tag."):  # without merge_schema: no such column
        t.merge(src, "target.id = source.id").when_matched_update({"tag": "source.tag"}).execute()
    res = (
        t.merge(src, "target.id = source.id", merge_schema=True)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert res["version"] == 2
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert got == [(1, 1, 0, None), (2, 20, 0, "b"), (3, 30, 0, "c")]
    theirs = sorted(tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist())
    assert theirs == got


def test_a_target_row_matched_twice_without_a_matched_clause_is_copied_once(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL)
    t.append(spark.createDataFrame([(2, 1, 0), (3, 1, 0)], DDL).coalesce(1))  # one file: it is touched
    t = DeltaTable.for_path(spark, root)
    src = spark.createDataFrame([(2, 5, 0), (2, 6, 0)], DDL)  # both match id 2; no clause changes it
    t.merge(src, "target.id = source.id").when_not_matched_by_source_update({"v": "target.v * 2"}).execute()
    got = sorted((r["id"], r["v"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert got == [(2, 1), (3, 2)]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(row, max_size=12),
    st.lists(row, max_size=8, unique_by=lambda r: r["id"] if r["id"] is not None else object()),
    st.booleans(),
)
# a source row matching two target rows (the target's keys are not unique): counted once as not inserted
@example(
    target=[{"id": 0, "v": 1, "p": 0}, {"id": 0, "v": 2, "p": 0}, {"id": None, "v": 3, "p": 0}],
    source=[{"id": 0, "v": 9, "p": 0}, {"id": None, "v": 4, "p": 0}, {"id": 5, "v": 5, "p": 0}],
    partitioned=False,
)
@pytest.mark.parametrize("dv", [False, True], ids=["plain", "dv"])
def test_upsert_by_join_equals_the_reference(spark, tmp_path_factory, monkeypatch, dv, target, source, partitioned):
    """An upsert by join (keys checked unique: the first phase is the matched pairs alone, the inserts
    counted as the source rows no pair holds; on a deletion-vector table the matched rows marked and
    the source rows written) equals Delta's semantics; NULL keys never match, and a target holding a
    key twice has both rows updated."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path_factory.mktemp("u") / "t")
    props = {"delta.enableDeletionVectors": "true"} if dv else None
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"] if partitioned else None, properties=props)
    if target:
        t.append(spark.createDataFrame([(r["id"], r["v"], r["p"]) for r in target], DDL))
    res = t.upsert(spark.createDataFrame([(r["id"], r["v"], r["p"]) for r in source], DDL), ["id"])
    by_key = {r["id"]: r for r in source if r["id"] is not None}
    want = [by_key.get(r["id"], r) if r["id"] is not None else r for r in target]
    keys = {r["id"] for r in target if r["id"] is not None}
    inserted = [r for r in source if r["id"] is None or r["id"] not in keys]
    got = [r.asDict() for r in DeltaTable.for_path(spark, root).to_df().collect()]
    assert sorted(got, key=row_key) == sorted(want + inserted, key=row_key)
    if source:
        assert res["strategy"] == "join"
        m = res["metrics"]
        assert m["numTargetRowsInserted"] == len(inserted)
        assert m["numTargetRowsUpdated"] == sum(1 for r in target if r["id"] is not None and r["id"] in by_key)
    # every deletion vector file on disk is one the table holds: those a fallback to the two phases
    # left uncommitted are deleted
    on_disk = {os.path.basename(f) for f in glob.glob(f"{root}/**/deletion_vector_*.bin", recursive=True)}
    vectors = snapshot(root).files.column("deletion_vector").to_pylist()
    held = {os.path.basename(dv_file_path(root, dv)) for dv in vectors if dv and dv["storageType"] != "i"}
    assert on_disk == held


@pytest.mark.parametrize("dv", [False, True], ids=["plain", "dv"])
def test_an_upsert_written_as_clauses_joins_right_whether_or_not_its_keys_are_unique(spark, tmp_path, monkeypatch, dv):
    """UPDATE * / INSERT * by join without key_columns: the source's ON keys are asked whether they
    are unique (then it runs as an upsert); keys held twice that match no target row are all
    inserted, NULL keys never match, and a key held twice that matches a target row fails."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    props = {"delta.enableDeletionVectors": "true"} if dv else None
    t = DeltaTable.create(spark, root, schema=DDL, properties=props)
    for part in (range(0, 5), range(5, 10)):
        t.append(spark.createDataFrame([(i, i, 0) for i in part], DDL))

    plans: list = []

    def upsert(rows):
        src = spark.createDataFrame(rows, DDL)
        b = DeltaTable.for_path(spark, root).merge(src, "target.id = source.id")
        with reporting_to(lambda e: plans.append(e["phase"]) if e["phase"] in ("upsert", "joined") else None):
            return b.when_matched_update_all().when_not_matched_insert_all().execute()

    def rows():
        return sorted((tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect()), key=str)

    res = upsert([(i, 100 + i, 0) for i in range(5, 15)])
    want = [(i, i, 0) for i in range(5)] + [(i, 100 + i, 0) for i in range(5, 15)]
    assert rows() == sorted(want, key=str) and res["strategy"] == "join"
    assert plans == ["upsert", "joined"]  # the keys were found unique: the upsert plan ran
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (5, 5)
    plans.clear()
    res = upsert([(20, 1, 0), (20, 2, 0), (None, 3, 0), (None, 4, 0), (0, 50, 0)])
    assert plans == ["joined"]  # id 20 twice: the general plan
    want = [(0, 50, 0)] + want[1:] + [(20, 1, 0), (20, 2, 0), (None, 3, 0), (None, 4, 0)]
    assert rows() == sorted(want, key=str)
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 4)
    version = DeltaTable.for_path(spark, root).version()
    with pytest.raises(DeltaError, match="multiple source rows matched"):
        upsert([(1, 7, 0), (1, 8, 0)])
    assert DeltaTable.for_path(spark, root).version() == version and rows() == sorted(want, key=str)
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id, v, p FROM t")
    assert sorted((tuple(r.values()) for r in pa.table(theirs.read_all()).to_pylist()), key=str) == sorted(
        want, key=str
    )


def test_source_keys_over_the_drivers_bound_are_checked_unique_by_spark(spark, tmp_path, monkeypatch):
    """Keys too many for the driver (a zero bound here) are checked by Spark: an upsert's key held
    twice is refused, naming it, before anything is written; UPDATE * / INSERT * over a source
    holding a key twice that matches nothing inserts both rows."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite
    from airflow_delta_provider_apps.engine.spark import merge as spark_merge

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    monkeypatch.setattr(spark_merge, "narrow_limit", lambda _spark: 0)
    root = str(tmp_path / "t")
    DeltaTable.create(spark, root, schema=DDL).append(spark.createDataFrame([(1, 1, 0), (2, 2, 0)], DDL))
    t = DeltaTable.for_path(spark, root)
    with pytest.raises(InvalidArgumentError, match="id=3"):
        t.upsert(spark.createDataFrame([(3, 30, 0), (3, 31, 0), (None, 5, 0), (None, 6, 0)], DDL), ["id"])
    assert t.version() == 1
    src = spark.createDataFrame([(1, 10, 0), (4, 40, 0), (4, 41, 0)], DDL)
    res = t.merge(src, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert got == [(1, 10, 0), (2, 2, 0), (4, 40, 0), (4, 41, 0)] and res["strategy"] == "join"
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 2)
    res = t.upsert(spark.createDataFrame([(2, 20, 0), (5, 50, 0), (None, 7, 0), (None, 8, 0)], DDL), ["id"])
    got = sorted((tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect()), key=str)
    want = [(1, 10, 0), (2, 20, 0), (4, 40, 0), (4, 41, 0), (5, 50, 0), (None, 7, 0), (None, 8, 0)]
    assert got == sorted(want, key=str)  # NULL keys held twice are no duplicate: both inserted


def _dv_table_after_a_delete(spark, tmp_path):
    """A partitioned DV table of 40 rows where a DELETE marked ids 0, 3, 6, ...: (root, rows, the
    parquet files on disk)."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema=DDL, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"}
    )
    rows = [(i, i * 10, i % 2) for i in range(40)]
    t.append(spark.createDataFrame(rows, DDL).repartition(2))
    t.delete("v % 30 = 0")
    return root, rows, set(glob.glob(f"{root}/**/*.parquet", recursive=True))


def test_merge_with_deletion_vectors_marks_rows_over_existing_vectors(spark, tmp_path, execution):
    """A DV table where a DELETE already marked rows: a MERGE (update, delete, insert) adds its own
    marks to the same files' vectors (file by file and by join) and writes only the updated and
    inserted rows."""
    root, rows, files = _dv_table_after_a_delete(spark, tmp_path)
    source = spark.createDataFrame([(i, -i, i % 2) for i in (1, 2, 3, 4, 5, 50)], DDL)
    res = (
        DeltaTable.for_path(spark, root)
        .merge(source, "target.id = source.id")
        .when_matched_delete("source.id = 2")
        .when_matched_update({"v": "source.v"})
        .when_not_matched_insert_all()
        .execute()
    )
    want = {r[0]: r for r in rows if (r[1] % 30) != 0 and r[0] != 2}
    for i in (1, 3, 4, 5, 50):  # 3 was deleted: the source's 3 is inserted again
        want[i] = (i, -i, i % 2)
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id, v, p FROM t").read_all())
    assert got == sorted(want.values()) == sorted(tuple(r.values()) for r in theirs.to_pylist())
    m = res["metrics"]
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetRowsInserted"]) == (3, 1, 2)
    assert files <= set(glob.glob(f"{root}/**/*.parquet", recursive=True))  # no file removed from disk
    assert m["numTargetRowsCopied"] == 0 and m["numTargetFilesRemoved"] == 0
    assert m["numTargetDeletionVectorsUpdated"] >= 1  # merged into the DELETE's vectors
    assert m["numTargetFilesAdded"] >= 1 and m["numOutputRows"] == 5  # the 3 updated and 2 inserted rows


def test_upsert_into_a_deletion_vector_table_writes_only_the_source_rows(spark, tmp_path, execution):
    """An upsert (keys checked unique) into a DV table: the matched rows are marked over the DELETE's
    vectors and the source rows written as they are, a partition move included; by join the target
    is read for its keys only and nothing else is copied."""
    root, rows, files = _dv_table_after_a_delete(spark, tmp_path)
    source = [(1, -1, 1), (2, None, 0), (3, -3, 1), (4, -4, 1), (50, -50, 0)]  # 4 moves to p=1; 3 was deleted
    res = DeltaTable.for_path(spark, root).upsert(spark.createDataFrame(source, DDL), ["id"])
    want = {r[0]: r for r in rows if (r[1] % 30) != 0} | {r[0]: r for r in source}
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id, v, p FROM t").read_all())
    assert (
        got
        == sorted(want.values(), key=_none_first)
        == sorted((tuple(r.values()) for r in theirs.to_pylist()), key=_none_first)
    )
    m = res["metrics"]
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == (3, 2, 0)
    assert files <= set(glob.glob(f"{root}/**/*.parquet", recursive=True))  # no file removed from disk
    assert m["numTargetRowsCopied"] == 0 and m["numTargetFilesRemoved"] == 0 and m["numOutputRows"] == 5


def _none_first(row):
    return tuple((v is not None, v) for v in row)


@pytest.mark.parametrize("by_source", [False, True])
def test_merge_records_its_changes_in_every_execution(spark, tmp_path, execution, by_source):
    """A table with the change data feed: every execution (file by file, Spark's join, with NOT
    MATCHED BY SOURCE: the outer join) writes the update pre- and post-images, the deletes and the
    inserts of one MERGE to change files, in its commit; a commit with only inserts writes none."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema=DDL, partition_by=["p"], properties={"delta.enableChangeDataFeed": "true"}
    )
    rows = [(i, i * 10, i % 2) for i in range(12)]
    t.append(spark.createDataFrame(rows, DDL).repartition(2))
    source = spark.createDataFrame([(i, -i, i % 2) for i in (1, 2, 3, 50)], DDL)
    b = (
        DeltaTable.for_path(spark, root)
        .merge(source, "target.id = source.id")
        .when_matched_delete("source.id = 2")
        .when_matched_update({"v": "source.v"})
        .when_not_matched_insert_all()
    )
    if by_source:
        b = b.when_not_matched_by_source_delete("target.id = 11")
    res = b.execute()
    feed = [
        ((1, 10, 1), "update_preimage"),
        ((1, -1, 1), "update_postimage"),
        ((3, 30, 1), "update_preimage"),
        ((3, -3, 1), "update_postimage"),
        ((2, 20, 0), "delete"),
        ((50, -50, 0), "insert"),
    ] + ([((11, 110, 1), "delete")] if by_source else [])
    assert_changes(root, res["version"], [(dict(zip(("id", "v", "p"), r)), k) for r, k in feed], True)
    assert res["metrics"]["numTargetChangeFilesAdded"] >= 1
    only_inserts = (
        DeltaTable.for_path(spark, root)
        .merge(spark.createDataFrame([(60, 0, 0)], DDL), "target.id = source.id")
        .when_not_matched_insert_all()
        .execute()
    )
    assert only_inserts["metrics"]["numTargetChangeFilesAdded"] == 0  # readers take them from the adds
    assert_changes(root, only_inserts["version"], [({"id": 60, "v": 0, "p": 0}, "insert")], True)


def test_merge_computes_generated_columns_and_checks_constraints(spark, tmp_path, execution):
    """Every execution: an update of a column recomputes the generated column that depends on it,
    inserts compute it, and a row that breaks a CHECK constraint fails the MERGE, nothing committed."""
    import json as _json

    from airflow_delta_provider_apps.engine.errors import ConstraintViolationError

    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "g", "type": "integer", "nullable": False, "metadata": {"delta.generationExpression": "v + p"}},
        ],
    }
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema=_json.dumps(schema), partition_by=["p"], properties={"delta.constraints.v_small": "v < 100"}
    )
    t.append(spark.createDataFrame([(i, i * 10, i % 2) for i in range(6)], DDL))  # no g: computed
    source = spark.createDataFrame([(1, 50, 1), (9, 90, 1)], DDL)
    DeltaTable.for_path(spark, root).merge(source, "target.id = source.id").when_matched_update(
        {"v": "source.v"}
    ).when_not_matched_insert_all().execute()
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    want = sorted([(i, i * 10, i % 2, i * 10 + i % 2) for i in range(6) if i != 1] + [(1, 50, 1, 51), (9, 90, 1, 91)])
    assert got == want
    version = t.version()
    import glob

    files = set(glob.glob(f"{root}/**/*.parquet", recursive=True))
    bad = spark.createDataFrame([(2, 500, 0)], DDL)
    with pytest.raises(ConstraintViolationError, match="v_small"):
        DeltaTable.for_path(spark, root).merge(bad, "target.id = source.id").when_matched_update_all().execute()
    # a valid update beside an insert that breaks the constraint: nothing committed, nothing left behind
    bad_insert = spark.createDataFrame([(2, 5, 0), (77, 700, 1)], DDL)
    with pytest.raises(ConstraintViolationError, match="v_small"):
        DeltaTable.for_path(spark, root).merge(
            bad_insert, "target.id = source.id"
        ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert DeltaTable.for_path(spark, root).version() == version
    if execution != "join":  # (a failed Spark write job may leave its finished tasks' files: VACUUM's)
        assert set(glob.glob(f"{root}/**/*.parquet", recursive=True)) == files


def test_an_upsert_copies_struct_array_and_map_columns(spark, tmp_path, execution):
    """Whole nested columns are copied by update_all / insert_all, file by file and by join; on a
    type-widening table with merge_schema a struct's field widens (its own ``delta.typeChanges``)."""
    root = str(tmp_path / "t")
    ddl = "id BIGINT, s STRUCT<x: INT, y: STRING>, a ARRAY<INT>, m MAP<STRING, INT>"
    t = DeltaTable.create(spark, root, schema=ddl, properties={"delta.enableTypeWidening": "true"})
    t.append(spark.createDataFrame([(1, (1, "a"), [1], {"k": 1}), (2, (2, "b"), [2, 2], None)], ddl))
    src_ddl = "id BIGINT, s STRUCT<x: BIGINT, y: STRING>, a ARRAY<INT>, m MAP<STRING, INT>"
    src = spark.createDataFrame([(2, (2**40, None), None, {"z": 26}), (3, None, [3], {})], src_ddl)
    res = DeltaTable.for_path(spark, root).upsert(src, ["id"], merge_schema=True)
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 1)
    got = {r["id"]: r.asDict(recursive=True) for r in DeltaTable.for_path(spark, root).to_df().collect()}
    assert got[1] == {"id": 1, "s": {"x": 1, "y": "a"}, "a": [1], "m": {"k": 1}}
    assert got[2] == {"id": 2, "s": {"x": 2**40, "y": None}, "a": None, "m": {"z": 26}}
    assert got[3] == {"id": 3, "s": None, "a": [3], "m": {}}
    x = DeltaTable.for_path(spark, root).snapshot().schema.field("s").type.field("x")
    assert (x.type.to_json(), x.metadata["delta.typeChanges"]) == ("long", [{"fromType": "integer", "toType": "long"}])


def test_a_stable_source_is_read_where_it_lies_and_any_other_is_materialised(spark, tmp_path, monkeypatch):
    """A deterministic scan of files is read by both phases of the join where it lies (no copy); rows
    made in the driver, a random column or ``materializeSource=all`` are materialised first. Either
    way the upsert by join (plain and deletion-vector tables) equals the reference, and a key repeated
    in a Parquet source is refused before anything is written."""
    from pyspark.sql import functions as F

    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite
    from airflow_delta_provider_apps.engine.spark import merge as spark_merge
    from airflow_delta_provider_apps.engine.spark import session as spark_session

    src_path = str(tmp_path / "src")
    spark.createDataFrame([(i, -i, i % 2) for i in range(0, 60, 3)], DDL).coalesce(2).write.parquet(src_path)
    parquet = spark.read.parquet(src_path)
    assert spark_merge.stable_source(spark, parquet)
    assert spark_merge.stable_source(spark, parquet.where("id > 3").select("id", "v"))
    assert not spark_merge.stable_source(spark, spark.createDataFrame([(1, 1, 1)], DDL))
    assert not spark_merge.stable_source(spark, parquet.withColumn("v", (F.rand() * 10).cast("int")))
    # user code, row_number over possible ties, a subquery over driver rows, skipped files: copied
    assert not spark_merge.stable_source(spark, parquet.withColumn("v", F.udf(lambda x: x, "int")("v")))
    from pyspark.sql import Window

    ranked = parquet.withColumn("r", F.row_number().over(Window.partitionBy("p").orderBy("v")))
    assert not spark_merge.stable_source(spark, ranked)
    spark.createDataFrame([(30,)], "m long").createOrReplaceTempView("driver_rows")
    parquet.createOrReplaceTempView("landing")
    assert spark_merge.stable_source(spark, spark.sql("SELECT * FROM landing WHERE id > (SELECT max(id) FROM landing)"))
    assert not spark_merge.stable_source(
        spark, spark.sql("SELECT * FROM landing WHERE id > (SELECT m FROM driver_rows)")
    )
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        assert not spark_merge.stable_source(spark, parquet)
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")
    spark.conf.set(spark_merge.MATERIALIZE_CONF, "all")
    try:
        assert not spark_merge.stable_source(spark, parquet)
    finally:
        spark.conf.unset(spark_merge.MATERIALIZE_CONF)

    checkpoints = []
    real = type(parquet).localCheckpoint
    monkeypatch.setattr(
        type(parquet), "localCheckpoint", lambda df, *a, **k: checkpoints.append(1) or real(df, *a, **k)
    )
    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    monkeypatch.setattr(spark_session, "LOCAL_SOURCE_SHARE", 0)  # not read from its files on the local master
    source = {i: (i, -i, i % 2) for i in range(0, 60, 3)}
    for props in (None, {"delta.enableDeletionVectors": "true"}):
        root = str(tmp_path / f"t{bool(props)}")
        t = DeltaTable.create(spark, root, schema=DDL, properties=props)
        t.append(spark.createDataFrame([(i, i, 0) for i in range(40)], DDL).repartition(3))
        res = DeltaTable.for_path(spark, root).upsert(spark.read.parquet(src_path), ["id"])
        assert res["strategy"] == "join" and checkpoints == []
        want = {i: (i, i, 0) for i in range(40)} | source
        assert sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect()) == sorted(want.values())
        m = res["metrics"]
        assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (14, 6)
        assert m["numTargetRowsCopied"] == (0 if props else 40 - 14)  # copy on write: the three files' other rows
    DeltaTable.for_path(spark, root).upsert(spark.createDataFrame([(1, 1, 1)], DDL), ["id"])
    assert checkpoints == [1]  # rows from the driver: materialised

    dup_path = str(tmp_path / "dup")
    spark.createDataFrame([(5, 1, 0), (7, 1, 0), (5, 2, 0)], DDL).write.parquet(dup_path)
    before = DeltaTable.for_path(spark, root).version()
    with pytest.raises(DeltaError, match="more than once|duplicate"):
        DeltaTable.for_path(spark, root).upsert(spark.read.parquet(dup_path), ["id"])
    assert DeltaTable.for_path(spark, root).version() == before


@pytest.mark.parametrize("dv", [False, True], ids=["copy_on_write", "deletion_vectors"])
def test_a_day_from_before_a_schema_change_is_reprocessed_over_spark(spark, tmp_path, execution, dv):
    """The 7-day backfill in small, over Spark (file by file and by join): day 6's upsert adds
    ``channel`` (merge_schema); days 3 and 4 upserted again from their original sources (no channel),
    by key columns and by UPDATE * / INSERT * clauses, keep channel in their updated rows and write
    NULL in the new ones (delta-spark's schema evolution); without merge_schema they are refused and
    nothing is written. The rows equal the plain-Python reference; deltalake reads the same rows."""
    cols = ("order_id", "day", "amount", "channel")
    ddl = "order_id BIGINT, day INT, amount INT"
    upsert = [  # delta-spark's UPDATE * / INSERT * with schema evolution, row by row
        ("matched", ("update_all", None, lambda t, s: {**t, **s}), None),
        ("not_matched", ("insert_all", None, lambda t, s: {**dict.fromkeys(cols), **s}), None),
    ]

    def on(t, s):
        return t["order_id"] == s["order_id"]

    def day(d, n=3, bump=0, channel=None):
        rows = [{"order_id": d * 10 + i, "day": d, "amount": d * 100 + i + bump} for i in range(n)]
        return [{**r, "channel": channel} for r in rows] if channel else rows

    def frame(rows):
        schema = ddl + (", channel STRING" if "channel" in rows[0] else "")
        return spark.createDataFrame([tuple(r.values()) for r in rows], schema)

    def rows_of(root):
        return sorted((r.asDict() for r in DeltaTable.for_path(spark, root).to_df().collect()), key=str)

    root = str(tmp_path / "t")
    props = {"delta.enableDeletionVectors": "true"} if dv else None
    DeltaTable.create(spark, root, schema=ddl, partition_by=["day"], properties=props)
    model: list = []
    for d in range(1, 6):
        DeltaTable.for_path(spark, root).upsert(frame(day(d)), ["order_id"])
        model = reference(model, day(d), upsert, on)[0]
    day6 = day(6, channel="web") + [{"order_id": 30, "day": 3, "amount": 350, "channel": "shop"}]
    DeltaTable.for_path(spark, root).upsert(frame(day6), ["order_id"], merge_schema=True)
    model = reference(model, day6, upsert, on)[0]
    version = DeltaTable.for_path(spark, root).version()
    with pytest.raises(InvalidArgumentError, match="source has no column channel"):
        DeltaTable.for_path(spark, root).upsert(frame(day(3, n=4, bump=7)), ["order_id"])
    assert DeltaTable.for_path(spark, root).version() == version

    res = DeltaTable.for_path(spark, root).upsert(frame(day(3, n=4, bump=7)), ["order_id"], merge_schema=True)
    model = reference(model, day(3, n=4, bump=7), upsert, on)[0]
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (3, 1)
    t = DeltaTable.for_path(spark, root)
    res = (
        t.merge(frame(day(4, n=4, bump=9)), "target.order_id = source.order_id", merge_schema=True)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    model = reference(model, day(4, n=4, bump=9), upsert, on)[0]
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (3, 1)
    assert res["strategy"] == {"join": "join", "hash": "hash_join"}.get(execution, "file_by_file")
    got = rows_of(root)
    assert got == sorted(model, key=str)
    by_id = {r["order_id"]: r for r in got}
    assert by_id[30] == {"order_id": 30, "day": 3, "amount": 307, "channel": "shop"}
    assert by_id[33]["channel"] is None and by_id[43]["channel"] is None and by_id[60]["channel"] == "web"
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()).to_pylist()
    assert sorted(({c: r[c] for c in cols} for r in theirs), key=str) == got
