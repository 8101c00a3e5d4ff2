"""The quickstart DAG over Spark Connect: the same DAG file, its ``spark_local`` connection now of type
``spark_connect`` (the apache-spark provider's) pointing at a local server. Every Spark task runs in
the worker as a Connect client (no spark-submit), with the same results as over spark-submit."""

from __future__ import annotations

import json

import deltalake
import pytest
from conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def test_the_quickstart_over_a_spark_connect_connection(airflow_home, connect_server, tmp_path):
    airflow_home.add_dag(REPO / "example_dags" / "delta_quickstart.py")
    root = tmp_path / "quickstart"
    table = root / "tables" / "events"
    conn = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}
    summary = airflow_home.run(
        "delta_quickstart",
        date="2026-01-02",
        env={
            "DELTA_QUICKSTART_ROOT": str(root),
            "DELTA_QUICKSTART_TABLE": str(table),
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps(conn),
        },
    )
    assert summary["state"] == "success", summary
    tasks = {t: v["xcom"] for t, v in summary["tasks"].items()}
    spark_tasks = ("append_day", "flag_large", "drop_small", "upsert_changes")
    for task in spark_tasks:
        assert tasks[task]["transport"] == "connect" and "submit_seconds" not in tasks[task], tasks[task]
    assert [tasks[t]["version"] for t in ("create_table", *spark_tasks)] == [0, 1, 2, 3, 4]
    assert tasks["create_table"]["transport"] == "local"  # from a schema: in the worker (execution="auto")
    assert tasks["flag_large"]["metrics"]["numUpdatedRows"] == 3
    assert tasks["drop_small"]["metrics"]["numDeletedRows"] == 2
    m = tasks["upsert_changes"]["metrics"]
    assert (m["numSourceRows"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (2, 1, 1)
    assert tasks["checkpoint"]["transport"] == "local"
    rows = deltalake.DeltaTable(str(table)).to_pyarrow_table()
    assert rows.num_rows == 24 - 2 + 1  # the day, two small ones deleted, one upserted row new
