"""TableProperties: Delta's defaults, each typed field, malformed values, case rules, laziness, snapshot view."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from txn_helpers import append, create_table, make_metadata, snapshot

from airflow_delta_provider_apps.engine.commands.create_table import validate_properties
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.config import TableProperties
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.schema import StructType
from airflow_delta_provider_apps.engine.stats import stats_config_from_properties
from airflow_delta_provider_apps.engine.txn import IsolationLevel
from airflow_delta_provider_apps.engine.writer import resolve_target_file_size

DAY = 86_400_000

# DeltaConfigs.scala defaults (writeStatsAsStruct: the spec's false, see config.py)
DEFAULTS = {
    "checkpoint_interval": 10,
    "checkpoint_policy": "classic",
    "log_retention_ms": 30 * DAY,
    "enable_expired_log_cleanup": True,
    "deleted_file_retention_ms": 7 * DAY,
    "set_transaction_retention_ms": None,
    "isolation_level": None,
    "append_only": False,
    "write_stats_as_json": True,
    "write_stats_as_struct": False,
    "column_mapping_mode": "none",
    "target_file_size": None,
    "data_skipping_num_indexed_cols": 32,
    "data_skipping_stats_columns": None,
    "enable_in_commit_timestamps": False,
    "in_commit_timestamp_enablement_version": None,
    "in_commit_timestamp_enablement_timestamp": None,
    "enable_deletion_vectors": False,
    "enable_change_data_feed": False,
}


def _fields(props: TableProperties) -> dict:
    return {name: getattr(props, name) for name in DEFAULTS}


@pytest.mark.parametrize("source", [None, {}, make_metadata(), make_metadata({"userKey": "x"})])
def test_defaults(source):
    assert _fields(TableProperties.of(source)) == DEFAULTS


@pytest.mark.parametrize(
    "key, value, field, expected",
    [
        ("delta.checkpointInterval", "3", "checkpoint_interval", 3),
        ("delta.checkpointPolicy", "v2", "checkpoint_policy", "v2"),
        ("delta.logRetentionDuration", "interval 2 days", "log_retention_ms", 2 * DAY),
        ("delta.enableExpiredLogCleanup", "false", "enable_expired_log_cleanup", False),
        ("delta.deletedFileRetentionDuration", "interval 36 hours", "deleted_file_retention_ms", 36 * 3_600_000),
        ("delta.setTransactionRetentionDuration", "interval 1 week", "set_transaction_retention_ms", 7 * DAY),
        ("delta.isolationLevel", "WriteSerializable", "isolation_level", IsolationLevel.WRITE_SERIALIZABLE),
        ("delta.isolationLevel", "Serializable", "isolation_level", IsolationLevel.SERIALIZABLE),
        ("delta.appendOnly", "true", "append_only", True),
        ("delta.checkpoint.writeStatsAsJson", "false", "write_stats_as_json", False),
        ("delta.checkpoint.writeStatsAsStruct", "true", "write_stats_as_struct", True),
        ("delta.columnMapping.mode", "name", "column_mapping_mode", "name"),
        ("delta.columnMapping.mode", "id", "column_mapping_mode", "id"),
        ("delta.targetFileSize", "1048576", "target_file_size", 1_048_576),
        ("delta.targetFileSize", "64mb", "target_file_size", 64 * 1024**2),
        ("delta.targetFileSize", "1g", "target_file_size", 1024**3),
        ("delta.dataSkippingNumIndexedCols", "-1", "data_skipping_num_indexed_cols", -1),
        ("delta.dataSkippingNumIndexedCols", "0", "data_skipping_num_indexed_cols", 0),
        ("delta.dataSkippingStatsColumns", "a, b.`c.d`", "data_skipping_stats_columns", [("a",), ("b", "c.d")]),
        ("delta.enableInCommitTimestamps", "true", "enable_in_commit_timestamps", True),
        ("delta.inCommitTimestampEnablementVersion", "7", "in_commit_timestamp_enablement_version", 7),
        (
            "delta.inCommitTimestampEnablementTimestamp",
            "1700000000123",
            "in_commit_timestamp_enablement_timestamp",
            1_700_000_000_123,
        ),
        ("delta.enableDeletionVectors", "true", "enable_deletion_vectors", True),
        ("delta.enableChangeDataFeed", "true", "enable_change_data_feed", True),
    ],
)
def test_each_typed_field(key, value, field, expected):
    props = TableProperties.of(make_metadata({key: value}))
    assert getattr(props, field) == expected
    # every other field keeps its default
    others = {name: v for name, v in _fields(props).items() if name != field}
    assert others == {name: v for name, v in DEFAULTS.items() if name != field}


@pytest.mark.parametrize(
    "key, value, field",
    [
        ("delta.checkpointInterval", "0", "checkpoint_interval"),
        ("delta.checkpointInterval", "ten", "checkpoint_interval"),
        ("delta.checkpointPolicy", "v3", "checkpoint_policy"),
        ("delta.logRetentionDuration", "interval 1 month", "log_retention_ms"),
        ("delta.deletedFileRetentionDuration", "a week", "deleted_file_retention_ms"),
        ("delta.setTransactionRetentionDuration", "7", "set_transaction_retention_ms"),
        ("delta.enableExpiredLogCleanup", "yes", "enable_expired_log_cleanup"),
        ("delta.isolationLevel", "SnapshotIsolation", "isolation_level"),
        ("delta.isolationLevel", "ReadCommitted", "isolation_level"),
        ("delta.appendOnly", "1", "append_only"),
        ("delta.checkpoint.writeStatsAsJson", "no", "write_stats_as_json"),
        ("delta.checkpoint.writeStatsAsStruct", "on", "write_stats_as_struct"),
        ("delta.columnMapping.mode", "physical", "column_mapping_mode"),
        ("delta.targetFileSize", "huge", "target_file_size"),
        ("delta.targetFileSize", "0", "target_file_size"),
        ("delta.dataSkippingNumIndexedCols", "many", "data_skipping_num_indexed_cols"),
        ("delta.dataSkippingNumIndexedCols", "-2", "data_skipping_num_indexed_cols"),
        ("delta.dataSkippingStatsColumns", "a..b", "data_skipping_stats_columns"),
        ("delta.enableInCommitTimestamps", "maybe", "enable_in_commit_timestamps"),
        ("delta.inCommitTimestampEnablementVersion", "v7", "in_commit_timestamp_enablement_version"),
        ("delta.inCommitTimestampEnablementTimestamp", "yesterday", "in_commit_timestamp_enablement_timestamp"),
        ("delta.enableDeletionVectors", "enabled", "enable_deletion_vectors"),
        ("delta.enableChangeDataFeed", "t", "enable_change_data_feed"),
    ],
)
def test_malformed_value_names_the_property(key, value, field):
    props = TableProperties.of({key: value})
    with pytest.raises(InvalidArgumentError) as e:
        getattr(props, field)
    assert key in str(e.value) and f"'{value}'" in str(e.value)
    assert e.value.fix
    # validate() parses every field and reports the same property
    with pytest.raises(InvalidArgumentError, match=key.replace(".", r"\.")):
        props.validate()


def test_keys_and_values_are_case_insensitive():
    props = TableProperties.of(
        {
            "DELTA.APPENDONLY": "TRUE",
            "delta.enableexpiredlogcleanup": " False ",
            "Delta.ColumnMapping.Mode": "NAME",
            "delta.isolationlevel": "writeserializable",
            "delta.checkpointPolicy": "V2",
        }
    )
    assert props.append_only is True
    assert props.enable_expired_log_cleanup is False
    assert props.column_mapping_mode == "name"
    assert props.isolation_level is IsolationLevel.WRITE_SERIALIZABLE
    assert props.checkpoint_policy == "v2"
    assert props.get("delta.appendOnly") == "TRUE"
    # the exact spelling wins over a differently cased duplicate
    assert TableProperties.of({"delta.appendOnly": "false", "DELTA.APPENDONLY": "true"}).append_only is False


def test_raw_mapping_and_prefixes_are_kept():
    conf = {"owner": "team-a", "delta.constraints.pos": "id > 0", "delta.feature.foo": "supported"}
    props = TableProperties.of(conf)
    assert props.raw == conf
    assert props.get("owner") == "team-a" and props.get("missing") is None
    assert props.keys_with_prefix("delta.constraints.") == ["delta.constraints.pos"]
    assert props.keys_with_prefix("DELTA.FEATURE.") == ["delta.feature.foo"]
    assert TableProperties.of(props) is props


def test_a_malformed_property_fails_only_its_field():
    props = TableProperties.of({"delta.targetFileSize": "huge", "delta.appendOnly": "true"})
    assert props.append_only is True
    assert props.checkpoint_interval == 10
    with pytest.raises(InvalidArgumentError, match=r"delta\.targetFileSize='huge'"):
        _ = props.target_file_size
    with pytest.raises(InvalidArgumentError, match=r"delta\.targetFileSize='huge'"):
        resolve_target_file_size(props, None)
    assert resolve_target_file_size(props, 1000) == 1000  # an explicit size needs no property


def test_column_mapping_mode_for_a_schema():
    plain = StructType.from_json({"type": "struct", "fields": [{"name": "a", "type": "long", "metadata": {}}]})
    mapped = StructType.from_json(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "s",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {
                                "name": "b",
                                "type": "long",
                                "metadata": {"delta.columnMapping.physicalName": "col-1"},
                            }
                        ],
                    },
                    "metadata": {},
                }
            ],
        }
    )
    none = TableProperties.of(None)
    assert none.column_mapping_mode_for(plain) == "none"
    # physical names without the property: Spark wrote them in name (or id) mode
    assert none.column_mapping_mode_for(mapped) == "name"
    assert none.column_mapping_mode == "none"  # the property itself is still unset
    # the property, when set, wins over the schema
    assert TableProperties.of({"delta.columnMapping.mode": "none"}).column_mapping_mode_for(mapped) == "none"
    assert TableProperties.of({"delta.columnMapping.mode": "ID"}).column_mapping_mode_for(plain) == "id"


def test_stats_config_reads_the_properties():
    props = TableProperties.of({"delta.dataSkippingNumIndexedCols": "5", "delta.columnMapping.mode": "Name"})
    assert stats_config_from_properties(props) == {
        "num_indexed_cols": 5,
        "stats_columns": None,
        "column_mapping_mode": "name",
    }
    # stats columns win; a malformed count is then not consulted (as before)
    conf = {"delta.dataSkippingStatsColumns": "id", "delta.dataSkippingNumIndexedCols": "many"}
    assert stats_config_from_properties(conf)["stats_columns"] == [("id",)]


def test_snapshot_exposes_the_properties(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, {"delta.appendOnly": "TRUE", "delta.checkpointInterval": "4", "owner": "x"})
    snap = snapshot(root)
    props = snap.properties
    assert isinstance(props, TableProperties)
    assert props is snap.properties  # parsed once per snapshot
    assert (props.append_only, props.checkpoint_interval, props.get("owner")) == (True, 4, "x")
    assert props.raw == snap.metadata.configuration


def test_a_malformed_unrelated_property_leaves_the_table_readable(tmp_path):
    # another writer stored values this engine cannot parse (no CREATE TABLE check on that path)
    root = str(tmp_path / "t")
    create_table(root, {"delta.targetFileSize": "huge", "delta.checkpointPolicy": "v9"})
    append(root, [1, 2, 3])
    snap = snapshot(root)
    assert snap.version == 1
    assert sorted(read_snapshot_table(snap).column("id").to_pylist()) == [1, 2, 3]
    assert [v for v, _ in snap.commit_timestamps()] == [0, 1]
    # the write that needs the target size fails, naming it, before any file or commit is written
    files_before = sorted(os.listdir(os.path.join(root, "p=a")))
    data = pa.table({"id": pa.array([4], pa.int64()), "value": ["v4"], "p": ["a"]})
    with pytest.raises(InvalidArgumentError, match=r"delta\.targetFileSize='huge'"):
        append_arrow(root, data)
    assert snapshot(root).version == 1
    assert sorted(os.listdir(os.path.join(root, "p=a"))) == files_before


def test_in_commit_timestamp_enablement_version_is_honoured(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    log = os.path.join(root, "_delta_log")

    def commit(version: int, ict: int, *actions: dict) -> None:
        with open(os.path.join(log, f"{version:020d}.json"), "w") as f:
            for a in ({"commitInfo": {"timestamp": 5, "inCommitTimestamp": ict}}, *actions):
                f.write(json.dumps(a) + "\n")

    # version 1 carries an ICT but comes before the enablement version: its file time counts
    commit(1, 3_000_000_000_000)
    md = make_metadata({"delta.enableInCommitTimestamps": "TRUE", "delta.inCommitTimestampEnablementVersion": "2"})
    commit(2, 4_000_000_000_000, md.to_json_dict())
    stamps = dict(snapshot(root).commit_timestamps())
    assert stamps[2] == 4_000_000_000_000
    assert stamps[1] < 3_000_000_000_000


def test_create_table_validates_through_the_properties():
    out = validate_properties({"DELTA.appendonly": "TRUE", "delta.targetFileSize": "128mb"})
    assert out == {"delta.appendOnly": "true", "delta.targetFileSize": "128mb"}
    for key, value in [
        ("delta.targetFileSize", "huge"),
        ("delta.isolationLevel", "SnapshotIsolation"),
        ("delta.columnMapping.mode", "physical"),
        ("delta.checkpointPolicy", "v3"),
        ("delta.dataSkippingStatsColumns", "a..b"),
        ("delta.inCommitTimestampEnablementVersion", "x"),
    ]:
        with pytest.raises(InvalidArgumentError, match=key.replace(".", r"\.")):
            validate_properties({key: value})
