"""VACUUM racing writers in other processes (appends, deletes, optimizes, restores, merges through Spark) at the
shortest retention the check allows (the table's own retention is a few seconds), full and lite in turn:
no writer fails because of it, no committed file is lost (every latest version stays readable by
deltalake), and deltalake reads every row the writers' commits say are there."""

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
    from airflow_delta_provider_apps.engine.errors import CommitConflictError, InvalidArgumentError
    root, kind, seconds, start = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    if kind == "merge":  # upserts through Spark: a few existing keys rewritten, one new key each round
        from airflow_delta_provider_apps.engine.spark.session import build_session
        spark = build_session(app_name="vacuum-race", master="local[1]")
        spark.range(1).collect()  # the JVM and a Python worker are up before the race starts
    print("ready", flush=True)
    waited = time.time() + 300  # a test that failed before starting the race must not leave us behind
    while not os.path.exists(start):
        if time.time() > waited:
            sys.exit(3)
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
            elif kind == "restore":  # a recent version back (its files may be gone: a clear refusal)
                t = DeltaTable(None, root)
                t.restore(version=max(1, t.snapshot().version - 1 - n % 4))
            else:
                DeltaTable(None, root).optimize(target_size=1 << 20)
        except CommitConflictError:
            conflicts += 1  # a conflict between writers or with a running VACUUM: the next round retries
        except InvalidArgumentError as e:  # RESTORE of a version whose files VACUUM already deleted
            assert kind == "restore" and "no longer exist" in str(e), e
        n += 1
        time.sleep(1.0 if kind in ("delete", "optimize", "restore") else 0.05)  # gaps in which a merge can land
    print(n, conflicts)
    """
)


def test_vacuum_beside_writers_loses_nothing(tmp_path):
    root = str(tmp_path / "t")
    # the shortest retention the check allows is the table's own
    create_table(root, schema="id BIGINT", properties={"delta.deletedFileRetentionDuration": "interval 8 seconds"})
    # Delta's contract: the retention outlasts the longest transaction. A Spark merge on two busy cores
    # takes a few seconds (with a 2-second retention one read a file a concurrent OPTIMIZE had removed
    # and VACUUM had deleted since; that is now a retryable ConcurrentDeleteReadError, see
    # test_vacuum.py), so 8 s here, over a 16-second race, for merges to land.
    seconds, start = 16, tmp_path / "start"
    kinds = ("append", "delete", "optimize", "restore", "merge")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, root, kind, str(seconds), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for kind in kinds
    ]
    try:
        _race(root, writers, kinds, seconds, start)
    finally:  # a failed test leaves no writer running
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait(30)


def _race(root, writers, kinds, seconds, start):
    for w in writers:  # every writer is set up (Spark started) before the clock starts
        assert w.stdout.readline().strip() == "ready", w.stderr.read()[-3000:]
    start.touch()
    t = DeltaTable(None, root)
    vacuums, deleted = 0, 0
    end = time.time() + seconds
    while time.time() < end:
        try:  # the table's retention: anything a writer wrote less than 8 s ago is young and stays
            deleted += t.vacuum(mode=("full", "lite")[vacuums % 2])["numDeletedFiles"]
            vacuums += 1
        except CommitConflictError:  # VACUUM's own commits never conflict; kept to say so if they do
            pytest.fail("VACUUM's commit conflicted")
        # the version now latest is whole: deltalake reads it (a deleted live file would fail here)
        deltalake.DeltaTable(root).to_pyarrow_table()
        time.sleep(0.2)
    rounds = {}
    for kind, w in zip(kinds, writers, strict=True):
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-3000:]
        rounds[kind] = [int(x) for x in out.split()]
    assert rounds["merge"][0] - rounds["merge"][1] >= 2, rounds  # merges did land during the race
    assert rounds["restore"][0] - rounds["restore"][1] >= 2, rounds  # restores landed too
    assert vacuums > 3 and deleted > 0  # it did delete what the writers' rewrites left behind
    snap = t.snapshot()
    from airflow_delta_provider_apps.engine.paths import file_locations

    missing = [p for p in file_locations(root, snap.files.column("path")) if not snap.storage.exists(p)]
    assert missing == []  # no committed (live) file was deleted
    ids = deltalake.DeltaTable(root).to_pyarrow_table().column("id").to_pylist()
    assert len(ids) == len(set(ids))  # nothing doubled by a resurrected file
    stats = sum(__import__("json").loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist())
    assert stats == len(ids)
