"""Spark's own parquet writer (the join-merge's output, ``spark.write.write_native``): every file it
writes gets the stats the core writer computes from the same rows (read back here independently),
partition values from its Hive folders exactly as the log needs them (escaped characters, NULL), and
the tables it writes are read back by deltalake and by both of our scans with the same rows."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_helpers import df_rows

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.partitions import decode_add_path
from airflow_delta_provider_apps.engine.paths import file_locations
from airflow_delta_provider_apps.engine.spark.scan import NATIVE_SCAN_CONF
from airflow_delta_provider_apps.engine.spark.write import (
    NATIVE_WRITE_CONF,
    conform_dataframe,
    native_write_applies,
    write_native,
)
from airflow_delta_provider_apps.engine.stats import StatsCollector, stats_config_from_properties
from airflow_delta_provider_apps.engine.writer import table_write_spec

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

DDL = "id BIGINT, s STRING, d DATE, ts TIMESTAMP, dec DECIMAL(10,2), f DOUBLE, b BOOLEAN, p STRING"
PARTS = ["x", "a=b/c:d", None, "plain-1"]


def _rows(n: int, seed: int, parts=PARTS) -> list[tuple]:
    r = random.Random(seed)

    def maybe(v):
        return None if r.random() < 0.1 else v

    return [
        (
            i,
            maybe("é" * r.randint(0, 3) + "k" * r.randint(0, 40)),  # past the 32-character stats prefix too
            maybe(dt.date(2020, 1, 1) + dt.timedelta(days=r.randint(-5000, 5000))),
            maybe(dt.datetime(2021, 3, 4, tzinfo=dt.UTC) + dt.timedelta(microseconds=r.randint(-(10**12), 10**12))),
            maybe(Decimal(r.randint(-(10**9), 10**9)) / 100),
            maybe(r.choice([r.uniform(-1e6, 1e6), float("nan"), -0.0])),
            maybe(r.random() < 0.5),
            r.choice(parts),
        )
        for i in range(n)
    ]


def test_native_files_carry_the_core_writers_stats_and_log_partition_values(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"])
    snapshot = t.snapshot()
    spec = table_write_spec(snapshot)
    assert native_write_applies(spark, spec) is None
    data = _rows(3000, 1)
    df = conform_dataframe(spark.createDataFrame(data, DDL).repartition(3), snapshot.schema.to_json())
    result = write_native(df, spec)
    assert result.num_output_rows == len(data) == sum(json.loads(a.stats)["numRecords"] for a in result.adds)
    data_schema = snapshot.schema.without({"p"})
    config = stats_config_from_properties(spec.configuration)
    seen = {}
    for add, location in zip(result.adds, file_locations(root, pa.array([a.path for a in result.adds], pa.string()))):
        table = pq.read_table(location)
        mine, core = json.loads(add.stats), json.loads(StatsCollector(data_schema, **config).update(table).to_json())
        # float bounds are left out (parquet-java's are wrong around NaN): everything else is equal
        assert "f" not in mine["minValues"] and "f" not in mine["maxValues"]
        core["minValues"].pop("f", None), core["maxValues"].pop("f", None)
        assert mine == core
        p = add.partition_values["p"]
        assert f"p={p}" not in decode_add_path(add.path) or p in ("x", "plain-1")  # escaped in the folder
        seen[p] = seen.get(p, 0) + table.num_rows
    assert seen == {p: sum(1 for r in data if r[-1] == p) for p in PARTS}


def test_a_native_write_is_refused_where_the_core_writer_is_needed(spark, tmp_path):
    t = DeltaTable.create(spark, str(tmp_path / "t"), schema="id BIGINT NOT NULL, v INT")
    assert "NOT NULL" in native_write_applies(spark, table_write_spec(t.snapshot()))
    spark.conf.set(NATIVE_WRITE_CONF, "false")
    try:
        u = DeltaTable.create(spark, str(tmp_path / "u"), schema="id BIGINT")
        assert native_write_applies(spark, table_write_spec(u.snapshot())) == f"{NATIVE_WRITE_CONF}=false"
    finally:
        spark.conf.unset(NATIVE_WRITE_CONF)


def test_a_join_merge_written_natively_reads_back_everywhere(spark, tmp_path, monkeypatch):
    """The join strategy (forced) writes Spark's own files into a folder of the job: deltalake reads
    the merged rows, and our scan reads them natively (partition values joined per file) with the
    same rows as the Arrow path."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, partition_by=["p"])
    plain = ["x", "plain-1", None]  # folder names Spark's own scan reads as they are (escaped ones: Arrow path)
    t.append(spark.createDataFrame(_rows(400, 2, plain), DDL))
    source = [(i, "new", None, None, None, None, True, p) for i, p in zip(range(300, 700), plain * 134)]
    result = t.upsert(spark.createDataFrame(source, DDL), ["id"])
    assert result["strategy"] == "join"
    assert (result["numTargetRowsUpdated"], result["numTargetRowsInserted"]) == (100, 300)
    expected = {r[0]: r for r in _rows(400, 2, plain)} | {r[0]: r for r in source}
    got = deltalake.DeltaTable(root).to_pyarrow_table(columns=["id", "s", "p"]).to_pylist()
    assert sorted((r["id"], r["s"], r["p"]) for r in got) == sorted((r[0], r[1], r[7]) for r in expected.values())
    native = t.to_df()
    spark.conf.set(NATIVE_SCAN_CONF, "false")
    try:
        arrow = df_rows(t.to_df())
    finally:
        spark.conf.unset(NATIVE_SCAN_CONF)
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()
    assert df_rows(native) == arrow and len(arrow) == len(expected)
