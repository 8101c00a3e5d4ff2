"""MERGE's memory bound: the source is collected to the driver only when its measured Arrow size is
under a hard cap derived from the driver's memory (and a Spark property that lowers it); above it
the source is joined in Spark, with the same rows as a file-by-file merge of the same input."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.spark import session
from airflow_delta_provider_apps.engine.spark.merge import (
    MAX_SOURCE_CONF,
    collect_cap,
    measured_size,
    positionally_renamed,
)
from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF, memory_bytes

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


def test_the_cap_follows_the_machine_the_driver_memory_and_the_property(spark, monkeypatch):
    driver = memory_bytes(spark.conf.get("spark.driver.memory", "1g"))
    # a local master: what a collect holds is bounded by the JVM; what is read from files, by the machine
    monkeypatch.setattr(session, "LOCAL_SOURCE_SHARE", 1.0)
    assert collect_cap(spark) == min(256 << 20, driver // 8, 1 << 30, session.available_memory())
    monkeypatch.setattr(session, "LOCAL_SOURCE_SHARE", 0.5)
    before = session.available_memory()
    cap = collect_cap(spark, from_files=True)
    assert 0.4 * min(before, session.available_memory()) <= cap <= 0.6 * max(before, session.available_memory())
    spark.conf.set(FILE_WORK_CONF, "tasks")  # shipped to tasks: the shipping cap
    try:
        assert collect_cap(spark, from_files=True) == min(256 << 20, driver // 8)
    finally:
        spark.conf.unset(FILE_WORK_CONF)
    spark.conf.set(MAX_SOURCE_CONF, "64k")
    try:
        assert collect_cap(spark) == collect_cap(spark, from_files=True) == 64 << 10
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


def _upsert_files(spark, tmp_path, monkeypatch, caplog, name: str, *, share: float) -> tuple[dict, pa.Table]:
    """A 600-row parquet source (a plain scan: ``spark.read.parquet``) upserted into 1,000 rows, the
    shipping cap and the hash join's threshold lowered; the result and the merged rows."""
    import logging

    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.merge import by_hash
    from airflow_delta_provider_apps.engine.merge import source as merge_source

    ddl = "id BIGINT, name STRING, score DOUBLE"
    root = str(tmp_path / name)
    t = DeltaTable.create(spark, root, schema=ddl)
    t.append(spark.range(1000).selectExpr("id * 2 AS id", "concat('t', id) AS name", "CAST(id AS DOUBLE) AS score"))
    src = tmp_path / f"{name}.parquet"
    ids = list(range(1500, 2100))  # half update (even ids under 2000), the rest insert
    pq.write_table(pa.table({"id": ids, "name": [f"s{i}" for i in ids], "score": [-float(i) for i in ids]}), src)
    monkeypatch.setattr(merge_source, "MAX_SOURCE_BYTES", 1)  # over the shipping cap
    monkeypatch.setattr(by_hash, "HASH_JOIN_ROWS", 100)
    monkeypatch.setattr(session, "LOCAL_SOURCE_SHARE", share)
    with caplog.at_level(logging.INFO, logger="airflow_delta_provider_apps.engine.spark.merge"):
        result = t.upsert(spark.read.parquet(str(src)), ["id"])
    return result, deltalake.DeltaTable(root).to_pyarrow_table().sort_by("id")


def _model() -> pa.Table:
    """The upsert above in plain Python."""
    rows = {i * 2: (f"t{i}", float(i)) for i in range(1000)} | {i: (f"s{i}", -float(i)) for i in range(1500, 2100)}
    ids = sorted(rows)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [rows[i][0] for i in ids],
            "score": [rows[i][1] for i in ids],
        }
    )


def test_a_file_source_over_the_shipping_cap_is_held_and_hash_joined_on_a_local_master(
    spark, tmp_path, monkeypatch, caplog
):
    result, got = _upsert_files(spark, tmp_path, monkeypatch, caplog, "held", share=0.25)
    assert result["strategy"] == "hash_join", result
    assert got.equals(_model())
    m = result["metrics"]
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numSourceRows"]) == (250, 350, 600)
    assert "MERGE source read from its files: 600 rows" in caplog.text and "local master" in caplog.text


def test_a_file_source_over_the_machine_cap_is_joined_in_spark(spark, tmp_path, monkeypatch, caplog):
    result, got = _upsert_files(spark, tmp_path, monkeypatch, caplog, "joined", share=0.0)
    assert result["strategy"] == "join", result
    assert got.equals(_model())
    assert "MERGE source joined in Spark" in caplog.text


