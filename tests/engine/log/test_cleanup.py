"""Expired log cleanup: what is deleted, what is protected, and that the table stays readable."""

from __future__ import annotations

import os
import time

import pytest
from txn_helpers import append, create_table, read_ids, snapshot

from airflow_delta_provider_apps.engine.errors import VersionNotFoundError
from airflow_delta_provider_apps.engine.log.cleanup import cleanup_expired_logs, truncate_to_day
from airflow_delta_provider_apps.engine.storage import storage_for

DAY = 86_400_000
NOW = int(time.time() * 1000)  # file mtimes are set relative to it


def _log(root):
    return os.path.join(root, "_delta_log")


def _age(root, name, age_ms):
    t = (NOW - age_ms) / 1000
    os.utime(os.path.join(_log(root), name), (t, t))


def _commit(v):
    return f"{v:020d}.json"


def _names(root):
    return sorted(n for n in os.listdir(_log(root)))


def _table(tmp_path, n_commits, interval, config=None):
    root = str(tmp_path / "t")
    create_table(
        root,
        configuration={
            "delta.checkpointInterval": str(interval),
            "delta.enableExpiredLogCleanup": "false",
            **(config or {}),
        },
    )
    for i in range(1, n_commits + 1):
        append(root, [i], "a")
    return root


def test_deletes_commits_before_the_newest_old_checkpoint(tmp_path):
    root = _table(tmp_path, 12, 4)  # checkpoints at 4, 8 (and 12)
    for v in range(0, 13):
        _age(root, _commit(v), (40 - v) * DAY if v <= 9 else DAY)  # v0..v9 older than 30 days
    for v in (4, 8, 12):
        _age(root, f"{v:020d}.checkpoint.parquet", (40 - v) * DAY if v <= 9 else DAY)
    ids_before = read_ids(root)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["cutoff_version"] == 9 and m["checkpoint_version"] == 8
    assert m["num_deleted_commits"] == 8 and m["num_deleted_checkpoint_files"] == 1
    names = _names(root)
    assert [n for n in names if n.endswith(".json")] == [_commit(v) for v in range(8, 13)]
    assert f"{4:020d}.checkpoint.parquet" not in names and f"{8:020d}.checkpoint.parquet" in names
    # the table is still whole at the latest version and at the protected checkpoint
    assert snapshot(root).version == 12 and read_ids(root) == ids_before
    assert snapshot(root, version=8).files.num_rows == 8
    with pytest.raises(VersionNotFoundError):
        snapshot(root, version=5)
    import deltalake

    dt = deltalake.DeltaTable(root)
    assert dt.version() == 12 and dt.to_pyarrow_table().num_rows == 12


def test_nothing_deleted_without_an_old_checkpoint(tmp_path):
    root = _table(tmp_path, 5, 100)
    for v in range(6):
        _age(root, _commit(v), 60 * DAY)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["cutoff_version"] == 5 and m["checkpoint_version"] is None and m["num_deleted_files"] == 0
    assert len([n for n in _names(root) if n.endswith(".json")]) == 6


def test_nothing_deleted_when_nothing_is_old(tmp_path):
    root = _table(tmp_path, 5, 2)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["num_deleted_files"] == 0


def test_retention_property_and_midnight_truncation(tmp_path):
    root = _table(tmp_path, 4, 2, {"delta.logRetentionDuration": "interval 2 days"})
    for v in range(5):
        _age(root, _commit(v), 3 * DAY)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["threshold_ms"] == truncate_to_day(NOW - 2 * DAY)
    assert m["checkpoint_version"] == 4 and m["num_deleted_commits"] == 4


def test_non_monotonic_mtimes_are_adjusted(tmp_path):
    """A newer commit with an older mtime cannot be expired before an older one."""
    root = _table(tmp_path, 4, 2)
    _age(root, _commit(0), 50 * DAY)
    _age(root, _commit(1), 1 * DAY)  # recent
    for v in (2, 3, 4):
        _age(root, _commit(v), 50 * DAY)  # old mtimes but after a recent commit
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["cutoff_version"] == 0 and m["num_deleted_files"] == 0


def test_crc_compactions_and_orphan_temp_files(tmp_path):
    root = _table(tmp_path, 6, 3)
    log = _log(root)
    for name in (
        f"{1:020d}.crc",
        f"{5:020d}.crc",
        f"{1:020d}.{2:020d}.compacted.json",
        f"{4:020d}.{5:020d}.compacted.json",
        f".{_commit(7)}.abc.tmp",
        ".young.tmp",
    ):
        with open(os.path.join(log, name), "w") as f:
            f.write("{}")
    for n in os.listdir(log):
        if n != ".young.tmp" and not n.startswith("_"):
            _age(root, n, 40 * DAY)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["checkpoint_version"] == 6
    names = _names(root)
    assert f"{1:020d}.crc" not in names and f"{5:020d}.crc" not in names
    assert f"{1:020d}.{2:020d}.compacted.json" not in names and f"{4:020d}.{5:020d}.compacted.json" not in names
    assert f".{_commit(7)}.abc.tmp" not in names and ".young.tmp" in names
    # every commit wrote its checksum: those of versions 0-5 (below the kept checkpoint) go, 6's stays
    assert m["num_deleted_temp_files"] == 1 and m["num_deleted_checksums"] == 6
    assert f"{6:020d}.crc" in names
    assert snapshot(root).version == 6


