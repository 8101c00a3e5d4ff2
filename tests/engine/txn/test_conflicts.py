"""Conflict matrix, after delta-rs' port of Delta's OptimisticTransactionSuite.

Every case runs for real on a fresh table: version 0 create, v1 adds file A (p=a), v2 adds file B
(p=b). Our transaction and the winning transaction both start from the snapshot of v2; the winner
commits v3 first, then our commit must either land (at v4, after checking v3) or raise the expected
typed conflict naming version 3 -- and write nothing.

Columns: (name, isolation level, our reads, winning commit, our actions, expected error, None (lands)
or "skipped" (the winner already committed our (app_id, version): nothing written)).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pyarrow as pa
import pytest
from txn_helpers import append, commit_json, create_table, make_metadata, read_ids, snapshot, txn, write_file

from airflow_delta_provider_apps.engine.actions import DomainMetadata, Protocol, RemoveFile
from airflow_delta_provider_apps.engine.errors import (
    CommitConflictError,
    CommitRetriesExhaustedError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    MetadataChangedError,
    ProtocolChangedError,
)
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import (
    CallablePredicate,
    IsolationLevel,
    OptimisticTransaction,
    PartitionFilter,
    WinningCommit,
)
from airflow_delta_provider_apps.engine.txn.conflicts import ConflictChecker, CurrentTransaction

S = IsolationLevel.SERIALIZABLE
WS = IsolationLevel.WRITE_SERIALIZABLE

DOMAIN_PROTOCOL = Protocol(1, 7, writer_features=["domainMetadata"])

# reads: ("none",) ("whole",) ("pred", filter) ("files", ["A"]) - combinations as a list
# winner / own: ("append", part) ("append_read", part) [= not blind] ("delete", "A") ("compact", "A")
#               ("metadata",) ("protocol", Protocol) ("txn", app) ("domain", name)
#               ("vacuum_start",) [winner: VACUUM START's empty commit] ("restore",) [own: re-adds a file]
CASES = [
    # --- a RESTORE (brings back removed files) vs a VACUUM START that landed after it read --------
    ("restore vs vacuum start", S, [], ("vacuum_start",), ("restore",), ConcurrentVacuumError),
    ("blind append vs vacuum start", S, [], ("vacuum_start",), ("append", "a"), None),
    ("restore vs blind append", WS, [], ("append", "b"), ("restore",), None),
    # --- blind appends never conflict (except protocol/metadata) ---------------------------
    ("blind append vs blind append", S, [], ("append", "a"), ("append", "a"), None),
    ("blind append vs blind append WS", WS, [], ("append", "a"), ("append", "a"), None),
    ("blind append vs delete", S, [], ("delete", "A"), ("append", "a"), None),
    ("blind append vs metadata change", S, [], ("metadata",), ("append", "a"), MetadataChangedError),
    # a protocol change conflicts only when incompatible (as in Delta and delta-rs)
    ("blind append vs compatible protocol upgrade", S, [], ("protocol", Protocol(1, 3)), ("append", "a"), None),
    ("blind append vs protocol downgrade", S, [], ("protocol", Protocol(1, 1)), ("append", "a"), ProtocolChangedError),
    (
        "blind append vs upgrade to an unsupported writer feature",
        S,
        [],
        ("protocol", Protocol(1, 7, writer_features=["appendOnly", "invariants", "icebergCompatV2", "domainMetadata"])),
        ("append", "a"),
        ProtocolChangedError,
    ),
    (
        "delete vs compatible protocol upgrade",
        S,
        [("pred", {"p": "a"})],
        ("protocol", Protocol(1, 4)),
        ("delete", "A"),
        None,
    ),
    # --- concurrent appends vs read predicates ---------------------------------------------
    (
        "read p=a, blind append to p=a, Serializable",
        S,
        [("pred", {"p": "a"})],
        ("append", "a"),
        ("append", "a"),
        ConcurrentAppendError,
    ),
    (
        "read p=a, blind append to p=a, WriteSerializable",
        WS,
        [("pred", {"p": "a"})],
        ("append", "a"),
        ("append", "a"),
        None,
    ),
    (
        "read p=a, append (that read p=a) to p=a, WriteSerializable",
        WS,
        [("pred", {"p": "a"})],
        ("append_read", "a"),
        ("append", "a"),
        ConcurrentAppendError,
    ),
    (
        "read p=a, blind append to p=b (disjoint), Serializable",
        S,
        [("pred", {"p": "a"})],
        ("append", "b"),
        ("append", "a"),
        None,
    ),
    (
        "read p=a, append (that read p=b) to p=b (disjoint), WS",
        WS,
        [("pred", {"p": "a"})],
        ("append_read", "b"),
        ("append", "a"),
        None,
    ),
    (
        "read p in (a,b), blind append to p=b",
        S,
        [("pred", [("p", "in", ["a", "b"])])],
        ("append", "b"),
        ("append", "c"),
        ConcurrentAppendError,
    ),
    (
        "read p is null, blind append to null partition",
        S,
        [("pred", {"p": None})],
        ("append", None),
        ("append", "a"),
        ConcurrentAppendError,
    ),
    ("read p is null, blind append to p=a", S, [("pred", {"p": None})], ("append", "a"), ("append", "a"), None),
    (
        "read whole table, blind append, Serializable",
        S,
        [("whole",)],
        ("append", "b"),
        ("append", "a"),
        ConcurrentAppendError,
    ),
    ("read whole table, blind append, WriteSerializable", WS, [("whole",)], ("append", "b"), ("append", "a"), None),
    # our own metadata change makes the winner's blind appends count under WriteSerializable
    (
        "read p=a + own metadata change, blind append p=a, WS",
        WS,
        [("pred", {"p": "a"})],
        ("append", "a"),
        ("metadata_append", "a"),
        ConcurrentAppendError,
    ),
    # --- concurrent deletes vs read files --------------------------------------------------
    (
        "read+delete A, concurrent delete A",
        S,
        [("pred", {"p": "a"}), ("files", ["A"])],
        ("delete", "A"),
        ("delete", "A"),
        ConcurrentDeleteReadError,
    ),
    (
        "read+delete A, concurrent delete B",
        S,
        [("pred", {"p": "a"}), ("files", ["A"])],
        ("delete", "B"),
        ("delete", "A"),
        None,
    ),
    (
        "read whole table, concurrent delete B",
        S,
        [("whole",)],
        ("delete", "B"),
        ("append", "a"),
        ConcurrentDeleteReadError,
    ),
    (
        "read A, concurrent compaction of A",
        S,
        [("files", ["A"])],
        ("compact", "A"),
        ("append", "a"),
        ConcurrentDeleteReadError,
    ),
    (
        "read p=a (no files), concurrent compaction of A",
        S,
        [("pred", {"p": "a"})],
        ("compact", "A"),
        ("append", "a"),
        None,
    ),
    # --- delete / delete --------------------------------------------------------------------
    (
        "delete A without reads, concurrent delete A",
        S,
        [],
        ("delete", "A"),
        ("delete", "A"),
        ConcurrentDeleteDeleteError,
    ),
    # a compaction reads the files it rewrites, so the read check fires first (as in delta-spark)
    ("compaction of A vs concurrent delete A", S, [], ("delete", "A"), ("compact", "A"), ConcurrentDeleteReadError),
    # --- rearrangements (SnapshotIsolation) -------------------------------------------------
    ("compaction of A vs concurrent blind append p=a", S, [("files", ["A"])], ("append", "a"), ("compact", "A"), None),
    (
        "compaction of A vs concurrent non-blind append p=a",
        S,
        [("files", ["A"]), ("pred", {"p": "a"})],
        ("append_read", "a"),
        ("compact", "A"),
        None,
    ),
    # --- application transactions -----------------------------------------------------------
    (
        "same app id, winner has an older txn version",
        S,
        [],
        ("txn", "app-1", 1),
        ("txn", "app-1", 7),
        ConcurrentTransactionError,
    ),
    # a concurrent run of the same idempotent write landed first: we are a duplicate -> skipped
    ("same app id, winner has our txn version", S, [], ("txn", "app-1", 7), ("txn", "app-1", 7), "skipped"),
    ("same app id, winner has a newer txn version", S, [], ("txn", "app-1", 9), ("txn", "app-1", 7), "skipped"),
    ("different app ids", S, [], ("txn", "app-2", 7), ("txn", "app-1", 7), None),
    # --- domain metadata --------------------------------------------------------------------
    ("same domain", S, [], ("domain", "d1"), ("domain", "d1"), ConcurrentTransactionError),
    ("different domains", S, [], ("domain", "d2"), ("domain", "d1"), None),
]


def _file_of(snap, name: str) -> dict:
    part = {"A": "a", "B": "b"}[name]
    rows = snap.files.to_pylist()
    return next(r for r in rows if r["partition_values"] and dict(r["partition_values"]).get("p") == part)


def _remove(row: dict, data_change: bool = True) -> RemoveFile:
    return RemoveFile(
        path=row["path"],
        data_change=data_change,
        deletion_timestamp=1_700_000_000_000,
        extended_file_metadata=True,
        partition_values=dict(row["partition_values"]),
        size=row["size"],
    )


def _actions(root: str, snap, spec: tuple, t: OptimisticTransaction) -> list:
    kind = spec[0]
    if kind in ("vacuum_start",):
        return []
    if kind == "restore":
        return [write_file(root, [1], "a")]
    if kind in ("append", "append_read"):
        if kind == "append_read":
            t.read_predicate({"p": spec[1]})
        return [write_file(root, [1, 2], spec[1])]
    if kind == "metadata_append":
        md = snap.metadata
        t.update_metadata(replace(md, configuration={**md.configuration, "x.k": "v"}))
        return [write_file(root, [1, 2], spec[1])]
    if kind == "delete":
        return [_remove(_file_of(snap, spec[1]))]
    if kind == "compact":
        row = _file_of(snap, spec[1])
        t.read_files([row["path"]])
        new = write_file(root, [10, 11], dict(row["partition_values"])["p"])
        return [_remove(row, data_change=False), replace(new, data_change=False)]
    if kind == "metadata":
        md = snap.metadata
        t.update_metadata(replace(md, configuration={**md.configuration, "winner.k": "1"}))
        return []
    if kind == "txn":
        return []  # the SetTransaction comes from app_id/app_version
    if kind == "domain":
        return [DomainMetadata(domain=spec[1], configuration=json.dumps({"owner": "test"}))]
    raise AssertionError(kind)


def _raw_protocol_commit(root: str, version: int, protocol: Protocol) -> None:
    """Another writer upgrades the protocol (written directly, as a foreign engine would)."""
    from airflow_delta_provider_apps.engine.actions import CommitInfo, serialize_actions

    data = serialize_actions([CommitInfo({"timestamp": 1, "operation": "UPGRADE PROTOCOL"}), protocol])
    storage_for(root).write_bytes(os.path.join(root, "_delta_log", f"{version:020d}.json"), data)


@pytest.mark.parametrize("name,level,reads,winner,own,expected", CASES, ids=[c[0] for c in CASES])
def test_conflict_matrix(tmp_path, name, level, reads, winner, own, expected):
    root = str(tmp_path / "t")
    needs_domain = winner[0] == "domain" or own[0] == "domain"
    create_table(root, protocol=DOMAIN_PROTOCOL if needs_domain else None)
    append(root, [1], "a")  # v1: file A
    append(root, [2], "b")  # v2: file B
    snap = snapshot(root)
    assert snap.version == 2

    own_kwargs = {"app_id": own[1], "app_version": own[2]} if own[0] == "txn" else {}
    if own[0] == "restore":
        own_kwargs["readds_files"] = True
    mine = txn(root, snap, operation="TEST", isolation_level=level, **own_kwargs)
    for r in reads:
        if r[0] == "whole":
            mine.read_whole_table()
        elif r[0] == "pred":
            mine.read_predicate(r[1])
        elif r[0] == "files":
            mine.read_files([_file_of(snap, n)["path"] for n in r[1]])
    own_actions = _actions(root, snap, own, mine)

    if winner[0] == "protocol":
        _raw_protocol_commit(root, 3, winner[1])
    else:
        w_kwargs = {"app_id": winner[1], "app_version": winner[2]} if winner[0] == "txn" else {}
        w = txn(root, snap, operation="VACUUM START" if winner[0] == "vacuum_start" else "WINNER", **w_kwargs)
        assert w.commit(_actions(root, snap, winner, w)).version == 3

    if expected == "skipped":
        res = mine.commit(own_actions)
        assert (res.skipped, res.version, res.attempts) == (True, 3, 0)  # found before writing
        assert snapshot(root).version == 3  # nothing written
    elif expected is None:
        res = mine.commit(own_actions)
        assert (res.version, res.attempts, res.conflicts_checked) == (4, 1, [3])  # rebased before writing
        assert commit_json(root, 4)[0]["commitInfo"]["readVersion"] == 2
        assert snapshot(root).version == 4
    else:
        with pytest.raises(expected) as ei:
            mine.commit(own_actions)
        err = ei.value
        assert isinstance(err, CommitConflictError) and err.retryable
        assert err.winning_version == 3
        assert err.cause and "version 3" in err.cause and err.fix
        assert snapshot(root).version == 3  # nothing written


def test_conflict_found_in_a_later_winner(tmp_path):
    """Several winners: the compatible ones are passed, the conflicting one is named."""
    root = str(tmp_path / "t")
    create_table(root)
    snap = snapshot(root)
    mine = txn(root, snap)
    mine.read_predicate({"p": "x"})
    append(root, [1], "a")
    append(root, [2], "b")
    append(root, [3], "x")  # v3 conflicts
    append(root, [4], "c")
    with pytest.raises(ConcurrentAppendError) as ei:
        mine.commit([write_file(root, [9], "x")])
    assert ei.value.winning_version == 3


def test_rebase_over_many_winners(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    snap = snapshot(root)
    mine = txn(root, snap)
    mine.read_predicate({"p": "mine"})
    for i in range(5):
        append(root, [i], f"other{i}")
    res = mine.commit([write_file(root, [9], "mine")])
    assert (res.version, res.attempts, res.conflicts_checked) == (6, 1, [1, 2, 3, 4, 5])
    assert commit_json(root, 6)[0]["commitInfo"]["readVersion"] == 0


def test_rebases_over_newer_commits_before_writing(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    snap = snapshot(root)
    mine = txn(root, snap, max_retries=0)
    append(root, [1], "a")
    res = mine.commit([write_file(root, [2], "b")])  # no race lost: the listing saw version 1 first
    assert (res.version, res.attempts, res.conflicts_checked) == (2, 1, [1])


def test_retries_exhausted_is_a_conflict_error(tmp_path):
    from airflow_delta_provider_apps.engine.storage import LocalStorage
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    root = str(tmp_path / "t")
    create_table(root)
    snap = snapshot(root)

    class RacedStorage(LocalStorage):
        """Another writer takes each version between our listing and our put-if-absent."""

        def write_bytes(self, path, data, *, overwrite=False):
            if path.endswith(".json") and "/_delta_log/" in path and not overwrite:
                append(root, [9], "z")
                raise FileExistsError(path)
            return super().write_bytes(path, data, overwrite=overwrite)

    mine = OptimisticTransaction(RacedStorage(), root, snap, operation="WRITE", max_retries=0)
    with pytest.raises(CommitRetriesExhaustedError) as ei:
        mine.commit([write_file(root, [2], "b")])
    assert ei.value.retryable and "1 attempts" in ei.value.problem
    assert snapshot(root).version == 1


def test_concurrent_table_creation(tmp_path):
    root = str(tmp_path / "t")
    st = storage_for(root)
    a = OptimisticTransaction(st, root, None, operation="CREATE TABLE")
    b = OptimisticTransaction(st, root, None, operation="CREATE TABLE")
    for t in (a, b):
        t.update_metadata(make_metadata())
        t.update_protocol(Protocol(1, 2))
    assert a.commit([]).version == 0
    with pytest.raises(ProtocolChangedError) as ei:
        b.commit([])
    assert "created by another writer" in ei.value.problem


# ------------------------------------------------------------------ predicates, unit level
def _adds(*parts):
    from airflow_delta_provider_apps.engine.actions import AddFile

    return WinningCommit.from_actions(
        1,
        [
            AddFile(path=f"f{i}", partition_values={"p": p, "q": "1"}, size=1, modification_time=0, data_change=True)
            for i, p in enumerate(parts)
        ],
    ).adds


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"p": "a"}, [True, False, False, False]),
        ({"p": ["a", "b"]}, [True, True, False, False]),
        ({"p": None}, [False, False, True, True]),  # None and "" are both null partitions
        ({"p": "a", "q": "2"}, [False, False, False, False]),
        ([("p", "!=", "a")], [False, True, False, False]),  # null != 'a' is not true
        ([("p", "is not null")], [True, True, False, False]),
        ([("p", "not in", ["a"])], [False, True, False, False]),
        ([[("p", "=", "a")], [("p", "=", "b")]], [True, True, False, False]),  # OR of ANDs
        ({"p": ["a", None]}, [True, False, True, True]),
    ],
)
def test_partition_filter(spec, expected):
    adds = _adds("a", "b", None, "")
    assert PartitionFilter(spec).matches(adds).to_pylist() == expected


def test_callable_predicate_null_means_may_match():
    adds = _adds("a", "b")
    pred = CallablePredicate(lambda t: pa.array([False, None], pa.bool_()), "stats-based")
    assert pred.any_match(adds) == 1


def test_checker_order_protocol_before_everything(tmp_path):
    """A winner that changes the protocol AND removes our read file reports the protocol first."""
    from airflow_delta_provider_apps.engine.actions import CommitInfo

    cur = CurrentTransaction(read_version=5, isolation_level=S, read_whole_table=True, read_protocol=Protocol(1, 2))
    winner = WinningCommit.from_actions(6, [CommitInfo({"operation": "X"}), Protocol(1, 1), RemoveFile(path="f")])
    with pytest.raises(ProtocolChangedError) as e:
        ConflictChecker(cur, winner).check()
    assert "removed protocol features" in e.value.cause
    assert ConflictChecker.CHECKS[0] == "check_protocol" and ConflictChecker.CHECKS[-1] == "check_vacuum"


def test_a_stale_writer_never_lands_behind_log_cleanup(tmp_path):
    """Slow writer reads v1; ten commits land; a checkpoint; cleanup deletes the expired commits; the
    slow writer commits: it must land visibly or fail retryably, never 'succeed' into a hole."""
    from airflow_delta_provider_apps.engine.errors import CommitConflictError
    from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint
    from airflow_delta_provider_apps.engine.log.cleanup import cleanup_expired_logs

    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1], "a")
    slow = txn(root, snapshot(root))  # read version 1
    slow_file = write_file(root, [1000], "s")
    for i in range(10):
        append(root, [10 + i], "a")
    latest = snapshot(root)
    write_checkpoint(storage_for(root), root, latest)
    cleaned = cleanup_expired_logs(storage_for(root), root, latest, retention_ms=0, now_ms=2**62)
    assert cleaned["num_deleted_commits"] > 0  # commit 2 is gone
    try:
        res = slow.commit([slow_file])
    except CommitConflictError as e:
        assert e.retryable and "removed by log cleanup" in e.cause
        assert snapshot(root).version == latest.version
        assert 1000 not in read_ids(root)
        return
    # landed: at the true next version, and visible to us and to deltalake
    assert res.version == latest.version + 1
    assert 1000 in read_ids(root)
    deltalake = pytest.importorskip("deltalake")
    assert 1000 in deltalake.DeltaTable(root).to_pyarrow_table().column("id").to_pylist()


def test_a_concurrent_protocol_change_is_a_conflict_when_this_transaction_changes_it_too():
    from airflow_delta_provider_apps.engine.actions import CommitInfo

    cur = CurrentTransaction(read_version=5, isolation_level=S, actions=[Protocol(1, 4)], read_protocol=Protocol(1, 2))
    winner = WinningCommit.from_actions(6, [CommitInfo({"operation": "X"}), Protocol(1, 3)])
    with pytest.raises(ProtocolChangedError) as e:
        ConflictChecker(cur, winner).check()
    assert "changes the protocol too" in e.value.cause


def test_an_upgrade_to_a_feature_this_engine_cannot_write_names_it():
    from airflow_delta_provider_apps.engine.actions import CommitInfo

    cur = CurrentTransaction(read_version=5, isolation_level=S, read_protocol=Protocol(1, 2))
    new = Protocol(1, 7, writer_features=["appendOnly", "invariants", "icebergCompatV2"])  # keeps what (1, 2) implied
    with pytest.raises(ProtocolChangedError) as e:
        ConflictChecker(cur, WinningCommit.from_actions(6, [CommitInfo({"operation": "X"}), new])).check()
    assert "icebergCompatV2" in e.value.cause
