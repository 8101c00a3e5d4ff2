"""Object-store credentials over Spark Connect: from an ``aws`` connection (``storage_conn_id``) only,
they reach the server's Python workers inside the tasks' functions; the secret appears in no plan,
Spark property or job description the server records (its event log: what its UI shows), in no line
of the server's output, of the task log or of the results (XCom)."""

from __future__ import annotations

import json
import logging
import os

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
from object_store_servers import S3Env

from airflow_delta_provider.hooks.delta import DeltaHook

SECRET = "Sx9-delta-connect-secret-7d2e"  # moto accepts any key; this one must never be shown


def test_credentials_reach_the_server_but_no_plan_log_or_result(
    connect_server, s3_server, monkeypatch, tmp_path, caplog, capfd
):
    for name in [n for n in os.environ if n.startswith("AWS_")]:  # the connection is the only source
        monkeypatch.delenv(name)
    conn = {
        "conn_type": "aws",
        "login": "AKIDELTACONNECT",
        "password": SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": s3_server.endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_SC", json.dumps(conn))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SC_SECRETS",
        json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}),
    )
    uri = f"s3://{s3_server.new_bucket()}/tables/t"
    src = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": pa.array(range(20), pa.int64()), "v": [float(i) for i in range(20)]}), src)
    hook = DeltaHook("sc_secrets", storage_conn_id="lake_s3_sc")
    caplog.set_level(logging.DEBUG)
    results = [
        hook.run("create-table", uri, schema="id BIGINT, v DOUBLE"),
        hook.run("write", uri, source=str(src)),
        hook.run("update", uri, updates={"v": "v * 2"}, predicate="id < 5"),
        hook.run("merge", uri, source=str(src), source_query="SELECT id + 15 AS id, v FROM source", key_columns=["id"]),
        hook.run("delete", uri, predicate="id >= 30"),
    ]
    assert [r["version"] for r in results] == [0, 1, 2, 3, 4]
    options = S3Env(s3_server, uri.split("/")[2]).deltalake_options  # what deltalake needs for this server
    rows = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()
    assert rows.num_rows == 30  # 20, plus 15..34 upserted, minus 30..34 deleted

    out, err = capfd.readouterr()
    seen = {
        "results (XCom)": json.dumps(results),
        "task log": caplog.text + out + err,
        "server output": connect_server.output(),
        "server event log (its UI)": connect_server.event_log(),
    }
    assert "PythonMapInArrow" in seen["server event log (its UI)"] or "MapInArrow" in seen["server event log (its UI)"]
    for where, text in seen.items():
        assert SECRET not in text, f"the secret appears in the {where}"
