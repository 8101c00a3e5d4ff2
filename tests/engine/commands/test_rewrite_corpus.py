"""Rewrites of tables written by other Delta engines (the conformance corpus), in process on a copy.

Other writers store columns in types of their own (``delta-rs/checkpoint-v2-table`` keeps ``created_at``
as ``timestamp[ns]`` without a zone; ours is ``timestamp[us, tz=UTC]``): once we append to such a table,
its files no longer share one Arrow schema, and every rewrite that combines files must conform each
file to the table's schema first. For every corpus table our feature gate lets us write, a copy goes
through an append of one of its own rows, OPTIMIZE (the appended file compacted with the others'),
a DELETE and a MERGE (one target row's key updated with another row's values, one new row
inserted). After each step the rows equal a plain-Python model of the rows before the step (identity
columns, which the writer assigns, compared on their own); where deltalake reads the original table
as we do, it must read the result as we do too.

The tables set apart are pinned (the feature gate refuses them, or nobody can read their rows), so a
table cannot move silently from checked to skipped.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conformance_location import manifest_tables
from outside_readers import deltalake_scan

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import (
    DataFileMissingError,
    LogCorruptedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider_apps.engine.features import check_write_supported
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

TABLES = manifest_tables()

# set apart, and why: every other table is rewritten and compared
REFUSED = {"delta-rs/table_with_liquid_clustering"}  # the feature gate refuses to write it
UNREADABLE = {  # log-replay fixtures: no data files in the corpus / a gap in the log
    "delta-golden/checkpoint": DataFileMissingError,
    "delta-golden/delete-re-add-same-file-different-transactions": DataFileMissingError,
    "delta-golden/versions-not-contiguous": LogCorruptedError,
}

_INTEGRAL = {"byte", "short", "integer", "long"}
_INT_RANGE = {"byte": 2**7, "short": 2**15, "integer": 2**31, "long": 2**63}


def _counter(rows: list[dict], columns: list[str]) -> Counter:
    return Counter(repr([(c, r[c]) for c in columns]) for r in rows)


def _rows(t: DeltaTable) -> tuple[pa.Table, list[dict]]:
    table = read_snapshot_table(t.snapshot())
    return table, table.to_pylist()


def _computed(f) -> bool:
    """An identity or generated column: its values are the writer's, not the model's."""
    return bool({"delta.identity.step", "delta.generationExpression"} & set(f.metadata or {}))


def _literal(type_name: str, v) -> str | None:
    """``v`` as a Spark SQL literal of its column's type (None: not written as a literal here)."""
    if v is None:
        return None
    if type_name == "boolean":
        return "true" if v else "false"
    if type_name in _INTEGRAL:
        return str(v)
    if type_name.startswith("decimal"):
        return format(v, "f")
    if type_name == "string":
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if type_name == "date":
        return f"DATE '{v.isoformat()}'"
    return None  # floats (NaN), binary, timestamps, nested types


def _keyable(type_name: str) -> bool:
    return type_name in _INTEGRAL or type_name in ("string", "date")


def _fresh(type_name: str, values: list):
    """A value of the key column's type that no row holds (None for other types: a NULL key never
    matches either)."""
    present = [v for v in values if v is not None]
    if type_name in _INTEGRAL:
        v = max(present, default=0) + 1
        return v if v < _INT_RANGE[type_name] else min(present) - 1
    if type_name == "string":
        return max(present, default="") + "~new"
    if type_name == "date":
        return max(present, default=datetime.date(2000, 1, 1)) + datetime.timedelta(days=1)
    return None


def _deltalake_counter(root, columns: list[str]) -> Counter | None:
    try:
        return _counter(deltalake_scan(str(root)).to_pylist(), columns)
    except Exception:  # delta-rs cannot read this table (a feature, a type): no cross-check
        return None


