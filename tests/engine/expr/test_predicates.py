"""The predicate model against an independent computation.

Random tables (every primitive kind, NULLs, NaN) and random predicates are generated as PAIRS: the
Spark SQL text, and a plain-Python function that applies SQL's three-valued logic row by row. Our
pyarrow evaluation of the parsed text must equal the Python answer for every row, and data skipping
(on stats computed by the writer's own stats code) must never drop a file holding a matching row.
"""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_strategies import DAY0, SCHEMA, predicates, rows, table_of

from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
from airflow_delta_provider_apps.engine.expr import (
    bind_assignments,
    evaluate,
    parse_expression,
    parse_predicate,
    to_sql,
    true_mask,
)
from airflow_delta_provider_apps.engine.expr.skipping import skip_files
from airflow_delta_provider_apps.engine.schema import parse_ddl
from airflow_delta_provider_apps.engine.stats import collect_stats


def _table(rs):
    return table_of(rs)


def _same(got, want):
    return all(
        (g is None and w is None) or (g is not None and w is not None and g == w)
        for g, w in zip(got, want, strict=True)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows, min_size=0, max_size=25), predicates())
def test_evaluation_equals_sql_semantics(rs, pred):
    text, reference = pred
    expr = parse_predicate(text, SCHEMA)
    got = evaluate(expr, _table(rs)).to_pylist()
    want = [reference(r) for r in rs]
    assert _same(got, want), (text, got, want)
    # the rendered Spark SQL (commitInfo, Spark's filter) parses back to exactly the same tree
    again = parse_predicate(to_sql(expr), SCHEMA)
    assert repr(again) == repr(expr)  # repr: NaN literals compare equal
    assert evaluate(again, _table(rs)).to_pylist() == got


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(rows, min_size=1, max_size=8), min_size=1, max_size=6), predicates())
def test_skipping_never_drops_a_matching_file(chunks, pred):
    text, reference = pred
    partitioned = SCHEMA  # p is the partition column: each chunk gets one p value
    files = []
    for k, chunk in enumerate(chunks):
        pval = chunk[0]["p"]
        chunk = [dict(r, p=pval) for r in chunk]
        data = _table(chunk).drop(["p"])
        stats = collect_stats(partitioned, data, partition_columns=["p"])
        files.append(
            {
                "path": f"f{k}.parquet",
                "partition_values": [("p", None if pval is None else str(pval))],
                "size": 100 + k,
                "stats": stats,
                "matches": any(reference(r) is True for r in chunk),
            }
        )
    table = pa.Table.from_pylist(
        files,
        schema=pa.schema(
            [
                ("path", pa.string()),
                ("partition_values", pa.map_(pa.string(), pa.string())),
                ("size", pa.int64()),
                ("stats", pa.string()),
                ("matches", pa.bool_()),
            ]
        ),
    )
    result = skip_files(table, SCHEMA, ["p"], parse_predicate(text, SCHEMA))
    kept = set(result.files.column("path").to_pylist())
    for f in files:
        if f["matches"]:
            assert f["path"] in kept, (text, f)
    assert result.num_files_after == len(kept) <= result.num_files_before == len(files)


def _files(stats_rows, parts=None):
    return pa.Table.from_pylist(
        [
            {
                "path": f"f{k}",
                "partition_values": [("p", None if parts is None else parts[k])],
                "size": 10,
                "stats": s,
            }
            for k, s in enumerate(stats_rows)
        ],
        schema=pa.schema(
            [
                ("path", pa.string()),
                ("partition_values", pa.map_(pa.string(), pa.string())),
                ("size", pa.int64()),
                ("stats", pa.string()),
            ]
        ),
    )


def _stats(lo, hi, nulls=0, n=10):
    return (
        f'{{"numRecords":{n},"minValues":{{"i":{lo},"s":"{lo}"}},"maxValues":{{"i":{hi},"s":"{hi}"}},'
        f'"nullCount":{{"i":{nulls},"s":0}}}}'
    )


def test_skipping_drops_clear_cut_files_and_keeps_unknown_ones():
    files = _files([_stats(0, 9), _stats(10, 19), _stats(20, 29), None, "{}"])

    def kept(text):
        return skip_files(files, SCHEMA, ["p"], parse_predicate(text, SCHEMA)).files.column("path").to_pylist()

    assert kept("i = 15") == ["f1", "f3", "f4"]  # no stats / empty stats: kept
    assert kept("i < 10") == ["f0", "f3", "f4"]
    assert kept("i >= 20 OR i = 5") == ["f0", "f2", "f3", "f4"]
    assert kept("NOT (i >= 10)") == ["f0", "f3", "f4"]
    assert kept("i IN (12, 25)") == ["f1", "f2", "f3", "f4"]
    assert kept("i IS NULL") == ["f3", "f4"]
    assert kept("i = NULL") == []  # NULL never equals anything
    assert kept("i + 1 = 15") == ["f0", "f1", "f2", "f3", "f4"]  # not understood: kept


