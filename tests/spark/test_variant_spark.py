"""Variant columns through Spark 4: rows made by Spark's ``parse_json``, written by Spark's own variant writer
(the native write) and committed by us; appended to, deleted from by a variant path, merged and optimized
through the Spark plane; read back by our scans, deltalake and delta-kernel-rs. Each value's JSON is compared
with Spark's ``to_json`` of the same value (an independent check of our decoder); ``variant_get`` conditions
are evaluated by Spark and by us on the same values; a file Spark writes shredded is read back whole."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from outside_readers import deltalake_table, kernel_table
from txn_helpers import txn

from airflow_delta_provider_apps.datasource import register
from airflow_delta_provider_apps.engine import DeltaTable, variant
from airflow_delta_provider_apps.engine.expr.evaluate import evaluate
from airflow_delta_provider_apps.engine.expr.parse import parse_expression
from airflow_delta_provider_apps.engine.paths import file_locations
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.spark.write import native_write_applies, write_native
from airflow_delta_provider_apps.engine.writer import table_write_spec

pytestmark = pytest.mark.spark

DOCS = {
    1: '{"kind": "order", "total": 12.5, "items": [{"sku": "a", "n": 2}], "at": "2026-01-02"}',
    2: '{"kind": "refund", "total": -3, "note": null}',
    3: None,
    4: '"plain string"',
    5: '{"kind": "order", "total": 1e20, "nested": {"deep": [1, 2.25, {"x": true}]}, "big": 12345678901234567890}',
    6: '{"kind": "order", "total": "7", "é": "ü\\n"}',
}


def _frame(spark, docs: dict):
    rows = ", ".join(f"({i}, {'NULL' if d is None else _sql_string(d)})" for i, d in docs.items())
    return spark.sql(f"SELECT CAST(id AS BIGINT) AS id, parse_json(j) AS v FROM VALUES {rows} AS t(id, j)").coalesce(1)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _spark_json(df) -> dict:
    """{id: Spark's to_json of v, parsed}."""
    return {r[0]: None if r[1] is None else json.loads(r[1]) for r in df.selectExpr("id", "to_json(v)").collect()}


def _ours(table) -> dict:
    """{id: our decoder's JSON of v, parsed} of an Arrow table from any reader."""
    return {
        r["id"]: None if r["v"] is None else json.loads(variant.to_json(r["v"]["value"], r["v"]["metadata"]))
        for r in table.to_pylist()
    }


def test_spark_written_variants_through_append_delete_merge_optimize(spark, tmp_path, monkeypatch, file_tasks):
    """DELETE's per-file work runs in Spark tasks (our evaluation of the path there), MERGE takes its join
    strategy (the bound condition rendered as Spark's variant_get; Spark's writer for the output)."""
    from airflow_delta_provider_apps.engine.merge import source as merge_source

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v VARIANT")
    # Spark's own parquet writer, committed by us; then our writer through Spark (Arrow batches)
    assert native_write_applies(spark, table_write_spec(t.snapshot())) is None
    result = write_native(_frame(spark, {i: DOCS[i] for i in (1, 2, 3, 4)}), table_write_spec(t.snapshot()))
    txn(root, operation="WRITE", operation_parameters={"mode": "Append"}).commit(result.adds)
    (location,) = file_locations(root, t.snapshot().files.column("path"))
    assert "Variant" in str(pq.ParquetFile(location).schema)  # Spark's Variant-annotated group
    t.append(_frame(spark, {i: DOCS[i] for i in (5, 6)}))
    adds = t.snapshot().files
    stats = [json.loads(s) for s in adds.column("stats").to_pylist()]
    assert sorted(s["nullCount"]["v"] for s in stats) == [0, 1]  # the footer's count (Spark's file) and ours
    assert all("v" not in s.get("minValues", {}) for s in stats)

    spark_view = _spark_json(_frame(spark, DOCS))
    assert _ours(read_snapshot_table(t.snapshot())) == spark_view  # our decoder = Spark's to_json
    assert _spark_json(t.to_df()) == spark_view  # our Spark scan hands Spark the same values

    t.delete("v:kind::string = 'refund'")
    monkeypatch.setattr(merge_source, "MAX_SOURCE_BYTES", 0)
    result = (
        t.merge(_frame(spark, {1: DOCS[5], 6: DOCS[5], 7: '{"kind": "new", "tags": ["x"]}'}), "target.id = source.id")
        .when_matched_update({"v": "source.v"}, "target.v:total::double > 10 AND source.v:kind IS NOT NULL")
        .when_not_matched_insert_all()
        .execute()
    )
    assert result["strategy"] == "join"
    t.optimize()
    assert len(t.snapshot().files) == 1
    want = {k: v for k, v in spark_view.items() if k != 2} | {1: spark_view[5], 7: {"kind": "new", "tags": ["x"]}}
    assert _spark_json(t.to_df()) == want
    assert _ours(read_snapshot_table(t.snapshot())) == want
    assert _ours(deltalake_table(root)) == want
    assert _ours(kernel_table(root)) == want


EXPRESSIONS = [
    "v:kind::string",
    "try_cast(v:total AS INT)",
    "try_variant_get(v, '$.total', 'double')",
    "variant_get(v, '$.items[0].sku', 'string')",
    "v:nested.deep[1]::decimal(5,2)",
    "v:items::string",
    "v:note IS NULL",
    "try_cast(v:at AS DATE)",
    "try_cast(v:big AS BIGINT)",
    "v:`é`::string",
    "to_json(v)",
    "to_json(v:nested)",
    "is_variant_null(v:note)",
]


def test_variant_functions_evaluate_as_in_spark(spark):
    """Spark's variant_get and : paths against ours on the same values (doubles compared as numbers)."""
    df = _frame(spark, DOCS)
    from airflow_delta_provider_apps.engine.schema import parse_ddl

    schema = parse_ddl("id BIGINT, v VARIANT")
    rows = df.selectExpr("id", "v", *[f"{e} AS c{i}" for i, e in enumerate(EXPRESSIONS)]).orderBy("id").collect()
    # Spark's bytes as they are (pyspark's toArrow cannot take a NULL variant)
    values = [None if r.v is None else {"value": bytes(r.v.value), "metadata": bytes(r.v.metadata)} for r in rows]
    arrow = pa.table({"id": [r.id for r in rows], "v": pa.array(values, variant.arrow_type())})
    for i, text in enumerate(EXPRESSIONS):
        ours = evaluate(parse_expression(text, schema), arrow).to_pylist()
        assert ours == [r[f"c{i}"] for r in rows], text


def test_a_shredded_file_written_by_spark_reads_back_whole(spark, tmp_path):
    """A table with variantShredding: Spark writes its variants shredded (typed_value columns beside the
    residual value); our reader puts them back together, deltalake's and Spark's readers agree."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema="id BIGINT, v VARIANT", properties={"delta.feature.variantShredding": "supported"}
    )
    assert {"variantType", "variantShredding"} <= set(t.snapshot().protocol.reader_features)
    shredding = {
        "spark.sql.variant.writeShredding.enabled": "true",
        "spark.sql.variant.forceShreddingSchemaForTest": "kind string, total decimal(10,2), items array<struct<sku string>>",
    }
    for k, v in shredding.items():
        spark.conf.set(k, v)
    try:
        assert "writeShredding" in native_write_applies(spark, table_write_spec(t.snapshot()))
        result = write_native(_frame(spark, DOCS), table_write_spec(t.snapshot()))
    finally:
        for k in shredding:
            spark.conf.unset(k)
    txn(root, operation="WRITE", operation_parameters={"mode": "Append"}).commit(result.adds)
    (location,) = file_locations(root, t.snapshot().files.column("path"))
    assert "typed_value" in pq.ParquetFile(location).schema_arrow.field("v").type.__str__()
    want = _spark_json(_frame(spark, DOCS))
    assert _ours(read_snapshot_table(t.snapshot())) == want
    assert _spark_json(t.to_df()) == want
    # the data source: Spark's DataFrame reader and writer over the same table (its append unshredded)
    register(spark)
    _frame(spark, {10: '{"via": "data source"}'}).write.format("airflow_delta").mode("append").save(root)
    want[10] = {"via": "data source"}
    assert _spark_json(spark.read.format("airflow_delta").load(root)) == want
    assert _ours(read_snapshot_table(t.snapshot())) == want
