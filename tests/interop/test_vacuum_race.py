"""VACUUM racing writers in other processes (appends, deletes, optimizes, merges through Spark) with a short retention: no
writer fails because of it, no committed file is lost, and deltalake reads every row the writers'
commits say are there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.errors import CommitConflictError

deltalake = pytest.importorskip("deltalake")

WRITER = textwrap.dedent(
    """
    import os, sys, time, pyarrow as pa
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.errors import CommitConflictError
    root, kind, seconds, start = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    if kind == "merge":  # upserts through Spark: a few existing keys rewritten, one new key each round
        from airflow_delta_provider_apps.engine.spark.session import build_session
        spark = build_session(app_name="vacuum-race", master="local[1]")
        spark.range(1).collect()  # the JVM and a Python worker are up before the race starts
    print("ready", flush=True)
    while not os.path.exists(start):
        time.sleep(0.05)
    end, n, conflicts = time.time() + seconds, 0, 0
    while time.time() < end:
        try:
            if kind == "append":
                append_arrow(root, pa.table({"id": list(range(n * 10, n * 10 + 10))}))
            elif kind == "delete":
                DeltaTable(None, root).delete(f"id % 7 = {n % 7}")
            elif kind == "merge":
                ids = sorted({n * 13 % 300, n * 29 % 300, 1_000_000 + n})
                DeltaTable(spark, root).upsert(spark.createDataFrame([(i,) for i in ids], "id long"), ["id"])
            else:
                DeltaTable(None, root).optimize(target_size=1 << 20)
        except CommitConflictError:
            conflicts += 1  # a conflict between writers (not with VACUUM): retried by the next round
        n += 1
        time.sleep(1.0 if kind in ("delete", "optimize") else 0.05)  # gaps in which a merge can land
    print(n, conflicts)
    """
)


def test_vacuum_beside_writers_loses_nothing(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    # Delta's contract: the retention outlasts the longest transaction. A Spark merge on two busy cores
    # takes a few seconds (with a 2-second retention one read a file a concurrent OPTIMIZE had removed
    # and VACUUM had deleted since; that is now a retryable ConcurrentDeleteReadError, see
    # test_vacuum.py), so 8 s here, over a 16-second race, for merges to land.
    seconds, retention_s, start = 16, 8, tmp_path / "start"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, root, kind, str(seconds), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for kind in ("append", "delete", "optimize", "merge")
    ]
    for w in writers:  # every writer is set up (Spark started) before the clock starts
        assert w.stdout.readline().strip() == "ready", w.stderr.read()[-3000:]
    start.touch()
    t = DeltaTable(None, root)
    vacuums, deleted = 0, 0
    end = time.time() + seconds
    while time.time() < end:
        try:  # a short retention: anything a writer wrote less than retention_s ago is young and stays
            deleted += t.vacuum(retention_s / 3600, enforce_retention_duration=False)["numDeletedFiles"]
            vacuums += 1
        except CommitConflictError:  # VACUUM's own commits never conflict; kept to say so if they do
            pytest.fail("VACUUM's commit conflicted")
        time.sleep(0.2)
    rounds = {}
    for kind, w in zip(("append", "delete", "optimize", "merge"), writers, strict=True):
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-3000:]
        rounds[kind] = [int(x) for x in out.split()]
    assert rounds["merge"][0] - rounds["merge"][1] >= 2, rounds  # merges did land during the race
    assert vacuums > 3 and deleted > 0  # it did delete what the writers' rewrites left behind
    snap = t.snapshot()
    from airflow_delta_provider_apps.engine.paths import file_locations

    missing = [p for p in file_locations(root, snap.files.column("path")) if not snap.storage.exists(p)]
    assert missing == []  # no committed (live) file was deleted
    ids = deltalake.DeltaTable(root).to_pyarrow_table().column("id").to_pylist()
    assert len(ids) == len(set(ids))  # nothing doubled by a resurrected file
    stats = sum(__import__("json").loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist())
    assert stats == len(ids)
