"""DeltaTableVersionTrigger: wait on the triggerer for a Delta table to pass a version.

It runs :func:`airflow_delta_provider.version_decision.decide` (the sensor's own decision, so the two
cannot drift) in a worker thread every ``poll_interval`` seconds, and yields exactly one event:

* ``{"status": "fired", "version", "baseline", "operations"}``
* ``{"status": "error", "message", "error_class", "retryable"}``
* ``{"status": "timeout", "version", "baseline", "message"}`` once ``end_time`` (epoch seconds) has
  passed. The trigger enforces its own deadline: the triggerer's defer timeout also applies, but
  ``dag.test()`` runs triggers inline and enforces none.

The baseline travels in the serialized kwargs, so a trigger moved to another triggerer keeps it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_delta_provider.version_decision import decide


class DeltaTableVersionTrigger(BaseTrigger):
    """Fire when the Delta table at ``table_uri`` has a version newer than ``baseline``.

    :param table_uri: the table's path or URI.
    :param baseline: the version to pass; ``None`` = the version seen at the first check
        (``-1`` = "there was no table": any version fires).
    :param wait_for_table: a missing table means "keep waiting" instead of an error event.
    :param poll_interval: seconds between checks.
    :param end_time: epoch seconds after which a ``timeout`` event is sent (``None``: never).
    :param max_operations: at most this many operations are listed in the fired event.

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
    ) -> None:
        super().__init__()
        self.storage_conn_id = storage_conn_id
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
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
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
