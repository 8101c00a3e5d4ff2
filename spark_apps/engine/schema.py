"""Delta schema model: Spark/Delta JSON <-> Python objects <-> pyarrow, plus a Spark DDL parser.

Rules (PROTOCOL.md "Schema Serialization Format", Spark's ``DataType.json``):

* A schema is a ``StructType``; JSON ``{"type": "struct", "fields": [{"name", "type", "nullable",
  "metadata"}]}``. Arrays are ``{"type": "array", "elementType", "containsNull"}``, maps
  ``{"type": "map", "keyType", "valueType", "valueContainsNull"}``, primitives plain strings:
  ``string long integer short byte float double boolean binary date timestamp timestamp_ntz
  decimal(p,s) void variant``.
* Column metadata is kept verbatim (column mapping ids, comments, invariants ...), so
  ``StructType.from_json(d).to_json() == d`` for every valid Delta schema.
* Validation (:meth:`StructType.validate`, run by every parser here): names non-empty and unique
  case-insensitively within each struct (Delta resolves columns case-insensitively); decimal
  precision 1..38 and 0 <= scale <= precision. Violations raise :class:`InvalidSchemaError`.
* Arrow mapping: timestamp -> ``timestamp[us, tz=UTC]``, timestamp_ntz -> ``timestamp[us]``,
  date -> date32, decimal -> decimal128(p, s), byte/short/integer/long -> int8/16/32/64,
  float/double -> float32/64, string -> utf8, binary -> binary, void -> null, variant ->
  ``struct<value: binary, metadata: binary>`` (its parquet layout), arrays -> ``list<element>``,
  maps -> ``map<key, value>`` (Spark's Arrow field names, so mapInArrow batches line up).
* DDL (:func:`parse_ddl`, :func:`parse_type`): Spark column lists such as
  ``"id BIGINT NOT NULL, name STRING COMMENT 'x', tags ARRAY<STRING>, addr STRUCT<city: STRING>"``,
  parsed by sqlglot's Spark dialect (see the DDL section for the three Spark forms it is helped
  with) and mapped to the types above: BIGINT/LONG long, INT/INTEGER integer, SMALLINT/SHORT short,
  TINYINT/BYTE byte, FLOAT/REAL float, DOUBLE, BOOLEAN, STRING string, BINARY, DATE,
  TIMESTAMP/TIMESTAMP_LTZ timestamp (UTC-adjusted), TIMESTAMP_NTZ / TIMESTAMP WITHOUT TIME ZONE
  timestamp_ntz, DECIMAL/DEC/NUMERIC[(p[,s])] (default 10,0), VOID, VARIANT, ARRAY<t>, MAP<k, v>,
  STRUCT<name[:] t [NOT NULL] [COMMENT 's'], ...>. ``NOT NULL`` sets nullable false; ``COMMENT``
  goes to metadata ``{"comment": ...}``; ``CHAR(n)``/``VARCHAR(n)`` become ``string`` with Spark's
  ``__CHAR_VARCHAR_TYPE_STRING`` metadata (as Delta stores them). Anything else (INTERVAL,
  DATETIME, DEFAULT/GENERATED/CHECK/COLLATE clauses, key constraints, ...) is an
  :class:`InvalidSchemaError` naming the column and the type or clause.
  :func:`parse_column_paths` reads comma-separated column references (``a, b.c, `x.y`.z``) with
  the same tokenizer; stats.py uses it for ``delta.dataSkippingStatsColumns``.
* Append compatibility (:func:`check_write_compatible`): see its docstring.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .errors import InvalidSchemaError, SchemaMismatchError

__all__ = [
    "DataType",
    "PrimitiveType",
    "DecimalType",
    "ArrayType",
    "MapType",
    "StructField",
    "StructType",
    "STRING",
    "LONG",
    "INTEGER",
    "SHORT",
    "BYTE",
    "FLOAT",
    "DOUBLE",
    "BOOLEAN",
    "BINARY",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_NTZ",
    "VOID",
    "VARIANT",
    "PRIMITIVE_NAMES",
    "type_from_json",
    "type_to_json",
    "type_from_arrow",
    "parse_type",
    "parse_ddl",
    "parse_schema",
    "parse_column_paths",
    "check_write_compatible",
    "check_not_null",
    "is_safe_upcast",
    "MAX_DECIMAL_PRECISION",
]

MAX_DECIMAL_PRECISION = 38
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"


# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------


class _TypeBase:
    """Common helpers of every Delta data type."""

    def to_json(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_arrow(self) -> pa.DataType:  # pragma: no cover - overridden
        raise NotImplementedError

    def simple_string(self) -> str:
        """Spark's ``simpleString`` (used in messages): ``int``, ``array<string>``, ..."""
        return _simple_string(self)


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

    def index(self, name: str) -> int:
        f = self.field(name)
        return self.fields.index(f)

    def leaf_fields(self) -> list[tuple[tuple[str, ...], StructField]]:
        """Leaf fields in schema order as ``(path, field)``; structs are descended into, arrays
        and maps are leaves (as in Delta's stats column counting)."""
        out: list[tuple[tuple[str, ...], StructField]] = []

        def walk(st: StructType, prefix: tuple[str, ...]):
            for f in st.fields:
                p = prefix + (f.name,)
                if isinstance(f.type, StructType):
                    walk(f.type, p)
                else:
                    out.append((p, f))

        walk(self, ())
        return out

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
    "variant": lambda: pa.struct(
        [pa.field("value", pa.binary(), nullable=False), pa.field("metadata", pa.binary(), nullable=False)]
    ),
}

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


