"""The one parser of each scalar value a caller hands the engine (table versions).

The engine API, the CLI, the Airflow hook and the operators (through
:func:`airflow_delta_provider_apps.operations.coerce`) all parse these values here, so ``2.7``,
``True`` or ``-1`` get the same refusal wherever they enter. Nothing is rounded or truncated: a value
that is not exactly what the parameter means is refused with an :class:`InvalidArgumentError`.

Standard library only: the operations registry calls it when it coerces an operator's arguments.
"""

from __future__ import annotations

import operator
import re

from .errors import InvalidArgumentError

__all__ = ["parse_version", "MAX_VERSION"]

#: Delta versions are Java longs
MAX_VERSION = 2**63 - 1

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
