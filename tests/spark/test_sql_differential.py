"""Differential test: our predicate/expression engine against Spark SQL itself.

Hypothesis generates rows (NULLs, NaN, +-Inf, extreme integers, quotes, backslashes, non-BMP text)
and Spark SQL TEXT (tests/spark_sql_strategies.py): predicates, values and UPDATE assignments using
every construct the README lists, literals spelled the ways Spark 4 accepts them, long IN lists and
long AND/OR chains. For each example the same rows go to

* Spark: a DataFrame with an explicit schema; ``df.filter(text)`` for predicates (which rows),
  ``df.selectExpr(text)`` for values (and the result TYPE Spark reports); for UPDATE values Spark's
  ANSI store assignment (``Cast.canANSIStoreAssign`` from the JVM, then the ANSI ``CAST`` to the
  column type that an INSERT / UPDATE adds);
* ours: ``parse_predicate`` / ``parse_expression`` / ``bind_assignments`` + ``evaluate`` on the same
  rows as a pyarrow table;

and must select the same rows, compute the same values of the same type (floats with a tolerance,
NaN equal to NaN), or BOTH refuse (Spark: AnalysisException / ParseException, or an ANSI error at run
time such as DIVIDE_BY_ZERO, CAST_INVALID_INPUT, ARITHMETIC_OVERFLOW; ours: a DeltaError, normally
InvalidPredicateError). Anything else we raise is a crash, and a finding. Every predicate is also
compared as a value (TRUE / FALSE / NULL per row, not only the rows kept).

The DataFrames are local relations, which Spark evaluates row by row without constant folding: the
semantics our evaluator follows (an error is raised only for rows that evaluate the failing part).

Batching: one selectExpr of all the values, one filter over K copies of the rows for K predicates
(a CASE on the copy number picks the predicate; CASE evaluates only the branch taken); a batch Spark
refuses is split in halves until the refusing expressions are found; expressions we refuse go to
Spark one by one.

``test_differential_short`` runs in ``make test`` (a fixed sample, DIFFERENTIAL_SHORT_EXAMPLES, default 20, ~700
expressions: 20-45 s once the JVM is up); ``test_differential_long`` (marker ``differential``, deselected by default:
``pytest -m differential tests/spark/test_sql_differential.py``, DIFFERENTIAL_EXAMPLES, default 1000)
runs thousands of expressions. Known gaps of parse.py / sql.py (the lead is rewriting them) are kept
out of the generator (``TODO(lead)`` in the strategies) or classified by :func:`known_gap`, and each
is pinned below as an ``xfail`` repro.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import os
import re
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from spark_sql_strategies import (
    SCHEMA,
    assignments,
    long_chains,
    predicates,
    rows,
    table_of,
    values_with_decimals,
)

from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.expr import bind_assignments, evaluate, parse_expression, parse_predicate
from airflow_delta_provider_apps.engine.expr.evaluate import true_mask

pytestmark = pytest.mark.spark

RID = "__rid"
COPY = "__copy"
STORE_REFUSED = "refused by Spark's ANSI store assignment"


# ---- outcomes ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one side made of one expression: values (one per row) of a type, a row set, or a refusal
    (``type`` is then the type the expression has, when it got that far)."""

    values: list | None = None
    type: str | None = None
    refused: str | None = None  # the error class and first line
    crashed: bool = False  # ours raised something other than a DeltaError

    @property
    def ok(self) -> bool:
        return self.refused is None


@dataclass
class Case:
    kind: str  # "predicate" | "value" | "update"
    text: str
    column: str | None = None  # updates: the column assigned
    ours: Outcome = field(default_factory=Outcome)
    spark: Outcome = field(default_factory=Outcome)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


# ---- our side --------------------------------------------------------------------------------------------


def ours(case: Case, table: pa.Table) -> Outcome:
    expr = None
    try:
        if case.kind == "predicate":
            expr = parse_predicate(case.text, SCHEMA)
            mask = true_mask(expr, table).to_pylist()
            return Outcome(values=[k for k, hit in enumerate(mask) if hit], type="rows")
        if case.kind == "update":
            expr = bind_assignments({case.column: case.text}, SCHEMA)[SCHEMA.field(case.column).name]
        else:
            expr = parse_expression(case.text, SCHEMA)
        got = evaluate(expr, table)
        return Outcome(values=got.to_pylist(), type=expr.type.simple_string())
    except DeltaError as e:
        return Outcome(refused=_first_line(e), type=None if expr is None else expr.type.simple_string())
    except Exception as e:  # a crash is a finding, reported with the rest
        return Outcome(refused=_first_line(e), crashed=True)


