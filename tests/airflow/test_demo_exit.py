"""``make demo`` fails (exit code 1) when the quickstart DAG run fails, naming the failed task and the error.

The failed-run report used to sit after a ``return``, so a failed run ended ``make demo`` with exit code 0.
Here the quickstart's Delta tasks name a storage connection that does not exist
(``DELTA_QUICKSTART_STORAGE_CONN``): each fails at once in the worker, before any spark-submit, so the
test costs one ``airflow db migrate`` and one short DAG run. It runs ``example_dags/run_demo.py`` exactly as
``make demo`` does (no arguments), in its own demo folder.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, RUN_DEMO

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def test_a_failed_quickstart_run_fails_make_demo_and_names_the_failed_task(tmp_path):
    env = {
        **os.environ,
        "DELTA_DEMO_DIR": str(tmp_path / "demo"),
        "DELTA_QUICKSTART_STORAGE_CONN": "delta_demo_missing_conn",  # read by the DAG at parse time
    }
    env.pop("AIRFLOW_HOME", None)  # the demo makes its own home under DELTA_DEMO_DIR
    proc = subprocess.run(
        [sys.executable, str(RUN_DEMO)],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=840,
    )
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:]
    assert "DAG run" in out and ": failed in" in out, out[-4000:]  # the summary read back from the DB
    failed = next(line for line in out.splitlines() if "Failed tasks:" in line)
    assert "create_table" in failed, out[-4000:]
    assert "Storage connection 'delta_demo_missing_conn' does not exist" in out, out[-4000:]  # the last errors
    assert "delta_lakehouse_pipeline" not in out  # the pipeline runs only after a successful quickstart


def test_the_pipeline_lines_show_what_the_version_sensor_saw_not_none():
    sys.path.insert(0, str(REPO / "example_dags"))
    try:
        import run_demo
    finally:
        sys.path.pop(0)
    sensor = {"version": 1, "baseline": 0, "operations": [{"version": 1, "operation": "WRITE", "timestamp": 1}]}
    line = run_demo._pipeline_line("wait_for_bronze", {"state": "success", "seconds": 0.12, "xcom": sensor})
    assert "None" not in line and line.split() == ["wait_for_bronze", "0.1", "s", "saw", "v1", "WRITE", "v1"]
    merge = {"operation": "MERGE", "version": 2, "metrics": {"numSourceRows": 3}}
    assert run_demo._pipeline_line("upsert_silver", {"state": "success", "seconds": 2.0, "xcom": merge}).split() == [
        "upsert_silver",
        "2.0",
        "s",
        "MERGE",
        "v2",
        "numSourceRows=3",
    ]
    assert run_demo._pipeline_line("vacuum", {"state": "skipped", "xcom": None}).split() == [
        "vacuum",
        "-",
        "s",
        "skipped",
    ]
