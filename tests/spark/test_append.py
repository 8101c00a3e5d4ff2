"""Append (blind append with schema enforcement) through the Spark data plane."""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow.parquet as pq
import pytest
from spark_helpers import commit_info, data_files_on_disk, df_rows, log_actions

from airflow_delta_provider_apps.engine import DeltaTable, SchemaMismatchError
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.partitions import decode_add_path
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = pytest.mark.spark


def _adds(root, version):
    return [a["add"] for a in log_actions(root, version) if "add" in a]


@pytest.mark.parametrize("partitioned", [False, True])
def test_append_commits_files_metrics_and_rows(spark, tmp_path, partitioned):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema="id BIGINT, grp STRING, v DOUBLE", partition_by=["grp"] if partitioned else None
    )
    data1 = [(i, f"g{i % 4}", i * 0.5) for i in range(200)]
    data2 = [(1000 + i, None if i % 5 == 0 else f"g{i % 2}", None) for i in range(30)]
    m1 = t.append(spark.createDataFrame(data1, "id long, grp string, v double"), user_metadata="first")
    m2 = t.append(spark.createDataFrame(data2, "id long, grp string, v double"))
    assert (m1["version"], m2["version"]) == (1, 2)
    assert m1["operation"] == "WRITE" and m1["skipped"] is False

    for m, v, n in ((m1, 1, 200), (m2, 2, 30)):
        adds = _adds(root, v)
        expected = {"numFiles": len(adds), "numOutputRows": n, "numOutputBytes": sum(a["size"] for a in adds)}
        assert m["metrics"] == expected
        assert {k: m[k] for k in expected} == expected  # also at top level, as ints
        ci = commit_info(root, v)
        assert ci["operation"] == "WRITE"
        assert ci["operationParameters"] == {"mode": "Append", "partitionBy": '["grp"]' if partitioned else "[]"}
        assert ci["operationMetrics"] == {k: str(x) for k, x in expected.items()}
        assert ci["isBlindAppend"] is True and ci["readVersion"] == v - 1
        for a in adds:
            assert a["dataChange"] is True
            stats = json.loads(a["stats"])
            assert stats["numRecords"] > 0
            name = a["path"].rsplit("/", 1)[-1]
            assert name.startswith("part-") and name.endswith("-c000.snappy.parquet")
            assert len(name.split("-")[1]) == 5
            on_disk = os.path.join(root, decode_add_path(a["path"]))
            assert os.path.getsize(on_disk) == a["size"]
            if partitioned:
                assert list(a["partitionValues"]) == ["grp"]
                # partition columns are not stored in the files
                assert "grp" not in pq.read_schema(on_disk).names
        assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == n
    assert commit_info(root, 1)["userMetadata"] == "first"
    expected_rows = sorted([tuple(r) for r in data1 + data2], key=repr)
    assert df_rows(t.to_df()) == expected_rows
    assert t.detail()["num_files"] == len(_adds(root, 1)) + len(_adds(root, 2))


