"""Variant functions in conditions, in process: ``variant_get`` / ``try_variant_get``, Spark's ``v:path`` and
casts of it, evaluated by decoding each value (engine/variant.py) and checked against plain Python reads
of the JSON; what the predicate model cannot evaluate is refused by name before anything is read.
Spark's own results for the same expressions: tests/spark/test_variant_spark.py."""

from __future__ import annotations

import decimal
import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import variant
from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
from airflow_delta_provider_apps.engine.expr.evaluate import evaluate
from airflow_delta_provider_apps.engine.expr.parse import check_syntax, parse_expression, parse_predicate
from airflow_delta_provider_apps.engine.expr.sql import to_sql
from airflow_delta_provider_apps.engine.schema import parse_ddl

VariantUtils = pytest.importorskip("pyspark.sql.variant_utils").VariantUtils

SCHEMA = parse_ddl("id BIGINT, v VARIANT, s STRING")
DOCS = [
    '{"kind": "order", "total": 12.5, "items": [{"sku": "a", "n": 2}], "a b": 1}',
    '{"kind": "refund", "total": -3, "note": null}',
    None,
    '"plain"',
    '{"kind": "order", "total": "7", "items": []}',
    '{"total": "lots"}',
]


def _table() -> pa.Table:
    encoded = [None if d is None else VariantUtils.parse_json(d) for d in DOCS]
    v = pa.array([None if e is None else {"value": e[0], "metadata": e[1]} for e in encoded], variant.arrow_type())
    return pa.table({"id": pa.array(range(len(DOCS)), pa.int64()), "v": v, "s": ["x"] * len(DOCS)})


def _get(doc: str | None, *path):
    """Plain Python: the JSON value at ``path``, or a marker when it is not there."""
    cur = json.loads(doc) if doc is not None else None
    for p in path:
        if isinstance(cur, dict) and isinstance(p, str) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            return None
    return cur


@pytest.mark.parametrize(
    ("text", "model"),
    [
        ("v:kind::string = 'order'", lambda d: None if _get(d, "kind") is None else _get(d, "kind") == "order"),
        (
            "variant_get(v, '$.items[0].sku', 'string') = 'a'",
            lambda d: None if _get(d, "items", 0, "sku") is None else _get(d, "items", 0, "sku") == "a",
        ),
        ("v:`a b`::int = 1 OR v:['a b']::int = 1", lambda d: True if _get(d, "a b") == 1 else None),
        ("v:note IS NULL", lambda d: d is None or not isinstance(json.loads(d), dict) or "note" not in json.loads(d)),
        ("v IS NULL", lambda d: d is None),
        (
            "try_variant_get(v, '$.total', 'double') > 0",
            lambda d: None if _num(_get(d, "total")) is None else _num(_get(d, "total")) > 0,
        ),
        (
            "try_cast(v:total AS INT) < 0",
            lambda d: None if _int(_get(d, "total")) is None else _int(_get(d, "total")) < 0,
        ),
    ],
)
def test_variant_conditions_match_plain_python(text, model):
    got = evaluate(parse_predicate(text, SCHEMA), _table()).to_pylist()
    assert got == [model(d) for d in DOCS]


def _num(v):
    try:
        return float(v) if v is not None and not isinstance(v, (dict, list, bool)) else None
    except ValueError:
        return None


def _int(v):
    """Spark's cast to INT: a number truncates, a string must be an integer's text."""
    if isinstance(v, str):
        return int(v) if v.strip().lstrip("-").isdigit() else None
    f = _num(v)
    return None if f is None else int(f)