# ---- Spark's side ----------------------------------------------------------------------------------------


def _spark_error(e: BaseException) -> bool:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(e, (PySparkException, Py4JError))


def _with_id(table: pa.Table) -> pa.Table:
    return table.append_column(RID, pa.array(range(table.num_rows), pa.int64()))


class SparkSide:
    def __init__(self, spark):
        self.spark = spark
        jvm = spark._jvm
        self._ddl = jvm.org.apache.spark.sql.types.DataType.fromDDL
        self._cast = jvm.org.apache.spark.sql.catalyst.expressions.Cast

    def frame(self, table: pa.Table):
        return self.spark.createDataFrame(_with_id(table))

    def type_of(self, df, text: str) -> str | None:
        try:
            return df.selectExpr(text).schema.fields[0].dataType.simpleString()
        except Exception as e:
            if not _spark_error(e):
                raise
            return None

    # values: one selectExpr of every text, split in halves when Spark refuses the batch
    def values(self, df, texts: list[str]) -> list[Outcome]:
        if not texts:
            return []
        try:
            out = df.selectExpr(RID, *[f"{t} AS `c{k}`" for k, t in enumerate(texts)])
            types = [f.dataType.simpleString() for f in out.schema.fields[1:]]
            got = out.toArrow().sort_by(RID)
        except Exception as e:
            if not _spark_error(e):
                raise
            if len(texts) == 1:
                return [Outcome(refused=_first_line(e), type=self.type_of(df, texts[0]))]
            half = len(texts) // 2
            return self.values(df, texts[:half]) + self.values(df, texts[half:])
        return [Outcome(values=got.column(k + 1).to_pylist(), type=types[k]) for k in range(len(texts))]

    # predicates: ONE filter over K copies of the rows (a local relation too), copy k filtered by
    # predicate k through a CASE on the copy number; a single predicate is df.filter(text) as it is
    def filters(self, table: pa.Table, texts: list[str]) -> list[Outcome]:
        if not texts:
            return []
        try:
            if len(texts) == 1:
                kept = self.frame(table).filter(texts[0]).select(RID).toArrow().to_pylist()
                got = [{COPY: 0, RID: r[RID]} for r in kept]
            else:
                copies = pa.concat_tables(
                    [
                        _with_id(table).append_column(COPY, pa.repeat(pa.scalar(k, pa.int64()), table.num_rows))
                        for k in range(len(texts))
                    ]
                )
                whens = " ".join(f"WHEN {k} THEN ({t})" for k, t in enumerate(texts))
                df = self.spark.createDataFrame(copies)
                got = df.filter(f"CASE {COPY} {whens} END").select(COPY, RID).toArrow().to_pylist()
        except Exception as e:
            if not _spark_error(e):
                raise
            if len(texts) == 1:
                return [Outcome(refused=_first_line(e))]
            half = len(texts) // 2
            return self.filters(table, texts[:half]) + self.filters(table, texts[half:])
        hits: list[list[int]] = [[] for _ in texts]
        for r in got:
            hits[r[COPY]].append(r[RID])
        return [Outcome(values=sorted(h), type="rows") for h in hits]

    def store_assignment(self, df, column: str, text: str) -> tuple[str | None, str | None]:
        """(the text Spark evaluates to store ``text`` into ``column`` under ANSI store assignment, or
        None when Spark refuses; why it refuses)."""
        source = self.type_of(df, text)
        if source is None:
            return None, "refused by Spark's analysis"
        target = SCHEMA.field(column).type.simple_string()
        if source == target:
            return text, None
        if not self._cast.canANSIStoreAssign(self._ddl(source), self._ddl(target)):
            return None, f"{STORE_REFUSED} ({source} into {target})"
        return f"CAST(({text}) AS {target})", None


