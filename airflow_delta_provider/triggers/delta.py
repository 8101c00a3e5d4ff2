"""DeltaTableVersionTrigger: wait on the triggerer for a Delta table to pass a version, or watch
its commits for ever as an ``AssetWatcher``'s trigger (event-driven scheduling). And
:class:`DeltaRunTrigger`, which follows a deferred operator's run through its transport
(:class:`DeltaSparkDriverTrigger`: a cluster-mode Spark driver).

As a deferred sensor's trigger it runs :func:`airflow_delta_provider.version_decision.decide` (the sensor's own decision, so the two
cannot drift) in a worker thread every ``poll_interval`` seconds, and yields exactly one event:

* ``{"status": "fired", "version", "baseline", "operations"}``
* ``{"status": "error", "message", "error_class", "retryable"}``
* ``{"status": "timeout", "version", "baseline", "message"}`` once ``end_time`` (epoch seconds) has
  passed. The trigger enforces its own deadline: the triggerer's defer timeout also applies, but
  ``dag.test()`` runs triggers inline and enforces none.

The baseline travels in the serialized kwargs, so a trigger moved to another triggerer keeps it.

With ``watch=True`` (what :func:`delta_table_watcher` builds) it never ends: every ``poll_interval``
it runs :func:`~airflow_delta_provider.version_decision.watch_step` and yields one event per poll
that found new commits passing the filters (``per_commit=True``: one event per commit): ``{"status": "commit", "table_uri",
"first_version", "last_version", "commits": [{"version", "operation", "timestamp", "metrics",
"partition_keys"}]}`` (and ``schema_changes`` / ``reader_warnings`` in a commit that has some). Its
watermark (the last version announced or passed over) lives in the watched asset's state store
(Airflow 3.3+), so a restarted triggerer continues where the last one stopped. A watermark is stored one poll after its events were handed to the triggerer, by when they
are in the database: a triggerer killed in between announces those commits again on restart (never
fewer). Without an asset state store (Airflow 3.1-3.2) the watermark lives in memory: a restarted
triggerer starts from ``baseline`` if given, else from the table's latest version.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_delta_provider.version_decision import decide, watch_step

#: the asset state store key of a watcher's watermark (one per table: an asset may watch several)
WATERMARK_KEY = "delta_watermark:{table_uri}"


class DeltaTableVersionTrigger(BaseEventTrigger):
    """Fire when the Delta table at ``table_uri`` has a version newer than ``baseline``.

    :param table_uri: the table's path or URI.
    :param baseline: the version to pass; ``None`` = the version seen at the first check
        (``-1`` = "there was no table": any version fires).
    :param wait_for_table: a missing table means "keep waiting" instead of an error event.
    :param poll_interval: seconds between checks.
    :param end_time: epoch seconds after which a ``timeout`` event is sent (``None``: never).
    :param max_operations: at most this many operations are listed in the fired event (watching:
        at most this many versions are read per poll).
    :param watch: run for ever as an ``AssetWatcher``'s trigger, one event per new commit (see the
        module docstring); ``baseline`` is then where watching starts when no watermark is stored
        (``None``: the latest version when the trigger starts).
    :param operations: watching only: announce only commits of these Delta operations (``WRITE``,
        ``MERGE``, ``DELETE``, ``UPDATE``, ...); ``None``: every operation.
    :param include_maintenance: watching only: also announce OPTIMIZE, REORG and VACUUM commits, which
        change no rows (skipped by default).
    :param per_commit: watching only: one event per commit instead of one per poll for all its new
        commits. Airflow gives an event that arrives while the consumer's next run is being queued to
        the run after (created by a later event): events a few milliseconds apart are best avoided.

    Example::

        self.defer(
            trigger=DeltaTableVersionTrigger(table_uri="/data/events", baseline=12, poll_interval=30),
            method_name="execute_complete",
        )
    """

    def __init__(
        self,
        table_uri: str,
        baseline: int | None = None,
        *,
        wait_for_table: bool = False,
        poll_interval: float = 60.0,
        end_time: float | None = None,
        max_operations: int = 100,
        storage_conn_id: str | None = None,
        watch: bool = False,
        operations: list[str] | None = None,
        include_maintenance: bool = False,
        per_commit: bool = False,
    ) -> None:
        super().__init__()
        if not watch and (operations is not None or include_maintenance or per_commit):
            raise ValueError(
                "DeltaTableVersionTrigger: operations, include_maintenance and per_commit shape the commits of a "
                "watching trigger. Cause: watch=False (a sensor's trigger fires on any new version). Fix: pass "
                "watch=True (or use delta_table_watcher()), or drop those arguments."
            )
        if operations is not None and (
            isinstance(operations, str) or not all(isinstance(o, str) and o.strip() for o in operations)
        ):
            raise ValueError(
                f"DeltaTableVersionTrigger: operations={operations!r} is not a list of Delta operation names. "
                "Fix: pass e.g. operations=['WRITE', 'MERGE']."
            )
        self.storage_conn_id = storage_conn_id
        self.watch = bool(watch)
        self.operations = None if operations is None else sorted({o.strip().upper() for o in operations})
        self.include_maintenance = bool(include_maintenance)
        self.per_commit = bool(per_commit)
        self.table_uri = table_uri
        self.baseline = baseline
        self.wait_for_table = wait_for_table
        self.poll_interval = float(poll_interval)
        self.end_time = end_time
        self.max_operations = max_operations

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "baseline": self.baseline,
                "wait_for_table": self.wait_for_table,
                "poll_interval": self.poll_interval,
                "end_time": self.end_time,
                "max_operations": self.max_operations,
                "storage_conn_id": self.storage_conn_id,
                "watch": self.watch,
                "operations": self.operations,
                "include_maintenance": self.include_maintenance,
                "per_commit": self.per_commit,
            },
        )

    # a deferred sensor's trigger may run on a triggerer queue (BaseEventTrigger's default is False)
    supports_triggerer_queue = True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.watch:
            async for event in self._watch():
                yield event
            return
        baseline = self.baseline
        while True:
            d = await asyncio.to_thread(
                decide,
                self.table_uri,
                baseline,
                wait_for_table=self.wait_for_table,
                max_operations=self.max_operations,
                storage_conn_id=self.storage_conn_id,
            )
            if d.error:
                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": d.error,
                        "error_class": d.error_class,
                        "retryable": d.retryable,
                        "baseline": d.baseline,
                    }
                )
                return
            baseline = d.baseline
            if d.fired:
                yield TriggerEvent({"status": "fired", **d.xcom_value()})
                return
            now = time.time()
            if self.end_time is not None and now >= self.end_time:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "version": d.version,
                        "baseline": baseline,
                        "message": (
                            f"Delta table '{self.table_uri}' did not pass version {baseline} before the "
                            "sensor's timeout (latest version "
                            f"{'none: no table' if d.version is None else d.version})."
                        ),
                    }
                )
                return
            self.log.info(
                "Delta table %s at version %s, waiting for a version > %s", self.table_uri, d.version, baseline
            )
            wait = self.poll_interval
            if self.end_time is not None:
                wait = max(0.0, min(wait, self.end_time - now))
            await asyncio.sleep(wait)

    # ------------------------------------------------------------------ watching (AssetWatcher)
    async def _stored_watermark(self, key: str):
        """``(state store, stored watermark)``: the watched asset's store (Airflow 3.3+, a watcher of
        one asset), else ``(None, None)`` and the watermark lives in memory."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None, None
        try:
            stored = await store.aget(key)
        except ValueError as e:  # a trigger watching several assets: no single place for the watermark
            self.log.warning("Watermark kept in memory only: %s", e)
            return None, None
        return store, stored if isinstance(stored, int) and not isinstance(stored, bool) else None

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        key = WATERMARK_KEY.format(table_uri=self.table_uri)
        state, stored = await self._stored_watermark(key)
        watermark = stored if stored is not None else self.baseline
        unsaved = None  # a watermark whose events are not yet known to be in the database
        operations = frozenset(self.operations) if self.operations is not None else None
        self.log.info("Watching Delta table %s after version %s", self.table_uri, watermark)
        while True:
            step = await asyncio.to_thread(
                watch_step,
                self.table_uri,
                watermark,
                operations=operations,
                include_maintenance=self.include_maintenance,
                limit=self.max_operations,
                storage_conn_id=self.storage_conn_id,
            )
            if step.error:
                # a watcher outlives storage hiccups: log and poll again (a bad URI keeps logging)
                self.log.warning("Delta table %s: %s", self.table_uri, step.error)
            else:
                groups = [[c] for c in step.commits] if self.per_commit else [list(step.commits)]
                for commits in filter(None, groups):
                    yield TriggerEvent(
                        {
                            "status": "commit",
                            "table_uri": self.table_uri,
                            "first_version": commits[0]["version"],
                            "last_version": commits[-1]["version"],
                            "commits": commits,
                        }
                    )
                if step.watermark != watermark:
                    watermark = unsaved = step.watermark
            await asyncio.sleep(self.poll_interval)
            # one poll later the events above are in the database: now the watermark may move
            if unsaved is not None and state is not None:
                try:
                    await state.aset(key, unsaved)
                    unsaved = None
                except Exception as e:  # kept, and saved after the next poll
                    self.log.warning("Cannot store the watermark %s of %s: %s", unsaved, self.table_uri, e)


