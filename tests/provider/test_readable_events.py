"""Readable asset events (issue 42 item 2): the table's event extra leads with the version, the
operation, the rows written / updated / deleted and the committing DAG, task and run; the commit
records the task instance as ``commitInfo.airflow`` (read back from the log by deltalake, an
independent reader). Operators run in the worker on the real engine."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_delta_provider.operators.delta import DeltaDeleteOperator, delta_asset
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow

deltalake = pytest.importorskip("deltalake")


def _context(events, run_id="scheduled__2026-11-28T00:00:00+00:00"):
    ti = SimpleNamespace(dag_id="orders", task_id="purge", run_id=run_id, map_index=-1, try_number=1, max_tries=0)
    return {"outlet_events": events, "ti": ti, "run_id": run_id, "logical_date": None}


def test_the_event_leads_with_version_operation_rows_and_the_task_instance(tmp_path):
    root = str(tmp_path / "orders")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": list(range(10))}))
    op = DeltaDeleteOperator(task_id="purge", table_uri=root, predicate="id < 4", execution="local")
    events = OutletEventAccessors()
    result = op.execute(_context(events))
    extra = events[delta_asset(root)].extra
    assert list(extra)[:6] == ["version", "operation", "rows_deleted", "dag_id", "task_id", "run_id"]
    assert {k: extra[k] for k in list(extra)[:6]} == {
        "version": 2,
        "operation": "DELETE",
        "rows_deleted": 4,
        "dag_id": "orders",
        "task_id": "purge",
        "run_id": "scheduled__2026-11-28T00:00:00+00:00",
    }
    assert extra["metrics"] == {k: result["metrics"][k] for k in extra["metrics"]}  # kept, after them
    # the commit names the task instance: another reader sees it in the log
    info = deltalake.DeltaTable(root).history(1)[0]
    assert info["airflow"] == {
        "dag_id": "orders",
        "task_id": "purge",
        "run_id": "scheduled__2026-11-28T00:00:00+00:00",
        "map_index": -1,
        "try_number": 1,
    }


def test_outside_a_task_instance_nothing_is_invented(tmp_path):
    root = str(tmp_path / "orders")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1, 2]}))
    events = OutletEventAccessors()
    DeltaDeleteOperator(task_id="purge", table_uri=root, predicate="id = 1", execution="local").execute(
        {"outlet_events": events}
    )
    extra = events[delta_asset(root)].extra
    assert (extra["version"], extra["operation"], extra["rows_deleted"]) == (2, "DELETE", 1)
    assert "dag_id" not in extra and "airflow" not in deltalake.DeltaTable(root).history(1)[0]
