"""VACUUM racing writers in other processes (appends, deletes, optimizes) with a short retention: no
writer fails because of it, no committed file is lost, and deltalake reads every row the writers'
commits say are there."""

from __future__ import annotations

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
    import sys, time, pyarrow as pa
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.errors import CommitConflictError
    root, kind, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    end, n, conflicts = time.time() + seconds, 0, 0
    while time.time() < end:
        try:
            if kind == "append":
                append_arrow(root, pa.table({"id": list(range(n * 10, n * 10 + 10))}))
            elif kind == "delete":
                DeltaTable(None, root).delete(f"id % 7 = {n % 7}")
            else:
                DeltaTable(None, root).optimize(target_size=1 << 20)
        except CommitConflictError:
            conflicts += 1  # a conflict between writers (not with VACUUM): retried by the next round
        n += 1
        time.sleep(0.05)
    print(n, conflicts)
    """
)


def test_vacuum_beside_writers_loses_nothing(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    seconds = 8
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, root, kind, str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind in ("append", "delete", "optimize")
    ]
    t = DeltaTable(None, root)
    vacuums, deleted = 0, 0
    end = time.time() + seconds
    while time.time() < end:
        try:  # a 2-second retention: anything a writer wrote less than 2 s ago is young and stays
            deleted += t.vacuum(2 / 3600, enforce_retention_duration=False)["numDeletedFiles"]
            vacuums += 1
        except CommitConflictError:  # VACUUM's own commits never conflict; kept to say so if they do
            pytest.fail("VACUUM's commit conflicted")
        time.sleep(0.2)
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-3000:]
    assert vacuums > 3 and deleted > 0  # it did delete what the writers' rewrites left behind
    snap = t.snapshot()
    from airflow_delta_provider_apps.engine.paths import file_locations

    missing = [p for p in file_locations(root, snap.files.column("path")) if not snap.storage.exists(p)]
    assert missing == []  # no committed (live) file was deleted
    ids = deltalake.DeltaTable(root).to_pyarrow_table().column("id").to_pylist()
    assert len(ids) == len(set(ids))  # nothing doubled by a resurrected file
    stats = sum(__import__("json").loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist())
    assert stats == len(ids)