def test_dry_run_deletes_nothing(tmp_path):
    root = _table(tmp_path, 4, 2)
    for n in os.listdir(_log(root)):
        if not n.startswith("_"):
            _age(root, n, 40 * DAY)
    before = _names(root)
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW, dry_run=True)
    assert m["num_deleted_commits"] == 4 and _names(root) == before


def test_post_commit_cleanup_runs_after_checkpoint(tmp_path):
    """With cleanup enabled (default), the commit that writes a checkpoint also expires old logs."""
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "3"})
    for i in range(1, 4):
        append(root, [i], "a")  # checkpoint at 3
    for v in range(0, 4):
        _age(root, _commit(v), 40 * DAY)
    _age(root, f"{3:020d}.checkpoint.parquet", 40 * DAY)
    for i in range(4, 7):
        res = append(root, [i], "a")  # checkpoint at 6 -> cleanup (real clock)
    assert res.checkpoint["version"] == 6 and res.cleanup["checkpoint_version"] == 3
    assert res.cleanup["num_deleted_commits"] == 3
    assert sorted(n for n in _names(root) if n.endswith(".json")) == [_commit(v) for v in range(3, 7)]
    assert read_ids(root) == list(range(1, 7))


def test_post_commit_cleanup_can_be_disabled(tmp_path):
    root = _table(tmp_path, 2, 3)
    for v in range(3):
        _age(root, _commit(v), 40 * DAY)
    res = append(root, [3], "a")
    assert res.checkpoint is not None and res.cleanup is None
    assert len([n for n in _names(root) if n.endswith(".json")]) == 4


def _protected_table(tmp_path, unsupported_history: bool):
    """checkpointProtection with delta.requireCheckpointProtectionBeforeVersion=8; checkpoints at 4, 8,
    12. With ``unsupported_history``, versions 1 and 2 carry a protocol with a writer feature this
    engine does not know (as a feature another engine dropped at version 2 leaves behind)."""
    import json

    from airflow_delta_provider_apps.engine.actions import Protocol

    root = str(tmp_path / "t")
    proto = Protocol(1, 7, None, ["appendOnly", "invariants", "checkpointProtection"])
    create_table(
        root,
        configuration={
            "delta.checkpointInterval": "4",
            "delta.enableExpiredLogCleanup": "false",
            "delta.requireCheckpointProtectionBeforeVersion": "8",
        },
        protocol=proto,
    )
    for v in (1, 2):
        features = list(proto.writer_features) + (["someFutureFeature"] if v == 1 and unsupported_history else [])
        body = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": features}}
        with open(os.path.join(_log(root), _commit(v)), "w") as f:
            f.write(json.dumps(body) + "\n")
    for i in range(3, 13):
        append(root, [i], "a")
    for v in range(13):
        age = (40 - v) * DAY if v <= 9 else DAY
        _age(root, _commit(v), age)
        if v in (4, 8, 12):
            _age(root, f"{v:020d}.checkpoint.parquet", age)
    return root


@pytest.mark.parametrize("unsupported_history", [True, False])
def test_checkpoint_protection_partial_truncation_only_over_supported_protocols(tmp_path, unsupported_history):
    """Truncating only part of the history before the protected version (cutoff 5: up to checkpoint 4
    < 8) is allowed only when we support every protocol it removes; up to 8 it runs in one go."""
    root = _protected_table(tmp_path, unsupported_history)
    ids = read_ids(root)
    # now is such that versions 0..5 are past the 30-day retention: the kept checkpoint would be 4
    now = NOW - 4 * DAY
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=now)
    assert m["cutoff_version"] == 5
    commits = [n for n in _names(root) if n.endswith(".json")]
    if unsupported_history:
        # rule b: no checkpoint at a version before 8 whose protocol we do not support
        from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError
        from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint

        with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
            write_checkpoint(storage_for(root), root, snapshot(root, version=1), update_last_checkpoint=False)
        assert m["num_deleted_files"] == 0 and "someFutureFeature" in m["protection_skipped"]
        assert "requireCheckpointProtectionBeforeVersion is 8" in m["protection_skipped"]
        assert commits == [_commit(v) for v in range(13)]
    else:
        assert m["protection_skipped"] is None and m["num_deleted_commits"] == 4
        assert commits == [_commit(v) for v in range(4, 13)]
    # a cleanup that reaches the protected version truncates everything before it in one go
    m = cleanup_expired_logs(storage_for(root), root, snapshot(root), now_ms=NOW)
    assert m["checkpoint_version"] == 8 and m["protection_skipped"] is None
    assert [n for n in _names(root) if n.endswith(".json")] == [_commit(v) for v in range(8, 13)]
    assert f"{4:020d}.checkpoint.parquet" not in _names(root)
    assert read_ids(root) == ids and snapshot(root, version=8).version == 8


def test_cleanup_refuses_a_table_it_cannot_write_before_deleting(tmp_path):
    """Log cleanup deletes files: the table's protocol must pass the writer gate first."""
    import json

    from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError

    root = _table(tmp_path, 4, 2)
    body = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["someFutureFeature"]}}
    with open(os.path.join(_log(root), _commit(5)), "w") as f:
        f.write(json.dumps(body) + "\n")
    for n in os.listdir(_log(root)):
        if not n.startswith("_"):
            _age(root, n, 40 * DAY)
    before = _names(root)
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        cleanup_expired_logs(storage_for(root), root, snapshot(root, version=4 + 1), now_ms=NOW)
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        cleanup_expired_logs(storage_for(root), root, None, now_ms=NOW)
    assert _names(root) == before
