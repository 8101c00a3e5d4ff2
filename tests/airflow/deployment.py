"""A REAL Airflow 3 deployment for the end-to-end tests: an API server, a dag-processor, a scheduler
with the LocalExecutor (and a triggerer when asked) on SQLite, started on loopback with one DAG file in
a temporary AIRFLOW_HOME. Used by test_backfill.py (backfills, retries, clears) and
test_commit_watcher.py (event-driven scheduling on a table's commits)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


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
        try:
            self._spawn("api-server", "api-server", "--port", str(self.port))
            for name in self.background:
                self._spawn(name, name)
            self.wait(
                lambda: self.query("SELECT count(*) FROM dag WHERE dag_id = ?", self.dag_id)[0][0] == 1, "DAG parsed"
            )
        except BaseException:
            self.stop()  # the caller's finally may not cover start()
            raise

    def _spawn(self, name: str, *args: str) -> None:
        out = open(self.home / f"{name}.log", "a")
        # a session of its own: its children (the scheduler's serve-logs and LocalExecutor workers) are
        # killed with it by _stop, not left running after the test
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args], env=self.env, stdout=out, stderr=out, start_new_session=True
        )
        self.procs[name] = (proc, out, args)

    def _stop(self, names) -> None:
        """SIGTERM to each process (a graceful stop), SIGKILL after 30 s; then SIGKILL to whatever of its
        process group is left (children it did not stop)."""
        for name in names:
            self.procs[name][0].terminate()
        for name in names:
            proc, out, _ = self.procs[name]
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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

    def restart(self, name: str) -> None:
        """Stop one background process (SIGTERM, as a deployment's restart does) and start it again."""
        self._stop([name])
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
