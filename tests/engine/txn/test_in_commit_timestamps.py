"""In-commit timestamps (PROTOCOL.md "In-Commit Timestamps"): monotonic ICTs, enablement on an existing
table, time travel across the enablement boundary, rebase, and deltalake agreeing with us."""

from __future__ import annotations

import datetime as dt
import os
import time

import deltalake
import pytest
from txn_helpers import commit_json, create_table, snapshot, txn, write_file

from airflow_delta_provider_apps.engine.actions import Protocol
from airflow_delta_provider_apps.engine.commands.properties import set_properties
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, VersionNotFoundError
from airflow_delta_provider_apps.engine.log.snapshot import history, load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.table import DeltaTable

ON = {"delta.enableInCommitTimestamps": "true"}
VERSION_KEY = "delta.inCommitTimestampEnablementVersion"
TIMESTAMP_KEY = "delta.inCommitTimestampEnablementTimestamp"
DAY = 86_400_000


def create(root: str, properties: dict | None = None) -> None:
    DeltaTable.create(None, root, schema="id BIGINT, value STRING, p STRING", partition_by=["p"], properties=properties)


def append(root: str, at_ms: int | None = None, snap=None):
    """A blind append whose transaction's clock reads ``at_ms`` (the real clock when None)."""
    clock = None if at_ms is None else (lambda: at_ms)
    return txn(root, snap, operation="WRITE", clock=clock).commit([write_file(root, [1], "a")])


def set_mtime(root: str, version: int, ms: int) -> None:
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def commit_info(root: str, version: int) -> dict:
    first = commit_json(root, version)[0]
    assert list(first) == ["commitInfo"], "commitInfo must be the commit's first action"
    return first["commitInfo"]


def table_at(root: str, ms: int) -> int:
    return load_snapshot(storage_for(root), root, timestamp_ms=ms).version


def test_created_with_ict_every_commit_is_after_the_previous_even_when_the_clock_goes_back(tmp_path):
    root = str(tmp_path / "t")
    create(root, ON)
    snap = snapshot(root)
    assert "inCommitTimestamp" in snap.protocol.writer_features and snap.protocol.min_writer_version == 7
    assert VERSION_KEY not in snap.metadata.configuration  # enabled at creation: nothing to record
    ict0 = commit_info(root, 0)["inCommitTimestamp"]
    assert snap.in_commit_timestamp == snap.timestamp == ict0

    append(root, ict0 + 10_000)
    append(root, ict0 + 5_000)  # the clock went back 5 s
    append(root, ict0 - DAY)  # and a whole day
    assert [commit_info(root, v)["inCommitTimestamp"] for v in (1, 2, 3)] == [
        ict0 + 10_000,
        ict0 + 10_001,
        ict0 + 10_002,
    ]
    assert snapshot(root).in_commit_timestamp == ict0 + 10_002
    # the commit files' times say otherwise; the ICTs decide history and time travel
    for v in range(4):
        set_mtime(root, v, ict0 + DAY - v)
    assert [h["timestamp"] for h in history(storage_for(root), root)] == [
        ict0 + 10_002,
        ict0 + 10_001,
        ict0 + 10_000,
        ict0,
    ]
    assert table_at(root, ict0 + 10_001) == 2
    assert table_at(root, ict0 + 9_999) == 0


