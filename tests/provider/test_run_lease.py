"""A retry never starts a second writer beside an earlier try that still runs (the run lease,
airflow_delta_provider_apps/run_lease.py): the lease's life cycle, the wait's rules on a fake clock,
and the hook waiting for a real concurrent writer of this task instance's identity (this process
plays the earlier try's driver: a lease renewed from a thread, then a commit with the identity)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from test_exactly_once import append
from txn_helpers import create_table

from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.hooks.submit import SubmitTransport
from airflow_delta_provider_apps.cli import driver_lease
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.run_lease import (
    STALE_AFTER_SECONDS,
    RunLease,
    lease_path,
    read_lease,
    wait_for_earlier_run,
)

APP = "airflow:daily/merge@2026-03-01T00:00:00+00:00"


def test_a_lease_is_written_renewed_and_deleted(tmp_path):
    root = str(tmp_path / "t")
    st = storage_for(root)
    lease = RunLease(st, root, APP, 3, heartbeat=0.05)
    lease.spark_app_id = "local-123"
    lease.start()
    first = read_lease(st, root, APP, 3)
    assert (first.app_id, first.app_version, first.pid, first.spark_app_id) == (APP, 3, os.getpid(), "local-123")
    time.sleep(0.3)
    assert read_lease(st, root, APP, 3).heartbeat_ms > first.heartbeat_ms  # renewed
    assert read_lease(st, root, APP, 4) is None  # another run of the task instance: another lease
    lease.end()
    assert read_lease(st, root, APP, 3) is None
    assert lease_path(root, APP, 3).startswith(os.path.join(root, "_airflow_runs"))  # hidden from Delta
    # a torn or foreign file is no lease
    st.write_bytes(lease_path(root, APP, 3), b'{"app_id": ', overwrite=True)
    assert read_lease(st, root, APP, 3) is None


class _Clock:
    def __init__(self):
        self.t = time.time()

    def sleep(self, s):
        self.t += s

    def now(self):
        return self.t


def _lease_at(st, root, heartbeat_s: float):
    lease = RunLease(st, root, APP, 1)
    lease._write()
    path = lease_path(root, APP, 1)
    body = json.loads(st.read_bytes(path))
    body["heartbeat_ms"] = int(heartbeat_s * 1000)
    st.write_bytes(path, json.dumps(body).encode(), overwrite=True)


def test_the_wait_follows_the_lease_and_ends_with_the_commit_or_a_stale_lease(tmp_path):
    root = str(tmp_path / "t")
    st = storage_for(root)
    clock, said = _Clock(), []
    # no lease: nothing to wait for, the log is not even asked
    assert wait_for_earlier_run(st, root, APP, 1, lambda: 1 / 0, sleep=clock.sleep, now=clock.now) is None
    # a live lease: polled until the earlier try's commit is in the log
    _lease_at(st, root, clock.now())
    answers = iter([None, None, {"version": 7}])
    got = wait_for_earlier_run(
        st, root, APP, 1, lambda: next(answers), log=said.append, sleep=clock.sleep, now=clock.now, poll=5
    )
    assert got == {"version": 7} and len(said) == 1 and "still running" in said[0]
    # a lease nobody renews goes stale: the wait ends without a commit, and the stale lease is deleted
    clock = _Clock()
    _lease_at(st, root, clock.now())
    got = wait_for_earlier_run(st, root, APP, 1, lambda: None, log=said.append, sleep=clock.sleep, now=clock.now)
    assert got is None and clock.t - time.time() >= STALE_AFTER_SECONDS - 5
    assert read_lease(st, root, APP, 1) is None
    # a lease found already stale (a driver killed long ago): no wait at all
    _lease_at(st, root, time.time() - 10 * STALE_AFTER_SECONDS)
    assert wait_for_earlier_run(st, root, APP, 1, lambda: None, sleep=lambda s: 1 / 0) is None


def test_the_hook_waits_for_the_earlier_try_and_reports_its_commit_without_submitting(tmp_path, monkeypatch):
    """The retry finds the lease of the earlier try's driver (alive: renewed every 0.1 s), submits
    nothing, and reports the earlier try's commit once it lands."""
    import airflow_delta_provider_apps.run_lease as run_lease

    monkeypatch.setattr(run_lease, "STALE_AFTER_SECONDS", 1.0)
    root = str(tmp_path / "t")
    create_table(root)
    st = storage_for(root)
    earlier = RunLease(st, root, APP, 2, heartbeat=0.1).start()

    def earlier_driver():
        real_sleep(1.5)  # longer than the stale time: only the renewals keep the retry waiting
        append(root, [1, 2, 3], app_id=APP, app_version=2)
        earlier.end()

    driver = threading.Thread(target=earlier_driver)
    hook = DeltaHook("spark_local")
    submitter = SubmitTransport(hook)
    monkeypatch.setattr(submitter, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("submitted")))
    real_sleep = time.sleep
    monkeypatch.setattr(run_lease.time, "sleep", lambda s: real_sleep(min(s, 0.1)))
    driver.start()
    started = time.monotonic()
    try:
        result = hook._run_on(submitter, "write", root, {"app_id": APP, "app_version": 2})
    finally:
        driver.join()
    assert time.monotonic() - started >= 1.4
    assert (result["version"], result["skipped"], result["from_log"], result["transport"]) == (
        1,
        True,
        True,
        "spark-submit",
    )
    # without a lease the hook submits as before (here: the boundary refuses)
    with pytest.raises(AssertionError, match="submitted"):
        hook._run_on(submitter, "write", root, {"app_id": APP, "app_version": 3})


def test_the_app_takes_a_lease_for_writing_operations_with_an_identity_only(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    lease = driver_lease({"operation": "delete", "table_uri": root, "app_id": APP, "app_version": 5}, None)
    try:
        assert read_lease(storage_for(root), root, APP, 5).pid == os.getpid()
    finally:
        lease.end()
    assert read_lease(storage_for(root), root, APP, 5) is None
    assert driver_lease({"operation": "delete", "table_uri": root}, None) is None  # no identity
    assert driver_lease({"operation": "create-table", "table_uri": root, "app_id": APP, "app_version": 1}, None) is None
    assert driver_lease({"operation": "history", "table_uri": root, "app_id": APP, "app_version": 1}, None) is None