def _simple_string(t) -> str:
    if isinstance(t, PrimitiveType):
        return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}.get(t.name, t.name)
    if isinstance(t, DecimalType):
        return t.name
    if isinstance(t, ArrayType):
        return f"array<{_simple_string(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_simple_string(t.key_type)},{_simple_string(t.value_type)}>"
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{_simple_string(f.type)}" for f in t.fields) + ">"
    return str(t)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _type_ddl(t, md: dict | None = None) -> str:
    if md and CHAR_VARCHAR_KEY in md and isinstance(t, PrimitiveType) and t.name == "string":
        return str(md[CHAR_VARCHAR_KEY]).upper()
    if isinstance(t, PrimitiveType):
        return {"integer": "INT", "long": "BIGINT", "short": "SMALLINT", "byte": "TINYINT"}.get(t.name, t.name.upper())
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, ArrayType):
        return f"ARRAY<{_type_ddl(t.element_type)}>"
    if isinstance(t, MapType):
        return f"MAP<{_type_ddl(t.key_type)}, {_type_ddl(t.value_type)}>"
    if isinstance(t, StructType):
        return "STRUCT<" + ", ".join(_field_ddl(f, top=False) for f in t.fields) + ">"
    raise TypeError(t)


def _field_ddl(f: StructField, *, top: bool) -> str:
    out = _quote(f.name) + (" " if top else ": ") + _type_ddl(f.type, f.metadata)
    if not f.nullable:
        out += " NOT NULL"
    if f.metadata.get("comment") is not None:
        out += " COMMENT " + _sql_string(str(f.metadata["comment"]))
    return out


def _validate_struct(st: StructType, path: tuple[str, ...]) -> None:
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
        _validate_type(f.type, path + (f.name,))


def _validate_type(t, path: tuple[str, ...]) -> None:
    if isinstance(t, StructType):
        _validate_struct(t, path)
    elif isinstance(t, ArrayType):
        _validate_type(t.element_type, path + ("element",))
    elif isinstance(t, MapType):
        _validate_type(t.key_type, path + ("key",))
        _validate_type(t.value_type, path + ("value",))
    elif not isinstance(t, (PrimitiveType, DecimalType)):
        raise InvalidSchemaError(f"Column '{'.'.join(path)}' has an invalid type", repr(t), "use a Delta data type")


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
            return _PRIMITIVES[name]
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


_PRIMITIVES = {n: PrimitiveType(n) for n in PRIMITIVE_NAMES}


# --------------------------------------------------------------------------------------------
# Arrow -> Delta
# --------------------------------------------------------------------------------------------


