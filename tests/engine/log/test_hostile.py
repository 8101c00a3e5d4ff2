"""Damaged logs are refused with a Delta error (problem, cause, fix), never read around."""

from __future__ import annotations

import json
import os

import pytest
from txn_helpers import append, create_table, read_ids, snapshot

from airflow_delta_provider_apps.engine.errors import LogCorruptedError


def _log(root, version):
    return os.path.join(root, "_delta_log", f"{version:020d}.json")


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1, 2])
    return root


def test_a_torn_commit_info_line_is_refused(table):
    append(table, [3])
    with open(_log(table, 2)) as f:
        lines = f.read().splitlines()
    assert lines[0].startswith('{"commitInfo":')
    with open(_log(table, 2), "w") as f:
        f.write(lines[0][: len(lines[0]) // 2] + "\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(LogCorruptedError, match="Commit 2"):
        snapshot(table)
    with pytest.raises(LogCorruptedError):  # and nothing is written on top of it
        append(table, [4])


def test_a_malformed_cdc_line_is_refused(table):
    with open(_log(table, 1), "a") as f:
        f.write('{"cdc": {"path": "_change_data/x.parquet", "partitionValues": \n')
    with pytest.raises(LogCorruptedError, match="Commit 1"):
        snapshot(table)


def test_a_valid_cdc_line_is_accepted(table):
    with open(_log(table, 1), "a") as f:
        cdc = {"path": "_change_data/x.parquet", "partitionValues": {"p": "a"}, "size": 1, "dataChange": False}
        f.write(json.dumps({"cdc": cdc}) + "\n")
    assert read_ids(table) == [1, 2]


def test_a_file_without_its_partition_value_is_refused(table):
    # the reader refuses an add whose partitionValues do not name a partition column at all
    from airflow_delta_provider_apps.engine.reader import read_data_file
    from airflow_delta_provider_apps.engine.storage import storage_for

    snap = snapshot(table)
    row = snap.files.select(["path"]).to_pylist()[0]
    with pytest.raises(LogCorruptedError, match="has no value for partition column 'p'"):
        read_data_file(storage_for(table), table, row["path"], {}, snap.schema, ["p"])


def test_a_data_file_that_is_not_parquet_is_a_delta_error(table):
    from airflow_delta_provider_apps.engine.errors import CorruptDataFileError
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    path = snapshot(table).files.column("path").to_pylist()[0]
    with open(os.path.join(table, path), "wb") as f:
        f.write(b"not a parquet file")
    with pytest.raises(CorruptDataFileError, match="not a readable parquet file") as e:
        read_snapshot_table(snapshot(table))
    assert path in str(e.value) and "Fix:" in str(e.value)


def test_a_bad_schema_string_is_a_delta_error(table):
    with open(_log(table, 0)) as f:
        lines = [json.loads(line) for line in f]
    for obj in lines:
        if "metaData" in obj:
            obj["metaData"]["schemaString"] = "{not json"
    with open(_log(table, 0), "w") as f:
        f.write("\n".join(json.dumps(o) for o in lines) + "\n")
    with pytest.raises(LogCorruptedError, match="schemaString"):
        _ = snapshot(table).schema


def test_a_directory_in_place_of_the_next_commit(table):
    os.makedirs(_log(table, 2))
    assert snapshot(table).version == 1  # readers ignore it
    with pytest.raises(LogCorruptedError, match="a directory is in its place"):
        append(table, [3])
    assert snapshot(table).version == 1


def test_cleanup_leaves_young_temp_files_alone(table):
    import time

    from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint
    from airflow_delta_provider_apps.engine.log.cleanup import TEMP_FILE_MIN_AGE_MS, cleanup_expired_logs
    from airflow_delta_provider_apps.engine.storage import storage_for

    append(table, [3])
    st = storage_for(table)
    write_checkpoint(st, table, snapshot(table))  # cleanup acts behind a checkpoint
    old = time.time() - 3 * 86400
    for v in range(3):
        os.utime(_log(table, v), (old, old))
    tmp = os.path.join(table, "_delta_log", ".00000000000000000003.json.abc.tmp")
    with open(tmp, "w") as f:
        f.write("{}")
    now_ms = int(time.time() * 1000)
    cleanup_expired_logs(st, table, snapshot(table), retention_ms=0, now_ms=now_ms)
    assert not os.path.exists(_log(table, 0))  # expired commits went
    assert os.path.exists(tmp)  # an in-flight commit's temp file survives a zero retention
    cleanup_expired_logs(st, table, snapshot(table), retention_ms=0, now_ms=now_ms + TEMP_FILE_MIN_AGE_MS + 86_400_000)
    assert not os.path.exists(tmp)


def test_a_vanished_temp_file_is_a_retryable_storage_error(tmp_path, monkeypatch):
    from airflow_delta_provider_apps.engine.errors import StorageError
    from airflow_delta_provider_apps.engine.storage import LocalStorage

    real_link = os.link

    def link_after_cleanup(src, dst, *a, **k):
        os.unlink(src)  # a cleaner removed the temp file just before it was published
        return real_link(src, dst, *a, **k)

    monkeypatch.setattr(os, "link", link_after_cleanup)
    with pytest.raises(StorageError) as e:
        LocalStorage().write_bytes(str(tmp_path / "x.json"), b"{}")
    assert e.value.retryable


def test_partition_values_with_nul_and_too_long_values():
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
    from airflow_delta_provider_apps.engine.partitions import hive_escape, hive_unescape, partition_path

    assert hive_escape("a\x00b") == "a%00b" and hive_unescape("a%00b") == "a\x00b"
    with pytest.raises(InvalidArgumentError, match="too long for a directory name"):
        partition_path(["p"], {"p": "x" * 300})
    assert partition_path(["p"], {"p": "x" * 200}) == "p=" + "x" * 200


def test_an_add_in_a_commit_without_its_partition_value_is_refused(table):
    append(table, [3])
    with open(_log(table, 2)) as f:
        lines = [json.loads(line) for line in f]
    for obj in lines:
        if "add" in obj:
            obj["add"]["partitionValues"] = {}
    with open(_log(table, 2), "w") as f:
        f.write("\n".join(json.dumps(o) for o in lines) + "\n")
    with pytest.raises(LogCorruptedError, match="without a value for partition column\\(s\\) p"):
        snapshot(table)


def test_a_null_partition_value_is_not_a_missing_one(table):
    append(table, [3])
    with open(_log(table, 2)) as f:
        lines = [json.loads(line) for line in f]
    for obj in lines:
        if "add" in obj:
            obj["add"]["partitionValues"] = {"p": None}
    with open(_log(table, 2), "w") as f:
        f.write("\n".join(json.dumps(o) for o in lines) + "\n")
    assert snapshot(table).num_files == 2
