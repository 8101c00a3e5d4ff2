"""Column mapping, written (Delta's ``columnMapping`` feature, modes ``name`` and ``id``).

A table with ``delta.columnMapping.mode`` ``name`` or ``id`` gives every column (nested struct
fields included) a ``delta.columnMapping.id`` and a ``delta.columnMapping.physicalName`` in its
schema metadata, and the table the highest id given, ``delta.columnMapping.maxColumnId``. Data files
hold the physical names (and the ids as parquet field ids); stats and ``partitionValues`` are keyed
by them. A column's display name is metadata: renaming or dropping a column changes only the schema
(:func:`renamed`, :func:`dropped`), never a file.

* :func:`assign` gives the columns that have none an id and a physical name (a new table, and the
  new columns of a schema evolution), advancing ``maxColumnId``;
* :func:`physical_schema` / :func:`to_physical` are the writer's: the Arrow schema of the files, and
  a batch in the table's names turned into it.
"""

from __future__ import annotations

import uuid

import pyarrow as pa

from .config import COLUMN_MAPPING_MODE, TableProperties
from .errors import InvalidArgumentError

__all__ = [
    "MAX_ID_KEY",
    "ID_KEY",
    "PHYSICAL_KEY",
    "mode_of",
    "assign",
    "physical_schema",
    "to_physical",
    "renamed",
    "dropped",
]

ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
MAX_ID_KEY = "delta.columnMapping.maxColumnId"


def mode_of(configuration) -> str:
    """The table's column mapping mode ("none", "name" or "id")."""
    return TableProperties.of(configuration).column_mapping_mode


def assign(schema, configuration: dict, *, keep_names: bool = False):
    """``(schema, configuration)`` with an id and a physical name on every column that lacks them
    (when the table maps columns), ``maxColumnId`` advanced; unchanged otherwise. New physical names
    are ``col-<uuid>``; ``keep_names`` (an existing table that starts mapping its columns) keeps each
    column's current name as its physical name, which its files already use."""
    from .schema import StructField, StructType

    if mode_of(configuration) == "none":
        return schema, configuration
    top = int(configuration.get(MAX_ID_KEY) or 0)

    def highest(t) -> int:
        from .schema import ArrayType, MapType

        if isinstance(t, ArrayType):
            return highest(t.element_type)
        if isinstance(t, MapType):
            return max(highest(t.key_type), highest(t.value_type))
        if not isinstance(t, StructType):
            return 0
        best = 0
        for f in t.fields:
            best = max(best, int(f.metadata.get(ID_KEY) or 0), highest(f.type))
        return best

    top = max(top, highest(schema))

    def nested(t):  # structs inside arrays and maps carry ids and physical names too
        from .schema import ArrayType, MapType

        if isinstance(t, StructType):
            return walk(t)
        if isinstance(t, ArrayType):
            return ArrayType(nested(t.element_type), t.contains_null)
        if isinstance(t, MapType):
            return MapType(nested(t.key_type), nested(t.value_type), t.value_contains_null)
        return t

    def walk(st):
        nonlocal top
        out = []
        for f in st.fields:
            t = nested(f.type)
            md = dict(f.metadata or {})
            if ID_KEY not in md:
                top += 1
                md[ID_KEY] = top
            md.setdefault(PHYSICAL_KEY, f.name if keep_names else f"col-{uuid.uuid4()}")
            out.append(StructField(f.name, t, f.nullable, md))
        return StructType(tuple(out))

    new = walk(schema)
    return new, {**configuration, MAX_ID_KEY: str(top)}


