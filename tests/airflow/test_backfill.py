"""Exactly once under a REAL Airflow 3 deployment: an API server, a dag-processor and a scheduler with
the LocalExecutor on SQLite (Airflow 3.3 has no SequentialExecutor), started here on loopback.

A daily append DAG (no app_id) is backfilled over 3 dates; 2 of them fail after their commit landed
and are retried by Airflow (no new commit); 2 dates are cleared and re-run (one new commit each,
replacing that date's rows); the range is backfilled again without and with
``--reprocess-behavior completed``. Throughout, the table holds exactly 5 rows per date, and the log
holds exactly the commits described."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import HERE

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

DAG_ID = "delta_test_backfill"
DATES = ["2026-01-01", "2026-01-02", "2026-01-03"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    def __init__(self, home: Path, root: Path):
        self.home, self.root = home, root
        port = _free_port()
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            # Five processes share one SQLite file: wait for its lock instead of failing after
            # sqlite3's default 5 s (a CLI command racing the scheduler failed in CI).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "sqlite_busy.CONNECT_ARGS",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(home), os.environ.get("PYTHONPATH")])),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[1]"}',
            "DELTA_TEST_ROOT": str(root),
            "DELTA_TEST_FLAKY_DATES": "2026-01-01,2026-01-03",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.port = port
        self.procs: dict = {}  # name -> (process, log file, arguments)

    def airflow(self, *args: str, check: bool = True) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and p.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        return p.stdout

    def start(self) -> None:
        (self.home / "dags").mkdir(parents=True)
        (self.home / "dags" / "delta_test_backfill.py").write_text(
            (HERE / "dags" / "delta_test_backfill.py").read_text()
        )
        (self.home / "sqlite_busy.py").write_text("CONNECT_ARGS = {'timeout': 120}\n")
        self.airflow("db", "migrate")
        # Write-ahead logging: the test's readers (and Airflow's) never block a writer's commit.
        con = sqlite3.connect(self.home / "airflow.db")
        try:
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()
        self._spawn("api-server", "api-server", "--port", str(self.port))
        self._spawn("dag-processor", "dag-processor")
        self._spawn("scheduler", "scheduler")
        self.wait(lambda: self.query("SELECT count(*) FROM dag WHERE dag_id = ?", DAG_ID)[0][0] == 1, "DAG parsed")

    def _spawn(self, name: str, *args: str) -> None:
        out = open(self.home / f"{name}.log", "a")
        proc = subprocess.Popen([sys.executable, "-m", "airflow", *args], env=self.env, stdout=out, stderr=out)
        self.procs[name] = (proc, out, args)

    def _stop(self, names) -> None:
        for name in names:
            self.procs[name][0].terminate()
        for name in names:
            proc, out, _ = self.procs[name]
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out.close()

    def admin(self, *args: str) -> str:
        """An admin command (backfill create, tasks clear) while the scheduler and the dag-processor are
        stopped. SQLite has one writer: Airflow creates each backfill run in a SAVEPOINT that reads and
        then writes, and SQLite fails such a transaction at once ("database is locked", no busy wait)
        when another process committed in between; CI saw it. On PostgreSQL or MySQL this is not needed."""
        background = ["scheduler", "dag-processor"]
        self._stop(background)
        try:
            return self.airflow(*args)
        finally:
            for name in background:
                self._spawn(name, *self.procs[name][2])

    def stop(self) -> None:
        self._stop(list(self.procs))

    def query(self, sql: str, *args):
        for _ in range(50):
            try:
                con = sqlite3.connect(self.home / "airflow.db", timeout=30)
                try:
                    return con.execute(sql, args).fetchall()
                finally:
                    con.close()
            except sqlite3.OperationalError:
                time.sleep(0.2)
        raise AssertionError("cannot read the Airflow DB")

    def wait(self, done, what: str, timeout: float = 420) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            dead = [name for name, (p, _, _) in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = {f.name: f.read_text()[-3000:] for f in self.home.glob("*.log")}
                raise AssertionError(f"waiting for {what}: {'a component died' if dead else 'timed out'}\n{logs}")
            time.sleep(1)

    def backfills_done(self) -> bool:
        return not self.query("SELECT id FROM backfill WHERE dag_id = ? AND completed_at IS NULL", DAG_ID)

    def runs(self) -> dict[str, str]:
        """{logical date: state} of the DAG's runs."""
        rows = self.query("SELECT logical_date, state FROM dag_run WHERE dag_id = ?", DAG_ID)
        return {str(d)[:10]: s for d, s in rows}

    def tries(self) -> dict[str, int]:
        """{logical date: try_number} of the append task."""
        rows = self.query(
            "SELECT r.logical_date, t.try_number FROM task_instance t JOIN dag_run r ON t.run_id = r.run_id "
            "AND t.dag_id = r.dag_id WHERE t.dag_id = ? AND t.task_id = 'append_day'",
            DAG_ID,
        )
        return {str(d)[:10]: n for d, n in rows}

    def all_done(self, dates, *, after: dict | None = None):
        def done():
            runs, tries = self.runs(), self.tries()
            if any(runs.get(d) in ("failed",) for d in dates):
                raise AssertionError(f"a run failed: {runs}\n{(self.home / 'scheduler.log').read_text()[-3000:]}")
            ok = all(runs.get(d) == "success" for d in dates)
            moved = after is None or all(tries.get(d, 0) > after.get(d, 0) for d in dates)
            return ok and moved

        return done


