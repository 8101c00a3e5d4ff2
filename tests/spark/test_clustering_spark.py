"""Liquid clustering through Spark: a clustered table created as select, appended to, merged into
(an upsert), updated and deleted from in Spark tasks keeps its clustering domain and deltalake reads
the same rows after each; OPTIMIZE clusters in Spark tasks, and a second OPTIMIZE after a small
append rewrites only the appended files. The rules themselves: tests/engine/commands/test_clustering.py."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider_apps.engine import DeltaTable

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark


def _theirs(root):
    return sorted(
        tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table(columns=["id", "v"]).to_pylist()
    )


def _ours(t):
    return sorted((r["id"], r["v"]) for r in t.to_df().select("id", "v").collect())


def test_a_clustered_table_through_spark(spark, tmp_path, file_tasks):  # OPTIMIZE's bin in a Spark task
    root = str(tmp_path / "t")
    source = spark.range(0, 400).selectExpr("id * 7 % 400 AS id", "CAST(id % 13 AS STRING) AS v").repartition(4)
    t = DeltaTable.create(spark, root, source_df=source, cluster_by=["id"])
    domain = t.snapshot().domain_metadata["delta.clustering"]
    assert json.loads(domain.configuration) == {"clusteringColumns": [["id"]]}
    assert _ours(t) == _theirs(root) and len(_theirs(root)) == 400

    t.append(spark.range(400, 600).selectExpr("id", "'new' AS v").repartition(3))
    assert _ours(t) == _theirs(root) and len(_theirs(root)) == 600
    t.upsert(spark.createDataFrame([(5, "merged"), (1000, "inserted")], "id long, v string"), ["id"])
    assert (5, "merged") in _theirs(root) and (1000, "inserted") in _theirs(root) and _ours(t) == _theirs(root)
    t.update({"v": "'updated'"}, "id BETWEEN 10 AND 19")
    t.delete("id >= 590")
    rows = _theirs(root)
    assert _ours(t) == rows and sum(v == "updated" for _, v in rows) == 10 and len(rows) == 590

    first = t.optimize(target_size=4_000)
    assert first["clustering_columns"] == ["id"] and first["numAddedFiles"] > 1
    assert _ours(t) == _theirs(root) == rows
    late = t.append(spark.createDataFrame([(2000, "late"), (2001, "late")], "id long, v string").coalesce(1))
    second = t.optimize(target_size=4_000)
    assert second["numRemovedFiles"] == late["numFiles"] == 1
    assert second["numRemovedBytes"] == late["numOutputBytes"]
    assert second["num_files_already_clustered"] == first["numAddedFiles"]
    assert _ours(t) == _theirs(root) and len(_theirs(root)) == 592
    assert t.snapshot().domain_metadata["delta.clustering"] == domain
    providers = set(t.snapshot().files.column("clustering_provider").to_pylist())
    assert providers == {"liquid"}
