"""Test DAG: DeltaTableVersionSensor in every mode, each on its own table under $DELTA_TEST_ROOT.

* ``fire_poke`` / ``fire_reschedule`` / ``fire_deferrable``: baseline = version at the first poke; the test
  commits to their table once it sees the baseline in the task state store: they must fire.
* ``fire_new_table``: no table yet, ``wait_for_table=True``: fires when the test creates it.
* ``timeout_poke`` / ``timeout_deferrable``: nobody commits: they must time out (short timeout).
* ``missing_table``: no table and not waiting: fails at once.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG

from airflow_delta_provider.sensors.delta import DeltaTableVersionSensor

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_sensors"))
WAIT = float(os.environ.get("DELTA_TEST_SENSOR_TIMEOUT", "180"))


def table(name: str) -> str:
    return os.path.join(ROOT, name)


with DAG(dag_id="delta_test_sensors", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    DeltaTableVersionSensor(task_id="fire_poke", table_uri=table("t_poke"), poke_interval=0.5, timeout=WAIT)
    DeltaTableVersionSensor(
        task_id="fire_reschedule", table_uri=table("t_reschedule"), poke_interval=1, timeout=WAIT, mode="reschedule"
    )
    DeltaTableVersionSensor(
        task_id="fire_deferrable", table_uri=table("t_deferrable"), poke_interval=0.5, timeout=WAIT, deferrable=True
    )
    DeltaTableVersionSensor(
        task_id="fire_new_table", table_uri=table("t_new"), wait_for_table=True, poke_interval=0.5, timeout=WAIT
    )
    DeltaTableVersionSensor(task_id="timeout_poke", table_uri=table("t_idle"), poke_interval=0.5, timeout=2)
    DeltaTableVersionSensor(
        task_id="timeout_deferrable", table_uri=table("t_idle"), poke_interval=0.5, timeout=2, deferrable=True
    )
    DeltaTableVersionSensor(task_id="missing_table", table_uri=table("t_missing"), poke_interval=0.5, timeout=WAIT)
