"""The version sensor's shared decision, the trigger that runs it on the triggerer, and the sensor's
poke path, on real Delta logs written by the engine's pure core (no Spark) and on a conformance table.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from airflow.sdk import PokeReturnValue
from delta_commits import append, create

from airflow_delta_provider.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout
from airflow_delta_provider.sensors.delta import BASELINE_STATE_KEY, DeltaTableVersionSensor, coerce_baseline
from airflow_delta_provider.triggers.delta import DeltaTableVersionTrigger
from airflow_delta_provider.version_decision import NO_TABLE, decide

# ------------------------------------------------------------------------------------------------
# decide()


def test_missing_table_fails_unless_waiting(tmp_path):
    root = str(tmp_path / "t")
    d = decide(root, None)
    assert not d.fired and d.error and not d.retryable
    assert d.error_class == "TableNotFoundError" and "wait_for_table=True" in d.error
    d = decide(root, None, wait_for_table=True)
    assert (d.fired, d.error, d.version, d.baseline) == (False, None, None, NO_TABLE)
    # the table appears: its first version passes the "no table" baseline
    create(root)
    d = decide(root, d.baseline, wait_for_table=True)
    assert d.fired and d.version == 0
    assert [(o["version"], o["operation"]) for o in d.operations] == [(0, "CREATE TABLE")]


def test_baseline_none_records_current_version(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    append(root, [1, 2])
    d = decide(root, None)
    assert (d.fired, d.version, d.baseline, d.operations) == (False, 1, 1, ())


def test_new_versions_fire_with_their_operations(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    base = append(root, [1])
    assert not decide(root, base).fired
    append(root, [2])
    append(root, [3], operation="STREAMING UPDATE")
    d = decide(root, base)
    assert d.fired and d.version == base + 2 and d.baseline == base
    assert [(o["version"], o["operation"]) for o in d.operations] == [
        (base + 1, "WRITE"),
        (base + 2, "STREAMING UPDATE"),
    ]
    assert all(isinstance(o["timestamp"], int) and o["timestamp"] > 0 for o in d.operations)
    assert d.xcom_value() == {"version": base + 2, "baseline": base, "operations": list(d.operations)}
    # only the newest max_operations are listed
    assert [o["version"] for o in decide(root, 0, max_operations=2).operations] == [base + 1, base + 2]
    # a baseline ahead of the table (e.g. a recreated table) waits
    assert not decide(root, base + 10).fired


def test_table_uri_forms(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    append(root, [1])
    assert decide("file://" + root, 0).version == 1
    assert decide(root + "/", 0).fired


def test_conformance_table_without_early_commits(conformance_root):
    # dat/no_replay: commits 0 and 1 were cleaned up, a checkpoint at 2, commit 3 is latest.
    root = str(conformance_root / "dat" / "no_replay" / "delta")
    d = decide(root, 1)
    assert d.fired and d.version == 3
    assert [o["version"] for o in d.operations] == [2, 3]  # what is still in the log
    assert decide(root, None).baseline == 3


# ------------------------------------------------------------------------------------------------
# the trigger


def _first_event(trigger: DeltaTableVersionTrigger):
    async def go():
        return await anext(trigger.run())

    return asyncio.run(go()).payload


def test_trigger_serializes_round_trip():
    t = DeltaTableVersionTrigger("/x", 4, wait_for_table=True, poll_interval=2, end_time=123.0)
    path, kwargs = t.serialize()
    assert path == "airflow_delta_provider.triggers.delta.DeltaTableVersionTrigger"
    assert DeltaTableVersionTrigger(**kwargs).serialize() == (path, kwargs)


def test_trigger_fires_on_a_concurrent_commit(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    committed = []
    timer = threading.Timer(0.4, lambda: committed.append(append(root, [7])))
    timer.start()
    try:
        ev = _first_event(DeltaTableVersionTrigger(root, 0, poll_interval=0.1, end_time=time.time() + 60))
    finally:
        timer.join()
    assert ev["status"] == "fired"
    assert ev["version"] == committed[0] == 1 and ev["baseline"] == 0
    assert [o["operation"] for o in ev["operations"]] == ["WRITE"]


def test_trigger_times_out_and_reports_errors(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    ev = _first_event(DeltaTableVersionTrigger(root, None, poll_interval=0.05, end_time=time.time() + 0.3))
    assert ev["status"] == "timeout" and ev["baseline"] == 0 and ev["version"] == 0
    ev = _first_event(DeltaTableVersionTrigger(str(tmp_path / "missing"), None, poll_interval=0.05))
    assert ev["status"] == "error" and ev["error_class"] == "TableNotFoundError" and ev["retryable"] is False


# ------------------------------------------------------------------------------------------------
# the sensor (poke path; the Airflow runtime path is in tests/airflow)


class _Store:
    """Stand-in for Airflow's task state store accessor (get/set/delete by key)."""

    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value, **_):
        self.data[key] = value

    def delete(self, key):
        self.data.pop(key, None)


def test_sensor_baseline_survives_a_new_sensor_instance(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    store = _Store()
    ctx = {"task_state_store": store}
    s1 = DeltaTableVersionSensor(task_id="s1", table_uri=root, poke_interval=1, timeout=10)
    assert s1.poke(ctx) is False
    assert store.data == {BASELINE_STATE_KEY: 0}
    append(root, [1])
    # a reschedule runs a fresh instance: it must use the stored baseline, not the new version
    s2 = DeltaTableVersionSensor(task_id="s1", table_uri=root, poke_interval=1, timeout=10)
    ret = s2.poke(ctx)
    assert isinstance(ret, PokeReturnValue) and ret.is_done
    assert ret.xcom_value["version"] == 1 and ret.xcom_value["baseline"] == 0
    assert store.data == {}  # forgotten on success: a cleared sensor starts over


def test_sensor_explicit_baseline_and_errors(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    append(root, [1])
    s = DeltaTableVersionSensor(task_id="s", table_uri=root, baseline_version="0", poke_interval=1, timeout=10)
    assert s.poke({}).xcom_value["version"] == 1
    s = DeltaTableVersionSensor(task_id="s2", table_uri=str(tmp_path / "none"), poke_interval=1, timeout=10)
    with pytest.raises(AirflowFailException, match="TableNotFoundError: No Delta table"):
        s.poke({})


def test_sensor_execute_complete_events():
    s = DeltaTableVersionSensor(task_id="s", table_uri="/x", deferrable=True, poke_interval=1, timeout=10)
    ev = {"status": "fired", "version": 3, "baseline": 1, "operations": [{"version": 2}, {"version": 3}]}
    assert s.execute_complete({}, ev) == {"version": 3, "baseline": 1, "operations": ev["operations"]}
    with pytest.raises(AirflowSensorTimeout):
        s.execute_complete({}, {"status": "timeout", "message": "no"})
    with pytest.raises(AirflowFailException, match="TableNotFoundError"):
        s.execute_complete(
            {}, {"status": "error", "message": "gone", "error_class": "TableNotFoundError", "retryable": False}
        )
    with pytest.raises(AirflowException) as ei:
        s.execute_complete({}, {"status": "error", "message": "io", "error_class": "StorageError", "retryable": True})
    assert not isinstance(ei.value, AirflowFailException)


@pytest.mark.parametrize("value,expected", [(None, None), ("", None), ("None", None), ("7", 7), (" 12 ", 12), (3, 3)])
def test_coerce_baseline(value, expected):
    assert coerce_baseline(value) == expected


def test_coerce_baseline_rejects_junk():
    with pytest.raises(AirflowFailException, match="not a version number"):
        coerce_baseline("latest")