def _physical_type(t, with_ids: bool) -> pa.DataType:
    from .schema import ArrayType, MapType, StructType

    if isinstance(t, StructType):
        return pa.struct([_physical_field(f, with_ids) for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", _physical_type(t.element_type, with_ids), t.contains_null))
    if isinstance(t, MapType):
        return pa.map_(
            pa.field("key", _physical_type(t.key_type, with_ids), nullable=False),
            pa.field("value", _physical_type(t.value_type, with_ids), nullable=t.value_contains_null),
        )
    return t.to_arrow()


def _physical_field(f, with_ids: bool) -> pa.Field:
    md = {b"PARQUET:field_id": str(f.field_id).encode()} if with_ids and f.field_id is not None else None
    return pa.field(f.physical_name, _physical_type(f.type, with_ids), nullable=f.nullable, metadata=md)


def physical_schema(schema, mode: str) -> pa.Schema:
    """The Arrow schema of a mapped table's data files: physical names (and, in ``id`` mode and as
    delta-spark writes in both modes, the column ids as parquet field ids)."""
    return pa.schema([_physical_field(f, True) for f in schema.fields])


def _to_physical(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` (logical field names) with ``t``'s (physical) names, at every nesting level (structs
    inside lists and maps included: a cast would match their fields by name and lose them)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [_to_physical(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pa.types.is_map(t) or pa.types.is_list(t):
        # offsets copied: a slice's offsets cannot carry a null bitmap
        offsets = pa.array(arr.offsets.to_numpy(zero_copy_only=False), pa.int32())
        if pa.types.is_map(t):
            keys, items = _to_physical(arr.keys, t.key_type), _to_physical(arr.items, t.item_type)
            return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=mask)
        return pa.ListArray.from_arrays(offsets, _to_physical(arr.values, t.value_type), type=t, mask=mask)
    return arr.cast(t) if arr.type != t else arr


def to_physical(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch in the table's columns (logical names, table order) in the files' physical ``schema``."""
    arrays = [_to_physical(batch.column(i), schema.field(i).type) for i in range(batch.num_columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# ---------------------------------------------------------------------------------------------
# metadata-only schema changes


def _require_mapping(metadata, what: str) -> None:
    if mode_of(metadata) == "none":
        raise InvalidArgumentError(
            f"Cannot {what} of table without column mapping",
            "without it the files name their columns, so the change would rewrite every file",
            f"set {COLUMN_MAPPING_MODE}=name first (set_properties), then {what}",
        )


def _refuse_used(metadata, name: str, what: str) -> None:
    """Refuse to rename or drop a column a CHECK constraint or a generated column's expression
    names (its text would name a column that is gone), as Delta does."""
    from .constraints import rules_for

    rules = rules_for(metadata.schema_string, metadata.configuration)
    low = name.lower()
    users = [c.name for c in rules.checks if any(x.split(".")[0].lower() == low for x in c.columns)]
    users += [
        f"generated column {g.column}"
        for g in rules.generated
        if any(x.split(".")[0].lower() == low for x in g.columns)
    ]
    if users:
        raise InvalidArgumentError(
            f"Cannot {what} '{name}'",
            f"{', '.join(users)} use(s) it",
            "drop those constraints (or recreate the generated column) first",
        )


def renamed(metadata, column: str, new_name: str):
    """``(schema, partition_columns)`` with top-level ``column`` called ``new_name`` (its physical
    name, its data, its stats and its partition values stay)."""
    from .schema import StructField, StructType, parse_schema

    _require_mapping(metadata, "rename a column")
    schema = parse_schema(metadata.schema_string)
    f = schema.find(column)
    if f is None:
        raise InvalidArgumentError(f"No column '{column}' to rename", f"the table has {schema.names}", "check the name")
    new_name = str(new_name or "").strip()
    other = schema.find(new_name)
    _refuse_used(metadata, f.name, "rename column")
    if not new_name or (other is not None and other.name != f.name):
        raise InvalidArgumentError(
            f"Cannot rename '{f.name}' to '{new_name}'",
            "the name is empty or another column has it",
            "choose a new, unused name",
        )
    fields = tuple(StructField(new_name, x.type, x.nullable, x.metadata) if x is f else x for x in schema.fields)
    parts = [new_name if p.lower() == f.name.lower() else p for p in (metadata.partition_columns or [])]
    return StructType(fields).validate(), parts


def dropped(metadata, column: str):
    """The schema without top-level ``column`` (its data stays in the files, never read again)."""
    from .schema import StructType, parse_schema

    _require_mapping(metadata, "drop a column")
    schema = parse_schema(metadata.schema_string)
    f = schema.find(column)
    if f is None:
        raise InvalidArgumentError(f"No column '{column}' to drop", f"the table has {schema.names}", "check the name")
    if f.name.lower() in {p.lower() for p in metadata.partition_columns or []}:
        raise InvalidArgumentError(
            f"Cannot drop partition column '{f.name}'", "the table's files are laid out by it", "recreate the table"
        )
    if len(schema.fields) == 1:
        raise InvalidArgumentError(f"Cannot drop '{f.name}'", "it is the table's only column", "add another first")
    _refuse_used(metadata, f.name, "drop column")
    return StructType(tuple(x for x in schema.fields if x is not f)).validate()
