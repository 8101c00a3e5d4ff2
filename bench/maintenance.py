"""Maintenance bench: OPTIMIZE, Z-order, VACUUM and RESTORE, ours beside deltalake on hard-linked copies
of the same files (``python -m bench.maintenance [--quick] [--optimize-only]``; ``make bench`` runs it last).

Cases (issue 16, item 5): optimize 1,000 small files into few, and 600 small files in 3 partitions
(issue 23 item 8) (ours in process and in Spark ``local[2]``, where files of at most 64 MiB in all are
compacted by the driver's threads, as a user's task does); Z-order by two columns, then the files a point predicate on each column reads, before
and after (our skipping on our log; deltalake's Z-order timed on its copy); vacuum of a table with
10k removed files (ours full and lite, deltalake full); restore of a 100-commit table to version 50;
a clustered table (issue 34 item 2): the second OPTIMIZE after a 1% append, the bytes it rewrote beside
the table's size, beside deltalake's Z-order of the same rows (delta-rs does not cluster: re-ordering
after an append is a Z-order of the whole table there).
Medians of ``--reps`` runs after one untimed run each, engines alternating, each on a fresh copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from .merge import fresh_copy

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "maintenance"
RESULTS = HERE / "results"


def _cached_table(name: str, build) -> str:
    """``DATA/<name>/t``, built once by ``build(path)`` (a ``done`` marker says it is whole)."""
    path = DATA / name
    if not (path / "done").exists():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        build(str(path / "t"))
        (path / "done").write_text("ok")
    return str(path / "t")


def _small_files_table(n_files: int, rows: int) -> str:
    """A deltalake-written table of ``n_files`` appends of ``rows`` random rows each (cached)."""
    import deltalake
    import numpy as np
    import pyarrow as pa

    def build(table: str) -> None:
        rng = np.random.default_rng(11)
        for _ in range(n_files):
            data = pa.table(
                {"x": rng.integers(0, 1_000_000, rows), "y": rng.integers(0, 1_000_000, rows), "s": ["v"] * rows}
            )
            deltalake.write_deltalake(table, data, mode="append")

    return _cached_table(f"small_{n_files}_{rows}", build)


def _partitioned_small_files_table(n_files: int, rows: int, partitions: int = 3) -> str:
    """A deltalake-written table of ``n_files`` appends of ``rows`` rows, each into one of
    ``partitions`` partitions in turn (cached). Created empty first, so that the OPTIMIZE commit
    (version ``n_files + 1``) is a checkpoint version for neither engine: both do the same log work."""
    import deltalake
    import numpy as np
    import pyarrow as pa

    def build(table: str) -> None:
        rng = np.random.default_rng(13)
        schema = pa.schema([("x", pa.int64()), ("y", pa.int64()), ("s", pa.string()), ("p", pa.string())])
        deltalake.DeltaTable.create(table, schema, partition_by=["p"])
        for i in range(n_files):
            data = pa.table(
                {
                    "x": rng.integers(0, 1_000_000, rows),
                    "y": rng.integers(0, 1_000_000, rows),
                    "s": ["v"] * rows,
                    "p": [f"p{i % partitions}"] * rows,
                },
                schema=schema,
            )
            deltalake.write_deltalake(table, data, mode="append")

    return _cached_table(f"small_parts_{n_files}_{rows}_{partitions}", build)


def _removed_files_table(n_files: int) -> str:
    """A table whose ``n_files`` data files were all removed by one commit (their tombstones old)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.actions import AddFile
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    path = DATA / f"removed_{n_files}"
    if (path / "done").exists():
        return str(path / "t")
    shutil.rmtree(path, ignore_errors=True)
    root = str(path / "t")
    create_table(root, schema="id BIGINT")
    table = pa.table({"id": [1]})
    adds = []
    for i in range(n_files):
        rel = f"part-{i:05d}.parquet"
        pq.write_table(table, os.path.join(root, rel))
        adds.append(
            AddFile(
                path=rel,
                partition_values={},
                size=os.path.getsize(os.path.join(root, rel)),
                modification_time=0,
                data_change=True,
                stats='{"numRecords":1}',
            )
        )
    storage = storage_for(root)
    OptimisticTransaction(storage, root, load_snapshot(storage, root), operation="WRITE").commit(adds)
    snap = load_snapshot(storage, root)
    from airflow_delta_provider_apps.engine.commands.dml import removes_for

    old = int(time.time() * 1000) - 30 * 86_400_000
    OptimisticTransaction(storage, root, snap, operation="DELETE").commit(removes_for(snap.files, now_ms=old))
    past = time.time() - 30 * 86400
    for name in os.listdir(root):
        if name.endswith(".parquet"):
            os.utime(os.path.join(root, name), (past, past))
    (path / "done").write_text("ok")
    return root


