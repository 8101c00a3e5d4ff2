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
from airflow_delta_provider_apps.engine.commands.write import append_arrow
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
    assert df.count() == 400 and df.rdd.getNumPartitions() == 2  # one per core of local[2]
    assert spark.read.format("airflow_delta").option("versionAsOf", 1).load(root).count() == 200
    at = spark.read.format("delta").option("timestampAsOf", after_v1).load(root)
    assert sorted(r.id for r in at.filter("id % 50 = 0").collect()) == [0, 50, 100, 150]
    # a selective filter: the stats leave one file, one partition, and Spark gets exactly the rows
    hit = spark.read.format("delta").load(root).filter("id >= 210 AND id < 215")
    assert hit.rdd.getNumPartitions() == 1
    assert sorted(r.id for r in hit.collect()) == [210, 211, 212, 213, 214]
    # filters the engine does not take (a function of a column) are Spark's alone: all files read
    assert spark.read.format("delta").load(root).filter("id + 1 = 5").rdd.getNumPartitions() == 2
    with pytest.raises(Exception, match="versionAsOf"):
        spark.read.format("delta").option("versionAsOf", "x").load(root).collect()


def test_a_large_file_is_read_in_row_group_pieces(spark, names, tmp_path):
    """One file of 8 row groups (written by deltalake) on local[2]: two partitions, each a range of
    the file's row groups; the deletion vector our DELETE adds stays aligned in both."""
    from deltalake import WriterProperties, write_deltalake

    root = str(tmp_path / "big")
    data = pa.table({"id": pa.array(range(8000), pa.int64()), "s": [f"s{i}" for i in range(8000)]})
    write_deltalake(root, data, writer_properties=WriterProperties(max_row_group_size=1000))
    table = DeltaTable.for_path(None, root)
    table.set_properties({"delta.enableDeletionVectors": "true"})
    table.delete("id % 7 = 0 OR (id >= 3990 AND id < 4010)")  # rows in both halves, across the cut
    files = table.snapshot().files
    assert files.num_rows == 1 and files.column("deletion_vector").null_count == 0  # the file, with a vector
    df = spark.read.format("delta").load(root)
    assert df.rdd.getNumPartitions() == 2
    expected = [i for i in range(8000) if i % 7 and not 3990 <= i < 4010]
    assert sorted(r.id for r in df.collect()) == expected
    assert sorted(kernel_table(root, ["id"]).column("id").to_pylist()) == expected
    assert sorted(r.id for r in df.filter("id >= 7990").collect()) == [i for i in expected if i >= 7990]


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
    spark.range(5, 7).write.format("delta").mode("append").save(root)
    spark.sql(f"CREATE TEMPORARY VIEW ds_sql_v USING delta OPTIONS (path '{root}')")
    spark.sql(f"CREATE TEMPORARY VIEW ds_sql_o USING airflow_delta OPTIONS (path '{root}', versionAsOf '0')")
    try:
        assert spark.sql("SELECT sum(id) AS s FROM ds_sql_v").collect()[0].s == 21
        assert spark.sql("SELECT count(*) AS n FROM ds_sql_o WHERE id > 2").collect()[0].n == 2
        # catalog tables: the location (and OPTIONS) ride in the schema the catalog keeps
        spark.sql(f"CREATE TABLE ds_sql_t USING delta LOCATION '{root}'")
        spark.sql(f"CREATE TABLE ds_sql_p USING delta OPTIONS (path '{root}', versionAsOf '0')")
        assert spark.sql("SELECT sum(id) AS s FROM ds_sql_t WHERE id > 3").collect()[0].s == 15
        assert spark.table("ds_sql_p").count() == 5
        spark.sql("INSERT INTO ds_sql_t VALUES (7)")
        assert spark.table("ds_sql_t").count() == 8
        assert "airflow_delta" not in DeltaTable.for_path(None, root).snapshot().metadata.schema_string
        # a column added later: the catalog's columns are read (as delta-spark reads them)
        extra = spark.createDataFrame([(8, "x")], "id long, tag string")
        extra.write.format("delta").mode("append").option("mergeSchema", "true").save(root)
        assert spark.table("ds_sql_t").columns == ["id"] and spark.table("ds_sql_t").count() == 9
        # a table declared with its columns never hands its location to the source: refused, naming the fix
        spark.sql(f"CREATE TABLE ds_sql_s (id BIGINT) USING delta LOCATION '{root}'")
        with pytest.raises(Exception, match="No table path given.*WITH \\('path'"):
            spark.sql("SELECT * FROM ds_sql_s").collect()
        assert spark.sql(f"SELECT count(*) AS n FROM ds_sql_s WITH ('path' = '{root}')").collect()[0].n == 9
    finally:
        for t in ("ds_sql_t", "ds_sql_p", "ds_sql_s"):
            spark.sql(f"DROP TABLE IF EXISTS {t}")
        spark.catalog.dropTempView("ds_sql_v")
        spark.catalog.dropTempView("ds_sql_o")
    assert DeltaTable.for_path(None, root).version() == 3  # dropping the catalog entries left the table


