"""A transport is the whole contract (issue 43 item 2): a fourth transport, a remote Delta service on
loopback (:mod:`loopback_transport`, one module), is selected by one registry line and a connection,
and runs operators attached and deferred (its trigger polls it), writing the table for real; a run
that never gets resources is stopped. It declares and checks its own setting, which an operator passes
through without knowing whose it is. Nothing in the hook, the operators or the trigger names it."""

from __future__ import annotations

import asyncio
import importlib
import json

import pyarrow as pa
import pytest
from loopback_transport import LoopbackService, LoopbackTransport

from airflow_delta_provider.exceptions import DeltaConfigurationError, DeltaRetryableError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.hooks.local import LocalTransport
from airflow_delta_provider.hooks.registry import TRANSPORTS
from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaUpdateOperator

deltalake = pytest.importorskip("deltalake")


def _task_deferred() -> type:
    """The exception ``defer()`` raises: in the Task SDK from Airflow 3.2, in airflow.exceptions on 3.1."""
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred
    return TaskDeferred


@pytest.fixture
def service(monkeypatch):
    running = LoopbackService()
    monkeypatch.setitem(TRANSPORTS, LoopbackTransport.name, LoopbackTransport)  # the one registry line
    conn = {"conn_type": "delta_loopback", "host": "127.0.0.1", "port": running.port}
    monkeypatch.setenv("AIRFLOW_CONN_LOOPBACK", json.dumps(conn))
    yield running
    running.close()


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "orders")
    deltalake.write_deltalake(root, pa.table({"id": list(range(1, 11)), "amount": [i * 1.5 for i in range(1, 11)]}))
    return root


def _rows(root: str) -> dict[int, float]:
    t = deltalake.DeltaTable(root).to_pyarrow_table()
    return dict(zip(t.column("id").to_pylist(), t.column("amount").to_pylist(), strict=True))


