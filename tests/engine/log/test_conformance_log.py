"""Snapshot reconstruction on the 40 third-party conformance tables (../shared/conformance).

Expected values come from manifest.json (latest version, protocol, partition columns), from the
README facts (hard-coded below with their source) and, wherever it can open a table, from
``deltalake`` (delta-rs) as an independent implementation: live file set per version.
The corpus is read in place and never modified (timestamp tests copy a table to tmp_path).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from urllib.parse import unquote

import pytest

from airflow_delta_provider_apps.engine import features as F
from airflow_delta_provider_apps.engine.errors import LogCorruptedError, UnsupportedFeatureError, VersionNotFoundError
from airflow_delta_provider_apps.engine.log.file_actions import dv_unique_ids
from airflow_delta_provider_apps.engine.log.listing import latest_version, list_log
from airflow_delta_provider_apps.engine.log.snapshot import history, load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for

deltalake = pytest.importorskip("deltalake")

# live logical files at the latest version (path count). Derived from the README facts where they
# state it, otherwise from an independent replay; every one is also cross-checked with delta-rs below.
LIVE_FILES = {
    "dat/all_primitive_types": 1,
    "dat/basic_append": 2,
    "dat/basic_partitioned": 6,
    "dat/multi_partitioned": 2,
    "dat/nested_types": 1,
    "dat/no_replay": 1,
    "dat/no_stats": 1,
    "dat/stats_as_struct": 1,
    "dat/with_checkpoint": 1,
    "dat/with_schema_change": 1,
    "delta-golden/basic-with-inserts-deletes-checkpoint": 7,
    "delta-golden/basic-with-inserts-updates": 2,
    "delta-golden/basic-with-inserts-merge": 1,
    "delta-golden/basic-with-inserts-overwrite-restore": 4,
    "delta-golden/snapshot-data2-deleted": 3,
    "delta-golden/snapshot-repartitioned": 2,
    "delta-golden/snapshot-vacuumed": 2,
    "delta-golden/time-travel-start-start20-start40": 6,
    "delta-golden/time-travel-partition-changes-b": 4,
    "delta-golden/checkpoint": 1,
    "delta-golden/multi-part-checkpoint": 10,
    "delta-golden/only-checkpoint-files": 7,
    "delta-golden/corrupted-last-checkpoint-kernel": 2,
    "delta-golden/v2-checkpoint-parquet": 4,
    "delta-golden/data-reader-partition-values": 3,
    "delta-golden/dv-partitioned-with-checkpoint": 15,
    "delta-golden/log-replay-dv-key-cases": 1,
    "delta-golden/table-with-columnmapping-mode-name": 2,
    "delta-golden/log-replay-latest-metadata-protocol": 4,
    "delta-golden/delete-re-add-same-file-different-transactions": 2,
    "delta-kernel-rs/table-with-dv-small": 1,
    "delta-kernel-rs/app-txn-checkpoint": 4,
    "delta-kernel-rs/crc-full": 0,
    "delta-kernel-rs/v2-checkpoints-parquet-with-sidecars": 101,
    "delta-kernel-rs/compacted-log-files-table": 2,
    "delta-rs/simple_table": 5,
    "delta-rs/delta-0.2.0": 3,
    "delta-rs/checkpoint-v2-table": 8,
    "delta-rs/table_with_liquid_clustering": 10,
}
NEGATIVE = {"delta-golden/versions-not-contiguous"}


def _key(t: dict) -> str:
    return t["dir"]


def _tables(manifest):
    return manifest["tables"]


@pytest.fixture(scope="module")
def tables(conformance_manifest, conformance_root):
    return {_key(t): (t, str(conformance_root / t["table_root"])) for t in _tables(conformance_manifest)}


def _ours(root: str, version=None, timestamp_ms=None):
    return load_snapshot(storage_for(root), root, version=version, timestamp_ms=timestamp_ms)


def _paths(snap) -> list[str]:
    return sorted(unquote(p) for p in snap.file_paths())


def _theirs(root: str, version=None) -> list[str] | None:
    try:
        t = deltalake.DeltaTable(root, version=version)
        return sorted(u[len(root) + 1 :] for u in t.file_uris())
    except Exception:
        return None


def test_manifest_is_covered(tables):
    assert set(tables) == set(LIVE_FILES) | NEGATIVE
    assert len(tables) == 40


@pytest.mark.parametrize("name", sorted(LIVE_FILES))
def test_latest_snapshot(tables, name):
    t, root = tables[name]
    snap = _ours(root)
    assert snap.version == t["latest_version"] == latest_version(storage_for(root), root)
    proto = t["protocol"]
    assert snap.protocol.min_reader_version == proto["minReaderVersion"]
    assert snap.protocol.min_writer_version == proto["minWriterVersion"]
    assert (list(snap.protocol.reader_features) if snap.protocol.reader_features is not None else None) == proto[
        "readerFeatures"
    ]
    assert (list(snap.protocol.writer_features) if snap.protocol.writer_features is not None else None) == proto[
        "writerFeatures"
    ]
    assert snap.partition_columns == t["partition_columns"]
    assert snap.num_files == LIVE_FILES[name]
    dv_ids = dv_unique_ids(snap.files.column("deletion_vector").combine_chunks(), snap.num_files).to_pylist()
    assert len(set(zip(snap.file_paths(), dv_ids))) == snap.num_files  # one row per logical file
    theirs = _theirs(root)
    if theirs is not None:
        assert _paths(snap) == theirs
    if t["checkpoint_versions"]:
        assert snap.log_segment.checkpoint_version == max(t["checkpoint_versions"])


@pytest.mark.parametrize("name", sorted(LIVE_FILES))
def test_reader_feature_gate(tables, name):
    _, root = tables[name]
    snap = _ours(root)
    unsupported = [f for f in (snap.protocol.reader_features or []) if f not in F.SUPPORTED_READER_FEATURES]
    if (
        snap.protocol.min_reader_version == 2
        and "columnMapping" not in F.SUPPORTED_READER_FEATURES
        and snap.metadata.configuration.get("delta.columnMapping.mode", "none") != "none"
    ):
        unsupported = ["columnMapping"]
    if unsupported:
        with pytest.raises(UnsupportedFeatureError, match=f"'{unsupported[0]}'"):
            F.check_read_supported(snap.protocol, snap.metadata)
    else:
        F.check_read_supported(snap.protocol, snap.metadata)


def test_feature_gate_on_known_tables(tables):
    liquid = _ours(tables["delta-rs/table_with_liquid_clustering"][1])
    with pytest.raises(UnsupportedFeatureError):
        F.check_write_supported(liquid.protocol, liquid.metadata)
    if "deletionVectors" in F.SUPPORTED_READER_FEATURES:  # reading is allowed, writing never
        with pytest.raises(UnsupportedFeatureError, match="'liquid'|'deletionVectors'|'rowTracking'"):
            F.check_write_supported(liquid.protocol, liquid.metadata)
    v2 = _ours(tables["delta-golden/v2-checkpoint-parquet"][1])
    F.check_read_supported(v2.protocol, v2.metadata)
    F.check_write_supported(v2.protocol, v2.metadata)  # v2Checkpoint is written (test_v2_checkpoint.py)
    plain = _ours(tables["dat/basic_append"][1])
    F.check_write_supported(plain.protocol, plain.metadata)


def test_versions_not_contiguous(tables):
    _, root = tables["delta-golden/versions-not-contiguous"]
    with pytest.raises(LogCorruptedError, match="not contiguous.*commit 1 "):
        _ours(root)
    # version 0 alone is before the gap; this fixture's metaData lacks the required schemaString
    with pytest.raises(LogCorruptedError, match="metaData"):
        _ours(root, version=0)
    assert _theirs(root) is None  # delta-rs refuses it too


def test_every_version_matches_delta_rs(tables):
    """Time travel by version: every version of every table, file set equal to delta-rs's."""
    compared = 0
    for name, (t, root) in sorted(tables.items()):
        if name in NEGATIVE:
            continue
        listing = list_log(storage_for(root), root)
        earliest = listing.earliest_reconstructable_version
        for v in range(0, t["latest_version"] + 1):
            if v < earliest:
                with pytest.raises(VersionNotFoundError):
                    _ours(root, version=v)
                continue
            snap = _ours(root, version=v)
            assert snap.version == v
            theirs = _theirs(root, version=v)
            if theirs is not None:
                assert _paths(snap) == theirs, (name, v)
                compared += 1
    assert compared >= 100


