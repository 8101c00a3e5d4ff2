"""The one parser of each scalar value a caller hands the engine: table versions and retentions.

The engine API, the CLI, the Airflow hook and the operators (through
:func:`airflow_delta_provider_apps.operations.coerce`) all parse these values here, so ``2.7``,
``True``, ``-1`` or ``inf`` get the same refusal wherever they enter. Nothing is rounded or
truncated: a value that is not exactly what the parameter means is refused with an
:class:`InvalidArgumentError`.

Standard library only: the operations registry calls it when it coerces an operator's arguments.
"""

from __future__ import annotations

import datetime as _dt
import math
import operator
import re

from .errors import InvalidArgumentError

__all__ = ["parse_version", "parse_retention_hours", "MAX_VERSION", "MAX_RETENTION_HOURS", "MAX_DURATION_MS"]

#: Delta versions are Java longs
MAX_VERSION = 2**63 - 1
#: The longest retention (VACUUM's ``retention_hours``, the ``delta.*Duration`` table properties): 100
#: years. ``now - retention`` then stays a representable time in every unit the engine and its
#: libraries use (int64 milliseconds, microseconds and nanoseconds, ``datetime``/``timedelta``).
MAX_RETENTION_HOURS = 100 * 365.25 * 24
MAX_DURATION_MS = int(MAX_RETENTION_HOURS * 3_600_000)

_DIGITS = re.compile(r"[0-9]+")


def parse_version(value, name: str = "version") -> int:
    """A table version: an int (or a string of digits) from 0 up; never rounded or truncated.

    ``3`` and ``"3"`` give 3; ``2.7``, ``2.0``, ``True``, ``-1``, ``"abc"``, ``"3.0"`` are refused.

    :param name: the parameter's name, for the message
    :raises InvalidArgumentError: anything else
    """
    fix = f"pass {name} as a whole number from 0 up, e.g. 3 or '3'"
    if isinstance(value, bool):
        cause = "a boolean is not a version number"
    elif isinstance(value, float):
        cause = "a float is not a version number (it is never rounded or truncated)"
    elif isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            return _bounded(int(text), value, name, fix)
        cause = "the text is not a whole number" if not text.startswith("-") else "versions start at 0"
    else:
        try:
            number = operator.index(value)  # ints and integer types such as numpy's; not floats or Decimal
        except TypeError:
            cause = f"a {type(value).__name__} is not a version number"
        else:
            return _bounded(number, value, name, fix)
    raise InvalidArgumentError(f"{name}={value!r} is not a table version", cause, fix)


def _bounded(number: int, value, name: str, fix: str) -> int:
    if number < 0:
        raise InvalidArgumentError(f"{name}={value!r} is not a table version", "versions start at 0", fix)
    if number > MAX_VERSION:
        raise InvalidArgumentError(
            f"{name}={value!r} is not a table version", "a Delta version is at most 2^63-1 (a Java long)", fix
        )
    return number


def parse_retention_hours(value, name: str = "retention_hours") -> float:
    """A retention in hours: a finite number from 0 up to :data:`MAX_RETENTION_HOURS` (100 years).

    ints, floats and their text (``168``, ``"0.5"``) are taken; ``True``, ``nan``, ``inf``, negative
    numbers and anything longer than 100 years are refused (longer ones overflowed the time arithmetic).

    :param name: the parameter's name, for the message
    :raises InvalidArgumentError: anything else
    """
    fix = f"pass {name} as a number of hours from 0 to {MAX_RETENTION_HOURS:.0f} (100 years), e.g. 168"
    if isinstance(value, bool):
        cause = "a boolean is not a number of hours"
    else:
        try:
            hours = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError, OverflowError):
            cause = "it is not a number"
        else:
            if math.isnan(hours):
                cause = "it is not a number (NaN)"
            elif hours < 0:
                cause = "a retention cannot be negative"
            elif hours > MAX_RETENTION_HOURS:
                cause = "a retention longer than 100 years is refused (it overflows the engine's time arithmetic)"
            else:
                return hours
    raise InvalidArgumentError(f"{name}={value!r} is not a retention", cause, fix)


def parse_timestamp_ms(value) -> int:
    """Epoch milliseconds of a time-travel timestamp.

    Accepts an int/float (epoch ms), a ``datetime`` (naive = UTC), a ``date`` (midnight UTC), or
    a string: digits (epoch ms) or ISO-8601 / Spark style (``2024-01-31``, ``2024-01-31 12:00:00``,
    ``2024-01-31T12:00:00.123Z``, ``...+02:00``); a string without a zone is UTC.

    :raises InvalidArgumentError: anything else
    """
    if isinstance(value, bool):
        raise InvalidArgumentError(f"Cannot use {value!r} as a timestamp", None, "pass epoch ms or an ISO timestamp")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):  # int() of nan/inf raised a bare error
            raise InvalidArgumentError(
                f"Cannot use {value!r} as a timestamp", "it is not a finite number", "pass epoch ms or an ISO timestamp"
            )
        return int(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, _dt.date):
        return int(_dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC).timestamp() * 1000)
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdigit():
            return int(s)
        t = s.replace(" ", "T", 1)
        if t.endswith("Z") or t.endswith("z"):
            t = t[:-1] + "+00:00"
        try:
            parsed = _dt.datetime.fromisoformat(t)
        except ValueError:
            parsed = None
        if parsed is not None:
            return parse_timestamp_ms(parsed)
    raise InvalidArgumentError(
        f"Cannot parse timestamp {value!r}",
        "expected epoch milliseconds or an ISO-8601 timestamp",
        "pass e.g. '2024-01-31 12:00:00' (UTC), '2024-01-31T12:00:00+02:00' or 1706702400000",
    )