def test_schema_enforcement_errors_leave_table_untouched(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT NOT NULL, name STRING, score DOUBLE")
    t.append(spark.createDataFrame([(1, "a", 1.0)], "id long, name string, score double"))
    files_before = data_files_on_disk(root)
    bad = [
        (
            spark.createDataFrame([(1, "a", 1.0, 5)], "id long, name string, score double, extra int"),
            "extra column 'extra'",
        ),
        (
            spark.createDataFrame([("x", "a", 1.0)], "id string, name string, score double"),
            "column 'id' has type string",
        ),
        (spark.createDataFrame([("a", 1.0)], "name string, score double"), "missing non-nullable column 'id'"),
        (spark.createDataFrame([(1.5, "a", 1.0)], "id double, name string, score double"), "'id'"),
    ]
    for df, text in bad:
        with pytest.raises(SchemaMismatchError) as ei:
            t.append(df)
        assert text in str(ei.value), str(ei.value)
        assert t.version() == 1
    # nulls in a NOT NULL column: found while writing, before any commit
    with pytest.raises(SchemaMismatchError) as ei:
        t.append(spark.createDataFrame([(1, "a", 1.0), (None, "b", 2.0)], "id long, name string, score double"))
    assert "NOT NULL" in str(ei.value) and "'id'" in str(ei.value)
    assert t.version() == 1
    assert df_rows(t.to_df()) == [(1, "a", 1.0)]
    # the failed NOT NULL write may leave orphan files, but the log never references them
    snap = load_snapshot(storage_for(root), root)
    assert set(snap.files.column("path").to_pylist()) == files_before


def test_append_normalises_order_case_missing_columns_and_upcasts(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, name STRING, score DOUBLE, day DATE")
    df = spark.createDataFrame([(2.5, 7, "x")], "SCORE float, ID int, Name string")
    t.append(df)
    assert [tuple(r) for r in t.to_df().collect()] == [(7, "x", 2.5, None)]
    assert [f.name for f in t.to_df().schema.fields] == ["id", "name", "score", "day"]


def test_target_file_size_rolls_files(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, payload STRING, p INT", partition_by=["p"])
    n = 20000
    df = spark.range(n).selectExpr("id", "sha2(cast(id as string), 256) as payload", "cast(id % 2 as int) as p")
    target = 64 * 1024
    m = t.append(df, target_file_size=target)
    adds = _adds(root, 1)
    assert m["numFiles"] == len(adds) >= 8
    per_partition = {}
    for a in adds:
        per_partition.setdefault(a["partitionValues"]["p"], []).append(a)
        # rolled near the target: never far above it (one row group may overshoot a little)
        assert a["size"] < 2 * target
    assert set(per_partition) == {"0", "1"} and all(len(v) >= 3 for v in per_partition.values())
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == n
    assert t.to_df().count() == n
    assert t.to_df().agg({"id": "sum"}).collect()[0][0] == n * (n - 1) // 2
    # stats describe each file's own rows
    for a in adds[:4]:
        ids = pq.read_table(os.path.join(root, a["path"]), columns=["id"]).column("id").to_pylist()
        s = json.loads(a["stats"])
        assert (s["numRecords"], s["minValues"]["id"], s["maxValues"]["id"]) == (len(ids), min(ids), max(ids))


def test_idempotent_append_with_app_id(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT")
    df = spark.createDataFrame([(1,), (2,)], "id long")
    first = t.append(df, app_id="dag.task", app_version=3)
    again = t.append(df, app_id="dag.task", app_version=3)
    older = t.append(df, app_id="dag.task", app_version=2)
    newer = t.append(df, app_id="dag.task", app_version=4)
    assert (first["skipped"], again["skipped"], older["skipped"], newer["skipped"]) == (False, True, True, False)
    assert (first["version"], again["version"], newer["version"]) == (1, 1, 2)
    assert again["metrics"]["numOutputRows"] == 0
    assert t.to_df().count() == 4
    txns = [a["txn"] for a in log_actions(root, 1) if "txn" in a]
    assert [(x["appId"], x["version"]) for x in txns] == [("dag.task", 3)]


def test_timestamps_are_utc_instants(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="ts TIMESTAMP, ntz TIMESTAMP_NTZ")
    df = spark.sql(
        "select timestamp'2024-03-01 12:34:56.123456' as ts, timestamp_ntz'2024-03-01 12:34:56.123456' as ntz"
    )
    t.append(df)
    add = _adds(root, 1)[0]
    f = pq.read_table(os.path.join(root, add["path"]))
    assert str(f.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert str(f.schema.field("ntz").type) == "timestamp[us]"
    assert f.column("ts")[0].as_py() == dt.datetime(2024, 3, 1, 12, 34, 56, 123456, tzinfo=dt.UTC)
    stats = json.loads(add["stats"])
    assert stats["minValues"]["ts"].startswith("2024-03-01T12:34:56.123")
    assert [tuple(r) for r in t.to_df().collect()] == [
        (dt.datetime(2024, 3, 1, 12, 34, 56, 123456), dt.datetime(2024, 3, 1, 12, 34, 56, 123456))
    ]


def test_nested_fields_are_matched_by_name_not_position(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark,
        root,
        schema="id INT, s STRUCT<x: INT, y: INT, z: STRING>, "
        "arr ARRAY<STRUCT<a: INT, b: INT>>, m MAP<STRING, STRUCT<p: INT, q: INT>>",
    )
    df = spark.sql(
        "select 1 as id, named_struct('y', 20, 'x', 10) as s, "
        "array(named_struct('b', 2, 'a', 1)) as arr, map('k', named_struct('q', 4, 'p', 3)) as m "
        "union all select 2, cast(null as struct<y:int,x:int>), null, null"
    )
    t.append(df)
    got = sorted(t.to_df().collect(), key=lambda r: r.id)
    assert got[0].s.asDict() == {"x": 10, "y": 20, "z": None}
    assert got[0].arr[0].asDict() == {"a": 1, "b": 2}
    assert got[0].m["k"].asDict() == {"p": 3, "q": 4}
    assert got[1].s is None and got[1].arr is None and got[1].m is None


def test_empty_append_commits_no_files(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, p STRING", partition_by=["p"])
    m = t.append(spark.createDataFrame([], "id long, p string"))
    assert (m["version"], m["metrics"]) == (1, {"numFiles": 0, "numOutputRows": 0, "numOutputBytes": 0})
    assert [k for a in log_actions(root, 1) for k in a] == ["commitInfo"]
    assert t.to_df().count() == 0


def test_null_struct_with_a_not_null_child_is_written(spark, tmp_path):
    # s is NULL in one row: valid in Delta and Spark although s.a is NOT NULL
    root = str(tmp_path / "t")
    ddl = "id BIGINT, s STRUCT<a: INT NOT NULL, b: STRING>"
    t = DeltaTable.create(spark, root, schema=ddl)
    df = spark.createDataFrame([(1, (1, "x")), (2, None)], ddl)
    t.append(df)
    # (collect, not toArrow: pyspark's own toArrow refuses a NULL struct with a NOT NULL field)
    got = sorted((r.asDict(recursive=True) for r in t.to_df().collect()), key=lambda r: r["id"])
    assert got == [{"id": 1, "s": {"a": 1, "b": "x"}}, {"id": 2, "s": None}]
    deltalake = pytest.importorskip("deltalake")
    theirs = sorted(deltalake.DeltaTable(root).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert theirs == got


def test_top_level_column_name_with_a_dot(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="`a.b` INT, id BIGINT, `p.q` STRING", partition_by=["p.q"])
    df = spark.createDataFrame([(1, 10, "x"), (2, 20, "y")], "`a.b` INT, id BIGINT, `p.q` STRING")
    t.append(df)
    got = sorted(t.to_df().toArrow().to_pylist(), key=lambda r: r["id"])
    assert got == [{"a.b": 1, "id": 10, "p.q": "x"}, {"a.b": 2, "id": 20, "p.q": "y"}]
    deltalake = pytest.importorskip("deltalake")
    theirs = sorted(deltalake.DeltaTable(root).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert theirs == got
    assert t.delete("`a.b` = 1")["numDeletedRows"] == 1


def test_a_pandas_made_parquet_appends_into_a_timestamp_column(spark, tmp_path):
    import pyarrow as pa

    src = tmp_path / "pandas.parquet"
    naive = pa.table(
        {"id": pa.array([1], pa.int64()), "ts": pa.array([dt.datetime(2026, 1, 1, 12, 0)], pa.timestamp("us"))}
    )
    pq.write_table(naive, src)  # zone-less timestamps, as pandas writes them
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, ts TIMESTAMP")
    t.append(spark.read.parquet(str(src)))
    got = t.to_df().collect()[0]
    assert got["ts"].replace(tzinfo=None) == dt.datetime(2026, 1, 1, 12, 0)  # read in UTC (the session zone)
    deltalake = pytest.importorskip("deltalake")
    theirs = deltalake.DeltaTable(root).to_pyarrow_table().column("ts")[0].as_py()
    assert theirs == dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def test_rerun_replace_takes_the_place_of_the_earlier_output(spark, tmp_path):
    """A re-run (newer app_version of the same app_id) with on_rerun="replace" removes the files the
    earlier commit appended, in the same commit: one copy of the latest load; refused, before
    anything is written, once later DML rewrote those files; "apply" appends again."""
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v STRING")
    other = t.append(spark.createDataFrame([(100, "other")], "id long, v string"), app_id="b", app_version=1)
    first = t.append(spark.createDataFrame([(1, "a"), (2, "a")], "id long, v string"), app_id="a", app_version=1)
    load = spark.createDataFrame([(1, "b"), (2, "b"), (3, "b")], "id long, v string")
    second = t.append(load, app_id="a", app_version=2, on_rerun="replace")
    assert (other["version"], first["version"], second["version"]) == (1, 2, 3)
    assert second["replaced_version"] == 2 and second["metrics"]["numRemovedFiles"] >= 1
    rows = sorted((r["id"], r["v"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    assert rows == [(1, "b"), (2, "b"), (3, "b"), (100, "other")]  # other apps' rows stay
    removed = {a["remove"]["path"] for a in log_actions(root, 3) if "remove" in a}
    added_first = {a["add"]["path"] for a in log_actions(root, 2) if "add" in a}
    assert removed == added_first
    assert t.append(load, app_id="a", app_version=2, on_rerun="replace")["skipped"]  # a retry: skipped

    DeltaTable.for_path(spark, root).delete("id = 2")  # later DML rewrites the re-run's file
    version = DeltaTable.for_path(spark, root).version()
    with pytest.raises(InvalidArgumentError, match="version 3 appended .* no longer live.*version 4 removed"):
        t.append(load, app_id="a", app_version=3, on_rerun="replace")
    assert DeltaTable.for_path(spark, root).version() == version  # nothing written
    applied = t.append(load, app_id="a", app_version=3, on_rerun="apply")
    assert applied["skipped"] is False and DeltaTable.for_path(spark, root).to_df().count() == 3 + 3
