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
* DDL (:func:`parse_ddl`): Spark column lists such as
  ``"id BIGINT NOT NULL, name STRING COMMENT 'x', tags ARRAY<STRING>, addr STRUCT<city: STRING>"``;
  type names are case-insensitive; ``COMMENT`` goes to metadata ``{"comment": ...}``;
  ``CHAR(n)``/``VARCHAR(n)`` become ``string`` with Spark's ``__CHAR_VARCHAR_TYPE_STRING``
  metadata (as Delta stores them).
* Append compatibility (:func:`check_write_compatible`): see its docstring.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

import pyarrow as pa

from .errors import InvalidSchemaError, SchemaMismatchError

__all__ = [
    "DataType", "PrimitiveType", "DecimalType", "ArrayType", "MapType", "StructField", "StructType",
    "STRING", "LONG", "INTEGER", "SHORT", "BYTE", "FLOAT", "DOUBLE", "BOOLEAN", "BINARY", "DATE",
    "TIMESTAMP", "TIMESTAMP_NTZ", "VOID", "VARIANT", "PRIMITIVE_NAMES",
    "type_from_json", "type_to_json", "type_from_arrow", "parse_type", "parse_ddl", "parse_schema",
    "check_write_compatible", "check_not_null", "is_safe_upcast", "MAX_DECIMAL_PRECISION",
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
    element_type: "DataType"
    contains_null: bool = True

    name = "array"

    def to_json(self) -> dict:
        return {"type": "array", "elementType": self.element_type.to_json(), "containsNull": self.contains_null}

    def to_arrow(self) -> pa.DataType:
        return pa.list_(pa.field("element", self.element_type.to_arrow(), nullable=self.contains_null))


@dataclass(frozen=True)
class MapType(_TypeBase):
    key_type: "DataType"
    value_type: "DataType"
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
    type: "DataType"
    nullable: bool = True
    metadata: dict = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type.to_json(), "nullable": self.nullable, "metadata": self.metadata}

    @classmethod
    def from_json(cls, obj: dict) -> "StructField":
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

    def with_type(self, new_type: "DataType") -> "StructField":
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
    def from_json(cls, obj: dict | str) -> "StructType":
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except ValueError as e:
                raise InvalidSchemaError("The schema is not valid JSON", str(e), "pass a Spark/Delta JSON schema") from None
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
    def from_arrow(cls, schema: pa.Schema | pa.StructType) -> "StructType":
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

    def select(self, names: list[str]) -> "StructType":
        return StructType(tuple(self.field(n) for n in names))

    def without(self, names: list[str] | tuple[str, ...] | set[str]) -> "StructType":
        low = {n.lower() for n in names}
        return StructType(tuple(f for f in self.fields if f.name.lower() not in low))

    def add(self, f: StructField) -> "StructType":
        return StructType(self.fields + (f,))

    def to_ddl(self) -> str:
        """Spark DDL column list (``parse_ddl(s.to_ddl()) == s`` when metadata is only comments
        or char/varchar markers)."""
        return ", ".join(_field_ddl(f, top=True) for f in self.fields)

    # --- validation -----------------------------------------------------------------------
    def validate(self) -> "StructType":
        _validate_struct(self, ())
        return self


DataType = Union[PrimitiveType, DecimalType, ArrayType, MapType, StructType]

