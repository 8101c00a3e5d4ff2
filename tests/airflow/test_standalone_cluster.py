"""The operators on a real Spark standalone cluster: a master and one worker started here as separate
processes on loopback (from the installed pyspark distribution), one DAG run through a ``spark://``
connection (executors in their own JVM and Python workers, the bundled zip shipped to them), the
table checked with deltalake, and everything started is stopped."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import HERE

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        pytest.skip(f"no spark-class in the installed pyspark ({path})")
    return path


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:<port>
    ui: int  # the master's web UI port (its /json/ state)
    rest: int  # the master's REST server port

    def connection(self, deploy_mode: str, result_dir: str | None = None) -> str:
        extra = {"deploy-mode": deploy_mode, "rest-port": self.rest}
        if result_dir:
            extra["delta_result_dir"] = result_dir
        return json.dumps({"conn_type": "spark", "host": self.master, "extra": extra})


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """``spark://127.0.0.1:<port>`` with one worker registered, shared by this module's tests;
    stopped afterwards. Its master's REST server is on (``rest``: its port), through which cluster
    deploy mode's drivers are followed; the worker has room for a cluster-mode driver (one core)
    beside its executor (one core)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    spark_class = _spark_class()
    port, ui, worker_ui, rest = _free_port(), _free_port(), _free_port(), _free_port()
    env = {
        **os.environ,
        "SPARK_MASTER_OPTS": f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={rest}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_HOME": str(spark_class.parent.parent),
    }
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    procs = []

    def start(name, *args):
        out = open(logs / f"{name}.log", "w")
        procs.append((subprocess.Popen([str(spark_class), *args], env=env, stdout=out, stderr=subprocess.STDOUT), out))

    master = f"spark://127.0.0.1:{port}"
    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            master,
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "3g",
            "--webui-port",
            str(worker_ui),
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    state = json.loads(r.read())
                if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                tails = {f.name: f.read_text()[-2000:] for f in logs.iterdir()}
                raise AssertionError(f"the standalone cluster did not come up: {tails}")
            time.sleep(1)
        yield Cluster(master, ui, rest)
    finally:
        for p, _out in procs:
            p.terminate()
        for p, out in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
            out.close()
        shutil.rmtree(tmp_path / "work", ignore_errors=True)


def test_the_operators_on_a_standalone_cluster(airflow_home, tmp_path, standalone_cluster):
    """The pipeline DAG in client deploy mode, and its OPTIMIZE deferred in cluster deploy mode:
    submitted, followed on the (inline) triggerer, its result read back on resume."""
    deltalake = pytest.importorskip("deltalake")
    cluster = standalone_cluster
    pq.write_table(
        pa.table({"id": list(range(40)), "v": ["a"] * 40, "dt": [f"d{i % 4}" for i in range(40)]}),
        tmp_path / "day.parquet",
    )
    pq.write_table(
        pa.table({"id": [1, 2, 100], "v": ["b", "b", "new"], "dt": ["d1", "d2", "d0"]}), tmp_path / "changes.parquet"
    )
    (tmp_path / "results").mkdir()
    airflow_home.add_dag(HERE / "dags" / "delta_test_cluster.py")
    summary = airflow_home.run(
        "delta_test_cluster",
        env={
            "DELTA_TEST_ROOT": str(tmp_path),
            "AIRFLOW_CONN_SPARK_CLUSTER": cluster.connection("client"),
            "AIRFLOW_CONN_SPARK_CLUSTER_MODE": cluster.connection("cluster", str(tmp_path / "results")),
            "PYSPARK_PYTHON": sys.executable,
        },
    )
    assert summary["state"] == "success", summary
    tasks = summary["tasks"]
    assert tasks["append"]["xcom"]["metrics"]["numOutputRows"] == 40
    assert tasks["upsert"]["xcom"]["metrics"]["numTargetRowsUpdated"] == 2
    assert tasks["upsert"]["xcom"]["metrics"]["numTargetRowsInserted"] == 1
    assert tasks["delete"]["xcom"]["metrics"]["numDeletedRows"] == 5  # 0, 10, 20, 30, 100
    optimized = tasks["optimize"]["xcom"]
    # one file per partition: nothing to compact, the result read back from the cluster's driver
    assert (optimized["operation"], optimized["committed"], optimized["metrics"]["totalConsideredFiles"]) == (
        "OPTIMIZE",
        False,
        4,
    )
    rows = deltalake.DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    want = {i: ("b" if i in (1, 2) else "a") for i in range(40) if i % 10}
    assert {r["id"]: r["v"] for r in rows} == want
    # the work ran on the cluster: its master saw the applications finish, OPTIMIZE's as a driver
    state = _master_state(cluster.ui)
    assert len(state.get("completedapps", [])) >= 4, state
    assert [d["state"] for d in state.get("completeddrivers", [])] == ["FINISHED"]


