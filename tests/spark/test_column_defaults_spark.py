"""Column defaults through Spark: a Spark append and a MERGE insert (its rows computed in Spark) that
leave columns out write their defaults, the same binding as in process; compared with plain Python."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

pytestmark = pytest.mark.spark

DDL = "id BIGINT NOT NULL, status STRING NOT NULL DEFAULT 'new', price DECIMAL(6,2) DEFAULT 9.5, since DATE DEFAULT DATE'2026-01-01', note STRING"
COLUMNS = ("id", "status", "price", "since", "note")
DEFAULTS = {"status": "new", "price": decimal.Decimal("9.50"), "since": dt.date(2026, 1, 1), "note": None}


def _model(given: list[dict]) -> list:
    return sorted(tuple({**DEFAULTS, **r}[c] for c in COLUMNS) for r in given)


def test_a_spark_append_and_a_merge_insert_get_the_defaults(spark, tmp_path, file_tasks, monkeypatch):
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)  # the MERGE's rows computed in Spark
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=DDL, properties={"delta.feature.allowColumnDefaults": "supported"})
    t.append(spark.createDataFrame([(1, "paid"), (2, None)], "id long, note string"))
    source = spark.createDataFrame([(2, "again"), (3, "fresh")], "id long, note string")
    t.merge(source, "target.id = source.id").when_matched_update({"note": "source.note"}).when_not_matched_insert(
        {"id": "source.id", "note": "source.note"}
    ).execute()
    want = _model([{"id": 1, "note": "paid"}, {"id": 2, "note": "again"}, {"id": 3, "note": "fresh"}])
    ours = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted(tuple(r[c] for c in COLUMNS) for r in ours) == want
    theirs = DeltaTable.for_path(spark, root).to_df().collect()
    assert sorted(tuple(r[c] for c in COLUMNS) for r in theirs) == want


def test_a_collated_table_takes_a_spark_append_and_keeps_its_collation(spark, tmp_path):
    """A table created from DDL with ``COLLATE UTF8_LCASE`` has the schema pyspark 4 writes for that
    column; an append of plain strings keeps it, and Spark's own filter follows the collation."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, name STRING COLLATE UTF8_LCASE")
    pyspark_schema = StructType([StructField("id", LongType()), StructField("name", StringType("UTF8_LCASE"))])
    assert DeltaTable(None, root).snapshot().schema.to_json() == json.loads(pyspark_schema.json())
    t.append(spark.createDataFrame([(1, "Anna"), (2, "bob")], "id long, name string"))
    assert DeltaTable(None, root).snapshot().schema.to_json() == json.loads(pyspark_schema.json())
    df = DeltaTable.for_path(spark, root).to_df()
    assert sorted(r["id"] for r in df.filter("name = 'ANNA'").collect()) == [1]


@pytest.mark.parametrize("by_join", [False, True], ids=["file_by_file", "spark_join"])
def test_a_merge_on_a_collated_key_compares_bytes_on_both_paths(spark, tmp_path, file_tasks, monkeypatch, by_join):
    """The engine compares strings by their bytes: a MERGE ON a UTF8_LCASE key matches 'bob' only, not
    'ANNA' with 'Anna', whether it runs file by file or as a Spark join (where Spark 4 would otherwise
    refuse to compare the collated column with the source's plain one); a DELETE likewise."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    if by_join:
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="name STRING COLLATE UTF8_LCASE, v INT")
    t.append(spark.createDataFrame([("Anna", 1), ("bob", 2)], "name string, v int"))
    source = spark.createDataFrame([("ANNA", 10), ("bob", 20)], "name string, v int")
    res = (
        t.merge(source, "target.name = source.name")
        .when_matched_update({"v": "source.v"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 1)
    DeltaTable.for_path(spark, root).delete("name = 'ANNA'")
    rows = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted((r["name"], r["v"]) for r in rows) == [("Anna", 1), ("bob", 20)]
