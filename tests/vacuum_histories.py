"""Random table histories for VACUUM's property tests (tests/engine/commands/test_vacuum.py runs them in
process; tests/spark/test_maintenance_spark.py adds MERGE, which needs Spark).

A history is a list of (operation, n) steps: appends into two partitions, deletes, updates, merges,
optimizes (compaction and Z-order), restores, checkpoints, log cleanup, earlier vacuums, old and young
files a failed writer left (not in the log), and a hand-written commit whose add and remove point
outside the table (``../``). Ten minutes pass between steps. :func:`check_vacuum` then runs VACUUM with
a random retention and mode and checks, with deltalake as the independent reader, that the latest version
and every version inside the retention read the same rows as before, and that nothing hidden, under
``_delta_log`` or outside the table was touched."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.vacuum import vacuum
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError, InvalidArgumentError

HOUR_MS = 3_600_000
OPS = ["append", "append_b", "delete", "update", "optimize", "zorder", "restore"]
OPS += ["checkpoint", "cleanup", "vacuum", "orphan", "hostile"]
SPARK_OPS = ["merge"]


def rows(root: str, version: int | None = None) -> list:
    import deltalake

    t = deltalake.DeltaTable(root, version=version) if version is not None else deltalake.DeltaTable(root)
    if "deletionVectors" in (t.protocol().reader_features or []):  # its DataFusion scan applies them
        got = pa.table(deltalake.QueryBuilder().register("t", t).execute("SELECT id, v, p FROM t").read_all())
    else:
        got = t.to_pyarrow_table(columns=["id", "v", "p"])
    return sorted(tuple(r.values()) for r in got.to_pylist())


def files(top: str) -> dict:
    """{path: (size, mtime_ns)} of every file under ``top``."""
    out = {}
    for d, _, names in os.walk(top):
        for n in names:
            st_ = os.stat(os.path.join(d, n))
            out[os.path.join(d, n)] = (st_.st_size, st_.st_mtime_ns)
    return out


def age(root: str, seconds: float) -> None:
    """Make every file under ``root`` ``seconds`` older (the clock of the history, without sleeping)."""
    for path, (_, mtime_ns) in files(root).items():
        t = mtime_ns / 1e9 - seconds
        os.utime(path, (t, t))


def new_table(tmp_path, dv: bool = False) -> str:
    """The history's table; ``dv``: DELETE and UPDATE write deletion vectors (their files are
    VACUUM's to keep and remove too)."""
    root = str(tmp_path / "t")
    properties = {"delta.enableDeletionVectors": "true"} if dv else None
    create_table(root, schema="id BIGINT, v BIGINT, p STRING", partition_by=["p"], properties=properties)
    return root


def append(root: str, ids, p: str = "a") -> None:
    append_arrow(root, pa.table({"id": list(ids), "v": [i * 10 for i in ids], "p": [p] * len(ids)}))


def _hostile_commit_is_refused(root: str, t: DeltaTable, outside: str) -> None:
    """A hand-written commit adds and removes files outside the table: every VACUUM refuses the table
    (nothing is deleted anywhere); the commit is then taken back, as its author would."""
    commit = os.path.join(root, "_delta_log", f"{t.version() + 1:020d}.json")
    rel = os.path.relpath(outside, root)
    actions = [
        {"add": {"path": rel, "partitionValues": {"p": "a"}, "size": 1, "modificationTime": 0, "dataChange": True}},
        {"remove": {"path": rel, "deletionTimestamp": 0, "dataChange": True}},
    ]
    with open(commit, "w") as f:
        f.write("\n".join(json.dumps(a) for a in actions) + "\n")
    before = files(os.path.dirname(root))
    for mode in ("full", "lite"):
        try:
            vacuum(t.snapshot(), 0, enforce_retention_duration=False, mode=mode)
        except DeltaError as e:
            assert "outside" in str(e) or ".." in str(e), str(e)
        else:
            raise AssertionError(f"VACUUM {mode} ran on a log whose paths leave the table")
    assert files(os.path.dirname(root)) == before
    os.remove(commit)


