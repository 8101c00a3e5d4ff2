"""VACUUM can never lose data: over random histories (appends, deletes, updates, optimizes, Z-orders,
restores, checkpoints, log cleanup, earlier vacuums, old and young files planted outside the log, hidden
files, a file outside the table, a hand-written commit pointing outside it; see tests/vacuum_histories.py),
after every vacuum the latest version and every version inside the retention read the same
rows as before (read by deltalake, an independent reader), and nothing hidden, under ``_delta_log`` or
outside the table was touched. Plus the rules one by one: retention enforcement, dry runs, lite mode
and its refusal, the VACUUM START/END commits, time travel and RESTORE after a vacuum. No Spark: the
engine runs DML in process."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.restore import restore
from airflow_delta_provider_apps.engine.commands.vacuum import vacuum
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

deltalake = pytest.importorskip("deltalake")

from vacuum_histories import HOUR_MS, OPS, check_vacuum, run_history  # noqa: E402
from vacuum_histories import age as _age  # noqa: E402
from vacuum_histories import append as _append  # noqa: E402
from vacuum_histories import new_table as _new_table  # noqa: E402
from vacuum_histories import rows as _rows  # noqa: E402


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 30)), min_size=2, max_size=9),
    st.integers(0, 3),
    st.integers(0, 4),
    st.sampled_from(["full", "lite"]),
    st.booleans(),
)
def test_vacuum_never_changes_what_a_version_inside_the_retention_reads(
    tmp_path_factory, history, retention_h, ahead_h, mode, dv
):
    root, t, outside, hidden = run_history(tmp_path_factory.mktemp("v"), history, dv=dv)
    check_vacuum(root, t, outside, hidden, retention_h, ahead_h, mode)


def test_retention_is_enforced_and_dry_run_deletes_nothing(tmp_path):
    root = _new_table(tmp_path)
    _append(root, [1, 2])
    _append(root, [3, 4], "b")
    t = DeltaTable(None, root)
    t.delete("p = 'b'")
    with pytest.raises(InvalidArgumentError, match="retention of 1 hours is refused.*168 hours"):
        t.vacuum(1)
    _age(root, 30 * 86400)
    future = int(time.time() * 1000) + 8 * 24 * HOUR_MS  # the delete's tombstone is expired then
    dry = vacuum(t.snapshot(), dry_run=True, now_ms=future)
    assert len(dry.fields["files"]) == 1 and "p=b" in dry.fields["files"][0] and dry.metrics.size_of_data_to_delete > 0
    assert os.path.exists(dry.fields["files"][0]) and t.version() == 3  # no commit, no delete
    done = vacuum(t.snapshot(), now_ms=future)
    assert done.metrics.num_deleted_files == 1 and done.metrics.num_vacuumed_directories == 1  # p=b is gone
    assert not os.path.exists(os.path.join(root, "p=b"))
    hist = t.history()
    assert [h["operation"] for h in hist[:2]] == ["VACUUM END", "VACUUM START"]
    start = hist[1]
    assert start["operationMetrics"]["numFilesToDelete"] == "1"
    assert start["operationParameters"]["specifiedRetentionMillis"] == str(7 * 24 * HOUR_MS)
    assert (
        hist[0]["operationMetrics"]["numDeletedFiles"] == "1"
        and hist[0]["operationParameters"]["status"] == "COMPLETED"
    )
    assert _rows(root) == [(1, 10, "a"), (2, 20, "a")]


def test_young_files_are_never_deleted(tmp_path):
    """A concurrent writer's file not yet committed is young: even a zero retention keeps what was
    written after the cutoff."""
    root = _new_table(tmp_path)
    _append(root, [1])
    pending = os.path.join(root, "p=a", "part-pending.parquet")
    with open(pending, "wb") as f:
        f.write(b"being written")
    res = vacuum(
        DeltaTable(None, root).snapshot(), 0, enforce_retention_duration=False, now_ms=int(time.time() * 1000) - 60_000
    )
    assert res.metrics.num_deleted_files == 0 and os.path.exists(pending)


def test_lite_finds_every_removed_file_of_the_log_and_refuses_when_the_log_is_cut(tmp_path):
    root = _new_table(tmp_path)
    t = DeltaTable(None, root)
    for i in range(4):
        _append(root, [i])
    t.delete("id < 2")  # removes two files
    t.checkpoint()
    _age(root, 30 * 86400)
    future = int(time.time() * 1000) + 8 * 24 * HOUR_MS
    orphan = os.path.join(root, "p=a", "never-committed.parquet")
    with open(orphan, "wb") as f:
        f.write(b"x")
    os.utime(orphan, (time.time() - 30 * 86400,) * 2)
    lite = vacuum(t.snapshot(), mode="lite", dry_run=True, now_ms=future)
    full = vacuum(t.snapshot(), mode="full", dry_run=True, now_ms=future)
    assert len(lite.fields["files"]) == 2  # the removed files (after a checkpoint too)
    assert sorted(full.fields["files"]) == sorted([*lite.fields["files"], orphan])  # + what no commit named
    vacuum(t.snapshot(), mode="lite", now_ms=future)
    assert _rows(root) == [(2, 20, "a"), (3, 30, "a")]
    # log cleanup removes commits a later lite run would need: it refuses, naming the versions
    _append(root, [9])
    t.delete("id = 9")
    t.checkpoint()
    log = os.path.join(root, "_delta_log")
    for name in sorted(os.listdir(log)):
        if name.endswith(".json") and int(name[:20]) < t.version() - 1:
            os.remove(os.path.join(log, name))
    with pytest.raises(InvalidArgumentError, match="VACUUM LITE cannot find every removed file.*mode='full'"):
        vacuum(t.snapshot(), mode="lite", now_ms=future)


def test_time_travel_and_restore_after_a_vacuum(tmp_path):
    root = _new_table(tmp_path)
    t = DeltaTable(None, root)
    _append(root, [1, 2])
    _append(root, [3], "b")
    t.delete("p = 'b'")  # version 3
    _age(root, 30 * 86400)
    vacuum(t.snapshot(), now_ms=int(time.time() * 1000) + 8 * 24 * HOUR_MS)
    with pytest.raises(InvalidArgumentError, match="Cannot RESTORE to version 2: 1 of its files no longer exist"):
        t.restore(version=2)
    assert t.history()[0]["operation"] == "VACUUM END"  # nothing committed by the refused restore
    restored = t.restore(version=1)
    assert restored["numRemovedFiles"] == 0 and restored["numOfFilesAfterRestore"] == 1
    assert _rows(root) == [(1, 10, "a"), (2, 20, "a")]


def test_a_file_read_then_removed_and_vacuumed_is_a_retryable_conflict(tmp_path):
    """An operation that outlives VACUUM's retention: a file of the version it read was removed by a
    later commit and deleted by VACUUM meanwhile. It fails with Delta's retryable conflict for a
    concurrent removal (naming the commit), not with a permanent "file missing"; a retry succeeds. A file
    deleted outside Delta (no commit removed it) stays a DataFileMissingError."""
    from airflow_delta_provider_apps.engine.commands import dml
    from airflow_delta_provider_apps.engine.commands.optimize import optimize
    from airflow_delta_provider_apps.engine.errors import ConcurrentDeleteReadError, DataFileMissingError

    root = _new_table(tmp_path)
    _append(root, [1, 2])
    _append(root, [3, 4])
    t = DeltaTable(None, root)
    stale = t.snapshot()
    compacted = t.optimize()["version"]  # removes both files (OPTIMIZE)
    future = int(time.time() * 1000) + HOUR_MS
    assert vacuum(t.snapshot(), 0, enforce_retention_duration=False, now_ms=future).metrics.num_deleted_files == 2
    for name, run in (
        ("DELETE", lambda: dml.delete(stale, "id = 1")),
        ("UPDATE", lambda: dml.update(stale, {"v": "v + 1"}, "id = 1")),
        ("OPTIMIZE", lambda: optimize(stale)),
    ):
        with pytest.raises(
            ConcurrentDeleteReadError, match=rf"{name} lost a file.*commit {compacted} \(OPTIMIZE\)"
        ) as e:
            run()
        assert e.value.retryable and e.value.winning_version == compacted
    assert t.delete("id = 1")["numDeletedRows"] == 1  # the retry reads the new version
    live = os.path.join(root, t.snapshot().files.column("path")[0].as_py())
    os.remove(live)
    with pytest.raises(DataFileMissingError):
        t.update({"v": "v + 1"}, "id = 3")


def _live_files_exist(root: str) -> bool:
    snap = DeltaTable(None, root).snapshot()
    from airflow_delta_provider_apps.engine.paths import file_locations

    return all(snap.storage.exists(p) for p in file_locations(root, snap.files.column("path")))


def test_vacuum_planned_before_a_restore_does_not_delete_what_it_brought_back(tmp_path):
    # issue 31.2, deterministically: VACUUM plans on version N where file X is removed; a RESTORE
    # commits N+1 adding X back; VACUUM must not delete X
    root = _new_table(tmp_path)
    _append(root, [1, 2])  # version 1: file X
    t = DeltaTable(None, root)
    t.delete("id = 1 or id = 2")  # version 2: X removed
    stale = t.snapshot()
    t.restore(version=1)  # version 3: X back
    future = int(time.time() * 1000) + HOUR_MS
    for mode in ("lite", "full"):
        vacuum(stale, 0, enforce_retention_duration=False, mode=mode, now_ms=future)
        assert _live_files_exist(root)
        assert _rows(root) == [(1, 10, "a"), (2, 20, "a")]  # deltalake reads the latest version
    history = [h["operation"] for h in t.history()]
    assert history[:5] == ["VACUUM END", "VACUUM START", "VACUUM END", "VACUUM START", "RESTORE"]


def test_restore_refuses_while_a_vacuum_runs_and_conflicts_with_one_that_starts(tmp_path):
    from airflow_delta_provider_apps.engine.commands import vacuum as vacuum_mod
    from airflow_delta_provider_apps.engine.commands.base import Command
    from airflow_delta_provider_apps.engine.errors import ConcurrentVacuumError

    root = _new_table(tmp_path)
    _append(root, [1, 2])
    t = DeltaTable(None, root)
    t.delete("id = 1")  # version 2
    log = sorted(os.listdir(os.path.join(root, "_delta_log")))
    # a VACUUM holding its lease (it may be deleting): RESTORE is refused, retryably, nothing committed
    lease = vacuum_mod.Lease(DeltaTable(None, root).snapshot().storage, root)
    try:
        assert len(vacuum_mod.vacuums_in_flight(lease.storage, root)) == 1
        with pytest.raises(ConcurrentVacuumError, match="RESTORE would bring back removed files") as e:
            t.restore(version=1)
        assert e.value.retryable and "retry after the VACUUM ends" in str(e.value)
        assert sorted(os.listdir(os.path.join(root, "_delta_log"))) == log
    finally:
        lease.release()
    assert vacuum_mod.vacuums_in_flight(lease.storage, root) == []
    # a lease its VACUUM stopped renewing counts no longer than its TTL
    stale_lease = vacuum_mod.Lease(lease.storage, root)
    stale_lease._stop.set()
    later = int(time.time() * 1000) + vacuum_mod.LEASE_TTL_MS + 1
    assert vacuum_mod.vacuums_in_flight(lease.storage, root, now_ms=later) == []
    stale_lease.release()
    # a VACUUM START that lands after RESTORE read the table: its commit conflicts
    read = t.snapshot()
    Command(t.snapshot(), "VACUUM START").commit([], None)
    with pytest.raises(ConcurrentVacuumError, match="A VACUUM started while this transaction") as e:
        restore(read, version=1)
    assert e.value.winning_version == 3
    assert t.restore(version=1)["numRestoredFiles"] == 1  # the retry, once it has ended
    assert _rows(root) == [(1, 10, "a"), (2, 20, "a")]


def test_a_time_travel_to_vacuumed_files_names_the_vacuum_that_deleted_them(tmp_path):
    from airflow_delta_provider_apps.engine.commands.vacuum import check_time_travel
    from airflow_delta_provider_apps.engine.errors import DataFileMissingError

    root = _new_table(tmp_path)
    _append(root, [1, 2])  # version 1
    t = DeltaTable(None, root)
    t.delete("id = 1 or id = 2")  # version 2 removes the file
    assert t.vacuum()["numDeletedFiles"] == 0  # versions 3-4: inside the 7-day retention, nothing deleted
    assert t.vacuum(0, enforce_retention_duration=False)["numDeletedFiles"] == 1  # versions 5-6
    t.vacuum(0, enforce_retention_duration=False)  # versions 7-8: nothing left to delete
    with pytest.raises(DataFileMissingError, match=r"Cannot read version 1.*VACUUM at version 5 \(retention 0 hours\)"):
        check_time_travel(t.snapshot(version=1))


def test_a_vacuum_whose_lease_is_stale_deletes_nothing(tmp_path, monkeypatch):
    """A VACUUM that cannot keep its lease fresh (a stalled process others may think dead) stops
    deleting: nothing deleted, VACUUM END says FAILED, the next VACUUM deletes the files."""
    from airflow_delta_provider_apps.engine.commands import vacuum as vacuum_mod

    root = _new_table(tmp_path)
    _append(root, [1, 2])
    t = DeltaTable(None, root)
    t.delete("id = 1 or id = 2")  # the file is removed: VACUUM at retention 0 may delete it
    monkeypatch.setattr(vacuum_mod, "LEASE_TTL_MS", vacuum_mod.LEASE_MARGIN_MS)  # never fresh
    stalled = t.vacuum(0, enforce_retention_duration=False)
    assert (stalled["numFilesToDelete"], stalled["numDeletedFiles"]) == (1, 0)
    assert t.history()[0]["operationParameters"]["status"] == "FAILED"
    monkeypatch.undo()
    assert t.vacuum(0, enforce_retention_duration=False)["numDeletedFiles"] == 1


def _history_for_keep(tmp_path):
    """v1 [1,2] a; v2 [3,4] b; v3 delete b; v4 optimize; v5 update: every old version lost files."""
    root = _new_table(tmp_path)
    _append(root, [1, 2])
    _append(root, [3, 4], "b")
    t = DeltaTable(None, root)
    t.delete("p = 'b'")
    _append(root, [5])
    t.optimize()
    t.update({"v": "v + 1"}, "id < 3")
    return root, t


def test_keep_versions_keeps_what_those_versions_read(tmp_path):
    from airflow_delta_provider_apps.engine.commands.vacuum import check_time_travel
    from airflow_delta_provider_apps.engine.errors import DataFileMissingError
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    root, t = _history_for_keep(tmp_path)
    latest = t.version()
    before = {v: _rows(root, v) for v in range(latest + 1)}
    _age(root, 30 * 86400)
    res = t.vacuum(0, enforce_retention_duration=False, keep_versions=[4, "2", 4])
    assert res["keep_versions"] == [2, 4] and res["metrics"]["numDeletedFiles"] > 0
    # the kept versions still read what they read (deltalake, an independent reader), and through us
    for v in (2, 4, latest):
        assert _rows(root, v) == before[v]
        check_time_travel(t.snapshot(version=v))
        assert read_snapshot_table(t.snapshot(version=v)).num_rows == len(before[v])
    with pytest.raises(DataFileMissingError, match="Cannot read version 5"):  # OPTIMIZE's file, not kept
        check_time_travel(t.snapshot(version=5))
    # a later VACUUM without keep_versions deletes what only they needed
    again = vacuum(t.snapshot(), 0, enforce_retention_duration=False)
    assert again.metrics.num_deleted_files > 0
    with pytest.raises(DataFileMissingError, match="Cannot read version 2"):
        check_time_travel(t.snapshot(version=2))


@pytest.mark.parametrize(
    ("keep", "message"), [([99], "version 99, which the table does not have"), (["x"], "not a table version")]
)
def test_keep_versions_refused_before_anything_is_written(tmp_path, keep, message):
    root, t = _history_for_keep(tmp_path)
    version = t.version()
    with pytest.raises(InvalidArgumentError, match=message):
        t.vacuum(0, enforce_retention_duration=False, keep_versions=keep)
    assert t.version() == version and not os.path.exists(os.path.join(root, "_delta_vacuum"))


def _plant(root):
    """Files a listing VACUUM judges: old and young orphans, a hidden file, a _change_data file."""
    for rel, old in (
        ("p=a/orphan-old.parquet", True),
        ("p=a/orphan-young.parquet", False),
        ("_staging/hidden.parquet", True),
        ("_change_data/cdc-old.parquet", True),
        ("p=a/.hidden-old.crc", True),
    ):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"x")
        # old: a month ago; young: after any cutoff these tests use (retention 0 cuts at "now")
        os.utime(path, (time.time() + (-30 * 86400 if old else 86400),) * 2)


def _inventory_of(root, spark_style: bool = False):
    """The table's files as S3 Inventory / delta-spark's inventory holds them, computed by os.walk:
    full paths, directories as rows, plus a row outside the table and a duplicate."""
    import pyarrow as pa

    rows = []
    for d, dirs, names in os.walk(root):
        for n in dirs:
            rows.append((os.path.join(d, n), 0, True, 0))
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            rows.append((p, st.st_size, False, int(st.st_mtime * 1000)))
    rows.append((root + "-other/part-0.parquet", 1, False, 0))  # another table's file
    rows.append(rows[-2])  # listed twice
    if spark_style:
        rows = [("file:" + p, *r) for p, *r in rows]
    cols = list(zip(*rows))
    return pa.table(
        {"path": list(cols[0]), "length": list(cols[1]), "isDir": list(cols[2]), "modificationTime": list(cols[3])}
    )


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_inventory_gives_the_listings_deletions(tmp_path, kind):
    import pyarrow.parquet as pq

    root, t = _history_for_keep(tmp_path)
    _age(root, 30 * 86400)
    _plant(root)
    inv = str(tmp_path / "inventory")
    if kind == "parquet":
        os.makedirs(inv)
        table = _inventory_of(root, spark_style=True)
        half = table.num_rows // 2  # two files, as an inventory report is split
        pq.write_table(table.slice(0, half), os.path.join(inv, "a.parquet"))
        pq.write_table(table.slice(half), os.path.join(inv, "b.parquet"))
    else:
        deltalake.write_deltalake(inv, _inventory_of(root))
    snap = t.snapshot()
    listed = vacuum(snap, 0, enforce_retention_duration=False, dry_run=True).fields["files"]
    from_inventory = vacuum(snap, 0, enforce_retention_duration=False, dry_run=True, inventory=inv).fields["files"]
    assert (
        from_inventory == listed and any("orphan-old" in p for p in listed) and any("_change_data" in p for p in listed)
    )
    assert not any("young" in p or "_staging" in p or ".hidden" in p for p in listed), listed
    kept = _rows(root)
    planned = vacuum(snap, 0, enforce_retention_duration=False, dry_run=True, keep_versions=[4]).fields["files"]
    assert set(planned) < set(listed)  # version 4's files are kept
    res = t.vacuum(0, enforce_retention_duration=False, inventory=inv, keep_versions=[4])
    assert res["metrics"]["numDeletedFiles"] == len(planned) and res["inventory"] == inv
    assert not any(os.path.exists(p) for p in planned) and all(os.path.exists(p) for p in set(listed) - set(planned))
    assert _rows(root) == kept and os.path.exists(os.path.join(root, "_staging/hidden.parquet"))
    left = vacuum(t.snapshot(), 0, enforce_retention_duration=False, dry_run=True).fields["files"]
    assert left == sorted(set(listed) - set(planned))


def test_inventory_with_the_wrong_columns_is_refused_before_anything_is_written(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, t = _history_for_keep(tmp_path)
    version = t.version()
    bad = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"path": ["x"], "size": [1], "isDir": [False], "modificationTime": ["0"]}), bad)
    with pytest.raises(InvalidArgumentError, match="length, modificationTime missing or of another type"):
        t.vacuum(0, enforce_retention_duration=False, inventory=bad)
    with pytest.raises(InvalidArgumentError, match="lite"):
        t.vacuum(0, enforce_retention_duration=False, inventory=bad, mode="lite")
    assert t.version() == version and not os.path.exists(os.path.join(root, "_delta_vacuum"))


def test_vacuum_refuses_a_table_whose_writer_protocol_it_does_not_support(tmp_path):
    """vacuumProtocolCheck: VACUUM checks the writer protocol before deleting, feature or not."""
    import json

    from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError

    root, t = _history_for_keep(tmp_path)
    _age(root, 30 * 86400)
    _plant(root)
    commit = os.path.join(root, "_delta_log", f"{t.version() + 1:020d}.json")
    body = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["someFutureFeature"]}}
    with open(commit, "w") as f:
        f.write(json.dumps(body) + "\n")
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        vacuum(t.snapshot(), 0, enforce_retention_duration=False)
    assert os.path.exists(os.path.join(root, "p=a/orphan-old.parquet"))
