"""Commit-driven scheduling: the version trigger as an AssetWatcher's trigger (``watch=True``), on real
tables written by the engine in this process (no Spark). The watermark store stands in for Airflow's
asset state store (an external boundary); the end-to-end run under a real triggerer and scheduler is
tests/airflow/test_commit_watcher.py."""

from __future__ import annotations

import asyncio
import contextlib

import pyarrow as pa
import pytest
from airflow.sdk import AssetWatcher

from airflow_delta_provider.operators.delta import delta_asset
from airflow_delta_provider.triggers.delta import WATERMARK_KEY, DeltaTableVersionTrigger, delta_table_watcher
from airflow_delta_provider.version_decision import NO_TABLE, watch_step
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.table import DeltaTable


def _table(root: str) -> None:
    DeltaTable.create(None, root, schema="id BIGINT, dt STRING", partition_by=["dt"])


def _append(root: str, ids, dt: str | list[str]) -> int:
    dts = [dt] * len(ids) if isinstance(dt, str) else dt
    return append_arrow(root, pa.table({"id": pa.array(ids, pa.int64()), "dt": dts})).to_dict()["version"]


def test_watch_step_lists_new_commits_with_metrics_and_partitions_and_filters(tmp_path):
    root = str(tmp_path / "t")
    assert watch_step(root, None).watermark == NO_TABLE  # no table yet: its first version will count
    _table(root)
    first = watch_step(root, None)
    assert (first.version, first.watermark, first.commits) == (0, 0, ())  # starts at the latest version
    _append(root, [1, 2], "2026-01-01")
    _append(root, [3], ["2026-01-02"])
    _append(root, [4], ["2026-01-03"])
    DeltaTable(None, root).delete("dt = '2026-01-02'")
    step = watch_step(root, 0)
    assert step.version == step.watermark == 4
    assert [(c["version"], c["operation"]) for c in step.commits] == [
        (1, "WRITE"),
        (2, "WRITE"),
        (3, "WRITE"),
        (4, "DELETE"),
    ]
    assert step.commits[0]["partition_keys"] == ["2026-01-01"]
    assert step.commits[0]["metrics"]["numOutputRows"] == 2 and isinstance(step.commits[0]["timestamp"], int)
    assert step.commits[-1]["partition_keys"] == ["2026-01-02"]
    # filters: operation kinds, and the watermark still moves past what they leave out
    only = watch_step(root, 0, operations=frozenset({"DELETE"}))
    assert [c["operation"] for c in only.commits] == ["DELETE"] and only.watermark == step.version
    # a limit reads a bounded range per step
    part = watch_step(root, 0, limit=2)
    assert [c["version"] for c in part.commits] == [1, 2] and part.watermark == 2


def test_maintenance_commits_are_passed_over_unless_asked(tmp_path):
    root = str(tmp_path / "t")
    _table(root)
    for i in range(3):
        _append(root, [i], "2026-01-01")
    opt = DeltaTable(None, root).optimize()
    assert opt["operation"] == "OPTIMIZE" and opt["version"] == 4
    assert [c["operation"] for c in watch_step(root, 3).commits] == []
    assert watch_step(root, 3).watermark == 4
    with_it = watch_step(root, 3, include_maintenance=True).commits
    assert [c["operation"] for c in with_it] == ["OPTIMIZE"] and with_it[0]["partition_keys"] == []


class _AssetStore:
    """Stand-in for Airflow's asset state store accessors (aget/aset by key) of one watched asset."""

    def __init__(self, data=None):
        self.data = dict(data or {})
        self.sets = []

    async def aget(self, key, default=None):
        return self.data.get(key, default)

    async def aset(self, key, value):
        self.sets.append(value)
        self.data[key] = value


async def _events(trigger, n, *, between=None, timeout=20.0):
    """The first ``n`` events of a watching trigger; ``between(i)`` runs after the i-th event."""
    out = []
    gen = trigger.run()
    try:
        async with asyncio.timeout(timeout):
            while len(out) < n:
                out.append((await anext(gen)).payload)
                if between:
                    await asyncio.to_thread(between, len(out))
    finally:
        await gen.aclose()
    return out


