"""One watched table written by an Airflow pipeline and by an outside writer, under a REAL Airflow
deployment (scheduler, dag-processor, triggerer, API server; tests/airflow/deployment.py) running
example_dags/delta_orders_commits.py: every commit (but OPTIMIZE, which changes no rows) is announced
exactly once, in version order, across a clear of the pipeline's day (which restarts the triggerer)
and the dag-processor's parses every 2 s; the consumer DAG consumes each version once; the asset keeps
its one watcher throughout; the rerun of the day replaces its rows (replace_where by day)."""

from __future__ import annotations

import json
import time

import deltalake
import pyarrow as pa
import pytest
from conftest import REPO
from deployment import Deployment

from airflow_delta_provider.version_decision import MAINTENANCE_OPERATIONS
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.table import DeltaTable

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1500)]

PIPELINE, CONSUMER = "delta_orders_pipeline", "delta_orders_consumer"
SCHEMA = "order_id BIGINT, status STRING, amount DOUBLE, dt STRING"


def _outside_append(table: str, ids, dt: str) -> int:
    rows = pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "status": ["placed"] * len(ids),
            "amount": [1.0] * len(ids),
            "dt": [dt] * len(ids),
        }
    )
    return append_arrow(table, rows).to_dict()["version"]


def test_a_pipeline_and_an_outside_writer_each_commit_announced_once_in_order(tmp_path, connect_server):
    root = tmp_path / "lake"
    table = str(root / "tables" / "orders")
    DeltaTable.create(None, table, schema=SCHEMA, partition_by=["dt"])  # version 0, before the watcher
    conn = json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port})
    d = Deployment(
        tmp_path / "airflow",
        root,
        CONSUMER,
        (REPO / "example_dags" / "delta_orders_commits.py").read_text(),
        triggerer=True,
        DELTA_PIPELINE_ROOT=str(root),
        DELTA_WATCH_POLL_SECONDS="1",
        AIRFLOW_CONN_SPARK_LOCAL=conn,
        # the pipeline's daily run of the latest interval, and the consumer's asset-triggered runs
        AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="True",
    )
    watchers: list[int] = []  # the asset's watcher rows, sampled while waiting

    def events():
        rows = d.query(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? ORDER BY e.id",
            f"file://{table}",
        )
        return [json.loads(extra) for (extra,) in rows]

    def consumed() -> list[int]:
        rows = d.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'new_commits' AND key = 'return_value'",
            CONSUMER,
        )
        return sorted(v for (value,) in rows for v in json.loads(value))

    def expected() -> list[int]:
        history = deltalake.DeltaTable(table).history()
        return sorted(
            h["version"] for h in history if h["version"] > 0 and h["operation"] not in MAINTENANCE_OPERATIONS
        )

    def pipeline(state: str):
        return d.query("SELECT logical_date FROM dag_run WHERE dag_id = ? AND state = ?", PIPELINE, state)

    def load_tries() -> int:
        sql = "SELECT max(try_number) FROM task_instance WHERE dag_id = ? AND task_id = 'load_day'"
        return d.query(sql, PIPELINE)[0][0]

    def announced() -> list[int]:
        return [c["version"] for e in events() for c in e["payload"]["commits"]]

    def settled() -> bool:
        """Every commit announced, no run queued or running."""
        watchers.append(d.query("SELECT count(*) FROM asset_watcher")[0][0])
        if pipeline("failed"):
            raise AssertionError(f"the pipeline failed\n{(d.home / 'scheduler.log').read_text()[-3000:]}")
        busy = d.query("SELECT count(*) FROM dag_run WHERE state IN ('queued', 'running')")[0][0]
        return not busy and len(announced()) >= len(expected())

    d.start()
    try:
        outside = [_outside_append(table, [1, 2], "outside-1")]
        d.wait(lambda: pipeline("success"), "the pipeline's daily run", timeout=600)
        (ds,) = [str(r[0])[:10] for r in pipeline("success")]
        d.wait(settled, "every commit announced", timeout=300)
        first = expected()

        # the day again (a clear: the scheduler, dag-processor and triggerer restart), beside another
        # outside commit
        loads = load_tries()
        d.admin("tasks", "clear", PIPELINE, "-s", ds, "-e", ds, "-y")
        outside.append(_outside_append(table, [3], "outside-2"))
        d.wait(lambda: load_tries() > loads and pipeline("success"), "the day's rerun", timeout=600)
        d.wait(settled, "every commit announced after the rerun", timeout=300)
        time.sleep(5)  # several more polls and parses: nothing is announced again

        assert all("payload" in e for e in events()), events()  # no operator announced its commit
        versions = announced()
        assert versions == expected() and len(expected()) > len(first) >= 3, (versions, expected())
        assert set(outside) <= set(versions)
        # Airflow gives an event that arrives while the consumer's run is being created to the run
        # after that (created by a later event): one more commit, and every version is consumed once
        outside.append(_outside_append(table, [4], "outside-3"))
        d.wait(lambda: settled() and set(versions) <= set(consumed()), "the versions consumed", timeout=300)
        assert consumed() == sorted(set(consumed())) and set(consumed()) <= set(announced())
        assert announced() == expected()
        ops = {h["version"]: h["operation"] for h in deltalake.DeltaTable(table).history()}
        pipeline_ops = [ops[v] for v in versions if v not in outside]
        assert pipeline_ops.count("WRITE") == 2 and pipeline_ops.count("DELETE") == 2, pipeline_ops
        assert set(watchers) == {1}, watchers  # the watcher was never dropped by a parse

        # the rerun replaced the day's rows: 10 landed, 3 cancelled dropped, once
        day = deltalake.DeltaTable(table).to_pyarrow_table(filters=[("dt", "=", ds)])
        assert sorted(day.column("status").to_pylist()) == ["placed"] * 7
    finally:
        d.stop()
