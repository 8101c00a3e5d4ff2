"""The one decision shared by DeltaTableVersionSensor (poke) and DeltaTableVersionTrigger (async).

``decide(table_uri, baseline, wait_for_table=...)`` reads the table's ``_delta_log`` WITHOUT Spark
(one directory listing through the engine's log core, plus the commit files of the new versions)
and answers: has the table moved past ``baseline``?

Rules, in order:

1. No table (no ``_delta_log`` with a commit or checkpoint):
   * ``wait_for_table=False`` -> ``error`` (not retryable): the sensor fails at once.
   * ``wait_for_table=True``  -> not fired; the baseline becomes :data:`NO_TABLE` (``-1``) when none was
     given, so the first version that appears (0) fires.
2. ``baseline is None`` -> the baseline becomes the current version (the "first poke"); not fired.
   The caller stores it (the sensor in the task state store, the trigger in its own kwargs).
3. ``latest > baseline`` -> fired, with the operations of versions ``baseline+1 .. latest`` (the last
   ``max_operations`` of them) read from their commitInfo: ``{"version", "operation", "timestamp"}``.
   Versions whose commit file is gone (log cleanup) are skipped.
4. Otherwise not fired (also when ``latest < baseline``: a recreated table waits until it passes it).

Engine errors become ``error`` with the engine's ``retryable`` flag (storage I/O is retryable; a
corrupt log is not). This module imports no Airflow and no pyspark.

``watch_step(table_uri, watermark, ...)`` is the same check for a trigger that watches a table for
ever (an ``AssetWatcher``): the commits after ``watermark`` (at most ``limit`` versions per step),
each with its operation, timestamp, operationMetrics and the partitions it changed, filtered by
operation kind; the new watermark is the last version looked at, whether or not it passed the filter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_TABLE = -1
"""Baseline meaning "there was no table": any version (>= 0) is newer."""

MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "REORG"})
"""Commits that rewrite or delete files without changing the table's rows: a watcher skips them
unless asked (a downstream consumer must not process a compaction as new data)."""


@dataclass(frozen=True)
class Decision:
    """Outcome of one check.

    :param fired: the table has a version newer than the baseline.
    :param version: the latest version seen (``None``: no table).
    :param baseline: the baseline after resolution (store it when the caller passed ``None``).
    :param operations: ``{"version", "operation", "timestamp"}`` per new version, oldest first.
    :param error: one-line error (problem, cause, fix) when the check cannot go on.
    :param retryable: whether a retry may fix ``error``.
    """

    fired: bool
    version: int | None
    baseline: int | None
    operations: tuple = field(default_factory=tuple)
    error: str | None = None
    error_class: str | None = None
    retryable: bool = False

    def xcom_value(self) -> dict:
        """The sensor's XCom on firing: ``{"version", "baseline", "operations"}``."""
        return {"version": self.version, "baseline": self.baseline, "operations": list(self.operations)}


def _operations(storage, table_root: str, first: int, last: int, max_operations: int) -> tuple:
    from airflow_delta_provider_apps.protocol import read_commit_infos

    first = max(first, last - max_operations + 1, 0)
    infos = read_commit_infos(storage, table_root, range(first, last + 1))
    ops = []
    for v in range(first, last + 1):
        ci = infos.get(v)
        if ci is None:
            continue
        ops.append(
            {
                "version": v,
                "operation": ci.operation,
                "timestamp": ci.in_commit_timestamp or ci.timestamp,
            }
        )
    return tuple(ops)


def _with_storage(storage_conn_id: str | None):
    """The storage settings of ``storage_conn_id`` (its credentials for the log's reads), or none."""
    from airflow_delta_provider_apps.protocol import storage_settings

    env = {}
    if storage_conn_id:
        from airflow.sdk import BaseHook

        from airflow_delta_provider.storage_connections import storage_env

        env = storage_env(BaseHook, storage_conn_id)
    return storage_settings(env)


def _no_table(table_uri: str) -> str:
    return (
        f"No Delta table at '{table_uri}'. Cause: there is no _delta_log with a commit or "
        "checkpoint file. Fix: check the table URI, create the table first, or set "
        "wait_for_table=True to wait for it to appear."
    )


def _failure(table_uri: str, e: Exception) -> tuple[str, str, bool]:
    """``(message, error class, retryable)`` of a failed read of the log."""
    from airflow_delta_provider_apps.protocol import DeltaError

    if isinstance(e, DeltaError):
        return e.one_line(), type(e).__name__, e.retryable
    return (
        f"Cannot read the log of '{table_uri}'. Cause: {e}. Fix: check the storage and retry.",
        type(e).__name__,
        True,
    )


