"""A storm with RESTORE racing every other operation on a clustered, row-tracking table with every
current feature on (deletion vectors, the change data feed, V2 checkpoints, in-commit timestamps, type
widening), processes committing at once, checkpoints every 3 versions.

Afterwards every version is frozen (a copy of the table whose log ends there) and read by us, by
delta-kernel-rs and by DuckDB's ``delta_scan``: each version must be readable by all three, with the
same rows. Every operation either lands or fails with a typed, retryable conflict."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import re
import time
import traceback

import pyarrow as pa
import pytest
from outside_readers import duckdb_table, kernel_table, sorted_rows

pytest.importorskip("delta_kernel_rust_sharing_wrapper")
pytest.importorskip("duckdb_extension_delta")

ROUNDS = 8
COLUMNS = ["id", "x"]
PROPS = {
    "delta.checkpointInterval": "3",
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
    "delta.checkpointPolicy": "v2",
    "delta.enableInCommitTimestamps": "true",
    "delta.enableTypeWidening": "true",
}


def _worker(root, kind, wid, barrier, out):
    import pyarrow as pa

    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.errors import DeltaError

    rng = random.Random(wid)
    results = []
    try:
        barrier.wait(timeout=60)
        for k in range(ROUNDS):
            t = DeltaTable(None, root)
            try:
                if kind == "append":
                    ids = [wid * 10_000 + k * 20 + i for i in range(20)]
                    append_arrow(root, pa.table({"id": ids, "x": [i * 7919 % 1000 for i in ids]}))
                elif kind == "optimize":
                    t.optimize(target_size=4_000)
                elif kind == "delete":
                    t.delete(f"x < {rng.randrange(0, 200)}")
                elif kind == "update":
                    t.update({"x": "x + 1"}, f"id % 7 = {rng.randrange(7)}")
                else:  # restore: a version from the storm so far, once OPTIMIZE wrote clustered files
                    deadline = time.monotonic() + 120
                    while not any(h["operation"] == "OPTIMIZE" for h in t.history()):
                        assert time.monotonic() < deadline, "no OPTIMIZE landed in 120 s"
                        time.sleep(0.05)
                    time.sleep(0.1)
                    r = t.restore(version=rng.randint(1, t.version()))
                    results.append({"outcome": "landed" if r["committed"] else "noop"})
                    continue
                results.append({"outcome": "landed"})
            except DeltaError as e:
                results.append({"outcome": "error", "error": type(e).__name__, "retryable": e.retryable, "msg": str(e)})
    except Exception:
        results.append({"outcome": "crash", "trace": traceback.format_exc()})
    with open(out, "w") as f:
        json.dump(results, f)


def _freeze(root: str, version: int, dest: str) -> str:
    """A copy of the table at ``root`` whose log ends at ``version`` (data files hard-linked)."""
    log = os.path.join(root, "_delta_log")
    os.makedirs(os.path.join(dest, "_delta_log", "_sidecars"))
    for name in os.listdir(root):
        if name != "_delta_log":  # data files, deletion vectors, folders (_change_data)
            src = os.path.join(root, name)
            (os.symlink if os.path.isdir(src) else os.link)(src, os.path.join(dest, name))
    for name in os.listdir(os.path.join(log, "_sidecars")):
        os.link(os.path.join(log, "_sidecars", name), os.path.join(dest, "_delta_log", "_sidecars", name))
    for name in os.listdir(log):
        # <v>.json / <v>.crc / <v>.checkpoint... / <a>.<b>.compacted.json: kept when they end at or before version
        m = re.match(r"^(\d{20})(?:\.(\d{20}))?\.", name)
        if m and int(m.group(2) or m.group(1)) <= version:
            os.link(os.path.join(log, name), os.path.join(dest, "_delta_log", name))
    return dest


@pytest.mark.timeout(600)
def test_every_version_of_a_restore_storm_reads_the_same_in_kernel_and_duckdb(tmp_path):
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, x BIGINT", cluster_by=["x"], properties=PROPS)
    # rows in a few files before the storm: OPTIMIZE, DELETE and UPDATE have work from their first
    # round (else, on a fast machine, they may all run before any append lands and commit nothing)
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    for k in range(3):
        ids = [k * 20 + i for i in range(20)]
        append_arrow(root, pa.table({"id": ids, "x": [i * 7919 % 1000 for i in ids]}))
    kinds = ["append", "append", "optimize", "delete", "update", "restore", "restore"]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(kinds))
    procs, outs = [], []
    for wid, kind in enumerate(kinds, start=1):
        out = str(tmp_path / f"{kind}{wid}.json")
        p = ctx.Process(target=_worker, args=(root, kind, wid, barrier, out))
        p.start()
        procs.append(p)
        outs.append((kind, out))
    for p in procs:
        p.join(timeout=400)
        assert p.exitcode == 0
    results = {kind: [] for kind in kinds}
    for kind, out in outs:
        results[kind] += json.load(open(out))
    crashes = [r for rs in results.values() for r in rs if r["outcome"] == "crash"]
    assert not crashes, crashes[0]["trace"]
    errors = [r for rs in results.values() for r in rs if r["outcome"] == "error"]
    # a race lost is a typed, retryable conflict
    assert [r for r in errors if not r["retryable"]] == []
    assert any(r["outcome"] == "landed" for r in results["restore"]), results["restore"]

    t = DeltaTable(None, root)
    latest = t.version()
    assert os.listdir(os.path.join(root, "_delta_log", "_sidecars"))  # V2 checkpoints were written
    for v in range(1, latest + 1):
        frozen = _freeze(root, v, str(tmp_path / f"v{v}"))
        ours = sorted_rows(read_snapshot_table(t.snapshot(version=v), COLUMNS), COLUMNS)
        assert ours == sorted_rows(read_snapshot_table(DeltaTable(None, frozen).snapshot(), COLUMNS), COLUMNS), v
        assert sorted_rows(kernel_table(frozen, COLUMNS), COLUMNS) == ours, ("delta-kernel-rs", v)
        assert sorted_rows(duckdb_table(frozen, COLUMNS), COLUMNS) == ours, ("duckdb", v)
