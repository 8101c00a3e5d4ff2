"""How often a commit lists ``_delta_log``: once in full (the snapshot the write reads), then only from
the version it read on (the check for concurrent commits before writing ``N.json``), never the whole
log a second time. Counted at the storage boundary: every ``list_dir`` of the log, with what it
returned; a listing that returns commit 0 listed the whole log."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
from txn_helpers import append, create_table, snapshot, txn, write_file

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import CommitConflictError
from airflow_delta_provider_apps.engine.storage import LocalStorage

FIRST_COMMIT = f"{0:020d}.json"


@pytest.fixture
def log_listings(monkeypatch):
    """Every listing of a ``_delta_log`` directory: the names it returned, in call order."""
    calls: list[list[str]] = []
    real = LocalStorage.list_dir

    def list_dir(self, dir_path, **kw):
        out = real(self, dir_path, **kw)
        if dir_path.rstrip("/").endswith("/_delta_log"):
            calls.append([f.name for f in out])
        return out

    monkeypatch.setattr(LocalStorage, "list_dir", list_dir)
    return calls


def _versions(names: list[str]) -> set[int]:
    return {int(n[:20]) for n in names if n[:20].isdigit()}


def test_an_append_lists_the_whole_log_once(tmp_path, log_listings):
    root = str(tmp_path / "t")
    # no checkpoint in the way: only the append's own listings are counted
    DeltaTable.create(None, root, schema="id BIGINT", properties={"delta.checkpointInterval": "1000"})
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    for _ in range(12):
        append_arrow(root, rows)
    for version in (13, 14, 15):
        log_listings.clear()
        assert append_arrow(root, rows).version == version
        whole = [names for names in log_listings if FIRST_COMMIT in names]
        assert len(whole) == 1, f"commit {version} listed the whole log {len(whole)} times"
        assert _versions(whole[0]) == set(range(version))  # the snapshot it read
        rest = [names for names in log_listings if FIRST_COMMIT not in names]
        assert len(rest) == 1  # the check for concurrent commits before writing N.json
        assert _versions(rest[0]) == {version - 1}  # from the version it read on, nothing older


def test_the_check_before_writing_finds_a_concurrent_commit_from_the_version_read(tmp_path, log_listings):
    root = str(tmp_path / "t")
    create_table(root)
    for i in range(5):
        append(root, [i])
    mine = txn(root, snapshot(root), operation="WRITE", operation_parameters={"mode": "Append"})
    assert append(root, [100]).version == 6  # lands after our read of version 5
    add = write_file(root, [7])
    log_listings.clear()
    result = mine.commit([add])
    assert (result.version, result.conflicts_checked) == (7, [6])
    assert [_versions(names) for names in log_listings] == [{5, 6}]  # one listing, from version 5 on


def test_a_log_replaced_under_the_transaction_is_a_conflict_and_nothing_is_written(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    for i in range(4):
        append(root, [i])
    mine = txn(root, snapshot(root), operation="WRITE", operation_parameters={"mode": "Append"})
    shutil.rmtree(os.path.join(root, "_delta_log"))
    create_table(root)
    append(root, [1])  # a new table at versions 0..1; ours read version 4
    with pytest.raises(CommitConflictError, match="no longer has version 4"):
        mine.commit([write_file(root, [9])])
    assert sorted(os.listdir(os.path.join(root, "_delta_log"))) == [
        n for v in (0, 1) for n in (f"{v:020d}.crc", f"{v:020d}.json")
    ]


def test_a_checkpointing_commit_lists_the_log_once_more_only_for_the_cleanup(tmp_path, log_listings):
    """The checkpoint after a commit is built from the listing the write's snapshot was loaded
    from plus its own commit; the expired-log cleanup lists the log once (what to keep, what goes)."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT", properties={"delta.checkpointInterval": "5"})
    for i in range(9):
        append_arrow(root, pa.table({"id": pa.array([i], pa.int64())}))
    log_listings.clear()
    assert append_arrow(root, pa.table({"id": pa.array([9], pa.int64())})).version == 10
    whole = [names for names in log_listings if FIRST_COMMIT in names]
    assert len(whole) == 2  # the snapshot the write read, the cleanup's
    assert f"{10:020d}.checkpoint.parquet" in whole[1]  # the cleanup's, after the checkpoint
    snap = snapshot(root)
    assert snap.log_segment.checkpoint_version == 10
    # the checkpoint holds every file the commits added (plain JSON of the log, no engine replay)
    added = set()
    for v in range(11):
        with open(os.path.join(root, "_delta_log", f"{v:020d}.json")) as f:
            added |= {a["add"]["path"] for a in map(json.loads, f) if "add" in a}
    assert len(added) == 10 and set(snap.file_paths()) == added
