"""The worker side of Spark Connect as a user installs it: a virtualenv with the provider and
pyspark-client only (no pyspark distribution, no jars) and no ``java`` on PATH (``make client-venv``
builds it). The operators run there against the tests' Connect server; deltalake checks the rows."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = REPO / ".venv-client" / "bin" / "python"

SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, os, shutil, sys
    assert shutil.which("java") is None and "JAVA_HOME" not in os.environ
    import pyspark
    assert not os.path.isdir(os.path.join(os.path.dirname(pyspark.__file__), "jars")), "a full pyspark"
    from airflow.sdk import DAG
    from airflow_delta_provider.operators.delta import (
        DeltaCreateTableOperator, DeltaDeleteOperator, DeltaMergeOperator, DeltaOptimizeOperator, DeltaWriteOperator,
    )
    uri, src, up = sys.argv[1:4]
    common = {"table_uri": uri, "conn_id": "sc_client"}
    with DAG("client_only", schedule=None):
        tasks = [
            DeltaCreateTableOperator(task_id="create", schema="id BIGINT, v DOUBLE", **common),
            DeltaWriteOperator(task_id="write", source=src, **common),
            DeltaMergeOperator(task_id="merge", source=up, key_columns=["id"], **common),
            DeltaDeleteOperator(task_id="delete", predicate="v < 3", **common),
            DeltaOptimizeOperator(task_id="optimize", **common),
        ]
    out = {t.task_id: t.execute({}) for t in tasks}
    print("RESULT " + json.dumps({k: {"transport": v.get("transport"), "version": v["version"]} for k, v in out.items()}))
    """
)


@pytest.mark.skipif(not CLIENT_PYTHON.exists(), reason="the Connect-only worker venv: run `make client-venv`")
def test_the_operators_run_with_pyspark_client_alone_and_no_java(connect_server, tmp_path):
    uri = str(tmp_path / "t")
    pq.write_table(
        pa.table({"id": pa.array(range(10), pa.int64()), "v": [float(i) for i in range(10)]}), tmp_path / "s.parquet"
    )
    pq.write_table(pa.table({"id": pa.array([8, 9, 10], pa.int64()), "v": [80.0, 90.0, 100.0]}), tmp_path / "u.parquet")
    script = tmp_path / "client.py"
    script.write_text(SCRIPT)
    env = {
        "PATH": str(CLIENT_PYTHON.parent),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SC_CLIENT": json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}
        ),
    }
    proc = subprocess.run(
        [str(CLIENT_PYTHON), str(script), uri, str(tmp_path / "s.parquet"), str(tmp_path / "u.parquet")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads(lines[-1][len("RESULT ") :])
    assert [r["version"] for r in results.values()] == [0, 1, 2, 3, 4]
    # CREATE TABLE from a schema needs no Spark: the worker (execution="auto"); the rest over Connect
    assert {k: r["transport"] for k, r in results.items()} == {
        "create": "local",
        **{k: "connect" for k in ("write", "merge", "delete", "optimize")},
    }
    rows = {r["id"]: r["v"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert rows == {**{i: float(i) for i in range(3, 8)}, 8: 80.0, 9: 90.0, 10: 100.0}
