"""The Spark data plane on real object-store servers on loopback, S3 (moto) and Azure Blob (Azurite),
with a stock pyspark (no hadoop-aws, no hadoop-azure): executors write and read the table's files
through pyarrow.fs, with the driver's credentials handed to them (the shared session started before
this test set them), and commits use the store's conditional create. deltalake reads every version."""

from __future__ import annotations

import pytest

from airflow_delta_provider_apps.engine import DeltaTable

pytestmark = pytest.mark.spark

deltalake = pytest.importorskip("deltalake")


@pytest.fixture(params=["s3", "azure"])
def store(request):
    return request.getfixturevalue(request.param)


def _theirs(store, root, version=None):
    t = deltalake.DeltaTable(root, storage_options=store.deltalake_options, version=version).to_pyarrow_table()
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


def test_spark_writes_reads_and_rewrites_a_table_on_the_store(spark, store):
    from airflow_delta_provider_apps.engine.spark.session import map_in_arrow

    # The session's executors did not inherit this test's variables: the engine hands them over.
    def endpoint(batches):
        import os

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"e": [str(sorted(os.environ.items()))]})

    (seen,) = [r.e for r in map_in_arrow(spark.range(1), endpoint, "e string").collect()]
    assert all(repr((k, v)) in seen for k, v in store.env.items())

    root = store.uri("spark")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v STRING, p INT", partition_by=["p"])
    rows = [(i, f"v{i}", i % 3) for i in range(300)]
    assert t.append(spark.createDataFrame(rows, "id long, v string, p int"))["version"] == 1
    assert sorted(tuple(r) for r in t.to_df().collect()) == sorted(rows)
    assert t.to_df(predicate="p = 1").count() == 100

    # DML whose files are rewritten in Spark tasks, MERGE, overwrite of one partition.
    assert t.delete("id % 10 = 0")["numDeletedRows"] == 30
    t.upsert(spark.createDataFrame([(1, "new", 1), (1000, "ins", 0)], "id long, v string, p int"), ["id"])
    t.overwrite(spark.createDataFrame([(2000, "p2", 2)], "id long, v string, p int"), replace_where="p = 2")
    expected = sorted(
        [(i, "new" if i == 1 else f"v{i}") for i in range(300) if i % 10 and i % 3 != 2] + [(1000, "ins"), (2000, "p2")]
    )
    assert sorted((r.id, r.v) for r in t.to_df().collect()) == expected == _theirs(store, root)
    assert sorted((r.id, r.v) for r in t.to_df(version=1).collect()) == _theirs(store, root, 1)
    assert [h["operation"] for h in t.history()] == ["WRITE", "MERGE", "DELETE", "WRITE", "CREATE TABLE"]
    # Nothing was written outside the table's folder, and no directory marker inside it.
    assert all(k.startswith("spark/") and not k.endswith("/") for k in store.keys())


def test_an_s3a_table_reads_through_pyarrow_when_spark_has_no_hadoop_aws(spark, s3):
    """``s3a://`` is the same S3 object: with a stock pyspark (no S3A filesystem) the engine's Arrow
    path reads and writes it; Spark's own scan would be used only if Hadoop had the filesystem."""
    from airflow_delta_provider_apps.engine.spark.scan import hadoop_reads

    assert hadoop_reads(spark, "s3a") is False
    root = s3.uri("viaS3a").replace("s3://", "s3a://")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v STRING, p INT")
    t.append(spark.createDataFrame([(1, "a", 0), (2, "b", 1)], "id long, v string, p int"))
    assert sorted(r.id for r in t.to_df().collect()) == [1, 2]
    assert _theirs(s3, root.replace("s3a://", "s3://")) == [(1, "a"), (2, "b")]