def type_from_arrow(t: pa.DataType, name: str = "?") -> DataType:
    """Delta type for an Arrow type (the inverse of ``to_arrow`` plus the usual Arrow variants).

    Large/view strings and binaries map to string/binary, dictionaries to their value type,
    unsigned ints to the next wider signed type, date64 to date, timestamps of any unit to
    timestamp (with a zone) or timestamp_ntz (without).
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


# --------------------------------------------------------------------------------------------
# DDL parser: sqlglot (Spark dialect) parses, this section maps its DataType tree to ours
# --------------------------------------------------------------------------------------------
#
# sqlglot is imported on first use (~0.14 s to import; most engine work never parses DDL).
# Three Spark forms that sqlglot 30's Spark dialect does not read as Spark does are adjusted in
# the token stream before parsing (:func:`_spark_tokens`; the text itself is never rewritten):
#   * ``VOID``: Spark's null type (sqlglot knows the keyword only in its Databricks dialect);
#   * ``STRUCT<>``: tokenized as the ``<>`` operator; Spark's grammar reads it as an empty struct;
#   * ``TIMESTAMP WITHOUT TIME ZONE``: sqlglot keeps it as Spark's TIMESTAMP (TIMESTAMPTZ) but
#     Spark means ``timestamp_ntz``.
# A column list is parsed as the members of ``STRUCT<...>`` (synthetic tokens around the user's
# tokens), so top-level columns and struct fields follow one grammar: ``name [:] TYPE [NOT NULL]
# [COMMENT 'text']``. Names that are reserved SQL words (select, from, not, case, with ...) must be
# backquoted.

_TYPE_FIX = "write a Spark type such as BIGINT, DECIMAL(10,2), ARRAY<STRING>, MAP<STRING, INT> or STRUCT<a: INT>"
_DDL_FIX = (
    "write columns as 'name TYPE [NOT NULL] [COMMENT \\'text\\']' separated by commas, e.g. "
    "'id BIGINT NOT NULL, tags ARRAY<STRING>'; backquote names that are SQL keywords or hold "
    "special characters (`select`, `my col`)"
)

_SQLGLOT: tuple | None = None


def _sqlglot() -> tuple:
    """``(exp, ParseError, TokenError, Token, TokenType, spark_dialect)``, imported once."""
    global _SQLGLOT
    if _SQLGLOT is None:
        from sqlglot import exp
        from sqlglot.dialects.spark import Spark
        from sqlglot.errors import ParseError, TokenError
        from sqlglot.tokens import Token, TokenType

        _SQLGLOT = (exp, ParseError, TokenError, Token, TokenType, Spark())
    return _SQLGLOT


def _spark_tokens(text: str, what: str, *, types: bool = True) -> list:
    """sqlglot Spark-dialect tokens of ``text``; with ``types`` the adjustments listed above."""
    _, _, TokenError, Token, TokenType, dialect = _sqlglot()
    try:
        raw = dialect.tokenize(text)
    except TokenError as e:
        raise InvalidSchemaError(
            f"Cannot read the {what}",
            f"sqlglot: {str(e).splitlines()[0]} in '{text[:200]}'",
            "check for an unterminated `quoted` name or 'string' literal",
        ) from None
    if not types:
        return raw
    out: list = []
    i = 0
    while i < len(raw):
        t = raw[i]
        up = t.text.upper()
        if t.token_type == TokenType.VAR and up == "VOID":
            out.append(Token(TokenType.VOID, t.text, t.line, t.col, t.start, t.end, t.comments))
        elif t.token_type == TokenType.NEQ and out and out[-1].token_type == TokenType.STRUCT:
            out.append(Token(TokenType.LT, "<", t.line, t.col - 1, t.start, t.start))
            out.append(Token(TokenType.GT, ">", t.line, t.col, t.end, t.end))
        elif (
            t.token_type == TokenType.TIMESTAMPTZ
            and up == "TIMESTAMP"
            and [x.text.upper() for x in raw[i + 1 : i + 4]] == ["WITHOUT", "TIME", "ZONE"]
        ):
            z = raw[i + 3]
            out.append(Token(TokenType.TIMESTAMPNTZ, "TIMESTAMP_NTZ", z.line, z.col, t.start, z.end, t.comments))
            i += 3
        else:
            out.append(t)
        i += 1
    return out


def _near(text: str, start: int, end: int) -> str:
    line = text.count("\n", 0, start) + 1
    col = start - text.rfind("\n", 0, start)
    return f"at line {line}, column {col}, near '{text[max(0, start - 25) : end + 20]}'"


def _parse_tokens(text: str, tokens: list, into, what: str, fix: str = _DDL_FIX):
    """Parse ``tokens`` into one sqlglot ``into`` node; a ParseError becomes an InvalidSchemaError
    naming the token where parsing stopped (plain words for the usual mistakes, sqlglot's own
    description as the cause)."""
    exp, ParseError, _, _, TokenType, dialect = _sqlglot()
    try:
        return dialect.parser().parse_into(into, tokens, text)[0]
    except ParseError as e:
        info = (getattr(e, "errors", None) or [{}])[0]
    desc = "sqlglot: " + str(info.get("description") or "parse error").splitlines()[0]
    at = next(
        (i for i, t in enumerate(tokens) if t.line == info.get("line") and t.col == info.get("col") and t.line > 0),
        None,
    )
    if at is None:  # stopped on the synthetic closing '>' (or nowhere): the input ended early
        _raise(f"Cannot parse the {what}: it ends too early", f"{desc}, at the end of '{text[-60:]}'", fix)
    tok, prev = tokens[at], tokens[at - 1] if at else None
    nxt = tokens[at + 1] if at + 1 < len(tokens) else None
    if nxt is not None and nxt.token_type == TokenType.COLON:
        nxt = tokens[at + 2] if at + 2 < len(tokens) else None
    cause = f"{desc}, {_near(text, tok.start, tok.end)}"
    if prev is not None and prev.token_type == TokenType.COMMENT:
        _raise(f"Cannot parse the {what}: COMMENT must be followed by a quoted string, not '{tok.text}'", cause, fix)
    if into is exp.DataType and (prev is None or prev.token_type in (TokenType.LT, TokenType.COMMA)):
        # sqlglot stops at the start of the struct member / type it could not read
        opener = _opener(tokens, at)
        if opener is not None and opener.token_type == TokenType.STRUCT:  # at a member: name [:] type
            end = nxt is None or nxt.token_type in (TokenType.COMMA, TokenType.GT)
            if tok.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and end:
                _raise(f"Cannot parse the {what}: column '{tok.text}' has no type", cause, fix)
            if tok.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and nxt.token_type == TokenType.VAR:
                _raise(f"Cannot parse the {what}: unknown type '{nxt.text}' for column '{tok.text}'", cause, fix)
            if tok.text.isalpha() and not end and nxt.token_type in dialect.parser_class.TYPE_TOKENS:
                _raise(f"Cannot parse the {what}: column name '{tok.text}' is a reserved SQL word", cause, fix)
        elif tok.token_type == TokenType.VAR:  # at a type
            _raise(f"Cannot parse the {what}: unknown type '{tok.text}'", cause, fix)
    _raise(f"Cannot parse the {what} at '{tok.text}'", cause, fix)


def _opener(tokens: list, at: int):
    """The token before the unclosed ``<`` enclosing ``tokens[at]`` (``STRUCT``, ``ARRAY``, ``MAP``),
    or None at the top of a bare type."""
    _, _, _, _, TokenType, _ = _sqlglot()
    depth = 0
    for i in range(at - 1, -1, -1):
        tt = tokens[i].token_type
        if tt == TokenType.GT:
            depth += 1
        elif tt == TokenType.LT:
            if depth == 0:
                return tokens[i - 1] if i else None
            depth -= 1
    return None


def _raise(problem: str, cause: str | None, fix: str = _DDL_FIX):
    raise InvalidSchemaError(problem, cause, fix)


def _type_from_sqlglot(dt, where: str) -> tuple[DataType, dict]:
    """Our type for one sqlglot ``DataType`` node, plus column metadata (CHAR/VARCHAR only)."""
    exp, *_, dialect = _sqlglot()
    T = exp.DType
    stores = "Delta stores " + ", ".join(sorted(PRIMITIVE_NAMES)) + ", decimal(p,s), array, map and struct"
    if not isinstance(dt, exp.DataType) or not isinstance(dt.this, T):
        shown = dt.sql(dialect=dialect) if isinstance(dt, exp.Expr) else str(dt)
        interval = isinstance(dt, exp.DataType) and isinstance(dt.this, exp.Interval)
        _raise(
            f"Column '{where}' has type {shown}, which Delta cannot store",
            ("Delta has no interval types; " if interval else "") + stores,
        )
    kind, args = dt.this, dt.expressions
    prim = _SQLGLOT_PRIMITIVES.get(kind.name)
    # the Spark name of the type when we know it, else sqlglot's (e.g. DATETIME, UINT); with parameters
    shown = (_type_ddl(_PRIMITIVES[prim]) if prim else kind.name) + (
        f"({', '.join(a.sql(dialect=dialect) for a in args)})" if args and not dt.args.get("nested") else ""
    )
    if kind == T.ARRAY and len(args) == 1:
        return ArrayType(_type_from_sqlglot(args[0], where + ".element")[0], True), {}
    if kind == T.MAP and len(args) == 2:
        return MapType(
            _type_from_sqlglot(args[0], where + ".key")[0], _type_from_sqlglot(args[1], where + ".value")[0], True
        ), {}
    if kind == T.STRUCT:
        return StructType(tuple(_field_from_sqlglot(m, where) for m in args)), {}
    params = [a.name for a in args] if not dt.args.get("nested") else []
    if not all(p.isdigit() for p in params):
        _raise(f"Column '{where}' has an invalid type {shown}", "type parameters must be integers")
    params = [int(p) for p in params]
    if kind == T.DECIMAL and len(params) <= 2:
        try:
            return DecimalType(*(params + [10, 0][len(params) :])), {}
        except InvalidSchemaError as e:
            raise InvalidSchemaError(f"{e.problem} for column '{where}'", e.cause, e.fix) from None
    if kind in (T.CHAR, T.VARCHAR):
        if len(params) != 1 or params[0] < 1:
            _raise(
                f"Column '{where}' has type {shown} without a valid length",
                f"{kind.name} needs a length, e.g. {kind.name}(10)",
            )
        return STRING, {CHAR_VARCHAR_KEY: f"{kind.name.lower()}({params[0]})"}
    if prim is None:
        _raise(f"Column '{where}' has type {shown}, which Delta cannot store", stores)
    if args:
        _raise(f"Column '{where}' has type {shown}, but {prim} takes no parameters", stores)
    return _PRIMITIVES[prim], {}


# sqlglot type (Spark dialect) -> Delta type. Spark's TIMESTAMP and TIMESTAMP_LTZ are the
# UTC-adjusted timestamp (sqlglot: TIMESTAMPTZ / TIMESTAMPLTZ); TIMESTAMP_NTZ has no zone.
# STRING is TEXT in sqlglot; REAL reads as FLOAT, LONG as BIGINT, SHORT as SMALLINT, BYTE as TINYINT.
_SQLGLOT_PRIMITIVES = {
    "TEXT": "string",
    "BIGINT": "long",
    "INT": "integer",
    "SMALLINT": "short",
    "TINYINT": "byte",
    "FLOAT": "float",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "BINARY": "binary",
    "DATE": "date",
    "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp",
    "TIMESTAMPNTZ": "timestamp_ntz",
    "NULL": "void",
    "VARIANT": "variant",
}


def _field_from_sqlglot(node, parent: str) -> StructField:
    """One column / struct member (a sqlglot ``ColumnDef``): name, type, NOT NULL, COMMENT."""
    exp, *_, dialect = _sqlglot()
    prefix = parent + "." if parent else ""
    if not isinstance(node, exp.ColumnDef) or not isinstance(node.this, exp.Identifier):
        _raise(
            f"Cannot parse the DDL schema: expected a column name but found '{node.sql(dialect=dialect)}'"
            + (f" in '{parent}'" if parent else ""),
            None,
        )
    name = node.this.this
    where = prefix + name
    if node.args.get("kind") is None:
        _raise(f"Column '{where}' has no type", None)
    t, md = _type_from_sqlglot(node.args["kind"], where)
    nullable, md = True, dict(md)
    for c in node.args.get("constraints") or []:
        k = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = nullable and bool(k.args.get("allow_null"))
        elif isinstance(k, exp.CommentColumnConstraint) and "comment" not in md:
            if not (isinstance(k.this, exp.Literal) and k.this.is_string):
                _raise(f"Cannot parse the DDL schema: COMMENT of column '{where}' must be a quoted string", None)
            md["comment"] = k.this.this
        else:
            _raise(
                f"Column '{where}' has a clause this engine cannot honour: {c.sql(dialect=dialect)}",
                "only NOT NULL and one COMMENT are supported (no DEFAULT, GENERATED, IDENTITY, CHECK, "
                "COLLATE or key constraints)",
            )
    return StructField(name, t, nullable, md)


def parse_type(text: str) -> DataType:
    """Parse one DDL type, e.g. ``"ARRAY<DECIMAL(10,2)>"``."""
    exp = _sqlglot()[0]
    tokens = _spark_tokens(text, "type")
    if not tokens:
        _raise("The type is empty", None)
    t, _ = _type_from_sqlglot(_parse_tokens(text, tokens, exp.DataType, "type", _TYPE_FIX), "?")
    _validate_type(t, ("?",))
    return t


def parse_ddl(text: str) -> StructType:
    """Parse a Spark DDL column list into a :class:`StructType` (validated).

    Also accepts a top-level ``STRUCT<...>`` type string.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("The DDL schema is empty", None, "list at least one column, e.g. 'id BIGINT'")
    exp, _, _, Token, TokenType, _ = _sqlglot()
    tokens = _spark_tokens(text, "DDL schema")
    if not tokens:
        raise InvalidSchemaError(
            "The DDL schema is empty", "it holds only comments", "list at least one column, e.g. 'id BIGINT'"
        )
    if len(tokens) > 1 and tokens[0].token_type == TokenType.STRUCT and tokens[1].token_type == TokenType.LT:
        t, _ = _type_from_sqlglot(_parse_tokens(text, tokens, exp.DataType, "DDL schema"), "")
        return t.validate()
    parens = 0
    for i, tok in enumerate(tokens):  # sqlglot tolerates a trailing comma, Spark does not
        parens += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tok.token_type, 0)
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.token_type == TokenType.COMMA and not parens and (nxt is None or nxt.token_type == TokenType.GT):
            _raise(
                f"Cannot parse the DDL schema: expected a column name after ',' but found "
                f"{'end of input' if nxt is None else repr(nxt.text)}",
                _near(text, tok.start, tok.end),
            )
    # the column list is read as the members of STRUCT<...>; synthetic tokens are on line 0
    wrapped = [
        Token(TokenType.STRUCT, "STRUCT", 0, 0, 0, -1),
        Token(TokenType.LT, "<", 0, 0, 0, -1),
        *tokens,
        Token(TokenType.GT, ">", 0, 0, len(text), len(text) - 1),
    ]
    t, _ = _type_from_sqlglot(_parse_tokens(text, wrapped, exp.DataType, "DDL schema"), "")
    return t.validate()


