"""schema.py: Delta JSON <-> model <-> Arrow, DDL parsing, validation, write compatibility."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.errors import InvalidSchemaError, SchemaMismatchError
from airflow_delta_provider_apps.engine.schema import (
    BINARY,
    BOOLEAN,
    BYTE,
    DATE,
    DOUBLE,
    FLOAT,
    INTEGER,
    LONG,
    SHORT,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    VARIANT,
    VOID,
    ArrayType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    check_not_null,
    check_write_compatible,
    is_safe_upcast,
    parse_column_paths,
    parse_ddl,
    parse_schema,
    parse_type,
    type_from_arrow,
)


def _schema_strings(conformance_root: Path) -> list[tuple[str, str]]:
    """Every metaData.schemaString in the JSON commits of the conformance corpus."""
    out = []
    for f in sorted(conformance_root.rglob("_delta_log/*.json")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if '"metaData"' in line:
                md = json.loads(line).get("metaData")
                if md and md.get("schemaString"):
                    out.append((str(f.relative_to(conformance_root)), md["schemaString"]))
    return out


def test_json_round_trip_of_every_conformance_schema(conformance_root):
    schemas = _schema_strings(conformance_root)
    assert len(schemas) > 30
    for where, s in schemas:
        d = json.loads(s)
        st_ = StructType.from_json(s)
        assert st_.to_json() == d, where
        # and the compact string form parses back to the same object
        assert StructType.from_json(st_.to_json_string()) == st_, where


def test_column_mapping_metadata_kept(conformance_root):
    s = dict(_schema_strings(conformance_root))
    cm = [v for k, v in s.items() if "columnmapping-mode-name" in k][0]
    st_ = StructType.from_json(cm)
    f = st_.fields[0]
    assert f.physical_name.startswith("col-") and f.physical_name != f.name
    assert isinstance(f.field_id, int)


def test_to_arrow_type_mapping():
    st_ = parse_ddl(
        "a STRING, b BIGINT, c INT, d SMALLINT, e TINYINT, f FLOAT, g DOUBLE, h BOOLEAN, i BINARY, j DATE, "
        "k TIMESTAMP, l TIMESTAMP_NTZ, m DECIMAL(10,2), n VOID, o ARRAY<INT>, p MAP<STRING, DOUBLE>, "
        "q STRUCT<x: INT NOT NULL, y: ARRAY<STRUCT<z: STRING>>>"
    )
    sch = st_.to_arrow_schema()
    assert sch.field("a").type == pa.string()
    assert [sch.field(c).type for c in "bcde"] == [pa.int64(), pa.int32(), pa.int16(), pa.int8()]
    assert sch.field("f").type == pa.float32() and sch.field("g").type == pa.float64()
    assert sch.field("h").type == pa.bool_() and sch.field("i").type == pa.binary()
    assert sch.field("j").type == pa.date32()
    assert sch.field("k").type == pa.timestamp("us", tz="UTC")
    assert sch.field("l").type == pa.timestamp("us")
    assert sch.field("m").type == pa.decimal128(10, 2)
    assert sch.field("n").type == pa.null()
    assert sch.field("o").type == pa.list_(pa.field("element", pa.int32()))
    assert sch.field("p").type == pa.map_(pa.string(), pa.float64())
    q = sch.field("q").type
    assert q.field("x").nullable is False and q.field("x").type == pa.int32()
    assert q.field("y").type.value_type == pa.struct([("z", pa.string())])
    # and back
    assert StructType.from_arrow(sch) == st_


def test_from_arrow_variants():
    sch = pa.schema(
        [
            ("s", pa.large_string()),
            ("b", pa.large_binary()),
            ("fb", pa.binary(4)),
            ("u8", pa.uint8()),
            ("u32", pa.uint32()),
            ("d64", pa.date64()),
            ("tsn", pa.timestamp("ns")),
            ("tsz", pa.timestamp("ms", tz="Europe/Paris")),
            ("dict", pa.dictionary(pa.int32(), pa.string())),
            ("ll", pa.large_list(pa.int64())),
            ("d256", pa.decimal256(20, 3)),
        ]
    )
    st_ = StructType.from_arrow(sch)
    assert [f.type for f in st_] == [
        STRING,
        BINARY,
        BINARY,
        SHORT,
        LONG,
        DATE,
        TIMESTAMP_NTZ,
        TIMESTAMP,
        STRING,
        ArrayType(LONG, True),
        DecimalType(20, 3),
    ]
    with pytest.raises(InvalidSchemaError) as e:
        type_from_arrow(pa.time64("us"), "t")
    assert "'t'" in e.value.problem and e.value.fix


def test_ddl_parse_example():
    st_ = parse_ddl(
        "id BIGINT NOT NULL, name STRING COMMENT 'x', price DECIMAL(10,2), tags ARRAY<STRING>, "
        "attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip: INT>, ts TIMESTAMP, d DATE"
    )
    assert st_.to_json() == {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {"comment": "x"}},
            {"name": "price", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "attrs",
                "type": {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True},
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "addr",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"name": "city", "type": "string", "nullable": True, "metadata": {}},
                        {"name": "zip", "type": "integer", "nullable": True, "metadata": {}},
                    ],
                },
                "nullable": True,
                "metadata": {},
            },
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "d", "type": "date", "nullable": True, "metadata": {}},
        ],
    }


@pytest.mark.parametrize(
    "ddl,expected",
    [
        ("a int", INTEGER),
        ("a INTEGER", INTEGER),
        ("a bigint", LONG),
        ("a Long", LONG),
        ("a SMALLINT", SHORT),
        ("a short", SHORT),
        ("a TINYINT", BYTE),
        ("a byte", BYTE),
        ("a REAL", FLOAT),
        ("a float", FLOAT),
        ("a DOUBLE", DOUBLE),
        ("a boolean", BOOLEAN),
        ("a binary", BINARY),
        ("a date", DATE),
        ("a timestamp", TIMESTAMP),
        ("a timestamp_ntz", TIMESTAMP_NTZ),
        ("a TIMESTAMP_LTZ", TIMESTAMP),
        ("a decimal", DecimalType(10, 0)),
        ("a DECIMAL(38, 18)", DecimalType(38, 18)),
        ("a numeric(5)", DecimalType(5, 0)),
        ("a void", VOID),
        ("a struct<>", StructType(())),
    ],
)
def test_ddl_type_names(ddl, expected):
    assert parse_ddl(ddl).fields[0].type == expected


def test_ddl_details():
    st_ = parse_ddl(
        "`my col` STRING, `a``b` INT, s STRUCT<`x.y` INT NOT NULL COMMENT 'n', z ARRAY<MAP<STRING, "
        "ARRAY<INT>>>>, v VARCHAR(10), c CHAR(2) NOT NULL"
    )
    assert st_.names == ["my col", "a`b", "s", "v", "c"]
    s = st_.field("s").type
    assert s.field("x.y").nullable is False and s.field("x.y").comment == "n"
    assert s.field("z").type == ArrayType(MapType(STRING, ArrayType(INTEGER)))
    assert st_.field("v").type == STRING and st_.field("v").metadata == {"__CHAR_VARCHAR_TYPE_STRING": "varchar(10)"}
    assert st_.field("c").nullable is False
    # a top-level struct<...> string is accepted too
    assert parse_ddl("struct<a: int, b: string>").names == ["a", "b"]
    assert parse_type("array<decimal(4,1)>") == ArrayType(DecimalType(4, 1))


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("id BIGINT, ID STRING", "Duplicate column name"),
        ("s STRUCT<a: INT, A: INT>", "Duplicate column name 's.A'"),
        ("p DECIMAL(39,2)", "decimal(39,2)"),
        ("p DECIMAL(5,6)", "decimal(5,6)"),
        ("x FOO", "unknown type 'FOO'"),
        ("x INT,", "expected a column name"),
        ("x ARRAY<INT", "Expecting >"),
        ("`x INT", "unterminated"),
        ("x INT COMMENT 5", "COMMENT must be followed"),
        ("", "empty"),
    ],
)
def test_ddl_errors(bad, needle):
    with pytest.raises(InvalidSchemaError) as e:
        parse_ddl(bad)
    assert needle in str(e.value)
    assert e.value.fix  # problem / cause / fix


def test_ddl_spark_forms_and_synonyms():
    # VOID, STRUCT<> and TIMESTAMP WITHOUT TIME ZONE are the forms sqlglot's Spark dialect is helped with
    st_ = parse_ddl(
        "a VOID, b STRUCT<>, c MAP<STRING, STRUCT<>>, d TIMESTAMP WITHOUT TIME ZONE, e timestamp_ltz, "
        "f VARIANT, g DEC(4,1), h CHARACTER VARYING(3), i CHARACTER(2), j STRING NULL, k text, l bool, "
        "m ARRAY<STRUCT<>> NOT NULL, n timestamp without time zone NOT NULL"
    )
    assert [f.type for f in st_] == [
        VOID,
        StructType(()),
        MapType(STRING, StructType(())),
        TIMESTAMP_NTZ,
        TIMESTAMP,
        VARIANT,
        DecimalType(4, 1),
        STRING,
        STRING,
        STRING,
        STRING,
        BOOLEAN,
        ArrayType(StructType(())),
        TIMESTAMP_NTZ,
    ]
    assert st_.field("h").metadata == {"__CHAR_VARCHAR_TYPE_STRING": "varchar(3)"}
    assert st_.field("i").metadata == {"__CHAR_VARCHAR_TYPE_STRING": "char(2)"}
    assert st_.field("j").nullable is True  # an explicit NULL is the default, not NOT NULL
    assert [f.name for f in st_ if not f.nullable] == ["m", "n"]
    # and these print back to DDL that parses to the same schema
    assert parse_ddl(st_.to_ddl()) == st_


def test_ddl_keyword_names_comments_and_layout():
    st_ = parse_ddl(
        "timestamp TIMESTAMP, date DATE, key STRING, value INT, order INT, true INT,\n"
        "  s STRUCT<key: STRING, type STRING NOT NULL COMMENT 'k', `select`: INT>, -- a SQL comment\n"
        "  `select` INT /* another */, c STRING COMMENT 'it\\'s \"q\" \\\\ done', `a,b` INT"
    )
    assert st_.names == ["timestamp", "date", "key", "value", "order", "true", "s", "select", "c", "a,b"]
    assert [f.type for f in st_][:6] == [TIMESTAMP, DATE, STRING, INTEGER, INTEGER, INTEGER]
    s = st_.field("s").type
    assert s.names == ["key", "type", "select"] and s.field("type").nullable is False
    assert s.field("type").comment == "k"
    assert st_.field("c").comment == 'it\'s "q" \\ done'


@pytest.mark.parametrize(
    "bad,needles",
    [
        ("x INT DEFAULT 5 DEFAULT 6", ["'x'", "DEFAULT 6"]),  # one DEFAULT
        ("s STRUCT<y: INT GENERATED ALWAYS AS (1)>", ["'s.y'", "GENERATED ALWAYS AS (1)"]),
        ("x INT CHECK (x > 0)", ["'x'", "CHECK"]),
        ("x INT COLLATE UTF8_LCASE", ["'x'", "COLLATE UTF8_LCASE"]),
        ("x INT COMMENT 'a' COMMENT 'b'", ["'x'", "COMMENT 'b'"]),
        ("x INTERVAL DAY", ["'x'", "INTERVAL DAY", "interval"]),
        ("a ARRAY<INTERVAL YEAR TO MONTH>", ["'a.element'", "INTERVAL"]),
        ("x DATETIME", ["'x'", "DATETIME"]),
        ("x INT UNSIGNED", ["'x'", "UINT"]),
        ("x TIMESTAMP(6)", ["'x'", "TIMESTAMP(6)", "no parameters"]),
        ("x VARCHAR", ["'x'", "VARCHAR", "length"]),
        ("x DECIMAL(a)", ["'x'", "DECIMAL(A)"]),
        ("m MAP<STRING, FOO>", ["unknown type 'FOO'"]),
        ("s STRUCT<a: BAR>", ["unknown type 'BAR' for column 'a'"]),
        ("x INT, y", ["column 'y' has no type"]),
        ("select INT", ["'select' is a reserved SQL word", "backquote"]),
        ("INT, STRING", ["expected a column name", "'INT'"]),
        ("x INT, PRIMARY KEY (x)", ["'PRIMARY KEY'"]),
        ("x STRUCT<a INT,>", ["expected a column name"]),
        ("a INT,\n b ARRAY<", ["ends too early"]),
        ("x INT, s STRUCT<a: INT, `A`: INT>", ["Duplicate column name 's.A'"]),
        ("-- just a comment", ["empty"]),
    ],
)
def test_ddl_unsupported_constructs_name_the_column(bad, needles):
    with pytest.raises(InvalidSchemaError) as e:
        parse_ddl(bad)
    for needle in needles:
        assert needle in str(e.value), (bad, needle, str(e.value))
    assert e.value.fix


def test_parse_type_errors():
    with pytest.raises(InvalidSchemaError, match="unknown type 'FOO'"):
        parse_type("FOO")
    with pytest.raises(InvalidSchemaError, match="decimal\\(40,1\\)"):
        parse_type("MAP<STRING, DECIMAL(40,1)>")
    assert parse_type("map<string, struct<a: timestamp_ntz>>") == MapType(
        STRING, StructType((StructField("a", TIMESTAMP_NTZ),))
    )


def test_parse_column_paths():
    assert parse_column_paths("a, b.c, `x.y`.z") == [("a",), ("b", "c"), ("x.y", "z")]
    assert parse_column_paths(" `we``ird`.X ,, date.key , `a,b`.c.d.e.f ") == [
        ("we`ird", "X"),
        ("date", "key"),
        ("a,b", "c", "d", "e", "f"),
    ]
    assert parse_column_paths("") == []
    for bad, needle in [
        ("a..b", "'.'"),
        ("a b", "'b'"),
        ("true", "'true' is not a column name"),
        ("`a", "unterminated"),
        ("select", "'select'"),
    ]:
        with pytest.raises(InvalidSchemaError) as e:
            parse_column_paths(bad)
        assert needle in str(e.value), (bad, str(e.value))


def test_engine_import_leaves_sqlglot_unloaded():
    # sqlglot (~0.14 s to import) is loaded on the first DDL parse, not by importing the engine
    code = (
        "import sys, airflow_delta_provider_apps.engine, airflow_delta_provider_apps.engine.schema as s; assert 'sqlglot' not in sys.modules; "
        "s.parse_ddl('a INT'); assert 'sqlglot' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_json_validation_errors():
    with pytest.raises(InvalidSchemaError, match="Duplicate"):
        StructType.from_json(
            {
                "type": "struct",
                "fields": [
                    {"name": "a", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "A", "type": "long", "nullable": True, "metadata": {}},
                ],
            }
        )
    with pytest.raises(InvalidSchemaError, match="decimal"):
        StructType.from_json(
            '{"type":"struct","fields":[{"name":"a","type":"decimal(40,1)","nullable":true,"metadata":{}}]}'
        )
    with pytest.raises(InvalidSchemaError, match="Unknown data type 'uuid'"):
        StructType.from_json(
            {"type": "struct", "fields": [{"name": "a", "type": "uuid", "nullable": True, "metadata": {}}]}
        )
    with pytest.raises(InvalidSchemaError, match="not valid JSON"):
        StructType.from_json("{nope")
    with pytest.raises(InvalidSchemaError, match="must be a struct"):
        StructType.from_json('"long"')


def test_parse_schema_accepts_all_forms():
    ddl = "id BIGINT, name STRING"
    st_ = parse_schema(ddl)
    assert parse_schema(st_.to_json()) == st_
    assert parse_schema(st_.to_json_string()) == st_
    assert parse_schema("  " + json.dumps(st_.to_json())) == st_
    assert parse_schema(st_) is not None
    assert parse_schema(pa.schema([("id", pa.int64()), ("name", pa.string())])) == st_
    with pytest.raises(InvalidSchemaError):
        parse_schema(42)


def test_field_lookup_and_leaves():
    st_ = parse_ddl("Id INT, a STRUCT<b: STRUCT<c: INT, d: ARRAY<INT>>, e: STRING>, f MAP<STRING, INT>")
    assert st_.field("id").name == "Id" and st_.field("Id").name == "Id"
    assert "ID" in st_ and "nope" not in st_
    with pytest.raises(KeyError):
        st_.field("nope")
    assert [p for p, _ in st_.leaf_fields()] == [("Id",), ("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("f",)]


def test_is_safe_upcast():
    assert is_safe_upcast(BYTE, LONG) and is_safe_upcast(INTEGER, LONG) and not is_safe_upcast(LONG, INTEGER)
    assert is_safe_upcast(FLOAT, DOUBLE) and not is_safe_upcast(DOUBLE, FLOAT)
    assert is_safe_upcast(INTEGER, DOUBLE) and not is_safe_upcast(LONG, DOUBLE)
    assert is_safe_upcast(DecimalType(5, 2), DecimalType(7, 3)) and not is_safe_upcast(
        DecimalType(5, 2), DecimalType(5, 3)
    )
    assert is_safe_upcast(INTEGER, DecimalType(12, 2)) and not is_safe_upcast(LONG, DecimalType(12, 2))
    assert is_safe_upcast(VOID, TIMESTAMP)
    assert not is_safe_upcast(TIMESTAMP, TIMESTAMP_NTZ)  # a zone cannot be dropped silently
    assert is_safe_upcast(TIMESTAMP_NTZ, TIMESTAMP)  # store assignment: read in the session time zone
    assert not is_safe_upcast(STRING, INTEGER) and not is_safe_upcast(INTEGER, STRING)
    assert is_safe_upcast(ArrayType(INTEGER), ArrayType(LONG)) and not is_safe_upcast(
        ArrayType(LONG), ArrayType(INTEGER)
    )


def test_check_write_compatible():
    table = parse_ddl("id BIGINT NOT NULL, name STRING, s STRUCT<a: INT, b: STRING NOT NULL>")
    # same schema, case-insensitive names, narrower ints, omitted nullable column
    assert check_write_compatible(table, parse_ddl("ID INT NOT NULL, s STRUCT<A: INT, b: STRING>")) is table
    with pytest.raises(SchemaMismatchError) as e:
        check_write_compatible(table, parse_ddl("name INT, extra DOUBLE, s STRUCT<a: STRING, c: INT>"))
    msg = str(e.value)
    assert "missing non-nullable column 'id'" in msg
    assert "'name' has type int in the data but string in the table" in msg
    assert "extra column 'extra'" in msg
    assert "'s.a' has type string" in msg
    assert "missing non-nullable column 's.b'" in msg
    assert "extra column 's.c'" in msg
    assert "merge_schema=True" in msg
    merged = check_write_compatible(
        table, parse_ddl("id BIGINT, extra DOUBLE NOT NULL, s STRUCT<b: STRING, c: INT>"), merge_schema=True
    )
    assert merged.names == ["id", "name", "s", "extra"]
    assert merged.field("extra").nullable is True  # new columns are nullable (old rows have none)
    assert merged.field("s").type.names == ["a", "b", "c"]
    assert merged.field("id").nullable is False  # table definition wins


def test_check_not_null():
    table = parse_ddl("id BIGINT NOT NULL, s STRUCT<a: INT NOT NULL>, t STRING")
    good = pa.table({"id": [1, 2], "s": pa.array([{"a": 1}, None], pa.struct([("a", pa.int32())]))})
    check_not_null(table, good)  # a null parent struct does not make its NOT NULL child a violation
    bad = pa.table({"ID": [1, None], "s": pa.array([{"a": None}, {"a": 2}], pa.struct([("a", pa.int32())]))})
    with pytest.raises(SchemaMismatchError) as e:
        check_not_null(table, bad)
    assert "'id' has 1 null value(s)" in str(e.value) and "'s.a' has 1 null value(s)" in str(e.value)
    with pytest.raises(SchemaMismatchError, match="'id' is missing"):
        check_not_null(table, pa.table({"t": ["x"]}))


# ------------------------------------------------------------------------------------------
# property tests

_names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=8
)
_prims = st.sampled_from(
    [STRING, LONG, INTEGER, SHORT, BYTE, FLOAT, DOUBLE, BOOLEAN, BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ]
) | st.builds(lambda p, s: DecimalType(p, min(s, p)), st.integers(1, 38), st.integers(0, 38))


def _types(ddl_safe: bool):
    def extend(children):
        b = st.booleans() if not ddl_safe else st.just(True)
        return (
            st.builds(ArrayType, children, b) | st.builds(MapType, _prims, children, b) | _structs(children, ddl_safe)
        )

    return st.recursive(_prims, extend, max_leaves=8)


def _structs(children, ddl_safe: bool):
    md = st.just({}) | st.builds(lambda c: {"comment": c}, st.text(max_size=10))
    if not ddl_safe:
        md = md | st.just(
            {"delta.columnMapping.id": 5, "delta.columnMapping.physicalName": "col-x", "x": [1, {"y": None}]}
        )

    def build(entries):
        seen, fields = set(), []
        for name, t, nullable, m in entries:
            if name.lower() in seen:
                continue
            seen.add(name.lower())
            fields.append(StructField(name, t, nullable, m))
        return StructType(tuple(fields))

    return st.lists(st.tuples(_names, children, st.booleans(), md), min_size=1, max_size=5).map(build)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_structs(_types(False), False))
def test_property_json_round_trip(schema):
    assert StructType.from_json(json.loads(json.dumps(schema.to_json()))) == schema


def _strip(t):
    if isinstance(t, StructType):
        return StructType(tuple(StructField(f.name, _strip(f.type), f.nullable, {}) for f in t.fields))
    if isinstance(t, ArrayType):
        return ArrayType(_strip(t.element_type), t.contains_null)
    if isinstance(t, MapType):
        return MapType(_strip(t.key_type), _strip(t.value_type), t.value_contains_null)
    return t


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_structs(_types(False), False))
def test_property_arrow_round_trip(schema):
    assert StructType.from_arrow(schema.to_arrow_schema()) == _strip(schema)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_structs(_types(True), True))
def test_property_ddl_round_trip(schema):
    assert parse_ddl(schema.to_ddl()) == schema


def test_primitive_type_rejects_unknown():
    with pytest.raises(InvalidSchemaError):
        PrimitiveType("int")


def test_the_one_schema_walker():
    from airflow_delta_provider_apps.engine.schema.types import walk

    st = parse_ddl("a INT, s STRUCT<b: ARRAY<STRUCT<c: STRING>>, m: MAP<STRING, INT>>")
    paths = [p for p, _, _ in walk(st)]
    assert paths == [
        (),
        ("a",),
        ("s",),
        ("s", "b"),
        ("s", "b", "element"),
        ("s", "b", "element", "c"),
        ("s", "m"),
        ("s", "m", "key"),
        ("s", "m", "value"),
    ]
    assert [p for p, _, _ in walk(st, into_collections=False)] == [(), ("a",), ("s",), ("s", "b"), ("s", "m")]
    assert [p for p, _ in st.leaf_fields()] == [("a",), ("s", "b"), ("s", "m")]
    with pytest.raises(InvalidSchemaError, match="Duplicate column name 's.b.element.C'"):
        parse_ddl("s STRUCT<b: ARRAY<STRUCT<c: STRING, C: INT>>>")


def test_the_merge_schema_hint_appears_only_for_extra_columns():
    from airflow_delta_provider_apps.engine.errors import SchemaMismatchError
    from airflow_delta_provider_apps.engine.schema import parse_schema
    from airflow_delta_provider_apps.engine.schema.compat import check_write_compatible

    table = parse_schema("id BIGINT, name STRING")
    with pytest.raises(SchemaMismatchError) as type_only:
        check_write_compatible(table, parse_schema("id STRING, name STRING"))
    assert "merge_schema" not in type_only.value.fix  # it would not help: it adds columns, not types
    with pytest.raises(SchemaMismatchError) as extra:
        check_write_compatible(table, parse_schema("id BIGINT, name STRING, email STRING"))
    assert "merge_schema=True" in extra.value.fix