def test_enabling_on_an_existing_table_records_version_and_timestamp(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    append(root)
    assert "inCommitTimestamp" not in commit_info(root, 1)
    future = int(time.time() * 1000) + DAY
    set_mtime(root, 1, future)  # the preceding commit's file time is ahead of our clock

    t = DeltaTable.for_path(None, root)
    res = t.set_properties(ON)
    assert res["version"] == 2
    ict = commit_info(root, 2)["inCommitTimestamp"]
    assert ict == future + 1  # later than the preceding commit's file time (PROTOCOL.md, writer rule 5)
    snap = snapshot(root)
    conf = snap.metadata.configuration
    assert (conf[VERSION_KEY], conf[TIMESTAMP_KEY], conf["delta.enableInCommitTimestamps"]) == ("2", str(ict), "true")
    assert snap.protocol == Protocol(1, 7, writer_features=["appendOnly", "invariants", "inCommitTimestamp"])

    # later commits: ICT after the enablement's; the record survives an unrelated property change
    append(root, ict - 1000)
    assert commit_info(root, 3)["inCommitTimestamp"] == ict + 1
    t.set_properties({"delta.appendOnly": "false"})
    assert snapshot(root).metadata.configuration[VERSION_KEY] == "2"

    # the record is the engine's: a user may not write it
    for key in (VERSION_KEY, TIMESTAMP_KEY):
        with pytest.raises(InvalidArgumentError, match=key.replace(".", r"\.")):
            t.set_properties({key: "1"})

    # off, then on again: the new enablement is recorded, and nothing is timed by ICT in between
    t.set_properties({"delta.enableInCommitTimestamps": "false"})
    assert "inCommitTimestamp" not in commit_info(root, 5)
    append(root)
    t.set_properties(ON)
    conf = snapshot(root).metadata.configuration
    assert conf[VERSION_KEY] == "7" and conf[TIMESTAMP_KEY] == str(commit_info(root, 7)["inCommitTimestamp"])


def test_time_travel_by_timestamp_across_the_enablement_boundary(tmp_path):
    root = str(tmp_path / "t")
    base = (int(time.time() * 1000) // 1000 - 10 * 86_400) * 1000  # ten days ago, whole seconds
    create(root)  # v0
    append(root)  # v1
    append(root)  # v2
    for v in range(3):
        set_mtime(root, v, base + v * 10_000)
    snap = snapshot(root)
    set_properties(snap, ON, clock=lambda: base + 100_000)  # v3 enables at base + 100 s
    append(root, base + 200_000)  # v4
    append(root, base + 300_000)  # v5
    # before the enablement deltalake goes by file times as we do (after it, deltalake 1.6's
    # load_as_version(datetime) still does, so those times are not compared)
    for ms, version in ((base, 0), (base + 15_000, 1), (base + 20_000, 2), (base + 99_999, 2)):
        d = deltalake.DeltaTable(root)
        d.load_as_version(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC))
        assert (ms, d.version(), table_at(root, ms)) == (ms, version, version)
    # the ICT commits' file times would put them first; they must not count
    for v in (3, 4, 5):
        set_mtime(root, v, base + v)
    conf = snapshot(root).metadata.configuration
    assert (conf[VERSION_KEY], conf[TIMESTAMP_KEY]) == ("3", str(base + 100_000))

    st = storage_for(root)
    expected = {
        base: 0,
        base + 9_999: 0,
        base + 15_000: 1,
        base + 20_000: 2,
        base + 99_999: 2,  # before the enablement timestamp: file times of versions 0..2
        base + 100_000: 3,  # from it on: ICTs of versions 3..
        base + 250_000: 4,
        base + 300_000: 5,
    }
    assert {ms: table_at(root, ms) for ms in expected} == expected
    with pytest.raises(VersionNotFoundError, match="after the latest version"):
        table_at(root, base + 300_001)
    with pytest.raises(VersionNotFoundError, match="No version"):
        table_at(root, base - 1)
    ours = history(st, root)
    stamps = {h["version"]: h["timestamp"] for h in ours}
    assert stamps == {
        0: base,
        1: base + 10_000,
        2: base + 20_000,
        3: base + 100_000,
        4: base + 200_000,
        5: base + 300_000,
    }

    # deltalake (delta-rs) reads every version, and its history carries our ICTs from version 3 on
    dl = deltalake.DeltaTable(root)
    assert dl.version() == 5 and dl.to_pyarrow_table().num_rows == 4
    rows = {}
    for v in range(6):
        d = deltalake.DeltaTable(root)
        d.load_as_version(v)
        rows[v] = d.to_pyarrow_table().num_rows
    assert (
        rows
        == {v: load_snapshot(st, root, version=v).files.num_rows for v in range(6)}
        == {0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 4}
    )
    theirs = {h["version"]: h for h in dl.history()}
    assert sorted(theirs) == [0, 1, 2, 3, 4, 5]
    assert {v: theirs[v].get("inCommitTimestamp") for v in theirs} == {
        v: (stamps[v] if v >= 3 else None) for v in stamps
    }


def test_a_rebased_commit_takes_a_timestamp_after_the_winners(tmp_path):
    root = str(tmp_path / "t")
    create(root, ON)
    ict0 = commit_info(root, 0)["inCommitTimestamp"]
    stale = snapshot(root)
    append(root, ict0 + 60_000)  # v1: the winner, its clock a minute ahead
    res = append(root, ict0 + 1_000, snap=stale)  # read v0, lands as v2 after checking v1
    assert (res.version, res.conflicts_checked) == (2, [1])
    assert commit_info(root, 2)["inCommitTimestamp"] == ict0 + 60_001


def test_a_rebased_enablement_records_the_version_it_landed_at(tmp_path):
    root = str(tmp_path / "t")
    create(root)
    stale = snapshot(root)
    append(root)  # v1 lands first, without an ICT; its file time is ahead of our clock
    future = int(time.time() * 1000) + DAY
    set_mtime(root, 1, future)
    res = set_properties(stale, ON, clock=lambda: future - DAY)
    assert res.version == 2
    ict = commit_info(root, 2)["inCommitTimestamp"]
    assert ict == future + 1
    conf = snapshot(root).metadata.configuration
    assert (conf[VERSION_KEY], conf[TIMESTAMP_KEY]) == ("2", str(ict))


def test_adding_the_feature_to_a_table_that_sets_the_property_records_the_enablement(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration=ON)  # property set, feature missing: not active
    assert "inCommitTimestamp" not in commit_info(root, 0)
    t = txn(root, operation="UPGRADE PROTOCOL")
    t.update_protocol(Protocol(1, 7, writer_features=["appendOnly", "invariants", "inCommitTimestamp"]))
    t.commit([])
    lines = commit_json(root, 1)
    assert [next(iter(a)) for a in lines] == ["commitInfo", "protocol", "metaData"]
    conf = lines[2]["metaData"]["configuration"]
    assert conf[VERSION_KEY] == "1" and conf[TIMESTAMP_KEY] == str(lines[0]["commitInfo"]["inCommitTimestamp"])
