"""The Delta schema model: types, their JSON form (Spark's ``DataType.json``) and their Arrow form.

A schema is a ``StructType``; column metadata is kept verbatim (column mapping ids, comments,
invariants), so ``StructType.from_json(d).to_json() == d`` for every valid Delta schema. Validation
(:meth:`StructType.validate`): names non-empty and unique case-insensitively within each struct;
decimal precision 1..38 and 0 <= scale <= precision. Arrow mapping: timestamp ->
``timestamp[us, tz=UTC]``, timestamp_ntz -> ``timestamp[us]``, date -> date32, decimal ->
decimal128(p, s), integers -> int8/16/32/64, float/double -> float32/64, string -> utf8, void -> null,
variant -> ``struct<value, metadata>`` (Spark's Arrow form, ``metadata`` tagged ``variant: true``;
:mod:`..variant`), arrays and maps with Spark's Arrow field names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import InvalidSchemaError

MAX_DECIMAL_PRECISION = 38
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"
#: a column's DEFAULT, Spark SQL text (PROTOCOL.md "Default Columns"; evaluated by engine.defaults)
DEFAULT_KEY = "CURRENT_DEFAULT"


# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------


class _TypeBase:
    """Common helpers of every Delta data type."""

    def to_json(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_arrow(self) -> pa.DataType:  # pragma: no cover - overridden
        raise NotImplementedError

    def simple_string(self, names: dict | None = None) -> str:
        """Spark's ``simpleString`` (used in messages): ``int``, ``array<string>``, ...; ``names``
        replaces Spark's spelling of primitive types (see :data:`SIMPLE_NAMES`)."""
        return _simple_string(self, SIMPLE_NAMES if names is None else names)


@dataclass(frozen=True)
class PrimitiveType(_TypeBase):
    """A non-nested, non-decimal type, identified by its Delta JSON name (``"long"``, ...)."""

    name: str

    def __post_init__(self):
        if self.name not in PRIMITIVE_NAMES:
            raise InvalidSchemaError(
                f"Unknown data type '{self.name}'",
                "Delta knows " + ", ".join(sorted(PRIMITIVE_NAMES)) + ", decimal(p,s), array, map and struct",
                "use one of the Delta data types",
            )

    def to_json(self) -> str:
        return self.name

    def to_arrow(self) -> pa.DataType:
        return _PRIMITIVE_TO_ARROW[self.name]()

    def __repr__(self) -> str:
        return f"PrimitiveType({self.name!r})"


@dataclass(frozen=True)
class DecimalType(_TypeBase):
    precision: int = 10
    scale: int = 0

    def __post_init__(self):
        if not (1 <= self.precision <= MAX_DECIMAL_PRECISION) or not (0 <= self.scale <= self.precision):
            raise InvalidSchemaError(
                f"Invalid decimal type decimal({self.precision},{self.scale})",
                f"precision must be 1..{MAX_DECIMAL_PRECISION} and scale 0..precision",
                f"use a precision of at most {MAX_DECIMAL_PRECISION} and a scale no larger than the precision",
            )

    @property
    def name(self) -> str:
        return f"decimal({self.precision},{self.scale})"

    def to_json(self) -> str:
        return self.name

    def to_arrow(self) -> pa.DataType:
        return pa.decimal128(self.precision, self.scale)


@dataclass(frozen=True)
class ArrayType(_TypeBase):
    element_type: DataType
    contains_null: bool = True

    name = "array"

    def to_json(self) -> dict:
        return {"type": "array", "elementType": self.element_type.to_json(), "containsNull": self.contains_null}

    def to_arrow(self) -> pa.DataType:
        return pa.list_(pa.field("element", self.element_type.to_arrow(), nullable=self.contains_null))


@dataclass(frozen=True)
class MapType(_TypeBase):
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    name = "map"

    def to_json(self) -> dict:
        return {
            "type": "map",
            "keyType": self.key_type.to_json(),
            "valueType": self.value_type.to_json(),
            "valueContainsNull": self.value_contains_null,
        }

    def to_arrow(self) -> pa.DataType:
        return pa.map_(
            pa.field("key", self.key_type.to_arrow(), nullable=False),
            pa.field("value", self.value_type.to_arrow(), nullable=self.value_contains_null),
        )


