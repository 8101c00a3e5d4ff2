"""DELETE, UPDATE and overwrite through Spark (the rewrite runs in Spark tasks), cross-checked with
an independent pyarrow computation and with deltalake (delta-rs) reading what we wrote."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, SchemaMismatchError
from airflow_delta_provider_apps.engine.spark.plane import SparkPlane


@pytest.fixture(autouse=True)
def _in_spark_tasks(file_tasks):
    """The tests here are about the Spark tasks: without this, DELETE and UPDATE on a local master
    rewrite in the driver's threads."""


deltalake = pytest.importorskip("deltalake")

DDL = "id BIGINT, dt DATE, v DOUBLE, s STRING"


def _source(spark, n=200, days=4, offset=0):
    rows = [
        (i + offset, dt.date(2026, 1, 1) + dt.timedelta(days=i % days), float(i) if i % 7 else None, f"s{i % 5}")
        for i in range(n)
    ]
    return spark.createDataFrame(rows, DDL), rows


def _rows(t: DeltaTable) -> list[tuple]:
    got = t.to_df().toArrow()
    return sorted(tuple(r.values()) for r in got.to_pylist())


def _theirs(root) -> list[tuple]:
    tab = deltalake.DeltaTable(root).to_pyarrow_table().select(["id", "dt", "v", "s"])
    return sorted(tuple(r.values()) for r in tab.to_pylist())


@pytest.fixture
def table(spark, tmp_path):
    root = str(tmp_path / "t")
    df, rows = _source(spark)
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["dt"])
    t.append(df.repartition(3))
    return t, rows, root


def test_delete_by_data_predicate_rewrites_in_spark(table):
    t, rows, root = table
    r = t.delete("v > 150 OR s = 's1'")
    kept = [x for x in rows if not ((x[2] is not None and x[2] > 150) or x[3] == "s1")]
    assert _rows(t) == sorted(kept) == _theirs(root)
    assert r["numDeletedRows"] == len(rows) - len(kept)
    assert r["numRemovedFiles"] >= 1 and r["numAddedFiles"] >= 1
    assert r["numFilesAfterSkipping"] <= r["numFilesBeforeSkipping"]


def test_delete_with_deletion_vectors_marks_rows_in_spark_tasks(spark, tmp_path):
    import glob

    root = str(tmp_path / "dv")
    df, rows = _source(spark)
    t = DeltaTable.create(
        spark, root, schema=DDL, partition_by=["dt"], properties={"delta.enableDeletionVectors": "true"}
    )
    t.append(df.repartition(3))
    files = set(glob.glob(f"{root}/**/*.parquet", recursive=True))
    first = t.delete("v > 150 OR s = 's1'")
    second = t.delete("id % 3 = 0 OR s = 's1'")  # merged into the vectors the first one wrote
    kept = [x for x in rows if not ((x[2] is not None and x[2] > 150) or x[3] == "s1" or x[0] % 3 == 0)]
    assert set(glob.glob(f"{root}/**/*.parquet", recursive=True)) == files  # no data file written
    dt_ = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt_).execute("SELECT id, dt, v, s FROM t").read_all())
    assert _rows(t) == sorted(kept) == sorted(tuple(r.values()) for r in theirs.to_pylist())
    assert first["numDeletionVectorsAdded"] >= 1 and first["numAddedFiles"] == 0
    assert second["numDeletionVectorsUpdated"] >= 1
    assert first["numDeletedRows"] + second["numDeletedRows"] == len(rows) - len(kept)
    # UPDATE: the old versions marked, the new ones written alone (no row copied)
    up = t.update({"v": "-1.0"}, "s = 's2'")
    kept = [(i, d, -1.0 if s_ == "s2" else v, s_) for i, d, v, s_ in kept]
    theirs = pa.table(
        deltalake.QueryBuilder()
        .register("t", deltalake.DeltaTable(root))
        .execute("SELECT id, dt, v, s FROM t")
        .read_all()
    )
    assert _rows(t) == sorted(kept) == sorted(tuple(r.values()) for r in theirs.to_pylist())
    assert up["numUpdatedRows"] == sum(1 for x in kept if x[3] == "s2") and up["numCopiedRows"] == 0
    assert files <= set(glob.glob(f"{root}/**/*.parquet", recursive=True))


def test_partition_delete_runs_no_spark_job(spark, table):
    t, rows, root = table
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("partition-delete", "partition-only delete")
    try:
        r = t.delete("dt = '2026-01-02'")
        jobs = tracker.getJobIdsForGroup("partition-delete")
    finally:
        spark.sparkContext.setJobGroup("other", "other")
    assert list(jobs) == []
    assert r["numDeletedRows"] == sum(1 for x in rows if x[1] == dt.date(2026, 1, 2))
    assert _theirs(root) == sorted(x for x in rows if x[1] != dt.date(2026, 1, 2))


