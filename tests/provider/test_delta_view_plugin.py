"""The Delta view plugin's switches and links (issue 42): ``[delta] ui_enabled = False`` mounts nothing;
the provider info declares the plugin; the task's "Delta table" link opens the view at the version the
task committed (none when it committed nothing). The page itself: tests/airflow/test_delta_view.py."""

from __future__ import annotations

import os
import subprocess
import sys

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
