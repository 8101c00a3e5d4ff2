"""A Structured Streaming sink that upserts each micro-batch exactly once (seed 004's pattern).

Use with ``foreachBatch``::

    from airflow_delta_provider_apps.engine.streaming import upsert_batches

    (spark.readStream.schema(schema).parquet("/landing/customers")
        .writeStream.option("checkpointLocation", "/chk/customers")
        .foreachBatch(upsert_batches("/lake/silver/customers", ["customer_id"], dedupe_by="updated_at"))
        .start())

Each batch is one MERGE (``DeltaTable.upsert``) committed with the SetTransaction ``(app_id,
batch_id)``. ``app_id`` defaults to the streaming query's id, which Spark keeps in the checkpoint and
so survives restarts; when a restarted query replays a batch whose commit already landed (the process
died between our commit and Spark's own batch commit), the transaction finds its own txn in the log
and the batch is skipped instead of applied twice.
"""

from __future__ import annotations

from .errors import InvalidArgumentError

__all__ = ["upsert_batches", "QUERY_ID_PROPERTY"]

#: the Spark local property a micro-batch runs under (StreamExecution.QUERY_ID_KEY)
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def upsert_batches(table_uri: str, key_columns, *, dedupe_by: str | None = None, app_id: str | None = None):
    """A ``foreachBatch`` function upserting each micro-batch into ``table_uri`` by ``key_columns``.

    :param dedupe_by: keep, per key, the batch row with the greatest value of this column
    :param app_id: the SetTransaction application id (default: the streaming query's id)
    :returns: ``fn(batch_df, batch_id) -> dict`` (the MERGE result; ``skipped`` for a replayed batch)
    """
    keys = list(key_columns or [])
    if not keys:
        raise InvalidArgumentError("upsert_batches needs key columns", "key_columns is empty", "pass e.g. ['id']")

    def upsert_batch(batch_df, batch_id: int) -> dict:
        from .table import DeltaTable

        spark = batch_df.sparkSession
        query_id = app_id or _query_id(spark)
        if not query_id:
            raise InvalidArgumentError(
                "Cannot tell which streaming query this batch belongs to",
                f"the Spark local property {QUERY_ID_PROPERTY} is not set (or, over Spark Connect, not visible) "
                "and no app_id was given",
                "pass app_id='<a name unique to this stream>' to upsert_batches",
            )
        table = DeltaTable.for_path(spark, table_uri)
        return table.upsert(batch_df, keys, dedupe_by=dedupe_by, app_id=str(query_id), app_version=int(batch_id))

    return upsert_batch


def _query_id(spark) -> str | None:
    """The running streaming query's id from Spark's local property; None where there is no
    SparkContext to ask (Spark Connect: pass ``app_id``)."""
    try:
        return spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception:  # Spark Connect sessions have no SparkContext
        return None
