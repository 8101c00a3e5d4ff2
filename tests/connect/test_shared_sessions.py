"""Runs over Spark Connect share server-side sessions (issue 32): one session per (server, bundle,
conf), nothing of a run left in it, on_kill interrupting only its own run, a closed session replaced
by the key's next generation; and a soak of hundreds of tasks as the operators run them against a
server this test starts: the server's processes and memory flat after warm-up, every row right."""

from __future__ import annotations

import json
import threading
import time

import deltalake
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider.hooks.bundle import build_app_bundle
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider_apps import connect as connect_mod
from airflow_delta_provider_apps.connect import ConnectRun
from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF

#: per-file work in the server's Spark tasks (the server is on loopback: else in the client's threads)
IN_TASKS = {FILE_WORK_CONF: "tasks"}

SLOW = "SELECT s.* FROM source s WHERE (SELECT max(id) FROM range(0, 40000000000, 1, 2)) > 0"


def _conn(monkeypatch, conn_id: str, server) -> str:
    body = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))
    return conn_id


def _raw_session(url: str, session_id: str):
    from pyspark.sql.connect.session import SparkSession

    return SparkSession.builder.remote(f"{url}/;session_id={session_id}").create()


def _day(path, ids, v=0) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64())}), path)
    return str(path)


def test_runs_share_one_session_and_leave_nothing_in_it(connect_server, tmp_path, monkeypatch):
    from airflow_delta_provider_apps.engine.spark.session import connect_mode

    zip_path = build_app_bundle().zip_path
    uri = str(tmp_path / "t")
    ids = []
    for operation, params in [
        ("create-table", {"schema": "id BIGINT, v BIGINT"}),
        (
            "write",
            {
                "source": _day(tmp_path / "d.parquet", [1, 2, 3]),
                "source_query": "SELECT * FROM source WHERE id > 1",
            },
        ),
        ("delete", {"predicate": "id = 2"}),
    ]:
        run = ConnectRun(connect_server.url, conf=IN_TASKS, pyfiles=(zip_path,))  # the DELETE rewrites in tasks
        assert run.run(operation, uri, params)["status"] == "ok"
        ids.append(run.session_id)
    assert ids[0] is None and ids[1] is not None and ids[1] == ids[2]  # CREATE without data: no session
    ids = ids[1:]
    assert deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist() == [3]
    other = ConnectRun(connect_server.url, conf={"spark.sql.shuffle.partitions": "3"}, pyfiles=(zip_path,))
    other.run("history", uri, {})
    with connect_mode():
        assert other.session_id is None or other.session_id != ids[0]  # a log-only run needs no session
        other = ConnectRun(connect_server.url, conf={"spark.sql.shuffle.partitions": "3"}, pyfiles=(zip_path,))
        other.session()
        assert other.session_id != ids[0]  # another conf: another session
        other.close()
        # the shared session holds no view of the runs, and the conf a scan may raise is unchanged
        raw = _raw_session(connect_server.url, ids[0])
        try:
            assert raw.catalog.listTables() == []
            assert raw.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold") == "1000000"
        finally:
            raw.client.close()


