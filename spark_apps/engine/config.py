"""Table properties (``metaData.configuration``) the engine acts on, with Delta's names and defaults.

Rules:

* Every accessor takes a :class:`~airflow_delta_provider_apps.engine.actions.Metadata` (or ``None``, or a plain
  configuration dict) and returns a typed value; an absent property gives the reference
  implementation's default (``DeltaConfigs.scala``), a malformed one raises
  :class:`~airflow_delta_provider_apps.engine.errors.InvalidArgumentError` naming the property.
* Durations are Spark ``CalendarInterval`` strings: ``"interval 7 days"``, ``"30 days"``,
  ``"interval 1 week 2 hours"``. Months and years are refused (their length in ms is not fixed,
  Delta refuses them too). :func:`parse_interval_ms` returns milliseconds.

Properties: ``delta.checkpointInterval`` (10), ``delta.logRetentionDuration`` (30 days),
``delta.enableExpiredLogCleanup`` (true), ``delta.deletedFileRetentionDuration`` (1 week),
``delta.setTransactionRetentionDuration`` (unset = txns never expire), ``delta.isolationLevel``
(unset), ``delta.appendOnly`` (false), ``delta.checkpoint.writeStatsAsJson`` (true),
``delta.checkpoint.writeStatsAsStruct`` (false here: the spec's default; delta-spark defaults
to true - set it on the table to get ``stats_parsed``/``partitionValues_parsed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgumentError

MS_PER_SECOND = 1000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
MS_PER_WEEK = 7 * MS_PER_DAY

_UNITS_MS: dict[str, float] = {
    "week": MS_PER_WEEK,
    "weeks": MS_PER_WEEK,
    "w": MS_PER_WEEK,
    "day": MS_PER_DAY,
    "days": MS_PER_DAY,
    "d": MS_PER_DAY,
    "hour": MS_PER_HOUR,
    "hours": MS_PER_HOUR,
    "h": MS_PER_HOUR,
    "minute": MS_PER_MINUTE,
    "minutes": MS_PER_MINUTE,
    "min": MS_PER_MINUTE,
    "mins": MS_PER_MINUTE,
    "second": MS_PER_SECOND,
    "seconds": MS_PER_SECOND,
    "sec": MS_PER_SECOND,
    "secs": MS_PER_SECOND,
    "s": MS_PER_SECOND,
    "millisecond": 1,
    "milliseconds": 1,
    "ms": 1,
    "microsecond": 0.001,
    "microseconds": 0.001,
    "us": 0.001,
}
_PAIR = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)")

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
LOG_RETENTION = "delta.logRetentionDuration"
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
ISOLATION_LEVEL = "delta.isolationLevel"
APPEND_ONLY = "delta.appendOnly"
WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_LOG_RETENTION_MS = 30 * MS_PER_DAY
DEFAULT_DELETED_FILE_RETENTION_MS = MS_PER_WEEK


def parse_interval_ms(text: str, *, name: str = "interval") -> int:
    """Milliseconds of a Spark interval string (``"interval 7 days"``, ``"1 week"``, ``"2 hours 30 minutes"``).

    :param text: the interval string
    :param name: the property name, for the error message
    :raises InvalidArgumentError: empty, unknown unit, months/years, or trailing garbage
    """
    s = str(text).strip().lower()
    if s.startswith("interval"):
        s = s[len("interval") :].strip()
    pairs = list(_PAIR.finditer(s))
    rest = _PAIR.sub("", s).strip()
    bad = None
    if not pairs or rest:
        bad = "it is not a list of '<number> <unit>' pairs"
    else:
        for m in pairs:
            unit = m.group(2)
            if unit in ("month", "months", "year", "years", "mon", "mons"):
                bad = f"months and years have no fixed length (found '{m.group(0)}')"
                break
            if unit not in _UNITS_MS:
                bad = f"unknown unit '{unit}'"
                break
    if bad:
        raise InvalidArgumentError(
            f"Cannot parse {name} value '{text}'",
            bad,
            "write it like 'interval 7 days' or 'interval 1 week 12 hours' (units: weeks, days, hours, "
            "minutes, seconds, milliseconds)",
        )
    total = sum(float(m.group(1)) * _UNITS_MS[m.group(2)] for m in pairs)
    return int(total)


def _conf(metadata: Any) -> Mapping[str, str]:
    if metadata is None:
        return {}
    if isinstance(metadata, Mapping):
        return metadata
    return getattr(metadata, "configuration", None) or {}


def _get(metadata: Any, key: str) -> str | None:
    conf = _conf(metadata)
    v = conf.get(key)
    if v is None:  # property keys are case-insensitive in delta-spark
        low = key.lower()
        for k, val in conf.items():
            if k.lower() == low:
                return None if val is None else str(val)
    return None if v is None else str(v)


def _bool(metadata: Any, key: str, default: bool) -> bool:
    v = _get(metadata, key)
    if v is None:
        return default
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise InvalidArgumentError(f"Table property {key}='{v}' is not a boolean", None, f"set {key} to 'true' or 'false'")


def _duration(metadata: Any, key: str, default: int | None) -> int | None:
    v = _get(metadata, key)
    if v is None:
        return default
    return parse_interval_ms(v, name=key)


def checkpoint_interval(metadata: Any) -> int:
    """``delta.checkpointInterval``: write a checkpoint every N commits (default 10)."""
    v = _get(metadata, CHECKPOINT_INTERVAL)
    if v is None:
        return DEFAULT_CHECKPOINT_INTERVAL
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n <= 0:
        raise InvalidArgumentError(
            f"Table property {CHECKPOINT_INTERVAL}='{v}' is not a positive integer",
            None,
            f"set {CHECKPOINT_INTERVAL} to a positive integer such as 10",
        )
    return n


def log_retention_ms(metadata: Any) -> int:
    """``delta.logRetentionDuration`` in ms (default 30 days)."""
    return _duration(metadata, LOG_RETENTION, DEFAULT_LOG_RETENTION_MS)  # type: ignore[return-value]


def enable_expired_log_cleanup(metadata: Any) -> bool:
    """``delta.enableExpiredLogCleanup`` (default true)."""
    return _bool(metadata, ENABLE_EXPIRED_LOG_CLEANUP, True)


def deleted_file_retention_ms(metadata: Any) -> int:
    """``delta.deletedFileRetentionDuration`` in ms (default 1 week): tombstone expiry."""
    return _duration(metadata, DELETED_FILE_RETENTION, DEFAULT_DELETED_FILE_RETENTION_MS)  # type: ignore[return-value]


def set_transaction_retention_ms(metadata: Any) -> int | None:
    """``delta.setTransactionRetentionDuration`` in ms, or ``None`` (txns never expire)."""
    return _duration(metadata, SET_TRANSACTION_RETENTION, None)


def isolation_level_name(metadata: Any) -> str | None:
    """Raw ``delta.isolationLevel`` value (validated by :mod:`airflow_delta_provider_apps.engine.txn.isolation`)."""
    return _get(metadata, ISOLATION_LEVEL)


def append_only(metadata: Any) -> bool:
    """``delta.appendOnly`` (default false)."""
    return _bool(metadata, APPEND_ONLY, False)


def write_stats_as_json(metadata: Any) -> bool:
    """``delta.checkpoint.writeStatsAsJson`` (default true)."""
    return _bool(metadata, WRITE_STATS_AS_JSON, True)


def write_stats_as_struct(metadata: Any) -> bool:
    """``delta.checkpoint.writeStatsAsStruct`` (default false, the spec's default)."""
    return _bool(metadata, WRITE_STATS_AS_STRUCT, False)


def in_commit_timestamps_enabled(metadata: Any) -> bool:
    """``delta.enableInCommitTimestamps`` (default false)."""
    return _bool(metadata, ENABLE_IN_COMMIT_TIMESTAMPS, False)