def test_partition_pruning_is_exact_and_typed():
    files = _files(["{}"] * 4, parts=["1", "10", "2", None])
    r = skip_files(files, SCHEMA, ["p"], parse_predicate("p = 10", SCHEMA))
    assert r.files.column("path").to_pylist() == ["f1"]  # 10 as a number, not '10' > '2'
    r = skip_files(files, SCHEMA, ["p"], parse_predicate("p > 1", SCHEMA))
    assert r.files.column("path").to_pylist() == ["f1", "f2"]
    r = skip_files(files, SCHEMA, ["p"], parse_predicate("p IS NULL OR i = 1", SCHEMA))
    assert r.num_files_after == 4  # i = 1 may hold anywhere (no stats)
    assert r.num_files_before == 4 and r.num_bytes_after == 40


def test_truncated_string_max_is_not_an_upper_bound():
    long_max = "m" * 32
    files = _files([f'{{"numRecords":1,"minValues":{{"s":"a"}},"maxValues":{{"s":"{long_max}"}}}}'])
    r = skip_files(files, SCHEMA, ["p"], parse_predicate("s = 'mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmzz'", SCHEMA))
    assert r.num_files_after == 1
    r = skip_files(files, SCHEMA, ["p"], parse_predicate("s < 'a'", SCHEMA))
    assert r.num_files_after == 0


def test_timestamp_max_truncated_to_milliseconds_is_widened():
    schema = parse_ddl("ts TIMESTAMP")
    files = _files(
        ['{"numRecords":1,"minValues":{"ts":"2026-01-01T00:00:00.000Z"},"maxValues":{"ts":"2026-01-01T00:00:00.000Z"}}']
    )
    # the file may hold 00:00:00.000500, which a millisecond-truncating writer records as .000
    r = skip_files(files, schema, [], parse_predicate("ts > TIMESTAMP '2026-01-01 00:00:00.0004'", schema))
    assert r.num_files_after == 1
    r = skip_files(files, schema, [], parse_predicate("ts > TIMESTAMP '2026-01-01 00:00:01'", schema))
    assert r.num_files_after == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("nope = 1", "Unknown column 'nope'"),
        ("count(i) > 1", "Aggregate function"),
        ("rand() > 0.5", "Non-deterministic function rand()"),
        ("i IN (SELECT 1)", "Subqueries are not supported"),
        ("day = 'yesterday'", "Cannot use 'yesterday' as a date"),
        ("i > ", "Cannot parse the predicate"),
        ("s = i", "Cannot compare string with long"),
        ("i", "is not a condition"),
        ("foo(i) = 1", "Function foo() is not supported"),
        ("sum(i) OVER () > 1", "not allowed"),
    ],
)
def test_bad_predicates_are_clear_errors(text, expected):
    with pytest.raises(InvalidPredicateError) as e:
        parse_predicate(text, SCHEMA)
    assert expected in str(e.value)
    assert "Fix:" in str(e.value)


def test_unknown_column_error_lists_the_table_columns():
    with pytest.raises(InvalidPredicateError, match="the table has columns p, i, d, s, day, b"):
        parse_predicate("x = 1", SCHEMA)


def test_nested_fields_and_names_with_dots():
    schema = parse_ddl("st STRUCT<a: INT, `b.c`: STRING>, `a.b` INT")
    t = pa.table(
        {
            "st": pa.array(
                [{"a": 1, "b.c": "x"}, None, {"a": 3, "b.c": "y"}], pa.struct([("a", pa.int32()), ("b.c", pa.string())])
            ),
            "a.b": pa.array([1, 2, 3], pa.int32()),
        }
    )
    assert evaluate(parse_predicate("ST.A > 1", schema), t).to_pylist() == [False, None, True]
    assert evaluate(parse_predicate("st.`b.c` = 'x'", schema), t).to_pylist() == [True, None, False]
    assert evaluate(parse_predicate("`a.b` >= 2", schema), t).to_pylist() == [False, True, True]
    with pytest.raises(InvalidPredicateError, match="quote a column name that contains dots"):
        parse_predicate("a.b = 1", parse_ddl("a INT"))


