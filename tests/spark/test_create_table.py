"""CREATE TABLE: schema forms, partitioning, properties, IF NOT EXISTS, errors, create-as-select.

Tests that do not ask for the ``spark`` fixture run without a JVM (CREATE TABLE without a source
is log-only).
"""

from __future__ import annotations

import json
import os

import deltalake
import pyarrow as pa
import pytest
from spark_helpers import commit_info, data_files_on_disk, df_rows, log_actions, rows

from airflow_delta_provider_apps.engine import (
    DeltaTable,
    InvalidArgumentError,
    InvalidSchemaError,
    TableAlreadyExistsError,
)

pytestmark = pytest.mark.spark

DDL = "id BIGINT NOT NULL, name STRING COMMENT 'who', score DOUBLE, day DATE"
EXPECTED_FIELDS = [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {"comment": "who"}},
    {"name": "score", "type": "double", "nullable": True, "metadata": {}},
    {"name": "day", "type": "date", "nullable": True, "metadata": {}},
]


def test_create_from_ddl_writes_protocol_metadata_commitinfo(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None,
        root,
        schema=DDL,
        partition_by=["day"],
        description="events",
        name="events",
        properties={"delta.appendOnly": "true", "owner": "team-a"},
    )
    assert t.last_result == {
        "operation": "CREATE TABLE",
        "table_uri": root,
        "version": 0,
        "skipped": False,
        "metrics": {},
        "created": True,
        "committed": True,
    }
    actions = log_actions(root, 0)
    kinds = [next(iter(a)) for a in actions]
    assert sorted(kinds) == ["commitInfo", "metaData", "protocol"]
    md = next(a["metaData"] for a in actions if "metaData" in a)
    assert json.loads(md["schemaString"])["fields"] == EXPECTED_FIELDS
    assert md["partitionColumns"] == ["day"]
    assert md["configuration"] == {"delta.appendOnly": "true", "owner": "team-a"}
    assert md["description"] == "events" and md["name"] == "events"
    assert md["format"] == {"provider": "parquet", "options": {}}
    ci = commit_info(root, 0)
    assert ci["operation"] == "CREATE TABLE"
    assert ci["operationParameters"]["partitionBy"] == '["day"]'
    assert json.loads(ci["operationParameters"]["properties"]) == md["configuration"]
    assert ci["operationParameters"]["description"] == "events"

    d = DeltaTable.for_path(None, root).detail()
    assert d["version"] == 0 and d["num_files"] == 0 and d["size_in_bytes"] == 0
    assert d["partition_columns"] == ["day"]
    assert d["schema"]["fields"] == EXPECTED_FIELDS
    assert d["configuration"]["delta.appendOnly"] == "true"
    assert d["description"] == "events" and d["name"] == "events"
    assert d["id"] == md["id"] and d["created_time"] == md["createdTime"]
    assert d["protocol"]["min_reader_version"] >= 1 and d["protocol"]["min_writer_version"] >= 2
    assert set(d) >= {
        "version",
        "num_files",
        "size_in_bytes",
        "partition_columns",
        "schema",
        "protocol",
        "configuration",
        "id",
        "name",
        "description",
        "created_time",
    }


def test_schema_forms_give_the_same_schema(tmp_path):
    from pyspark.sql.types import DateType, DoubleType, LongType, StringType, StructField, StructType

    spark_schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("name", StringType(), True, {"comment": "who"}),
            StructField("score", DoubleType(), True),
            StructField("day", DateType(), True),
        ]
    )
    delta_json = json.dumps({"type": "struct", "fields": EXPECTED_FIELDS})
    for i, schema in enumerate([DDL, spark_schema, delta_json, json.loads(delta_json)]):
        root = str(tmp_path / f"t{i}")
        DeltaTable.create(None, root, schema=schema)
        assert DeltaTable.for_path(None, root).detail()["schema"]["fields"] == EXPECTED_FIELDS, schema


def test_empty_table_is_a_valid_version_0_for_deltalake(tmp_path):
    root = str(tmp_path / "empty")
    DeltaTable.create(None, root, schema="id BIGINT, name STRING, ts TIMESTAMP, d DECIMAL(10,2)", partition_by=["name"])
    dt = deltalake.DeltaTable(root)
    assert dt.version() == 0
    table = dt.to_pyarrow_table()
    assert table.num_rows == 0
    assert dict(zip(table.schema.names, table.schema.types)) == {
        "id": pa.int64(),
        "name": pa.string(),
        "ts": pa.timestamp("us", tz="UTC"),
        "d": pa.decimal128(10, 2),
    }
    assert dt.metadata().partition_columns == ["name"]


def test_empty_table_reads_as_empty_dataframe(spark, tmp_path):
    root = str(tmp_path / "empty")
    t = DeltaTable.create(spark, root, schema="id BIGINT, tags ARRAY<STRING>, m MAP<STRING, INT>")
    df = t.to_df()
    assert df.count() == 0
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"),
        ("tags", "array<string>"),
        ("m", "map<string,int>"),
    ]


