"""A Spark Connect server killed (kill -9) in the middle of a MERGE: the task fails, retryable, in
bounded time; the table reads at its last commit; the retry on a restarted server applies once."""

from __future__ import annotations

import json
import threading
import time

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider.exceptions import DeltaRetryableError
from airflow_delta_provider.hooks.delta import DeltaHook

# a source whose reading takes many seconds on the server (a scalar subquery over a large range)
SLOW = "SELECT s.* FROM source s WHERE (SELECT max(id) FROM range(0, 40000000000, 1, 2)) > 0"


def test_a_server_killed_mid_merge_fails_the_task_and_the_retry_applies_once(monkeypatch, tmp_path):
    from airflow_delta_provider_apps.connect_server import ConnectServer

    server = ConnectServer()
    try:
        monkeypatch.setenv(
            "AIRFLOW_CONN_SC_LOST", json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port})
        )
        hook = DeltaHook("sc_lost")
        uri = str(tmp_path / "t")
        pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), "v": [0] * 10}), tmp_path / "day.parquet")
        pq.write_table(pa.table({"id": pa.array(range(5, 15), pa.int64()), "v": [1] * 10}), tmp_path / "up.parquet")
        hook.run("create-table", uri, schema="id BIGINT, v BIGINT")
        hook.run("write", uri, source=str(tmp_path / "day.parquet"))
        before = deltalake.DeltaTable(uri)
        identity = {"app_id": "airflow:d/merge@2026-01-01", "app_version": 1}
        merge = dict(source=str(tmp_path / "up.parquet"), source_query=SLOW, key_columns=["id"], **identity)

        outcome = {}

        def run():
            try:
                outcome["result"] = hook.run("merge", uri, **merge)
            except Exception as e:
                outcome["error"] = e

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(6)  # the session is up and the source query runs on the server
        assert worker.is_alive(), outcome
        killed = time.monotonic()
        server.kill()
        worker.join(timeout=60)
        assert not worker.is_alive(), "the task waited on a dead server"
        assert time.monotonic() - killed < 30
        assert isinstance(outcome.get("error"), DeltaRetryableError), outcome
        assert "Spark Connect server" in str(outcome["error"])
        assert "Cause: gRPC status " in str(outcome["error"])  # the status and details, not the call's repr
        after = deltalake.DeltaTable(uri)
        assert after.version() == before.version()
        assert after.to_pyarrow_table().sort_by("id").equals(before.to_pyarrow_table().sort_by("id"))

        # Airflow's retry, once the server is back on its port: the merge applies once
        server = ConnectServer(port=server.port)
        retry = hook.run("merge", uri, **{**merge, "source_query": None})
        again = hook.run("merge", uri, **{**merge, "source_query": None})
        assert retry["committed"] and retry["version"] == before.version() + 1
        assert again["skipped"] and again["version"] == retry["version"]
        rows = {r["id"]: r["v"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
        assert rows == {**{i: 0 for i in range(5)}, **{i: 1 for i in range(5, 15)}}
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_connect_mode_left(monkeypatch):
    yield
    import os

    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # a failed run leaves classic sessions working


def test_on_kill_interrupts_the_session_and_the_task_ends(connect_server, monkeypatch, tmp_path):
    """The task's on_kill (Airflow's SIGTERM handler) interrupts the session's running operation: the
    run ends at once, nothing is committed, and the server serves the next task."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SC_KILL",
        json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}),
    )
    hook = DeltaHook("sc_kill")
    uri = str(tmp_path / "t")
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), "v": [0] * 10}), tmp_path / "day.parquet")
    hook.run("create-table", uri, schema="id BIGINT, v BIGINT")
    outcome = {}

    def run():
        try:
            outcome["result"] = hook.run("write", uri, source=str(tmp_path / "day.parquet"), source_query=SLOW)
        except Exception as e:
            outcome["error"] = e

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(5)
    assert worker.is_alive(), outcome
    killed = time.monotonic()
    hook.on_kill()
    worker.join(timeout=60)
    assert not worker.is_alive() and time.monotonic() - killed < 30
    assert "error" in outcome, outcome
    assert deltalake.DeltaTable(uri).version() == 0
    assert DeltaHook("sc_kill").run("write", uri, source=str(tmp_path / "day.parquet"))["version"] == 1