@dataclass(frozen=True)
class StructField:
    """One named field. ``metadata`` is the column metadata JSON object, kept verbatim."""

    name: str
    type: DataType
    nullable: bool = True
    metadata: dict = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type.to_json(), "nullable": self.nullable, "metadata": self.metadata}

    @classmethod
    def from_json(cls, obj: dict) -> StructField:
        if not isinstance(obj, dict) or "name" not in obj or "type" not in obj:
            raise InvalidSchemaError(
                "A schema field is malformed",
                f"expected an object with 'name' and 'type', got {str(obj)[:200]}",
                "pass a Spark/Delta JSON schema",
            )
        md = obj.get("metadata") or {}
        if not isinstance(md, dict):
            raise InvalidSchemaError(
                f"The metadata of field '{obj['name']}' is not a JSON object", None, "pass a Spark/Delta JSON schema"
            )
        return cls(str(obj["name"]), type_from_json(obj["type"]), bool(obj.get("nullable", True)), md)

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type.to_arrow(), nullable=self.nullable)

    @property
    def comment(self) -> str | None:
        return self.metadata.get("comment")

    @property
    def default(self) -> str | None:
        """The column's DEFAULT expression text, or None."""
        v = self.metadata.get(DEFAULT_KEY)
        return None if v is None else str(v)

    @property
    def physical_name(self) -> str:
        """Column-mapping physical name, or the display name when the field has none."""
        return self.metadata.get("delta.columnMapping.physicalName", self.name)

    @property
    def field_id(self) -> int | None:
        v = self.metadata.get("delta.columnMapping.id")
        return int(v) if v is not None else None

    def with_type(self, new_type: DataType) -> StructField:
        return StructField(self.name, new_type, self.nullable, self.metadata)


