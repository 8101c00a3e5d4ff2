"""Winning commits read as Arrow tables: big winners, removes matched by path, typed partition values.

Each winner is a real commit file in a real table's log (written with the engine's own serializer or
by a real transaction); our transaction read the table before it landed and must raise the expected
conflict naming the one file that causes it, or land.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os

import pytest
from txn_helpers import create_table, snapshot, txn, write_file

from airflow_delta_provider_apps.engine.actions import (
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    serialize_actions,
)
from airflow_delta_provider_apps.engine.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    LogCorruptedError,
)
from airflow_delta_provider_apps.engine.expr import parse_predicate
from airflow_delta_provider_apps.engine.partitions import serialize_partition_value
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import IsolationLevel, WinningCommit
from airflow_delta_provider_apps.engine.txn.conflicts import ExpressionPredicate

S = IsolationLevel.SERIALIZABLE
N = 50_000
NEEDLE = 31_337


def _stats(lo: int, hi: int) -> str:
    return json.dumps(
        {"numRecords": 10, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 0}},
        separators=(",", ":"),
    )


@functools.cache
def _big_append(n: int, *, needle: int | None = None, data_change: bool = True) -> tuple[AddFile, ...]:
    """``n`` adds over partitions o0..o99 with disjoint id ranges [10 i, 10 i + 9]; add ``needle``
    (if given) goes to partition ``needle`` and holds ids around 10**12 instead."""
    out = []
    for i in range(n):
        part = "needle" if i == needle else f"o{i % 100}"
        lo = 10**12 if i == needle else 10 * i
        out.append(
            AddFile(
                path=f"p={part}/part-{i:06d}.parquet",
                partition_values={"p": part},
                size=100,
                modification_time=1,
                data_change=data_change,
                stats=_stats(lo, lo + 9),
            )
        )
    return tuple(out)


@functools.cache
def _big_append_lines(n: int, *, needle: int | None = None, data_change: bool = True) -> bytes:
    return serialize_actions(_big_append(n, needle=needle, data_change=data_change))


def _land(root: str, version: int, lines: bytes, operation: str = "WRITE", blind: bool = True) -> None:
    """A concurrent writer's commit (its commitInfo, then ``lines``: serialised actions) put in the log."""
    ci = CommitInfo({"timestamp": 1, "operation": operation, "isBlindAppend": blind})
    data = serialize_actions([ci]) + lines
    storage_for(root).write_bytes(os.path.join(root, "_delta_log", f"{version:020d}.json"), data)


def _expr(snap, text: str) -> ExpressionPredicate:
    return ExpressionPredicate(parse_predicate(text, snap.schema), snap.schema, snap.partition_columns)


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    return root


# ------------------------------------------------------------------ many adds
@pytest.mark.parametrize(
    "predicate",
    [
        "id = 1000000000005",  # stats: only the needle's range [10**12, 10**12 + 9] holds it
        "p = 'needle'",  # partition values: only the needle is in that partition
        "p = 'needle' AND id > 5",
    ],
)
def test_one_add_among_many_matches_the_read_predicate(table, predicate):
    snap = snapshot(table)
    mine = txn(table, snap, operation="DELETE", isolation_level=S)
    mine.read_predicate(_expr(snap, predicate))
    _land(table, 1, _big_append_lines(N, needle=NEEDLE))
    with pytest.raises(ConcurrentAppendError) as ei:
        mine.commit([write_file(table, [1], "x")])
    assert ei.value.winning_version == 1
    assert f"added 'p=needle/part-{NEEDLE:06d}.parquet'" in ei.value.cause
    assert predicate.split(" ")[0] in ei.value.cause  # the predicate is named
    assert snapshot(table).version == 1  # nothing written


def test_many_adds_none_matching_lands(table):
    snap = snapshot(table)
    mine = txn(table, snap, operation="DELETE", isolation_level=S)
    mine.read_predicate(_expr(snap, "id > 10000000 OR p = 'elsewhere'"))  # ids of the winner stay below 500k
    _land(table, 1, _big_append_lines(N))
    res = mine.commit([write_file(table, [1], "x")])
    assert (res.version, res.conflicts_checked) == (2, [1])
    assert snapshot(table).num_files == N + 1


def test_rearranged_adds_do_not_count(table):
    """dataChange=false adds (an OPTIMIZE) are filtered out before the predicates run."""
    snap = snapshot(table)
    mine = txn(table, snap, operation="DELETE", isolation_level=S)
    mine.read_predicate(_expr(snap, "p = 'needle'"))
    _land(table, 1, _big_append_lines(1000, needle=7, data_change=False), operation="OPTIMIZE", blind=False)
    assert mine.commit([write_file(table, [1], "x")]).version == 2


def test_the_adds_table_holds_every_add_of_the_commit():
    adds = _big_append(N, needle=NEEDLE)
    w = WinningCommit.from_actions(3, [CommitInfo({"operation": "WRITE"}), *adds], partition_keys=["p"])
    assert w.adds.num_rows == N and w.removes.num_rows == 0
    assert w.adds.column("path").to_pylist() == [a.path for a in adds]
    assert w.adds.column("stats").to_pylist() == [a.stats for a in adds]
    pv = w.adds.column("partition_values").to_pylist()
    assert [dict(x) for x in pv[:7]] == [{"p": a.partition_values["p"]} for a in adds[:7]]
    assert (w.operation, w.version) == ("WRITE", 3)


