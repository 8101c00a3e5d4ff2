"""The PySpark data source (``airflow_delta_provider_apps.datasource``) in the shared local session:
reads compared with the engine's own reader, writes read back by deltalake and delta-kernel-rs."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from outside_readers import deltalake_table, kernel_changes, kernel_table, sorted_rows

from airflow_delta_provider_apps.datasource import register
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def names(spark):
    return register(spark)


def _parquet_files(root) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root)
        if "_delta_log" not in d
        for f in fs
        if f.endswith(".parquet")
    }


def _rows(table: pa.Table) -> list:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_register_takes_delta_where_nothing_else_has_it(spark, names):
    assert names == ["airflow_delta", "delta"]  # this session has no delta-spark jars
    assert register(spark) == ["airflow_delta", "delta"]  # again: the `delta` it finds is this source


def test_every_corpus_table_reads_as_our_reader_reads_it(spark, names, conformance_manifest, conformance_root):
    read = refused = 0
    for t in conformance_manifest["tables"]:
        root = str(conformance_root / t["table_root"])
        try:
            ours = read_snapshot_table(load_snapshot(storage_for(root), root))
        except Exception as e:  # a table our reader refuses: the source refuses it too, with our error
            with pytest.raises(Exception, match=type(e).__name__):
                spark.read.format("delta").load(root).collect()
            refused += 1
            continue
        got = spark.read.format("delta").load(root).toArrow()
        assert got.column_names == ours.column_names, root
        assert _rows(got) == _rows(ours), root
        read += 1
    assert read + refused == len(conformance_manifest["tables"]) == 40
    assert read >= 35, (read, refused)


def test_time_travel_filter_skipping_and_partitions(spark, names, tmp_path):
    root = str(tmp_path / "t")
    for i in range(4):  # four appends, one file each, ids i*100 .. i*100+99
        spark.range(i * 100, i * 100 + 100).selectExpr("id", "id % 3 AS k").coalesce(1).write.format("delta").mode(
            "append"
        ).save(root)
        if i == 1:
            time.sleep(0.05)
            after_v1 = int(time.time() * 1000)
            time.sleep(0.05)
    df = spark.read.format("delta").load(root)
    assert df.count() == 400 and df.rdd.getNumPartitions() == 4
    assert spark.read.format("airflow_delta").option("versionAsOf", 1).load(root).count() == 200
    at = spark.read.format("delta").option("timestampAsOf", after_v1).load(root)
    assert sorted(r.id for r in at.filter("id % 50 = 0").collect()) == [0, 50, 100, 150]
    # a selective filter: the stats leave one file, one partition, and Spark gets exactly the rows
    hit = spark.read.format("delta").load(root).filter("id >= 210 AND id < 215")
    assert hit.rdd.getNumPartitions() == 1
    assert sorted(r.id for r in hit.collect()) == [210, 211, 212, 213, 214]
    # filters the engine does not take (a function of a column) are Spark's alone: all files read
    assert spark.read.format("delta").load(root).filter("id + 1 = 5").rdd.getNumPartitions() == 4
    with pytest.raises(Exception, match="versionAsOf"):
        spark.read.format("delta").option("versionAsOf", "x").load(root).collect()


def test_change_feed(spark, names, tmp_path):
    root = str(tmp_path / "cdf")
    DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties={"delta.enableChangeDataFeed": "true"})
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").mode("append").save(root)
    spark.createDataFrame([(3, "c")], "id long, v string").write.format("delta").mode("append").save(root)
    DeltaTable.for_path(None, root).delete("id = 1")
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(root)
    got = sorted((r.id, r.v, r._change_type, r._commit_version) for r in feed.collect())
    assert got == [(1, "a", "delete", 3), (1, "a", "insert", 1), (2, "b", "insert", 1), (3, "c", "insert", 2)]
    kernel = kernel_changes(root, 1)
    assert sorted(zip(*(kernel.column(c).to_pylist() for c in ("id", "_change_type", "_commit_version")))) == sorted(
        (g[0], g[2], g[3]) for g in got
    )
    ranged = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 2)
    assert [r.id for r in ranged.option("endingVersion", 2).load(root).collect()] == [3]
    with pytest.raises(Exception, match="startingVersion"):
        spark.read.format("delta").option("readChangeFeed", "true").load(root).collect()


def test_writes_read_back_by_deltalake_and_kernel(spark, names, tmp_path):
    root = str(tmp_path / "w")
    rows = spark.createDataFrame([(i, i % 2, f"s{i}") for i in range(10)], "id long, part long, s string")
    rows.write.format("delta").mode("append").option("userMetadata", "first").save(root)  # creates the table
    # replaceWhere on a data column: the rows with id < 3 are replaced (their files rewritten without them)
    new = spark.createDataFrame([(0, 0, "new0"), (1, 1, "new1")], "id long, part long, s string")
    new.write.format("delta").mode("overwrite").option("replaceWhere", "id < 3").save(root)
    expected = [(0, 0, "new0"), (1, 1, "new1"), *[(i, i % 2, f"s{i}") for i in range(3, 10)]]
    for reader in (deltalake_table, kernel_table):
        assert sorted_rows(reader(root), ["id", "part", "s"]) == sorted(expected)
    # mergeSchema adds a column; txnAppId/txnVersion writes once
    extra = spark.createDataFrame([(20, 0, "x", 1.5)], "id long, part long, s string, d double")
    with pytest.raises(Exception, match="mergeSchema|merge_schema|SchemaMismatch"):
        extra.write.format("delta").mode("append").save(root)
    for _ in range(2):
        extra.write.format("delta").mode("append").option("mergeSchema", "true").option("txnAppId", "job").option(
            "txnVersion", 7
        ).save(root)
    files = _parquet_files(root)
    table = DeltaTable.for_path(None, root)
    assert table.version() == 2
    history = table.history()
    assert history[-1]["userMetadata"] == "first"
    assert sorted_rows(kernel_table(root), ["id", "d"]) == sorted([(r[0], None) for r in expected] + [(20, 1.5)])
    assert _parquet_files(root) == files  # the skipped second write left no file
    # a full overwrite
    rows.limit(2).write.format("delta").mode("overwrite").save(root)
    assert sorted_rows(deltalake_table(root), ["id"]) == [(0,), (1,)]


def test_bad_writes_leave_nothing(spark, names, tmp_path):
    root = str(tmp_path / "c")
    DeltaTable.create(None, root, schema="id BIGINT NOT NULL, v INT")
    DeltaTable.for_path(None, root).add_constraint("v_positive", "v > 0")
    before = _parquet_files(root)
    # refused on the driver before any task: a string where the table has a number
    with pytest.raises(Exception, match="SchemaMismatch|v"):
        spark.createDataFrame([(1, "x")], "id long, v string").write.format("delta").mode("append").save(root)
    # refused in a task after it wrote batches before the bad row (Arrow batches of 10,000 rows)
    df = spark.range(20000).selectExpr("id", "CAST(IF(id = 15000, -1, 1) AS INT) AS v").coalesce(1)
    with pytest.raises(Exception, match="v_positive|CHECK|constraint"):
        df.write.format("delta").mode("append").save(root)
    assert _parquet_files(root) == before
    assert DeltaTable.for_path(None, root).version() == 1
    assert spark.read.format("delta").load(root).count() == 0


def test_sql(spark, names, tmp_path):
    root = str(tmp_path / "sql")
    spark.range(5).write.format("delta").mode("append").save(root)
    spark.sql(f"CREATE TEMPORARY VIEW ds_sql_v USING delta OPTIONS (path '{root}')")
    spark.sql(f"CREATE TEMPORARY VIEW ds_sql_o USING airflow_delta OPTIONS (path '{root}', versionAsOf '0')")
    try:
        assert spark.sql("SELECT sum(id) AS s FROM ds_sql_v").collect()[0].s == 10
        assert spark.sql("SELECT count(*) AS n FROM ds_sql_o WHERE id > 2").collect()[0].n == 2
        # Spark (4.0 to 4.3) keeps no LOCATION or OPTIONS of a catalog table for a Python data source:
        # the read says so and names the form that works
        spark.sql(f"CREATE TABLE ds_sql_t USING delta LOCATION '{root}'")
        with pytest.raises(Exception, match="CREATE TEMPORARY VIEW"):
            spark.sql("SELECT * FROM ds_sql_t").collect()
    finally:
        spark.sql("DROP TABLE IF EXISTS ds_sql_t")
        spark.catalog.dropTempView("ds_sql_v")
        spark.catalog.dropTempView("ds_sql_o")


def test_identity_and_generated_columns_filled_by_the_tasks(spark, names, tmp_path):
    root = str(tmp_path / "g")
    DeltaTable.create(
        None,
        root,
        schema="id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 100 INCREMENT BY 3), v STRING, "
        "g INT GENERATED ALWAYS AS (length(v))",
    )
    data = spark.createDataFrame([(f"r{i}",) for i in range(300)], "v string").repartition(2)
    data.write.format("delta").mode("append").save(root)  # two tasks, each its own identity range
    got = read_snapshot_table(DeltaTable.for_path(None, root).snapshot()).to_pylist()
    ids = [r["id"] for r in got]
    assert len(set(ids)) == 300 and min(ids) >= 100 and all((i - 100) % 3 == 0 for i in ids)
    assert all(r["g"] == len(r["v"]) for r in got)
    mark = DeltaTable.for_path(None, root).snapshot().schema.find("id").metadata["delta.identity.highWaterMark"]
    assert mark >= max(ids)
