"""``make demo`` ends with exit code 0: the summary's delta-rs cross-check leaves no Python objects to
background threads.

It used to read the table with ``DeltaTable.to_pyarrow_table()``: a pyarrow dataset scan over deltalake's
Python filesystem handler, whose thread pool drops its last references to that handler and to Python-backed
buffers after ``to_table()`` returned. Once the interpreter is finalizing, that thread's
``PyGILState_Ensure`` exits it inside a noexcept C++ destructor: ``terminate called without an active
exception``, SIGABRT after a successful demo (a race, so an exit code alone does not catch it reliably).
The child below has no ``pyarrow.dataset`` at all; the cross-check must still print its line. Seconds, no JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
from conftest import REPO
from deltalake import write_deltalake

CHILD = """
import json, sys
sys.modules["pyarrow.dataset"] = None  # importing it raises ImportError
sys.path.insert(0, sys.argv[1])
import run_demo
run_demo._print_summary(json.loads(sys.argv[2]), sys.argv[3])
"""


def test_summary_cross_check_reads_without_pyarrow_dataset(tmp_path):
    table = tmp_path / "events"
    data = pa.table({"id": list(range(5)), "dt": ["2026-01-01"] * 3 + ["2026-01-02"] * 2})
    write_deltalake(str(table), data, partition_by=["dt"])
    summary = {"run_id": "manual__x", "state": "success", "seconds": 1.0, "tasks": {}}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO / "example_dags"), json.dumps(summary), str(table)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Version in its _delta_log (read without Spark): 0" in proc.stdout, proc.stdout
    assert "deltalake (delta-rs) reads version 0: 5 rows, partitioned by ['dt']" in proc.stdout, proc.stdout
