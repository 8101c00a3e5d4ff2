"""The PySpark data source bench (issue 41 item 1): ``spark.read.format("delta")`` through
``airflow_delta_provider_apps.datasource`` beside Spark's own parquet scan of the very same files, and a
write through it beside our own append (``python -m bench.datasource [--rows N] [--reps N]``).

The table: ``--rows`` rows (id long, k long, v double, s string) in 8 files of consecutive ids,
written by our append (no deletion vectors: Spark's parquet scan reads the same rows). Cases, each
the median of ``--reps`` runs after one untimed run, in one local[2] session:

* full scan: a hash of every column summed (every value read), source vs ``spark.read.parquet``;
* selective scan: the same over ``id`` in one file's range: the source skips 7 files by stats on the
  driver; Spark's parquet scan prunes row groups by the same footers;
* write: the rows appended through the source vs ``DeltaTable.append`` of the same DataFrame.

The source pays for Python workers: every batch is decoded by pyarrow in a Python worker and crosses
to the JVM as Arrow (Spark's parquet scan decodes in the JVM), and every run plans in a Python worker
(the snapshot loaded, the files dealt): the ratio's main terms. Each run builds a fresh DataFrame: a
reused one measured the source at a fraction of the parquet scan, which was not a real read.
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


def _timed(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--reps", type=int, default=3)
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
            out.append((name, "spark.read.parquet", _timed(a, args.reps), _timed(b, args.reps)))
        data = rows.repartition(2).cache()
        data.count()
        targets = iter(range(1000))

        def via_source():
            data.write.format("delta").mode("append").save(str(work / f"w{next(targets)}"))

        def via_append():
            p = str(work / f"w{next(targets)}")
            DeltaTable.create(spark, p, schema="id BIGINT, k BIGINT, v DOUBLE, s STRING")
            DeltaTable.for_path(spark, p).append(data)

        out.append(
            ("write (new table)", "DeltaTable.append", _timed(via_source, args.reps), _timed(via_append, args.reps))
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"# Data source bench: {args.rows:,} rows, 8 files, local[2], median of {args.reps}",
        "",
        "| case | source (s) | beside | that (s) | ratio |",
        "|---|---:|---|---:|---:|",
        *[f"| {n} | {a:.2f} | {what} | {b:.2f} | {a / b:.2f}x |" for n, what, a, b in out],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "datasource.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
