"""Every operation over Spark Connect: the hook on a ``spark_connect`` connection, the engine as the
client in this process, the Spark work on a real local server (``connect_server``). Rows are checked
with deltalake (delta-rs) against a plain-Python model of the table."""

from __future__ import annotations

import json
import time
from urllib.parse import urlparse

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider.exceptions import DeltaPermanentError, DeltaRetryableError
from airflow_delta_provider.hooks.delta import DeltaHook


def _connect_conn(monkeypatch, conn_id: str, url: str, **extra) -> str:
    u = urlparse(url)
    body = {"conn_type": "spark_connect", "host": u.hostname, "port": u.port}
    if extra:
        body["extra"] = extra
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))
    return conn_id


def _rows(uri: str) -> dict[int, tuple]:
    t = deltalake.DeltaTable(uri).to_pyarrow_table()
    return {r["id"]: (r["v"], r["dt"]) for r in t.to_pylist()}


def _source(path, rows: dict[int, tuple]) -> str:
    ids = sorted(rows)
    pq.write_table(
        pa.table({"id": pa.array(ids, pa.int64()), "v": [rows[i][0] for i in ids], "dt": [rows[i][1] for i in ids]}),
        path,
    )
    return str(path)


def test_every_operation_over_connect(connect_server, monkeypatch, tmp_path):
    hook = DeltaHook(_connect_conn(monkeypatch, "sc_ops", connect_server.url))
    uri = str(tmp_path / "t")
    model: dict[int, tuple] = {}

    def run(operation, **params):
        result = hook.run(operation, uri, **params)
        assert result["status"] == "ok" and result["transport"] == "connect", result
        return result

    run("create-table", schema="id BIGINT, v DOUBLE, dt STRING", partition_by=["dt"])
    day1 = {i: (float(i), "a" if i % 2 else "b") for i in range(20)}
    r = run("write", source=_source(tmp_path / "d1.parquet", day1), source_format="parquet")
    model.update(day1)
    assert (r["version"], r["metrics"]["numOutputRows"]) == (1, 20) and _rows(uri) == model

    # a source_query over the source (a temporary view named `source`), run on the server
    r = run(
        "write",
        source=str(tmp_path / "d1.parquet"),
        source_query="SELECT id + 100 AS id, v * 2 AS v, dt FROM source WHERE id < 5",
    )
    model.update({i + 100: (float(i) * 2, "a" if i % 2 else "b") for i in range(5)})
    assert r["metrics"]["numOutputRows"] == 5 and _rows(uri) == model

    r = run("delete", predicate="id % 3 = 0 AND id < 100")
    deleted = [i for i in model if i % 3 == 0 and i < 100]
    for i in deleted:
        del model[i]
    assert r["metrics"]["numDeletedRows"] == len(deleted) and _rows(uri) == model

    r = run("update", updates={"v": "v + 1000"}, predicate="dt = 'a' AND id < 10")
    touched = [i for i, (_, dt) in model.items() if dt == "a" and i < 10]
    for i in touched:
        model[i] = (model[i][0] + 1000, model[i][1])
    assert r["metrics"]["numUpdatedRows"] == len(touched) and _rows(uri) == model

    # MERGE with clauses: update matched ids < 10, delete other matched, insert the new ones
    src = {i: (-float(i), "b") for i in range(5, 30)}
    clauses = [
        {"when": "matched", "then": "update", "condition": "source.id < 10", "set": {"v": "source.v"}},
        {"when": "matched", "then": "delete"},
        {"when": "not_matched", "then": "insert_all"},
    ]
    r = run(
        "merge",
        source=_source(tmp_path / "m.parquet", src),
        predicate="target.id = source.id",
        clauses=clauses,
    )
    expected = dict(model)
    for i, (v, dt) in src.items():
        if i in model and i < 10:
            expected[i] = (v, model[i][1])
        elif i in model:
            del expected[i]
        else:
            expected[i] = (v, dt)
    assert r["metrics"]["numTargetRowsInserted"] == len(set(src) - set(model))
    model = expected
    assert _rows(uri) == model

    up = {i: (0.5, "a") for i in (1, 2, 200)}
    run("merge", source=_source(tmp_path / "u.parquet", up), key_columns=["id"])
    model.update(up)
    assert _rows(uri) == model

    before = deltalake.DeltaTable(uri).version()
    r = run("optimize", z_order_by=["id"])
    assert r["metrics"]["numRemovedFiles"] > 0 and _rows(uri) == model
    assert run("checkpoint")["version"] == before + 1

    # RESTORE to version 1 (log only: no session), then VACUUM with retention 0
    r = run("restore", version=1)
    assert _rows(uri) == day1
    r = run("vacuum", retention_hours=0, enforce_retention_duration=False)
    assert r["metrics"]["numDeletedFiles"] > 0 and _rows(uri) == day1