# ------------------------------------------------------------------ removes, matched by path
def _optimize(table: str, snap, n: int) -> tuple[list[RemoveFile], list[str]]:
    """A winner that rewrote ``n`` files (dataChange=false removes), with 2 of our table's files among them."""
    ours = snap.files.column("path").to_pylist()
    removed = [f"p=o{i % 100}/part-{i:06d}.parquet" for i in range(n)]
    removed[n // 2] = ours[1]
    removed[n - 3] = ours[0]
    removes = [
        RemoveFile(path=p, data_change=False, deletion_timestamp=1, extended_file_metadata=True) for p in removed
    ]
    return removes, ours


@pytest.fixture
def three_files(table):
    from txn_helpers import append

    for i, part in enumerate("abc"):
        append(table, [i], part)
    return table


def test_a_read_file_among_many_removes_is_found_and_named(three_files):
    snap = snapshot(three_files)
    removes, ours = _optimize(three_files, snap, 20_000)
    mine = txn(three_files, snap, operation="UPDATE", isolation_level=S)
    # read many paths; the two the winner removed are named in the winner's line order
    mine.read_files([f"p=z/other-{i}.parquet" for i in range(5000)] + [ours[0], ours[1]])
    _land(three_files, 4, serialize_actions(removes), operation="OPTIMIZE", blind=False)
    with pytest.raises(ConcurrentDeleteReadError) as ei:
        mine.commit([write_file(three_files, [1], "x")])
    assert f"removed '{ours[1]}'; this transaction read that file" in ei.value.cause


def test_removes_not_read_do_not_conflict(three_files):
    snap = snapshot(three_files)
    removes, ours = _optimize(three_files, snap, 20_000)
    mine = txn(three_files, snap, operation="UPDATE", isolation_level=S)
    mine.read_files([ours[2]])  # the one file the winner kept
    _land(three_files, 4, serialize_actions(removes), operation="OPTIMIZE", blind=False)
    assert mine.commit([write_file(three_files, [1], "x")]).version == 5


def test_a_file_removed_by_both_is_found_and_named(three_files):
    snap = snapshot(three_files)
    removes, ours = _optimize(three_files, snap, 20_000)
    rows = {r["path"]: r for r in snap.files.to_pylist()}
    mine = txn(three_files, snap, operation="DELETE", isolation_level=S)  # removes without reading (metadata-only)
    own = [
        RemoveFile(path=p, deletion_timestamp=2, partition_values=dict(rows[p]["partition_values"]))
        for p in (ours[2], ours[0])
    ]
    _land(three_files, 4, serialize_actions(removes), operation="OPTIMIZE", blind=False)
    with pytest.raises(ConcurrentDeleteDeleteError) as ei:
        mine.commit(own)
    assert f"removed '{ours[0]}' too" in ei.value.cause


def test_the_removes_table_keeps_the_commit_order():
    removes = [RemoveFile(path=f"f{i}", data_change=i % 2 == 0, deletion_timestamp=i) for i in range(1000)]
    w = WinningCommit.from_actions(1, removes)
    assert w.removes.column("path").to_pylist() == [r.path for r in removes]
    assert w.removes.column("data_change").to_pylist() == [r.data_change for r in removes]
    assert w.removes.column("deletion_timestamp").to_pylist() == list(range(1000))
    assert w.adds.num_rows == 0 and w.commit_info == {}


# ------------------------------------------------------------------ partition values that need typing
TYPED_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "f", "type": "double", "nullable": True, "metadata": {}},
    ],
}


@pytest.fixture
def typed_table(tmp_path):
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    root = str(tmp_path / "typed")
    t = OptimisticTransaction(storage_for(root), root, None, operation="CREATE TABLE")
    t.update_metadata(
        Metadata(
            id=Metadata.new_id(),
            schema_string=json.dumps(TYPED_SCHEMA),
            partition_columns=["ts", "f"],
            configuration={},
            created_time=1,
        )
    )
    t.update_protocol(Protocol(1, 2))
    t.commit([])
    return root


def _typed_add(name: str, ts: dt.datetime, f: float) -> AddFile:
    return AddFile(
        path=f"{name}.parquet",
        partition_values={
            "ts": serialize_partition_value(ts, "timestamp"),
            "f": serialize_partition_value(f, "double"),
        },
        size=100,
        modification_time=1,
        data_change=True,
        stats=json.dumps({"numRecords": 1, "minValues": {"id": 1}, "maxValues": {"id": 1}, "nullCount": {"id": 0}}),
    )