def test_one_snapshot_per_planning_and_the_planned_files_are_read(names, tmp_path, monkeypatch):
    """Spark's protocol run in-process: schema() in one worker, the pickled source in the next,
    pushFilters and partitions on one reader, read() on its pickled copy. A pass-through counter on
    the engine's load_snapshot counts the log replays."""
    import pickle

    from pyspark.sql.datasource import GreaterThanOrEqual

    from airflow_delta_provider_apps import datasource
    from airflow_delta_provider_apps.engine.log import snapshot as snapshot_module

    root = str(tmp_path / "pin")
    DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    for i in range(3):
        append_arrow(root, pa.table({"id": [i * 10, i * 10 + 1], "v": ["a", "b"]}))
    loads, real = [], snapshot_module.load_snapshot
    monkeypatch.setattr(snapshot_module, "load_snapshot", lambda *a, **k: loads.append(a[1]) or real(*a, **k))

    def late_commit():  # another writer: its own log replay is not the read's
        n = len(loads)
        append_arrow(root, pa.table({"id": [99], "v": ["late"]}))
        del loads[n:]

    def plan(options, filters=()):
        source = datasource.DeltaDataSource(options)
        schema = source.schema()
        reader = pickle.loads(pickle.dumps(source)).reader(schema)
        reader.pushFilters(list(filters))
        shipped = pickle.dumps(reader)  # Spark pickles the read function before partitions()
        late_commit()
        parts = reader.partitions()
        task = pickle.loads(shipped)
        rows = [r for p in parts for b in task.read(pickle.loads(pickle.dumps(p))) for r in b.to_pylist()]
        return len(shipped), sorted(r["id"] for r in rows)

    size, ids = plan({"path": root}, [GreaterThanOrEqual(("id",), 10)])
    assert len(loads) == 2  # one at analysis, one for pushFilters and partitions together
    assert ids == [10, 11, 20, 21]  # the files of the planned snapshot, filtered; not the late commit
    assert size < 10_000  # the snapshot is not shipped to the tasks
    loads.clear()
    _, ids = plan({"path": root, "versionAsOf": "1"})
    assert len(loads) == 2 and ids == [0, 1]


def test_reads_at_action_time_in_the_analysed_columns(spark, names, tmp_path):
    root = str(tmp_path / "late")
    spark.range(3).selectExpr("id", "CAST(id AS INT) AS n").write.format("delta").mode("append").save(root)
    df = spark.read.format("delta").load(root)
    then = spark.read.format("delta").option("versionAsOf", 0).load(root)
    extra = spark.createDataFrame([(3, 3, "x")], "id long, n int, tag string")
    extra.write.format("delta").mode("append").option("mergeSchema", "true").save(root)
    # as delta-spark: the action reads the table as it is now, in the DataFrame's columns
    assert sorted(tuple(r) for r in df.collect()) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert then.count() == 3  # time travel stays where it was analysed
    DeltaTable.for_path(None, root).change_column_type("n", "bigint")
    # a new plan of the analysed DataFrame (classic Spark keeps a DataFrame's first physical plan)
    with pytest.raises(Exception, match="changed since the read was planned.*n: int -> bigint"):
        df.filter("id >= 0").collect()


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