def test_to_df_and_exactly_once_over_connect(connect_server, monkeypatch, tmp_path):
    from airflow_delta_provider.hooks.bundle import build_app_bundle
    from airflow_delta_provider_apps.connect import ConnectRun
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.spark.session import connect_mode

    hook = DeltaHook(_connect_conn(monkeypatch, "sc_once", connect_server.url))
    uri = str(tmp_path / "t")
    rows = {i: (float(i), "a") for i in range(6)}
    src = _source(tmp_path / "s.parquet", rows)
    hook.run("create-table", uri, schema="id BIGINT, v DOUBLE, dt STRING")
    first = hook.run("write", uri, source=src, app_id="dag/task@1", app_version=1)
    again = hook.run("write", uri, source=src, app_id="dag/task@1", app_version=1)
    assert first["committed"] and not first["skipped"]
    assert again["skipped"] and again["version"] == first["version"] and _rows(uri) == rows

    run = ConnectRun(connect_server.url, pyfiles=(build_app_bundle().zip_path,))
    try:
        with connect_mode():
            df = DeltaTable.for_path(run.session(), uri).to_df(predicate="id >= 3", columns=["id", "v"])
            got = sorted((r["id"], r["v"]) for r in df.collect())
    finally:
        run.close()
    assert got == [(i, float(i)) for i in range(3, 6)]


def test_errors_over_connect_keep_their_kind(connect_server, monkeypatch, tmp_path):
    hook = DeltaHook(_connect_conn(monkeypatch, "sc_err", connect_server.url))
    uri = str(tmp_path / "t")
    hook.run("create-table", uri, schema="id BIGINT, v DOUBLE")
    with pytest.raises(DeltaPermanentError, match="nope"):  # bad input: no retry
        hook.run("delete", uri, predicate="nope = 1")
    static = DeltaHook(hook.conn_id, spark_conf={"spark.executor.memory": "2g"})
    with pytest.raises(DeltaPermanentError, match="spark.executor.memory"):
        static.run("update", uri, updates={"v": "1"}, predicate="id = 1")
    assert deltalake.DeltaTable(uri).version() == 0


def test_an_unreachable_server_fails_in_seconds_and_is_retryable(monkeypatch, tmp_path):
    from object_store_servers import free_port

    hook = DeltaHook(_connect_conn(monkeypatch, "sc_gone", f"sc://127.0.0.1:{free_port()}"))
    uri = str(tmp_path / "t")
    DeltaHook("unused").run_in_process("create-table", uri, schema="id BIGINT")
    started = time.monotonic()
    with pytest.raises(DeltaRetryableError, match="cannot reach the Spark Connect server"):
        hook.run("update", uri, updates={"id": "id + 1"}, predicate="id = 1")
    assert time.monotonic() - started < 10
    # log-only work opens no session: it needs no server
    result = hook.run("checkpoint", uri)
    assert result["transport"] == "connect" and result["version"] == 0


def test_a_merge_over_the_collection_cap_runs_as_a_join_over_connect(connect_server, monkeypatch, tmp_path):
    """A source over the cap (lowered here) is joined on the server: Spark's own scan and writer, the
    files' stats read by the client from their footers; deltalake reads the merged rows."""
    cap = {"spark.airflowDelta.merge.maxSourceBytes": "1"}
    hook = DeltaHook(_connect_conn(monkeypatch, "sc_join", connect_server.url), spark_conf=cap)
    uri = str(tmp_path / "t")
    assert hook.run("create-table", uri, schema="id BIGINT, v DOUBLE, dt STRING")["status"] == "ok"
    day = {i: (float(i), "a") for i in range(50)}
    hook.run("write", uri, source=_source(tmp_path / "d.parquet", day), source_format="parquet")
    up = {i: (-1.0, "b") for i in range(40, 60)}
    r = hook.run("merge", uri, source=_source(tmp_path / "u.parquet", up), key_columns=["id"])
    assert (r["status"], r["transport"], r["strategy"]) == ("ok", "connect", "join"), r
    assert (r["metrics"]["numTargetRowsUpdated"], r["metrics"]["numTargetRowsInserted"]) == (10, 10)
    assert _rows(uri) == {**day, **up}
    stats = [json.loads(a["add"]["stats"]) for a in _adds(uri, r["version"])]
    assert stats and all(s["numRecords"] > 0 and "id" in s["minValues"] for s in stats)


def _adds(uri: str, version: int) -> list:
    with open(f"{uri}/_delta_log/{version:020d}.json") as f:
        return [a for a in map(json.loads, f) if "add" in a]