def _table_state(table: str):
    import deltalake

    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot, read_commit_infos
    from airflow_delta_provider_apps.engine.storage import storage_for

    rows = deltalake.DeltaTable(table).to_pyarrow_table(columns=["day"]).column("day").to_pylist()
    snap = load_snapshot(storage_for(table), table)
    infos = read_commit_infos(storage_for(table), table, range(1, snap.version + 1))
    writes = [infos[v] for v in sorted(infos) if infos[v].operation == "WRITE"]
    return Counter(rows), writes


def test_retries_clears_and_backfills_apply_each_day_once(tmp_path):
    from airflow_delta_provider_apps.engine.commands.create_table import create_table

    root = tmp_path / "lake"
    table = str(root / "table")
    create_table(table, schema="day STRING, n BIGINT")
    d = Deployment(tmp_path / "airflow", root)
    try:
        d.start()
        d.admin("backfill", "create", "--dag-id", DAG_ID, "--from-date", DATES[0], "--to-date", DATES[-1])
        d.wait(d.all_done(DATES), "the backfill")
        tries = d.tries()
        assert tries["2026-01-01"] == 2 and tries["2026-01-03"] == 2 and tries["2026-01-02"] == 1  # 2 retries
        days, writes = _table_state(table)
        assert {k: days[k] for k in DATES} == dict.fromkeys(DATES, 5)
        first = len(writes)  # one WRITE per date (plus the scheduler's own latest run, if it made one)
        assert first == len(d.runs())  # the retries after a landed commit committed nothing

        before = d.tries()
        d.admin("tasks", "clear", DAG_ID, "-s", "2026-01-02", "-e", "2026-01-03", "-y")
        d.wait(d.all_done(["2026-01-02", "2026-01-03"], after=before), "the cleared dates")
        days, writes = _table_state(table)
        assert {k: days[k] for k in DATES} == dict.fromkeys(DATES, 5)  # replaced, not doubled
        assert len(writes) == first + 2
        replaced = [
            json.loads(w.get("operationParameters", {}).get("replacesVersion", "null") or "null") for w in writes
        ]
        assert sum(r is not None for r in replaced) == 2

        d.wait(d.backfills_done, "the backfill to be marked completed")
        d.admin("backfill", "create", "--dag-id", DAG_ID, "--from-date", DATES[0], "--to-date", DATES[-1])
        d.wait(d.backfills_done, "the no-op backfill to be marked completed")  # runs exist: none is re-run
        assert len(_table_state(table)[1]) == first + 2
        before = d.tries()
        d.admin(
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            DATES[0],
            "--to-date",
            DATES[-1],
            "--reprocess-behavior",
            "completed",
        )
        d.wait(d.all_done(DATES, after=before), "the reprocessing backfill")
        days, writes = _table_state(table)
        assert {k: days[k] for k in DATES} == dict.fromkeys(DATES, 5)
        assert len(writes) == first + 2 + 3
        assert sum(v == 5 for v in days.values()) == len(days)  # every date, the scheduler's too
    finally:
        d.stop()
