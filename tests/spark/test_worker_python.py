"""A user's own local SparkSession whose Python workers would start a Python without pyarrow: the
engine's reads use the driver's Python when nothing chose one, and refuse a chosen one without
pyarrow by name before any job (issue 40 item 8). The session must be fresh (pyspark reads
``PYSPARK_PYTHON`` when the context starts), so it runs in a subprocess of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pyarrow as pa

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow

# The user's program: a plain local session (not ours, no PYSPARK_PYTHON), reading a table through the
# Arrow path (Python workers: the native scan, which needs none, is turned off), then the same after
# choosing a Python without pyarrow. Prints one JSON line.
_USER_PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

    root, bare_python = sys.argv[1], sys.argv[2]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.airflowDelta.nativeScan", "false")
        .getOrCreate()
    )
    sc = spark.sparkContext
    out = {"python_at_start": sc.pythonExec}
    out["rows"] = sorted(r["id"] for r in DeltaTable.for_path(spark, root).to_df().collect())
    out["python_after"] = sc.pythonExec
    # a user who chose a Python without pyarrow (what pyspark reads from PYSPARK_PYTHON at start)
    os.environ["PYSPARK_PYTHON"] = sc.pythonExec = bare_python
    jobs = len(sc.statusTracker().getJobIdsForGroup(None))
    try:
        DeltaTable.for_path(spark, root).to_df().collect()
        out["error"] = None
    except InvalidArgumentError as e:
        out["error"] = str(e)
    out["jobs_started"] = len(sc.statusTracker().getJobIdsForGroup(None)) - jobs
    spark.stop()
    print(json.dumps(out))
    """
)


def test_a_users_local_session_reads_with_the_drivers_python_or_says_what_to_set(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": pa.array([3, 1, 2], pa.int64())}))
    append_arrow(root, pa.table({"id": pa.array([5, 4], pa.int64())}))
    # a Python without pyarrow, first on the PATH as `python3`: what pyspark starts by default
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    bare_python = str(bare / "bin" / "python3")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bare / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    assert shutil.which("python3", path=env["PATH"]) == bare_python
    assert subprocess.run([bare_python, "-c", "import pyarrow"], capture_output=True).returncode != 0

    run = subprocess.run(
        [sys.executable, "-c", _USER_PROGRAM, root, bare_python],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["python_at_start"] == "python3"  # pyspark's default: the bare one on the PATH
    assert out["rows"] == [1, 2, 3, 4, 5]  # read in Python workers running the driver's Python
    assert out["python_after"] == sys.executable
    error = out["error"]
    assert error is not None and error.startswith("The Python workers of this Spark session cannot run")
    assert f"'{bare_python}' cannot import pyarrow (ModuleNotFoundError: No module named 'pyarrow')" in error
    assert "Fix: set PYSPARK_PYTHON to a Python with pyarrow" in error and f"PYSPARK_PYTHON={sys.executable}" in error
    assert out["jobs_started"] == 0  # refused before any job
