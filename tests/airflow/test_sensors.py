"""DeltaTableVersionSensor under a real Airflow runtime (dag.test, which runs triggers inline): poke,
reschedule and deferrable sensors fire when another process commits after their first poke; idle
sensors time out cleanly; a missing table fails at once. No Spark: the log is read by the pure core.

"Another process" is a thread here that watches the task state store (in the Airflow SQLite DB) for
each sensor's recorded baseline and only then commits to that sensor's table, so every commit lands
strictly after the sensor's first poke.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from conftest import HERE
from delta_commits import append, create

from airflow_delta_provider.sensors.delta import BASELINE_STATE_KEY

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]

DAG_ID = "delta_test_sensors"


class Committer(threading.Thread):
    """Commit to a sensor's table once its baseline is in the task state store."""

    def __init__(self, airflow_home, plan: dict, deadline_s: float = 400):
        super().__init__(daemon=True)
        self.home, self.plan, self.deadline = airflow_home, dict(plan), time.monotonic() + deadline_s
        self.baselines: dict[str, object] = {}
        self.committed: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self):
        while self.plan and not self.stop.is_set() and time.monotonic() < self.deadline:
            stored = self.home.state_store(DAG_ID, BASELINE_STATE_KEY)
            for task_id in [t for t in self.plan if t in stored]:
                self.baselines[task_id] = stored[task_id]
                self.committed[task_id] = self.plan.pop(task_id)()
            time.sleep(0.2)


def test_version_sensor_modes(airflow_home, tmp_path):
    t = {name: str(tmp_path / name) for name in ("t_poke", "t_reschedule", "t_deferrable", "t_new", "t_idle")}
    for name in ("t_poke", "t_reschedule", "t_deferrable", "t_idle"):
        create(t[name])
    append(t["t_poke"], [1, 2])  # t_poke starts at version 1

    committer = Committer(
        airflow_home,
        {
            "fire_poke": lambda: append(t["t_poke"], [3]),
            "fire_reschedule": lambda: append(t["t_reschedule"], [4]),
            "fire_deferrable": lambda: append(t["t_deferrable"], [5]),
            "fire_new_table": lambda: create(t["t_new"]),
        },
    )
    committer.start()
    airflow_home.add_dag(HERE / "dags" / "delta_test_sensors.py")
    try:
        summary = airflow_home.run(DAG_ID, env={"DELTA_TEST_ROOT": str(tmp_path)})
    finally:
        committer.stop.set()
        committer.join()
    tasks = summary["tasks"]
    states = {k: v["state"] for k, v in tasks.items()}
    assert states == {
        "fire_poke": "success",
        "fire_reschedule": "success",
        "fire_deferrable": "success",
        "fire_new_table": "success",
        "timeout_poke": "failed",
        "timeout_deferrable": "failed",
        "missing_table": "failed",
    }, (states, committer.baselines, committer.committed)

    # each fired on the commit made after its first poke, with the baseline seen at that poke
    assert committer.baselines == {"fire_poke": 1, "fire_reschedule": 0, "fire_deferrable": 0, "fire_new_table": -1}
    assert committer.committed == {"fire_poke": 2, "fire_reschedule": 1, "fire_deferrable": 1, "fire_new_table": 0}
    xcom = {k: v["xcom"] for k, v in tasks.items()}
    assert xcom["fire_poke"]["version"] == 2 and xcom["fire_poke"]["baseline"] == 1
    assert [(o["version"], o["operation"]) for o in xcom["fire_poke"]["operations"]] == [(2, "WRITE")]
    assert isinstance(xcom["fire_poke"]["operations"][0]["timestamp"], int)
    assert (xcom["fire_reschedule"]["version"], xcom["fire_reschedule"]["baseline"]) == (1, 0)
    assert (xcom["fire_deferrable"]["version"], xcom["fire_deferrable"]["baseline"]) == (1, 0)
    assert [(o["version"], o["operation"]) for o in xcom["fire_deferrable"]["operations"]] == [(1, "WRITE")]
    assert xcom["fire_new_table"] == {
        "version": 0,
        "baseline": -1,
        "operations": [
            {
                "version": 0,
                "operation": "CREATE TABLE",
                "timestamp": xcom["fire_new_table"]["operations"][0]["timestamp"],
            }
        ],
    }
    assert all(xcom[k] is None for k in ("timeout_poke", "timeout_deferrable", "missing_table"))
    # the reschedule sensor really went through reschedules (new task runs) and kept its baseline
    assert tasks["fire_reschedule"]["try_number"] == 1
    con = sqlite3.connect(f"file:{airflow_home.db}?mode=ro", uri=True)
    try:
        reschedules = con.execute(
            "SELECT count(*) FROM task_reschedule tr JOIN task_instance ti ON tr.ti_id = ti.id "
            "WHERE ti.dag_id = ? AND ti.task_id = 'fire_reschedule'",
            (DAG_ID,),
        ).fetchone()[0]
    finally:
        con.close()
    assert reschedules >= 1
    # fired sensors forget their baseline (a cleared sensor starts over); timed-out ones keep it
    assert airflow_home.state_store(DAG_ID, BASELINE_STATE_KEY) == {"timeout_poke": 0, "timeout_deferrable": 0}
