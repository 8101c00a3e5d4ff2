"""DELETE's NULL rule, case by case: a row is deleted only where the condition is TRUE; where it is
NULL (a NULL column in a comparison, ``NOT`` of NULL, ``IN`` lists holding NULL, a NULL literal...)
the row stays, exactly as where it is FALSE.

One small table (NULLs in a partition column, a number, a string and a double column), written in
two commits, in-process (no Spark). For each condition the test states by hand which rows go; a plain-
Python three-valued evaluation of the same condition must agree with that list (a check on the list),
and after ``DeltaTable.delete`` both our reader and ``deltalake`` (delta-rs) must read exactly the other
rows; the metrics count them, and a condition that is TRUE on no row commits nothing. Each condition
runs on the table partitioned by ``p`` and unpartitioned: conditions on ``p`` alone then take the
metadata-only path (whole files removed by their partition values, nothing read or rewritten), the
others the probe-and-rewrite path.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

DDL = "id INT, p INT, x BIGINT, s STRING, d DOUBLE"
ARROW = pa.schema([("id", pa.int32()), ("p", pa.int32()), ("x", pa.int64()), ("s", pa.string()), ("d", pa.float64())])
N = None
ROWS = [  # id, p, x, s, d
    (0, 1, 1, "a", 1.0),
    (1, 1, 2, N, N),
    (2, 1, N, "b", 2.5),
    (3, 2, N, N, N),
    (4, 2, 3, "a", -1.0),
    (5, N, 1, "a", 0.0),
    (6, N, N, N, N),
    (7, N, 2, "b", N),
]
COMMITS = (ROWS[:4], ROWS[4:])


# ---- plain-Python SQL three-valued logic (None is NULL) ----------------------------------------------


def cmp(a, op, b):
    if a is None or b is None:
        return None
    return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def not_(a):
    return None if a is None else not a


def and_(*xs):
    return False if any(x is False for x in xs) else (None if any(x is None for x in xs) else True)


def or_(*xs):
    return True if any(x is True for x in xs) else (None if any(x is None for x in xs) else False)


def in_(a, values):  # a IN (values...): TRUE on a match, else NULL when a or any value is NULL
    if a is None:
        return None
    if any(v is not None and a == v for v in values):
        return True
    return None if any(v is None for v in values) else False


def nse(a, b):  # a <=> b
    return a is None and b is None or (a is not None and b is not None and a == b)


def coalesce(*xs):
    return next((x for x in xs if x is not None), None)


# ---- the cases: condition, plain-Python reference (row -> True/False/None), ids deleted ---------------

DATA_CASES = {
    "null_column_values": [
        ("x = 1", lambda r: cmp(r["x"], "=", 1), {0, 5}),
        ("x != 1", lambda r: cmp(r["x"], "!=", 1), {1, 4, 7}),
        ("x <> 1", lambda r: cmp(r["x"], "!=", 1), {1, 4, 7}),
        ("x > 1", lambda r: cmp(r["x"], ">", 1), {1, 4, 7}),
        ("x <= 1", lambda r: cmp(r["x"], "<=", 1), {0, 5}),
        ("s = 'a'", lambda r: cmp(r["s"], "=", "a"), {0, 4, 5}),
        ("s != 'a'", lambda r: cmp(r["s"], "!=", "a"), {2, 7}),
        ("d >= 0", lambda r: cmp(r["d"], ">=", 0), {0, 2, 5}),
        ("x BETWEEN 1 AND 2", lambda r: and_(cmp(r["x"], ">=", 1), cmp(r["x"], "<=", 2)), {0, 1, 5, 7}),
        ("x = d", lambda r: cmp(r["x"], "=", r["d"]), {0}),
        ("x IS NULL", lambda r: r["x"] is None, {2, 3, 6}),
        ("s IS NOT NULL AND x IS NULL", lambda r: r["s"] is not None and r["x"] is None, {2}),
    ],
    "not_of_null": [
        ("NOT (x = 1)", lambda r: not_(cmp(r["x"], "=", 1)), {1, 4, 7}),
        ("NOT (x > 1)", lambda r: not_(cmp(r["x"], ">", 1)), {0, 5}),
        (
            "NOT (s = 'a' AND x = 1)",
            lambda r: not_(and_(cmp(r["s"], "=", "a"), cmp(r["x"], "=", 1))),
            {1, 2, 4, 7},
        ),
        ("NOT (x = 1 OR s = 'a')", lambda r: not_(or_(cmp(r["x"], "=", 1), cmp(r["s"], "=", "a"))), {7}),
        ("NOT NOT (x != 1)", lambda r: cmp(r["x"], "!=", 1), {1, 4, 7}),
    ],
    "in_lists_with_null": [
        ("x IN (1, NULL)", lambda r: in_(r["x"], [1, None]), {0, 5}),
        ("x IN (2, 3)", lambda r: in_(r["x"], [2, 3]), {1, 4, 7}),
        ("x NOT IN (1, NULL)", lambda r: not_(in_(r["x"], [1, None])), set()),
        ("x NOT IN (2, 3, NULL)", lambda r: not_(in_(r["x"], [2, 3, None])), set()),
        ("NOT (x IN (1, NULL))", lambda r: not_(in_(r["x"], [1, None])), set()),
        ("x NOT IN (1, 2)", lambda r: not_(in_(r["x"], [1, 2])), {4}),
        ("s NOT IN ('a')", lambda r: not_(in_(r["s"], ["a"])), {2, 7}),
    ],
    "null_safe_equality": [
        ("x <=> NULL", lambda r: nse(r["x"], None), {2, 3, 6}),
        ("s <=> NULL", lambda r: nse(r["s"], None), {1, 3, 6}),
        ("x <=> 1", lambda r: nse(r["x"], 1), {0, 5}),
        ("NOT (x <=> 1)", lambda r: not nse(r["x"], 1), {1, 2, 3, 4, 6, 7}),
        ("NOT (x <=> NULL)", lambda r: not nse(r["x"], None), {0, 1, 4, 5, 7}),
    ],
    "null_literals": [
        ("x = NULL", lambda r: None, set()),
        ("x != NULL", lambda r: None, set()),
        ("NOT (x = NULL)", lambda r: None, set()),
        ("x = 1 OR NULL", lambda r: or_(cmp(r["x"], "=", 1), None), {0, 5}),
        ("x = 1 AND NULL", lambda r: and_(cmp(r["x"], "=", 1), None), set()),
        ("NOT (x = 1 AND NULL)", lambda r: not_(and_(cmp(r["x"], "=", 1), None)), {1, 4, 7}),
    ],
    "coalesce_and_conditionals": [
        ("COALESCE(x, 0) = 0", lambda r: cmp(coalesce(r["x"], 0), "=", 0), {2, 3, 6}),
        ("COALESCE(x, 1) = 1", lambda r: cmp(coalesce(r["x"], 1), "=", 1), {0, 2, 3, 5, 6}),
        ("COALESCE(s, 'zz') != 'a'", lambda r: cmp(coalesce(r["s"], "zz"), "!=", "a"), {1, 2, 3, 6, 7}),
        ("COALESCE(x = 1, TRUE)", lambda r: coalesce(cmp(r["x"], "=", 1), True), {0, 2, 3, 5, 6}),
        ("COALESCE(x = 1, NULL)", lambda r: coalesce(cmp(r["x"], "=", 1), None), {0, 5}),
        ("COALESCE(x, d) > 1", lambda r: cmp(coalesce(r["x"], r["d"]), ">", 1), {1, 2, 4, 7}),
        (
            "CASE WHEN x = 1 THEN NULL ELSE TRUE END",
            lambda r: None if cmp(r["x"], "=", 1) is True else True,
            {1, 2, 3, 4, 6, 7},
        ),
        ("IF(x > 1, TRUE, NULL)", lambda r: True if cmp(r["x"], ">", 1) is True else None, {1, 4, 7}),
    ],
}

PARTITION_CASES = [  # on p alone: metadata-only when the table is partitioned by p
    ("p = 1", lambda r: cmp(r["p"], "=", 1), {0, 1, 2}),
    ("p != 1", lambda r: cmp(r["p"], "!=", 1), {3, 4}),
    ("p > 1", lambda r: cmp(r["p"], ">", 1), {3, 4}),
    ("NOT (p = 1)", lambda r: not_(cmp(r["p"], "=", 1)), {3, 4}),
    ("p IN (1, NULL)", lambda r: in_(r["p"], [1, None]), {0, 1, 2}),
    ("p NOT IN (1, NULL)", lambda r: not_(in_(r["p"], [1, None])), set()),
    ("p NOT IN (1)", lambda r: not_(in_(r["p"], [1])), {3, 4}),
    ("p = NULL", lambda r: None, set()),
    ("p <=> NULL", lambda r: nse(r["p"], None), {5, 6, 7}),
    ("p IS NULL", lambda r: r["p"] is None, {5, 6, 7}),
    ("NOT (p <=> 1)", lambda r: not nse(r["p"], 1), {3, 4, 5, 6, 7}),
    ("COALESCE(p, 0) = 0", lambda r: cmp(coalesce(r["p"], 0), "=", 0), {5, 6, 7}),
    ("p != 1 AND p != 2", lambda r: and_(cmp(r["p"], "!=", 1), cmp(r["p"], "!=", 2)), set()),
]

MIXED_CASES = [  # partition and data columns together (pruning by p, then the rewrite)
    ("p = 1 OR x = 1", lambda r: or_(cmp(r["p"], "=", 1), cmp(r["x"], "=", 1)), {0, 1, 2, 5}),
    ("p != 2 AND x IS NULL", lambda r: and_(cmp(r["p"], "!=", 2), r["x"] is None), {2}),
    ("p != 1 OR x != 1", lambda r: or_(cmp(r["p"], "!=", 1), cmp(r["x"], "!=", 1)), {1, 3, 4, 7}),
    ("NOT (p = 1 AND x = 2)", lambda r: not_(and_(cmp(r["p"], "=", 1), cmp(r["x"], "=", 2))), {0, 3, 4, 5}),
]


def _dicts():
    return [dict(zip(ARROW.names, r)) for r in ROWS]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r[c] for c in ARROW.names) for r in table.select(ARROW.names).to_pylist()), key=repr)


def _check(tmp_path, partitioned: bool, sql: str, reference, deleted_ids: set, *, partition_only: bool = False):
    # the hand-written expectation and the three-valued reference agree (a check on the case itself)
    truth = {r["id"]: reference(r) for r in _dicts()}
    assert {i for i, v in truth.items() if v is True} == deleted_ids, truth

    root = str(tmp_path / ("part" if partitioned else "flat"))
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"] if partitioned else None)
    for rows in COMMITS:
        append_arrow(root, pa.Table.from_pylist([dict(zip(ARROW.names, r)) for r in rows], schema=ARROW))
    before = t.version()

    result = t.delete(sql)

    kept = [r for r in ROWS if r[0] not in deleted_ids]
    expected = sorted(kept, key=repr)
    assert _rows(read_snapshot_table(t.snapshot())) == expected, sql
    assert _rows(deltalake.DeltaTable(root).to_pyarrow_table()) == expected, sql
    m = result["metrics"]
    if not deleted_ids:
        assert result["committed"] is False and t.version() == before, (sql, result)
        return
    assert t.version() == before + 1 and m["numDeletedRows"] == len(deleted_ids), (sql, m)
    if partitioned and partition_only:  # whole files by partition values: nothing read, nothing written
        assert m["numAddedFiles"] == 0 and m["numCopiedRows"] == 0 and m["scanTimeMs"] == 0, (sql, m)


def _params(cases):
    return [pytest.param(sql, ref, ids, id=sql) for sql, ref, ids in cases]


LAYOUTS = pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["null_column_values"]))
def test_rows_whose_column_is_null_stay(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["not_of_null"]))
def test_not_of_null_is_null_and_keeps_the_row(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["in_lists_with_null"]))
def test_in_lists_holding_null(tmp_path, partitioned, sql, reference, deleted):
    """``x IN (1, NULL)`` deletes only x = 1; ``x NOT IN (..., NULL)`` is never TRUE: deletes nothing."""
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["null_safe_equality"]))
def test_null_safe_equality_deletes_null_rows(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["null_literals"]))
def test_null_literals(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(DATA_CASES["coalesce_and_conditionals"]))
def test_coalesce_and_conditionals(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(PARTITION_CASES))
def test_null_partition_values_by_partition_only_delete(tmp_path, partitioned, sql, reference, deleted):
    """Partitioned: the metadata-only path decides per file from its partition value, NULL included."""
    _check(tmp_path, partitioned, sql, reference, deleted, partition_only=True)


@LAYOUTS
@pytest.mark.parametrize("sql,reference,deleted", _params(MIXED_CASES))
def test_partition_and_data_columns_together(tmp_path, partitioned, sql, reference, deleted):
    _check(tmp_path, partitioned, sql, reference, deleted)
