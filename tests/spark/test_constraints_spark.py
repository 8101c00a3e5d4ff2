"""CHECK constraints and generated columns on Spark's write paths: an append whose data leaves the
generated column out (computed in the writing tasks), one that breaks a constraint (the task's error
names it, nothing committed), and an overwrite."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import ConstraintViolationError

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "day", "type": "date", "nullable": True, "metadata": {}},
        {"name": "year", "type": "integer", "nullable": False, "metadata": {"delta.generationExpression": "year(day)"}},
    ],
}


def test_spark_writes_compute_generated_columns_and_check_constraints(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema=json.dumps(SCHEMA), partition_by=["year"], properties={"delta.constraints.ids": "id >= 0"}
    )
    rows = spark.sql("SELECT id, date_add(DATE'2024-12-30', CAST(id AS INT)) AS day FROM range(4)")
    t.append(rows.repartition(2))
    got = sorted((r["id"], r["year"]) for r in t.to_df().collect())
    assert got == [(0, 2024), (1, 2024), (2, 2025), (3, 2025)]
    assert {f["partition_values"][0][1] for f in t.snapshot().files.to_pylist()} == {"2024", "2025"}
    version = t.version()
    with pytest.raises(ConstraintViolationError, match=r"CHECK constraint ids \(id >= 0\) violated .*id : -1"):
        t.append(spark.sql("SELECT CAST(-1 AS BIGINT) AS id, DATE'2025-01-01' AS day"))
    assert DeltaTable.for_path(spark, root).version() == version
    t.overwrite(spark.sql("SELECT CAST(7 AS BIGINT) AS id, DATE'2026-05-01' AS day"), replace_where="year = 2026")
    assert sorted((r["id"], r["year"]) for r in t.to_df().collect())[-1] == (7, 2026)


@pytest.mark.parametrize("join", [False, True])
def test_identity_values_from_spark_tasks_and_merge_inserts(spark, tmp_path, monkeypatch, join):
    """Appends in several Spark tasks and a MERGE's inserts (file by file, or Spark's join) assign
    unique identity values; the high water mark passes every one."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    if join:
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    md = {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": md},
            {"name": "k", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema=json.dumps(schema))
    t.append(spark.createDataFrame([(f"k{i}",) for i in range(8)], "k STRING").repartition(3))
    source = spark.createDataFrame([("k1",), ("new1",), ("new2",)], "k STRING")
    DeltaTable.for_path(spark, root).merge(source, "target.k = source.k").when_not_matched_insert_all().execute()
    rows = [(r["id"], r["k"]) for r in DeltaTable.for_path(spark, root).to_df().collect()]
    ids = [i for i, _ in rows]
    assert len(rows) == 10 and len(set(ids)) == 10 and None not in ids
    hwm = DeltaTable.for_path(spark, root).snapshot().schema.find("id").metadata["delta.identity.highWaterMark"]
    assert hwm == max(ids)
    with pytest.raises(Exception, match="GENERATED ALWAYS"):
        t.append(spark.createDataFrame([(1, "x")], "id BIGINT, k STRING"))
