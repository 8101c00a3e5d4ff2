"""The PySpark data source bench (issue 41 item 1): ``spark.read.format("delta")`` through
``airflow_delta_provider_apps.datasource`` beside Spark's own parquet scan of the very same files, and a
write through it beside our own append (``python -m bench.datasource [--rows N] [--reps N]``).

The table: ``--rows`` rows (id long, k long, v double, s string) in 8 files of consecutive ids,
written by our append (no deletion vectors: Spark's parquet scan reads the same rows). Cases, each
the median of ``--reps`` runs after one untimed run (the two sides in turns), in one local[2] session:

* full scan: a hash of every column summed (every value read), source vs ``spark.read.parquet``;
* selective scan: the same over ``id`` in one file's range: the source skips 7 files by stats on the
  driver; Spark's parquet scan prunes row groups by the same footers;
* write: the rows appended through the source vs ``DeltaTable.append`` of the same DataFrame.

The source pays for Python workers: every batch is decoded by pyarrow in a Python worker and crosses
to the JVM as Arrow (Spark's parquet scan decodes in the JVM), and every run plans in two Python
workers (the schema at analysis, then the snapshot loaded once and the files dealt, one partition per
core). Measured on 4M rows (local[2]): the Python workers spend ~0.37 s of CPU (pyarrow's decode
~0.18 s of it, the engine's own work on top of a bare ``iter_batches`` ~0.02 s, the rest the Arrow
stream to the JVM), and the JVM about what Spark's own scan spends; a bare ``pyarrow`` data source
with no engine measures the same. Each run builds a fresh DataFrame: a reused one keeps its first
physical plan in classic Spark, which is not a real read. Beside the wall time the table gives the
CPU time of the JVM and its Python workers, steadier when other work shares the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_seconds() -> float | None:
    """CPU time (user + system, reaped children included) of this process's descendants: the JVM and
    its Python workers. Linux only (None elsewhere). On a shared machine it is steadier than the wall
    time, which other load stretches."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        children: dict[int, list[tuple[int, int]]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:  # gone meanwhile
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            children.setdefault(int(fields[1]), []).append((int(pid), sum(int(x) for x in fields[11:15])))
    except (OSError, ValueError, AttributeError):
        return None
    total, stack = 0, [os.getpid()]
    while stack:
        for child, ticks in children.get(stack.pop(), []):
            total += ticks
            stack.append(child)
    return total / tick


def _paired(a, b, reps: int) -> tuple[tuple[float, float | None], tuple[float, float | None]]:
    """Median wall and CPU seconds (see :func:`_cpu_seconds`) of ``a`` and of ``b``, run in turns
    (``reps`` each, after one untimed run each), so both sides see the same load on a shared machine."""
    runs: dict = {a: ([], []), b: ([], [])}
    a(), b()
    for _ in range(reps):
        for fn, (times, cpus) in runs.items():
            c, t = _cpu_seconds(), time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
            after = _cpu_seconds()
            if c is not None and after is not None:
                cpus.append(after - c)
    return tuple((statistics.median(t), statistics.median(c) if c else None) for t, c in runs.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from airflow_delta_provider_apps.datasource import register
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.spark.session import build_session

    spark = build_session(app_name="bench-datasource", master="local[2]")
    register(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-ds-"))
    try:
        root = str(work / "t")
        per = args.rows // 8
        rows = spark.range(args.rows).selectExpr(
            "id", "id % 97 AS k", "CAST(id AS DOUBLE) * 0.5 AS v", "concat('s', id) AS s"
        )
        DeltaTable.create(spark, root, schema="id BIGINT, k BIGINT, v DOUBLE, s STRING")
        for i in range(8):
            DeltaTable.for_path(spark, root).append(
                rows.filter(f"id >= {i * per} AND id < {(i + 1) * per}").coalesce(1)
            )
        parquet = [str(p) for p in Path(root).glob("*.parquet")]
        digest = F.sum(F.hash("id", "k", "v", "s"))
        lo = 3 * per + per // 2
        selective = f"id >= {lo} AND id < {lo + 1000}"

        def scan(load, cond=None):  # a fresh DataFrame per run: planning (the driver's snapshot) is timed too
            return lambda: (load().filter(cond) if cond else load()).agg(digest).collect()

        def source():
            return spark.read.format("delta").load(root)

        def native():
            return spark.read.parquet(*parquet)

        assert scan(source)() == scan(native)() and scan(source, selective)() == scan(native, selective)()
        out = []
        for name, a, b in [
            ("full scan", scan(source), scan(native)),
            ("selective scan (1 of 8 files)", scan(source, selective), scan(native, selective)),
        ]:
            out.append((name, "spark.read.parquet", *_paired(a, b, args.reps)))
        data = rows.repartition(2).cache()
        data.count()
        targets = iter(range(1000))

        def via_source():
            data.write.format("delta").mode("append").save(str(work / f"w{next(targets)}"))

        def via_append():
            p = str(work / f"w{next(targets)}")
            DeltaTable.create(spark, p, schema="id BIGINT, k BIGINT, v DOUBLE, s STRING")
            DeltaTable.for_path(spark, p).append(data)

        out.append(("write (new table)", "DeltaTable.append", *_paired(via_source, via_append, args.reps)))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def cpu(a, b):
        return f"{a[1]:.2f} / {b[1]:.2f} = {a[1] / b[1]:.2f}x" if a[1] and b[1] else "n/a"

    lines = [
        f"# Data source bench: {args.rows:,} rows, 8 files, local[2], median of {args.reps}",
        "",
        "| case | source (s) | beside | that (s) | ratio | CPU s, source / that |",
        "|---|---:|---|---:|---:|---:|",
        *[f"| {n} | {a[0]:.2f} | {what} | {b[0]:.2f} | {a[0] / b[0]:.2f}x | {cpu(a, b)} |" for n, what, a, b in out],
        "",
        "CPU: the JVM's and the Python workers' user + system time (on a shared machine steadier than "
        "the wall time). The source's extra is the Python worker: it decodes the Parquet pages (pyarrow) "
        "and streams the batches to the JVM as Arrow, which then turns them into rows; Spark's own scan "
        "decodes in the JVM.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "datasource.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