def test_if_not_exists_and_already_exists(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="a INT", description="first")
    again = DeltaTable.create(None, root, schema="b STRING", if_not_exists=True)
    assert again.last_result["skipped"] is True and again.last_result["version"] == 0
    with pytest.raises(TableAlreadyExistsError) as ei:
        DeltaTable.create(None, root, schema="b STRING")
    assert "already" in str(ei.value) and "if_not_exists" in ei.value.fix
    d = DeltaTable.for_path(None, root).detail()
    assert d["version"] == 0 and d["description"] == "first"
    assert [f["name"] for f in d["schema"]["fields"]] == ["a"]
    # the failed creates wrote nothing: the one commit and its checksum
    assert sorted(os.listdir(os.path.join(root, "_delta_log"))) == [
        "00000000000000000000.crc",
        "00000000000000000000.json",
    ]


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"partition_by": ["nope"]}, InvalidArgumentError, "not in the schema"),
        ({"partition_by": ["s"]}, InvalidArgumentError, "primitive"),
        ({"partition_by": ["a", "s"], "schema": "a INT, s INT"}, InvalidArgumentError, "all columns"),
        ({"properties": {"delta.noSuchThing": "1"}}, InvalidArgumentError, "Unknown Delta table property"),
        ({"properties": {"delta.appendOnly": "maybe"}}, InvalidArgumentError, "not a boolean"),
        ({"properties": {"delta.checkpointInterval": "0"}}, InvalidArgumentError, "delta.checkpointInterval"),
        ({"properties": {"delta.logRetentionDuration": "3 fortnights"}}, InvalidArgumentError, "logRetentionDuration"),
        ({"schema": "a INT, A STRING"}, InvalidSchemaError, ""),
        ({"schema": "a NOSUCHTYPE"}, InvalidSchemaError, ""),
    ],
)
def test_invalid_create_writes_nothing(tmp_path, kwargs, error, text):
    root = tmp_path / "t"
    args = {"schema": "a INT, s STRUCT<x: INT>", **kwargs}
    with pytest.raises(error) as ei:
        DeltaTable.create(None, str(root), **args)
    assert text in str(ei.value)
    assert not (root / "_delta_log").exists()


def test_property_keys_are_canonicalised(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(
        None, root, schema="a INT", properties={"delta.appendonly": True, "delta.checkpointInterval": 5, "x.y": "z"}
    )
    conf = DeltaTable.for_path(None, root).detail()["configuration"]
    assert conf == {"delta.appendOnly": "true", "delta.checkpointInterval": "5", "x.y": "z"}


def test_create_as_select(spark, tmp_path):
    root = str(tmp_path / "ctas")
    src = spark.createDataFrame([(i, f"n{i % 3}", float(i)) for i in range(50)], "id long, grp string, v double")
    t = DeltaTable.create(spark, root, schema=None, source_df=src, partition_by=["grp"], description="ctas")
    r = t.last_result
    assert r["operation"] == "CREATE TABLE AS SELECT" and r["version"] == 0
    actions = log_actions(root, 0)
    adds = [a["add"] for a in actions if "add" in a]
    assert r["metrics"] == {"numFiles": len(adds), "numOutputRows": 50, "numOutputBytes": sum(a["size"] for a in adds)}
    assert {a["partitionValues"]["grp"] for a in adds} == {"n0", "n1", "n2"}
    ci = commit_info(root, 0)
    assert ci["operation"] == "CREATE TABLE AS SELECT"
    assert ci["operationMetrics"]["numOutputRows"] == "50"
    assert df_rows(t.to_df()) == df_rows(src.select("id", "grp", "v"))
    assert rows(deltalake.DeltaTable(root).to_pyarrow_table().select(["id", "grp", "v"])) == df_rows(src)
    assert len(data_files_on_disk(root)) == len(adds)


def test_create_as_select_with_declared_schema_casts_and_enforces(spark, tmp_path):
    src = spark.createDataFrame([(1, "a")], "id int, s string")
    root = str(tmp_path / "ok")
    t = DeltaTable.create(spark, root, schema="id BIGINT, s STRING, extra DOUBLE", source_df=src)
    assert [tuple(r) for r in t.to_df().collect()] == [(1, "a", None)]
    from airflow_delta_provider_apps.engine import SchemaMismatchError

    bad = str(tmp_path / "bad")
    with pytest.raises(SchemaMismatchError):
        DeltaTable.create(spark, bad, schema="id BIGINT", source_df=src)
    assert not os.path.exists(os.path.join(bad, "_delta_log"))
    assert data_files_on_disk(bad) == set() if os.path.exists(bad) else True


def test_protocol_properties_are_consumed_not_stored(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(
        None,
        root,
        schema="a INT, ts TIMESTAMP_NTZ",
        properties={"delta.minWriterVersion": "2", "delta.feature.appendOnly": "supported"},
    )
    d = DeltaTable.for_path(None, root).detail()
    assert d["configuration"] == {}
    assert (d["protocol"]["min_reader_version"], d["protocol"]["min_writer_version"]) == (3, 7)
    assert "timestampNtz" in d["protocol"]["reader_features"]
    with pytest.raises(InvalidArgumentError) as ei:
        DeltaTable.create(None, str(tmp_path / "u"), schema="a INT", properties={"delta.minWriterVersion": "4"})
    assert "delta.minWriterVersion" in str(ei.value)
    assert not (tmp_path / "u" / "_delta_log").exists()
