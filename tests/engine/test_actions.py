"""actions.py: exact JSON round trip of every action type; unknown fields/actions ignored."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider_apps.engine.actions import (
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    Sidecar,
    action_from_json,
    parse_commit_bytes,
    serialize_actions,
)
from airflow_delta_provider_apps.engine.errors import LogCorruptedError

# Wire JSON as real writers produce it (Spark / delta-rs / Databricks), one per action type.
WIRE = [
    {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
    {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors", "appendOnly"],
        }
    },
    {
        "metaData": {
            "id": "af23c9d7-fff1-4a5a-a2c8-55c59bd782aa",
            "name": "t",
            "description": "d",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}',
            "partitionColumns": ["a"],
            "configuration": {"delta.appendOnly": "true"},
            "createdTime": 1700000000000,
        }
    },
    {
        "add": {
            "path": "a=1/part-00000.parquet",
            "partitionValues": {"a": "1"},
            "size": 10,
            "modificationTime": 1700000000000,
            "dataChange": True,
            "stats": '{"numRecords":3}',
            "tags": {"INSERTION_TIME": "1700000000000000"},
        }
    },
    {
        "add": {
            "path": "p.parquet",
            "partitionValues": {"a": None},
            "size": 10,
            "modificationTime": 1,
            "dataChange": False,
            "deletionVector": {
                "storageType": "u",
                "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 2,
            },
            "baseRowId": 7,
            "defaultRowCommitVersion": 3,
            "clusteringProvider": "liquid",
        }
    },
    {
        "add": {
            "path": "q.parquet",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 1,
            "dataChange": True,
            "deletionVector": {
                "storageType": "i",
                "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                "sizeInBytes": 40,
                "cardinality": 6,
            },
        }
    },
    {
        "remove": {
            "path": "p.parquet",
            "deletionTimestamp": 1700000000001,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {"a": "1"},
            "size": 10,
        }
    },
    {"remove": {"path": "old.parquet", "dataChange": False}},
    {"cdc": {"path": "_change_data/cdc-00000.parquet", "partitionValues": {}, "size": 5, "dataChange": False}},
    {"txn": {"appId": "my-app", "version": 3, "lastUpdated": 1700000000000}},
    {"txn": {"appId": "my-app2", "version": 2}},
    {"domainMetadata": {"domain": "delta.rowTracking", "configuration": '{"rowIdHighWaterMark":9}', "removed": False}},
    {"domainMetadata": {"domain": "x", "configuration": "", "removed": True}},
    {"sidecar": {"path": "0001.parquet", "sizeInBytes": 100, "modificationTime": 5, "tags": {"k": "v"}}},
    {"checkpointMetadata": {"version": 8, "tags": {"sidecarNumActions": "7"}}},
    {
        "commitInfo": {
            "timestamp": 1700000000000,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "isBlindAppend": True,
            "someVendorField": {"nested": [1, 2]},
            "inCommitTimestamp": 1700000000002,
        }
    },
]


@pytest.mark.parametrize("wire", WIRE, ids=lambda w: next(iter(w)))
def test_exact_round_trip(wire):
    action = action_from_json(wire)
    assert action is not None
    assert action.to_json_dict() == wire
    # and through the NDJSON serializer
    again = parse_commit_bytes(serialize_actions([action]))
    assert again == [action]


def test_every_action_type_is_covered():
    kinds = {next(iter(w)) for w in WIRE}
    assert kinds == {
        "protocol",
        "metaData",
        "add",
        "remove",
        "cdc",
        "txn",
        "domainMetadata",
        "sidecar",
        "checkpointMetadata",
        "commitInfo",
    }


def test_parsed_types_and_snake_case_fields():
    add = action_from_json(WIRE[4])
    assert isinstance(add, AddFile)
    assert add.partition_values == {"a": None}
    assert add.deletion_vector == DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 36, 2, offset=1)
    assert add.deletion_vector.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@1"
    assert add.dv_unique_id == add.deletion_vector.unique_id
    inline = action_from_json(WIRE[5]).deletion_vector
    assert inline.offset is None and inline.unique_id == "i" + inline.path_or_inline_dv
    assert isinstance(action_from_json(WIRE[0]), Protocol)
    md = action_from_json(WIRE[2])
    assert isinstance(md, Metadata) and md.partition_columns == ["a"] and md.schema_json["fields"][0]["name"] == "a"
    assert isinstance(action_from_json(WIRE[6]), RemoveFile)
    assert isinstance(action_from_json(WIRE[8]), AddCDCFile)
    assert action_from_json(WIRE[10]) == SetTransaction("my-app2", 2)
    assert action_from_json(WIRE[12]) == DomainMetadata("x", "", True)
    assert isinstance(action_from_json(WIRE[13]), Sidecar)
    assert action_from_json(WIRE[14]) == CheckpointMetadata(8, {"sidecarNumActions": "7"})
    ci = action_from_json(WIRE[15])
    assert isinstance(ci, CommitInfo) and ci.operation == "WRITE" and ci.in_commit_timestamp == 1700000000002


def test_unknown_fields_are_ignored():
    wire = {
        "add": {
            "path": "x",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 2,
            "dataChange": True,
            "futureField": {"a": 1},
            "anotherOne": 5,
        }
    }
    add = action_from_json(wire)
    assert add == AddFile("x", {}, 1, 2, True)
    assert "futureField" not in add.to_json_dict()["add"]


def test_unknown_actions_are_ignored():
    data = (
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
        b'{"someFutureAction":{"x":1}}\n'
        b"\n"
        b'{"txn":{"appId":"a","version":1}}\n'
    )
    actions = parse_commit_bytes(data)
    assert actions == [Protocol(1, 2), SetTransaction("a", 1)]
    assert action_from_json({"rowIdHighWaterMark": {"highWaterMark": 3}}) is None


def test_missing_required_field_is_log_corruption():
    with pytest.raises(LogCorruptedError, match="add"):
        action_from_json({"add": {"path": "x"}})
    with pytest.raises(LogCorruptedError, match="not valid JSON"):
        parse_commit_bytes(b'{"txn":{"appId":"a","version":1}}\n{not json\n')


def test_serialize_is_compact_ndjson_with_trailing_newline():
    data = serialize_actions([Protocol(1, 2), SetTransaction("é", 1)])
    assert data.endswith(b"\n") and data.count(b"\n") == 2
    first, second = data.decode().splitlines()
    assert first == '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
    assert json.loads(second) == {"txn": {"appId": "é", "version": 1}}


def test_add_remove_carries_extended_metadata():
    add = action_from_json(WIRE[4])
    rm = add.remove(deletion_timestamp=99)
    assert rm.path == add.path and rm.deletion_vector == add.deletion_vector
    assert rm.extended_file_metadata is True and rm.size == add.size and rm.base_row_id == 7
    assert rm.to_json_dict()["remove"]["deletionTimestamp"] == 99


def test_map_fields_are_written_as_json_objects_whatever_form_they_came_in():
    # Arrow's to_pylist() gives a map column as a list of pairs: written as-is, every reader refused the table
    pairs = [("ZCUBE_ID", "z1"), ("ZCUBE_ZORDER_CURVE", "zorder")]
    add = AddFile(path="a", partition_values=[("p", "1")], size=1, modification_time=0, data_change=True, tags=pairs)
    wire = add.to_json_dict()["add"]
    assert wire["tags"] == {"ZCUBE_ID": "z1", "ZCUBE_ZORDER_CURVE": "zorder"}
    assert wire["partitionValues"] == {"p": "1"}
    remove = RemoveFile(path="a", tags=pairs, partition_values=[])
    assert remove.to_json()["tags"] == dict(pairs) and remove.to_json()["partitionValues"] == {}
    assert AddCDCFile(path="c", partition_values=[], size=1, tags=pairs).to_json()["tags"] == dict(pairs)
    with pytest.raises(TypeError, match="add.tags must be a map of strings"):
        AddFile(path="a", partition_values={}, size=1, modification_time=0, data_change=True, tags="x=1").to_json()
