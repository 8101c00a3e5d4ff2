"""DeltaTableVersionSensor: wait until a Delta table has a version newer than a baseline.

The log is read WITHOUT Spark (one ``_delta_log`` listing per poke) through the shared pure decision
:func:`airflow_delta_provider.version_decision.decide`; the deferrable path hands the same decision to
:class:`~airflow_delta_provider.triggers.delta.DeltaTableVersionTrigger`.

Baseline rules:

* ``baseline_version`` given (templated; ints or their string renderings): that is the baseline.
* ``baseline_version=None``: the version seen at the sensor's first poke in this DAG run. It must
  survive ``mode="reschedule"`` (every reschedule re-runs ``execute`` in a new process, and Airflow 3
  clears the task's XComs at each start), so it is kept in the task instance's **task state store**
  (``context["task_state_store"]``, Airflow 3.3), which is scoped to (DAG run, task, map index) and
  shared by reschedules and retries. A retry therefore still waits for a version newer than the one
  seen first, so a commit landing between a failed try and its retry is not missed. The key is
  deleted when the sensor fires, so clearing a succeeded sensor starts over from a fresh baseline.
* A missing table fails the task at once (AirflowFailException) unless ``wait_for_table=True``; then the
  first version that appears fires (baseline ``-1``).

XCom on firing (``return_value``): ``{"version": new, "baseline": b, "operations": [{"version",
"operation", "timestamp"}, ...]}``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_delta_provider.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout
from airflow_delta_provider.operators.arguments import refuse_unknown_arguments
from airflow_delta_provider.triggers.delta import DeltaTableVersionTrigger
from airflow_delta_provider.version_decision import Decision, decide

BASELINE_STATE_KEY = "delta_sensor_baseline_version"


def coerce_baseline(value: Any) -> int | None:
    """A rendered ``baseline_version`` -> int or None (``None``, ``""``, ``"None"`` mean "first poke")."""
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise AirflowFailException(f"baseline_version must be a version number, not {value!r}")
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text in ("", "None", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        raise AirflowFailException(
            f"baseline_version {value!r} is not a version number. Cause: it rendered to {text!r}. "
            "Fix: pass an int (or a template rendering to one), or None for the version at the first poke."
        ) from None


class DeltaTableVersionSensor(BaseSensorOperator):
    """Wait for a Delta table to get a version newer than ``baseline_version``.

    :param table_uri: the table's path or URI (templated).
    :param baseline_version: fire when the table's version is greater than this (templated);
        ``None`` (default) = the version at the first poke of this DAG run (kept across reschedules).
    :param wait_for_table: when the table does not exist, keep waiting (and fire on its first version)
        instead of failing.
    :param deferrable: wait on the triggerer (:class:`DeltaTableVersionTrigger`) instead of a worker.
    :param max_operations: at most this many new operations are listed in the XCom.
    :param storage_conn_id: the object store's credentials (an ``aws``, ``google_cloud_platform``,
        ``wasb`` or ``adls`` connection), used by the worker and the triggerer alike; default: the
        environment's chain.
    :param kwargs: BaseSensorOperator arguments: ``poke_interval``, ``timeout``, ``mode``
        (``poke``/``reschedule``), ``soft_fail``, ...

    Example::

        wait = DeltaTableVersionSensor(
            task_id="wait_for_bronze",
            table_uri="/lake/bronze/events",
            baseline_version="{{ ti.xcom_pull(task_ids='append')['version'] }}",
            poke_interval=60,
            timeout=6 * 3600,
            mode="reschedule",
        )
    """

    template_fields: Sequence[str] = ("table_uri", "baseline_version")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        baseline_version: int | str | None = None,
        wait_for_table: bool = False,
        deferrable: bool = False,
        max_operations: int = 100,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_unknown_arguments(
            type(self),
            kwargs,
            takes="its own arguments (table_uri, baseline_version, ...), the sensors' (poke_interval, ...)",
        )
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id
        self.table_uri = table_uri
        self.baseline_version = baseline_version
        self.wait_for_table = wait_for_table
        self.deferrable = deferrable
        self.max_operations = max_operations
        self._baseline_seen: int | None = None

    # -- baseline persistence -----------------------------------------------------------------

    @staticmethod
    def _state_store(context):
        try:
            return context["task_state_store"]
        except (KeyError, TypeError):
            return None

    def _load_baseline(self, context) -> int | None:
        explicit = coerce_baseline(self.baseline_version)
        if explicit is not None:
            return explicit
        store = self._state_store(context)
        if store is None:  # no Airflow runtime (e.g. called directly): this instance's memory
            return self._baseline_seen
        # The store is the source of truth (reschedules and retries run new instances).
        stored = store.get(BASELINE_STATE_KEY)
        return None if stored is None else int(stored)

    def _save_baseline(self, context, baseline: int) -> None:
        self._baseline_seen = baseline
        store = self._state_store(context)
        if store is not None:
            store.set(BASELINE_STATE_KEY, baseline)
        self.log.info(
            "Baseline version %s recorded at the first poke; waiting for a newer version of %s",
            baseline,
            self.table_uri,
        )

    def _forget_baseline(self, context) -> None:
        self._baseline_seen = None
        store = self._state_store(context)
        if store is not None and coerce_baseline(self.baseline_version) is None:
            try:
                store.delete(BASELINE_STATE_KEY)
            except Exception as e:  # best effort; a stale key only matters after a manual clear
                self.log.warning("Could not delete the stored baseline: %s", e)

    # -- one check ----------------------------------------------------------------------------

    def _check(self, context) -> Decision:
        baseline = self._load_baseline(context)
        d = decide(
            self.table_uri,
            baseline,
            wait_for_table=self.wait_for_table,
            max_operations=self.max_operations,
            storage_conn_id=self.storage_conn_id,
        )
        if d.error:
            message = f"{d.error_class}: {d.error}" if d.error_class else d.error
            raise (AirflowException if d.retryable else AirflowFailException)(message)
        if baseline is None and d.baseline is not None:
            self._save_baseline(context, d.baseline)
        if d.fired:
            self.log.info(
                "Delta table %s moved from version %s to %s (%s new commit(s))",
                self.table_uri,
                d.baseline,
                d.version,
                len(d.operations),
            )
            self._forget_baseline(context)
        else:
            self.log.info("Delta table %s at version %s, baseline %s", self.table_uri, d.version, d.baseline)
        return d

    def poke(self, context) -> bool | PokeReturnValue:
        d = self._check(context)
        if d.fired:
            return PokeReturnValue(is_done=True, xcom_value=d.xcom_value())
        return False

    # -- deferrable -----------------------------------------------------------------------------

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        d = self._check(context)
        if d.fired:
            return d.xcom_value()
        self.defer(
            trigger=DeltaTableVersionTrigger(
                table_uri=self.table_uri,
                baseline=d.baseline,
                wait_for_table=self.wait_for_table,
                poll_interval=self.poke_interval,
                end_time=time.time() + self.timeout,
                max_operations=self.max_operations,
                storage_conn_id=self.storage_conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context, event: dict[str, Any] | None = None) -> dict:
        """Resume after the trigger: return the XCom, or fail/time out as the event says."""
        if not event:
            raise AirflowException(f"The Delta version trigger for {self.table_uri} returned no event")
        status = event.get("status")
        if status == "fired":
            self._forget_baseline(context)
            return {k: event[k] for k in ("version", "baseline", "operations")}
        if status == "timeout":
            raise AirflowSensorTimeout(event.get("message") or "Sensor has timed out")
        message = event.get("message") or f"Delta version trigger failed: {event!r}"
        if event.get("error_class"):
            message = f"{event['error_class']}: {message}"
        raise (AirflowException if event.get("retryable") else AirflowFailException)(message)
