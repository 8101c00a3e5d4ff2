"""Damaged logs are refused with a Delta error (problem, cause, fix), never read around."""

from __future__ import annotations

import json
import os

import pytest
from txn_helpers import append, create_table, read_ids, snapshot

from spark_apps.engine.errors import LogCorruptedError


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
    from spark_apps.engine.reader import read_data_file
    from spark_apps.engine.storage import storage_for

    snap = snapshot(table)
    row = snap.files.select(["path"]).to_pylist()[0]
    with pytest.raises(LogCorruptedError, match="has no value for partition column 'p'"):
        read_data_file(storage_for(table), table, row["path"], {}, snap.schema, ["p"])