NEW_YEAR = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "predicate,winner_ts,winner_f,conflicts",
    [
        ("ts = TIMESTAMP '2026-01-01 00:00:00'", NEW_YEAR, 1.5, True),
        ("ts = TIMESTAMP '2026-01-01 00:00:00'", NEW_YEAR + dt.timedelta(microseconds=1), 1.5, False),
        ("ts > TIMESTAMP '2025-12-31 23:59:59'", NEW_YEAR, 1.5, True),
        ("f = 1.0", NEW_YEAR, 1.0, True),
        ("f = 1.0", NEW_YEAR, 1.5, False),
        ("f > 1.25 AND ts < TIMESTAMP '2026-01-02 00:00:00'", NEW_YEAR, 1.5, True),
    ],
)
def test_a_concurrent_append_into_a_typed_partition(typed_table, predicate, winner_ts, winner_f, conflicts):
    snap = snapshot(typed_table)
    mine = txn(typed_table, snap, operation="DELETE", isolation_level=S)
    mine.read_predicate(_expr(snap, predicate))
    winner = txn(typed_table, snap, operation="WRITE")
    assert winner.commit([_typed_add("theirs", winner_ts, winner_f)]).version == 1  # a real transaction
    ours = _typed_add("ours", dt.datetime(2020, 1, 1, tzinfo=dt.UTC), 9.0)
    if conflicts:
        with pytest.raises(ConcurrentAppendError) as ei:
            mine.commit([ours])
        assert "added 'theirs.parquet'" in ei.value.cause and ei.value.winning_version == 1
    else:
        assert mine.commit([ours]).version == 2


def test_typed_partition_values_keep_the_log_text(typed_table):
    """ISO timestamps and floats are kept as the log's strings (the JSON reader would infer
    timestamps / doubles from them); the predicate model types them from that text."""
    snap = snapshot(typed_table)
    winner = txn(typed_table, snap, operation="WRITE")
    winner.commit([_typed_add("a", NEW_YEAR, 1.0), _typed_add("b", NEW_YEAR, 2.5)])
    raw = storage_for(typed_table).read_bytes(os.path.join(typed_table, "_delta_log", f"{1:020d}.json"))
    expected = [json.loads(line)["add"]["partitionValues"] for line in raw.splitlines() if b'"add"' in line]
    w = WinningCommit.from_bytes(1, raw, partition_keys=["ts", "f"])
    assert [dict(pv) for pv in w.adds.column("partition_values").to_pylist()] == expected
    assert expected[0] == {"ts": "2026-01-01T00:00:00.000000Z", "f": "1.0"}


# ------------------------------------------------------------------ damaged winners
@pytest.mark.parametrize(
    "tail",
    [
        b'{"add":{"path":"torn.parquet","partitionValues":{"p":"a"},"si',  # torn file action
        b'{"txn":{"appId":"x","vers',  # torn non-file action
    ],
)
def test_a_torn_winning_commit_is_a_clear_error(table, tail):
    snap = snapshot(table)
    mine = txn(table, snap, operation="DELETE", isolation_level=S)
    mine.read_predicate({"p": "a"})
    good = serialize_actions([CommitInfo({"timestamp": 1, "operation": "WRITE"}), *_big_append(10)])
    storage_for(table).write_bytes(os.path.join(table, "_delta_log", f"{1:020d}.json"), good + tail)
    with pytest.raises(LogCorruptedError) as ei:
        mine.commit([write_file(table, [1], "x")])
    assert "Commit 1 of the table" in ei.value.problem and "not valid JSON" in ei.value.problem
    assert snapshot(table, version=0).version == 0 and not os.path.exists(
        os.path.join(table, "_delta_log", f"{2:020d}.json")
    )


def test_only_data_changing_adds_are_checked():
    """A rearranged (dataChange=false) add in the read partition is passed over; the data-changing one
    after it is named; an add without the flag may have changed data, so it counts."""
    from airflow_delta_provider_apps.engine.txn import PartitionFilter
    from airflow_delta_provider_apps.engine.txn.conflicts import ConflictChecker, CurrentTransaction

    lines = b"\n".join(
        [
            b'{"commitInfo":{"operation":"MIXED"}}',
            b'{"add":{"path":"moved","partitionValues":{"p":"a"},"size":1,"modificationTime":1,"dataChange":false}}',
            b'{"add":{"path":"other","partitionValues":{"p":"b"},"size":1,"modificationTime":1,"dataChange":true}}',
            b'{"add":{"path":"new","partitionValues":{"p":"a"},"size":1,"modificationTime":1,"dataChange":true}}',
            b'{"add":{"path":"unflagged","partitionValues":{"p":"c"},"size":1,"modificationTime":1}}',
        ]
    )
    w = WinningCommit.from_bytes(4, lines, partition_keys=["p"])
    assert w.changed_data_adds.column("path").to_pylist() == ["other", "new", "unflagged"]
    cur = CurrentTransaction(read_version=3, isolation_level=S, read_predicates=[PartitionFilter({"p": "a"})])
    with pytest.raises(ConcurrentAppendError) as ei:
        ConflictChecker(cur, w).check()
    assert "added 'new'" in ei.value.cause and "version 4 (MIXED)" in ei.value.cause
    cur = CurrentTransaction(read_version=3, isolation_level=S, read_predicates=[PartitionFilter({"p": "c"})])
    with pytest.raises(ConcurrentAppendError, match="unflagged"):
        ConflictChecker(cur, w).check()