def run_cases(spark_side: SparkSide, table: pa.Table, cases: list[Case]) -> list[Case]:
    """Fill in both outcomes of every case, each predicate also as a value (its TRUE / FALSE / NULL
    per row). Expressions we refuse go to Spark one by one (Spark must refuse each of them); a
    predicate we refuse takes the outcome of its value twin (a filter refuses what a projection of
    the same expression refuses: both evaluate it on every row)."""
    df = spark_side.frame(table)
    twins = {id(c): Case("value", c.text) for c in cases if c.kind == "predicate"}
    cases = cases + list(twins.values())
    for c in cases:
        c.ours = ours(c, table)
    vals = [c for c in cases if c.kind == "value"]
    preds = [c for c in cases if c.kind == "predicate" and c.ours.ok]
    ups, up_texts = [], []
    for c in cases:
        if c.kind == "update":
            text, why = spark_side.store_assignment(df, c.column, c.text)
            if text is None:
                c.spark = Outcome(refused=why)
            else:
                ups.append(c)
                up_texts.append(text)

    def batched(items, texts, fn, source):
        good = [k for k, c in enumerate(items) if c.ours.ok]
        for k, r in zip(good, fn(source, [texts[k] for k in good])):
            items[k].spark = r
        for k in [k for k, c in enumerate(items) if not c.ours.ok]:
            items[k].spark = fn(source, [texts[k]])[0]

    batched(vals + ups, [c.text for c in vals] + up_texts, spark_side.values, df)  # one selectExpr
    batched(preds, [c.text for c in preds], spark_side.filters, table)
    for c in cases:
        if c.kind == "predicate" and not c.ours.ok:
            twin = twins[id(c)].spark
            c.spark = twin if not twin.ok or twin.type != "boolean" else spark_side.filters(table, [c.text])[0]
    return cases


# ---- comparison --------------------------------------------------------------------------------------------


def _as_utc(v):
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=dt.UTC)
    return v


def same_value(a, b, float_type: bool) -> bool:
    a, b = _as_utc(a), _as_utc(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float | decimal.Decimal | int) and isinstance(b, float | decimal.Decimal | int):
        if isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal):
            return a == b
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        if math.isinf(fa) or math.isinf(fb):
            return fa == fb
        return math.isclose(fa, fb, rel_tol=1e-6 if float_type else 1e-12, abs_tol=1e-300)
    return type(a) is type(b) and a == b


def mismatch(c: Case) -> str | None:
    """Why the two outcomes of ``c`` disagree, or None."""
    o, s = c.ours, c.spark
    if o.crashed:
        return f"ours crashed ({o.refused}); Spark: {s.refused or s.values}"
    if not o.ok or not s.ok:
        if o.ok != s.ok:
            return f"Spark: {s.refused or s.values}; ours: {o.refused or o.values}"
        return None
    if c.kind != "predicate" and o.type != s.type:
        return f"type: Spark {s.type}, ours {o.type} (Spark values {s.values}, ours {o.values})"
    if len(o.values) != len(s.values):
        return f"Spark: {s.values}; ours: {o.values}"
    float_type = s.type == "float"
    for k, (a, b) in enumerate(zip(s.values, o.values)):
        if not same_value(a, b, float_type):
            return f"row {k}: Spark {a!r}, ours {b!r}"
    return None


# TODO(lead): gaps of parse.py that the generator cannot avoid; a mismatch they explain does not fail
# the test (each has an xfail repro below). Remove each once parse.py follows Spark.
_BIG_DECIMAL_LITERAL = re.compile(r"Cannot use (?:Decimal\('([-+\d.E]+)'\)|([-+\d.eE]+)) as a decimal\((\d+),(\d+)\)")


_OVERFLOWING_LITERAL_CAST = re.compile(r"Cannot use -?\d+ as an? (byte|short|integer|long) for 'CAST\(")


def known_gap(c: Case) -> str | None:
    o, s = c.ours, c.spark
    # decimal arithmetic is typed differently (Spark: DecimalPrecision rules, integer literals as
    # decimal(digits,0)); values then differ in scale, rounding or where they overflow
    if o.type and s.type and o.type != s.type and o.type.startswith("decimal") and s.type.startswith("decimal"):
        return "decimal result type"
    # cast_literal quantizes in a 28-digit decimal context: literals needing more digits are refused
    m = _BIG_DECIMAL_LITERAL.search(o.refused or "")
    if m and s.ok:
        value = decimal.Decimal(m.group(1) or m.group(2))
        if value.adjusted() + 1 + int(m.group(4)) > 28:
            return "decimal literal beyond 28 digits"
    # a literal that no row of the column can hold (12345678901.5 into decimal(10,2)): we refuse it while
    # binding, Spark (ANSI) when it stores the first row; they differ only when no row is updated
    if m and c.kind == "update" and s.ok and not s.values:
        return "decimal literal overflowing the column, refused before any row"
    # a literal cast that cannot hold (CAST(-2147483647 AS TINYINT)): refused while binding, as above;
    # Spark (ANSI) fails on the first row that evaluates it, so they differ only when none does
    if _OVERFLOWING_LITERAL_CAST.search(o.refused or "") and s.ok and not s.values:
        return "integer literal cast overflowing its type, refused before any row"
    # store assignment: Spark stores any atomic value into a STRING column and a timestamp into a
    # DATE one, and refuses a string (literal) into a number / date / boolean column
    if c.kind == "update" and (
        (o.refused or "").count("Cannot assign a") or (s.refused or "").startswith(STORE_REFUSED)
    ):
        return "store assignment rules"
    return None


