"""Every action shape we emit is read back by readers that are not ours (issue: a RESTORE re-added a
clustered file with its ``tags`` as a list of pairs, and every reader refused the table).

Random programs of commands (append, DELETE, UPDATE, upsert, OPTIMIZE, property changes, idempotent
appends, RESTORE) run in process on two tables:
* one with every current feature (liquid clustering, deletion vectors, row tracking, the change data
  feed, V2 checkpoints, in-commit timestamps, type widening): after every step delta-kernel-rs and
  DuckDB's ``delta_scan`` read the rows we read;
* one with the features deltalake reads (clustering, row tracking, the change data feed, in-commit
  timestamps): after every step deltalake and delta-kernel-rs read the rows we read, and at the end
  delta-kernel-rs' change feed of every version holds the change rows ours holds.
Checkpoints every 2 commits and log compaction files come with the programs, so checkpoints written from
re-added files and compactions of them are read too. Every commit's map fields are JSON objects.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from command_programs import run, steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from outside_readers import deltalake_table, duckdb_table, kernel_changes, kernel_table, sorted_rows

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

pytest.importorskip("delta_kernel_rust_sharing_wrapper")
pytest.importorskip("duckdb_extension_delta")

COLUMNS = ["id", "p"]
COMMON = {
    "delta.enableRowTracking": "true",
    "delta.enableChangeDataFeed": "true",
    "delta.enableInCommitTimestamps": "true",
    "delta.checkpointInterval": "2",
}
EVERY_FEATURE = {
    **COMMON,
    "delta.enableDeletionVectors": "true",
    "delta.checkpointPolicy": "v2",
    "delta.enableTypeWidening": "true",
}
PROGRAM = steps("append", "delete", "update", "upsert", "optimize", "idempotent", "restore")
# a RESTORE across an OPTIMIZE and a DELETE: the storm's repro, always part of the program
RESTORE_ACROSS_OPTIMIZE = [("append", [1, 2, 3]), ("append", [4, 5]), ("optimize", None), ("delete", 2)]


def _ours(t: DeltaTable) -> list[tuple]:
    return sorted_rows(read_snapshot_table(t.snapshot(), COLUMNS), COLUMNS)


def _maps_are_objects(root: str) -> None:
    """Every file action's partitionValues and tags in every commit and compaction is a JSON object."""
    for path in glob.glob(os.path.join(root, "_delta_log", "*.json")):
        for line in open(path):
            action = json.loads(line)
            for kind in ("add", "remove", "cdc"):
                if kind in action:
                    for key in ("partitionValues", "tags"):
                        value = action[kind].get(key)
                        assert value is None or isinstance(value, dict), (os.path.basename(path), kind, key, value)


def _check_every_step(t, root, program, readers):
    for step in [*RESTORE_ACROSS_OPTIMIZE, ("restore", 3), *program]:
        run(t, root, [step])
        ours = _ours(t)
        for name, read in readers:
            assert sorted_rows(read(root, COLUMNS), COLUMNS) == ours, (name, step, t.version())
    _maps_are_objects(root)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(PROGRAM, max_size=8))
def test_kernel_and_duckdb_read_every_version_of_a_table_with_every_feature(tmp_path_factory, program):
    root = str(tmp_path_factory.mktemp("every") / "t")
    create_table(root, schema="id BIGINT, p INT", cluster_by=["id"], properties=EVERY_FEATURE)
    t = DeltaTable.for_path(None, root)
    _check_every_step(t, root, program, [("delta-kernel-rs", kernel_table), ("duckdb", duckdb_table)])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(PROGRAM, max_size=8))
def test_deltalake_and_kernel_read_every_version_and_kernel_the_change_feed(tmp_path_factory, program):
    root = str(tmp_path_factory.mktemp("dl") / "t")
    create_table(root, schema="id BIGINT, p INT", cluster_by=["id"], properties=COMMON)
    t = DeltaTable.for_path(None, root)
    _check_every_step(t, root, program, [("deltalake", deltalake_table), ("delta-kernel-rs", kernel_table)])
    change_columns = [*COLUMNS, "_change_type", "_commit_version"]
    ours = t.changes(1).read_all()
    theirs = kernel_changes(root, 1)
    assert sorted_rows(theirs, change_columns) == sorted_rows(ours, change_columns)