def test_checkpoint_tables(tables):
    cases = {
        "dat/with_checkpoint": (2, [3]),
        "dat/no_stats": (2, [3]),
        "dat/stats_as_struct": (2, [3]),
        "dat/no_replay": (2, [3]),
        "delta-golden/multi-part-checkpoint": (1, []),
        "delta-golden/only-checkpoint-files": (2, []),
        "delta-golden/corrupted-last-checkpoint-kernel": (10, [11]),
        "delta-golden/v2-checkpoint-parquet": (2, []),
        "delta-kernel-rs/v2-checkpoints-parquet-with-sidecars": (6, []),
        "delta-rs/checkpoint-v2-table": (8, [9]),
        "delta-rs/delta-0.2.0": (3, []),
    }
    for name, (cp, commits) in cases.items():
        snap = _ours(tables[name][1])
        assert snap.log_segment.checkpoint_version == cp, name
        assert [c.version for c in snap.log_segment.commits] == commits, name
    mp = _ours(tables["delta-golden/multi-part-checkpoint"][1]).log_segment.checkpoint
    assert mp.kind == "multipart" and len(mp.files) == 2
    v2json = _ours(tables["delta-rs/checkpoint-v2-table"][1]).log_segment.checkpoint
    assert v2json.kind == "uuid" and v2json.format == "json"
    side = _ours(tables["delta-kernel-rs/v2-checkpoints-parquet-with-sidecars"][1])
    assert side.log_segment.checkpoint.kind == "uuid" and side.num_files == 101
    # paths stay URI-encoded as written in the log
    assert any("%25" in p for p in side.file_paths())


