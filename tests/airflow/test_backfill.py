"""Exactly once under a REAL Airflow 3 deployment: an API server, a dag-processor, a triggerer and a
scheduler with the LocalExecutor on SQLite (Airflow 3.3 has no SequentialExecutor), started here on
loopback, running the lakehouse pipeline example (example_dags/delta_lakehouse_pipeline.py).

The pipeline is backfilled over 3 dates; on the first try, its bronze append (first date) and its
silver upsert (last date) fail after their commit landed and are retried by Airflow (no new commit);
2 dates are cleared and re-run (the append replaces that day's rows, the upsert applies again); the
range is backfilled again without ``--reprocess-behavior`` and its last two dates with
``--reprocess-behavior completed``. Throughout, bronze holds
each day's records exactly once, silver equals the one-pass result computed from the landing files
without our engine, and the tables' histories hold exactly the commits described."""

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
from conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

DATES = ["2026-01-01", "2026-01-02", "2026-01-03"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    def __init__(self, home: Path, root: Path, dag_id: str, dag_text: str, *, triggerer: bool = False, **env: str):
        self.home, self.root, self.dag_id, self.dag_text = home, root, dag_id, dag_text
        self.background = ["scheduler", "dag-processor"] + (["triggerer"] if triggerer else [])
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
            "PYSPARK_PYTHON": sys.executable,
            # only backfills and clears create runs (no run of the latest interval beside them)
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            **env,
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
        (self.home / "dags" / f"{self.dag_id}.py").write_text(self.dag_text)
        (self.home / "sqlite_busy.py").write_text("CONNECT_ARGS = {'timeout': 120}\n")
        self.airflow("db", "migrate")
        # Write-ahead logging: the test's readers (and Airflow's) never block a writer's commit.
        con = sqlite3.connect(self.home / "airflow.db")
        try:
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()
        self._spawn("api-server", "api-server", "--port", str(self.port))
        for name in self.background:
            self._spawn(name, name)
        self.wait(lambda: self.query("SELECT count(*) FROM dag WHERE dag_id = ?", self.dag_id)[0][0] == 1, "DAG parsed")

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
        when another process committed in between; CI saw it. On PostgreSQL or MySQL this is not needed.
        The triggerer (a writer too) is stopped likewise."""
        self._stop(self.background)
        try:
            return self.airflow(*args)
        finally:
            for name in self.background:
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
        return not self.query("SELECT id FROM backfill WHERE dag_id = ? AND completed_at IS NULL", self.dag_id)

    def runs(self) -> dict[str, str]:
        """{logical date: state} of the DAG's runs."""
        rows = self.query("SELECT logical_date, state FROM dag_run WHERE dag_id = ?", self.dag_id)
        return {str(d)[:10]: s for d, s in rows}

    def tries(self, task_id: str) -> dict[str, int]:
        """{logical date: try_number} of one task."""
        rows = self.query(
            "SELECT r.logical_date, t.try_number FROM task_instance t JOIN dag_run r ON t.run_id = r.run_id "
            "AND t.dag_id = r.dag_id WHERE t.dag_id = ? AND t.task_id = ?",
            self.dag_id,
            task_id,
        )
        return {str(d)[:10]: n for d, n in rows}

    def all_done(self, dates, task_id: str, *, after: dict | None = None):
        """Every run of ``dates`` succeeded (and ``task_id`` ran again since ``after``, its tries then)."""

        def done():
            runs, tries = self.runs(), self.tries(task_id)
            if any(runs.get(d) in ("failed",) for d in dates):
                raise AssertionError(f"a run failed: {runs}\n{(self.home / 'scheduler.log').read_text()[-3000:]}")
            ok = all(runs.get(d) == "success" for d in dates)
            moved = after is None or all(tries.get(d, 0) > after.get(d, 0) for d in dates)
            return ok and moved

        return done


# The lakehouse pipeline example as this test runs it: the same DAG file, plus (appended) a worker that
# dies after the commit landed on the first try of append_bronze on the first date and of upsert_silver
# on the last (Airflow retries both), and the erasure DELETE and OPTIMIZE in the worker (execution
# "local": they need no Spark, which keeps the test's spark-submits to the two that need it).
PIPELINE_TEST_ADDITIONS = """

# ---- added by tests/airflow/test_backfill.py
import datetime as _dt

_DIE_AFTER_COMMIT = {"append_bronze": "2026-01-01", "upsert_silver": "2026-01-03"}


def _dies_once(task_id):
    def post_execute(context, result=None):
        if context["ds"] == _DIE_AFTER_COMMIT[task_id] and context["ti"].try_number == 1:
            raise RuntimeError("the worker died after the commit landed")

    return post_execute


for _task_id in _DIE_AFTER_COMMIT:
    _task = dag.get_task(_task_id)
    _task.post_execute, _task.retries, _task.retry_delay = _dies_once(_task_id), 1, _dt.timedelta(0)
for _task_id in ("erase", "compact"):
    dag.get_task(_task_id).execution = "local"
"""
PIPELINE_ID = "delta_lakehouse_pipeline"


def _one_pass_silver(landing: Path, dates) -> list[tuple]:
    """Silver after one clean pass over ``dates``, computed from the landing files without our engine:
    per date, the latest record per customer replaces it (or is inserted), then the day's erasure list
    (the example's formula) deletes."""
    import zlib

    import pyarrow.parquet as pq

    silver: dict = {}
    for ds in dates:
        day = sorted(pq.read_table(landing / f"customers_{ds}.parquet").to_pylist(), key=lambda r: r["updated_at"])
        for r in day:  # the greatest updated_at per key wins (dedupe_by="updated_at")
            silver[r["customer_id"]] = r
        seed = zlib.crc32(ds.encode())
        for cid in {(seed >> 3) % 40, (seed >> 7) % 40}:
            silver.pop(cid, None)
    cols = ["customer_id", "name", "tier", "updated_at", "region", "dt"]
    return sorted(tuple(r[c] for c in cols) for r in silver.values())


def _pipeline_state(root: Path):
    import deltalake

    bronze = deltalake.DeltaTable(str(root / "tables" / "bronze_customers"))
    silver = deltalake.DeltaTable(str(root / "tables" / "silver_customers"))
    cols = ["customer_id", "name", "tier", "updated_at", "region", "dt"]
    silver_rows = sorted(tuple(r[c] for c in cols) for r in silver.to_pyarrow_table(columns=cols).to_pylist())
    per_day = Counter(bronze.to_pyarrow_table(columns=["dt"]).column("dt").to_pylist())
    ops = lambda t: Counter(h["operation"] for h in t.history())  # noqa: E731
    return per_day, silver_rows, ops(bronze), ops(silver)


def test_the_lakehouse_pipeline_under_backfills_retries_and_clears(tmp_path, connect_server):
    """Issue 17's backfill sequence on the pipeline example: bronze holds each day's 13 records once and
    silver equals the one-pass result after the backfill (with 2 retries after landed commits), after
    clearing 2 dates, after a no-op backfill and after reprocessing the last 2 dates; the tables' histories hold
    exactly one WRITE and one MERGE per applied day. Its ~40 Spark tasks run over the suite's Spark
    Connect server (the exactly-once identity is the operators', whatever the transport; a task that
    fails after its commit over spark-submit is tests/airflow/test_retry_after_commit.py)."""
    root = tmp_path / "lake"
    text = (REPO / "example_dags" / "delta_lakehouse_pipeline.py").read_text() + PIPELINE_TEST_ADDITIONS
    conn = json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port})
    d = Deployment(
        tmp_path / "airflow",
        root,
        PIPELINE_ID,
        text,
        triggerer=True,
        DELTA_PIPELINE_ROOT=str(root),
        AIRFLOW_CONN_SPARK_LOCAL=conn,
    )
    try:
        d.start()
        backfill = ["backfill", "create", "--dag-id", PIPELINE_ID, "--from-date", DATES[0], "--to-date", DATES[-1]]
        d.admin(*backfill, "--max-active-runs", "1")  # in date order, as the daily schedule would
        d.wait(d.all_done(DATES, "upsert_silver"), "the pipeline's backfill", timeout=900)
        assert d.tries("append_bronze")["2026-01-01"] == 2 and d.tries("upsert_silver")["2026-01-03"] == 2
        expected = _one_pass_silver(root / "landing", DATES)
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (3, 3)  # the retries committed nothing

        before = d.tries("upsert_silver")
        d.admin("tasks", "clear", PIPELINE_ID, "-s", DATES[1], "-e", DATES[2], "-y")
        d.wait(d.all_done(DATES[1:], "upsert_silver", after=before), "the cleared dates", timeout=900)
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected  # replaced and re-applied
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (5, 5)

        d.wait(d.backfills_done, "the backfill to be marked completed")
        d.admin(*backfill)
        d.wait(d.backfills_done, "the no-op backfill to be marked completed")
        assert _pipeline_state(root)[2:] == (bronze_ops, silver_ops)  # runs exist: nothing ran again

        # reprocessing the last two dates (the first date's run is not part of the range: kept as is)
        before = d.tries("upsert_silver")
        again = ["backfill", "create", "--dag-id", PIPELINE_ID, "--from-date", DATES[1], "--to-date", DATES[-1]]
        d.admin(*again, "--max-active-runs", "1", "--reprocess-behavior", "completed")
        d.wait(d.all_done(DATES[1:], "upsert_silver", after=before), "the reprocessing backfill", timeout=900)
        assert d.tries("upsert_silver")[DATES[0]] == before[DATES[0]]
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (7, 7)
    finally:
        d.stop()
