"""End-to-end Airflow fixtures: ONE temporary Airflow home with SQLite for the session (``airflow db
migrate`` once), and a runner that executes one DAG run with ``dag.test()`` in a child process
(``example_dags/run_demo.py run``: the same machinery as ``make demo``), returning the run summary
read back from the Airflow DB (task states, try numbers, XCom return values).

Each DAG run gets its own process so Airflow's configuration (read at import) is exactly the test
home's, whatever else this pytest process imported. Spark tasks use REAL spark-submit in local mode.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_DEMO = REPO / "example_dags" / "run_demo.py"
HERE = Path(__file__).resolve().parent


@dataclass
class AirflowHome:
    home: Path
    logs: Path
    runs: list = field(default_factory=list)

    @property
    def dags(self) -> Path:
        return self.home / "dags"

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def add_dag(self, source: Path, name: str | None = None) -> Path:
        target = self.dags / (name or source.name)
        shutil.copy(source, target)
        return target

    def run(self, dag_id: str, *, date: str = "2026-01-01", env: dict | None = None, timeout: int = 900) -> dict:
        """Run ``dag_id`` once; return the summary (``state``, ``tasks`` -> {state, try_number, xcom})."""
        log_path = self.logs / f"{dag_id}-{len(self.runs)}.log"
        full_env = {**os.environ, **(env or {})}
        full_env.pop("AIRFLOW_HOME", None)  # run_demo sets the home's variables itself
        with open(log_path, "w") as log:
            proc = subprocess.run(
                [sys.executable, str(RUN_DEMO), "run", "--home", str(self.home), "--dag-id", dag_id, "--date", date],
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                timeout=timeout,
                cwd=str(REPO),
            )
            log.write("\n--- stdout ---\n" + proc.stdout)
        self.runs.append(log_path)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise AssertionError(
                f"dag run {dag_id} did not complete (exit {proc.returncode}); log: {log_path}\n"
                + log_path.read_text()[-3000:]
            )
        # the summary object itself: a library's log line (OpenLineage) may land on the same stdout line
        return json.JSONDecoder().raw_decode(lines[-1])[0]

    def state_store(self, dag_id: str, key: str) -> dict[str, object]:
        """{task_id: value} of the task state store rows with ``key`` (read straight from SQLite)."""
        for _ in range(50):
            try:
                con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
                try:
                    rows = con.execute(
                        "SELECT task_id, value FROM task_state_store WHERE dag_id = ? AND key = ?", (dag_id, key)
                    ).fetchall()
                finally:
                    con.close()
                return {t: json.loads(v) for t, v in rows}
            except sqlite3.OperationalError:  # locked by the DAG run: try again
                time.sleep(0.1)
        raise AssertionError("cannot read the task state store")


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> AirflowHome:
    home = tmp_path_factory.mktemp("airflow_home")
    logs = tmp_path_factory.mktemp("dag_run_logs")
    proc = subprocess.run(
        [sys.executable, str(RUN_DEMO), "migrate", "--home", str(home)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return AirflowHome(home=home, logs=logs)
