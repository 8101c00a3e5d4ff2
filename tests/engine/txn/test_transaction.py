"""OptimisticTransaction: validation, commitInfo, isolation choice, SetTransaction, post-commit."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from txn_helpers import append, commit_json, create_table, make_metadata, snapshot, txn, write_file

from airflow_delta_provider_apps.engine import config
from airflow_delta_provider_apps.engine.actions import (
    AddCDCFile,
    CommitInfo,
    DeletionVectorDescriptor,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from airflow_delta_provider_apps.engine.config import TableProperties
from airflow_delta_provider_apps.engine.errors import AppendOnlyViolationError, InvalidArgumentError, InvalidCommitError
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import IsolationLevel, OptimisticTransaction, choose_isolation_level


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    return root


def _log_versions(root):
    return sorted(int(n[:20]) for n in os.listdir(os.path.join(root, "_delta_log")) if n.endswith(".json"))


# ------------------------------------------------------------------ version 0
def test_create_table_writes_protocol_metadata_and_commit_info(tmp_path):
    root = str(tmp_path / "t")
    res = create_table(root)
    assert (res.version, res.attempts, res.skipped) == (0, 1, False)
    lines = commit_json(root, 0)
    assert list(lines[0]) == ["commitInfo"]
    assert [list(x)[0] for x in lines[1:]] == ["protocol", "metaData"]
    ci = lines[0]["commitInfo"]
    assert ci["operation"] == "CREATE TABLE" and "readVersion" not in ci
    assert ci["operationParameters"] == {"partitionBy": '["p"]'}
    snap = snapshot(root)
    assert snap.version == 0 and snap.partition_columns == ["p"]


def test_version_zero_needs_metadata_and_protocol(tmp_path):
    root = str(tmp_path / "t")
    t = OptimisticTransaction(storage_for(root), root, None)
    t.update_metadata(make_metadata())
    with pytest.raises(InvalidCommitError) as ei:
        t.commit([])
    assert "protocol" in ei.value.cause
    assert not os.path.exists(os.path.join(root, "_delta_log", f"{0:020d}.json"))


def test_metadata_and_protocol_may_come_in_the_actions(tmp_path):
    root = str(tmp_path / "t")
    t = OptimisticTransaction(storage_for(root), root, None, operation="CREATE TABLE")
    res = t.commit([Protocol(1, 2), make_metadata()])
    assert res.version == 0 and snapshot(root).protocol == Protocol(1, 2)


def test_two_different_metadata_actions_are_refused(table):
    t = txn(table)
    md = snapshot(table).metadata
    t.update_metadata(replace(md, configuration={"a": "1"}))
    with pytest.raises(InvalidCommitError):
        t.commit([replace(md, configuration={"a": "2"})])
    with pytest.raises(InvalidCommitError):
        t.update_metadata(md)


# ------------------------------------------------------------------ per-commit validity
def test_duplicate_add_path_refused(table):
    a = write_file(table, [1], "a")
    with pytest.raises(InvalidCommitError) as ei:
        txn(table).commit([a, replace(a, size=a.size + 1)])
    assert a.path in ei.value.problem
    assert snapshot(table).version == 0


def test_duplicate_remove_path_refused(table):
    append(table, [1], "a")
    row = snapshot(table).files.to_pylist()[0]
    rm = RemoveFile(path=row["path"], deletion_timestamp=1)
    with pytest.raises(InvalidCommitError):
        txn(table).commit([rm, replace(rm, deletion_timestamp=2)])


def test_add_and_remove_of_same_logical_file_refused(table):
    a = write_file(table, [1], "a")
    with pytest.raises(InvalidCommitError) as ei:
        txn(table).commit([a, a.remove(1)])
    assert "same deletion vector" in ei.value.problem


def test_add_and_remove_of_same_path_with_other_dv_is_legal_shape(table):
    """Spec: same path in add and remove with different dvIds is a DV update (legal)."""
    a = write_file(table, [1, 2], "a")
    txn(table).commit([a])
    dv = DeletionVectorDescriptor(
        storage_type="i",
        path_or_inline_dv="wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        size_in_bytes=40,
        cardinality=1,
    )
    t = txn(table)
    final, _ = t._prepare([replace(a, deletion_vector=dv), a.remove(5)])  # validation only
    assert len([x for x in final if x.__class__.__name__ in ("AddFile", "RemoveFile")]) == 2


@pytest.mark.parametrize(
    "pv,msg", [({}, "missing values for ['p']"), ({"p": "a", "q": "x"}, "non-partition columns ['q']")]
)
def test_partition_values_must_cover_exactly_the_partition_columns(table, pv, msg):
    a = replace(write_file(table, [1], "a"), partition_values=pv)
    with pytest.raises(InvalidCommitError) as ei:
        txn(table).commit([a])
    assert msg in ei.value.cause


def test_null_partition_value_is_accepted(table):
    res = txn(table).commit([write_file(table, [1], None)])
    assert res.version == 1


def test_cdc_files_need_partition_values_too(table):
    with pytest.raises(InvalidCommitError):
        txn(table).commit([AddCDCFile(path="_change_data/x.parquet", partition_values={}, size=1)])


def test_protocol_downgrade_refused(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, protocol=Protocol(1, 3))
    t = txn(root)
    t.update_protocol(Protocol(1, 2))
    with pytest.raises(InvalidCommitError) as ei:
        t.commit([])
    assert "downgrade" in ei.value.problem


def test_two_txns_for_one_app_refused(table):
    with pytest.raises(InvalidCommitError):
        txn(table).commit([SetTransaction("a", 1), SetTransaction("a", 2)])


def test_domain_metadata_needs_the_feature(table):
    from airflow_delta_provider_apps.engine.actions import DomainMetadata

    with pytest.raises(InvalidCommitError) as ei:
        txn(table).commit([DomainMetadata("d", "{}")])
    assert "domainMetadata" in ei.value.cause


def test_append_only_refuses_data_changing_removes(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.appendOnly": "true"})
    append(root, [1], "a")
    row = snapshot(root).files.to_pylist()[0]
    rm = RemoveFile(path=row["path"], deletion_timestamp=1, data_change=True)
    with pytest.raises(AppendOnlyViolationError) as ei:
        txn(root, operation="DELETE").commit([rm])
    assert "append-only" in ei.value.problem and ei.value.fix
    # a rearrangement (dataChange=false) is allowed
    new = replace(write_file(root, [1], "a"), data_change=False)
    res = txn(root, operation="OPTIMIZE").commit([replace(rm, data_change=False), new])
    assert res.version == 2 and res.isolation_level == "SnapshotIsolation"


def test_already_committed_transaction_cannot_commit_again(table):
    t = txn(table)
    t.commit([write_file(table, [1], "a")])
    with pytest.raises(InvalidCommitError):
        t.commit([write_file(table, [2], "a")])


# ------------------------------------------------------------------ commitInfo
def test_commit_info_fields(table):
    t = txn(
        table,
        operation="WRITE",
        operation_parameters={"mode": "Append", "partitionBy": [], "n": 3},
        user_metadata="run 42",
        engine_info="tests/1.0",
    )
    res = t.commit([write_file(table, [1, 2], "a")], operation_metrics={"numFiles": 1, "numOutputRows": 2})
    ci = commit_json(table, 1)[0]["commitInfo"]
    assert ci == res.commit_info
    assert ci["operation"] == "WRITE"
    assert ci["operationParameters"] == {"mode": "Append", "partitionBy": "[]", "n": "3"}
    assert ci["operationMetrics"] == {"numFiles": "1", "numOutputRows": "2"}
    assert ci["readVersion"] == 0
    assert ci["isolationLevel"] == "Serializable"
    assert ci["isBlindAppend"] is True
    assert ci["userMetadata"] == "run 42"
    assert ci["engineInfo"] == "tests/1.0"
    assert isinstance(ci["timestamp"], int) and len(ci["txnId"]) == 36
    # deltalake sees the same history entry
    import deltalake

    h = deltalake.DeltaTable(table).history(1)[0]
    assert h["operation"] == "WRITE" and h["userMetadata"] == "run 42"


def test_is_blind_append_false_when_reading(table):
    t = txn(table)
    t.read_predicate({"p": "a"})
    t.commit([write_file(table, [1], "a")])
    assert commit_json(table, 1)[0]["commitInfo"]["isBlindAppend"] is False


def test_is_blind_append_false_with_removes(table):
    append(table, [1], "a")
    row = snapshot(table).files.to_pylist()[0]
    txn(table).commit([RemoveFile(path=row["path"], deletion_timestamp=1)])
    assert commit_json(table, 2)[0]["commitInfo"]["isBlindAppend"] is False


def test_extra_commit_info_values_are_kept_but_do_not_override(table):
    txn(table).commit([CommitInfo({"operation": "HACK", "clusterId": "c1"}), write_file(table, [1], "a")])
    ci = commit_json(table, 1)[0]["commitInfo"]
    assert ci["operation"] == "WRITE" and ci["clusterId"] == "c1"


def test_in_commit_timestamps_are_first_and_increasing(tmp_path):
    """The transaction side of inCommitTimestamp (commitInfo first, ICT > previous ICT even when the
    clock goes back); more in test_in_commit_timestamps.py."""
    root = str(tmp_path / "t")
    create_table(
        root,
        configuration={"delta.enableInCommitTimestamps": "true"},
        protocol=Protocol(1, 7, writer_features=["inCommitTimestamp"]),
    )
    clock = iter([1_000, 1_000, 500, 500]).__next__  # the clock goes backwards
    prev = commit_json(root, 0)[0]["commitInfo"]["inCommitTimestamp"]
    for _ in range(2):
        t = txn(root, clock=clock)
        t.commit([write_file(root, [1], "a")])
        ict = commit_json(root, snapshot(root).version)[0]["commitInfo"]["inCommitTimestamp"]
        assert ict > prev
        prev = ict


# ------------------------------------------------------------------ isolation level choice
def test_isolation_level_choice(table):
    md = snapshot(table).metadata
    add = write_file(table, [1], "a")

    def level(metadata):
        return TableProperties.of(metadata).isolation_level

    assert choose_isolation_level([add], level(md)) == IsolationLevel.SERIALIZABLE
    assert choose_isolation_level([replace(add, data_change=False)], level(md)) == IsolationLevel.SNAPSHOT_ISOLATION
    # no downgrade when the commit also carries an action that concurrent writers must be checked against
    from airflow_delta_provider_apps.engine.actions import SetTransaction

    rearranged = replace(add, data_change=False)
    for extra in (md, Protocol(1, 2), SetTransaction("app", 1, None)):
        assert choose_isolation_level([rearranged, extra], level(md)) == IsolationLevel.SERIALIZABLE
    assert choose_isolation_level([add], level(md), "WriteSerializable") == IsolationLevel.WRITE_SERIALIZABLE
    ws = replace(md, configuration={"delta.isolationLevel": "WriteSerializable"})
    assert choose_isolation_level([add], level(ws)) == IsolationLevel.WRITE_SERIALIZABLE
    assert choose_isolation_level([add], level(ws), IsolationLevel.SERIALIZABLE) == IsolationLevel.SERIALIZABLE
    with pytest.raises(InvalidArgumentError, match="delta.isolationLevel='SnapshotIsolation' is not allowed"):
        level(replace(md, configuration={"delta.isolationLevel": "SnapshotIsolation"}))
    with pytest.raises(InvalidArgumentError):
        IsolationLevel.parse("ReadCommitted")


def test_table_isolation_property_is_recorded(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.isolationLevel": "WriteSerializable"})
    res = append(root, [1], "a")
    assert res.commit_info["isolationLevel"] == "WriteSerializable"


# ------------------------------------------------------------------ SetTransaction / idempotence
def test_set_transaction_makes_writes_idempotent(table):
    r1 = append(table, [1], "a", app_id="dag.task", app_version=5)
    assert not r1.skipped and r1.version == 1
    assert commit_json(table, 1)[1]["txn"]["appId"] == "dag.task"
    assert snapshot(table).set_transactions["dag.task"].version == 5
    # the Airflow retry of the same run: skipped, nothing written
    t = txn(table, app_id="dag.task", app_version=5)
    assert t.is_duplicate()
    r2 = t.commit([write_file(table, [1], "a")])
    assert (r2.skipped, r2.version, r2.attempts) == (True, 1, 0)
    assert _log_versions(table) == [0, 1]
    # an older backfill number is skipped too, a newer one lands
    assert txn(table, app_id="dag.task", app_version=4).is_duplicate()
    r3 = append(table, [2], "a", app_id="dag.task", app_version=6)
    assert not r3.skipped and r3.version == 2
    # another app id is independent
    assert not txn(table, app_id="other", app_version=1).is_duplicate()


def test_set_transaction_expiry(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.setTransactionRetentionDuration": "interval 1 days"})
    append(root, [1], "a", app_id="app", app_version=3, clock=lambda: 1_000_000)
    assert txn(root, app_id="app", app_version=3, clock=lambda: 1_000_000 + 3_600_000).is_duplicate()
    # two days later the txn has expired: the write is no longer considered a duplicate
    assert not txn(root, app_id="app", app_version=3, clock=lambda: 1_000_000 + 2 * 86_400_000).is_duplicate()


def test_app_id_and_version_go_together(table):
    with pytest.raises(InvalidArgumentError):
        txn(table, app_id="x")


# ------------------------------------------------------------------ post-commit checkpoint
def test_automatic_checkpoint_every_interval(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "3"})
    results = [append(root, [i], "a") for i in range(1, 8)]
    with_cp = [r.version for r in results if r.checkpoint]
    assert with_cp == [3, 6]
    cp = results[5].checkpoint
    assert cp["version"] == 6 and cp["num_add_files"] == 6 and cp["num_parts"] == 1
    log = os.listdir(os.path.join(root, "_delta_log"))
    assert f"{3:020d}.checkpoint.parquet" in log and f"{6:020d}.checkpoint.parquet" in log
    from airflow_delta_provider_apps.engine.log.last_checkpoint import read_last_checkpoint

    lc = read_last_checkpoint(storage_for(root), os.path.join(root, "_delta_log"))
    assert lc["version"] == 6 and lc["numOfAddFiles"] == 6
    snap = snapshot(root)
    assert snap.log_segment.checkpoint_version == 6 and snap.files.num_rows == 7


def test_default_checkpoint_interval_is_ten(table):
    results = [append(table, [i], "a") for i in range(1, 11)]
    assert [r.version for r in results if r.checkpoint] == [10]


def test_checkpoint_failure_does_not_fail_the_commit(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "1"})
    # make the classic checkpoint name a directory, so writing it fails
    os.makedirs(os.path.join(root, "_delta_log", f"{1:020d}.checkpoint.parquet"))
    res = append(root, [1], "a")
    assert res.version == 1 and res.checkpoint is None and res.post_commit_error
    assert snapshot(root).version == 1


# ------------------------------------------------------------------ config helpers
@pytest.mark.parametrize(
    "text,ms",
    [
        ("interval 7 days", 7 * 86_400_000),
        ("interval 1 week", 7 * 86_400_000),
        ("30 days", 30 * 86_400_000),
        ("interval 2 hours 30 minutes", 9_000_000),
        ("INTERVAL 1 DAY", 86_400_000),
        ("interval 500 milliseconds", 500),
        ("interval 1 second", 1000),
    ],
)
def test_parse_interval(text, ms):
    assert config.parse_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "interval", "7", "interval 1 month", "1 fortnight", "interval 1 day foo"])
def test_parse_interval_rejects(text):
    with pytest.raises(InvalidArgumentError):
        config.parse_interval_ms(text)


def test_property_defaults_and_values():
    props = TableProperties.of(make_metadata())
    assert props.checkpoint_interval == 10
    assert props.log_retention_ms == 30 * 86_400_000
    assert props.deleted_file_retention_ms == 7 * 86_400_000
    assert props.enable_expired_log_cleanup is True
    assert props.set_transaction_retention_ms is None
    assert props.append_only is False
    md2 = make_metadata(
        {"delta.checkpointInterval": "5", "delta.appendOnly": "TRUE", "delta.enableExpiredLogCleanup": "false"}
    )
    props2 = TableProperties.of(md2)
    assert (props2.checkpoint_interval, props2.append_only, props2.enable_expired_log_cleanup) == (5, True, False)
    with pytest.raises(InvalidArgumentError):
        _ = TableProperties.of(make_metadata({"delta.checkpointInterval": "0"})).checkpoint_interval
    with pytest.raises(InvalidArgumentError):
        _ = TableProperties.of(make_metadata({"delta.appendOnly": "yes"})).append_only


def test_re_adding_a_live_path_with_another_dv_needs_its_remove(table):
    a = write_file(table, [1, 2], "a")
    txn(table).commit([a])
    dv = DeletionVectorDescriptor(
        storage_type="i",
        path_or_inline_dv="wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        size_in_bytes=40,
        cardinality=1,
    )
    t = txn(table)
    with pytest.raises(InvalidCommitError) as ei:
        t._prepare([replace(a, deletion_vector=dv)])  # validation only (DV writes are gated elsewhere)
    assert "already live" in ei.value.problem
    final, _ = txn(table)._prepare([replace(a, deletion_vector=dv), a.remove(5)])
    assert len(final) == 2
    # re-committing the same logical file (stats/metadata update) is legal
    assert txn(table).commit([replace(a, data_change=False)]).version == 2
