"""Spark 4's string literals and long or deep predicates, without a JVM.

The expected values were read off Spark 4.3 itself (``spark.sql("SELECT <literal>")``); the differential
test (tests/spark/test_sql_differential.py) keeps checking our reading against a live Spark.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
from airflow_delta_provider_apps.engine.expr import evaluate, parse_expression, parse_predicate, to_sql
from airflow_delta_provider_apps.engine.expr.literals import extract_strings
from airflow_delta_provider_apps.engine.expr.parse import MAX_DEPTH, depth
from airflow_delta_provider_apps.engine.expr.skipping import skip_files
from airflow_delta_provider_apps.engine.schema import parse_ddl

SCHEMA = parse_ddl("i BIGINT, s STRING, d DATE")

# literal text -> the string Spark 4.3 returns for SELECT <literal>
SPARK_READS = [
    (r"'O''Brien'", "O'Brien"),
    (r"'a' 'b'", "ab"),
    (r"'a''b''c'", "a'b'c"),
    (r"''''", "'"),
    (r"'it\'s'", "it's"),
    (r"'a\nb'", "a\nb"),
    (r"'a\tb'", "a\tb"),
    (r"'\u0041'", "A"),
    (r"'\U0001F600'", "\U0001f600"),
    (r"'\uD83D\uDE00'", "\U0001f600"),
    (r"'\uD83D'", "?"),
    (r"'\101'", "A"),
    (r"'\012'", "\n"),
    (r"'\1234'", "S4"),
    (r"'\377'", "377"),
    (r"'\019'", "\x0019"),
    (r"'\x41'", "x41"),
    (r"'\%'", "\\%"),
    (r"'\_'", "\\_"),
    (r"'\\'", "\\"),
    (r"'\\%'", "\\%"),
    (r"'\Z'", "\x1a"),
    (r"'\0'", "\x00"),
    (r"'\b'", "\b"),
    (r"'\q'", "q"),
    (r"'\u00'", "u00"),
    (r"'\uZZZZ'", "uZZZZ"),
    (r"'\U0001F60'", "U0001F60"),
    (r'"dq"', "dq"),
    (r'"d""q"', 'd"q'),
    (r'"a\"b"', 'a"b'),
    (r"""\"''\"""".replace("\\", ""), "''"),
    (r"""'""'""", '""'),
    (r"r'a\nb'", "a\\nb"),
    (r"R'a\'", "a\\"),
    (r"r'a''b'", "ab"),
    (r'r"x\y"', "x\\y"),
    (r"'a' r'\n'", "a\\n"),
    ("'é😀'", "é😀"),
]


@pytest.mark.parametrize("literal, value", SPARK_READS)
def test_string_literals_read_as_spark_reads_them(literal, value):
    e = parse_predicate(f"s = {literal}", SCHEMA)
    assert e.right.value == value
    # and the rendering Spark is given reads back to the same value
    assert parse_predicate(to_sql(e), SCHEMA).right.value == value


def test_doubled_quotes_select_the_right_row_and_set_the_right_value():
    t = pa.table({"i": [1, 2], "s": ["O'Brien", "OBrien"], "d": pa.array([None, None], pa.date32())})
    assert evaluate(parse_predicate("s = 'O''Brien'", SCHEMA), t).to_pylist() == [True, False]
    assert evaluate(parse_expression("'it''s'", SCHEMA), t).to_pylist() == ["it's", "it's"]


def test_quotes_inside_names_comments_and_hex_literals_are_not_strings():
    schema = parse_ddl("`it's` STRING, b BINARY")
    assert parse_predicate("`it's` = 'x' -- don't\n", schema).left.name == "it's"
    assert parse_predicate("b = X'41' /* 'a' */", schema).right.value == b"A"
    lexed = extract_strings("a = 'x' AND `q'` = \"y\"")
    assert list(lexed.strings.values()) == ["x", "y"]


@pytest.mark.parametrize("text", ["s = 'abc", 's = "abc', "`s = 'a'", "s = 'a\\'"])
def test_unterminated_quotes_are_clear_errors(text):
    with pytest.raises(InvalidPredicateError, match="unterminated"):
        parse_predicate(text, SCHEMA)


def test_messages_show_the_literals_as_written():
    with pytest.raises(InvalidPredicateError, match="'O''Brien'"):
        parse_predicate("d = 'O''Brien'", SCHEMA)


def _rows(n=5):
    return pa.table({"i": list(range(n)), "s": [f"v{k}" for k in range(n)], "d": pa.array([None] * n, pa.date32())})