def run_history(tmp_path, history, *, spark=None, dv: bool = False) -> tuple[str, DeltaTable, str, str]:
    """Create a table and apply ``history``; returns (root, table, the outside file, a hidden file)."""
    root = new_table(tmp_path, dv)
    outside = str(tmp_path / "outside.parquet")
    with open(outside, "wb") as f:
        f.write(b"not the table's")
    hidden = os.path.join(root, "_staging", "part-x.parquet")
    os.makedirs(os.path.dirname(hidden))
    with open(hidden, "wb") as f:
        f.write(b"hidden")
    t = DeltaTable(None, root)
    next_id = 0
    for op, n in history:
        if op.startswith("append"):
            append(root, range(next_id, next_id + 3), "b" if op == "append_b" else "a")
            next_id += 3
        elif op == "delete":
            t.delete(f"id % 5 = {n % 5}")
        elif op == "update":
            t.update({"v": "v + 1"}, f"id < {n}")
        elif op == "merge" and spark is not None:  # update two existing keys, insert one new
            ids = [n % max(next_id, 1), (n + 7) % max(next_id, 1), next_id]
            next_id += 1
            source = spark.createDataFrame(
                [(i, i * 100 + n, "b" if n % 2 else "a") for i in sorted(set(ids))], "id long, v long, p string"
            )
            DeltaTable(spark, root).upsert(source, ["id"])
        elif op == "optimize":
            t.optimize()
        elif op == "zorder":
            t.optimize(z_order_by=["id", "v"])
        elif op == "restore" and t.version() > 1:
            t.restore(version=max(0, t.version() - 1 - n % 2))
        elif op == "checkpoint":
            t.checkpoint()
        elif op == "cleanup":
            t.cleanup_metadata()
        elif op == "vacuum":
            vacuum(t.snapshot(), 0, enforce_retention_duration=False, now_ms=int(time.time() * 1000) - HOUR_MS)
        elif op == "orphan":  # a failed writer's file: old, or young (maybe still being committed)
            path = os.path.join(root, "p=a", f"orphan-{n}.parquet")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(b"orphan")
            if n % 2:
                os.utime(path, (time.time() - 3 * 86400,) * 2)
        elif op == "hostile":
            _hostile_commit_is_refused(root, t, outside)
        age(root, 600)  # ten minutes pass between operations (the log's own timestamps stay real)
    return root, t, outside, hidden


def check_vacuum(root: str, t: DeltaTable, outside: str, hidden: str, retention_h: int, ahead_h: int, mode: str):
    """VACUUM with ``retention_h`` hours, ``ahead_h`` hours from now: every version inside the retention
    reads what it read before; the log, hidden files and the outside file are untouched."""
    now_ms = int(time.time() * 1000) + ahead_h * HOUR_MS
    cutoff = now_ms - retention_h * HOUR_MS
    latest = t.version()
    # the versions inside the retention: those that were still the latest at the cutoff or later
    times = {h["version"]: h["timestamp"] for h in t.history()}
    inside = [v for v in range(latest + 1) if v == latest or times.get(v + 1, 0) > cutoff]
    inside = [v for v in inside if v in times]  # versions whose commit log cleanup kept
    before = {v: rows(root, v) for v in inside}
    log_before = files(os.path.join(root, "_delta_log"))
    try:
        res = vacuum(t.snapshot(), retention_h, enforce_retention_duration=False, mode=mode, now_ms=now_ms)
    except InvalidArgumentError as e:  # lite, after log cleanup took commits it needs: it says so
        assert mode == "lite" and "mode='full'" in str(e), str(e)
        res = vacuum(t.snapshot(), retention_h, enforce_retention_duration=False, now_ms=now_ms)
    assert res.metrics.num_deleted_files == res.metrics.num_files_to_delete
    for v in inside:
        assert rows(root, v) == before[v], f"version {v} (latest {latest}) changed"
    after_log = files(os.path.join(root, "_delta_log"))
    # nothing in the log deleted or changed (a checkpoint after VACUUM's own commits may update the hint)
    log_before = {p: s for p, s in log_before.items() if not p.endswith("_last_checkpoint")}
    assert {p: s for p, s in after_log.items() if p in log_before} == log_before
    with open(outside, "rb") as f:
        assert f.read() == b"not the table's"
    assert os.path.exists(hidden)
    return res
