"""Streaming through the data source over Spark Connect: a readStream of a Delta table written by
a writeStream into another, each batch committed once (read back by deltalake)."""

from __future__ import annotations

import pytest
from outside_readers import deltalake_table, sorted_rows

from airflow_delta_provider_apps.datasource import register
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.spark.session import connect_session
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = pytest.mark.spark


def test_stream_round_trip_over_connect(connect_server, tmp_path):
    import pyarrow as pa

    source, target, chk = str(tmp_path / "src"), str(tmp_path / "dst"), str(tmp_path / "chk")
    DeltaTable.create(None, source, schema="id BIGINT")
    append_arrow(source, pa.table({"id": pa.array(range(5), pa.int64())}))
    append_arrow(source, pa.table({"id": pa.array(range(5, 8), pa.int64())}))
    session = connect_session(connect_server.url)
    try:
        register(session)
        query = (
            session.readStream.format("delta")
            .option("maxFilesPerTrigger", 1)
            .load(source)
            .writeStream.format("delta")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination(120)
        assert query.exception() is None
        snapshot = load_snapshot(storage_for(target), target)
        # the snapshot's two files, one a batch: batches 0 and 1, each committed once
        assert {a: t.version for a, t in snapshot.set_transactions.items()} == {query.id: 1}
        assert snapshot.version == 1
        assert sorted_rows(deltalake_table(target), ["id"]) == [(i,) for i in range(8)]
    finally:
        session.stop()