def report(cases: list[Case], table: pa.Table) -> list[str]:
    out = []
    for c in cases:
        why = mismatch(c)
        if why and not known_gap(c):
            where = f" (column {c.column})" if c.column else ""
            out.append(f"[{c.kind}{where}] {c.text[:600]}\n    {why[:1500]}")
    if out:
        out.append(f"rows: {table.to_pylist()}")
    return out


# ---- the tests ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_side(spark):
    # PySpark logs every ANSI error it raises with its query context at ERROR (Python loggers
    # SQLQueryContextLogger / DataFrameQueryContextLogger): this test provokes hundreds
    loggers = [logging.getLogger(name) for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    yield SparkSide(spark)
    for lg, level in zip(loggers, levels):
        lg.setLevel(level)


examples = st.fixed_dictionaries(
    {
        "rows": st.lists(rows, min_size=0, max_size=10),
        "predicates": st.lists(predicates(3), min_size=8, max_size=16),
        "values": st.lists(values_with_decimals, min_size=8, max_size=16),
        "updates": st.lists(assignments(), min_size=3, max_size=8),
        "chains": st.lists(long_chains(), min_size=0, max_size=2),
    }
)


def check(spark_side: SparkSide, example: dict) -> None:
    table = table_of(example["rows"])
    cases = [Case("predicate", t) for t in example["predicates"] + example["chains"]]
    cases += [Case("value", t) for t in example["values"]]
    cases += [Case("update", t, column=col) for col, t in example["updates"]]
    cases = run_cases(spark_side, table, cases)
    problems = report(cases, table)
    assert not problems, "Spark and our engine disagree:\n" + "\n".join(problems)


_FAST = dict(
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: the report names each expression
    print_blob=True,
)


# make test runs a fixed sample (the same examples on every run: a CI result is reproducible); make
# test-differential explores new ones each time and is where new differences are found
@settings(max_examples=int(os.environ.get("DIFFERENTIAL_SHORT_EXAMPLES", "20")), derandomize=True, **_FAST)
@given(examples)
def test_differential_short(spark_side, example):
    check(spark_side, example)


@pytest.mark.differential
@settings(max_examples=int(os.environ.get("DIFFERENTIAL_EXAMPLES", "1000")), **_FAST)
@given(examples)
def test_differential_long(spark_side, example):
    check(spark_side, example)


# ---- fixed cases: what evaluate.py was fixed for, and the planted-bug proof ---------------------------------
# (the random test covers these too; here they are certain to run on every `make test`)

D = decimal.Decimal
_Q18 = decimal.Context(prec=60)
FIXED_ROWS = [
    dict(
        i=7, l=-7, sh=3, ty=-128, d=-7.5, f=1.5, m=D("1.25"), w=D("-7.5").quantize(D("1E-18"), context=_Q18),
        s=" 12 ", t=" true ", dt=dt.date(2026, 1, 2), ts=dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC), b=True,
    ),
    dict(
        i=-7, l=-(2**63), sh=0, ty=4, d=math.nan, f=-0.0, m=D("-7.50"), w=D("0").quantize(D("1E-18"), context=_Q18),
        s="ßtraße😀", t="T", dt=None, ts=None, b=None,
    ),
    dict(
        i=None, l=10, sh=-3, ty=None, d=math.inf, f=None, m=None,
        w=D("12345678901234567890.123456789012345678"), s=None, t="2026-1-2", dt=dt.date(1970, 1, 1),
        ts=dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), b=False,
    ),
    dict(
        i=0, l=0, sh=2, ty=0, d=0.0, f=0.10000000149011612, m=D("0.00"), w=None, s="\t x \t", t=" 2026-01-02 ",
        dt=dt.date(2000, 2, 29), ts=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), b=True,
    ),
    dict(
        i=2147483647, l=2**63 - 1, sh=None, ty=127, d=1e10, f=3.0, m=D("99999999.99"),
        w=D("1.000000000000000001"), s="a😀b", t="no", dt=dt.date(9999, 12, 31), ts=None, b=None,
    ),
]  # fmt: skip
FIXED_VALUES = [
    # % takes the dividend's sign (Java), div truncates; a zero divisor is an error only where the
    # dividend is not NULL, and never where a guard keeps the row away
    "i % 3", "i % (-3)", "l % 3", "(-7) % 3", "7 % (-3)", "d % (-2.5D)", "f % 1.5F", "m % 3", "w % (-0.7)",
    "ty % 4Y", "CASE WHEN sh <> 0 THEN i % sh END", "IF(sh = 0, NULL, l div sh)", "i div 2", "(-7) div 2",
    "i % 0", "CASE WHEN i <> 0 THEN 100 / i END", "100 / i", "coalesce(i, 100 / sh)", "i * NULL",
    # substring (1-based, 0 is 1, negative from the end, code points), trim (spaces only), length
    "substring(s, 0, 2)", "substring(s, 1, 1)", "substring(s, 2)", "substring(s, -3, 2)", "substring(s, -20, 3)",
    "substring(s, 3, -1)", "substring(s, sh, 2)", "substring(s, i)", "substring(t, -1)",
    "trim(s)", "ltrim(s)", "rtrim(s)", "trim(LEADING FROM t)", "length(s)", "length(t)",
    "upper(s)", "lower(s)", "upper('ßﬁ')", "lower('İΣΑΣ')", "abs(i)", "abs(m)", "abs(d)", "abs(ty)", "-ty",
    # date parts (generated columns' usual expressions); timestamps as dates in UTC
    "year(dt)", "month(dt)", "day(dt)", "dayofmonth(dt)", "year(ts)", "month(ts)", "to_date(ts)",
    "CASE WHEN t LIKE '%2026%' THEN year(t) END",
    # casts: strings trimmed of ASCII whitespace, booleans t/true/y/yes/1, Spark's partial dates
    "CASE WHEN t IN (' true ', 'T', 'no') THEN CAST(t AS BOOLEAN) END", "CAST(t AS BOOLEAN)",
    "CASE WHEN t LIKE '%2026%' THEN CAST(t AS DATE) END", "CASE WHEN t LIKE '%2026%' THEN CAST(t AS TIMESTAMP) END",
    "CASE WHEN s = ' 12 ' THEN CAST(s AS INT) END", "CAST(s AS INT)", "CAST(f AS DECIMAL(10,2))",
    "CAST(d AS DECIMAL(10,2))", "CASE WHEN d < 1e9 THEN CAST(d AS DECIMAL(10,2)) END", "CAST(m AS DOUBLE)",
    "CAST(w AS DOUBLE)", "CAST(m AS INT)", "CAST(d AS INT)", "CAST(ts AS DATE)", "CAST(dt AS TIMESTAMP)",
    "CAST(b AS DECIMAL(5,0))", "CAST(i AS BOOLEAN)", "CAST(m AS BOOLEAN)", "CAST(i AS TINYINT)",
    "CAST(CAST(l AS DOUBLE) AS BIGINT)", "CAST(CAST(i AS FLOAT) AS INT)",
    # values printed as Spark prints them
    "CAST(d AS STRING)", "CAST(f AS STRING)", "CAST(m AS STRING)", "CAST(w AS STRING)", "CAST(ts AS STRING)",
    "CAST(dt AS STRING)", "concat(s, i, d, b, dt)", "m + m", "m - 1.5",
    # conditionals and short circuits
    "coalesce(s, t)", "IF(b, i, l)", "CASE WHEN b THEN s WHEN i > 0 THEN t ELSE 'x' END",
    "i > 0 AND 100 / i > 1", "i = 0 OR 100 / i > 1", "NOT (i <> 0 AND 100 / i > 1)",
    # LIKE / ILIKE (escape \, full lower case), NaN and -0.0
    "s LIKE '%😀%'", "t ILIKE 't'", "s LIKE '_😀_'", "s LIKE '%\\\\%'", "s LIKE 'a\\b'", "s ILIKE '%STRASSE%'",
    "s ILIKE 'ß%'", "d = d", "d < 1D", "d IN (1e10, CAST('NaN' AS DOUBLE))", "f = 0F", "d <=> NULL",
]  # fmt: skip
FIXED_UPDATES = [
    ("i", "l"), ("l", "i * 2"), ("ty", "i"), ("m", "w"), ("d", "m"), ("f", "d"), ("w", "m * 2"),
    ("dt", "CASE WHEN t LIKE '%2026%' THEN CAST(t AS DATE) END"), ("ts", "dt"), ("b", "i > 0"), ("s", "upper(s)"),
]  # fmt: skip


