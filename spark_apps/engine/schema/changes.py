"""What a commit did to a table's schema, for people and programs downstream (the task log, XCom,
the asset event): the columns added, widened, otherwise retyped, renamed and dropped.

:func:`schema_changes` compares the schema before a commit with the one after it. Columns are matched
by their column-mapping id where both schemas carry one (a rename keeps the id), else by name
(case-insensitively, as Delta resolves columns). Nested fields are named by their dotted path
(``address.city``; the parts of arrays and maps as ``element``, ``key``, ``value``, as
:func:`.types.walk` names them). Each change is one dict::

    {"change": "added", "column": "channel", "type": "string"}
    {"change": "widened", "column": "quantity", "from": "integer", "to": "long"}
    {"change": "retyped", "column": "amount", "from": "string", "to": "double"}   # overwrite_schema
    {"change": "renamed", "column": "customer", "from": "cust"}
    {"change": "dropped", "column": "legacy", "type": "string"}

Types are Delta's JSON names (``integer``, ``long``, ``decimal(12,2)``); a nested type is spelled as
Spark's ``simpleString`` (``struct<city:string>``).
"""

from __future__ import annotations

from .types import ArrayType, MapType, StructType
from .widening import is_widening

__all__ = ["schema_changes", "type_name"]


def type_name(t) -> str:
    """Delta's JSON name of a type; Spark's ``simpleString`` for a nested one."""
    j = t.to_json()
    return j if isinstance(j, str) else t.simple_string()


def schema_changes(old: StructType | None, new: StructType | None) -> list[dict]:
    """The changes from ``old`` to ``new`` (see the module docstring), in the new schema's order
    (dropped columns last); empty when either is None (a new table) or nothing changed."""
    if old is None or new is None or old == new:
        return []
    out: list[dict] = []
    _structs(old, new, "", out)
    return out


def _structs(old: StructType, new: StructType, prefix: str, out: list[dict]) -> None:
    ids = all(f.field_id is not None for f in (*old.fields, *new.fields))
    key = (lambda f: f.field_id) if ids else (lambda f: f.name.lower())
    before = {key(f): f for f in old.fields}
    matched = set()
    for f in new.fields:
        was = before.get(key(f))
        path = prefix + f.name
        if was is None:
            out.append({"change": "added", "column": path, "type": type_name(f.type)})
            continue
        matched.add(key(f))
        if was.name != f.name:
            out.append({"change": "renamed", "column": path, "from": prefix + was.name})
        _types(was.type, f.type, path, out)
    for k, f in before.items():
        if k not in matched:
            out.append({"change": "dropped", "column": prefix + f.name, "type": type_name(f.type)})


def _types(old, new, path: str, out: list[dict]) -> None:
    if isinstance(old, StructType) and isinstance(new, StructType):
        _structs(old, new, path + ".", out)
    elif isinstance(old, ArrayType) and isinstance(new, ArrayType):
        _types(old.element_type, new.element_type, path + ".element", out)
    elif isinstance(old, MapType) and isinstance(new, MapType):
        _types(old.key_type, new.key_type, path + ".key", out)
        _types(old.value_type, new.value_type, path + ".value", out)
    elif old.to_json() != new.to_json():
        change = "widened" if is_widening(old, new) else "retyped"
        out.append({"change": change, "column": path, "from": type_name(old), "to": type_name(new)})