# a minus sign before a number is part of the literal in Spark's grammar (typeof read off Spark 4.3)
SIGNED_NUMBERS = [
    ("-2147483648", -(2**31), "integer"),
    ("- 2147483648", -(2**31), "integer"),
    ("-2147483649", -(2**31) - 1, "long"),
    ("-(2147483648)", -(2**31), "long"),  # a bigint literal negated
    ("-9223372036854775808", -(2**63), "long"),
    ("-9223372036854775808L", -(2**63), "long"),
    ("-128Y", -128, "byte"),
    ("-32768S", -32768, "short"),
]


@pytest.mark.parametrize("text, value, type_name", SIGNED_NUMBERS)
def test_a_minus_sign_belongs_to_the_number_literal(text, value, type_name):
    e = parse_expression(text, SCHEMA)
    assert (e.value, e.type.name) == (value, type_name)
    assert parse_expression(to_sql(e), SCHEMA) == e


def test_negating_the_smallest_int_overflows_when_evaluated():
    e = parse_expression("-(-2147483648)", SCHEMA)  # Spark: ARITHMETIC_OVERFLOW
    with pytest.raises(Exception, match="(?i)overflow"):
        evaluate(e, pa.table({"i": pa.array([1], pa.int64())}))


@pytest.mark.parametrize("terms", [50, 300, 5000])
def test_long_or_chains_bind_flat_and_evaluate(terms):
    text = " OR ".join(f"i = {k}" for k in range(1, terms + 1))
    e = parse_predicate(text, SCHEMA)
    assert depth(e) == 3  # Or -> Compare -> Column, however long the chain
    assert evaluate(e, _rows()).to_pylist() == [False, True, True, True, True]
    again = parse_predicate(to_sql(e), SCHEMA)  # the rendering is flat too, and the same tree
    assert repr(again) == repr(e)


def test_large_in_lists_bind_and_evaluate():
    e = parse_predicate("i IN (" + ", ".join(str(k) for k in range(2, 10_002)) + ")", SCHEMA)
    assert len(e.values) == 10_000
    assert evaluate(e, _rows()).to_pylist() == [False, False, True, True, True]
    e = parse_predicate("s NOT IN (" + ", ".join(f"'v{k}'" for k in range(3, 5_003)) + ")", SCHEMA)
    assert evaluate(e, _rows()).to_pylist() == [True, True, True, False, False]


def _nested(levels: int) -> str:
    text = "i = 0"
    for k in range(levels):
        text = f"(i = {k + 1} {'OR' if k % 2 else 'AND'} {text})"
    return text


@pytest.mark.parametrize("levels", [60, MAX_DEPTH - 2])
def test_deep_nesting_works_through_every_consumer(levels):
    e = parse_predicate(_nested(levels), SCHEMA)
    rows = _rows()
    got = evaluate(e, rows).to_pylist()

    def matches(i: int) -> bool:  # the same predicate evaluated by Python's own logic
        v = i == 0
        for k in range(levels):
            v = (i == k + 1 or v) if k % 2 else (i == k + 1 and v)
        return v

    assert got == [matches(i) for i in rows.column("i").to_pylist()]
    assert repr(parse_predicate(to_sql(e), SCHEMA)) == repr(e)
    assert repr(pickle.loads(pickle.dumps(e))) == repr(e)  # what Spark tasks receive
    # the skipping rewrite walks it too: a file whose stats hold only a matching value is kept
    from airflow_delta_provider_apps.engine.log.file_actions import FILE_SCHEMA

    hit = next(i for i in range(levels + 1) if matches(i))
    stats = f'{{"numRecords": 1, "minValues": {{"i": {hit}}}, "maxValues": {{"i": {hit}}}, "nullCount": {{"i": 0}}}}'
    one_file = pa.Table.from_pylist([{"path": "a.parquet", "size": 1, "stats": stats}], schema=FILE_SCHEMA)
    assert skip_files(one_file, SCHEMA, [], e).files.num_rows == 1


@pytest.mark.parametrize(
    "text",
    [
        "(" * (MAX_DEPTH + 1) + "i = 1" + ")" * (MAX_DEPTH + 1),
        _nested(MAX_DEPTH + 10),
        "NOT " * 5000 + "i = 1",
        "i = " + " + ".join(["i"] * 3000),
        "i = " + "- " * 5000 + "1",
    ],
)
def test_too_deep_is_a_clear_error_never_a_recursion_error(text):
    with pytest.raises(InvalidPredicateError) as e:
        parse_predicate(text, SCHEMA)
    assert "nested too deeply" in str(e.value) and f"{MAX_DEPTH} levels" in str(e.value)
    assert len(str(e.value)) < 1000  # the message clips the text