_PATHS_FIX = (
    "list column names separated by commas, nested fields with dots, e.g. 'a, b.c, `x.y`.z'; "
    "backquote names holding dots or commas or that are SQL keywords or literals (`true`)"
)


def parse_column_paths(text: str, what: str = "column list") -> list[tuple[str, ...]]:
    """Comma-separated Spark column references as name paths: ``"a, b.c, `x.y`.z"`` ->
    ``[("a",), ("b", "c"), ("x.y", "z")]``.

    sqlglot's Spark dialect tokenizes and parses each entry (backquotes quote a part, a doubled
    backquote is a literal one; unquoted parts keep their case). Empty entries are skipped. A
    part that is a reserved SQL word must be backquoted.

    :raises InvalidSchemaError: naming the entry that is not a column reference.
    """
    exp, _, _, _, TokenType, dialect = _sqlglot()
    tokens = _spark_tokens(text, what, types=False)
    groups: list[list] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.COMMA:
            groups.append([])
        else:
            groups[-1].append(tok)
    out: list[tuple[str, ...]] = []
    for g in groups:
        if not g:
            continue
        node = _parse_tokens(text, g, exp.Column, what, _PATHS_FIX)
        parts = node.parts if isinstance(node, (exp.Column, exp.Dot)) else None
        if not parts or not all(isinstance(p, exp.Identifier) for p in parts):
            entry = text[g[0].start : g[-1].end + 1]
            _raise(
                f"Cannot parse the {what}: '{entry}' is not a column name",
                f"sqlglot reads it as {type(node).__name__} {node.sql(dialect=dialect)}",
                _PATHS_FIX,
            )
        out.append(tuple(p.this for p in parts))
    return out