def test_values_read_as_types_and_as_json():
    t = _table()
    assert evaluate(parse_expression("v:items::string", SCHEMA), t).to_pylist() == [
        '[{"n":2,"sku":"a"}]',
        None,
        None,
        None,
        "[]",
        None,
    ]
    assert evaluate(parse_expression("v:total::decimal(5,2)", SCHEMA), t.slice(0, 2)).to_pylist() == [
        decimal.Decimal("12.50"),
        decimal.Decimal("-3.00"),
    ]
    # the variant null is no SQL NULL; read as a type it is
    assert evaluate(parse_predicate("v:note IS NOT NULL", SCHEMA), t).to_pylist()[1] is True
    assert evaluate(parse_expression("v:note::int", SCHEMA), t).to_pylist()[1] is None


def test_a_value_that_does_not_cast_fails_as_in_spark_and_try_reads_null():
    with pytest.raises(InvalidPredicateError, match="INVALID_VARIANT_CAST.*'lots'"):
        evaluate(parse_predicate("v:total::int > 0", SCHEMA), _table())
    with pytest.raises(InvalidPredicateError, match="INVALID_VARIANT_CAST.*object"):
        evaluate(parse_predicate("v:items[0]::int > 0", SCHEMA), _table())
    # only the rows Spark evaluates it on: the right side of AND where the left is not FALSE
    assert evaluate(parse_predicate("id = 0 AND v:total::int > 0", SCHEMA), _table()).to_pylist()[5] is False


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("v:kind = 'order'", "Cannot compare a variant in 'v:kind = 'order''"),
        ("v = v", "Cannot compare a variant"),
        ("v:kind IN ('a', 'b')", "Cannot compare a variant"),
        ("s:kind::string = 'x'", "variant_get needs a variant, got string"),
        ("v:items[*].sku::string = 'a'", "variant path .* is not supported"),
        ("variant_get(v, 'kind', 'string') = 'x'", "Invalid variant path 'kind'"),
        ("variant_get(v, '$.a', 'array<int>') IS NULL", "Cannot read a variant as array<int>"),
        ("variant_get(v, '$.a', 'nonsense') IS NULL", "unknown type 'nonsense'"),
        ("variant_get(v, s, 'int') = 1", "path and type must be string literals"),
        ("schema_of_variant(v) = 'OBJECT'", "Function schema_of_variant"),
        ("to_json(s) = 'x'", "to_json needs a variant, got string"),
    ],
)
def test_what_cannot_be_evaluated_is_refused_by_name(text, match):
    with pytest.raises(InvalidPredicateError, match=match) as e:
        parse_predicate(text, SCHEMA)
    assert e.value.fix


def test_rendered_back_as_spark_sql():
    for text, sql in [
        ("v:a.b[0]::int = 1", "(variant_get(`v`, '$.a.b[0]', 'int') = 1)"),
        ("v:['x y']::string = 'z'", "(variant_get(`v`, '$[\\'x y\\']', 'string') = 'z')"),
        ("try_cast(v:a AS BIGINT) IS NULL", "(try_variant_get(`v`, '$.a', 'bigint') IS NULL)"),
        ("v:a IS NULL", "(variant_get(`v`, '$.a', 'variant') IS NULL)"),
    ]:
        assert to_sql(parse_predicate(text, SCHEMA)) == sql
    check_syntax("v:a.b::int = 1 AND id = 2")  # parse-time checks read the : syntax too


def test_to_json_and_is_variant_null():
    t = _table()
    assert evaluate(parse_expression("to_json(v:items)", SCHEMA), t).to_pylist() == [
        '[{"n":2,"sku":"a"}]',
        None,
        None,
        None,
        "[]",
        None,
    ]
    texts = evaluate(parse_expression("to_json(v)", SCHEMA), t).to_pylist()
    assert [None if x is None else json.loads(x) for x in texts] == [None if d is None else json.loads(d) for d in DOCS]
    # the variant null (a JSON null) is not a SQL NULL: is_variant_null tells them apart
    assert evaluate(parse_predicate("is_variant_null(v:note)", SCHEMA), t).to_pylist() == [
        False,
        True,
        False,
        False,
        False,
        False,
    ]