def test_no_replay_early_commits_deleted(tables):
    _, root = tables["dat/no_replay"]
    assert not os.path.exists(os.path.join(root, "_delta_log", f"{0:020d}.json"))
    assert _ours(root).version == 3
    for v in (0, 1):
        with pytest.raises(VersionNotFoundError, match="version >= 2"):
            _ours(root, version=v)
    assert _ours(root, version=2).log_segment.commits == ()


def test_corrupted_last_checkpoint_is_ignored(tables):
    _, root = tables["delta-golden/corrupted-last-checkpoint-kernel"]
    assert os.path.getsize(os.path.join(root, "_delta_log", "_last_checkpoint")) == 0
    listing = list_log(storage_for(root), root)
    assert listing.last_checkpoint is None
    snap = _ours(root)
    assert snap.version == 11 and snap.num_files == 2


def test_golden_checkpoint_tombstones(tables):
    snap = _ours(tables["delta-golden/checkpoint"][1])
    assert snap.file_paths() == ["15"]
    assert sorted(snap.tombstones.column("path").to_pylist(), key=int) == [str(i) for i in range(1, 15)]


def test_delete_re_add_same_file(tables):
    snap = _ours(tables["delta-golden/delete-re-add-same-file-different-transactions"][1])
    rows = {r["path"]: r["modification_time"] for r in snap.files.select(["path", "modification_time"]).to_pylist()}
    assert set(rows) == {"foo", "bar"} and rows["foo"] == 1700000000000


def test_app_txn_checkpoint(tables):
    snap = _ours(tables["delta-kernel-rs/app-txn-checkpoint"][1])
    assert snap.log_segment.checkpoint_version == 1
    assert set(snap.set_transactions) == {"my-app", "my-app2"}
    assert snap.set_transactions["my-app2"].version == 2 and snap.set_transactions["my-app2"].last_updated is None
    assert snap.set_transactions["my-app"].version == 3


def test_simple_table_and_stray_tmp_commit(tables):
    _, root = tables["delta-rs/simple_table"]
    assert os.path.exists(os.path.join(root, "_delta_log", ".tmp", f"{5:020d}.json"))
    snap = _ours(root)
    assert snap.version == 4 and snap.num_files == 5 and snap.tombstones.num_rows == 31