def parse_schema(value: Any) -> StructType:
    """A :class:`StructType` from a DDL string, a Delta/Spark JSON schema (string or dict), an
    Arrow schema, or a StructType (returned validated)."""
    if isinstance(value, StructType):
        return value.validate()
    if isinstance(value, pa.Schema):
        return StructType.from_arrow(value)
    if isinstance(value, dict):
        return StructType.from_json(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("{"):
            return StructType.from_json(s)
        return parse_ddl(s)
    raise InvalidSchemaError(
        f"Cannot use a {type(value).__name__} as a schema",
        None,
        "pass a DDL string ('id BIGINT, name STRING'), a Delta JSON schema (string or dict) or a pyarrow schema",
    )


# --------------------------------------------------------------------------------------------
# Write compatibility
# --------------------------------------------------------------------------------------------

_INT_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}


def is_safe_upcast(data_type: DataType, table_type: DataType) -> bool:
    """True when values of ``data_type`` can be written into a ``table_type`` column without loss.

    Allowed (besides equal types): byte -> short -> integer -> long; float -> double;
    byte/short/integer -> double (exact); decimal(p1,s1) -> decimal(p2,s2) when s2 >= s1 and
    p2 - s2 >= p1 - s1; integer types -> decimal with enough integer digits (byte 3, short 5,
    int 10, long 20); void (an all-null column) -> any type. Nested types: element/key/value/field
    wise with the same rules; a data struct may omit nullable fields. Nothing else (no
    timestamp <-> timestamp_ntz, no string <-> number): Delta's schema enforcement would refuse.
    """
    if data_type == table_type:
        return True
    if isinstance(data_type, PrimitiveType) and data_type.name == "void":
        return True
    if isinstance(data_type, PrimitiveType) and isinstance(table_type, PrimitiveType):
        a, b = data_type.name, table_type.name
        if a in _INT_RANK and b in _INT_RANK:
            return _INT_RANK[a] <= _INT_RANK[b]
        if a == "float" and b == "double":
            return True
        if a in ("byte", "short", "integer") and b == "double":
            return True
        return False
    if isinstance(data_type, PrimitiveType) and isinstance(table_type, DecimalType):
        digits = {"byte": 3, "short": 5, "integer": 10, "long": 20}.get(data_type.name)
        return digits is not None and table_type.precision - table_type.scale >= digits
    if isinstance(data_type, DecimalType) and isinstance(table_type, DecimalType):
        return (
            table_type.scale >= data_type.scale
            and table_type.precision - table_type.scale >= data_type.precision - data_type.scale
        )
    if isinstance(data_type, ArrayType) and isinstance(table_type, ArrayType):
        return is_safe_upcast(data_type.element_type, table_type.element_type)
    if isinstance(data_type, MapType) and isinstance(table_type, MapType):
        return is_safe_upcast(data_type.key_type, table_type.key_type) and is_safe_upcast(
            data_type.value_type, table_type.value_type
        )
    if isinstance(data_type, StructType) and isinstance(table_type, StructType):
        problems: list[str] = []
        _compare_struct(table_type, data_type, (), problems, merge=False, merged=None)
        return not problems
    return False


