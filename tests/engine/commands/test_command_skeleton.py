"""The command skeleton (``engine.commands.base``): every table-changing command passes the same gate
before it reads or writes anything, and ends the same ways (commit, skip, nothing to do).

Run through the engine API in this process (no JVM): DELETE, UPDATE, Arrow append, OPTIMIZE,
RESTORE and VACUUM over the same small table.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands import dml
from airflow_delta_provider_apps.engine.commands.optimize import optimize
from airflow_delta_provider_apps.engine.commands.restore import restore
from airflow_delta_provider_apps.engine.commands.vacuum import vacuum
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.commit_identity import TxnIdentity
from airflow_delta_provider_apps.engine.errors import AppendOnlyViolationError, UnsupportedFeatureError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

DATA = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", "c"])})

COMMANDS = {
    "delete": lambda s: dml.delete(s, "id = 1"),
    "update": lambda s: dml.update(s, {"v": "'z'"}, "id = 2"),
    "append": lambda s: append_arrow(s, DATA),
    "optimize": lambda s: optimize(s),
    "restore": lambda s: restore(s, version=1),
    "vacuum": lambda s: vacuum(s, 0, enforce_retention_duration=False),
}


def _table(root: str, properties=None) -> DeltaTable:
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=properties)
    append_arrow(root, DATA)
    append_arrow(root, DATA)
    return t


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def _upgrade_to_unknown_writer_feature(root: str, version: int) -> None:
    """Commit a protocol that needs a writer feature no engine here knows (as a newer writer would)."""
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["vendorFeatureX"]}}
    info = {"commitInfo": {"timestamp": 0, "operation": "SET TBLPROPERTIES", "operationParameters": {}}}
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    with open(path, "x") as f:
        f.write(json.dumps(info) + "\n" + json.dumps(protocol) + "\n")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_refuses_a_writer_feature_it_does_not_know_before_writing(tmp_path, name):
    root = str(tmp_path / "t")
    t = _table(root)
    _upgrade_to_unknown_writer_feature(root, 3)
    before = _files(root)
    with pytest.raises(UnsupportedFeatureError, match="vendorFeatureX"):
        COMMANDS[name](t.snapshot())
    assert _files(root) == before  # no data file, no commit, no VACUUM START
    assert t.version() == 3


@pytest.mark.parametrize("name", ["delete", "update"])
def test_a_command_removing_rows_is_refused_on_an_append_only_table(tmp_path, name):
    root = str(tmp_path / "t")
    t = _table(root, {"delta.appendOnly": "true"})
    before = _files(root)
    with pytest.raises(AppendOnlyViolationError, match=f"Cannot {name.upper()} rows of table"):
        COMMANDS[name](t.snapshot())
    assert _files(root) == before


def test_append_only_allows_appends_and_compaction(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, {"delta.appendOnly": "true"})
    assert COMMANDS["append"](t.snapshot()).to_dict()["committed"]
    result = COMMANDS["optimize"](t.snapshot()).to_dict()  # removes with dataChange=false only
    assert result["committed"] and result["numRemovedFiles"] == 3
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_the_ends_of_a_command(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root)
    # a commit: the new version, its metrics, execution time measured
    done = dml.delete(t.snapshot(), "id = 1", identity=TxnIdentity("job", 1)).to_dict()
    assert (done["version"], done["committed"], done["skipped"], done["numDeletedRows"]) == (3, True, False, 2)
    assert done["executionTimeMs"] >= 0
    assert t.history(limit=1)[0]["operationMetrics"]["numDeletedRows"] == "2"
    # the same identity again: skipped, nothing read or written
    again = dml.delete(t.snapshot(), "id = 2", identity=TxnIdentity("job", 1)).to_dict()
    assert (again["version"], again["committed"], again["skipped"], again["numDeletedRows"]) == (3, False, True, 0)
    # nothing matches: no commit, the snapshot's version
    none = dml.delete(t.snapshot(), "id = 99").to_dict()
    assert (none["version"], none["committed"], none["skipped"]) == (3, False, False)
    assert t.version() == 3
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == [2, 2, 3, 3]


def test_a_change_feed_watermark_moved_since_the_range_was_read_conflicts(tmp_path):
    """A command consuming a source's changes after version 3 refuses a table that records another
    version for that source by now (another run consumed changes in between): no range twice."""
    import pyarrow as pa

    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.base import Command
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.errors import ConcurrentTransactionError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": pa.array([1], pa.int64())}))
    with pytest.raises(ConcurrentTransactionError, match="after version 3, the table now records None"):
        Command(t.snapshot(), "WRITE", watermark=("delta-changes:x", 5, 3))
    cmd = Command(t.snapshot(), "WRITE", watermark=("delta-changes:x", 5, None))
    cmd.commit([], None)
    assert t.snapshot().set_transactions["delta-changes:x"].version == 5
