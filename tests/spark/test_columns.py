"""engine/spark/columns.py: a bound tree as a pyspark Column evaluates exactly as Spark evaluates the
tree's SQL text (``F.expr(to_sql(tree))``, what the data plane parsed before): same type, same value
on every row (NULL, NaN, infinities, extreme integers, non-BMP text), same refusals (ANSI errors).
Trees are bound by our parser from the differential test's generated expressions and its fixed
cases, over a table with a column of every primitive type."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from spark_sql_strategies import SCHEMA, predicates, rows, table_of, values_with_decimals
from test_sql_differential import FIXED_ROWS, FIXED_UPDATES, FIXED_VALUES

from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.expr import bind_assignments, parse_expression, parse_predicate, to_sql
from airflow_delta_provider_apps.engine.expr.nodes import Literal
from airflow_delta_provider_apps.engine.spark.columns import to_column

pytestmark = pytest.mark.spark
RID = "__rid"


def _bound(texts: list[str], predicate: bool) -> list:
    out = []
    for text in texts:
        try:
            out.append(parse_predicate(text, SCHEMA) if predicate else parse_expression(text, SCHEMA))
        except DeltaError:  # refused by our parser: nothing to render
            pass
    return out


def _outcomes(df, cols: list) -> list:
    """Per column: ``(type, values by row)`` or ``("refused", error class)``. One job for all of
    them; when Spark refuses the batch, halves, down to the one column refused."""
    from pyspark.errors import PySparkException

    if not cols:
        return []
    try:
        out = df.select(RID, *[c.alias(f"v{k}") for k, c in enumerate(cols)])
        got = out.toArrow().sort_by(RID)
        return [(f.dataType.simpleString(), got.column(k + 1).to_pylist()) for k, f in enumerate(out.schema.fields[1:])]
    except PySparkException as e:
        if len(cols) == 1:
            return [("refused", getattr(e, "getCondition", lambda: None)() or type(e).__name__)]
        half = len(cols) // 2
        return _outcomes(df, cols[:half]) + _outcomes(df, cols[half:])


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def check(spark, table: pa.Table, trees: list) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(table.append_column(RID, pa.array(range(table.num_rows), pa.int64())))
    problems = []
    # the same analysed plan is the same result (Spark's own test); the rest (literals cast from
    # text, which Spark's parser types directly) are evaluated on every row
    trees = [t for t in trees if not df.select(to_column(t)).sameSemantics(df.select(F.expr(to_sql(t))))]
    both = _outcomes(df, [to_column(tree) for tree in trees] + [F.expr(to_sql(tree)) for tree in trees])
    ours_all, theirs_all = both[: len(trees)], both[len(trees) :]
    for tree, ours, theirs in zip(trees, ours_all, theirs_all):
        text = to_sql(tree)
        if ours[0] != theirs[0] or (ours[0] != "refused" and not all(map(_same, ours[1], theirs[1]))):
            problems.append(f"{text}\n    Column: {ours}\n    SQL:    {theirs}")
    assert not problems, "to_column and Spark's parse of to_sql disagree:\n" + "\n".join(problems)


_FAST = dict(deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


@settings(max_examples=4, derandomize=True, **_FAST)
@given(
    st.fixed_dictionaries(
        {
            "rows": st.lists(rows, min_size=1, max_size=8),
            "predicates": st.lists(predicates(3), min_size=6, max_size=10),
            "values": st.lists(values_with_decimals, min_size=6, max_size=10),
        }
    )
)
def test_generated_trees_evaluate_as_their_sql(spark, example):
    trees = _bound(example["predicates"], True) + _bound(example["values"], False)
    check(spark, table_of(example["rows"]), trees)


def test_fixed_trees_evaluate_as_their_sql(spark):
    trees = _bound(FIXED_VALUES, False)
    trees += [bind_assignments({c: t}, SCHEMA)[SCHEMA.field(c).name] for c, t in FIXED_UPDATES]
    assert len(trees) > 60  # the fixed cases bind: this test is not vacuous
    check(spark, table_of(FIXED_ROWS), trees)


def test_every_literal_type_is_exact(spark):
    """Literals of every type, incl. the ones cast from text (dates, timestamps, decimals, NaN)."""
    import datetime as dt
    import decimal

    from airflow_delta_provider_apps.engine.schema import parse_ddl

    types = parse_ddl("a DATE, b TIMESTAMP, c TIMESTAMP_NTZ, d DECIMAL(38,18), e FLOAT, f DOUBLE, g BINARY, h BIGINT")
    values = [
        dt.date(1, 1, 1),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 29, 2, 30),
        decimal.Decimal("-12345678901234567890.123456789012345678"),
        0.1,
        float("-inf"),
        b"\x00\xff",
        -(2**63),
    ]
    trees = [Literal(v, f.type) for v, f in zip(values, types.fields)]
    trees += [Literal(None, f.type) for f in types.fields] + [Literal(float("nan"), types.fields[5].type)]
    # FLOAT literals: to_sql's digits are rounded to float once by Spark, -0.0 reads as 0
    trees += [Literal(v, types.fields[4].type) for v in (1.0000000596046448, -0.0, 1e-07, 3.4028235e38)]
    check(spark, table_of([{}]), trees)