@dataclass(frozen=True)
class StructType(_TypeBase):
    fields: tuple = ()

    name = "struct"

    def __post_init__(self):
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))

    # --- JSON -----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}

    def to_json_string(self) -> str:
        """Compact JSON, as Delta writes ``metaData.schemaString``."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, obj: dict | str) -> StructType:
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except ValueError as e:
                raise InvalidSchemaError(
                    "The schema is not valid JSON", str(e), "pass a Spark/Delta JSON schema"
                ) from None
        t = type_from_json(obj)
        if not isinstance(t, StructType):
            raise InvalidSchemaError(
                "A table schema must be a struct", f"got type {type_to_json(t)!r}", "wrap the columns in a struct"
            )
        t.validate()
        return t

    # --- Arrow ----------------------------------------------------------------------------
    def to_arrow(self) -> pa.DataType:
        return pa.struct([f.to_arrow() for f in self.fields])

    def to_arrow_schema(self) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.fields])

    @classmethod
    def from_arrow(cls, schema: pa.Schema | pa.StructType) -> StructType:
        fields = list(schema) if isinstance(schema, pa.Schema) else [schema.field(i) for i in range(schema.num_fields)]
        st = cls(tuple(StructField(f.name, type_from_arrow(f.type, f.name), f.nullable, {}) for f in fields))
        st.validate()
        return st

    # --- access ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StructField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> StructField:
        """The field called ``name``: exact match first, then case-insensitive. KeyError if none."""
        f = self.find(name)
        if f is None:
            raise KeyError(name)
        return f

    def find(self, name: str) -> StructField | None:
        for f in self.fields:
            if f.name == name:
                return f
        low = name.lower()
        for f in self.fields:
            if f.name.lower() == low:
                return f
        return None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def field_path(self, parts: Iterable[str]) -> list[StructField]:
        """The fields a path of names (``["a", "b"]``: ``a.b``) reaches from here down through structs,
        each found as :meth:`find` finds it; shorter than the path where a name is missing (or its
        parent is not a struct)."""
        out: list[StructField] = []
        struct: DataType = self
        for part in parts:
            f = struct.find(part) if isinstance(struct, StructType) else None
            if f is None:
                break
            out.append(f)
            struct = f.type
        return out

    def index(self, name: str) -> int:
        f = self.field(name)
        return self.fields.index(f)

    def leaf_fields(self) -> list[tuple[tuple[str, ...], StructField]]:
        """Leaf fields in schema order as ``(path, field)``; structs are descended into, arrays
        and maps are leaves (as in Delta's stats column counting)."""
        return [
            (p, f) for p, t, f in walk(self, into_collections=False) if f is not None and not isinstance(t, StructType)
        ]

    def select(self, names: list[str]) -> StructType:
        return StructType(tuple(self.field(n) for n in names))

    def without(self, names: list[str] | tuple[str, ...] | set[str]) -> StructType:
        low = {n.lower() for n in names}
        return StructType(tuple(f for f in self.fields if f.name.lower() not in low))

    def add(self, f: StructField) -> StructType:
        return StructType(self.fields + (f,))

    def to_ddl(self) -> str:
        """Spark DDL column list (``parse_ddl(s.to_ddl()) == s`` when metadata is only comments
        or char/varchar markers)."""
        return ", ".join(_field_ddl(f, top=True) for f in self.fields)

    # --- validation -----------------------------------------------------------------------
    def validate(self) -> StructType:
        _validate_struct(self, ())
        return self


DataType = PrimitiveType | DecimalType | ArrayType | MapType | StructType

PRIMITIVE_NAMES = frozenset(
    [
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "void",
        "variant",
    ]
)

_PRIMITIVE_TO_ARROW = {
    "string": pa.string,
    "long": pa.int64,
    "integer": pa.int32,
    "short": pa.int16,
    "byte": pa.int8,
    "float": pa.float32,
    "double": pa.float64,
    "boolean": pa.bool_,
    "binary": pa.binary,
    "date": pa.date32,
    "timestamp": lambda: pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": lambda: pa.timestamp("us"),
    "void": pa.null,
    "variant": lambda: _variant_arrow(),
}


def _variant_arrow() -> pa.DataType:
    from ..variant import arrow_type

    return arrow_type()


STRING = PrimitiveType("string")
LONG = PrimitiveType("long")
INTEGER = PrimitiveType("integer")
SHORT = PrimitiveType("short")
BYTE = PrimitiveType("byte")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
BOOLEAN = PrimitiveType("boolean")
BINARY = PrimitiveType("binary")
DATE = PrimitiveType("date")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMP_NTZ = PrimitiveType("timestamp_ntz")
VOID = PrimitiveType("void")
VARIANT = PrimitiveType("variant")


SIMPLE_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def _simple_string(t, names: dict = SIMPLE_NAMES) -> str:
    """Spark's ``simpleString`` of ``t``; ``names``: primitive names as the consumer spells them (a
    Hive metastore has no ``timestamp_ntz``)."""
    if isinstance(t, PrimitiveType):
        return names.get(t.name, t.name)
    if isinstance(t, DecimalType):
        return t.name
    if isinstance(t, ArrayType):
        return f"array<{_simple_string(t.element_type, names)}>"
    if isinstance(t, MapType):
        return f"map<{_simple_string(t.key_type, names)},{_simple_string(t.value_type, names)}>"
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{_simple_string(f.type, names)}" for f in t.fields) + ">"
    return str(t)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def type_ddl(t, md: dict | None = None) -> str:
    if md and CHAR_VARCHAR_KEY in md and isinstance(t, PrimitiveType) and t.name == "string":
        return str(md[CHAR_VARCHAR_KEY]).upper()
    if isinstance(t, PrimitiveType):
        return {"integer": "INT", "long": "BIGINT", "short": "SMALLINT", "byte": "TINYINT"}.get(t.name, t.name.upper())
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, ArrayType):
        return f"ARRAY<{type_ddl(t.element_type)}>"
    if isinstance(t, MapType):
        return f"MAP<{type_ddl(t.key_type)}, {type_ddl(t.value_type)}>"
    if isinstance(t, StructType):
        return "STRUCT<" + ", ".join(_field_ddl(f, top=False) for f in t.fields) + ">"
    raise TypeError(t)