def _compare_struct(
    table: StructType, data: StructType, path: tuple[str, ...], problems: list[str], *, merge: bool, merged: list | None
) -> None:
    """Append human-readable problems; with ``merged`` (a list) collect the merged fields."""
    data_by_low = {f.name.lower(): f for f in data.fields}
    table_low = {f.name.lower() for f in table.fields}
    for tf in table.fields:
        where = ".".join(path + (tf.name,))
        df = data_by_low.get(tf.name.lower())
        if df is None:
            if not tf.nullable:
                problems.append(f"missing non-nullable column '{where}' ({tf.type.simple_string()} NOT NULL)")
            if merged is not None:
                merged.append(tf)
            continue
        new_type = tf.type
        if isinstance(tf.type, StructType) and isinstance(df.type, StructType):
            sub_merged: list | None = [] if merged is not None else None
            _compare_struct(tf.type, df.type, path + (tf.name,), problems, merge=merge, merged=sub_merged)
            if sub_merged is not None:
                new_type = StructType(tuple(sub_merged))
        elif not is_safe_upcast(df.type, tf.type):
            problems.append(
                f"column '{where}' has type {df.type.simple_string()} in the data but "
                f"{tf.type.simple_string()} in the table"
            )
        if merged is not None:
            merged.append(tf.with_type(new_type))
    extra = [f for f in data.fields if f.name.lower() not in table_low]
    for f in extra:
        where = ".".join(path + (f.name,))
        if not merge:
            problems.append(f"extra column '{where}' ({f.type.simple_string()}) is not in the table")
        elif merged is not None:
            merged.append(StructField(f.name, f.type, True, f.metadata))