# ---- the test ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", TABLES or [None], ids=[t["dir"] for t in TABLES] or ["no-corpus"])
def test_append_optimize_delete_merge_on_a_table_written_elsewhere(tmp_path, conformance_root, entry):
    name = entry["dir"]
    root = tmp_path / "t"
    shutil.copytree(conformance_root / entry["table_root"], root)  # the corpus is used in place: never written
    t = DeltaTable.for_path(None, str(root))
    if name in UNREADABLE:
        with pytest.raises(UNREADABLE[name]) as e:
            read_snapshot_table(t.snapshot())
        pytest.skip(f"nobody can read its rows: {e.value}")
    snap = t.snapshot()
    if name in REFUSED:
        with pytest.raises(UnsupportedFeatureError) as e:
            check_write_supported(snap.protocol, snap.metadata)
        pytest.skip(f"our feature gate refuses to write it: {e.value}")
    check_write_supported(snap.protocol, snap.metadata)  # any other table must be writable

    schema = snap.schema
    parts = set(snap.metadata.partition_columns or [])
    types = {f.name: f.type.name for f in schema.fields}
    computed = [f.name for f in schema.fields if _computed(f)]
    plain = [f.name for f in schema.fields if f.name not in computed]  # what the model knows
    before, before_rows = _rows(t)
    theirs_agree = _deltalake_counter(root, before.column_names) == _counter(before_rows, before.column_names)

    # append one of its own rows (a row of NULLs to an empty table); the writer assigns identities
    row = dict(before_rows[0]) if before_rows else dict.fromkeys(before.column_names)
    for c in computed:
        row[c] = None
    append_arrow(str(root), pa.Table.from_pylist([row], schema=before.schema))
    appended, rows = _rows(t)
    assert _counter(rows, plain) == _counter([*before_rows, row], plain), name
    for c in computed:  # one new value, the old ones kept
        new = Counter(appended.column(c).to_pylist()) - Counter(before.column(c).to_pylist())
        assert len(new) == 1 and next(iter(new)) not in before.column(c).to_pylist(), (name, c, new)

    # OPTIMIZE: the appended file and the others' in one bin, every row as it was
    result = t.optimize()
    if before_rows:  # the first row's partition holds its own file and the appended one
        assert result["metrics"]["numRemovedFiles"] >= 2, (name, result["metrics"])
    _, optimized = _rows(t)
    assert _counter(optimized, before.column_names) == _counter(rows, before.column_names), name
    rows = optimized

    # DELETE the rows equal to the appended row in one column (a data column first)
    ordered = sorted(plain, key=lambda c: c in parts)
    column = next((c for c in ordered if _literal(types[c], row[c]) is not None), None)
    if column is None:  # no value to write as a literal (an empty table's NULL row): delete NULLs
        column = ordered[0]
        predicate, deleted = f"`{column}` IS NULL", lambda r: r[column] is None
    else:
        v = row[column]
        predicate, deleted = f"`{column}` = {_literal(types[column], v)}", lambda r: r[column] == v
    expected = [r for r in rows if not deleted(r)]
    assert len(expected) < len(rows)  # the appended row at least
    result = t.delete(predicate)
    assert result["committed"], (name, predicate)
    _, rows = _rows(t)
    assert _counter(rows, before.column_names) == _counter(expected, before.column_names), (name, predicate)

    # MERGE: the first row's key updated with the last row's values, and a row with a new key inserted
    key = next((c for c in ordered if _keyable(types[c])), ordered[0])
    others = [c for c in plain if c != key]
    source_rows = []
    if rows and rows[0][key] is not None:
        source_rows.append({**{c: rows[-1][c] for c in others}, key: rows[0][key]})
    source_rows.append({**{c: (rows or [row])[0][c] for c in others}, key: _fresh(types[key], [r[key] for r in rows])})
    ids = {c: Counter(r[c] for r in rows) for c in computed}
    source = pa.Table.from_pylist(source_rows, schema=pa.schema([before.schema.field(c) for c in plain]))
    q = {c: f"`{c}`" for c in plain}
    updates = {q[c]: f"source.{q[c]}" for c in others} or {q[key]: f"source.{q[key]}"}
    result = (
        t.merge(source, f"target.{q[key]} = source.{q[key]}")
        .when_matched_update(updates)
        .when_not_matched_insert({q[c]: f"source.{q[c]}" for c in plain})
        .execute()
    )
    expected = [
        {**r, **{c: source_rows[0][c] for c in others}}
        if len(source_rows) == 2 and r[key] == source_rows[0][key]
        else r
        for r in rows
    ] + [source_rows[-1]]
    assert result["committed"], name
    merged, rows = _rows(t)
    assert _counter(rows, plain) == _counter(expected, plain), name
    for c in computed:  # the inserted row's identity is a new one, the others kept
        new = Counter(merged.column(c).to_pylist()) - ids[c]
        assert len(new) == 1 and next(iter(new)) not in ids[c], (name, c, new)

    if theirs_agree:
        assert _deltalake_counter(root, before.column_names) == _counter(rows, before.column_names), name