def test_delta_0_2_0_files_per_version(tables):
    snap = _ours(tables["delta-rs/delta-0.2.0"][1], version=3)
    assert sorted(p[:19] for p in snap.file_paths()) == [
        "part-00000-7c2deba3",
        "part-00000-cb6b150b",
        "part-00001-c373a5bd",
    ]
    assert snap.tombstones.num_rows == 4
    v0 = _ours(tables["delta-rs/delta-0.2.0"][1], version=0)
    assert sorted(p[:19] for p in v0.file_paths()) == ["part-00000-b44fcdb0", "part-00001-185eca06"]


def test_dv_key_cases(tables):
    snap = _ours(tables["delta-golden/log-replay-dv-key-cases"][1])
    assert snap.num_files == 1 and snap.files.column("deletion_vector").to_pylist()[0] is not None
    assert snap.tombstones.num_rows == 3
    dvp = _ours(tables["delta-golden/dv-partitioned-with-checkpoint"][1])
    assert dvp.files.column("deletion_vector").null_count < dvp.num_files


def test_partition_values_kept_as_strings(tables):
    snap = _ours(tables["delta-golden/data-reader-partition-values"][1])
    rows = snap.files.column("partition_values").to_pylist(maps_as_pydicts="strict")
    nulls = [r for r in rows if r["as_int"] is None]
    assert len(nulls) == 1 and nulls[0]["as_string_lit_null"] is None
    assert {r["as_string_lit_null"] for r in rows if r["as_int"] is not None} == {"null"}
    assert all(list(r) == snap.partition_columns for r in rows)
    some = [r for r in rows if r["as_int"] == "0"][0]
    assert some["as_date"] == "2021-09-08" and some["as_timestamp"] == "2021-09-08 11:11:11"
    assert some["as_float"] == "0.0" and some["as_boolean"] == "true"