def _rows_and_hash(table: str) -> tuple[int, str]:
    """A table's row count and a digest of its rows in any order, as deltalake reads it."""
    import hashlib

    import deltalake

    t = deltalake.DeltaTable(table).to_pyarrow_table()
    t = t.sort_by([(c, "ascending") for c in t.column_names])
    return t.num_rows, hashlib.sha256(repr(t.to_pydict()).encode()).hexdigest()[:16]


def _timed(cases: dict, reps: int) -> tuple[dict, dict]:
    """The data-plane bench's alternation, after one untimed run of each case (imports and first
    allocations are not what a maintenance run costs)."""
    from .dataplane import _alternating

    return _alternating(cases, reps, warm=True)


def run(quick: bool, reps: int, *, optimize_only: bool = False) -> list[dict]:
    """Every case (``optimize_only``: the two compactions only, as bench/one_machine.py takes them)."""
    import json

    import deltalake
    import numpy as np
    import pyarrow as pa

    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.expr import parse_predicate
    from airflow_delta_provider_apps.engine.expr.skipping import skip_files

    from . import dataplane as dp

    work = DATA / "work"
    results: list[dict] = []
    n_small, n_removed, n_commits = (100, 1000, 20) if quick else (1000, 10_000, 100)
    h: dict = {}

    def row(case, ours, rs, note):
        print(f"{case}: ours {ours:.3f} s, deltalake {rs:.3f} s ({note})", flush=True)
        results.append(
            {"case": case, "ours_s": ours, "deltalake_s": rs, "ratio": ours / rs if rs else None, "note": note}
        )

    spark = dp._session()

    def compaction(base: str, label: str) -> None:
        """OPTIMIZE of ``base``'s small files: ours in process and in Spark beside deltalake's compact."""
        cases = {
            "ours": (lambda: DeltaTable(None, h["o"]).optimize(), lambda: h.update(o=fresh_copy(base, work / "o"))),
            "spark": (
                lambda: DeltaTable.for_path(spark, h["s"]).optimize(),
                lambda: h.update(s=fresh_copy(base, work / "s")),
            ),
            "rs": (
                lambda: deltalake.DeltaTable(h["r"]).optimize.compact(),
                lambda: h.update(r=fresh_copy(base, work / "r")),
            ),
        }
        times, outs = _timed(cases, reps)
        m, r = outs["ours"], outs["rs"]
        # the rows after, and a digest of them, as deltalake reads each engine's table
        after = {k: _rows_and_hash(h[k]) for k in ("o", "s", "r")}
        assert after["o"] == after["s"] == after["r"], (label, after)
        note = f"{m['numRemovedFiles']} files into {m['numAddedFiles']} (deltalake: {r['numFilesRemoved']} into {r['numFilesAdded']}); {after['o'][0]} rows after, equal"
        row(f"optimize {label}, in process", times["ours"], times["rs"], note)
        row(f"optimize {label}, Spark local[2]", times["spark"], times["rs"], note)

    # ---- optimize 1,000 small files; 600 small files in 3 partitions (the shape of issue 23 item 8)
    base = _small_files_table(n_small, 200)
    DeltaTable.for_path(spark, fresh_copy(base, work / "warm")).optimize()  # Spark's Python workers started
    compaction(base, f"{n_small} small files")
    n_parts_files = 60 if quick else 600
    compaction(_partitioned_small_files_table(n_parts_files, 200), f"{n_parts_files} small files in 3 partitions")
    if optimize_only:
        spark.stop()
        return results

    # ---- z-order by (x, y): files a point predicate reads, before and after
    def reads(root, pred):
        s = DeltaTable(None, root).snapshot()
        return skip_files(s.files, s.schema, [], parse_predicate(pred, s.schema)).files.num_rows

    compacted = fresh_copy(base, work / "zbase")
    DeltaTable(None, compacted).optimize(target_size=1 << 20)  # many ~1 MB files spanning every value
    before = (reads(compacted, "x = 500000"), reads(compacted, "y = 500000"))
    cases = {
        "ours": (
            lambda: DeltaTable(None, h["o"]).optimize(z_order_by=["x", "y"], target_size=1 << 20),
            lambda: h.update(o=fresh_copy(compacted, work / "o")),
        ),
        "rs": (
            lambda: deltalake.DeltaTable(h["r"]).optimize.z_order(["x", "y"], target_size=1 << 20),
            lambda: h.update(r=fresh_copy(compacted, work / "r")),
        ),
    }
    times, outs = _timed(cases, reps)
    after = (reads(h["o"], "x = 500000"), reads(h["o"], "y = 500000"))
    total = DeltaTable(None, h["o"]).snapshot().files.num_rows
    row(
        "z-order by x, y",
        times["ours"],
        times["rs"],
        f"a point predicate reads {before[0]} then {after[0]} files on x, {before[1]} then {after[1]} on y (of {total})",
    )

    # ---- a clustered table: the second OPTIMIZE after a small (1%) append rewrites the appended files
    rows = n_small * 200
    late = pa.table(
        {
            "x": np.random.default_rng(5).integers(0, 1_000_000, rows // 100),
            "y": np.arange(rows // 100),
            "s": ["v"] * (rows // 100),
        }
    )
    clustered, plain = fresh_copy(base, work / "cbase"), fresh_copy(base, work / "pbase")
    DeltaTable(None, clustered).cluster_by(["x", "y"])
    first = DeltaTable(None, clustered).optimize(target_size=1 << 20)  # the first OPTIMIZE clusters every file
    DeltaTable(None, plain).optimize(z_order_by=["x", "y"], target_size=1 << 20)  # the same rows, Z-ordered
    for t in (clustered, plain):
        append_arrow(t, late)
    cases = {
        "ours": (
            lambda: DeltaTable(None, h["o"]).optimize(target_size=1 << 20),
            lambda: h.update(o=fresh_copy(clustered, work / "o")),
        ),
        "rs": (
            lambda: deltalake.DeltaTable(h["r"]).optimize.z_order(["x", "y"], target_size=1 << 20),
            lambda: h.update(r=fresh_copy(plain, work / "r")),
        ),
    }
    times, outs = _timed(cases, reps)
    size = DeltaTable(None, h["o"]).detail()["size_in_bytes"]
    ours_b, rs_b = outs["ours"]["numRemovedBytes"], json.loads(outs["rs"]["filesRemoved"])["totalSize"]
    row(
        "clustered table: 2nd OPTIMIZE after a 1% append",
        times["ours"],
        times["rs"],
        f"first OPTIMIZE rewrote {first['numRemovedBytes'] / 1e3:.0f} kB; the second {ours_b / 1e3:.0f} kB of "
        f"{size / 1e3:.0f} kB ({100 * ours_b / size:.1f}%: the appended files; "
        f"{outs['ours']['num_files_already_clustered']} files kept); deltalake's Z-order rewrote {rs_b / 1e3:.0f} kB",
    )

    # ---- vacuum of 10k removed files
    removed = _removed_files_table(n_removed)
    for mode in ("full", "lite"):
        cases = {
            "ours": (
                lambda mode=mode: DeltaTable(None, h["o"]).vacuum(0, enforce_retention_duration=False, mode=mode),
                lambda: h.update(o=fresh_copy(removed, work / "o")),
            ),
            "rs": (
                lambda: deltalake.DeltaTable(h["r"]).vacuum(
                    retention_hours=0, enforce_retention_duration=False, dry_run=False
                ),
                lambda: h.update(r=fresh_copy(removed, work / "r")),
            ),
        }
        times, outs = _timed(cases, reps)
        row(
            f"vacuum {n_removed} removed files, {mode}",
            times["ours"],
            times["rs"],
            f"ours deleted {outs['ours']['numDeletedFiles']}, deltalake {len(outs['rs'])}",
        )

    # ---- restore of a 100-commit table
    commits = _small_files_table(n_commits, 50)
    cases = {
        "ours": (
            lambda: DeltaTable(None, h["o"]).restore(version=n_commits // 2),
            lambda: h.update(o=fresh_copy(commits, work / "o")),
        ),
        "rs": (
            lambda: deltalake.DeltaTable(h["r"]).restore(n_commits // 2),
            lambda: h.update(r=fresh_copy(commits, work / "r")),
        ),
    }
    times, outs = _timed(cases, reps)
    row(
        f"restore a {n_commits}-commit table to version {n_commits // 2}",
        times["ours"],
        times["rs"],
        f"{outs['ours']['numRemovedFiles']} files removed",
    )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return results


def save(results: list[dict], reps: int, out: Path) -> None:
    import deltalake

    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Maintenance bench (`python -m bench.maintenance`)",
        "",
        f"deltalake {deltalake.__version__}; median of {reps}, engines alternating, each on a fresh hard-linked copy "
        f"of the same deltalake-written files; load average at the end {os.getloadavg()[0]:.1f}.",
        "",
        "| case | ours | deltalake | ours / deltalake | note |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['case']} | {r['ours_s']:.3f} s | {r['deltalake_s']:.3f} s | {r['ratio']:.2f}x | {r['note']} |"
        )
    (out / "maintenance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small tables, one repetition")
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    p.add_argument(
        "--optimize-only", action="store_true", help="the two compactions only (results in bench/data/maintenance/)"
    )
    a = p.parse_args(argv)
    reps = 1 if a.quick else a.reps
    results = run(a.quick, reps, optimize_only=a.optimize_only)
    save(results, reps, DATA / "results-quick" if a.quick else DATA if a.optimize_only else RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
