"""Deferrable runs (issue 24 item 2) without a cluster: what the trigger asks a cluster manager and
what it makes of the answers, served by a loopback HTTP server standing in for the standalone
master's REST server and YARN's ResourceManager (the one external boundary); why a run cannot defer.
The real standalone cluster runs in ``tests/airflow/test_standalone_cluster.py``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.hooks.driver import NOT_FOUND, SubmittedDriver, driver_state, kill_driver
from airflow_delta_provider.triggers.delta import DeltaSparkDriverTrigger


class _Manager:
    """A cluster manager's REST API on loopback: ``replies`` maps a path to a list of JSON replies
    (the last one repeats), or an int HTTP status; requests are recorded."""

    def __init__(self):
        self.replies: dict[str, list] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        manager = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                manager.requests.append((self.command, self.path, body))
                queue = manager.replies.get(self.path, [404])
                reply = queue.pop(0) if len(queue) > 1 else queue[0]
                if isinstance(reply, int):
                    self.send_response(reply)
                    self.end_headers()
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _reply

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def manager():
    m = _Manager()
    yield m
    m.close()


def _standalone(manager: _Manager, driver_id: str = "driver-1", *extra_urls: str) -> SubmittedDriver:
    return SubmittedDriver(
        "standalone",
        driver_id,
        result_uri="/nowhere.json",
        submitted_at=time.time(),
        status_urls=(*extra_urls, f"{manager.url}/v1/submissions/status/{driver_id}"),
    )


def _first_event(trigger: DeltaSparkDriverTrigger, timeout: float = 30):
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_the_standalone_state_is_the_masters_driver_state_and_an_unknown_driver_is_not_found(manager):
    path = "/v1/submissions/status/driver-1"
    manager.replies[path] = [{"action": "SubmissionStatusResponse", "driverState": "RUNNING", "success": True}]
    assert driver_state(_standalone(manager)) == "RUNNING"
    manager.replies[path] = [{"success": False, "message": "Driver driver-1 not found."}]
    assert driver_state(_standalone(manager)) == NOT_FOUND


def test_a_dead_master_of_an_ha_list_is_skipped_and_all_dead_is_an_os_error(manager):
    manager.replies["/v1/submissions/status/driver-1"] = [{"driverState": "FINISHED", "success": True}]
    dead = "http://127.0.0.1:9/v1/submissions/status/driver-1"  # discard port: nothing listens
    assert driver_state(_standalone(manager, "driver-1", dead)) == "FINISHED"
    with pytest.raises(OSError):
        driver_state(SubmittedDriver("standalone", "driver-1", "/r.json", time.time(), (dead,)))


def test_a_yarn_application_reports_its_final_status_once_finished(manager):
    driver = SubmittedDriver(
        "yarn", "application_1_0001", "/r.json", time.time(), (f"{manager.url}/ws/v1/cluster/apps/application_1_0001",)
    )
    path = "/ws/v1/cluster/apps/application_1_0001"
    for app, want in [
        ({"state": "ACCEPTED", "finalStatus": "UNDEFINED"}, "ACCEPTED"),
        ({"state": "RUNNING", "finalStatus": "UNDEFINED"}, "RUNNING"),
        ({"state": "FINISHED", "finalStatus": "SUCCEEDED"}, "SUCCEEDED"),
        ({"state": "FINISHED", "finalStatus": "FAILED"}, "FAILED"),
        ({"state": "KILLED", "finalStatus": "KILLED"}, "KILLED"),
    ]:
        manager.replies[path] = [{"app": app}]
        assert driver_state(driver) == want
    manager.replies[path] = [404]
    assert driver_state(driver) == NOT_FOUND
    manager.replies[path + "/state"] = [{"state": "KILLED"}]
    assert kill_driver(driver) is None
    assert manager.requests[-1][:2] == ("PUT", path + "/state")
    assert json.loads(manager.requests[-1][2]) == {"state": "KILLED"}


def test_the_trigger_follows_a_driver_until_it_ends(manager):
    manager.replies["/v1/submissions/status/driver-1"] = [
        {"driverState": "SUBMITTED", "success": True},
        {"driverState": "RUNNING", "success": True},
        {"driverState": "RUNNING", "success": True},
        {"driverState": "FAILED", "success": True},
    ]
    driver = _standalone(manager)
    trigger = DeltaSparkDriverTrigger(driver.to_dict(), poll_interval=0.01)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_delta_provider.triggers.delta.DeltaSparkDriverTrigger"
    event = _first_event(DeltaSparkDriverTrigger(**kwargs))
    assert event == {"status": "ended", "driver": driver.to_dict(), "state": "FAILED", "succeeded": False}
    assert SubmittedDriver.from_dict(event["driver"]) == driver
    assert len(manager.requests) == 4


def test_a_driver_waiting_for_resources_past_the_start_timeout_ends_the_wait(manager):
    manager.replies["/v1/submissions/status/driver-1"] = [{"driverState": "SUBMITTED", "success": True}]
    event = _first_event(DeltaSparkDriverTrigger(_standalone(manager).to_dict(), poll_interval=0.01, start_timeout=0.2))
    assert event["status"] == "not_started" and event["state"] == "SUBMITTED"
    assert "still SUBMITTED" in event["message"]
    manager.replies["/v1/submissions/kill/driver-1"] = [{"success": True}]
    assert kill_driver(_standalone(manager)) is None  # the master's kill endpoint, same driver
    assert manager.requests[-1][:2] == ("POST", "/v1/submissions/kill/driver-1")


def test_a_running_driver_is_not_timed_out_by_the_start_timeout(manager):
    manager.replies["/v1/submissions/status/driver-1"] = [
        *[{"driverState": "RUNNING", "success": True}] * 20,
        {"driverState": "FINISHED", "success": True},
    ]
    event = _first_event(DeltaSparkDriverTrigger(_standalone(manager).to_dict(), poll_interval=0.01, start_timeout=0))
    assert (event["status"], event["succeeded"]) == ("ended", True)


def test_an_unreachable_cluster_manager_ends_the_wait_in_bounded_time():
    driver = SubmittedDriver("standalone", "driver-1", "/r.json", time.time(), ("http://127.0.0.1:9/v1/x/driver-1",))
    started = time.monotonic()
    event = _first_event(DeltaSparkDriverTrigger(driver.to_dict(), poll_interval=0.05, unreachable_timeout=0.3))
    assert event["status"] == "unreachable" and "driver-1" in event["message"]
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "conn, reason",
    [
        ({"conn_type": "spark", "host": "local[2]"}, "runs Spark inside this task's own spark-submit"),
        ({"conn_type": "spark", "host": "spark://h:7077"}, "client deploy mode"),
        ({"conn_type": "spark_connect", "host": "sc://h", "port": 15002}, "Spark Connect"),
        ({"conn_type": "spark", "host": "spark://h:7077", "extra": {"deploy-mode": "cluster"}}, None),
        ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}, None),
    ],
)
def test_why_a_run_cannot_defer(monkeypatch, conn, reason):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_X", json.dumps(conn))
    blocker = DeltaHook("spark_x").deferral_blocker()
    if reason is None:
        assert blocker is None
    else:
        assert reason in blocker


def test_a_deferrable_operator_in_client_mode_says_why_it_runs_attached(monkeypatch, capsys):
    from airflow_delta_provider.operators.delta import DeltaOptimizeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_X", json.dumps({"conn_type": "spark", "host": "spark://h:7077"}))
    op = DeltaOptimizeOperator(task_id="o", table_uri="/tmp/t", conn_id="spark_x", deferrable=True)
    assert op._can_defer() is False
    out = capsys.readouterr().out  # the task log (structlog writes to stdout here)
    assert "keeps its worker slot" in out and "client deploy mode" in out


def test_a_standby_master_of_an_ha_list_does_not_end_the_wait(manager):
    """A standby master answers ``success: false`` without a state: the next master is asked, and
    only when none knows the driver is it NOT_FOUND; a kill a master refuses is reported."""
    manager.replies["/standby/v1/submissions/status/driver-1"] = [{"success": False, "message": "standby"}]
    manager.replies["/v1/submissions/status/driver-1"] = [{"driverState": "RUNNING", "success": True}]
    standby = f"{manager.url}/standby/v1/submissions/status/driver-1"
    assert driver_state(_standalone(manager, "driver-1", standby)) == "RUNNING"
    only_standby = SubmittedDriver("standalone", "driver-1", "/r.json", time.time(), (standby,))
    assert driver_state(only_standby) == NOT_FOUND
    manager.replies["/standby/v1/submissions/kill/driver-1"] = [{"success": False, "message": "not the leader"}]
    assert kill_driver(only_standby) == "not the leader"


def test_a_standalone_cluster_mode_run_is_a_jvm_app_that_still_ships_the_zip(monkeypatch, tmp_path):
    conn = {
        "conn_type": "spark",
        "host": "spark://m1:7077,m2:7077",
        "extra": {"deploy-mode": "cluster", "rest-port": 16066},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_X", json.dumps(conn))
    hook = DeltaHook("spark_x", result_dir=str(tmp_path), bundle_dir=str(tmp_path / "b"))
    sub, application, _ = hook.transport_for_connection().build_submit_hook("optimize", "/tmp/t", {}, detached=True)
    cmd = sub._build_spark_submit_command(application)
    assert cmd[cmd.index("--class") + 1] == "org.apache.spark.deploy.PythonRunner"
    assert application.endswith(".jar")
    zip_path = cmd[cmd.index("--py-files") + 1]  # the executors get the apps from the driver's SparkContext
    assert zip_path in cmd[cmd.index("--files") + 1].split(",")
    after = cmd[cmd.index(application) + 1 :]
    assert after[0].endswith(".py") and after[1] == zip_path and after[2] == "optimize"
    assert "spark.standalone.submit.waitAppCompletion=false" in cmd
    settings = hook.transport_for_connection().submit_settings()
    assert hook.transport_for_connection()._status_base(settings) == (
        "http://m1:16066/v1/submissions/status",
        "http://m2:16066/v1/submissions/status",
    )


def test_a_deferred_yarn_run_without_the_resourcemanager_address_fails_before_submitting(monkeypatch, tmp_path):
    from airflow_delta_provider.exceptions import DeltaConfigurationError

    conn = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_X", json.dumps(conn))
    hook = DeltaHook("spark_x", result_dir=str(tmp_path), bundle_dir=str(tmp_path / "b"))
    with pytest.raises(DeltaConfigurationError, match="yarn_resourcemanager_webapp_address"):
        hook.transport_for_connection().start("optimize", "/tmp/t", {})
    assert hook.transport_for_connection()._submit_hook is None  # nothing was built, let alone submitted
