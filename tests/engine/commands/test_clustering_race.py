"""A storm on a clustered table (pure core, processes racing): appenders, two OPTIMIZE loops and two
processes changing the clustering columns commit at once, checkpoints every 5 versions.

Checked afterwards: appends all land; an OPTIMIZE fails only on a concurrent OPTIMIZE of the same
files and a CLUSTER BY only on a concurrent CLUSTER BY (the domain conflict; at least one really
happens: the two meet at a barrier); every appended row is there exactly once, read by us and by
deltalake (checkpoints included); the domain holds the columns of the last CLUSTER BY that landed;
a final OPTIMIZE leaves every file clustered for them. Run twice: clustering alone, and with row
tracking, V2 checkpoints (with sidecars) and in-commit timestamps on as well, where every row keeps the
stable row id and commit version its append gave it through the racing OPTIMIZEs, no two rows share an
id, and the commit timestamps only grow."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import traceback

import pytest

deltalake = pytest.importorskip("deltalake")

APPENDS = 10
ROWS = 30
ROUNDS = 4
COLUMNS = (["x"], ["y", "x"])
MEET_COLUMNS = (["y"], ["id"])  # never set before the meeting


def _append_worker(root, wid, barrier, out):
    import pyarrow as pa

    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    results = []
    try:
        barrier.wait(timeout=60)
        for k in range(APPENDS):
            ids = [wid * 100_000 + k * ROWS + i for i in range(ROWS)]
            r = append_arrow(
                root, pa.table({"id": ids, "x": [i * 7919 % 1000 for i in ids], "y": [i % 17 for i in ids]})
            )
            results.append({"outcome": "landed", "version": r.version, "ids": ids})
    except Exception:
        results.append({"outcome": "crash", "trace": traceback.format_exc()})
    with open(out, "w") as f:
        json.dump(results, f)


def _optimize_worker(root, wid, barrier, out):
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    results = []
    try:
        barrier.wait(timeout=60)
        deadline = time.monotonic() + 60  # OPTIMIZE once files exist: a run over an empty table is a no-op
        while DeltaTable(None, root).snapshot().num_files == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(ROUNDS * 2):
            try:
                r = DeltaTable(None, root).optimize(target_size=4_000)
                results.append({"outcome": "landed" if r["committed"] else "noop", "version": r["version"]})
            except CommitConflictError as e:
                results.append({"outcome": "conflict", "error": type(e).__name__, "retryable": e.retryable})
    except Exception:
        results.append({"outcome": "crash", "trace": traceback.format_exc()})
    with open(out, "w") as f:
        json.dump(results, f)


def _cluster_worker(root, wid, barrier, meet, out):
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.properties import cluster_by
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    results = []
    try:
        barrier.wait(timeout=60)
        for k in range(ROUNDS):
            columns = COLUMNS[(wid + k) % 2]
            snap = DeltaTable(None, root).snapshot()
            if k == 1:  # both read before either commits, each a change: one of them must conflict
                columns = MEET_COLUMNS[wid]
                meet.wait(timeout=60)
            try:
                r = cluster_by(snap, columns).to_dict()
                results.append(
                    {"outcome": "landed" if r["committed"] else "noop", "version": r["version"], "columns": columns}
                )
            except CommitConflictError as e:
                results.append({"outcome": "conflict", "error": type(e).__name__, "retryable": e.retryable, "k": k})
    except Exception:
        results.append({"outcome": "crash", "trace": traceback.format_exc()})
    with open(out, "w") as f:
        json.dump(results, f)


EVERYTHING = {  # row tracking, V2 checkpoints with sidecars, in-commit timestamps
    "delta.enableRowTracking": "true",
    "delta.checkpointPolicy": "v2",
    "delta.enableInCommitTimestamps": "true",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("features", ["clustering", "everything"])
def test_a_storm_on_a_clustered_table(tmp_path, features):
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    root = str(tmp_path / "t")
    props = {"delta.checkpointInterval": "5", **(EVERYTHING if features == "everything" else {})}
    create_table(root, schema="id BIGINT, x BIGINT, y BIGINT", cluster_by=["x"], properties=props)
    ctx = mp.get_context("spawn")
    barrier, meet = ctx.Barrier(6), ctx.Barrier(2)
    workers = [
        (_append_worker, ("a", 1)),
        (_append_worker, ("a", 2)),
        (_optimize_worker, ("o", 1)),
        (_optimize_worker, ("o", 2)),
        (_cluster_worker, ("c", 0)),
        (_cluster_worker, ("c", 1)),
    ]
    procs, outs = [], []
    for fn, (kind, wid) in workers:
        out = str(tmp_path / f"{kind}{wid}.json")
        args = (root, wid, barrier, meet, out) if kind == "c" else (root, wid, barrier, out)
        p = ctx.Process(target=fn, args=args)
        p.start()
        procs.append(p)
        outs.append((kind, out))
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    results = {k: [] for k in "aoc"}
    for kind, out in outs:
        results[kind] += json.load(open(out))
    crashes = [r for rs in results.values() for r in rs if r["outcome"] == "crash"]
    assert not crashes, crashes[0]["trace"]

    assert [r["outcome"] for r in results["a"]] == ["landed"] * 2 * APPENDS  # appends never conflict
    assert all(r["retryable"] for r in results["o"] + results["c"] if r["outcome"] == "conflict")
    # an OPTIMIZE conflicts only with the other OPTIMIZE removing the files it rewrote
    assert {r["error"] for r in results["o"] if r["outcome"] == "conflict"} <= {
        "ConcurrentDeleteReadError",
        "ConcurrentDeleteDeleteError",
    }, results["o"]
    clash = [r for r in results["c"] if r["outcome"] == "conflict"]
    assert clash and {r["error"] for r in clash} == {"ConcurrentTransactionError"}, results["c"]
    assert any(r["outcome"] == "landed" for r in results["o"]), (results["o"], results["a"])

    t = DeltaTable(None, root)
    last = max((r for r in results["c"] if r["outcome"] == "landed"), key=lambda r: r["version"])
    assert t.clustering_columns() == last["columns"]
    ids = sorted(i for r in results["a"] for i in r["ids"])
    snap = t.snapshot()
    assert sorted(read_snapshot_table(snap, ["id"]).column("id").to_pylist()) == ids
    if features == "clustering":  # (deltalake 1.6.6 refuses to scan tables with V2 checkpoints)
        assert sorted(deltalake.DeltaTable(root).to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == ids
    assert snap.log_segment.checkpoint_version is not None
    if features == "everything":
        assert os.listdir(os.path.join(root, "_delta_log", "_sidecars"))  # V2 checkpoints were written
        _assert_row_ids_stable(root, results["a"], snap)

    t.optimize(target_size=4_000)
    files = t.snapshot().files
    assert set(files.column("clustering_provider").to_pylist()) == {"liquid"}
    tags = [dict(m) for m in files.column("tags").to_pylist()]
    assert {json.loads(m["ZCUBE_ZORDER_BY"]) == last["columns"] for m in tags} == {True}
    assert t.optimize(target_size=4_000)["committed"] is False
    assert not os.path.exists(os.path.join(root, "_delta_vacuum"))


def _assert_row_ids_stable(root: str, appends: list, final) -> None:
    """Each appended row's stable id and commit version, as its append's version gave them, are the
    final snapshot's (the OPTIMIZEs in between rewrote the rows); ids are unique; ICTs only grow."""
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.row_tracking import read_with_row_ids

    now = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in read_with_row_ids(final, ["id"]).to_pylist()}
    assert len({v[0] for v in now.values()}) == len(now)
    for a in appends:
        then = read_with_row_ids(DeltaTable(None, root).snapshot(version=a["version"]), ["id"]).to_pylist()
        given = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in then if r["id"] in set(a["ids"])}
        assert given == {i: now[i] for i in a["ids"]}
        assert {v[1] for v in given.values()} == {a["version"]}
    times = []
    for v in range(final.version + 1):
        path = os.path.join(root, "_delta_log", f"{v:020d}.json")
        if os.path.exists(path):
            info = json.loads(open(path).readline())["commitInfo"]
            times.append(info["inCommitTimestamp"])
    assert times == sorted(times) and len(set(times)) == len(times)
