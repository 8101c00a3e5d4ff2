"""evaluate.py against answers Spark 4.3 (ANSI) gave for the same expressions, without a JVM.

tests/spark/test_sql_differential.py checks these (and thousands of generated ones) against Spark
live; this file pins the semantics that evaluate.py had wrong (the sign of %, substring positions,
trim, full Unicode case mapping, Spark's string casts and number spelling, short circuits) so that
`make test-unit` catches a regression too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
from airflow_delta_provider_apps.engine.expr import evaluate, parse_expression
from airflow_delta_provider_apps.engine.schema import parse_ddl

SCHEMA = parse_ddl("i INT, j INT, l BIGINT, d DOUBLE, f FLOAT, m DECIMAL(10,3), s STRING, ts TIMESTAMP")
D = decimal.Decimal


def value(text: str, **columns):
    """``text`` evaluated on one row holding ``columns`` (the others NULL)."""
    arrays = {f.name: pa.array([columns.get(f.name)], f.type.to_arrow()) for f in SCHEMA.fields}
    return evaluate(parse_expression(text, SCHEMA), pa.table(arrays)).to_pylist()[0]


@pytest.mark.parametrize(
    ("text", "columns", "spark"),
    [
        # % takes the sign of the dividend (Java), div truncates toward zero
        ("i % j", dict(i=-7, j=3), -1),
        ("i % j", dict(i=7, j=-3), 1),
        ("i % j", dict(i=-7, j=-3), -1),
        ("d % 2", dict(d=-7.5), -1.5),
        ("m % 2", dict(m=D("-7.5")), D("-1.5")),
        ("i div j", dict(i=-7, j=2), -3),
        ("i div j", dict(i=7, j=-2), -3),
        # substring: 1-based, 0 is 1, negative counts from the end, code points
        ("substring(s, 0, 2)", dict(s="hello"), "he"),
        ("substring(s, 1, 2)", dict(s="hello"), "he"),
        ("substring(s, -3, 2)", dict(s="hello"), "ll"),
        ("substring(s, -7, 3)", dict(s="hello"), "h"),
        ("substring(s, 2)", dict(s="hello"), "ello"),
        ("substring(s, 1, -1)", dict(s="hello"), ""),
        ("substring(s, 10)", dict(s="hello"), ""),
        ("substring(s, i, j)", dict(s="a😀b", i=2, j=1), "😀"),
        ("substring(s, i)", dict(s="hello"), None),
        # trim removes spaces only; length counts code points; full Unicode case mapping
        ("trim(s)", dict(s="  a b \t "), "a b \t"),
        ("length(s)", dict(s="a😀e\u0301"), 4),
        ("upper(s)", dict(s="straße ﬁ"), "STRASSE FI"),
        ("lower(s)", dict(s="İΣΑΣ"), "i̇σας"),
        # strings cast as Spark casts them: ASCII whitespace trimmed, partial dates, Java's doubles
        ("CAST(s AS INT)", dict(s=" 12 "), 12),
        ("CAST(s AS INT)", dict(s="\t+12\n"), 12),
        ("CAST(s AS DOUBLE)", dict(s="1e3"), 1000.0),
        ("CAST(s AS DOUBLE)", dict(s="1.5d"), 1.5),
        ("CAST(s AS DOUBLE)", dict(s="-inf"), -math.inf),
        ("CAST(s AS DECIMAL(10,2))", dict(s="9.999"), D("10.00")),
        ("CAST(s AS BOOLEAN)", dict(s=" true "), True),
        ("CAST(s AS BOOLEAN)", dict(s="T"), True),
        ("CAST(s AS BOOLEAN)", dict(s="yes"), True),
        ("CAST(s AS BOOLEAN)", dict(s="1"), True),
        ("CAST(s AS BOOLEAN)", dict(s="no"), False),
        ("CAST(s AS DATE)", dict(s="2026"), dt.date(2026, 1, 1)),
        ("CAST(s AS DATE)", dict(s="2026-1-2"), dt.date(2026, 1, 2)),
        ("CAST(s AS DATE)", dict(s=" 2026-01-02 10:00"), dt.date(2026, 1, 2)),
        ("CAST(s AS TIMESTAMP)", dict(s="2026-01-02 03:04:05+01:00"), dt.datetime(2026, 1, 2, 2, 4, 5, tzinfo=dt.UTC)),
        ("CAST(s AS TIMESTAMP)", dict(s="2026-01-02 3:4"), dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC)),
        # numbers and timestamps spelled as Spark spells them
        ("CAST(d AS STRING)", dict(d=1e10), "1.0E10"),
        ("CAST(d AS STRING)", dict(d=0.001), "0.001"),
        ("CAST(d AS STRING)", dict(d=9.99e-4), "9.99E-4"),
        ("CAST(d AS STRING)", dict(d=123456789.0), "1.23456789E8"),
        ("CAST(d AS STRING)", dict(d=-0.0), "-0.0"),
        ("CAST(d AS STRING)", dict(d=math.nan), "NaN"),
        ("CAST(f AS STRING)", dict(f=0.1), "0.1"),
        ("CAST(m AS STRING)", dict(m=D("0")), "0.000"),
        (
            "CAST(ts AS STRING)",
            dict(ts=dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC)),
            "2026-01-02 03:04:05.12",
        ),
        ("concat(s, d)", dict(s="x", d=1e21), "x1.0E21"),
        # numeric casts: double -> decimal via its shortest spelling, NaN -> NULL; exact decimal -> double
        ("CAST(d AS DECIMAL(10,2))", dict(d=2.675), D("2.68")),
        ("CAST(d AS DECIMAL(10,2))", dict(d=math.nan), None),
        ("CAST(m AS DOUBLE)", dict(m=D("2.675")), 2.675),
        ("CAST(CAST(l AS DOUBLE) AS BIGINT)", dict(l=2**63 - 1), 2**63 - 1),
        ("CAST(d AS INT)", dict(d=-2147483648.9), -2147483648),
        # only the rows (branches) Spark evaluates can fail
        ("CASE WHEN j <> 0 THEN i / j END", dict(i=1, j=0), None),
        ("IF(j = 0, NULL, i % j)", dict(i=1, j=0), None),
        ("j <> 0 AND i / j > 1", dict(i=1, j=0), False),
        ("j = 0 OR i / j > 1", dict(i=1, j=0), True),
        ("coalesce(i, j div 0)", dict(i=1), 1),
        ("i % j", dict(j=0), None),  # a NULL dividend: NULL, not an error
        ("CASE WHEN s = 'x' THEN CAST(s AS INT) ELSE 0 END", dict(s="abc"), 0),
        # LIKE: % and _ match any character (newlines too), \ escapes; ILIKE lower-cases both sides
        ("s LIKE 'a%b'", dict(s="a\nb"), True),
        ("s LIKE 'a\\_b'", dict(s="a_b"), True),
        ("s LIKE 'a\\_b'", dict(s="axb"), False),
        ("s LIKE 'a.b'", dict(s="axb"), False),
        ("s ILIKE 'ß%'", dict(s="ßa"), True),
    ],
)
def test_spark_answers(text, columns, spark):
    got = value(text, **columns)
    if isinstance(spark, float) and math.isnan(spark):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert got == spark and type(got) is type(spark), (text, columns, got)


@pytest.mark.parametrize(
    ("text", "columns"),
    [
        ("i % j", dict(i=1, j=0)),  # REMAINDER_BY_ZERO
        ("i / j", dict(i=1, j=0)),  # DIVIDE_BY_ZERO
        ("l div j", dict(l=-(2**63), j=-1)),  # ARITHMETIC_OVERFLOW
        ("abs(i)", dict(i=-(2**31))),
        ("CAST(s AS INT)", dict(s="1.5")),  # CAST_INVALID_INPUT: ANSI does not truncate
        ("CAST(s AS INT)", dict(s="\u00a012")),  # only ASCII whitespace is trimmed
        ("CAST(s AS BOOLEAN)", dict(s="x")),
        ("CAST(s AS TIMESTAMP)", dict(s="2026-01-02T")),
        ("CAST(s AS DATE)", dict(s="2026-02-30")),
        ("CAST(d AS INT)", dict(d=math.nan)),  # CAST_OVERFLOW
        ("CAST(m AS DECIMAL(3,1))", dict(m=D("123.456"))),  # NUMERIC_VALUE_OUT_OF_RANGE
        ("s LIKE 'a\\\\b'", dict(s="ab")),  # the escape before an ordinary character
        ("s LIKE 'a\\\\'", dict(s="ab")),  # the escape at the end
    ],
)
def test_ansi_errors(text, columns):
    with pytest.raises(InvalidPredicateError):
        value(text, **columns)
