"""Crash safety: a writer dies (os._exit / SIGKILL) at injected points; the table stays readable at
the last committed version, and nothing half-written is taken as valid.

Faults are injected at the storage boundary in a child process (a LocalStorage subclass that exits
before/after a matching write, or leaves a torn temp file exactly like LocalStorage's own temp
naming), so the engine code under test is the real one. A final test SIGKILLs a looping writer at
arbitrary moments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from txn_helpers import append, create_table, read_ids, snapshot

from airflow_delta_provider_apps.engine.log.last_checkpoint import read_last_checkpoint
from airflow_delta_provider_apps.engine.storage import storage_for

REPO = Path(__file__).resolve().parents[3]
HELPERS = Path(__file__).resolve().parents[2]  # tests/: txn_helpers

WORKER = r"""
import os, sys, json
from airflow_delta_provider_apps.engine.storage import LocalStorage
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint
from txn_helpers import write_file

root, scenario, kind, pattern = sys.argv[1:5]

class Crashing(LocalStorage):
    def write_bytes(self, path, data, *, overwrite=False):
        name = os.path.basename(path)
        hit = pattern in name
        if hit and kind == "before":
            os._exit(137)
        if hit and kind == "torn":
            tmp = os.path.join(os.path.dirname(path), "." + name + ".0123456789abcdef.tmp")
            with open(tmp, "wb") as f:
                f.write(data[: len(data) // 2])
            os._exit(137)
        super().write_bytes(path, data, overwrite=overwrite)
        if hit and kind == "after":
            os._exit(137)

st = Crashing()
snap = load_snapshot(st, root)
if scenario == "data_files":
    write_file(root, [900, 901], "a")
    os._exit(137)
if scenario == "append":
    OptimisticTransaction(st, root, snap).commit([write_file(root, [900, 901], "a")])
elif scenario == "checkpoint":
    write_checkpoint(st, root, snap, part_size=int(os.environ.get("PART_SIZE", "1000000")))
elif scenario == "loop":
    while True:
        s = load_snapshot(st, root)
        OptimisticTransaction(st, root, s).commit([write_file(root, [10_000 + s.version], "k")])
        print(s.version, flush=True)
os._exit(0)
"""


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HELPERS), env.get("PYTHONPATH", "")])
    return env


def _crash(root, scenario, kind="none", pattern="<never>", **env):
    e = _env()
    e.update(env)
    p = subprocess.run(
        [sys.executable, "-c", WORKER, root, scenario, kind, pattern],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode in (0, 137), p.stderr
    return p.returncode


def _log(root):
    return os.path.join(root, "_delta_log")


def _check_consistent(root, version, ids):
    snap = snapshot(root)
    assert snap.version == version
    assert read_ids(root, snap) == sorted(ids)
    import deltalake

    dt = deltalake.DeltaTable(root)
    assert dt.version() == version
    assert sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == sorted(ids)


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "4"})
    for i in range(1, 4):
        append(root, [i], "a")
    return root  # version 3, ids 1..3; the next commit (4) triggers a checkpoint


def test_crash_after_data_files_before_commit(table):
    assert _crash(table, "data_files") == 137
    _check_consistent(table, 3, [1, 2, 3])
    assert len(os.listdir(os.path.join(table, "p=a"))) == 4  # the orphan data file is just ignored
    assert append(table, [4], "a").version == 4


def test_torn_commit_file_is_invisible(table):
    assert _crash(table, "append", "torn", f"{4:020d}.json") == 137
    assert any(n.endswith(".tmp") for n in os.listdir(_log(table)))
    _check_consistent(table, 3, [1, 2, 3])
    res = append(table, [4], "a")  # the next writer takes version 4 normally
    assert res.version == 4 and res.attempts == 1
    _check_consistent(table, 4, [1, 2, 3, 4])


def test_crash_right_after_commit_before_checkpoint(table):
    assert _crash(table, "append", "after", f"{4:020d}.json") == 137
    assert not os.path.exists(os.path.join(_log(table), f"{4:020d}.checkpoint.parquet"))
    _check_consistent(table, 4, [1, 2, 3, 900, 901])


def test_torn_checkpoint_is_invisible(table):
    assert _crash(table, "append", "torn", ".checkpoint.parquet") == 137
    names = os.listdir(_log(table))
    assert f"{4:020d}.checkpoint.parquet" not in names and "_last_checkpoint" not in names
    _check_consistent(table, 4, [1, 2, 3, 900, 901])
    assert snapshot(table).log_segment.checkpoint is None


def test_crash_before_last_checkpoint(table):
    assert _crash(table, "append", "before", "_last_checkpoint") == 137
    assert os.path.exists(os.path.join(_log(table), f"{4:020d}.checkpoint.parquet"))
    assert read_last_checkpoint(storage_for(table), _log(table)) is None
    _check_consistent(table, 4, [1, 2, 3, 900, 901])
    assert snapshot(table).log_segment.checkpoint_version == 4  # found by listing, complete


def test_crash_between_multi_part_checkpoint_parts(table):
    assert _crash(table, "checkpoint", "before", ".checkpoint.0000000002.", PART_SIZE="2") == 137
    names = os.listdir(_log(table))
    assert any(".checkpoint.0000000001." in n for n in names)
    assert not any(".checkpoint.0000000002." in n for n in names)
    assert "_last_checkpoint" not in names
    _check_consistent(table, 3, [1, 2, 3])
    assert snapshot(table).log_segment.checkpoint is None  # incomplete set ignored


def test_stale_last_checkpoint_after_crash(table):
    """_last_checkpoint points at v4 while a crashed writer left a complete v8 checkpoint part set."""
    append(table, [4], "a")  # v4 + checkpoint + _last_checkpoint
    for i in range(5, 8):
        append(table, [i], "a")
    assert _crash(table, "append", "before", "_last_checkpoint") == 137  # v8 + checkpoint, no hint
    assert read_last_checkpoint(storage_for(table), _log(table))["version"] == 4
    _check_consistent(table, 8, [1, 2, 3, 4, 5, 6, 7, 900, 901])
    assert snapshot(table).log_segment.checkpoint_version == 8


@pytest.mark.timeout(180)
def test_sigkill_a_looping_writer(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "3"})
    for delay in (0.9, 1.3, 1.7):
        p = subprocess.Popen(
            [sys.executable, "-c", WORKER, root, "loop", "none", "<never>"],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # wait until it has committed at least once, then kill it at an arbitrary moment
        first = p.stdout.readline()
        assert first.strip() != "", p.stderr.read()
        time.sleep(delay - 0.8)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        snap = snapshot(root)
        # contiguous versions, every live file present, each commit added exactly one row
        versions = sorted(int(n[:20]) for n in os.listdir(_log(root)) if n.endswith(".json") and n[0] != ".")
        assert versions == list(range(snap.version + 1))
        ids = read_ids(root, snap)
        assert len(ids) == snap.version == len(set(ids))
        import deltalake

        assert deltalake.DeltaTable(root).to_pyarrow_table(columns=["id"]).num_rows == snap.version
    # and the table keeps working
    assert append(root, [1], "z").version == snapshot(root).version
