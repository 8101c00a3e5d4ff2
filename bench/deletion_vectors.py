"""Deletion-vector bench: DELETE and UPDATE that mark rows (merge-on-read) beside the same commands
rewriting files (copy-on-write) and beside deltalake (which rewrites), on copies of the same
deltalake-written files (``python -m bench.deletion_vectors [--quick] [--reps N]``; ``make bench``
runs it after the maintenance bench).

The table: 5M rows, ids in files of 250k consecutive ids (``bench.merge.clustered``), so a point
predicate on ``id`` selects one file by its stats and ``n = id % 100`` predicates hit every file.
Ours runs in this process (the engine's thread pool, no Spark): the DV copy is the same files with
``delta.enableDeletionVectors=true`` committed on top. Cases: a point UPDATE (1 row), an UPDATE of
0.1% of the rows (every file), a DELETE of 1% (every file), and a full read of the table after the
point UPDATE and after that DELETE, through its deletion vectors against the copy-on-write result
(same live rows). The same
commands on a copy recording the change data feed (``delta.enableChangeDataFeed=true``), ours beside
deltalake's (which writes change files too); and an append of the table's rows with a CHECK constraint
and a generated column beside the plain append, ours beside deltalake's (which enforces both). Medians
of ``--reps`` runs after one untimed run each, each run on a fresh hard-linked copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from .merge import clustered, fresh_copy

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "deletion_vectors"
RESULTS = HERE / "results"

CASES = [
    ("point UPDATE (1 row)", "update", "id = 2500001"),
    ("UPDATE 0.1% (5k rows, every file)", "update", "id % 1000 = 7"),
    ("DELETE 1% (50k rows, every file)", "delete", "n = 3"),
]


def enable_deletion_vectors(root: str) -> None:
    """Commit protocol (3,7) with the deletionVectors feature and the property on our copy (what
    ``ALTER TABLE ... SET TBLPROPERTIES ('delta.enableDeletionVectors'=true)`` commits)."""
    import dataclasses

    from airflow_delta_provider_apps.engine.actions import Protocol
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    snap = load_snapshot(storage_for(root), root)
    txn = OptimisticTransaction(snap.storage, root, snap, operation="SET TBLPROPERTIES")
    conf = {**(snap.metadata.configuration or {}), "delta.enableDeletionVectors": "true"}
    txn.update_metadata(dataclasses.replace(snap.metadata, configuration=conf))
    features = ["deletionVectors", "appendOnly", "invariants"]
    txn.update_protocol(Protocol(3, 7, reader_features=["deletionVectors"], writer_features=features))
    txn.commit([])


def _set(root: str, properties: dict) -> None:
    from airflow_delta_provider_apps.engine import DeltaTable

    DeltaTable.for_path(None, root).set_properties(properties)


def _ours(root: str, kind: str, predicate: str) -> dict:
    from airflow_delta_provider_apps.engine import DeltaTable

    t = DeltaTable.for_path(None, root)
    if kind == "update":
        return t.update({"v": "v + 1"}, predicate)
    return t.delete(predicate)


def _deltalake(root: str, kind: str, predicate: str) -> dict:
    import deltalake

    dt = deltalake.DeltaTable(root)
    if kind == "update":
        return dt.update(updates={"v": "v + 1"}, predicate=predicate)
    return dt.delete(predicate)


def _read(root: str) -> int:
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    return read_snapshot_table(DeltaTable.for_path(None, root).snapshot()).num_rows


def _timed(fn, reps: int) -> tuple[float, object]:
    fn()  # untimed: caches, imports, thread pools
    times, out = [], None
    for _ in range(reps):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def run(quick: bool, reps: int) -> list[dict]:
    source = clustered(1_000_000 if quick else 5_000_000)
    plain_base = fresh_copy(source, DATA / "plain")
    dv_base = fresh_copy(source, DATA / "dv")
    enable_deletion_vectors(dv_base)
    cdf_base = fresh_copy(source, DATA / "cdf")
    _set(cdf_base, {"delta.enableChangeDataFeed": "true"})
    work = DATA / "work"
    results = []
    for label, kind, predicate in CASES:
        row = {"case": label}
        for name, base, engine in (
            ("ours_dv", dv_base, _ours),
            ("ours_cow", plain_base, _ours),
            ("deltalake", plain_base, _deltalake),
            ("ours_cdf", cdf_base, _ours),
            ("deltalake_cdf", cdf_base, _deltalake),
        ):
            samples = []
            for rep in range(reps + 1):  # the first run is untimed
                root = fresh_copy(base, work / name)
                started = time.perf_counter()
                engine(root, kind, predicate)  # the command only, not the copy
                if rep:
                    samples.append(time.perf_counter() - started)
            row[name] = statistics.median(samples)
        results.append(row)
    # reading the table after the point UPDATE and after the 1% DELETE: through their deletion vectors
    # vs the files rewritten
    for label, kind, predicate in (CASES[0], CASES[2]):
        dv_after = fresh_copy(dv_base, work / "read_dv")
        _ours(dv_after, kind, predicate)
        cow_after = fresh_copy(plain_base, work / "read_cow")
        _ours(cow_after, kind, predicate)
        dv_s, dv_rows = _timed(lambda root=dv_after: _read(root), reps)
        cow_s, cow_rows = _timed(lambda root=cow_after: _read(root), reps)
        assert dv_rows == cow_rows, (dv_rows, cow_rows)
        what = label.split(" (")[0]
        results.append({"case": f"full read after the {what} ({dv_rows:,} rows)", "read_dv": dv_s, "read_cow": cow_s})
    results.append(_append_with_rules(source, work, reps))
    shutil.rmtree(work, ignore_errors=True)
    return results


RULES_DDL = "id BIGINT, v DOUBLE, s STRING, n BIGINT, n2 BIGINT GENERATED ALWAYS AS (n * 2)"


def _append_with_rules(source: str, work: Path, reps: int) -> dict:
    """Appending the table's rows (Arrow, in process) to an empty table: plain, and with a CHECK
    constraint and a generated column; deltalake the same (it enforces both)."""
    import deltalake
    import pyarrow as pa

    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    data = deltalake.DeltaTable(source).to_pyarrow_table().select(["id", "v", "s", "n"])
    ruled = data.append_column("n2", pa.nulls(data.num_rows, pa.int64()))
    theirs = data.append_column("n2", pa.compute.multiply(data.column("n"), 2))
    check = {"delta.constraints.positive_id": "id >= 0"}

    def ours(rules: bool):
        root = str(work / "rules" / str(time.perf_counter_ns()))
        if rules:
            DeltaTable.create(None, root, schema=RULES_DDL, properties=check)
            append_arrow(root, ruled)
        else:
            DeltaTable.create(None, root, schema=RULES_DDL.split(", n2")[0])
            append_arrow(root, data)

    def dl(rules: bool):
        root = str(work / "rules" / str(time.perf_counter_ns()))
        if rules:
            dt = deltalake.DeltaTable.create(root, schema=theirs.schema)
            dt.alter.add_constraint(check)
            deltalake.write_deltalake(root, theirs, mode="append")  # deltalake checks, does not compute
        else:
            deltalake.write_deltalake(root, data, mode="append")

    row = {"case": f"append {data.num_rows:,} rows"}
    for name, fn in (("ours_plain", lambda: ours(False)), ("ours_rules", lambda: ours(True))):
        row[name] = _timed(fn, reps)[0]
    for name, fn in (("deltalake_plain", lambda: dl(False)), ("deltalake_rules", lambda: dl(True))):
        row[name] = _timed(fn, reps)[0]
    return row


def save(results: list[dict], reps: int, out: Path, rows: int) -> None:
    import deltalake

    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Deletion-vector bench (`python -m bench.deletion_vectors`)",
        "",
        f"{rows:,} rows in files of 250k consecutive ids, written by deltalake {deltalake.__version__}; ours in "
        f"process (no Spark), median of {reps} after one untimed run, each on a fresh hard-linked copy; "
        f"load average at the end {os.getloadavg()[0]:.1f}.",
        "",
        "| case | ours, deletion vectors | ours, rewriting files | deltalake (rewrites) "
        "| DV vs rewriting | DV vs deltalake |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "read_dv" in r or "ours_plain" in r:
            continue
        lines.append(
            f"| {r['case']} | {r['ours_dv']:.3f} s | {r['ours_cow']:.3f} s | {r['deltalake']:.3f} s "
            f"| {r['ours_cow'] / r['ours_dv']:.1f}x faster | {r['deltalake'] / r['ours_dv']:.1f}x faster |"
        )
    lines += ["", "| read | with deletion vectors | rewritten files | DV / rewritten |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r['case']} | {r['read_dv']:.3f} s | {r['read_cow']:.3f} s | {r['read_dv'] / r['read_cow']:.2f}x |"
        for r in results
        if "read_dv" in r
    ]
    lines += [
        "",
        "Recording the change data feed (copy-on-write; both write change files):",
        "",
        "| case | ours, CDF | ours, no CDF | deltalake, CDF | CDF cost (ours) | ours vs deltalake |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "ours_cdf" in r:
            lines.append(
                f"| {r['case']} | {r['ours_cdf']:.3f} s | {r['ours_cow']:.3f} s | {r['deltalake_cdf']:.3f} s "
                f"| {r['ours_cdf'] / r['ours_cow']:.2f}x | {r['deltalake_cdf'] / r['ours_cdf']:.1f}x faster |"
            )
    for r in results:
        if "ours_plain" in r:
            lines += [
                "",
                "CHECK constraint (`id >= 0`) and generated column (`n * 2`; ours computes it, deltalake is given it):",
                "",
                "| case | ours, plain | ours, with both | deltalake, plain | deltalake, with both | cost (ours) "
                "| ours vs deltalake |",
                "|---|---:|---:|---:|---:|---:|---:|",
                f"| {r['case']} | {r['ours_plain']:.3f} s | {r['ours_rules']:.3f} s | {r['deltalake_plain']:.3f} s "
                f"| {r['deltalake_rules']:.3f} s | {r['ours_rules'] / r['ours_plain']:.2f}x "
                f"| {r['deltalake_rules'] / r['ours_rules']:.1f}x faster |",
            ]
    (out / "deletion_vectors.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1M rows, one repetition")
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    a = p.parse_args(argv)
    reps = 1 if a.quick else a.reps
    results = run(a.quick, reps)
    save(results, reps, DATA / "results-quick" if a.quick else RESULTS, 1_000_000 if a.quick else 5_000_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