def delta_table_watcher(
    table_uri: str,
    *,
    name: str | None = None,
    operations: list[str] | None = None,
    include_maintenance: bool = False,
    per_commit: bool = False,
    poll_interval: float = 30.0,
    start_version: int | None = None,
    storage_conn_id: str | None = None,
):
    """An ``AssetWatcher`` that schedules the Asset's consumers on every new commit of ``table_uri``
    (Airflow 3 event-driven scheduling), with the commit's version, operation, metrics and partitions
    in the Asset event's ``extra["payload"]``.

    :param name: the watcher's name (default: ``delta_commits_`` and the table's last path segment).
    :param operations: only commits of these operations (e.g. ``["WRITE", "MERGE"]``).
    :param include_maintenance: also OPTIMIZE, REORG and VACUUM commits (not by default).
    :param per_commit: one event per commit, instead of one per poll for all its new commits.
    :param start_version: watch commits after this version when nothing is stored yet (default: the
        version when the trigger first runs).

    Example::

        orders = delta_asset("s3://lake/orders", watchers=[delta_table_watcher("s3://lake/orders")])
        with DAG("orders_consumer", schedule=[orders]): ...
    """
    from airflow.sdk import AssetWatcher

    trigger = DeltaTableVersionTrigger(
        table_uri,
        start_version,
        poll_interval=poll_interval,
        storage_conn_id=storage_conn_id,
        watch=True,
        operations=operations,
        include_maintenance=include_maintenance,
        per_commit=per_commit,
    )
    return AssetWatcher(name=name or f"delta_commits_{_last_segment(table_uri)}", trigger=trigger)


