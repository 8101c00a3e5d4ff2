"""Tasks that start together on a fresh Spark Connect session (a new or restarted server) race to
upload the apps' zip (issue 40): the server checks that the file is absent, then moves its copy into
place, and a task that lost the race failed with ``FileAlreadyExistsException`` as a permanent
``DeltaError: Spark failed (UnknownException)``. Every task now succeeds (the file there is the same
bytes: the run adds it again), and an upload race that still fails is retryable."""

from __future__ import annotations

import json
import threading
import uuid

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors.exceptions.connect import UnknownException
from pyspark.sql.connect.session import SparkSession

from airflow_delta_provider.exceptions import DeltaRetryableError
from airflow_delta_provider.hooks.bundle import build_app_bundle
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider_apps.connect import ConnectRun
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF
from airflow_delta_provider_apps.failures import SparkInfrastructureError

TASKS = 8
#: per-file work in the server's Spark tasks (the server is on loopback: else in the client's threads)
IN_TASKS = {FILE_WORK_CONF: "tasks"}


def _day(path, ids) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids, pa.int64())}), path)
    return str(path)


def _lost_race(zip_path: str) -> UnknownException:
    """What the server answers the loser of the race (its text as Spark 4 sends it)."""
    name = zip_path.rsplit("/", 1)[1]
    return UnknownException(
        f"(java.nio.file.FileAlreadyExistsException) /tmp/artifacts-{uuid.uuid4()}/{uuid.uuid4()}/pyfiles/{name}"
    )


def _fresh_conf() -> dict:
    """A session key of its own: a session no run has used, as on a new server."""
    return {"spark.airflow_delta_provider.test.race": uuid.uuid4().hex}


def test_tasks_started_together_on_a_fresh_server_all_succeed(tmp_path, monkeypatch):
    """As in the issue's storm: a server just started (its JVM cold, where the race was seen) and
    TASKS tasks through the hook started at once, each writing its own table and then deleting from
    it in the server's Python workers (which import the engine from the zip); every one commits."""
    from airflow_delta_provider_apps.connect_server import ConnectServer

    uploads, races = [], []
    real = SparkSession.addArtifacts

    def add(self, *a, **k):
        uploads.append(a)
        try:
            return real(self, *a, **k)
        except Exception as e:
            races.append(e)
            raise

    monkeypatch.setattr(SparkSession, "addArtifacts", add)
    server = ConnectServer()
    try:
        body = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port}
        monkeypatch.setenv("AIRFLOW_CONN_SC_RACE", json.dumps(body))
        uris = [str(tmp_path / f"t{i}") for i in range(TASKS)]
        for uri in uris:  # log only: no session yet
            DeltaHook("sc_race").run("create-table", uri, schema="id BIGINT, v BIGINT")
        start = threading.Barrier(TASKS)
        outcome: dict = {}

        def task(i: int) -> None:
            hook = DeltaHook("sc_race", spark_conf=IN_TASKS)  # the DELETE rewrites in Spark tasks
            start.wait(timeout=60)
            try:
                hook.run("write", uris[i], source=_day(tmp_path / f"d{i}.parquet", [i, 100 + i, 200 + i]))
                outcome[i] = hook.run("delete", uris[i], predicate=f"id = {100 + i}")
            except Exception as e:
                outcome[i] = e

        threads = [threading.Thread(target=task, args=(i,)) for i in range(TASKS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        server.stop()
    assert all(isinstance(outcome.get(i), dict) for i in range(TASKS)), outcome
    for i, uri in enumerate(uris):
        assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == [i, 200 + i]
    assert 1 <= len(uploads) <= TASKS + len(races)  # uploads once per task at most (and once more after a lost race)
    print(f"{len(uploads)} uploads, {len(races)} lost races: {[str(e).splitlines()[0] for e in races]}")


def test_a_run_that_lost_the_upload_race_adds_the_zip_again(connect_server, tmp_path, monkeypatch):
    """The server answers the first upload to a fresh session as it answers the loser of the race
    (after the other's copy landed: here the run's own); the run adds the zip again, the server finds
    the same bytes there, and the session's Python workers run the engine from it."""
    zip_path = build_app_bundle().zip_path
    calls = []
    real = SparkSession.addArtifacts

    def add(self, *a, **k):
        calls.append(a)
        result = real(self, *a, **k)
        if len(calls) == 1:
            raise _lost_race(zip_path)
        return result

    monkeypatch.setattr(SparkSession, "addArtifacts", add)
    conf, uri = {**_fresh_conf(), **IN_TASKS}, str(tmp_path / "t")  # the DELETE rewrites in Spark tasks
    ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,)).run(
        "create-table", uri, {"schema": "id BIGINT, v BIGINT"}
    )
    run = ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,))
    assert run.run("write", uri, {"source": _day(tmp_path / "d.parquet", [1, 2, 3])})["version"] == 1
    assert len(calls) == 2  # the lost race, then the same zip again
    again = ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,))
    assert again.run("delete", uri, {"predicate": "id = 2"})["version"] == 2  # in Spark tasks, from the zip
    assert again.session_id == run.session_id and len(calls) == 2  # the marker was cached: no upload
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == [1, 3]


def test_an_upload_race_that_remains_is_retryable(connect_server, tmp_path, monkeypatch):
    """When adding again fails too, the task fails retryably (Airflow retries it), not as a
    permanent 'Spark failed (UnknownException)'; nothing is written."""
    zip_path = build_app_bundle().zip_path

    def add(self, *a, **k):
        raise _lost_race(zip_path)

    monkeypatch.setattr(SparkSession, "addArtifacts", add)
    conf, uri = _fresh_conf(), str(tmp_path / "t")
    ConnectRun(connect_server.url, pyfiles=(zip_path,)).run("create-table", uri, {"schema": "id BIGINT, v BIGINT"})
    with pytest.raises(DeltaError) as e:
        ConnectRun(connect_server.url, conf=conf, pyfiles=(zip_path,)).run(
            "write", uri, {"source": _day(tmp_path / "d.parquet", [1])}
        )
    assert isinstance(e.value, SparkInfrastructureError) and e.value.retryable, e.value
    assert "uploaded the same code bundle" in e.value.one_line()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SC_RACE_LEFT",
        json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}),
    )
    hook = DeltaHook("sc_race_left", spark_conf=conf)
    with pytest.raises(DeltaRetryableError) as task_error:
        hook.run("write", uri, source=_day(tmp_path / "e.parquet", [2]))
    assert task_error.value.retryable and task_error.value.error_class == "SparkInfrastructureError"
    assert deltalake.DeltaTable(uri).version() == 0