def _reference_replay(root: str):
    """Independent dict-based replay of all JSON commits from version 0 (json.loads per line)."""
    import json

    state = {}
    log = os.path.join(root, "_delta_log")
    v = 0
    while os.path.exists(os.path.join(log, f"{v:020d}.json")):
        with open(os.path.join(log, f"{v:020d}.json"), "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                obj = json.loads(line)
                for kind in ("add", "remove"):
                    if kind in obj:
                        a = obj[kind]
                        d = a.get("deletionVector")
                        uid = (
                            None
                            if d is None
                            else d["storageType"]
                            + d["pathOrInlineDv"]
                            + (f"@{d['offset']}" if d.get("offset") is not None else "")
                        )
                        state[(a["path"], uid)] = (kind, a)
        v += 1
    return v - 1, state


@pytest.mark.parametrize("name", sorted(LIVE_FILES))
def test_file_rows_match_reference_replay(tables, name):
    """Every field of every live file (and tombstone) equals an independent json.loads replay."""
    _, root = tables[name]
    if not os.path.exists(os.path.join(root, "_delta_log", f"{0:020d}.json")):
        pytest.skip("commit 0 was cleaned up: no independent JSON replay possible")
    last, state = _reference_replay(root)
    snap = _ours(root)
    if last != snap.version:
        pytest.skip("JSON commits do not reach the latest version")
    dvs = dv_unique_ids(snap.files.column("deletion_vector").combine_chunks(), snap.num_files).to_pylist()
    ours = {}
    for r, uid in zip(snap.files.to_pylist(maps_as_pydicts="strict"), dvs):
        ours[(r["path"], uid)] = r
    expected = {k: a for k, (kind, a) in state.items() if kind == "add"}
    assert set(ours) == set(expected)
    for k, a in expected.items():
        r = ours[k]
        nn = {kk: vv for kk, vv in (r["partition_values"] or {}).items() if vv is not None}
        assert nn == {kk: vv for kk, vv in a["partitionValues"].items() if vv is not None}, k
        assert (r["size"], r["modification_time"]) == (a["size"], a["modificationTime"]), k
        if r["stats"] is not None or snap.log_segment.checkpoint is None:
            assert r["stats"] == a.get("stats"), k
        assert (r["tags"] or None) == (a.get("tags") or None), k
        assert r["base_row_id"] == a.get("baseRowId") and r["clustering_provider"] == a.get("clusteringProvider")
        if snap.log_segment.checkpoint is None:
            assert r["data_change"] == a["dataChange"]
            assert r["deletion_vector"] == (
                {"offset": None, **a["deletionVector"]} if a.get("deletionVector") else None
            )
    removed = {k for k, (kind, _) in state.items() if kind == "remove"}
    tomb_dvs = dv_unique_ids(
        snap.tombstones.column("deletion_vector").combine_chunks(), snap.tombstones.num_rows
    ).to_pylist()
    assert set(zip(snap.tombstones.column("path").to_pylist(), tomb_dvs)) == removed


def test_latest_metadata_and_protocol_win(tables):
    snap = _ours(tables["delta-golden/log-replay-latest-metadata-protocol"][1])
    assert [f["name"] for f in snap.schema_json["fields"]] == ["col1", "col2"]
    assert snap.protocol.reader_features == [] and list(snap.protocol.writer_features) == ["appendOnly", "invariants"]
    v0 = _ours(tables["delta-golden/log-replay-latest-metadata-protocol"][1], version=0)
    assert [f["name"] for f in v0.schema_json["fields"]] == ["col1"]


def test_time_travel_by_timestamp(tables, tmp_path):
    _, src = tables["delta-golden/time-travel-start-start20-start40"]
    root = tmp_path / "tt"
    shutil.copytree(src, root)
    start = 1540415658000
    for v in range(3):
        p = root / "_delta_log" / f"{v:020d}.json"
        os.chmod(p, 0o644)
        t = (start + v * 20 * 60_000) / 1000
        os.utime(p, (t, t))
    r = str(root)
    assert _ours(r, timestamp_ms=start).version == 0
    assert _ours(r, timestamp_ms=start + 20 * 60_000 - 1).version == 0
    assert _ours(r, timestamp_ms=start + 20 * 60_000).version == 1
    assert _ours(r, timestamp_ms=start + 39 * 60_000).version == 1
    assert _ours(r, timestamp_ms=start + 40 * 60_000).version == 2
    # after the latest commit: refused, delta-spark's rule (delta-rs 1.6 returns the latest version)
    with pytest.raises(VersionNotFoundError, match="is after the latest version"):
        _ours(r, timestamp_ms=start + 40 * 60_000 + 1)
    with pytest.raises(VersionNotFoundError):
        _ours(r, timestamp_ms=start - 1)
    assert _ours(r, timestamp_ms=start + 25 * 60_000).num_files == _ours(r, version=1).num_files
    # delta-rs agrees
    for ms, v in [(start + 60_000, 0), (start + 30 * 60_000, 1), (start + 40 * 60_000, 2)]:
        t = deltalake.DeltaTable(r)
        t.load_as_version(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC))
        assert t.version() == v == _ours(r, timestamp_ms=ms).version
    h = history(storage_for(r), r)
    assert [x["version"] for x in h] == [2, 1, 0]
    assert [x["timestamp"] for x in h] == [start + 40 * 60_000, start + 20 * 60_000, start]
    assert all("commitInfoTimestamp" in x for x in h)  # the writer's own timestamps differ from the mtimes


def test_history_matches_delta_rs_operations(tables):
    _, root = tables["delta-golden/snapshot-data2-deleted"]
    ours = history(storage_for(root), root)
    theirs = deltalake.DeltaTable(root).history()
    assert [h["version"] for h in ours] == [h["version"] for h in theirs] == [4, 3, 2, 1, 0]
    assert [h["operation"] for h in ours] == [h["operation"] for h in theirs]


@pytest.mark.parametrize("name", sorted(LIVE_FILES))
def test_metadata_only_replay_agrees(tables, name):
    from airflow_delta_provider_apps.engine.log.snapshot import load_table_metadata

    _, root = tables[name]
    snap = _ours(root)
    meta = load_table_metadata(storage_for(root), root)
    assert (meta.protocol, meta.metadata) == (snap.protocol, snap.metadata)
    assert meta.set_transactions == snap.set_transactions and meta.domain_metadata == snap.domain_metadata
