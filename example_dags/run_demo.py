"""``make demo``: run example_dags/delta_quickstart.py end to end in a throw-away Airflow home.

Steps: a fresh ``AIRFLOW_HOME`` with SQLite (``demo/airflow_home``, examples off), ``airflow db migrate``,
the DAG copied into that home's dags folder, one DAG run with ``dag.test()`` (real spark-submit of the
bundled apps against ``local[2]``), then the results are read back FROM THE AIRFLOW DB (task states and
XCom ``return_value`` rows), and the table's version is read from its ``_delta_log`` without Spark.
A successful run goes on to the lakehouse pipeline; a failed one prints the failed tasks and the last
error lines and exits with 1 (so does ``make demo``).

Also a small runner used by tests/airflow (one DAG run per process, so each run gets a clean Airflow
configuration)::

    python example_dags/run_demo.py migrate --home H
    python example_dags/run_demo.py run --home H --dag-id D [--date 2026-01-01]   # last stdout line: JSON summary

Environment: ``DELTA_DEMO_DIR`` (default ``<repo>/demo``), ``DELTA_DEMO_DATE`` (default 2026-01-01).
Airflow itself is imported only after the environment points at the demo home.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_FILE = os.path.join(REPO, "example_dags", "delta_quickstart.py")
DAG_ID = "delta_quickstart"
LOCAL_SPARK_CONN = '{"conn_type": "spark", "host": "local[2]"}'


def airflow_env(home: str) -> dict[str, str]:
    """Environment for a self-contained Airflow home with SQLite."""
    home = os.path.abspath(home)
    return {
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(home, "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{os.path.join(home, 'airflow.db')}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO"),
        "AIRFLOW_CONN_SPARK_LOCAL": os.environ.get("AIRFLOW_CONN_SPARK_LOCAL", LOCAL_SPARK_CONN),
    }


def migrate(home: str) -> dict[str, str]:
    """Create ``home`` (and its dags folder) and run ``airflow db migrate`` in a child process."""
    env = airflow_env(home)
    os.makedirs(env["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"airflow db migrate failed:\n{proc.stdout[-4000:]}")
    return env


def run_dag(dag_id: str, logical_date: datetime, run_after: datetime | None = None) -> dict:
    """Run one DAG run with ``dag.test()`` in THIS process (environment already set) and summarise it
    from the Airflow DB: run state, and per task its state, try number, wall time (``seconds``) and XCom
    ``return_value``. ``run_after`` (default: now) also names the run (``manual__<run_after>``)."""
    from airflow import settings

    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3.2 and later
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    bag = DagBag(dag_folder=settings.DAGS_FOLDER, safe_mode=False)
    if dag_id not in bag.dags:
        raise SystemExit(f"DAG {dag_id!r} not found in {settings.DAGS_FOLDER}; import errors: {bag.import_errors}")
    dag = bag.dags[dag_id]
    started = time.monotonic()
    dr = dag.test(logical_date=logical_date, run_after=run_after)
    elapsed = time.monotonic() - started
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == dr.run_id))
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == dr.run_id)
        ).all()
        xcoms = session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id, key="return_value")).all()
        values = {x.task_id: XComModel.deserialize_value(x) for x in xcoms}
        return {
            "dag_id": dag_id,
            "run_id": dr.run_id,
            "state": str(run.state),
            "seconds": round(elapsed, 1),
            "tasks": {
                ti.task_id: {
                    "state": str(ti.state),
                    "try_number": ti.try_number,
                    "seconds": round(ti.duration, 2) if ti.duration is not None else None,  # the task's wall time
                    "xcom": values.get(ti.task_id),
                }
                for ti in sorted(tis, key=lambda t: (t.start_date is None, t.start_date or 0, t.task_id))
            },
        }


def _parse_date(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _commits(x: dict) -> str:
    """A version sensor's XCom (``{"version", "baseline", "operations"}``: no operation of its own), in
    words: the version it saw and the commits since its baseline."""
    seen = f"saw version {x.get('version')}"
    if x.get("baseline") is not None:
        seen += f" (after {x['baseline']})"
    ops = [f"{o.get('operation')} v{o.get('version')}" for o in x.get("operations") or [] if isinstance(o, dict)]
    return seen + (f": {', '.join(ops)}" if ops else "")


def _print_summary(summary: dict, table_uri: str) -> None:
    print()
    print(f"DAG run {summary['run_id']}: {summary['state']} in {summary['seconds']} s")
    for task_id, t in summary["tasks"].items():  # in the order they ran
        x = t["xcom"]
        if isinstance(x, dict) and "operation" in x:
            detail = f"{x.get('operation')} -> version {x.get('version')}{' (skipped)' if x.get('skipped') else ''}"
            detail += f"\n      metrics: {json.dumps(x.get('metrics'), sort_keys=True)}"
        elif isinstance(x, dict) and "version" in x:
            detail = _commits(x)
        else:
            detail = "" if x is None else repr(x)  # a task that failed or did not run has no XCom
        print(f"  {task_id:<14} {t['state']:<8} {detail}".rstrip())
    try:
        from airflow_delta_provider_apps.engine.log.listing import latest_version
        from airflow_delta_provider_apps.engine.storage import storage_for

        version = latest_version(storage_for(table_uri), table_uri)
    except Exception as e:  # the summary above still stands
        version = f"unknown ({e})"
    if version is None:  # the run failed before the table was created: nothing to cross-check
        print(f"\nTable: {table_uri}: not created")
        return
    print(f"\nTable: {table_uri}\nVersion in its _delta_log (read without Spark): {version}")
    try:
        import deltalake

        # delta-rs's own reader (DataFusion, in Rust), not dt.to_pyarrow_table(): that scans through a
        # pyarrow dataset over a Python filesystem handler, and pyarrow's thread pool drops its last
        # references to those Python objects (handler, buffers) AFTER to_table() returned. When that
        # happens once the interpreter is finalizing, PyGILState_Ensure ends the pool thread inside a
        # noexcept C++ destructor: std::terminate, "terminate called without an active exception",
        # SIGABRT after a successful demo. Nothing here leaves Python objects to background threads.
        dt = deltalake.DeltaTable(table_uri)
        rows = deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all().num_rows
        print(
            f"deltalake (delta-rs) reads version {dt.version()}: {rows} rows, "
            f"partitioned by {dt.metadata().partition_columns}"
        )
    except ImportError:
        pass
    except Exception as e:
        print(f"deltalake could not read the table: {e}")


def _run_logged(env: dict, dag_id: str, date: str, log_path: str) -> tuple[dict | None, list[str], int]:
    """One DAG run in a child process (``run``), its output appended to ``log_path``: (the summary,
    or None when the run did not finish; the output lines; the exit code)."""
    with open(log_path, "a") as log:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "run", "--home", env["AIRFLOW_HOME"], "--dag-id", dag_id]
            + ["--date", date],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.write(proc.stdout)
    with open(log_path) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    summaries = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(summaries[-1]), lines, proc.returncode
    except (IndexError, ValueError):
        return None, lines, proc.returncode


def _report_failure(summary: dict, lines: list[str]) -> int:
    """A failed run: name the failed tasks and show the last error lines; make demo fails."""
    failed = [t for t, v in summary["tasks"].items() if v["state"] == "failed"]
    not_run = [t for t, v in summary["tasks"].items() if v["state"] not in ("success", "failed")]
    print(f"\nThe DAG run {summary['state']}. Failed tasks: {', '.join(failed) or 'none'}")
    if not_run:
        print(f"Not run: {', '.join(not_run)}")
    errors = [line for line in lines if "Delta" in line and ("Error:" in line or "DELTA_ERROR" in line)]
    errors = errors or [line for line in lines if "Error:" in line or "Exception:" in line]
    for line in errors[-3:]:
        print(f"  {line.strip()[:400]}")
    return 1


def demo() -> int:
    """``make demo``: a quiet run. Airflow's and Spark's output go to ``demo/demo.log``; the terminal
    shows the steps, the summaries read back from the Airflow DB, and where the log is.

    1. The quickstart DAG over spark-submit (a ``spark`` connection, ``local[2]``).
    2. A local Spark Connect server started from the installed pyspark; the same DAG over it (the
       ``spark_local`` connection now of type ``spark_connect``), each task's time beside (1).
    3. The lakehouse pipeline for three days over that server, which is then stopped.
    """
    demo_dir = os.path.abspath(os.environ.get("DELTA_DEMO_DIR", os.path.join(REPO, "demo")))
    home = os.path.join(demo_dir, "airflow_home")
    root = os.path.join(demo_dir, "quickstart")
    log_path = os.path.join(demo_dir, "demo.log")
    for d in (home, root):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(demo_dir, exist_ok=True)
    open(log_path, "w").close()
    print(f"Airflow home: {home} (SQLite); migrating the DB ...", flush=True)
    env = migrate(home)
    env["DELTA_QUICKSTART_ROOT"] = root
    table_uri = os.path.join(root, "tables", "events")
    env["DELTA_QUICKSTART_TABLE"] = table_uri
    shutil.copy(DAG_FILE, env["AIRFLOW__CORE__DAGS_FOLDER"])
    date = os.environ.get("DELTA_DEMO_DATE", "2026-01-01")
    print(f"Running {DAG_ID} for {date} over spark-submit (Airflow and Spark output: {log_path}) ...", flush=True)
    summary, lines, code = _run_logged(env, DAG_ID, date, log_path)
    if summary is None:
        print("\n".join(lines[-30:]))
        print(f"\nThe DAG run did not finish (exit code {code}). Full output: {log_path}")
        return 1
    _print_summary(summary, table_uri)
    print(f"\nAirflow and Spark output of the run: {log_path}")
    if summary["state"] != "success":
        return _report_failure(summary, lines)
    return _over_connect(env, demo_dir, log_path, date, summary)


def _over_connect(env: dict, demo_dir: str, log_path: str, date: str, submitted: dict) -> int:
    """Steps 2 and 3 of :func:`demo`, on a Spark Connect server started (and stopped) here."""
    from airflow_delta_provider_apps.connect_server import ConnectServer

    print(
        "\nStarting a local Spark Connect server (from the installed pyspark: its spark-submit runs the server class) ..."
    )
    try:
        server = ConnectServer()
    except RuntimeError as e:
        print(f"The Spark Connect server did not start: {e}")
        return 1
    try:
        conn = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port}
        env = {**env, "AIRFLOW_CONN_SPARK_LOCAL": json.dumps(conn)}
        root = os.path.join(demo_dir, "quickstart_connect")
        shutil.rmtree(root, ignore_errors=True)
        env.update(DELTA_QUICKSTART_ROOT=root, DELTA_QUICKSTART_TABLE=os.path.join(root, "tables", "events"))
        print(f"Running {DAG_ID} for {date} over Spark Connect at {server.url} ...", flush=True)
        summary, lines, code = _run_logged(env, DAG_ID, date, log_path)
        if summary is None or summary["state"] != "success":
            return _report_failure(summary, lines) if summary else 1
        print(f"\n  {'task':<16} {'spark-submit':>12} {'Spark Connect':>14}   (seconds per task)")
        for task_id, t in summary["tasks"].items():
            before = submitted["tasks"].get(task_id, {}).get("seconds")
            print(f"  {task_id:<16} {_secs(before):>12} {_secs(t.get('seconds')):>14}")
        print(f"  {'DAG run':<16} {_secs(submitted['seconds']):>12} {_secs(summary['seconds']):>14}")
        return _pipeline(env, demo_dir, log_path)
    finally:
        server.stop()
        print(f"\nThe Spark Connect server is stopped (its output: {server.log_path}).")


def _secs(value) -> str:
    return "-" if value is None else f"{value:.1f}"


PIPELINE_FILE = os.path.join(REPO, "example_dags", "delta_lakehouse_pipeline.py")
PIPELINE_ID = "delta_lakehouse_pipeline"
PIPELINE_DATES = ("2026-01-03", "2026-01-04", "2026-01-05")  # a Saturday, a Sunday (vacuum), a Monday


def _pipeline_line(task_id: str, t: dict) -> str:
    """One task of a pipeline run: its operation and version and first metrics; for the version
    sensor, the version it saw and the commits since its baseline; else the task's state."""
    x = t["xcom"] if isinstance(t["xcom"], dict) else {}
    shown = ", ".join(f"{k}={v}" for k, v in list((x.get("metrics") or {}).items())[:4])
    if "operation" in x:
        what = f"{x['operation']} v{x.get('version')}"
    elif "version" in x:  # the version sensor: no operation of its own
        what, shown = f"saw v{x['version']}", _commits(x).partition(": ")[2]
    else:
        what = t["state"]
    return f"    {task_id:<16} {_secs(t.get('seconds')):>5} s  {what:<22} {shown}".rstrip()


