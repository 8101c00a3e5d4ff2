"""Type widening through Spark (issue 34 item 5): an append with ``merge_schema=True`` whose column is
wider widens the table's column in the same commit; Spark reads the old and new files in the new type;
a MERGE by join widens the same way; without ``merge_schema`` the append is refused."""

from __future__ import annotations

import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import SchemaMismatchError

pytestmark = pytest.mark.spark


def test_append_and_merge_with_merge_schema_widen_a_column(spark, tmp_path, monkeypatch):
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark, root, schema="id BIGINT, v INT, f FLOAT", properties={"delta.enableTypeWidening": "true"}
    )
    t.append(spark.createDataFrame([(1, 10, 1.5)], "id LONG, v INT, f FLOAT"))
    wide = spark.createDataFrame([(2, 2**40, 2.5)], "id LONG, v BIGINT, f FLOAT")
    with pytest.raises(SchemaMismatchError, match="column 'v' has type bigint"):
        t.append(wide)
    t.append(wide, merge_schema=True)
    schema = DeltaTable.for_path(spark, root).snapshot().schema
    assert schema.find("v").metadata["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)  # the join strategy
    src = spark.createDataFrame([(1, 7, 1.25)], "id LONG, v BIGINT, f DOUBLE")
    res = DeltaTable.for_path(spark, root).upsert(src, ["id"], merge_schema=True)
    assert res["strategy"] == "join"
    after = DeltaTable.for_path(spark, root)
    assert after.snapshot().schema.find("f").type.name == "double"
    rows = sorted(tuple(r) for r in after.to_df().collect())
    assert rows == [(1, 7, 1.25), (2, 2**40, 2.5)]


@pytest.mark.parametrize("strategy", ["join", "collected"])
def test_merge_resolves_struct_fields_by_name_and_widens_array_elements(spark, tmp_path, monkeypatch, strategy):
    """Issue 45 item 6 through Spark: the source's struct lists y before x (both strings: Spark's positional
    struct cast would swap them silently), its array has BIGINT elements. With ``merge_schema`` on a
    type-widening table the fields land by name and the elements widen (``fieldPath`` "element"); the rows
    match the ones computed here and DuckDB's delta_scan reads the same."""
    from outside_readers import duckdb_table

    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark,
        root,
        schema="id BIGINT, s STRUCT<x: STRING, y: STRING>, a ARRAY<INT>",
        properties={"delta.enableTypeWidening": "true"},
    )
    t.append(spark.createDataFrame([(1, ("x1", "y1"), [1]), (2, ("x2", "y2"), None)], t.to_df().schema))
    if strategy == "join":
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    src = spark.createDataFrame(
        [(2, ("y2new", "x2new"), [2**40, None]), (3, None, [3])],
        "id LONG, s STRUCT<y: STRING, x: STRING>, a ARRAY<BIGINT>",
    )
    res = (
        DeltaTable.for_path(spark, root)
        .merge(src, "target.id = source.id", merge_schema=True)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 1)
    schema = DeltaTable.for_path(spark, root).snapshot().schema
    assert schema.find("a").metadata["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    want = [
        {"id": 1, "s": {"x": "x1", "y": "y1"}, "a": [1]},
        {"id": 2, "s": {"x": "x2new", "y": "y2new"}, "a": [2**40, None]},
        {"id": 3, "s": None, "a": [3]},
    ]
    got = sorted(
        (r.asDict(recursive=True) for r in DeltaTable.for_path(spark, root).to_df().collect()), key=lambda r: r["id"]
    )
    assert got == want
    assert sorted(duckdb_table(root).to_pylist(), key=lambda r: r["id"]) == want
