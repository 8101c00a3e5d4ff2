"""Two processes appending to one table at once through the CLI (two JVMs: one test only).

Each append lands exactly once (blind appends do not conflict: the loser of the put-if-absent race
re-checks the winner and commits at the next version) or fails with one clear conflict line; the
log's versions stay contiguous and the table holds exactly the rows of the appends that landed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = [pytest.mark.spark, pytest.mark.interop]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_cli_processes_append_at_once(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, writer STRING")
    sources = []
    for w in range(2):
        src = tmp_path / f"src{w}.parquet"
        pq.write_table(
            pa.table({"id": pa.array(range(w * 1000, w * 1000 + 500), pa.int64()), "writer": [f"w{w}"] * 500}), src
        )
        sources.append(src)
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    procs = []
    for w, src in enumerate(sources):
        spec = {
            "table_uri": root,
            "mode": "append",
            "source": str(src),
            "source_format": "parquet",
            "result_uri": str(tmp_path / f"result{w}.json"),
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "airflow_delta_provider_apps",
                    "write",
                    "--master",
                    "local[1]",
                    "--spec-json",
                    json.dumps(spec),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=str(tmp_path),
            )
        )
        time.sleep(0.2)
    outs = [p.communicate(timeout=300) for p in procs]
    landed = []
    for w, (p, (out, err)) in enumerate(zip(procs, outs)):
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if p.returncode == 0:
            res = json.loads(last)
            assert res == json.loads((tmp_path / f"result{w}.json").read_text())
            assert res["metrics"]["numOutputRows"] == 500 and res["skipped"] is False
            landed.append((w, res["version"]))
        else:
            # the only acceptable failure is a clear, retryable conflict
            assert p.returncode == 2, (p.returncode, last, err[-2000:])
            assert last.startswith("DELTA_ERROR ") and ("Concurrent" in last or "Conflict" in last), last
    assert landed, [o[0][-500:] for o in outs]
    versions = sorted(v for _, v in landed)
    assert versions == list(range(1, len(landed) + 1))
    log = sorted(f for f in os.listdir(os.path.join(root, "_delta_log")) if f.endswith(".json"))
    assert log == [f"{v:020d}.json" for v in range(len(landed) + 1)]
    snap = load_snapshot(storage_for(root), root)
    table = read_snapshot_table(snap)
    assert table.num_rows == 500 * len(landed)
    assert sorted(set(table.column("writer").to_pylist())) == sorted(f"w{w}" for w, _ in landed)
    assert sorted(table.column("id").to_pylist()) == sorted(
        i for w, _ in landed for i in range(w * 1000, w * 1000 + 500)
    )
