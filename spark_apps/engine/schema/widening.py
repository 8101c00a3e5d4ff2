"""Type widening (the protocol's "Type Widening" section): which type changes are allowed, and the
``delta.typeChanges`` field metadata recording them.

Allowed (protocol table): byte -> short -> int -> long; float -> double; byte/short/int -> double;
date -> timestamp_ntz; decimal(p,s) -> decimal(p+k1, s+k2) with k1 >= k2 >= 0; byte/short/int ->
decimal(10+k1, k2) and long -> decimal(20+k1, k2) with k1 >= k2 >= 0.
"""

from __future__ import annotations

from .types import DecimalType, PrimitiveType

__all__ = ["is_widening", "TYPE_CHANGES_KEY"]

TYPE_CHANGES_KEY = "delta.typeChanges"

_INTS = ("byte", "short", "integer", "long")


def _name(t) -> str | None:
    return t.name if isinstance(t, PrimitiveType) else None


def is_widening(from_type, to_type) -> bool:
    """True when ``from_type`` -> ``to_type`` is a widening the protocol allows (not the same type)."""
    a, b = _name(from_type), _name(to_type)
    if a in _INTS and b in _INTS:
        return _INTS.index(a) < _INTS.index(b)
    if a == "float" and b == "double":
        return True
    if a in ("byte", "short", "integer") and b == "double":
        return True
    if a == "date" and b == "timestamp_ntz":
        return True
    if isinstance(to_type, DecimalType):
        if isinstance(from_type, DecimalType):
            k1, k2 = to_type.precision - from_type.precision, to_type.scale - from_type.scale
            return (k1, k2) != (0, 0) and k1 >= k2 >= 0
        if a in ("byte", "short", "integer", "long"):
            base = 20 if a == "long" else 10
            k1, k2 = to_type.precision - base, to_type.scale
            return k1 >= k2 >= 0
    return False
