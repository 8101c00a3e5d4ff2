"""The streaming upsert sink with a real Structured Streaming query on a file source: each batch is
applied once, and a restart that replays the last batch (its Spark commit marker lost after our
commit landed) skips it instead of applying it twice."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.streaming import upsert_batches

pytestmark = pytest.mark.spark

DDL = "id BIGINT, v INT, seq INT"


def _land(folder, name, rows):
    ids, vs, seqs = zip(*rows)
    table = pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.int32()), "seq": pa.array(seqs, pa.int32())}
    )
    pq.write_table(table, os.path.join(folder, name))
    stamp = 1_700_000_000 + len(os.listdir(folder))  # the file source takes files in modification-time order
    os.utime(os.path.join(folder, name), (stamp, stamp))


def _run_query(spark, landing, checkpoint, sink):
    q = (
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(landing))
        .writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(sink)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return q.id


def test_a_restarted_query_applies_each_batch_once(spark, tmp_path):
    root, landing, checkpoint = str(tmp_path / "t"), tmp_path / "landing", tmp_path / "chk"
    landing.mkdir()
    DeltaTable.create(spark, root, schema=DDL)
    _land(landing, "a.parquet", [(1, 10, 1), (2, 20, 1)])
    _land(landing, "b.parquet", [(2, 21, 2), (2, 22, 3), (3, 30, 1)])  # id 2 twice: the greatest seq wins
    results = []
    upsert = upsert_batches(root, ["id"], dedupe_by="seq")

    def sink(df, batch_id):
        results.append((batch_id, upsert(df, batch_id)))

    query_id = _run_query(spark, landing, checkpoint, sink)
    assert [b for b, _ in results] == [0, 1]
    t = DeltaTable.for_path(spark, root)
    version = t.version()
    assert sorted((r["id"], r["v"]) for r in t.to_df().collect()) == [(1, 10), (2, 22), (3, 30)]
    txns = t.snapshot().set_transactions
    assert txns[str(query_id)].version == 1  # app id = the query's id, version = the batch id

    # the process "died" after our commit of batch 1 but before Spark committed the batch: on restart
    # Spark runs batch 1 again with the same id
    for name in ("1", ".1.crc"):  # the marker and its checksum file
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    results.clear()
    assert _run_query(spark, landing, checkpoint, sink) == query_id
    assert [(b, r["skipped"]) for b, r in results] == [(1, True)]
    t = DeltaTable.for_path(spark, root)
    assert t.version() == version
    assert sorted((r["id"], r["v"]) for r in t.to_df().collect()) == [(1, 10), (2, 22), (3, 30)]
