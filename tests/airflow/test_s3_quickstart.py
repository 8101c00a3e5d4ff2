"""The quickstart DAG end to end on an S3 server (moto on loopback) with an ``aws`` connection: real
spark-submit (local mode, a stock pyspark without hadoop-aws), the credentials only in the Airflow
connection (no AWS variables in the environment), commits with S3's conditional create. deltalake
reads the result; the secret key appears in no spark-submit argument, task log or XCom."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

SECRET = "Sx9-delta-e2e-secret-4f1c"  # moto accepts any key; this one must never be printed


def test_quickstart_on_s3_with_an_aws_connection(airflow_home, tmp_path, s3_server):
    bucket = s3_server.new_bucket()
    table = f"s3://{bucket}/tables/events"
    conn = {
        "conn_type": "aws",
        "login": "AKIDELTAE2E",
        "password": SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": s3_server.endpoint},
    }
    airflow_home.add_dag(REPO / "example_dags" / "delta_quickstart.py")
    env = {
        "DELTA_QUICKSTART_ROOT": str(tmp_path / "quickstart"),
        "DELTA_QUICKSTART_TABLE": table,
        "DELTA_QUICKSTART_STORAGE_CONN": "lake_s3",
        "AIRFLOW_CONN_LAKE_S3": json.dumps(conn),
    }
    import os

    for name in [n for n in os.environ if n.startswith("AWS_")]:  # the connection is the only source
        env[name] = ""
    summary = airflow_home.run("delta_quickstart", date="2026-01-02", env=env)
    assert summary["state"] == "success", summary
    tasks = summary["tasks"]
    assert [tasks[t]["xcom"]["version"] for t in ("create_table", "append_day", "flag_large", "drop_small")] == [
        0,
        1,
        2,
        3,
    ]
    assert tasks["upsert_changes"]["xcom"]["operation"] == "MERGE"
    assert tasks["checkpoint"]["xcom"]["version"] == 4  # in the worker, with the connection's credentials

    deltalake = pytest.importorskip("deltalake")
    options = {
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    dt = deltalake.DeltaTable(table, storage_options=options)
    assert dt.version() == 4 and dt.metadata().partition_columns == ["dt"]
    assert dt.to_pyarrow_table().num_rows == 24 - 2 + 1
    keys = s3_server.keys(bucket)
    assert "tables/events/_delta_log/00000000000000000004.checkpoint.parquet" in keys
    assert all(k.startswith("tables/events/") for k in keys)

    # The secret is nowhere a person or another task could read it.
    assert SECRET not in json.dumps(summary)
    assert "Spark-Submit cmd" in airflow_home.runs[-1].read_text()  # the commands are in the checked log
    logs = [airflow_home.runs[-1], *sorted((airflow_home.home / "logs").rglob("*"))]
    for path in logs:
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