def _watching(root, store=None, **kw):
    t = DeltaTableVersionTrigger(root, poll_interval=0.05, watch=True, **{"per_commit": True, **kw})
    t.asset_state_store = store
    return t


def test_the_watcher_announces_each_commit_once_and_a_restart_continues_after_its_watermark(tmp_path):
    root = str(tmp_path / "t")
    _table(root)
    store = _AssetStore()
    v1 = _append(root, [1], "2026-01-01")
    # nothing stored: the watcher starts after the version it first sees, so commit v1 is history
    trigger = _watching(root, store)

    commits = []

    async def first_three():
        gen = trigger.run()
        async with asyncio.timeout(20):
            pending = asyncio.ensure_future(anext(gen))  # the first poll records where watching starts
            await asyncio.sleep(0.3)
            for i in range(3):
                await asyncio.to_thread(_append, root, [10 + i], f"2026-01-0{i + 1}")
                commits.append((await pending).payload)
                pending = asyncio.ensure_future(anext(gen))
            await asyncio.sleep(0.3)  # a poll after the last event: its watermark is stored
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await gen.aclose()

    asyncio.run(first_three())
    assert [e["first_version"] for e in commits] == [v1 + 1, v1 + 2, v1 + 3]
    assert all(e["first_version"] == e["last_version"] and len(e["commits"]) == 1 for e in commits)
    assert [e["commits"][0]["partition_keys"] for e in commits] == [["2026-01-01"], ["2026-01-02"], ["2026-01-03"]]
    key = WATERMARK_KEY.format(table_uri=root)
    assert store.data[key] == v1 + 3 and store.sets == sorted(store.sets)
    # a new triggerer: the stored watermark, not the trigger's kwargs, says where to go on; two commits
    # made while no triggerer ran are announced, none of the earlier three again
    _append(root, [20], "2026-01-04")
    _append(root, [21], "2026-01-05")
    again = asyncio.run(_events(_watching(root, store), 2))
    assert [e["first_version"] for e in again] == [v1 + 4, v1 + 5]


def test_batches_filters_and_a_watermark_withheld_until_the_next_poll(tmp_path):
    root = str(tmp_path / "t")
    _table(root)
    store = _AssetStore({WATERMARK_KEY.format(table_uri=root): 0})
    _append(root, [1], "a")
    DeltaTable(None, root).delete("dt = 'a'")
    _append(root, [2], "b")
    trigger = _watching(root, store, operations=["write"], per_commit=False)

    async def one():
        gen = trigger.run()
        event = (await anext(gen)).payload
        stored_at_event = list(store.sets)  # the event is not yet known to be in the database
        pending = asyncio.ensure_future(anext(gen))  # the triggerer asks for the next event at once
        await asyncio.sleep(0.3)
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        await gen.aclose()
        return event, stored_at_event

    event, stored_at_event = asyncio.run(one())
    assert [c["version"] for c in event["commits"]] == [1, 3] and (event["first_version"], event["last_version"]) == (
        1,
        3,
    )
    assert stored_at_event == [] and store.sets == [3]


def test_watcher_arguments_serialize_and_misuse_is_refused(tmp_path):
    w = delta_table_watcher("s3://lake/orders/", operations=["merge", "WRITE"], per_commit=True, start_version=7)
    assert isinstance(w, AssetWatcher) and w.name == "delta_commits_orders"
    path, kwargs = w.trigger.serialize()
    assert kwargs["watch"] is True and kwargs["operations"] == ["MERGE", "WRITE"] and kwargs["baseline"] == 7
    assert DeltaTableVersionTrigger(**kwargs).serialize() == (path, kwargs)
    # an Asset takes it as its watcher (what the DAG processor does with it)
    asset = delta_asset("/data/orders", watchers=[delta_table_watcher("/data/orders")])
    assert asset.watchers[0].trigger.watch
    with pytest.raises(ValueError, match="watch=True"):
        DeltaTableVersionTrigger("/x", operations=["WRITE"])
    with pytest.raises(ValueError, match="operation names"):
        DeltaTableVersionTrigger("/x", watch=True, operations="WRITE")
