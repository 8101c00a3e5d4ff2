"""The Delta view plugin's switches and links (issue 42): ``[delta] ui_enabled = False`` mounts nothing;
the provider info declares the plugin; the task's "Delta table" link opens the view at the version the
task committed (none when it committed nothing). The page itself: tests/airflow/test_delta_view.py."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import quote

from airflow_delta_provider.get_provider_info import get_provider_info
from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaTableLink

_COUNT = (
    "from airflow_delta_provider.plugins.delta_view import DeltaViewPlugin as P; "
    "print(len(P.fastapi_apps), len(P.external_views))"
)


def _counts(**env) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _COUNT], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_the_plugin_is_declared_and_turns_off():
    (plugin,) = get_provider_info()["plugins"]
    assert plugin == {"name": "delta_view", "plugin-class": "airflow_delta_provider.plugins.delta_view.DeltaViewPlugin"}
    assert _counts() == ["1", "1"]
    assert _counts(AIRFLOW__DELTA__UI_ENABLED="false") == ["0", "0"]


def test_the_task_link_opens_the_committed_version(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080/")
    op = DeltaDeleteOperator(task_id="d", table_uri="/lake/orders", predicate="id = 1")
    assert DeltaTableLink().get_link(op, ti_key=None) == ""  # nothing ran
    op._last_result = {"table_uri": "/lake/orders", "version": 7, "committed": True}
    assert (
        DeltaTableLink().get_link(op, ti_key=None)
        == "http://airflow.example:8080/delta-view/?table=%2Flake%2Forders&version=7"
    )
    monkeypatch.setenv("AIRFLOW__DELTA__UI_ENABLED", "false")
    assert DeltaTableLink().get_link(op, ti_key=None) == ""


def test_the_asset_event_carries_the_view_of_its_version(tmp_path, monkeypatch):
    """The asset page shows an event's extra as JSON (Airflow 3.1-3.3 have no asset-page plugin
    view): its ``delta_view`` URL is the link there, the same page as the task's "Delta table"."""
    import pyarrow as pa
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_delta_provider.operators.delta import delta_asset
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
    root = str(tmp_path / "orders")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1, 2, 3]}))
    op = DeltaDeleteOperator(task_id="purge", table_uri=root, predicate="id = 1", execution="local")
    events = OutletEventAccessors()
    assert op.execute({"outlet_events": events})["version"] == 2
    extra = events[delta_asset(root)].extra
    assert extra["delta_view"] == DeltaTableLink().get_link(op, ti_key=None)
    assert extra["delta_view"] == f"http://airflow.example:8080/delta-view/?table={quote(root, safe='')}&version=2"

    monkeypatch.setenv("AIRFLOW__DELTA__UI_ENABLED", "false")  # the view off: no link to it
    events = OutletEventAccessors()
    DeltaDeleteOperator(task_id="purge", table_uri=root, predicate="id = 2", execution="local").execute(
        {"outlet_events": events}
    )
    assert "delta_view" not in events[delta_asset(root)].extra
