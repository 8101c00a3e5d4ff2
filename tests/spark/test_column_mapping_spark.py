"""Column mapping on Spark's write paths: a column renamed in name mode, then appended to and merged
into (file by file and as Spark's join): we and deltalake read the right values under the new name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable

pytestmark = pytest.mark.spark

deltalake = pytest.importorskip("deltalake")


@pytest.mark.parametrize("join", [False, True])
def test_renamed_then_appended_and_merged(spark, tmp_path, monkeypatch, join):
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    if join:
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        spark,
        root,
        schema="id BIGINT, name STRING, p INT",
        partition_by=["p"],
        properties={"delta.columnMapping.mode": "name"},
    )
    t.append(spark.createDataFrame([(i, f"n{i}", i % 2) for i in range(6)], "id BIGINT, name STRING, p INT"))
    t.rename_column("name", "label")
    t.append(spark.createDataFrame([(6, "n6", 0)], "id BIGINT, label STRING, p INT"))
    source = spark.createDataFrame([(1, "x1", 1), (7, "x7", 1)], "id BIGINT, label STRING, p INT")
    res = DeltaTable.for_path(spark, root).upsert(source, ["id"])
    assert res["strategy"] == ("join" if join else "file_by_file")
    want = sorted([(i, f"n{i}", i % 2) for i in range(7) if i != 1] + [(1, "x1", 1), (7, "x7", 1)])
    got = sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id, label, p FROM t")
    assert got == want == sorted(tuple(r.values()) for r in pa.table(theirs.read_all()).to_pylist())


def test_dynamic_partition_overwrite_of_a_mapped_table_replaces_only_its_partitions(spark, tmp_path):
    root = str(tmp_path / "t")
    ddl = "id BIGINT, p INT"
    t = DeltaTable.create(spark, root, schema=ddl, partition_by=["p"], properties={"delta.columnMapping.mode": "name"})
    t.append(spark.createDataFrame([(1, 7), (2, 8), (3, 9)], ddl))
    t.overwrite(spark.createDataFrame([(4, 9)], ddl), partition_overwrite_mode="dynamic")
    assert sorted(tuple(r) for r in t.to_df().collect()) == [(1, 7), (2, 8), (4, 9)]
