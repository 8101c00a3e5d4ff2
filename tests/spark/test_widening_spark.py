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