def _commit_theirs(root: str, data: pa.Table, partition_values: dict | None = None) -> None:
    """``data`` as one parquet file committed as another writer leaves it (its own column names and
    types, partition values spelled as given)."""
    from airflow_delta_provider_apps.engine.actions import AddFile
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    path = os.path.join(root, "theirs.parquet")
    pq.write_table(data, path)
    stats = json.dumps({"numRecords": data.num_rows})
    add = AddFile("theirs.parquet", partition_values or {}, os.path.getsize(path), 0, True, stats=stats)
    st = storage_for(root)
    OptimisticTransaction(st, root, load_snapshot(st, root), operation="WRITE").commit([add])


def test_optimize_conforms_each_file_before_combining(tmp_path):
    """Without the corpus: a file as another writer leaves it (a column named in other case, a
    zone-less nanosecond timestamp, a narrower integer, a column the table does not have, one it
    lacks) compacted with ours: the rows as read before, written in the table's types."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, ts TIMESTAMP, n INT, s STRING")
    theirs = {
        "ID": pa.array([1, 2], pa.int64()),
        "ts": pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns")),
        "n": pa.array([7, -3], pa.int16()),
        "gone": pa.array(["x", "y"]),
    }
    _commit_theirs(root, pa.table(theirs))
    ours = pa.table(
        {"id": [3], "ts": pa.array([0], pa.timestamp("us", "UTC")), "n": pa.array([1], pa.int32()), "s": ["z"]}
    )
    append_arrow(root, ours)
    t = DeltaTable.for_path(None, root)
    before = read_snapshot_table(t.snapshot())
    assert before.column("ts").to_pylist()[0] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, datetime.UTC)

    result = t.optimize()
    assert result["metrics"]["numRemovedFiles"] == 2 and result["metrics"]["numAddedFiles"] == 1
    after = read_snapshot_table(t.snapshot())
    assert sorted(after.to_pylist(), key=repr) == sorted(before.to_pylist(), key=repr)
    (path,) = t.snapshot().files.column("path").to_pylist()
    written = pq.read_schema(os.path.join(root, path))
    assert [(f.name, f.type) for f in written] == [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("n", pa.int32()),
        ("s", pa.string()),
    ]


def test_optimize_bins_a_partition_however_its_value_is_spelled(tmp_path):
    """delta-spark spells a timestamp partition value ``2021-09-08 11:11:11``, we spell it
    ``2021-09-08T11:11:11.000000Z``: one partition, compacted into one file."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="p TIMESTAMP, x BIGINT", partition_by=["p"])
    _commit_theirs(root, pa.table({"x": pa.array([1, 2], pa.int64())}), {"p": "2021-09-08 11:11:11"})
    at = datetime.datetime(2021, 9, 8, 11, 11, 11, tzinfo=datetime.UTC)
    append_arrow(root, pa.table({"p": pa.array([at], pa.timestamp("us", "UTC")), "x": pa.array([3], pa.int64())}))
    t = DeltaTable.for_path(None, root)
    assert len(set(map(str, t.snapshot().files.column("partition_values").to_pylist()))) == 2  # two spellings
    result = t.optimize()
    assert result["metrics"]["numRemovedFiles"] == 2 and result["metrics"]["numAddedFiles"] == 1
    after = read_snapshot_table(t.snapshot())
    assert sorted(after.to_pylist(), key=lambda r: r["x"]) == [{"p": at, "x": x} for x in (1, 2, 3)]


def test_the_tables_set_apart_are_in_the_corpus(conformance_root):
    dirs = {t["dir"] for t in TABLES}
    assert REFUSED | set(UNREADABLE) <= dirs
    assert len(dirs - REFUSED - set(UNREADABLE)) == 36  # appended to, optimized, deleted from, merged into