def _first_event(trigger, timeout: float = 60):
    """The trigger as the triggerer runs it: rebuilt from its serialized form, its first event."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)

    async def first():
        async for event in rebuilt.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_a_fourth_transport_runs_a_deferred_update_through_its_trigger(service, table):
    TaskDeferred = _task_deferred()

    op = DeltaUpdateOperator(
        task_id="double_late_orders",
        table_uri=table,
        conn_id="loopback",
        execution="spark",  # the connection's transport, not the worker
        updates={"amount": "amount * 2"},
        predicate="id > 5",
        app_id="orders-doubling",
        app_version=1,
        deferrable=True,
    )
    service.hold.clear()  # the service queues the run: the task defers before any work is done
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    assert deltalake.DeltaTable(table).version() == 0
    assert op.hook.application_url.startswith(f"http://127.0.0.1:{service.port}/runs/")
    service.hold.set()
    event = _first_event(deferred.value.trigger)
    assert (event["status"], event["state"], event["succeeded"]) == ("ended", "SUCCEEDED", True)
    assert event["transport"] == "loopback_transport.LoopbackTransport"

    xcom = getattr(op, deferred.value.method_name)({}, event)  # what Airflow stores as the task's XCom
    assert (xcom["transport"], xcom["operation"], xcom["version"], xcom["committed"]) == (
        "loopback",
        "UPDATE",
        1,
        True,
    )
    assert xcom["metrics"]["numUpdatedRows"] == 5
    want = {i: i * 1.5 * (2 if i > 5 else 1) for i in range(1, 11)}  # plain Python
    assert _rows(table) == want
    assert deltalake.DeltaTable(table).history(1)[0]["operation"] == "UPDATE"
    polls = [path for method, path in service.requests if method == "GET" and path.count("/") == 2]
    assert len(polls) >= 2  # the trigger asked the service, not the worker


def test_a_fourth_transport_runs_attached_and_every_transport_says_whether_it_defers(service, table):
    op = DeltaDeleteOperator(
        task_id="drop_first", table_uri=table, conn_id="loopback", execution="spark", predicate="id <= 2"
    )
    xcom = op.execute({})
    assert (xcom["transport"], xcom["version"], xcom["metrics"]["numDeletedRows"]) == ("loopback", 1, 2)
    assert sorted(_rows(table)) == list(range(3, 11))
    # every transport answers whether it can defer; one that cannot refuses to start, with its reason
    hook = DeltaHook("loopback")
    assert hook.deferral_blocker() is None
    local = LocalTransport(hook)
    assert "this task's own process" in local.deferral_blocker()
    with pytest.raises(DeltaConfigurationError, match="cannot be detached .* own process"):
        local.start("delete", table, {})


def test_a_run_that_never_starts_is_stopped_and_the_task_fails_retryable(service, table):
    TaskDeferred = _task_deferred()

    op = DeltaDeleteOperator(
        task_id="drop_all", table_uri=table, conn_id="loopback", execution="spark", predicate="id > 0", deferrable=True
    )
    service.hold.clear()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    trigger.start_timeout = 0.2
    event = _first_event(trigger)
    assert (event["status"], event["state"]) == ("not_started", "QUEUED")
    with pytest.raises(DeltaRetryableError, match="still QUEUED .* stopped it"):
        getattr(op, deferred.value.method_name)({}, event)
    assert ("POST", f"/runs/{event['handle']['run_id']}/kill") in service.requests
    service.hold.set()  # the service would have run it now: the kill stands
    assert deltalake.DeltaTable(table).version() == 0 and len(_rows(table)) == 10


def test_a_connection_no_transport_serves_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ELSEWHERE", json.dumps({"conn_type": "http", "host": "h"}))
    with pytest.raises(DeltaConfigurationError, match="'elsewhere' of type 'http' reaches no Delta transport"):
        DeltaHook("elsewhere").transport_for_connection()


def test_a_transport_declares_and_checks_its_own_settings_and_operators_pass_them_through(service, table):
    # the operator knows nothing of loopback_queue: it passes it to the hook with the other transports'
    op = DeltaDeleteOperator(
        task_id="drop_first",
        table_uri=table,
        conn_id="loopback",
        execution="spark",
        predicate="id <= 3",
        loopback_queue="etl",
        submit_options={"driver_memory": "1g"},  # spark-submit's: held, not read by this transport
    )
    xcom = op.execute({})
    assert (xcom["transport"], xcom["metrics"]["numDeletedRows"]) == ("loopback", 3)
    assert sorted(_rows(table)) == list(range(4, 11))
    assert [run["queue"] for run in service.runs.values()] == ["etl"]  # what the service was sent
    assert op.hook.options == {"submit_options": {"driver_memory": "1g"}, "result_dir": None, "loopback_queue": "etl"}
    # each transport knows which of the user's settings are not its own (a run there ignores them)
    hook = DeltaHook("loopback", bundle_dir="/tmp/b", result_dir="/tmp/r", loopback_queue="etl")
    assert {name: cls(hook).foreign_options() for name, cls in TRANSPORTS.items()} == {
        "spark-submit": ["loopback_queue"],
        "connect": ["loopback_queue", "result_dir"],
        "local": ["bundle_dir", "loopback_queue", "result_dir"],
        "loopback": ["bundle_dir", "result_dir"],
    }

    # a bad value fails the DAG import, in the transport's words; so does one of spark-submit's
    with pytest.raises(DeltaConfigurationError, match=r"loopback_queue='etl jobs' is not a queue name"):
        DeltaDeleteOperator(task_id="d", table_uri=table, conn_id="loopback", loopback_queue="etl jobs")
    with pytest.raises(DeltaConfigurationError, match=r"Unknown spark-submit option\(s\) \['driver_mem'\]"):
        DeltaDeleteOperator(task_id="d", table_uri=table, submit_options={"driver_mem": "1g"})
    # a templated value is checked once rendered, when the hook is built
    templated = DeltaDeleteOperator(task_id="d", table_uri=table, conn_id="loopback", loopback_queue="{{ q }}")
    with pytest.raises(DeltaConfigurationError, match="is not a queue name"):
        templated.hook  # noqa: B018 (the rendered value, here left as it is, is checked)
    # a setting no transport takes is refused by name, the transports' own listed
    with pytest.raises(DeltaConfigurationError, match=r"Unknown Delta transport setting\(s\) \['loopback_qeue'\]"):
        DeltaHook("loopback", loopback_qeue="etl")
    with pytest.raises(TypeError, match="loopback_qeue"):
        DeltaDeleteOperator(task_id="d", table_uri=table, loopback_qeue="etl")
