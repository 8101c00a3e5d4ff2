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


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """``spark://127.0.0.1:<port>`` with one worker (1 core) registered, shared by this module's
    tests; stopped afterwards."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    spark_class = _spark_class()
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    env = {
        **os.environ,
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
            "1",
            "--memory",
            "2g",
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
        yield master, ui
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
    deltalake = pytest.importorskip("deltalake")
    master, ui = standalone_cluster
    pq.write_table(
        pa.table({"id": list(range(40)), "v": ["a"] * 40, "dt": [f"d{i % 4}" for i in range(40)]}),
        tmp_path / "day.parquet",
    )
    pq.write_table(
        pa.table({"id": [1, 2, 100], "v": ["b", "b", "new"], "dt": ["d1", "d2", "d0"]}), tmp_path / "changes.parquet"
    )
    conn = json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": "client"}})
    airflow_home.add_dag(HERE / "dags" / "delta_test_cluster.py")
    summary = airflow_home.run(
        "delta_test_cluster",
        env={"DELTA_TEST_ROOT": str(tmp_path), "AIRFLOW_CONN_SPARK_CLUSTER": conn, "PYSPARK_PYTHON": sys.executable},
    )
    assert summary["state"] == "success", summary
    tasks = summary["tasks"]
    assert tasks["append"]["xcom"]["metrics"]["numOutputRows"] == 40
    assert tasks["upsert"]["xcom"]["metrics"]["numTargetRowsUpdated"] == 2
    assert tasks["upsert"]["xcom"]["metrics"]["numTargetRowsInserted"] == 1
    assert tasks["delete"]["xcom"]["metrics"]["numDeletedRows"] == 5  # 0, 10, 20, 30, 100
    rows = deltalake.DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    want = {i: ("b" if i in (1, 2) else "a") for i in range(40) if i % 10}
    assert {r["id"]: r["v"] for r in rows} == want
    # the work ran on the cluster: its master saw the applications finish
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
        done = json.loads(r.read()).get("completedapps", [])
    assert len(done) >= 4, done


# The worker that dies: a process that runs the write through the hook (as a task would), killed
# with SIGKILL once its application holds the run lease; its spark-submit (the driver, client mode)
# lives on as an orphan and commits.
FIRST_TRY = """
import sys
from airflow_delta_provider.hooks.delta import DeltaHook
DeltaHook("spark_cluster").run(
    "write", sys.argv[1], source=sys.argv[2], mode="append", app_id=sys.argv[3], app_version=1
)
"""


def _apps(ui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
        state = json.loads(r.read())
    return {"active": state.get("activeapps", []), "completed": state.get("completedapps", [])}


def test_a_retry_after_the_worker_died_waits_for_its_application_instead_of_starting_a_second(
    tmp_path, standalone_cluster, monkeypatch
):
    """Issue 24 item 3: the worker is killed while its application runs on the cluster; the retry
    (same task instance identity) finds the application's live lease, starts no application of its
    own, and reports the one commit that application made."""
    import signal

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider_apps.engine.storage import storage_for
    from airflow_delta_provider_apps.run_lease import read_lease

    deltalake = pytest.importorskip("deltalake")
    master, ui = standalone_cluster
    root, source, app = str(tmp_path / "events"), str(tmp_path / "big.parquet"), "airflow:load/events@2026-01-01"
    rows = 1_500_000
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64()), "v": pa.array([1.5] * rows)}), source)
    deltalake.write_deltalake(root, pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.float64())}))
    conn = json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": "client"}})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", conn)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    before = len(_apps(ui)["active"]) + len(_apps(ui)["completed"])
    worker = subprocess.Popen([sys.executable, "-c", FIRST_TRY, root, source, app], env=dict(os.environ))
    deadline = time.monotonic() + 180
    while read_lease(storage_for(root), root, app, 1) is None:
        assert worker.poll() is None, "the first try ended before its application took the lease"
        assert time.monotonic() < deadline, "no run lease appeared"
        time.sleep(0.2)
    worker.send_signal(signal.SIGKILL)  # the worker dies; its application goes on
    worker.wait()
    assert len(_apps(ui)["active"]) == 1
    retry = DeltaHook("spark_cluster").run("write", root, source=source, mode="append", app_id=app, app_version=1)
    assert (retry["version"], retry["from_log"], retry["skipped"]) == (1, True, True)
    apps = _apps(ui)
    assert len(apps["active"]) + len(apps["completed"]) == before + 1  # no second application
    table = deltalake.DeltaTable(root)
    assert [h["operation"] for h in table.history()].count("WRITE") == 2  # the create, and one append
    assert table.to_pyarrow_table().num_rows == rows