def decide(
    table_uri: str,
    baseline: int | None,
    *,
    wait_for_table: bool = False,
    max_operations: int = 100,
    storage_conn_id: str | None = None,
) -> Decision:
    """Check once whether ``table_uri`` has a version newer than ``baseline`` (see module rules),
    reading the log with ``storage_conn_id``'s credentials when given."""
    from airflow_delta_provider_apps.protocol import DeltaError

    with _with_storage(storage_conn_id):
        try:
            return _decide(table_uri, baseline, wait_for_table=wait_for_table, max_operations=max_operations)
        except (DeltaError, OSError) as e:
            error, error_class, retryable = _failure(table_uri, e)
            return Decision(False, None, baseline, error=error, error_class=error_class, retryable=retryable)


def _decide(table_uri: str, baseline: int | None, *, wait_for_table: bool, max_operations: int) -> Decision:
    from airflow_delta_provider_apps.protocol import latest_version, storage_for, table_location

    table_root = table_location(table_uri)
    storage = storage_for(table_root)
    latest = latest_version(storage, table_root)
    if latest is None:
        if wait_for_table:
            return Decision(False, None, NO_TABLE if baseline is None else baseline)
        return Decision(
            False, None, baseline, error=_no_table(table_uri), error_class="TableNotFoundError", retryable=False
        )
    if baseline is None:
        return Decision(False, latest, latest)
    if latest > baseline:
        ops = _operations(storage, table_root, baseline + 1, latest, max_operations)
        return Decision(True, latest, baseline, ops)
    return Decision(False, latest, baseline)


@dataclass(frozen=True)
class WatchStep:
    """One look at a watched table.

    :param version: the latest version (``None``: no table yet).
    :param watermark: the last version looked at (store it; the next step starts after it).
    :param commits: the new commits that passed the filters, oldest first: ``{"version", "operation",
        "timestamp", "metrics", "partition_keys"}``, and ``schema_changes`` / ``reader_warnings`` when
        the commit has some.
    :param error: one-line error (problem, cause, fix) when the log cannot be read.
    """

    version: int | None
    watermark: int | None
    commits: tuple = ()
    error: str | None = None
    error_class: str | None = None
    retryable: bool = False


def watch_step(
    table_uri: str,
    watermark: int | None,
    *,
    operations: frozenset[str] | None = None,
    include_maintenance: bool = False,
    limit: int = 100,
    storage_conn_id: str | None = None,
) -> WatchStep:
    """The commits of ``table_uri`` after ``watermark`` (``None``: none yet, the watermark becomes the
    latest version; :data:`NO_TABLE`: every version), at most ``limit`` versions per step, keeping
    those whose operation is in ``operations`` (all when ``None``) and, unless ``include_maintenance``,
    not in :data:`MAINTENANCE_OPERATIONS`. A missing table is waited for; versions whose commit file
    log cleanup removed are passed over."""
    from airflow_delta_provider_apps.protocol import (
        DeltaError,
        commit_changes,
        commit_partition_keys,
        latest_version,
        numbers,
        read_commit_infos,
        storage_for,
        table_location,
    )

    with _with_storage(storage_conn_id):
        try:
            table_root = table_location(table_uri)
            storage = storage_for(table_root)
            latest = latest_version(storage, table_root)
            if latest is None:
                return WatchStep(None, NO_TABLE if watermark is None else watermark)
            if watermark is None:
                return WatchStep(latest, latest)
            if latest <= watermark:  # also a table recreated behind the watermark: wait until it passes it
                return WatchStep(latest, watermark)
            last = min(latest, watermark + limit)
            infos = read_commit_infos(storage, table_root, range(watermark + 1, last + 1))
            commits = []
            for v in range(watermark + 1, last + 1):
                ci = infos.get(v)
                if ci is None or (operations is not None and ci.operation not in operations):
                    continue
                if not include_maintenance and ci.operation in MAINTENANCE_OPERATIONS:
                    continue
                commits.append(
                    {
                        "version": v,
                        "operation": ci.operation,
                        "timestamp": ci.in_commit_timestamp or ci.timestamp,
                        "metrics": numbers(ci.get("operationMetrics") or {}),
                        "partition_keys": commit_partition_keys(table_uri, v) or [],
                        # the columns it added or changed, the features it turned on that readers refuse
                        **commit_changes(table_uri, v),
                    }
                )
            return WatchStep(latest, last, tuple(commits))
        except (DeltaError, OSError) as e:
            error, error_class, retryable = _failure(table_uri, e)
            return WatchStep(None, watermark, error=error, error_class=error_class, retryable=retryable)