def _master_state(ui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
        return json.loads(r.read())


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_a_deferred_optimize_frees_the_worker_while_its_driver_runs_on_the_cluster(
    tmp_path, standalone_cluster, monkeypatch
):
    """Issue 24 item 2: ``deferrable=True`` in cluster deploy mode returns the worker slot once the
    driver runs on the cluster (the task defers, no spark-submit left behind), the trigger follows
    the driver through the master's REST server, and the resumed task reports OPTIMIZE's metrics."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    from airflow_delta_provider.operators.delta import DeltaOptimizeOperator
    from airflow_delta_provider.triggers.delta import DeltaSparkDriverTrigger

    deltalake = pytest.importorskip("deltalake")
    cluster = standalone_cluster
    root = str(tmp_path / "events")
    for day in range(12):
        deltalake.write_deltalake(root, pa.table({"id": list(range(day * 10, day * 10 + 10))}), mode="append")
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER_MODE", cluster.connection("cluster", str(tmp_path / "results")))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    op = DeltaOptimizeOperator(task_id="optimize", table_uri=root, conn_id="spark_cluster_mode", deferrable=True)
    ours = set(_children(os.getpid()))  # the cluster's master and worker
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaSparkDriverTrigger)
    driver = trigger.driver["driver_id"]
    state = _master_state(cluster.ui)
    running = [d["id"] for d in state.get("activedrivers", [])]
    assert driver in running or driver in [d["id"] for d in state.get("completeddrivers", [])]
    assert set(_children(os.getpid())) == ours  # spark-submit has exited: nothing of the run is left on the worker

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 300))
    assert event.payload == {"status": "ended", "driver": trigger.driver, "state": "FINISHED", "succeeded": True}
    result = getattr(op, deferred.value.method_name)({}, event.payload)
    assert result["committed"] and result["operation"] == "OPTIMIZE"
    assert (result["metrics"]["numRemovedFiles"], result["metrics"]["numAddedFiles"]) == (12, 1)
    table = deltalake.DeltaTable(root)
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(120))
    assert len(table.file_uris()) == 1


def test_a_deferred_driver_that_never_starts_is_stopped_and_fails_retryable(tmp_path, standalone_cluster, monkeypatch):
    """A driver asking for more cores than the cluster has waits for ever in SUBMITTED: the trigger's
    start timeout ends the wait, the task stops the driver and fails retryable."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    from airflow_delta_provider.exceptions import DeltaRetryableError
    from airflow_delta_provider.operators.delta import DeltaCheckpointOperator
    from airflow_delta_provider.triggers.delta import DeltaSparkDriverTrigger

    deltalake = pytest.importorskip("deltalake")
    cluster = standalone_cluster
    root = str(tmp_path / "events")
    deltalake.write_deltalake(root, pa.table({"id": [1]}))
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER_MODE", cluster.connection("cluster", str(tmp_path / "results")))
    op = DeltaCheckpointOperator(
        task_id="checkpoint",
        table_uri=root,
        conn_id="spark_cluster_mode",
        execution="spark",
        spark_conf={"spark.driver.cores": "8"},  # the worker has 2
        deferrable=True,
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = DeltaSparkDriverTrigger(**{**deferred.value.trigger.serialize()[1], "start_timeout": 3})

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event.payload["status"] == "not_started" and event.payload["state"] == "SUBMITTED"
    with pytest.raises(DeltaRetryableError, match="still SUBMITTED .* stopped it"):
        getattr(op, deferred.value.method_name)({}, event.payload)
    driver = deferred.value.trigger.driver["driver_id"]
    deadline = time.monotonic() + 30
    while driver not in [d["id"] for d in _master_state(cluster.ui).get("completeddrivers", [])]:
        assert time.monotonic() < deadline, "the driver was not stopped"
        time.sleep(0.5)


# The worker that dies: a process that runs an operation through the hook (as a task would), killed
# with SIGKILL once its application holds the run lease. Client mode: its spark-submit (the driver)
# lives on as an orphan and commits; cluster mode: the driver runs on the cluster's worker.
FIRST_TRY = """
import json, sys
from airflow_delta_provider.hooks.delta import DeltaHook
DeltaHook(sys.argv[1]).run(sys.argv[2], sys.argv[3], **json.loads(sys.argv[4]))
"""


def _apps(ui: int) -> dict:
    state = _master_state(ui)
    return {"active": state.get("activeapps", []), "completed": state.get("completedapps", [])}


@pytest.mark.parametrize("deploy_mode, operation", [("client", "write"), ("cluster", "merge")])
def test_a_retry_after_the_worker_died_waits_for_its_application_instead_of_starting_a_second(
    tmp_path, standalone_cluster, monkeypatch, deploy_mode, operation
):
    """Issue 24 item 3: the worker is killed while its application runs on the cluster (a client-mode
    append, a cluster-mode MERGE); the retry (same task instance identity) finds the application's
    live lease, starts no application of its own, and reports the one commit that application made."""
    import signal

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider_apps.engine.storage import storage_for
    from airflow_delta_provider_apps.run_lease import read_lease

    deltalake = pytest.importorskip("deltalake")
    cluster = standalone_cluster
    root, source, app = str(tmp_path / "events"), str(tmp_path / "big.parquet"), "airflow:load/events@2026-01-01"
    rows = 1_500_000
    data = pa.table({"id": pa.array(range(rows), pa.int64()), "v": pa.array([1.5] * rows)})
    pq.write_table(data, source)
    if operation == "merge":  # every row matched and updated
        deltalake.write_deltalake(root, data.set_column(1, "v", pa.array([0.5] * rows)))
        params = {"source": source, "key_columns": ["id"], "app_id": app, "app_version": 1}
    else:
        deltalake.write_deltalake(root, data.schema.empty_table())
        params = {"source": source, "mode": "append", "app_id": app, "app_version": 1}
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", cluster.connection(deploy_mode, str(tmp_path / "results")))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    before = len(_apps(cluster.ui)["active"]) + len(_apps(cluster.ui)["completed"])
    worker = subprocess.Popen(
        [sys.executable, "-c", FIRST_TRY, "spark_cluster", operation, root, json.dumps(params)], env=dict(os.environ)
    )
    deadline = time.monotonic() + 180
    while read_lease(storage_for(root), root, app, 1) is None:
        assert worker.poll() is None, "the first try ended before its application took the lease"
        assert time.monotonic() < deadline, "no run lease appeared"
        time.sleep(0.2)
    worker.send_signal(signal.SIGKILL)  # the worker dies; its application goes on
    worker.wait()
    assert len(_apps(cluster.ui)["active"]) == 1
    retry = DeltaHook("spark_cluster").run(operation, root, **params)
    assert (retry["version"], retry["from_log"], retry["skipped"]) == (1, True, True)
    apps = _apps(cluster.ui)
    assert len(apps["active"]) + len(apps["completed"]) == before + 1  # no second application
    table = deltalake.DeltaTable(root)
    assert [h["operation"] for h in table.history()].count(operation.upper()) == (2 if operation == "write" else 1)
    result = table.to_pyarrow_table()
    assert result.num_rows == rows
    assert set(result.column("v").to_pylist()) == {1.5}


def test_cluster_mode_ships_the_apps_to_the_driver_and_the_executors(tmp_path, standalone_cluster, monkeypatch):
    """Standalone cluster deploy mode runs the apps as a JVM application (Spark's PythonRunner): the
    driver and the executors import them from the shipped zip alone. Their Python here cannot import
    the installed (editable) package, and a MERGE run as a Spark join needs them in the executors."""
    deltalake = pytest.importorskip("deltalake")
    cluster = standalone_cluster
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "sys.path[:] = [p for p in sys.path if not p.rstrip('/').endswith(('spark_apps', '/main'))]\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{hide}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    check = subprocess.run([str(python), "-c", "import airflow_delta_provider_apps"], capture_output=True)
    assert check.returncode != 0, "the wrapper still imports the installed package"
    root, source = str(tmp_path / "t"), str(tmp_path / "s.parquet")
    deltalake.write_deltalake(root, pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([0] * 100)}))
    pq.write_table(pa.table({"id": pa.array([5, 500], pa.int64()), "v": pa.array([1, 1])}), source)
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER_MODE", cluster.connection("cluster", str(tmp_path / "results")))
    from airflow_delta_provider.hooks.delta import DeltaHook

    result = DeltaHook(
        "spark_cluster_mode",
        spark_conf={"spark.pyspark.python": str(python), "spark.airflowDelta.merge.maxSourceBytes": "1"},
    ).run("merge", root, source=source, key_columns=["id"])
    assert result["strategy"] == "join"
    assert (result["metrics"]["numTargetRowsUpdated"], result["metrics"]["numTargetRowsInserted"]) == (1, 1)
    rows = {r["id"]: r["v"] for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()}
    assert len(rows) == 101 and rows[5] == rows[500] == 1