def test_update_in_spark_moves_partitions(table):
    t, rows, root = table
    r = t.update({"dt": "DATE '2027-01-01'", "v": "coalesce(v, -1) * 2"}, "id < 10")
    expected = sorted(
        (x[0], dt.date(2027, 1, 1), (x[2] if x[2] is not None else -1.0) * 2, x[3]) if x[0] < 10 else x for x in rows
    )
    assert _rows(t) == expected == _theirs(root)
    assert r["numUpdatedRows"] == 10


def test_overwrite_replace_where_partition_and_data(spark, table):
    t, rows, root = table
    day = dt.date(2026, 1, 3)
    new = spark.createDataFrame([(1000 + i, day, 1.0, "new") for i in range(5)], DDL)
    r = t.overwrite(new, replace_where="dt = '2026-01-03'")
    expected = sorted([x for x in rows if x[1] != day] + [(1000 + i, day, 1.0, "new") for i in range(5)])
    assert _rows(t) == expected == _theirs(root)
    assert r["numOutputRows"] == 5 and r["numRemovedFiles"] >= 1
    # a data condition: the rows matching it are replaced, the rest of their files copied
    v_before = t.version()
    new2 = spark.createDataFrame([(2000, day, 99.0, "s1")], DDL)
    t.overwrite(new2, replace_where="s = 's1'")
    expected = sorted([x for x in expected if x[3] != "s1"] + [(2000, day, 99.0, "s1")])
    assert _rows(t) == expected == _theirs(root)
    assert t.version() == v_before + 1


def test_replace_where_violation_commits_nothing(spark, table):
    t, _, root = table
    v = t.version()
    bad = spark.createDataFrame([(1, dt.date(2026, 1, 1), 1.0, "x")], DDL)
    with pytest.raises(InvalidArgumentError, match="do not match replace_where"):
        t.overwrite(bad, replace_where="dt = '2026-01-03'")
    assert t.version() == v


def test_full_dynamic_and_schema_overwrites(spark, table):
    t, rows, root = table
    day = dt.date(2026, 1, 1)
    new = spark.createDataFrame([(7, day, 7.0, "d")], DDL)
    t.overwrite(new, partition_overwrite_mode="dynamic")
    assert _rows(t) == sorted([x for x in rows if x[1] != day] + [(7, day, 7.0, "d")]) == _theirs(root)
    t.overwrite(new)
    assert _rows(t) == [(7, day, 7.0, "d")] == _theirs(root)
    wider = spark.createDataFrame([(8, day, 8.0, "e", 1)], DDL + ", extra INT")
    with pytest.raises(SchemaMismatchError, match="merge_schema=True"):
        t.append(wider)
    t.append(wider, merge_schema=True)
    assert "extra" in t.snapshot().schema.names
    got = deltalake.DeltaTable(root).to_pyarrow_table()
    assert sorted(pc.fill_null(got.column("extra"), -1).to_pylist()) == [-1, 1]
    t.overwrite(spark.createDataFrame([(9, day)], "id BIGINT, dt DATE"), overwrite_schema=True)
    assert t.snapshot().schema.names == ["id", "dt"]
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == 1


def test_conflict_delete_vs_append_same_and_other_partition(spark, table):
    from airflow_delta_provider_apps.engine.commands.dml import delete
    from airflow_delta_provider_apps.engine.errors import ConcurrentAppendError

    t, rows, root = table
    snap = t.snapshot()
    other = DeltaTable.for_path(spark, root)
    # an append into another partition lands first: the delete of 2026-01-01 still commits
    other.append(spark.createDataFrame([(5000, dt.date(2026, 2, 1), 1.0, "z")], DDL))
    delete(snap, "dt = '2026-01-01'", plane=SparkPlane(spark))
    snap = t.snapshot()
    # an append into the partition the delete reads: Serializable refuses the delete
    other.append(spark.createDataFrame([(5001, dt.date(2026, 1, 2), 1.0, "z")], DDL))
    with pytest.raises(ConcurrentAppendError):
        delete(snap, "dt = '2026-01-02'", plane=SparkPlane(spark))


def test_arrow_types_round_trip(spark, tmp_path):
    # timestamps and decimals through the Spark rewrite path
    root = str(tmp_path / "ts")
    df = spark.createDataFrame(
        [(1, dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)), (2, dt.datetime(2026, 1, 2, 12, 0, tzinfo=dt.UTC))],
        "id BIGINT, ts TIMESTAMP",
    )
    t = DeltaTable.create(spark, root, schema="id BIGINT, ts TIMESTAMP")
    t.append(df)
    t.delete("ts < TIMESTAMP '2026-01-02 00:00:00'")
    assert [r["id"] for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()] == [2]
    assert pa.types.is_timestamp(deltalake.DeltaTable(root).to_pyarrow_table().schema.field("ts").type)