def check_write_compatible(
    table_schema: StructType, data_schema: StructType, *, merge_schema: bool = False
) -> StructType:
    """Schema enforcement for appends/overwrites into an existing table.

    Rules (Delta's schema enforcement on write):

    * every data column must match a table column by name (case-insensitively); an extra column
      is an error unless ``merge_schema`` (then it is appended to the table schema as nullable,
      also inside nested structs);
    * a table column absent from the data is allowed when nullable (written as null); a missing
      NOT NULL column is an error ("nullability violation"); whether a present nullable data
      column actually holds nulls for a NOT NULL table column is a data check
      (:func:`check_not_null`), not a schema one, as in Delta;
    * types must be equal or a safe upcast (:func:`is_safe_upcast`).

    :returns: the schema the table has after the write: ``table_schema`` itself when nothing
        changes, else the merged schema (``merge_schema=True`` with new columns).
    :raises SchemaMismatchError: listing every problem found.
    """
    problems: list[str] = []
    merged: list = []
    _compare_struct(table_schema, data_schema, (), problems, merge=merge_schema, merged=merged)
    if problems:
        raise SchemaMismatchError(
            "The data does not match the table schema",
            "; ".join(problems),
            "select/cast the data to the table's columns and types"
            + ("" if merge_schema else ", or write with merge_schema=True to add the new columns"),
        )
    out = StructType(tuple(merged))
    return table_schema if out == table_schema else out.validate()


