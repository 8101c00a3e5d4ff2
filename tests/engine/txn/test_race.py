"""Real races: several processes commit to one table at once (pure core, no Spark).

Each worker (a spawned process) starts at a shared barrier and runs a fixed mix of operations:
blind appends to its own partition and to a shared one, partition-scoped deletes of its own rows
(read predicate + read files on its own partition: never in conflict with the others), and
deletes of the shared partition (which really conflict with concurrent shared appends/deletes).

Most operations run free; a few (:data:`SYNC_OPS`) are made to meet: every worker reads the table
at the same version, then all commit at once. So, whatever the timing, the shared deletes of op 5
really conflict (one lands, every other one must fail with a conflict: the test counts them), and
the shared appends of op 2 and the own-partition deletes of op 3 really are written over commits
they did not read (the test checks that they were checked against them, and that none conflicted).

Checked afterwards: every operation either landed exactly once (its txnId is in the commit file
of the version it reported) or failed with a CommitConflictError; only shared deletes conflict;
each landed commit was checked against exactly the versions between its read version and its own;
versions are contiguous; no commit exists that nobody reported; the rows are exactly what the
landed operations added minus what they removed, read by our snapshot and by deltalake (delta-rs);
automatic checkpoints (every 5 commits) written concurrently with commits load in both.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from txn_helpers import commit_json, create_table, read_ids, snapshot, txn, write_file

N_WORKERS = 4
N_OPS = 12
#: ops at which every worker reads the same version, then all commit at once (see the module docstring)
SYNC_OPS = (2, 3, 5)


def _op_kind(k: int) -> str:
    return {
        3: "delete_own",
        7: "delete_own",
        5: "delete_shared",
        10: "delete_shared",
        2: "append_shared",
        8: "append_shared",
        11: "append_shared",
    }.get(k, "append_own")


def _race_worker(root: str, wid: int, n_ops: int, barrier, out_path: str) -> None:
    from airflow_delta_provider_apps.engine.actions import RemoveFile
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    results = []
    try:
        snapshot(root)  # warm up lazy imports so the workers really start together
        barrier.wait(timeout=60)
        for k in range(n_ops):
            kind = _op_kind(k)
            rec = {"worker": wid, "k": k, "kind": kind, "added": [], "removed": []}
            if k in SYNC_OPS:
                barrier.wait(timeout=60)  # every worker's earlier commits have landed
            snap = snapshot(root)
            rec["read_version"] = snap.version
            t = txn(root, snap, operation="DELETE" if kind.startswith("delete") else "WRITE")
            if kind.startswith("append"):
                part = f"w{wid}" if kind == "append_own" else "shared"
                ids = [wid * 100_000 + k * 100 + j for j in range(3)]
                actions = [write_file(root, ids, part)]
                rec["added"] = ids
            else:
                part = f"w{wid}" if kind == "delete_own" else "shared"
                t.read_predicate({"p": part})
                files = snap.files.filter(
                    [dict(pv or []).get("p") == part for pv in snap.files.column("partition_values").to_pylist()]
                )
                t.read_files(files)
                actions = []
                for row in files.to_pylist():
                    rec["removed"] += (
                        pq.read_table(os.path.join(root, unquote(row["path"])), columns=["id"]).column("id").to_pylist()
                    )
                    actions.append(
                        RemoveFile(
                            path=row["path"],
                            deletion_timestamp=1,
                            data_change=True,
                            extended_file_metadata=True,
                            partition_values=dict(row["partition_values"]),
                            size=row["size"],
                        )
                    )
            if k in SYNC_OPS:
                barrier.wait(timeout=60)  # every worker has read: all commit at once
            if not actions:
                rec["outcome"] = "noop"
                results.append(rec)
                continue
            try:
                res = t.commit(actions)
                rec.update(
                    outcome="landed",
                    version=res.version,
                    attempts=res.attempts,
                    conflicts_checked=list(res.conflicts_checked),
                    txn_id=res.commit_info["txnId"],
                    post_commit_error=res.post_commit_error,
                )
            except CommitConflictError as e:
                rec.update(outcome="conflict", error=type(e).__name__, message=str(e))
            results.append(rec)
    except Exception:
        results.append({"worker": wid, "outcome": "crash", "trace": traceback.format_exc()})
    with open(out_path, "w") as f:
        json.dump(results, f)


def _run_workers(root: str, tmp_path, n_workers: int, n_ops: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_workers)
    procs, outs = [], []
    for w in range(n_workers):
        out = str(tmp_path / f"w{w}.json")
        outs.append(out)
        p = ctx.Process(target=_race_worker, args=(root, w, n_ops, barrier, out))
        p.start()
        procs.append(p)
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    results = []
    for out in outs:
        with open(out) as f:
            results += json.load(f)
    return results


@pytest.mark.timeout(300)
def test_concurrent_writers(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, configuration={"delta.checkpointInterval": "5"})
    results = _run_workers(root, tmp_path, N_WORKERS, N_OPS)

    crashes = [r for r in results if r["outcome"] == "crash"]
    assert not crashes, crashes[0]["trace"]
    landed = [r for r in results if r["outcome"] == "landed"]
    conflicts = [r for r in results if r["outcome"] == "conflict"]
    assert len(landed) + len(conflicts) + sum(r["outcome"] == "noop" for r in results) == N_WORKERS * N_OPS
    # blind appends and own-partition deletes never conflict; conflicts really happen
    assert all(r["kind"] == "delete_shared" for r in conflicts), conflicts
    assert len(conflicts) >= N_WORKERS - 1, conflicts
    # each landed commit was checked against every version it had not read, and only those
    for r in landed:
        assert r["conflicts_checked"] == list(range(r["read_version"] + 1, r["version"])), r
    by_k = {k: [r for r in results if r["k"] == k] for k in SYNC_OPS}
    for rs in by_k.values():
        assert len(rs) == N_WORKERS and len({r["read_version"] for r in rs}) == 1, rs  # they met
    # op 2 (shared blind appends) and op 3 (own-partition deletes): all land, though written over
    # each other (the i-th to land checked at least i earlier commits of the others)
    for k in (2, 3):
        assert all(r["outcome"] == "landed" for r in by_k[k]), by_k[k]
        checked = sorted(len(r["conflicts_checked"]) for r in by_k[k])
        assert all(c >= i for i, c in enumerate(checked)), (k, checked)
    assert sorted(len(r["conflicts_checked"]) for r in by_k[2]) == list(range(N_WORKERS))  # op 3 waits for all
    # op 5 (everyone deletes the same shared files they all read): exactly one lands, the rest conflict
    assert sorted(r["outcome"] for r in by_k[5]) == ["conflict"] * (N_WORKERS - 1) + ["landed"], by_k[5]
    assert {r["error"] for r in by_k[5] if r["outcome"] == "conflict"} <= {
        "ConcurrentDeleteReadError",
        "ConcurrentDeleteDeleteError",
    }
    assert {r["error"] for r in conflicts} <= {
        "ConcurrentAppendError",
        "ConcurrentDeleteReadError",
        "ConcurrentDeleteDeleteError",
    }
    assert all(r["post_commit_error"] is None for r in landed)

    # exactly once: versions 1..V each belong to one landed operation, with its txnId
    snap = snapshot(root)
    versions = sorted(r["version"] for r in landed)
    assert versions == list(range(1, snap.version + 1))
    for r in landed:
        assert commit_json(root, r["version"])[0]["commitInfo"]["txnId"] == r["txn_id"]

    # the rows are what landed
    expected = set()
    for r in sorted(landed, key=lambda r: r["version"]):
        expected |= set(r["added"])
        expected -= set(r["removed"])
    assert read_ids(root, snap) == sorted(expected)

    # delta-rs reads the same table (including our concurrently written checkpoints)
    import deltalake

    dt = deltalake.DeltaTable(root)
    assert dt.version() == snap.version
    assert sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == sorted(expected)
    assert snap.log_segment.checkpoint_version == (snap.version // 5) * 5
    print(
        f"\n{len(landed)} landed, {len(conflicts)} conflicts, "
        f"max attempts {max(r['attempts'] for r in landed)}, "
        f"rebased {sum(bool(r['conflicts_checked']) for r in landed)}, final version {snap.version}"
    )


@pytest.mark.timeout(300)
def test_blind_append_storm_all_land(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    ctx = mp.get_context("spawn")
    n_workers, n_ops = 4, 10
    barrier = ctx.Barrier(n_workers)
    procs = []
    for w in range(n_workers):
        p = ctx.Process(target=_append_worker, args=(root, w, n_ops, barrier))
        p.start()
        procs.append(p)
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    snap = snapshot(root)
    assert snap.version == n_workers * n_ops
    assert len(read_ids(root, snap)) == n_workers * n_ops
    ops = [commit_json(root, v)[0]["commitInfo"] for v in range(1, snap.version + 1)]
    assert all(ci["isBlindAppend"] for ci in ops)
    assert len({ci["txnId"] for ci in ops}) == n_workers * n_ops
    # they really raced: each worker's first append read version 0 and all were committed at once, so
    # n_workers - 1 of them (at least) landed over appends they had not read, and none conflicted
    assert sum(ci["readVersion"] == 0 for ci in ops) == n_workers
    rebased = [v for v, ci in enumerate(ops, start=1) if ci["readVersion"] < v - 1]
    assert len(rebased) >= n_workers - 1, [ci["readVersion"] for ci in ops]


def _append_worker(root: str, wid: int, n_ops: int, barrier) -> None:
    snapshot(root)
    for k in range(n_ops):
        t = txn(root)
        add = write_file(root, [wid * 1000 + k], f"w{wid}")
        if k == 0:
            barrier.wait(timeout=60)  # every worker has read version 0: all commit at once
        t.commit([add])  # a conflict raises: the worker exits non-zero


def _idempotent_worker(root: str, wid: int, barrier, out_path: str) -> None:
    t = txn(root, app_id="dag.task", app_version=1, operation="WRITE")
    duplicate = t.is_duplicate()
    add = write_file(root, [wid], "a")
    barrier.wait(timeout=60)  # every worker has read version 0 and found no duplicate: all commit at once
    if duplicate:
        res = {"outcome": "skipped-before", "version": None}
    else:
        try:
            r = t.commit([add])
            res = {"outcome": "skipped" if r.skipped else "landed", "version": r.version}
        except Exception as e:
            res = {"outcome": type(e).__name__, "version": None}
    with open(out_path, "w") as f:
        json.dump(res, f)


@pytest.mark.timeout(300)
def test_same_idempotent_write_from_many_processes_lands_once(tmp_path):
    """Airflow retries / duplicate runs of one (app_id, version): exactly one commit, others skipped."""
    root = str(tmp_path / "t")
    create_table(root)
    ctx = mp.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    outs = [str(tmp_path / f"i{w}.json") for w in range(n)]
    procs = [ctx.Process(target=_idempotent_worker, args=(root, w, barrier, outs[w])) for w in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    results = [json.load(open(o)) for o in outs]
    # all raced into commit (none saw the other's commit before): one lands, the others find it
    # while committing and skip, nothing conflicts
    assert sorted(r["outcome"] for r in results) == ["landed"] + ["skipped"] * (n - 1), results
    snap = snapshot(root)
    assert snap.version == 1 and snap.files.num_rows == 1
    assert snap.set_transactions["dag.task"].version == 1