def test_expressions_and_assignments():
    t = _table([{"p": 1, "i": 5, "d": 1.5, "s": "ab", "day": DAY0, "b": True}, {"p": None, "i": None}])
    assert evaluate(parse_expression("i * 2 + 1", SCHEMA), t).to_pylist() == [11, None]
    assert evaluate(parse_expression("upper(s)", SCHEMA), t).to_pylist() == ["AB", None]
    assert evaluate(parse_expression("coalesce(i, -1)", SCHEMA), t).to_pylist() == [5, -1]
    assert evaluate(parse_expression("CASE WHEN i > 3 THEN 'big' ELSE 'small' END", SCHEMA), t).to_pylist() == [
        "big",
        "small",
    ]
    sets = bind_assignments({"p": "p + 1", "S": "concat(s, '!')", "day": "'2026-02-01'"}, SCHEMA)
    assert set(sets) == {"p", "s", "day"}
    assert evaluate(sets["p"], t).to_pylist() == [2, None]
    assert evaluate(sets["day"], t).to_pylist() == [dt.date(2026, 2, 1)] * 2
    with pytest.raises(InvalidPredicateError, match="Cannot update unknown column 'zz'"):
        bind_assignments({"zz": "1"}, SCHEMA)
    with pytest.raises(InvalidPredicateError, match="Cannot assign a string to column 'i'"):
        bind_assignments({"i": "s"}, SCHEMA)
    with pytest.raises(InvalidPredicateError, match="Cannot use 'x' as a bigint|Cannot use 'x' as a long"):
        bind_assignments({"i": "'x'"}, SCHEMA)


def test_ansi_errors_at_evaluation():
    t = _table([{"i": 2**62}, {"i": 0}])
    with pytest.raises(InvalidPredicateError, match="Cannot evaluate"):
        evaluate(parse_expression("i * 4", SCHEMA), t)
    with pytest.raises(InvalidPredicateError, match="Cannot evaluate"):
        evaluate(parse_predicate("10 / i > 1", SCHEMA), t)


def test_true_mask_counts_null_as_not_true():
    t = _table([{"i": 1}, {"i": None}, {"i": 3}])
    assert true_mask(parse_predicate("i > 2", SCHEMA), t).to_pylist() == [False, False, True]


def test_nan_is_equal_to_itself_and_larger_than_every_number():
    t = pa.table({"d": [1.0, math.nan, None]})
    schema = parse_ddl("d DOUBLE")
    nan = "CAST('NaN' AS DOUBLE)"
    assert evaluate(parse_predicate(f"d < {nan}", schema), t).to_pylist() == [True, False, None]
    assert evaluate(parse_predicate(f"d = {nan}", schema), t).to_pylist() == [False, True, None]
    assert evaluate(parse_predicate(f"d >= {nan}", schema), t).to_pylist() == [False, True, None]
    assert evaluate(parse_predicate("d > 2", schema), t).to_pylist() == [False, True, None]
    assert evaluate(parse_predicate(f"d <=> {nan}", schema), t).to_pylist() == [False, True, False]


def test_row_groups_ruled_out_by_parquet_statistics_are_not_read(tmp_path):
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.expr.skipping import row_groups_may_match
    from airflow_delta_provider_apps.engine.reader import iter_data_file_batches
    from airflow_delta_provider_apps.engine.storage import storage_for

    schema = parse_ddl("id BIGINT, s STRING")
    data = pa.table({"id": pa.array(range(1000), pa.int64()), "s": [f"v{i % 7}" for i in range(1000)]})
    pq.write_table(data, tmp_path / "f.parquet", row_group_size=100)  # ten row groups, sorted ids
    md = pq.ParquetFile(tmp_path / "f.parquet").metadata
    pred = parse_predicate("id >= 250 AND id < 420", schema)
    assert row_groups_may_match(md, pred, schema, [], {}) == [False, False, True, True, True] + [False] * 5
    # rows: exactly those of a full read filtered, with a deletion vector kept aligned
    seen = []

    def groups(m):
        keep = row_groups_may_match(m, pred, schema, [], {})
        seen.append(sum(keep))
        return keep

    batches = iter_data_file_batches(
        storage_for(str(tmp_path)), str(tmp_path), "f.parquet", {}, schema, [], row_groups=groups
    )
    got = [r["id"] for b in batches for r in b.filter(true_mask(pred, b)).to_pylist()]
    assert got == list(range(250, 420)) and seen == [3]
    assert row_groups_may_match(md, parse_predicate("s = 'v1'", schema), schema, [], {}) == [True] * 10


@pytest.mark.parametrize(
    "text, cause",
    [
        ("i = = 1", "an operand is missing at 'i = ='"),
        ("(i = 1 AND s = 'a''b'", "a closing parenthesis is missing"),
        ("i = 1)", "unexpected text at 'i = 1)'"),
        ("i = 1 AND", "an operand is missing"),
    ],
)
def test_syntax_errors_speak_spark_sql_not_the_parser(text, cause):
    with pytest.raises(InvalidPredicateError) as err:
        parse_predicate(text, SCHEMA)
    message = err.value.one_line()
    assert cause in message and "sqlglot" not in message and "<class" not in message
    assert "boolean expression" in message  # a condition's fix; an UPDATE value gets an expression's


def test_update_values_get_an_expression_fix_not_a_predicate_one():
    from airflow_delta_provider_apps.engine.expr import bind_assignments

    with pytest.raises(InvalidPredicateError) as err:
        bind_assignments({"i": "i +* 1"}, SCHEMA)
    assert "Cannot parse the expression" in err.value.problem and "boolean" not in err.value.fix
