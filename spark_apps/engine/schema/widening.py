"""Type widening (the protocol's "Type Widening" section): which type changes are allowed, and the
``delta.typeChanges`` field metadata recording them.

Allowed (protocol table): byte -> short -> int -> long; float -> double; byte/short/int -> double;
date -> timestamp_ntz; decimal(p,s) -> decimal(p+k1, s+k2) with k1 >= k2 >= 0; byte/short/int ->
decimal(10+k1, k2) and long -> decimal(20+k1, k2) with k1 >= k2 >= 0.
"""

from __future__ import annotations

from .types import DecimalType, PrimitiveType

__all__ = ["is_widening", "TYPE_CHANGES_KEY", "widenable", "widened", "widened_to", "widens_number"]

TYPE_CHANGES_KEY = "delta.typeChanges"

_INTS = ("byte", "short", "integer", "long")


def _name(t) -> str | None:
    return t.name if isinstance(t, PrimitiveType) else None


def widens_number(a: str | None, b: str | None) -> bool:
    """True when primitive type ``a`` -> ``b`` (names) widens a number without loss: to a wider
    integer, float -> double, byte/short/integer -> double (exact); also Spark's store assignment."""
    if a in _INTS and b in _INTS:
        return _INTS.index(a) < _INTS.index(b)
    return (a == "float" or a in ("byte", "short", "integer")) and b == "double"


def is_widening(from_type, to_type) -> bool:
    """True when ``from_type`` -> ``to_type`` is a widening the protocol allows (not the same type)."""
    a, b = _name(from_type), _name(to_type)
    if widens_number(a, b):
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


def widenable(schema, enabled: bool, partition_columns, merge_schema: bool) -> frozenset:
    """The (lower-case) names of the top-level columns a write's data may widen (with the fields
    nested in their structs: :func:`widened_to`): with ``merge_schema`` on a table whose
    ``delta.enableTypeWidening`` is true (``enabled``), every top-level column that is not a
    partition column (their values live in the log as strings)."""
    if not merge_schema or not enabled:
        return frozenset()
    parts = {c.lower() for c in partition_columns or ()}
    return frozenset(f.name.lower() for f in schema.fields if f.name.lower() not in parts)


def widened(field, to_type):
    """``field`` in ``to_type``, its ``delta.typeChanges`` metadata recording the change."""
    import dataclasses

    changes = [
        *(field.metadata or {}).get(TYPE_CHANGES_KEY, []),
        {"fromType": field.type.to_json(), "toType": to_type.to_json()},
    ]
    return dataclasses.replace(field, type=to_type, metadata={**(field.metadata or {}), TYPE_CHANGES_KEY: changes})


def widened_to(field, data_type):
    """``field`` widened as data of ``data_type`` needs: to ``data_type`` itself when that is a widening
    of its type, or, inside it, each nested struct field alike (the change recorded on the field it
    changed), and arrays' elements and maps' keys and values (recorded on the nearest enclosing field,
    with the protocol's ``fieldPath``: ``element``, ``key``, ``value``, ``value.element``...); None when
    nothing widens."""
    import dataclasses

    new_type, changes = _widened_type(field.type, data_type, "")
    if new_type is None:
        return None
    metadata = field.metadata or {}
    if changes:
        metadata = {**metadata, TYPE_CHANGES_KEY: [*metadata.get(TYPE_CHANGES_KEY, []), *changes]}
    return dataclasses.replace(field, type=new_type, metadata=metadata)


def _widened_type(table_type, data_type, path: str):
    """``(the widened type or None, the changes to record on the enclosing field)`` (see :func:`widened_to`);
    ``path``: the ``fieldPath`` of ``table_type`` below that field ("" for the field's own type)."""
    from .types import ArrayType, MapType, StructType

    if is_widening(table_type, data_type):
        change = {"fromType": table_type.to_json(), "toType": data_type.to_json()}
        return data_type, [{**change, "fieldPath": path} if path else change]
    if isinstance(table_type, StructType) and isinstance(data_type, StructType):
        out, changed = [], False
        for f in table_type.fields:
            d = data_type.find(f.name)
            w = widened_to(f, d.type) if d is not None else None
            out.append(w or f)
            changed = changed or w is not None
        return (StructType(tuple(out)) if changed else None), []
    if isinstance(table_type, ArrayType) and isinstance(data_type, ArrayType):
        at = f"{path}.element" if path else "element"
        element, changes = _widened_type(table_type.element_type, data_type.element_type, at)
        return (None if element is None else ArrayType(element, table_type.contains_null)), changes
    if isinstance(table_type, MapType) and isinstance(data_type, MapType):
        parts = []
        for part, t, d in (
            ("key", table_type.key_type, data_type.key_type),
            ("value", table_type.value_type, data_type.value_type),
        ):
            parts.append(_widened_type(t, d, f"{path}.{part}" if path else part))
        (key, key_changes), (value, value_changes) = parts
        if key is None and value is None:
            return None, []
        new = MapType(key or table_type.key_type, value or table_type.value_type, table_type.value_contains_null)
        return new, key_changes + value_changes
    return None, []