def test_fixed_cases_agree_with_spark(spark_side):
    table = table_of(FIXED_ROWS)
    cases = [Case("value", t) for t in FIXED_VALUES]
    cases += [Case("predicate", t) for t in FIXED_VALUES if parses_as_predicate(t)]
    cases += [Case("update", t, column=col) for col, t in FIXED_UPDATES]
    cases = run_cases(spark_side, table, cases)
    problems = report(cases, table)
    assert not problems, "Spark and our engine disagree:\n" + "\n".join(problems)


def parses_as_predicate(text: str) -> bool:
    try:
        parse_predicate(text, SCHEMA)
    except DeltaError:
        return False
    return True


# ---- the gaps left for parse.py (TODO(lead)): minimal repros, xfail until fixed --------------------------


def _gap(kind, text, reason, column=None):
    return pytest.param(kind, column, text, marks=pytest.mark.xfail(strict=False, reason=f"TODO(lead): {reason}"))


LEAD_GAPS = [
    _gap("value", "CAST(0.1 AS FLOAT) + 0D", "a float literal is folded as the double 0.1 (Spark 0.10000000149011612)"),
    _gap("value", "CAST(CAST('NaN' AS DOUBLE) AS DECIMAL(10,2))", "NaN/Infinity literal to decimal: Spark NULL, ours refuses"),
    _gap("value", "concat(-CAST('Infinity' AS DOUBLE), 1E10)", "literal to string: Spark '-Infinity1.0E10', ours '-inf10000000000.0'"),
    _gap("value", "CAST(9223372036854775807L AS DECIMAL(38,18))", "cast_literal quantizes in a 28-digit context: refused"),
    _gap("value", "CAST(7 AS DECIMAL(5,0)) div 2", "div on decimals: Spark 3 (bigint), ours refuses"),
    _gap("value", "trim('x' FROM 'xax')", "TRIM(chars FROM x): Spark 'a', ours refuses"),
    _gap("value", "CASE WHEN NULL THEN 1 ELSE 2 END", "a VOID CASE condition: Spark refuses (analysis), ours 2"),
    _gap("value", "CAST('2026-1-2' AS DATE)", "literal casts: Spark 2026-01-02, ours refuses"),
    _gap("value", "CAST('1.5' AS INT)", "literal casts: Spark CAST_INVALID_INPUT, ours 1"),
    _gap("value", "CASE WHEN l = 12345 THEN CAST('x' AS INT) ELSE 0 END", "a bad literal in a branch never taken: Spark 0, ours refuses at parse"),
    _gap("value", "1 + '2'", "a string in arithmetic: Spark 3 (bigint), ours refuses"),
    _gap("value", "CASE WHEN s = ' 12 ' THEN s = 12 END", "a string column beside a number: Spark casts it to bigint, ours refuses"),
    _gap("update", "l", "store assignment: Spark stores any atomic value into a STRING column, ours refuses", "s"),
    _gap("update", "'0'", "store assignment: Spark refuses a string into TINYINT, ours stores 0", "ty"),
    _gap("update", "ts", "store assignment: Spark stores a timestamp into a DATE column, ours refuses", "dt"),
    _gap("update", "CAST('NaN' AS DOUBLE)", "store assignment: a NaN literal into a decimal column: Spark NULL, ours refuses", "w"),
]  # fmt: skip


# once gaps, now Spark's answer: decimal result types (DecimalPrecision, integer literals as
# decimal(digits,0)) and ANSI's double for an integral beside a float
FIXED_GAPS = [
    pytest.param("value", None, "m * 3"),
    pytest.param("value", None, "w / 3"),
    pytest.param("value", None, "m % (-0.7)"),
    pytest.param("value", None, "i + f"),
    pytest.param("value", None, "m * m + w / m - i * m"),
]


@pytest.mark.parametrize(("kind", "column", "text"), LEAD_GAPS + FIXED_GAPS)
def test_lead_gap_repro(spark_side, kind, column, text):
    table = table_of(FIXED_ROWS)
    cases = run_cases(spark_side, table, [Case(kind, text, column=column)])
    problems = [f"{c.kind} {c.text}: {mismatch(c)}" for c in cases if mismatch(c)]
    assert not problems, problems