def _last_segment(table_uri: str) -> str:
    return str(table_uri).rstrip("/").rsplit("/", 1)[-1] or "table"


__all__ = [
    "DeltaRunTrigger",
    "DeltaSparkDriverTrigger",
    "DeltaTableVersionTrigger",
    "WATERMARK_KEY",
    "delta_table_watcher",
    "run_of",
]


class DeltaRunTrigger(BaseTrigger):
    """Follow a Delta run a deferred operator started (:meth:`~airflow_delta_provider.hooks.transport.Transport.start`)
    until it ends, on the triggerer: every ``poll_interval`` seconds it asks the run's transport
    (:meth:`~airflow_delta_provider.hooks.transport.Transport.poll`, in a worker thread, no hook) and
    yields exactly one event, which carries the ``transport`` and the run's ``handle``:

    * ``{"status": "ended", "state", "succeeded"}``: the run ended (the task resumes to read its
      result, or the commit in the table's log);
    * ``{"status": "not_started", "state", "message"}``: still waiting for resources ``start_timeout``
      seconds after the handle's ``submitted_at`` (the task stops it and fails, retryable);
    * ``{"status": "unreachable", "message"}``: the service did not answer for ``unreachable_timeout``
      seconds (retryable: a retry finds a run that still runs, where the transport can, and waits
      for it instead of starting a second one).

    Nothing waits without a bound but a run that runs: the operator's ``execution_timeout`` bounds that.

    :param transport: the transport's class as ``module.QualName`` (imported on the triggerer).
    :param handle: what its ``start`` returned (JSON).
    :param poll_interval: seconds between polls.
    :param start_timeout: seconds a run may wait for resources (``None``: no limit).
    :param unreachable_timeout: seconds the service may stay unreachable.
    """

    def __init__(
        self,
        transport: str,
        handle: dict,
        *,
        poll_interval: float = 10.0,
        start_timeout: float | None = 600.0,
        unreachable_timeout: float = 300.0,
    ) -> None:
        super().__init__()
        self.transport = transport
        self.handle = dict(handle)
        self.poll_interval = float(poll_interval)
        self.start_timeout = None if start_timeout is None else float(start_timeout)
        self.unreachable_timeout = float(unreachable_timeout)

    def _run_kwargs(self) -> dict[str, Any]:
        """The kwargs naming the run (what its events carry too)."""
        return {"transport": self.transport, "handle": self.handle}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self._run_kwargs(),
                "poll_interval": self.poll_interval,
                "start_timeout": self.start_timeout,
                "unreachable_timeout": self.unreachable_timeout,
            },
        )

    supports_triggerer_queue = True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        transport = transport_class(self.transport)
        what = transport.describe(self.handle)
        unreachable_since, last_state = None, None
        while True:
            now = time.time()
            try:
                polled = await asyncio.to_thread(transport.poll, self.handle)
            except OSError as e:
                unreachable_since = unreachable_since or now
                if now - unreachable_since >= self.unreachable_timeout:
                    yield TriggerEvent(
                        {
                            "status": "unreachable",
                            **self._run_kwargs(),
                            "message": f"Cannot ask about {what} for {now - unreachable_since:.0f} s: {e}",
                        }
                    )
                    return
                self.log.warning("Cannot ask about %s (%s); asking again", what, e)
            else:
                unreachable_since = None
                if not polled.active:
                    yield TriggerEvent(
                        {
                            "status": "ended",
                            **self._run_kwargs(),
                            "state": polled.state,
                            "succeeded": polled.succeeded,
                        }
                    )
                    return
                waited = now - float(self.handle.get("submitted_at") or now)
                if polled.waiting and self.start_timeout is not None and waited >= self.start_timeout:
                    yield TriggerEvent(
                        {
                            "status": "not_started",
                            **self._run_kwargs(),
                            "state": polled.state,
                            "message": f"{what} is still {polled.state} {waited:.0f} s after its submission "
                            f"(start_timeout {self.start_timeout:.0f} s): the cluster has no room for it",
                        }
                    )
                    return
                if polled.state != last_state:
                    self.log.info("%s is %s", what, polled.state)
                    last_state = polled.state
            await asyncio.sleep(self.poll_interval)


