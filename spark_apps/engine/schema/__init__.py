"""The Delta schema: model, JSON and Arrow forms, DDL parsing, write compatibility (one package).

Modules: :mod:`.types` (the model and its JSON and Arrow forms, both ways),
:mod:`.ddl` (Spark DDL via sqlglot, :func:`parse_schema`), :mod:`.compat` (enforcement on write),
:mod:`.collations` (string collations).

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
  ``struct<value: binary, metadata: binary>`` (Spark's Arrow form, ``metadata`` tagged
  ``variant: true``; files and data may hold the two in either order: :mod:`..variant`), arrays -> ``list<element>``,
  maps -> ``map<key, value>`` (Spark's Arrow field names, so mapInArrow batches line up).
* DDL (:func:`parse_ddl`, :func:`parse_type`): Spark column lists such as
  ``"id BIGINT NOT NULL, name STRING COMMENT 'x', tags ARRAY<STRING>, addr STRUCT<city: STRING>"``,
  parsed by sqlglot's Spark dialect (see the DDL section for the three Spark forms it is helped
  with) and mapped to the types above: BIGINT/LONG long, INT/INTEGER integer, SMALLINT/SHORT short,
  TINYINT/BYTE byte, FLOAT/REAL float, DOUBLE, BOOLEAN, STRING string, BINARY, DATE,
  TIMESTAMP/TIMESTAMP_LTZ timestamp (UTC-adjusted), TIMESTAMP_NTZ / TIMESTAMP WITHOUT TIME ZONE
  timestamp_ntz, DECIMAL/DEC/NUMERIC[(p[,s])] (default 10,0), VOID, VARIANT, ARRAY<t>, MAP<k, v>,
  STRUCT<name[:] t [NOT NULL] [COMMENT 's'], ...>. ``NOT NULL`` sets nullable false; ``COMMENT``
  goes to metadata ``{"comment": ...}``; ``DEFAULT expr`` to ``CURRENT_DEFAULT`` (evaluated by ``engine.defaults``);
  ``GENERATED ...`` to identity / generation metadata; ``CHAR(n)``/``VARCHAR(n)`` become ``string`` with Spark's
  ``__CHAR_VARCHAR_TYPE_STRING`` metadata (as Delta stores them). Anything else (INTERVAL,
  DATETIME, CHECK/COLLATE clauses, key constraints, ...) is an
  :class:`InvalidSchemaError` naming the column and the type or clause.
  :func:`parse_column_paths` reads comma-separated column references (``a, b.c, `x.y`.z``) with
  the same tokenizer; stats.py uses it for ``delta.dataSkippingStatsColumns``.
* Append compatibility (:func:`check_write_compatible`): see its docstring.
"""

from .compat import check_not_null, check_write_compatible, is_safe_upcast
from .ddl import parse_column_paths, parse_ddl, parse_schema, parse_type
from .types import (
    BINARY,
    BOOLEAN,
    BYTE,
    DATE,
    DOUBLE,
    FLOAT,
    INTEGER,
    LONG,
    MAX_DECIMAL_PRECISION,
    PRIMITIVE_NAMES,
    SHORT,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    VARIANT,
    VOID,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    type_from_arrow,
    type_from_json,
    type_to_json,
)

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