PRIMITIVE_NAMES = frozenset(
    ["string", "long", "integer", "short", "byte", "float", "double", "boolean", "binary", "date",
     "timestamp", "timestamp_ntz", "void", "variant"]
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
    "variant": lambda: pa.struct([pa.field("value", pa.binary(), nullable=False),
                                  pa.field("metadata", pa.binary(), nullable=False)]),
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
    inner = s.strip()[len("decimal"):].strip()
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
                    raise InvalidSchemaError("A struct type has no 'fields' list", str(obj)[:200], "pass a Spark/Delta JSON schema")
                return StructType(tuple(StructField.from_json(f) for f in fields))
            if kind == "array":
                return ArrayType(type_from_json(obj["elementType"]), bool(obj.get("containsNull", True)))
            if kind == "map":
                return MapType(type_from_json(obj["keyType"]), type_from_json(obj["valueType"]),
                               bool(obj.get("valueContainsNull", True)))
        except KeyError as e:
            raise InvalidSchemaError(f"A '{kind}' type lacks {e}", str(obj)[:200], "pass a Spark/Delta JSON schema") from None
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
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or getattr(pa.types, "is_binary_view", lambda _: False)(t)):
        return BINARY
    if pa.types.is_boolean(t):
        return BOOLEAN
    simple = {
        pa.int8(): BYTE, pa.int16(): SHORT, pa.int32(): INTEGER, pa.int64(): LONG,
        pa.uint8(): SHORT, pa.uint16(): INTEGER, pa.uint32(): LONG,
        pa.float16(): FLOAT, pa.float32(): FLOAT, pa.float64(): DOUBLE,
        pa.date32(): DATE, pa.date64(): DATE, pa.null(): VOID,
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return TIMESTAMP if t.tz is not None else TIMESTAMP_NTZ
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or \
            getattr(pa.types, "is_list_view", lambda _: False)(t):
        return ArrayType(type_from_arrow(t.value_type, name), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(type_from_arrow(t.key_type, name), type_from_arrow(t.item_type, name), t.item_field.nullable)
    if pa.types.is_struct(t):
        return StructType(tuple(
            StructField(t.field(i).name, type_from_arrow(t.field(i).type, t.field(i).name), t.field(i).nullable, {})
            for i in range(t.num_fields)
        ))
    raise InvalidSchemaError(
        f"Column '{name}' has Arrow type {t}, which Delta cannot store",
        "Delta has no equivalent type (e.g. time, duration, interval, uint64)",
        "cast the column to a supported type (string, long, double, decimal, timestamp, ...) before writing",
    )


# --------------------------------------------------------------------------------------------
# DDL parser
# --------------------------------------------------------------------------------------------

_DDL_ALIASES = {
    "string": STRING, "text": STRING,
    "bigint": LONG, "long": LONG,
    "int": INTEGER, "integer": INTEGER,
    "smallint": SHORT, "short": SHORT,
    "tinyint": BYTE, "byte": BYTE,
    "float": FLOAT, "real": FLOAT,
    "double": DOUBLE,
    "boolean": BOOLEAN, "bool": BOOLEAN,
    "binary": BINARY,
    "date": DATE,
    "timestamp": TIMESTAMP, "timestamp_ltz": TIMESTAMP,
    "timestamp_ntz": TIMESTAMP_NTZ,
    "void": VOID,
    "variant": VARIANT,
}


class _Tokens:
    """Tokenizer for Spark DDL: identifiers, `quoted` identifiers, 'strings', numbers, punctuation."""

    PUNCT = "<>(),:"

    def __init__(self, text: str):
        self.text = text
        self.toks: list[tuple[str, str, int]] = []  # (kind, value, pos); kind in ident, qident, str, num, punct
        self._lex()
        self.i = 0

    def _err(self, msg: str, pos: int) -> InvalidSchemaError:
        snippet = self.text[max(0, pos - 20): pos + 20]
        return InvalidSchemaError(
            f"Cannot parse the DDL schema: {msg}",
            f"at position {pos} near '{snippet}'",
            "write columns as 'name TYPE [NOT NULL] [COMMENT \\'text\\']', separated by commas, "
            "e.g. 'id BIGINT NOT NULL, tags ARRAY<STRING>'",
        )

    def _lex(self) -> None:
        s, i, n = self.text, 0, len(self.text)
        while i < n:
            c = s[i]
            if c.isspace():
                i += 1
            elif c == "`":
                j, buf = i + 1, []
                while True:
                    if j >= n:
                        raise self._err("unterminated `quoted` name", i)
                    if s[j] == "`":
                        if j + 1 < n and s[j + 1] == "`":
                            buf.append("`")
                            j += 2
                            continue
                        break
                    buf.append(s[j])
                    j += 1
                self.toks.append(("qident", "".join(buf), i))
                i = j + 1
            elif c in "'\"":
                j, buf = i + 1, []
                while True:
                    if j >= n:
                        raise self._err("unterminated string", i)
                    if s[j] == "\\" and j + 1 < n:
                        nxt = s[j + 1]
                        buf.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(nxt, nxt))
                        j += 2
                        continue
                    if s[j] == c:
                        if j + 1 < n and s[j + 1] == c:  # SQL doubled quote
                            buf.append(c)
                            j += 2
                            continue
                        break
                    buf.append(s[j])
                    j += 1
                self.toks.append(("str", "".join(buf), i))
                i = j + 1
            elif c in self.PUNCT:
                self.toks.append(("punct", c, i))
                i += 1
            elif c.isdigit():
                j = i
                while j < n and s[j].isdigit():
                    j += 1
                self.toks.append(("num", s[i:j], i))
                i = j
            elif c.isalnum() or c == "_":
                j = i
                while j < n and (s[j].isalnum() or s[j] == "_"):
                    j += 1
                self.toks.append(("ident", s[i:j], i))
                i = j
            else:
                raise self._err(f"unexpected character {c!r}", i)

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "", len(self.text))

    def next(self):
        t = self.peek()
        self.i += 1
        return t

    def at_word(self, word: str, k: int = 0) -> bool:
        kind, val, _ = self.peek(k)
        return kind == "ident" and val.lower() == word

    def at_punct(self, p: str) -> bool:
        kind, val, _ = self.peek()
        return kind == "punct" and val == p

    def expect_punct(self, p: str) -> None:
        kind, val, pos = self.next()
        if kind != "punct" or val != p:
            raise self._err(f"expected '{p}' but found '{val or 'end of input'}'", pos)

    def name(self) -> str:
        kind, val, pos = self.next()
        if kind not in ("ident", "qident"):
            raise self._err(f"expected a column name but found '{val or 'end of input'}'", pos)
        return val

    def number(self) -> int:
        kind, val, pos = self.next()
        if kind != "num":
            raise self._err(f"expected a number but found '{val or 'end of input'}'", pos)
        return int(val)


