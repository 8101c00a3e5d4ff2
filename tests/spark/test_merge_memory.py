"""MERGE's memory bound: the source is collected to the driver only when its measured Arrow size is
under a hard cap derived from the driver's memory (and a Spark property that lowers it); above it
the source is joined in Spark, with the same rows as a file-by-file merge of the same input."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.spark.merge import (
    MAX_SOURCE_CONF,
    collect_cap,
    measured_size,
    positionally_renamed,
)
from airflow_delta_provider_apps.engine.spark.session import memory_bytes

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark


def test_the_measured_size_is_the_arrow_size(spark):
    from airflow_delta_provider_apps.engine.schema import parse_schema

    ddl = "id BIGINT, name STRING, score DOUBLE, tags ARRAY<STRING>, flag BOOLEAN"
    rows = [(i, "x" * (i % 97), i / 3, ["a" * (i % 5)] * (i % 3), i % 2 == 0) for i in range(5000)]
    df = positionally_renamed(spark.createDataFrame(rows, ddl), "__s")
    n, nbytes = measured_size(df, parse_schema(ddl))
    actual = df.toArrow().nbytes
    assert n == 5000
    assert 0.9 * actual <= nbytes <= 1.5 * actual, (nbytes, actual)  # an estimate, never far below


def test_the_cap_follows_the_driver_memory_and_the_property(spark):
    driver = memory_bytes(spark.conf.get("spark.driver.memory", "1g"))
    assert collect_cap(spark) == min(256 << 20, driver // 8)
    spark.conf.set(MAX_SOURCE_CONF, "64k")
    try:
        assert collect_cap(spark) == 64 << 10
        spark.conf.set(MAX_SOURCE_CONF, "64 megs")  # a typo is refused, not read as "no limit"
        with pytest.raises(InvalidArgumentError, match="maxSourceBytes is not a size"):
            collect_cap(spark)
    finally:
        spark.conf.unset(MAX_SOURCE_CONF)


def test_a_source_over_the_cap_is_joined_with_the_same_rows(spark, tmp_path):
    target = [(i, f"t{i}", float(i)) for i in range(0, 3000, 2)]
    source = [(i, "s" * 50 + str(i), -float(i)) for i in range(1000, 4000)]  # ~200 kB as Arrow
    ddl = "id BIGINT, name STRING, score DOUBLE"
    results = {}
    for name, cap in (("by_file", None), ("join", "16k")):
        root = str(tmp_path / name)
        t = DeltaTable.create(spark, root, schema=ddl)
        t.append(spark.createDataFrame(target, ddl).repartition(4))
        if cap:
            spark.conf.set(MAX_SOURCE_CONF, cap)
        try:
            results[name] = t.upsert(spark.createDataFrame(source, ddl), ["id"])
        finally:
            spark.conf.unset(MAX_SOURCE_CONF)
        got = deltalake.DeltaTable(root).to_pyarrow_table().sort_by("id")
        results[name + "_rows"] = got
    assert results["by_file"]["strategy"] == "file_by_file" and results["join"]["strategy"] == "join"
    expected = {i: (n, s) for i, n, s in target} | {i: (n, s) for i, n, s in source}
    want = pa.table(
        {
            "id": pa.array(sorted(expected), pa.int64()),
            "name": [expected[i][0] for i in sorted(expected)],
            "score": [expected[i][1] for i in sorted(expected)],
        }
    )
    assert results["by_file_rows"].equals(want) and results["join_rows"].equals(want)
    for key in ("numTargetRowsInserted", "numTargetRowsUpdated", "numSourceRows"):
        assert results["by_file"]["metrics"][key] == results["join"]["metrics"][key]


def test_a_matched_only_merge_by_join_rewrites_only_the_touched_files(spark, tmp_path):
    """The inner join first: the pairs find the one touched file; its other rows are copied."""
    ddl = "id BIGINT, name STRING, score DOUBLE"
    target = spark.range(4000).selectExpr("id", "concat('t', id) AS name", "CAST(id AS DOUBLE) AS score")
    # 4 files of 1,000 consecutive ids each
    source = [(i, "changed", -1.0) for i in range(1000, 1010)] + [(99_999, "nowhere", 0.0)]
    base = str(tmp_path / "base")
    created = DeltaTable.create(spark, base, schema=ddl)
    for k in range(4):  # one file per append: exact boundaries (a range repartition's are sampled)
        created.append(target.filter(f"id >= {k * 1000} AND id < {(k + 1) * 1000}").coalesce(1))
    results = {}
    for name, cap in (("by_file", None), ("join", "1b")):  # the same files for both
        root = str(tmp_path / name)
        shutil.copytree(base, root)
        t = DeltaTable.for_path(spark, root)
        if cap:
            spark.conf.set(MAX_SOURCE_CONF, cap)
        try:
            builder = t.merge(spark.createDataFrame(source, ddl), "target.id = source.id")
            results[name] = builder.when_matched_update({"name": "source.name"}, "source.id % 2 = 0").execute()
        finally:
            spark.conf.unset(MAX_SOURCE_CONF)
        results[name + "_rows"] = deltalake.DeltaTable(root).to_pyarrow_table().sort_by("id")
    m = results["join"]["metrics"]
    assert results["join"]["strategy"] == "join"
    assert (m["numTargetFilesRemoved"], m["numTargetRowsUpdated"]) == (1, 5)
    assert 900 < m["numTargetRowsCopied"] < 1100  # the touched file's other rows, not the table's
    same = ("numTargetFilesRemoved", "numTargetRowsUpdated", "numTargetRowsCopied")
    assert {k: m[k] for k in same} == {k: results["by_file"]["metrics"][k] for k in same}
    # a join writes a file per writing task: at most the session's parallelism for this small output
    assert 1 <= m["numTargetFilesAdded"] <= spark.sparkContext.defaultParallelism
    assert results["join_rows"].equals(results["by_file_rows"])
    names = dict(zip(results["join_rows"]["id"].to_pylist(), results["join_rows"]["name"].to_pylist()))
    assert [names[i] for i in range(1000, 1004)] == ["changed", "t1001", "changed", "t1003"]
    assert len(names) == 4000
