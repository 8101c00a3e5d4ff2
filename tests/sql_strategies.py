"""Hypothesis strategies shared by the predicate and DML tests: random rows and random predicates as
PAIRS (Spark SQL text, plain-Python function applying SQL's three-valued logic row by row), an
independent reference for our evaluation."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.schema import parse_ddl

SCHEMA = parse_ddl("p INT, i BIGINT, d DOUBLE, s STRING, day DATE, b BOOLEAN")
ARROW = pa.schema(
    [
        ("p", pa.int32()),
        ("i", pa.int64()),
        ("d", pa.float64()),
        ("s", pa.string()),
        ("day", pa.date32()),
        ("b", pa.bool_()),
    ]
)
DAY0 = dt.date(2026, 1, 1)

ints = st.one_of(st.none(), st.integers(-5, 5))
doubles = st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 0.5, 2.0, 3.25, math.nan]))
strings = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "B", "ba", "abc"]))
days = st.one_of(st.none(), st.integers(0, 4).map(lambda k: DAY0 + dt.timedelta(days=k)))
bools = st.one_of(st.none(), st.booleans())
rows = st.fixed_dictionaries(
    {"p": st.one_of(st.none(), st.integers(0, 2)), "i": ints, "d": doubles, "s": strings, "day": days, "b": bools}
)


# ---- the independent reference: SQL semantics in plain Python ---------------------------------


def _lt(a, b):
    if isinstance(a, float) and math.isnan(a):
        return False
    if isinstance(b, float) and math.isnan(b):
        return True
    return a < b


def _eq(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


OPS = {
    "=": _eq,
    "!=": lambda a, b: not _eq(a, b),
    "<": _lt,
    "<=": lambda a, b: _lt(a, b) or _eq(a, b),
    ">": lambda a, b: _lt(b, a),
    ">=": lambda a, b: _lt(b, a) or _eq(a, b),
}


def _cmp(op, a, b):
    if a is None or b is None:
        return None
    return OPS[op](a, b)


def _and(x, y):
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def _or(x, y):
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


def _not(x):
    return None if x is None else not x


def sql_lit(col, v):
    if v is None:
        return "NULL"
    if col == "s":
        return f"'{v}'"
    if col == "day":
        return f"'{v.isoformat()}'"
    if col == "b":
        return "true" if v else "false"
    if col == "d":
        return "CAST('NaN' AS DOUBLE)" if math.isnan(v) else repr(v)
    return str(v)


LITS = {
    "p": st.integers(-1, 3),
    "i": st.integers(-6, 6),
    "d": st.sampled_from([-2.0, 0.0, 0.5, 2.0, 3.0, math.nan]),
    "s": st.sampled_from(["", "a", "ab", "b", "abc", "c"]),
    "day": st.integers(-1, 5).map(lambda k: DAY0 + dt.timedelta(days=k)),
    "b": st.booleans(),
}


@st.composite
def atoms(draw):
    col = draw(st.sampled_from(list(LITS)))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "null", "in", "between"] + (["like"] if col == "s" else [])))
    if kind == "null":
        neg = draw(st.booleans())
        return f"{col} IS {'NOT ' if neg else ''}NULL", lambda r: (r[col] is not None) if neg else (r[col] is None)
    if kind == "in":
        vals = draw(st.lists(LITS[col], min_size=1, max_size=3))
        with_null = draw(st.booleans())
        text = f"{col} IN ({', '.join([sql_lit(col, v) for v in vals] + (['NULL'] if with_null else []))})"

        def f(r, vals=vals, with_null=with_null):
            x = r[col]
            if x is None:
                return None
            if any(_eq(x, v) for v in vals):
                return True
            return None if with_null else False

        return text, f
    if kind == "between":
        lo, hi = draw(LITS[col]), draw(LITS[col])
        text = f"{col} BETWEEN {sql_lit(col, lo)} AND {sql_lit(col, hi)}"
        return text, lambda r: _and(_cmp(">=", r[col], lo), _cmp("<=", r[col], hi))
    if kind == "like":
        prefix = draw(st.sampled_from(["", "a", "b", "ab"]))
        return f"s LIKE '{prefix}%'", lambda r: None if r["s"] is None else r["s"].startswith(prefix)
    op = draw(st.sampled_from(list(OPS)))
    v = draw(LITS[col])
    if draw(st.booleans()):
        return f"{col} {op} {sql_lit(col, v)}", lambda r: _cmp(op, r[col], v)
    flipped = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
    return f"{sql_lit(col, v)} {flipped} {col}", lambda r: _cmp(op, r[col], v)


@st.composite
def predicates(draw, depth=2):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(atoms())
    kind = draw(st.sampled_from(["and", "or", "not"]))
    a_text, a = draw(predicates(depth=depth - 1))
    if kind == "not":
        return f"NOT ({a_text})", lambda r: _not(a(r))
    b_text, b = draw(predicates(depth=depth - 1))
    if kind == "and":
        return f"({a_text}) AND ({b_text})", lambda r: _and(a(r), b(r))
    return f"({a_text}) OR ({b_text})", lambda r: _or(a(r), b(r))


def table_of(rs):
    return pa.Table.from_pylist(rs, schema=ARROW)