def check_not_null(table_schema: StructType, data: pa.Table | pa.RecordBatch) -> None:
    """Raise :class:`SchemaMismatchError` if a NOT NULL column (top level or nested struct field
    under non-null parents) holds a null in ``data``. Columns are matched case-insensitively;
    absent columns count as all null."""
    problems: list[str] = []
    names = {n.lower(): n for n in data.schema.names}

    def check(arr, st: StructType, path: tuple[str, ...]):
        for _i, f in enumerate(st.fields):
            where = ".".join(path + (f.name,))
            col = arr(f.name)
            if col is None:
                if not f.nullable and data.num_rows:
                    problems.append(f"'{where}' is missing (all null)")
                continue
            if not f.nullable and col.null_count:
                problems.append(f"'{where}' has {col.null_count} null value(s)")
            if isinstance(f.type, StructType) and pa.types.is_struct(col.type):
                chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                for ch in chunks:
                    # children of a null parent are not checked (the parent itself is null)
                    valid = ch.filter(ch.is_valid()) if ch.null_count else ch
                    sub_names = {ch.type.field(j).name.lower(): j for j in range(ch.type.num_fields)}

                    def sub(name, valid=valid, sub_names=sub_names):
                        j = sub_names.get(name.lower())
                        return None if j is None else valid.field(j)

                    check(sub, f.type, path + (f.name,))

    def top(name):
        n = names.get(name.lower())
        if n is None:
            return None
        return data.column(data.schema.get_field_index(n))

    check(top, table_schema, ())
    if problems:
        raise SchemaMismatchError(
            "NOT NULL constraint violated",
            "; ".join(dict.fromkeys(problems)),
            "filter out or fill the null values before writing",
        )
