"""commit_partitions / commit_partition_keys: the partitions a commit changed data in, read from its
commit file (what Asset events carry as partition keys), on hand-written logs."""

from __future__ import annotations

import json

from airflow_delta_provider_apps.engine.log.commit_partitions import commit_partitions
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.protocol import commit_partition_keys


def _schema(mapped: bool) -> str:
    def field(name, type_, i):
        meta = {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": f"col-{name}"} if mapped else {}
        return {"name": name, "type": type_, "nullable": True, "metadata": meta}

    return json.dumps({"type": "struct", "fields": [field("id", "long", 1), field("dt", "string", 2)]})


def _metadata(partitions: list[str], mapped: bool = False) -> dict:
    conf = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"} if mapped else {}
    return {
        "metaData": {
            "id": "t",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": _schema(mapped),
            "partitionColumns": partitions,
            "configuration": conf,
            "createdTime": 0,
        }
    }


def _add(path: str, pv: dict, data_change: bool = True) -> dict:
    return {"add": {"path": path, "partitionValues": pv, "size": 1, "modificationTime": 0, "dataChange": data_change}}


def _log(root, *commits: list[dict]) -> str:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v, actions in enumerate(commits):
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return str(root)


PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
MAPPED_PROTOCOL = {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}


def test_data_changes_name_partitions_and_compaction_does_not(tmp_path):
    root = _log(
        tmp_path,
        [PROTOCOL, _metadata(["dt"]), _add("a", {"dt": "2026-01-01"}), _add("b", {"dt": None}), _add("c", {"dt": ""})],
        [_add("d", {"dt": "2026-01-02"}, data_change=False), {"remove": {"path": "a", "dataChange": False}}],
        [{"remove": {"path": "b", "partitionValues": {"dt": None}, "dataChange": True}}],
    )
    # NULL and "" are one partition (Delta stores an empty string value as NULL)
    assert commit_partition_keys(root, 0) == ["2026-01-01", "__HIVE_DEFAULT_PARTITION__"]
    assert commit_partition_keys(root, 1) is None  # a compaction: no data changed
    assert commit_partition_keys(root, 2) == ["__HIVE_DEFAULT_PARTITION__"]


def test_a_remove_that_does_not_say_its_partition_is_unknown(tmp_path):
    root = _log(
        tmp_path,
        [PROTOCOL, _metadata(["dt"]), _add("a", {"dt": "2026-01-01"})],
        [{"remove": {"path": "a", "dataChange": True}}],
    )
    assert commit_partitions(storage_for(root), root, 1) is None
    assert commit_partition_keys(root, 1) is None


def test_column_mapping_reads_physical_keys_and_names_logical_columns(tmp_path):
    root = _log(
        tmp_path,
        [MAPPED_PROTOCOL, _metadata(["dt"], mapped=True), _add("a", {"col-dt": "2026-01-01"})],
        [_add("b", {"col-dt": "2026-01-02"}), _add("c", {"col-dt": "2026-01-03"})],
    )
    assert commit_partitions(storage_for(root), root, 1) == (["dt"], [{"dt": "2026-01-02"}, {"dt": "2026-01-03"}])


def test_a_commit_that_changes_the_partition_columns_names_none(tmp_path):
    root = _log(
        tmp_path,
        [PROTOCOL, _metadata(["dt"]), _add("a", {"dt": "2026-01-01"})],
        [_metadata([]), {"remove": {"path": "a", "partitionValues": {"dt": "2026-01-01"}, "dataChange": True}}],
    )
    assert commit_partition_keys(root, 1) is None


def test_keys_airflow_cannot_store_give_no_keys(tmp_path):
    root = _log(tmp_path, [PROTOCOL, _metadata(["dt"]), _add("a", {"dt": " "}), _add("b", {"dt": "x" * 251})])
    assert commit_partition_keys(root, 0) is None