def test_on_kill_interrupts_only_its_own_run_on_a_shared_session(connect_server, monkeypatch, tmp_path):
    hook_a, hook_b = (
        DeltaHook(_conn(monkeypatch, "sc_a", connect_server)),
        DeltaHook(_conn(monkeypatch, "sc_b", connect_server)),
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    source = _day(tmp_path / "d.parquet", list(range(10)))
    hook_a.run("create-table", a, schema="id BIGINT, v BIGINT")
    hook_b.run("create-table", b, schema="id BIGINT, v BIGINT")
    outcome: dict = {}

    def run(name, hook, uri, query):
        try:
            outcome[name] = hook.run("write", uri, source=source, source_query=query)
        except Exception as e:
            outcome[name] = e

    slow_b = "SELECT s.* FROM source s WHERE (SELECT max(id) FROM range(0, 400000000, 1, 2)) > 0"
    ta = threading.Thread(target=run, args=("a", hook_a, a, SLOW))
    tb = threading.Thread(target=run, args=("b", hook_b, b, slow_b))
    ta.start()
    tb.start()
    time.sleep(4)
    assert ta.is_alive() and tb.is_alive(), outcome
    assert hook_a.transport._run.session_id == hook_b.transport._run.session_id
    hook_a.on_kill()
    ta.join(timeout=60)
    tb.join(timeout=120)
    assert isinstance(outcome["a"], Exception), outcome  # interrupted, nothing committed
    assert deltalake.DeltaTable(a).version() == 0
    assert outcome["b"]["version"] == 1, outcome  # the neighbour on the same session committed
    assert sorted(deltalake.DeltaTable(b).to_pyarrow_table().column("id").to_pylist()) == list(range(10))


def test_a_closed_session_is_replaced_by_the_next_generation(connect_server, tmp_path, monkeypatch):
    monkeypatch.setattr(connect_mod.tempfile, "gettempdir", lambda: str(tmp_path))  # this test's own cache
    zip_path = build_app_bundle().zip_path
    uri = str(tmp_path / "t")
    first = ConnectRun(connect_server.url, conf={"spark.sql.shuffle.partitions": "5"}, pyfiles=(zip_path,))
    first.run("create-table", uri, {"schema": "id BIGINT, v BIGINT"})
    first_id = first.run("write", uri, {"source": _day(tmp_path / "d.parquet", [1])}) and first.session_id
    raw = _raw_session(connect_server.url, first_id)
    raw.stop()  # released (as an idle timeout closes it): the id cannot be attached again
    second = ConnectRun(connect_server.url, conf={"spark.sql.shuffle.partitions": "5"}, pyfiles=(zip_path,))
    assert second.run("write", uri, {"source": _day(tmp_path / "e.parquet", [2])})["version"] == 2
    assert second.session_id not in (None, first_id)
    third = ConnectRun(connect_server.url, conf={"spark.sql.shuffle.partitions": "5"}, pyfiles=(zip_path,))
    third.run("delete", uri, {"predicate": "id = 1"})
    assert third.session_id == second.session_id  # remembered: no retry through the closed one
    assert deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist() == [2]


def _tree(pid: int) -> tuple[int, int]:
    """Live processes of the server's tree (zombies left out) and their RSS in MiB."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    live = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                live.append(p.memory_info().rss)
        except psutil.NoSuchProcess:
            pass
    return len(live), sum(live) >> 20


@pytest.mark.parametrize("tasks", [240])
def test_soak_a_server_stays_flat_over_hundreds_of_tasks(monkeypatch, tmp_path, tasks):
    """Appends, merges with a Spark source, DELETEs and OPTIMIZEs rewriting through Spark tasks (the
    Python workers a session keeps), each as the operators run it (a hook call, a session attach);
    the server's process count after warm-up never changes and its memory stays within a bound a
    session per task (~200 MiB each) would pass in two tasks; rows checked against a Python model."""
    from airflow_delta_provider_apps.connect_server import ConnectServer

    server = ConnectServer()
    try:
        hook = DeltaHook(_conn(monkeypatch, "sc_soak", server), spark_conf=IN_TASKS)  # every rewrite in tasks
        uri = str(tmp_path / "t")
        hook.run("create-table", uri, schema="id BIGINT, v BIGINT")
        model: dict[int, int] = {}
        seen = []
        for i in range(tasks):
            kind = i % 4
            if kind == 0:
                ids = list(range(i * 10, i * 10 + 10))
                hook.run("write", uri, source=_day(tmp_path / f"a{i}.parquet", ids, i))
                model.update({k: i for k in ids})
            elif kind == 1:
                ids = sorted({(i * 7) % max(1, i * 10), i * 10 + 5, 10_000_000 + i})
                hook.run(
                    "merge",
                    uri,
                    source=_day(tmp_path / f"m{i}.parquet", ids, -i),
                    key_columns=["id"],
                )
                model.update({k: -i for k in ids})
            elif kind == 2:
                hook.run("delete", uri, predicate=f"id % 97 = {i % 97}")
                model = {k: v for k, v in model.items() if k % 97 != i % 97}
            else:
                hook.run("optimize", uri)
            if i in (19, tasks - 1):
                seen.append(_tree(server.pid))
        got = {r["id"]: r["v"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
        assert got == model
        (procs_warm, rss_warm), (procs_end, rss_end) = seen
        print(
            f"server after 20 tasks: {procs_warm} processes, {rss_warm} MiB; after {tasks}: {procs_end}, {rss_end} MiB"
        )
        # a session per task added 2 processes per task; an idle Python worker may come or go
        assert procs_end <= procs_warm + 1, seen
        assert rss_end - rss_warm < 400, seen
    finally:
        server.stop()


def test_two_provider_versions_on_one_server_use_two_sessions(connect_server, tmp_path, monkeypatch):
    """Two bundles of different content (two provider versions) never share a session: each session's
    Python workers import the zip its runs added; both run at once."""
    import shutil
    import zipfile

    mine = build_app_bundle().zip_path
    other = str(tmp_path / "other.zip")
    shutil.copy(mine, other)
    with zipfile.ZipFile(other, "a") as z:  # another version: other bytes, same package
        z.writestr("airflow_delta_provider_apps/_other_version.py", "VERSION = 'other'\n")
    results: dict = {}

    def run(name, zip_path):
        uri = str(tmp_path / name)
        r = ConnectRun(connect_server.url, conf=IN_TASKS, pyfiles=(zip_path,))
        r.run("create-table", uri, {"schema": "id BIGINT, v BIGINT"})
        r.run("write", uri, {"source": _day(tmp_path / f"{name}.parquet", [1, 2, 3])})
        r.run("delete", uri, {"predicate": "id = 2"})
        results[name] = (r.session_id, deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist())

    threads = [threading.Thread(target=run, args=(n, z)) for n, z in (("a", mine), ("b", other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert sorted(results["a"][1]) == [1, 3] and sorted(results["b"][1]) == [1, 3], results
    assert results["a"][0] != results["b"][0]


def test_connect_mode_overlapping_in_threads_restores_the_switch():
    """Runs in two threads of one process (these tests) overlap their Connect blocks: the process-wide
    switch is on while any is inside and as it was once the last leaves (a classic session works after)."""
    import os

    from airflow_delta_provider_apps.engine.spark.session import connect_mode

    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    a_in, a_may_leave = threading.Event(), threading.Event()

    def a():
        with connect_mode():
            a_in.set()
            a_may_leave.wait(10)

    t = threading.Thread(target=a)
    t.start()
    a_in.wait(10)
    with connect_mode():  # enters after a, and a leaves first
        a_may_leave.set()
        t.join(10)
        assert os.environ.get("SPARK_CONNECT_MODE_ENABLED") == "1"  # still inside this block
    assert os.environ.get("SPARK_CONNECT_MODE_ENABLED") == before


def test_the_bundle_is_uploaded_once_per_session(connect_server, tmp_path, monkeypatch):
    """The first run of a key uploads the zip; later runs find it in the session (no upload per task)."""
    from pyspark.sql.connect.session import SparkSession

    uploads = []
    real = SparkSession.addArtifacts
    monkeypatch.setattr(SparkSession, "addArtifacts", lambda self, *a, **k: uploads.append(a) or real(self, *a, **k))
    uri = str(tmp_path / "t")
    conf = {"spark.sql.shuffle.partitions": "7", **IN_TASKS}  # a key of this test's own
    zip_path = build_app_bundle().zip_path
    ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,)).run(
        "create-table", uri, {"schema": "id BIGINT, v BIGINT"}
    )
    for i in range(3):
        r = ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,))
        r.run("write", uri, {"source": _day(tmp_path / f"d{i}.parquet", [i])})
    assert len(uploads) == 1
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


def test_over_a_connect_server_on_loopback_per_file_work_stays_in_the_client(connect_server, caplog):
    """A Connect server on loopback that runs a local master has this machine's cores: per-file work
    of any size runs in the client's threads, as on a local master (said once in the log, with the
    reason); ``fileWork=tasks`` sends it to the server's tasks. A server elsewhere is not this machine."""
    import logging
    import uuid

    from pyspark.sql.connect.session import SparkSession

    from airflow_delta_provider_apps.engine.spark.plane import SparkPlane
    from airflow_delta_provider_apps.engine.spark.session import on_this_machine

    spark = _raw_session(connect_server.url, str(uuid.uuid4()))
    try:
        assert on_this_machine(spark) == "a Spark Connect server on loopback (127.0.0.1) with master local[2]"
        with caplog.at_level(logging.INFO, logger="airflow_delta_provider_apps.engine.spark.plane"):
            assert SparkPlane(spark).in_driver(1 << 40)
        assert "threads at any size: Spark's executors are a Spark Connect server on loopback" in caplog.text
        spark.conf.set(FILE_WORK_CONF, "tasks")
        assert not SparkPlane(spark).in_driver(0)
    finally:
        spark.stop()
    elsewhere = SparkSession.builder.remote("sc://192.0.2.7:15002").create()  # (no call is made to it)
    try:
        assert on_this_machine(elsewhere) is None
    finally:
        elsewhere.release_session_on_close = False
        elsewhere.stop()