class DeltaSparkDriverTrigger(DeltaRunTrigger):
    """:class:`DeltaRunTrigger` of a Delta app's Spark driver submitted in cluster deploy mode by the
    spark-submit transport (see :mod:`airflow_delta_provider.hooks.driver`): it asks the cluster
    manager (standalone master's REST server, YARN's ResourceManager, the driver pod) for the driver's
    state. Its kwargs and events name the run as ``driver`` (:meth:`SubmittedDriver.to_dict`).

    :param driver: :meth:`SubmittedDriver.to_dict` of the driver to follow.
    """

    #: the transport that submitted the driver, as an importable class path
    TRANSPORT = "airflow_delta_provider.hooks.submit.SubmitTransport"

    def __init__(
        self,
        driver: dict,
        *,
        poll_interval: float = 10.0,
        start_timeout: float | None = 600.0,
        unreachable_timeout: float = 300.0,
    ) -> None:
        super().__init__(
            self.TRANSPORT,
            driver,
            poll_interval=poll_interval,
            start_timeout=start_timeout,
            unreachable_timeout=unreachable_timeout,
        )
        self.driver = self.handle

    def _run_kwargs(self) -> dict[str, Any]:
        return {"driver": self.handle}


def transport_class(path: str) -> type:
    """The transport class named ``module.QualName`` (imported: no registry needed on the triggerer)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_of(event: dict) -> tuple[type, dict]:
    """``(transport class, handle)`` of the run a :class:`DeltaRunTrigger`'s event names."""
    if "handle" in event:
        return transport_class(str(event.get("transport"))), dict(event["handle"] or {})
    return transport_class(DeltaSparkDriverTrigger.TRANSPORT), dict(event.get("driver") or {})