def _field_ddl(f: StructField, *, top: bool) -> str:
    out = _quote(f.name) + (" " if top else ": ") + type_ddl(f.type, f.metadata)
    if not f.nullable:
        out += " NOT NULL"
    if f.metadata.get("comment") is not None:
        out += " COMMENT " + _sql_string(str(f.metadata["comment"]))
    return out


def walk(
    t, path: tuple[str, ...] = (), *, into_collections: bool = True
) -> Iterator[tuple[tuple[str, ...], DataType, StructField | None]]:
    """Every type nested in ``t`` (``t`` included), depth first, as ``(path, type, field)``.

    The one walker over nested schemas: ``path`` names struct fields by name and collection parts
    as ``element`` / ``key`` / ``value``; ``field`` is the struct field holding the type (``None`` for
    the root and inside arrays and maps). ``into_collections=False`` stops at arrays and maps (they
    are leaves, as Delta counts stats columns).
    """
    yield from _walk(t, path, None, into_collections)


def _walk(t, path, field, into_collections):
    yield path, t, field
    if isinstance(t, StructType):
        for f in t.fields:
            yield from _walk(f.type, path + (f.name,), f, into_collections)
    elif into_collections and isinstance(t, ArrayType):
        yield from _walk(t.element_type, path + ("element",), None, into_collections)
    elif into_collections and isinstance(t, MapType):
        yield from _walk(t.key_type, path + ("key",), None, into_collections)
        yield from _walk(t.value_type, path + ("value",), None, into_collections)


def validate_type(t, path: tuple[str, ...]) -> None:
    """Names non-empty and unique (case-insensitively) in every struct; only Delta types anywhere."""
    for p, sub, _ in walk(t, path):
        if isinstance(sub, StructType):
            _validate_names(sub, p)
        elif not isinstance(sub, (PrimitiveType, DecimalType, ArrayType, MapType)):
            raise InvalidSchemaError(f"Column '{'.'.join(p)}' has an invalid type", repr(sub), "use a Delta data type")


_validate_struct = validate_type


def _validate_names(st: StructType, path: tuple[str, ...]) -> None:
    seen: dict[str, str] = {}
    for f in st.fields:
        where = ".".join(path + (f.name,))
        if not isinstance(f.name, str) or f.name == "":
            raise InvalidSchemaError(
                "A column has an empty name",
                f"in {'.'.join(path) or 'the top-level struct'}",
                "give every column a non-empty name",
            )
        low = f.name.lower()
        if low in seen:
            raise InvalidSchemaError(
                f"Duplicate column name '{where}'",
                f"'{seen[low]}' and '{f.name}' are the same name (Delta column names are case-insensitive)",
                "rename one of the columns",
            )
        seen[low] = f.name


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def _parse_decimal_name(s: str):
    inner = s.strip()[len("decimal") :].strip()
    if inner == "":
        return DecimalType(10, 0)
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    parts = [p.strip() for p in inner[1:-1].split(",")]
    try:
        if len(parts) == 1:
            return DecimalType(int(parts[0]), 0)
        if len(parts) == 2:
            return DecimalType(int(parts[0]), int(parts[1]))
    except ValueError:
        return None
    return None