def test_only_a_plain_scan_of_parquet_files_is_read_from_its_files(spark, tmp_path, caplog):
    """Read from its files, the rows and types are Spark's; whatever Spark reads by its own rules
    (partition columns from folder names, a filter, timestamps without a time zone) is Spark's."""
    import datetime
    import logging
    import os

    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.spark.merge import scanned_files_as_arrow

    folder = tmp_path / "plain"
    folder.mkdir()
    for k in range(2):
        part = pa.table({"id": pa.array([k * 10 + i for i in range(5)], pa.int32()), "s": ["a", None, "c", "d", "e"]})
        pq.write_table(part, folder / f"part-{k}.parquet")
    plain = spark.read.parquet(str(folder))
    for df in (plain, plain.select("s", "id")):
        got = scanned_files_as_arrow(df)
        assert got is not None and got.sort_by("id").equals(df.toArrow().sort_by("id"))
    assert scanned_files_as_arrow(plain.filter("id > 3")) is None
    assert scanned_files_as_arrow(plain.selectExpr("id + 1 AS id")) is None
    spark.range(4).selectExpr("id", "id % 2 AS k").write.partitionBy("k").parquet(str(tmp_path / "parts"))
    assert scanned_files_as_arrow(spark.read.parquet(str(tmp_path / "parts"))) is None
    naive = pa.table({"id": [1], "at": pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("us"))})
    pq.write_table(naive, tmp_path / "naive.parquet")
    assert scanned_files_as_arrow(spark.read.parquet(str(tmp_path / "naive.parquet"))) is None
    # files far smaller than their rows: the read stops once what it holds is over the cap
    pq.write_table(pa.table({"s": ["x" * 100] * 20_000}), tmp_path / "dense.parquet")
    dense = spark.read.parquet(str(tmp_path / "dense.parquet"))
    assert os.path.getsize(tmp_path / "dense.parquet") < (64 << 10) < dense.toArrow().nbytes
    spark.conf.set(MAX_SOURCE_CONF, "64k")
    try:
        with caplog.at_level(logging.INFO, logger="airflow_delta_provider_apps.engine.spark.merge"):
            assert scanned_files_as_arrow(dense) is None
    finally:
        spark.conf.unset(MAX_SOURCE_CONF)
    assert "not read from its files: its rows and their merge's 200 B per row over the cap of 0.1 MiB" in caplog.text


_READ_PEAK = """
import sys
import pyarrow as pa
from airflow_delta_provider_apps.engine.spark.merge import local_parquet_dataset, read_within

got = read_within(local_parquet_dataset([sys.argv[1]]), ["id", "s"], 1 << 40)
print(got.num_rows, got.nbytes, pa.default_memory_pool().max_memory())
"""


def test_a_source_read_from_its_files_holds_about_itself_while_it_is_read(tmp_path):
    """The read's peak of Arrow memory (a fresh process: the pool's peak is its own) is the rows it
    returns plus the batches read ahead, not also the file's bytes (pre-buffered, nearly twice)."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    n, path = 400_000, str(tmp_path / "s.parquet")  # uncompressed: the file is as large as its rows
    rows = pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"{i:040d}" for i in range(n)]})
    pq.write_table(rows, path, compression="none", use_dictionary=False, row_group_size=20_000)
    out = subprocess.run([sys.executable, "-c", _READ_PEAK, path], capture_output=True, text=True, check=True)
    rows, nbytes, peak = map(int, out.stdout.split())
    assert rows == 400_000 and nbytes > 16 << 20
    assert peak < 1.4 * nbytes, (peak, nbytes)


def test_a_source_read_from_its_files_counts_what_merging_each_row_costs(tmp_path):
    """The cap of a source read from its files holds its Arrow bytes plus the hash join's working
    memory per row: many narrow rows are not read although their bytes alone are under it."""
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.spark.merge import HELD_ROW_BYTES, local_parquet_dataset, read_within

    path = str(tmp_path / "narrow.parquet")
    pq.write_table(pa.table({"id": pa.array(range(50_000), pa.int64())}), path, row_group_size=5_000)
    dataset = local_parquet_dataset([path])
    got = read_within(dataset, ["id"], 1 << 40)
    assert got is not None and got.column("id").to_pylist() == list(range(50_000))
    cost = got.nbytes + 50_000 * HELD_ROW_BYTES
    assert read_within(dataset, ["id"], cost).equals(got)
    assert read_within(dataset, ["id"], cost - 1) is None
    assert read_within(dataset, ["id"], 10 * got.nbytes) is None  # ten times its bytes: still over
