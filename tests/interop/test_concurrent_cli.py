"""Two processes appending to one table at once through the CLI (two JVMs: one test only).

Blind appends never conflict: the loser of the put-if-absent race for a version re-checks the
winner (a blind append) and commits at the next version. So both appends must land (exit 0, no
``DELTA_ERROR`` line), at versions 1 and 2, and the table must hold exactly the rows of both.

The two processes really meet: each runs the CLI's ``main`` under a small wrapper that holds the
transaction at a file gate just before ``commit`` until both processes have read the table (both at
read version 0). So the second commit is always written over a concurrent one it did not read; the
log shows it (both commits carry ``readVersion`` 0) and the wrapper records that the loser checked
version 1 for conflicts. A conflict check that refused blind appends would fail this test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = [pytest.mark.spark, pytest.mark.interop]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs the real CLI (``airflow_delta_provider_apps.cli.main``, the code behind ``python -m
# airflow_delta_provider_apps``); only OptimisticTransaction.commit is wrapped: wait at the gate until
# every process is there (each has built its transaction, so each has read the table), then commit and
# record what the commit did.
_GATED_CLI = r"""
import json, os, sys, time
from airflow_delta_provider_apps.engine.txn.transaction import OptimisticTransaction
from airflow_delta_provider_apps.cli import main

gate, parties, name = os.environ["GATE_DIR"], int(os.environ["GATE_PARTIES"]), os.environ["GATE_NAME"]
real_commit = OptimisticTransaction.commit

def gated_commit(self, *args, **kwargs):
    with open(os.path.join(gate, "ready-" + name), "w") as f:
        json.dump({"read_version": self.read_version}, f)
    deadline = time.monotonic() + 180
    while sum(n.startswith("ready-") for n in os.listdir(gate)) < parties:
        if time.monotonic() > deadline:
            raise RuntimeError("gate: the other process never reached its commit")
        time.sleep(0.005)
    result = real_commit(self, *args, **kwargs)
    with open(os.path.join(gate, "done-" + name), "w") as f:
        json.dump({"version": result.version, "attempts": result.attempts,
                   "conflicts_checked": list(result.conflicts_checked)}, f)
    return result

OptimisticTransaction.commit = gated_commit
sys.exit(main())
"""


def test_two_cli_processes_append_at_once_both_land(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, writer STRING")
    gate = tmp_path / "gate"
    gate.mkdir()
    wrapper = tmp_path / "gated_cli.py"
    wrapper.write_text(_GATED_CLI)
    sources = []
    for w in range(2):
        src = tmp_path / f"src{w}.parquet"
        pq.write_table(
            pa.table({"id": pa.array(range(w * 1000, w * 1000 + 500), pa.int64()), "writer": [f"w{w}"] * 500}), src
        )
        sources.append(src)
    base_env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
        GATE_DIR=str(gate),
        GATE_PARTIES="2",
    )
    procs = []
    for w, src in enumerate(sources):  # both started at once
        spec = {
            "table_uri": root,
            "mode": "append",
            "source": str(src),
            "source_format": "parquet",
            "result_uri": str(tmp_path / f"result{w}.json"),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(wrapper), "write", "--master", "local[1]", "--spec-json", json.dumps(spec)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(base_env, GATE_NAME=f"w{w}"),
                cwd=str(tmp_path),
            )
        )
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    # both landed: exit 0, a JSON result, no conflict (or any other error) line
    versions = {}
    for w, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert "DELTA_ERROR" not in out, (w, out[-2000:])
        assert p.returncode == 0, (w, p.returncode, out[-2000:], err[-3000:])
        res = json.loads(out.strip().splitlines()[-1])
        assert res == json.loads((tmp_path / f"result{w}.json").read_text())
        assert res["metrics"]["numOutputRows"] == 500 and res["skipped"] is False
        versions[w] = res["version"]
    assert sorted(versions.values()) == [1, 2]

    # they really overlapped: both read version 0 before either committed ...
    for w in range(2):
        assert json.loads((gate / f"ready-w{w}").read_text()) == {"read_version": 0}
    done = {w: json.loads((gate / f"done-w{w}").read_text()) for w in range(2)}
    assert {w: d["version"] for w, d in done.items()} == versions
    # ... so the one at version 2 was written over version 1, which it had not read: it checked it
    # for conflicts (and found none)
    loser = next(w for w, v in versions.items() if v == 2)
    assert done[loser]["conflicts_checked"] == [1], done
    assert done[1 - loser]["conflicts_checked"] == [], done

    # the log: contiguous versions 0..2, both commits blind appends based on read version 0
    log = sorted(f for f in os.listdir(os.path.join(root, "_delta_log")) if f.endswith(".json"))
    assert log == [f"{v:020d}.json" for v in range(3)]
    for v in (1, 2):
        with open(os.path.join(root, "_delta_log", f"{v:020d}.json")) as f:
            ci = next(json.loads(line)["commitInfo"] for line in f if '"commitInfo"' in line)
        assert ci["readVersion"] == 0 and ci["isBlindAppend"] is True and ci["operation"] == "WRITE", ci

    # exactly the rows of both appends
    snap = load_snapshot(storage_for(root), root)
    assert snap.version == 2
    table = read_snapshot_table(snap)
    assert table.num_rows == 1000
    got = sorted(zip(table.column("id").to_pylist(), table.column("writer").to_pylist()))
    assert got == sorted((i, f"w{w}") for w in range(2) for i in range(w * 1000, w * 1000 + 500))
