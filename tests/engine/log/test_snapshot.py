"""log/snapshot.py: the Snapshot contract, errors, time travel (version, timestamp, ICT), history."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine.actions import AddFile, DeletionVectorDescriptor, RemoveFile
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, TableNotFoundError, VersionNotFoundError
from airflow_delta_provider_apps.engine.log.listing import LogSegment, latest_version
from airflow_delta_provider_apps.engine.log.snapshot import (
    FILE_SCHEMA,
    REMOVE_SCHEMA,
    Snapshot,
    history,
    load_snapshot,
    read_commit_infos,
)
from airflow_delta_provider_apps.engine.storage import LocalStorage

ST = LocalStorage()
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}
T0 = 1_700_000_000_000


def commit(root: Path, version: int, actions: list[dict], mtime_ms: int | None = None) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    p = log / f"{version:020d}.json"
    p.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    if mtime_ms is not None:
        os.utime(p, (mtime_ms / 1000, mtime_ms / 1000))


def ci(op="WRITE", ts=None, ict=None, **kw):
    d = {"timestamp": ts if ts is not None else T0, "operation": op, **kw}
    if ict is not None:
        d = {"inCommitTimestamp": ict, **d}
    return {"commitInfo": d}


def md(conf=None, pc=("p",)):
    return {
        "metaData": {
            "id": "tid",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(SCHEMA),
            "partitionColumns": list(pc),
            "configuration": conf or {},
            "createdTime": T0,
        }
    }


def add(path, p="1", **kw):
    return {
        "add": {"path": path, "partitionValues": {"p": p}, "size": 10, "modificationTime": T0, "dataChange": True, **kw}
    }


def make_table(root: Path, mtimes=(T0, T0 + 60_000, T0 + 120_000)) -> None:
    commit(
        root,
        0,
        [ci("CREATE TABLE"), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, md(), add("p=1/a")],
        mtimes[0],
    )
    commit(root, 1, [ci("WRITE", readVersion=0), add("p=2/b", "2"), {"txn": {"appId": "job", "version": 1}}], mtimes[1])
    commit(
        root,
        2,
        [
            ci("DELETE"),
            {"remove": {"path": "p=1/a", "deletionTimestamp": T0, "dataChange": True}},
            add(
                "p=3/c",
                "3",
                deletionVector={"storageType": "i", "pathOrInlineDv": "abc", "sizeInBytes": 5, "cardinality": 1},
            ),
        ],
        mtimes[2],
    )


def test_contract(tmp_path):
    make_table(tmp_path)
    snap = load_snapshot(ST, str(tmp_path) + "/")
    assert isinstance(snap, Snapshot)
    assert snap.version == 2 and snap.table_root == str(tmp_path) and snap.storage is ST
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)
    assert snap.metadata.id == "tid" and snap.schema_json == SCHEMA and snap.partition_columns == ["p"]
    assert snap.files.schema == FILE_SCHEMA and snap.tombstones.schema == REMOVE_SCHEMA
    assert snap.num_files == 2 and snap.size_in_bytes == 20
    assert sorted(snap.files.column("path").to_pylist()) == ["p=2/b", "p=3/c"]
    assert snap.tombstones.column("path").to_pylist() == ["p=1/a"]
    assert snap.set_transactions["job"].version == 1 and snap.domain_metadata == {}
    assert isinstance(snap.log_segment, LogSegment) and snap.log_segment.version == 2
    assert snap.commit_info.operation == "DELETE"
    adds = {a.path: a for a in snap.add_files()}
    assert adds["p=3/c"] == AddFile(
        "p=3/c", {"p": "3"}, 10, T0, True, deletion_vector=DeletionVectorDescriptor("i", "abc", 5, 1)
    )
    assert snap.remove_files() == [RemoveFile("p=1/a", True, T0)]
    assert latest_version(ST, str(tmp_path)) == 2


def test_schema_is_lazy_structtype(tmp_path):
    schema_mod = pytest.importorskip("airflow_delta_provider_apps.engine.schema")
    make_table(tmp_path)
    snap = load_snapshot(ST, str(tmp_path))
    assert isinstance(snap.schema, schema_mod.StructType)


def test_time_travel_by_version(tmp_path):
    make_table(tmp_path)
    s0 = load_snapshot(ST, str(tmp_path), version=0)
    assert s0.version == 0 and s0.file_paths() == ["p=1/a"] and s0.commit_info.operation == "CREATE TABLE"
    s1 = load_snapshot(ST, str(tmp_path), version=1)
    assert sorted(s1.file_paths()) == ["p=1/a", "p=2/b"] and s1.tombstones.num_rows == 0
    with pytest.raises(VersionNotFoundError, match="Version 3 .* does not exist"):
        load_snapshot(ST, str(tmp_path), version=3)
    with pytest.raises(InvalidArgumentError):
        load_snapshot(ST, str(tmp_path), version=1, timestamp_ms=T0)
    with pytest.raises(InvalidArgumentError):
        load_snapshot(ST, str(tmp_path), version="1")


def test_time_travel_by_timestamp_uses_file_mtime(tmp_path):
    make_table(tmp_path)
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0).version == 0
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 59_999).version == 0
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 60_000).version == 1
    last = load_snapshot(ST, str(tmp_path)).commit_timestamps()[-1][1]
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=last).version == 2
    # after the latest commit: refused, as delta-spark does (it used to give the latest version)
    with pytest.raises(VersionNotFoundError, match=r"is after the latest version available .*version 2"):
        load_snapshot(ST, str(tmp_path), timestamp_ms=last + 1)
    with pytest.raises(VersionNotFoundError, match="No version .* at timestamp"):
        load_snapshot(ST, str(tmp_path), timestamp_ms=T0 - 1)


def test_commit_timestamps_are_made_increasing(tmp_path):
    # mtimes out of order (copied table): Delta adjusts each to predecessor + 1 ms
    make_table(tmp_path, mtimes=(T0 + 5000, T0 + 1000, T0 + 9000))
    snap = load_snapshot(ST, str(tmp_path))
    assert snap.commit_timestamps() == [(0, T0 + 5000), (1, T0 + 5001), (2, T0 + 9000)]
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 5001).version == 1
    assert load_snapshot(ST, str(tmp_path), version=1).commit_timestamps() == [(0, T0 + 5000), (1, T0 + 5001)]


def test_in_commit_timestamps(tmp_path):
    proto = {
        "protocol": {
            "minReaderVersion": 1,
            "minWriterVersion": 7,
            "writerFeatures": ["inCommitTimestamp", "appendOnly", "invariants"],
        }
    }
    commit(tmp_path, 0, [ci("CREATE TABLE"), proto, md(), add("p=1/a")], T0)
    commit(tmp_path, 1, [ci(), add("p=1/b")], T0 + 1000)
    conf = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "2",
        "delta.inCommitTimestampEnablementTimestamp": str(T0 + 50_000),
    }
    commit(tmp_path, 2, [ci("SET TBLPROPERTIES", ict=T0 + 50_000), md(conf)], T0 + 2000)
    commit(tmp_path, 3, [ci(ict=T0 + 90_000), add("p=1/c")], T0 + 3000)  # mtime says otherwise: ICT wins
    snap = load_snapshot(ST, str(tmp_path))
    assert snap.commit_timestamps() == [(0, T0), (1, T0 + 1000), (2, T0 + 50_000), (3, T0 + 90_000)]
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 60_000).version == 2
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 90_000).version == 3
    assert load_snapshot(ST, str(tmp_path), timestamp_ms=T0 + 1500).version == 1
    assert history(ST, str(tmp_path), limit=1)[0]["timestamp"] == T0 + 90_000


def test_history_newest_first(tmp_path):
    make_table(tmp_path)
    h = history(ST, str(tmp_path))
    assert [x["version"] for x in h] == [2, 1, 0]
    assert [x["operation"] for x in h] == ["DELETE", "WRITE", "CREATE TABLE"]
    assert [x["timestamp"] for x in h] == [T0 + 120_000, T0 + 60_000, T0]
    assert h[1]["readVersion"] == 0 and h[1]["commitInfoTimestamp"] == T0
    assert "commitInfoTimestamp" not in h[2]  # equal to the commit timestamp
    assert [x["version"] for x in history(ST, str(tmp_path), limit=2)] == [2, 1]
    assert history(ST, str(tmp_path), limit=0) == []
    infos = read_commit_infos(ST, str(tmp_path), [0, 2, 7])
    assert sorted(infos) == [0, 2] and infos[2].operation == "DELETE"


def test_checkpoint_only_version_has_no_commit_info(tmp_path):
    import pyarrow.parquet as pq

    make_table(tmp_path)
    snap = load_snapshot(ST, str(tmp_path))
    # a minimal V1 checkpoint at 2 written from the snapshot, then commits 0..2 removed (log cleanup)
    log = tmp_path / "_delta_log"
    rows = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "tid",
                "format": {"provider": "parquet", "options": []},
                "schemaString": json.dumps(SCHEMA),
                "partitionColumns": ["p"],
                "configuration": [],
                "createdTime": T0,
            }
        },
    ]
    for r in snap.files.to_pylist():
        rows.append(
            {
                "add": {
                    "path": r["path"],
                    "partitionValues": r["partition_values"],
                    "size": r["size"],
                    "modificationTime": r["modification_time"],
                    "dataChange": False,
                    "deletionVector": r["deletion_vector"],
                }
            }
        )
    str_map = pa.map_(pa.string(), pa.string())
    dv_t = FILE_SCHEMA.field("deletion_vector").type
    t = pa.table(
        {
            "protocol": pa.array(
                [x.get("protocol") for x in rows],
                pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())]),
            ),
            "metaData": pa.array(
                [x.get("metaData") for x in rows],
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", str_map)])),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                        ("configuration", str_map),
                        ("createdTime", pa.int64()),
                    ]
                ),
            ),
            "add": pa.array(
                [x.get("add") for x in rows],
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", str_map),
                        ("size", pa.int64()),
                        ("modificationTime", pa.int64()),
                        ("dataChange", pa.bool_()),
                        ("deletionVector", dv_t),
                    ]
                ),
            ),
        }
    )
    pq.write_table(t, log / f"{2:020d}.checkpoint.parquet")
    for v in range(3):
        (log / f"{v:020d}.json").unlink()
    cp = load_snapshot(ST, str(tmp_path))
    assert cp.version == 2 and cp.log_segment.checkpoint_version == 2 and cp.log_segment.commits == ()
    assert sorted(cp.file_paths()) == sorted(snap.file_paths())
    assert cp.add_files()[0].deletion_vector is not None or cp.add_files()[1].deletion_vector is not None
    assert cp.commit_info is None
    assert cp.metadata.configuration == {} and cp.metadata.format.options == {}
    with pytest.raises(VersionNotFoundError):
        load_snapshot(ST, str(tmp_path), version=1)
    assert history(ST, str(tmp_path)) == []


def test_table_not_found(tmp_path):
    with pytest.raises(TableNotFoundError, match="No Delta table"):
        load_snapshot(ST, str(tmp_path / "nothing"))
    (tmp_path / "_delta_log").mkdir()
    with pytest.raises(TableNotFoundError):
        load_snapshot(ST, str(tmp_path))
    with pytest.raises(TableNotFoundError):
        history(ST, str(tmp_path))


def test_empty_table_has_empty_typed_files(tmp_path):
    commit(tmp_path, 0, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, md(pc=())])
    snap = load_snapshot(ST, str(tmp_path))
    assert snap.num_files == 0 and snap.size_in_bytes == 0 and snap.files.schema == FILE_SCHEMA
    assert snap.add_files() == [] and snap.commit_info is None


def test_corrupt_checkpoint_falls_back_to_commits(tmp_path):
    from airflow_delta_provider_apps.engine.errors import LogCorruptedError

    make_table(tmp_path)
    log = tmp_path / "_delta_log"
    (log / f"{1:020d}.checkpoint.parquet").write_bytes(b"PAR1 this is not parquet")
    snap = load_snapshot(ST, str(tmp_path))
    assert snap.version == 2 and snap.log_segment.checkpoint is None and snap.num_files == 2
    assert load_snapshot(ST, str(tmp_path), version=1).num_files == 2
    (log / f"{0:020d}.json").unlink()  # now nothing else can rebuild the state: report the checkpoint
    with pytest.raises(LogCorruptedError, match="not readable parquet"):
        load_snapshot(ST, str(tmp_path))


def test_load_table_metadata_skips_files(tmp_path):
    from airflow_delta_provider_apps.engine.log.snapshot import load_table_metadata

    make_table(tmp_path)
    res = load_table_metadata(ST, str(tmp_path))
    snap = load_snapshot(ST, str(tmp_path))
    assert res.metadata == snap.metadata and res.protocol == snap.protocol
    assert res.set_transactions == snap.set_transactions and res.commit_info.operation == "DELETE"
    assert res.files.num_rows == 0 and res.tombstones.num_rows == 0
    assert load_table_metadata(ST, str(tmp_path), version=0).commit_info.operation == "CREATE TABLE"