def _parse_type(tk: _Tokens) -> tuple[DataType, dict]:
    """Parse one type; returns (type, extra metadata) - metadata only for CHAR/VARCHAR."""
    kind, val, pos = tk.next()
    if kind != "ident":
        raise tk._err(f"expected a type but found '{val or 'end of input'}'", pos)
    w = val.lower()
    if w == "array":
        tk.expect_punct("<")
        el, _ = _parse_type(tk)
        tk.expect_punct(">")
        return ArrayType(el, True), {}
    if w == "map":
        tk.expect_punct("<")
        k, _ = _parse_type(tk)
        tk.expect_punct(",")
        v, _ = _parse_type(tk)
        tk.expect_punct(">")
        return MapType(k, v, True), {}
    if w == "struct":
        tk.expect_punct("<")
        fields = []
        if not tk.at_punct(">"):
            while True:
                fname = tk.name()
                if tk.at_punct(":"):
                    tk.next()
                fields.append(_parse_field_rest(tk, fname))
                if tk.at_punct(","):
                    tk.next()
                    continue
                break
        tk.expect_punct(">")
        return StructType(tuple(fields)), {}
    if w in ("decimal", "dec", "numeric"):
        p, s = 10, 0
        if tk.at_punct("("):
            tk.next()
            p = tk.number()
            if tk.at_punct(","):
                tk.next()
                s = tk.number()
            tk.expect_punct(")")
        return DecimalType(p, s), {}
    if w in ("char", "varchar", "character"):
        if w == "character" and tk.at_word("varying"):
            tk.next()
            w = "varchar"
        tk.expect_punct("(")
        length = tk.number()
        tk.expect_punct(")")
        w = "char" if w == "character" else w
        return STRING, {CHAR_VARCHAR_KEY: f"{w}({length})"}
    if w == "timestamp" and tk.at_word("without") and tk.at_word("time", 1):
        for _ in range(3):  # WITHOUT TIME ZONE
            tk.next()
        return TIMESTAMP_NTZ, {}
    if w in _DDL_ALIASES:
        return _DDL_ALIASES[w], {}
    raise tk._err(f"unknown type '{val}'", pos)