def _pipeline(env: dict, demo_dir: str, log_path: str) -> int:
    """The lakehouse pipeline for a few days after the quickstart; then silver's history."""
    root = os.path.join(demo_dir, "lakehouse")
    shutil.rmtree(root, ignore_errors=True)
    env = {**env, "DELTA_PIPELINE_ROOT": root}
    shutil.copy(PIPELINE_FILE, env["AIRFLOW__CORE__DAGS_FOLDER"])
    for date in PIPELINE_DATES:
        print(f"\nRunning {PIPELINE_ID} for {date} over Spark Connect ...", flush=True)
        summary, _lines, code = _run_logged(env, PIPELINE_ID, date, log_path)
        summary = summary or {"state": f"did not finish (exit {code})", "tasks": {}}
        print(f"  {summary['state']} in {summary.get('seconds')} s")
        for task_id, t in summary["tasks"].items():
            print(_pipeline_line(task_id, t))
        if summary["state"] != "success":
            print(f"Full output: {log_path}")
            return 1
    silver = os.path.join(root, "tables", "silver_customers")
    from airflow_delta_provider_apps.engine import DeltaTable

    print(f"\nSilver's history ({silver}):")
    print(f"  {'version':>7}  {'operation':<14} metrics")
    for h in reversed(DeltaTable(None, silver).history()):
        m = h.get("operationMetrics") or {}
        keys = [
            k
            for k in (
                "numOutputRows",
                "numTargetRowsInserted",
                "numTargetRowsUpdated",
                "numDeletedRows",
                "numRemovedFiles",
                "numAddedFiles",
                "numDeletedFiles",
            )
            if k in m
        ]
        print(f"  {h['version']:>7}  {h['operation']:<14} {', '.join(f'{k}={m[k]}' for k in keys)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("migrate", help="create and migrate an Airflow home")
    m.add_argument("--home", required=True)
    r = sub.add_parser("run", help="run one DAG (already in the home's dags folder); print a JSON summary")
    r.add_argument("--home", required=True)
    r.add_argument("--dag-id", required=True)
    r.add_argument("--date", default="2026-01-01")
    args = parser.parse_args(argv)
    if args.command == "migrate":
        migrate(args.home)
        return 0
    if args.command == "run":
        os.environ.update(airflow_env(args.home))
        summary = run_dag(args.dag_id, _parse_date(args.date))
        sys.stdout.flush()
        print(json.dumps(summary, default=str), flush=True)
        return 0
    return demo()


if __name__ == "__main__":
    sys.exit(main())