def type_from_json(obj: Any) -> DataType:
    """Parse a Delta/Spark JSON data type (a string for primitives, an object for nested types)."""
    if isinstance(obj, str):
        name = obj.strip()
        if name.lower().startswith("decimal"):
            d = _parse_decimal_name(name.lower())
            if d is None:
                raise InvalidSchemaError(f"Invalid decimal type '{obj}'", None, "write it as decimal(p,s)")
            return d
        if name in PRIMITIVE_NAMES:
            return PRIMITIVES[name]
        raise InvalidSchemaError(
            f"Unknown data type '{obj}'",
            "Delta knows " + ", ".join(sorted(PRIMITIVE_NAMES)) + ", decimal(p,s), array, map and struct",
            "use one of the Delta data types",
        )
    if isinstance(obj, dict):
        kind = obj.get("type")
        try:
            if kind == "struct":
                fields = obj.get("fields")
                if not isinstance(fields, list):
                    raise InvalidSchemaError(
                        "A struct type has no 'fields' list", str(obj)[:200], "pass a Spark/Delta JSON schema"
                    )
                return StructType(tuple(StructField.from_json(f) for f in fields))
            if kind == "array":
                return ArrayType(type_from_json(obj["elementType"]), bool(obj.get("containsNull", True)))
            if kind == "map":
                return MapType(
                    type_from_json(obj["keyType"]),
                    type_from_json(obj["valueType"]),
                    bool(obj.get("valueContainsNull", True)),
                )
        except KeyError as e:
            raise InvalidSchemaError(
                f"A '{kind}' type lacks {e}", str(obj)[:200], "pass a Spark/Delta JSON schema"
            ) from None
        if isinstance(kind, str) and kind not in ("struct", "array", "map"):
            # Spark writes user-defined types as {"type": "udt", ...}; anything else is unknown.
            raise InvalidSchemaError(f"Unknown data type '{kind}'", str(obj)[:200], "use one of the Delta data types")
    raise InvalidSchemaError("A data type is malformed", str(obj)[:200], "pass a Spark/Delta JSON schema")


def type_to_json(t: DataType) -> Any:
    return t.to_json()


PRIMITIVES = {n: PrimitiveType(n) for n in PRIMITIVE_NAMES}


# --------------------------------------------------------------------------------------------
# Arrow -> Delta
# --------------------------------------------------------------------------------------------


def _tagged_variant(t: pa.StructType) -> bool:
    """Spark's Arrow form of a variant: a binary ``metadata`` field tagged ``{"variant": "true"}``."""
    i = t.get_field_index("metadata")
    return i >= 0 and (t.field(i).metadata or {}).get(b"variant") == b"true"


def type_from_arrow(t: pa.DataType, name: str = "?") -> DataType:
    """Delta type for an Arrow type (the inverse of ``to_arrow`` plus the usual Arrow variants).

    Large/view strings and binaries map to string/binary, dictionaries to their value type,
    unsigned ints to the next wider signed type, date64 to date, timestamps of any unit to
    timestamp (with a zone) or timestamp_ntz (without), Spark's tagged variant struct to variant.
    """
    if pa.types.is_dictionary(t):
        return type_from_arrow(t.value_type, name)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return STRING
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or getattr(pa.types, "is_binary_view", lambda _: False)(t)
    ):
        return BINARY
    if pa.types.is_boolean(t):
        return BOOLEAN
    simple = {
        pa.int8(): BYTE,
        pa.int16(): SHORT,
        pa.int32(): INTEGER,
        pa.int64(): LONG,
        pa.uint8(): SHORT,
        pa.uint16(): INTEGER,
        pa.uint32(): LONG,
        pa.float16(): FLOAT,
        pa.float32(): FLOAT,
        pa.float64(): DOUBLE,
        pa.date32(): DATE,
        pa.date64(): DATE,
        pa.null(): VOID,
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return TIMESTAMP if t.tz is not None else TIMESTAMP_NTZ
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or getattr(pa.types, "is_list_view", lambda _: False)(t)
    ):
        return ArrayType(type_from_arrow(t.value_type, name), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(type_from_arrow(t.key_type, name), type_from_arrow(t.item_type, name), t.item_field.nullable)
    if pa.types.is_struct(t) and _tagged_variant(t):
        return VARIANT
    if pa.types.is_struct(t):
        return StructType(
            tuple(
                StructField(t.field(i).name, type_from_arrow(t.field(i).type, t.field(i).name), t.field(i).nullable, {})
                for i in range(t.num_fields)
            )
        )
    raise InvalidSchemaError(
        f"Column '{name}' has Arrow type {t}, which Delta cannot store",
        "Delta has no equivalent type (e.g. time, duration, interval, uint64)",
        "cast the column to a supported type (string, long, double, decimal, timestamp, ...) before writing",
    )