def _parse_field_rest(tk: _Tokens, name: str) -> StructField:
    t, md = _parse_type(tk)
    nullable = True
    md = dict(md)
    while True:
        if tk.at_word("not") and tk.at_word("null", 1):
            tk.next()
            tk.next()
            nullable = False
        elif tk.at_word("null"):
            tk.next()
        elif tk.at_word("comment"):
            tk.next()
            kind, val, pos = tk.next()
            if kind != "str":
                raise tk._err("COMMENT must be followed by a quoted string", pos)
            md["comment"] = val
        else:
            break
    return StructField(name, t, nullable, md)


def parse_type(text: str) -> DataType:
    """Parse one DDL type, e.g. ``"ARRAY<DECIMAL(10,2)>"``."""
    tk = _Tokens(text)
    t, _ = _parse_type(tk)
    kind, val, pos = tk.peek()
    if kind != "eof":
        raise tk._err(f"unexpected '{val}' after the type", pos)
    _validate_type(t, ("?",))
    return t


def parse_ddl(text: str) -> StructType:
    """Parse a Spark DDL column list into a :class:`StructType` (validated).

    Also accepts a top-level ``STRUCT<...>`` type string.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("The DDL schema is empty", None, "list at least one column, e.g. 'id BIGINT'")
    tk = _Tokens(text)
    if tk.at_word("struct") and tk.peek(1)[:2] == ("punct", "<"):
        t, _ = _parse_type(tk)
        kind, val, pos = tk.peek()
        if kind != "eof":
            raise tk._err(f"unexpected '{val}' after the struct type", pos)
        assert isinstance(t, StructType)
        return t.validate()
    fields = []
    while True:
        name = tk.name()
        fields.append(_parse_field_rest(tk, name))
        kind, val, pos = tk.next()
        if kind == "eof":
            break
        if (kind, val) != ("punct", ","):
            raise tk._err(f"expected ',' or end of input but found '{val}'", pos)
    return StructType(tuple(fields)).validate()


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
        return (table_type.scale >= data_type.scale
                and table_type.precision - table_type.scale >= data_type.precision - data_type.scale)
    if isinstance(data_type, ArrayType) and isinstance(table_type, ArrayType):
        return is_safe_upcast(data_type.element_type, table_type.element_type)
    if isinstance(data_type, MapType) and isinstance(table_type, MapType):
        return (is_safe_upcast(data_type.key_type, table_type.key_type)
                and is_safe_upcast(data_type.value_type, table_type.value_type))
    if isinstance(data_type, StructType) and isinstance(table_type, StructType):
        problems: list[str] = []
        _compare_struct(table_type, data_type, (), problems, merge=False, merged=None)
        return not problems
    return False


def _compare_struct(table: StructType, data: StructType, path: tuple[str, ...], problems: list[str],
                    *, merge: bool, merged: list | None) -> None:
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


def check_write_compatible(table_schema: StructType, data_schema: StructType, *,
                           merge_schema: bool = False) -> StructType:
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
            + ("" if merge_schema else ", or enable mergeSchema to add new columns"),
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
        for i, f in enumerate(st.fields):
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
