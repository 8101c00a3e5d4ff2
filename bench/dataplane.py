"""Data-plane bench: scans, append and DML, ours vs deltalake (delta-rs) vs Spark's native parquet.

``python -m bench.dataplane [--rows N] [--reps R]`` (``make bench`` runs it after the log-plane cases).
One partitioned table (``dt``: 20 partitions; id, v, s, ts, n) of ``--rows`` rows (default 5M) is
written three ways from the same rows: by our engine, by deltalake, and as plain parquet for Spark's
own reader. Every case runs in ONE warm local[2] SparkSession, ``--reps`` times (median reported).
Writes and DML run on a fresh copy of a table each time (the copy is not timed). The DML cases by a
data predicate run both engines on copies of the SAME files (the deltalake-written table), ours
through Spark and in process, the engines alternating within each repetition, and print where our
time goes (open / plan / rewrite: read, evaluate, write / commit). After each DML the row counts of
ours and deltalake are compared, so a fast wrong answer fails the run.

Spark-native rows are what the same job costs on plain parquet without Delta (e.g. a delete of 1% is
"read everything, filter, write everything"): the floor a Delta engine on Spark is compared with.
Results: ``bench/results/dataplane.md`` and ``.csv``; tests never assert a time.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "dataplane"
RESULTS = HERE / "results"
DAYS = 20
COLUMNS = ["id", "dt", "v", "s", "ts", "n"]


def _session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from airflow_delta_provider_apps.engine.spark.session import build_session

    spark = build_session(app_name="bench-dataplane", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _rows_df(spark, start: int, count: int):
    from pyspark.sql import functions as F

    r = spark.range(start, start + count)
    return r.select(
        F.col("id"),
        F.expr(f"date_add(DATE '2026-01-01', CAST(id % {DAYS} AS INT))").alias("dt"),
        (F.abs(F.hash("id")) % 1000000 / 1000000.0).alias("v"),
        F.concat(F.lit("s"), (F.col("id") % 1000).cast("string")).alias("s"),
        F.expr("timestamp_seconds(1767225600 + id)").alias("ts"),
        (F.col("id") % 100).cast("int").alias("n"),
    )


def _timed(fn, reps: int, setup=None) -> tuple[float, object]:
    times, out = [], None
    for _ in range(reps):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _alternating(cases: dict, reps: int, *, warm: bool = False) -> tuple[dict, dict]:
    """Median seconds per case, the cases alternating within each repetition (the first one moves
    each time) so that all see the same background load; a case is ``(fn, setup)``, setup untimed;
    ``warm``: one untimed run of each first."""
    names = list(cases)
    times: dict[str, list[float]] = {k: [] for k in names}
    outs: dict = {}
    for k in names if warm else ():
        cases[k][1]()
        cases[k][0]()
    for i in range(reps):
        for k in names[i % len(names) :] + names[: i % len(names)]:
            fn, setup = cases[k]
            setup()
            t0 = time.perf_counter()
            outs[k] = fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}, outs


def _rs_dml(dt, command: str, args: tuple):
    if command == "delete":
        return dt.delete(args[0])
    return dt.update(updates=args[0], predicate=args[1])


def _dml_breakdown(spark, path: str, command: str, args: tuple, where: str) -> str:
    """One more (untimed for the table) run of our DML on ``path``, split: opening the snapshot,
    planning (parse, transaction, skipping), the rewrite (its wall time, and the work of the files
    summed: parquet read, evaluate, parquet write with stats), the commit."""
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine import rewrite as rw
    from airflow_delta_provider_apps.engine.commands import dml
    from airflow_delta_provider_apps.engine.rewrite.common import files_bytes
    from airflow_delta_provider_apps.engine.table import plane_for

    t0 = time.perf_counter()
    snap = DeltaTable.for_path(spark, path).snapshot()
    t1 = time.perf_counter()
    with rw.record_outcomes() as got:
        res = getattr(dml, command)(snap, *args, plane=plane_for(spark))
    t2 = time.perf_counter()
    m = res.metrics
    phase = m.scan_time_ms + m.rewrite_time_ms  # plan start .. outcomes applied
    read, ev, write = (sum(getattr(o, k) for o in got) for k in ("read_ms", "eval_ms", "write_ms"))
    cores = spark.sparkContext.defaultParallelism if spark is not None else (os.cpu_count() or 1)
    # whether the driver's threads did the work (as on this local master), not Spark tasks
    threads = spark is None or plane_for(spark).in_driver(files_bytes(snap.files))
    ideal = (read + ev + write) / max(1, min(cores, len(got)))
    one = sum(o.one_pass for o in got)
    reads = sum(o.reads for o in got)
    total = int((t2 - t0) * 1000)
    return (
        f"{where}: {total} ms = open {int((t1 - t0) * 1000)} + plan {max(0, phase - got.wall_ms)} + "
        f"rewrite {got.wall_ms} + commit {max(0, m.execution_time_ms - phase)} (+ rest); rewrite work over "
        f"{len(got)} files ({one} one pass, {reads} file reads), summed: read {read} / evaluate {ev} / "
        f"write {write} ms, i.e. {ideal:.0f} ms on {min(cores, len(got))} cores; "
        f"{'Spark job' if spark is not None and not threads else 'pool'} overhead ~{max(0, got.wall_ms - ideal):.0f} ms"
    )


def build(spark, rows: int) -> dict:
    """Write the same rows three ways (cached by row count)."""
    import deltalake
    import pyarrow.dataset as ds

    from airflow_delta_provider_apps.engine import DeltaTable

    base = DATA / f"rows_{rows}"
    paths = {"native": base / "native", "ours": base / "ours", "rs": base / "deltalake"}
    if (base / "done").exists():
        return {k: str(v) for k, v in paths.items()}
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    df = _rows_df(spark, 0, rows).repartition(4)
    df.write.partitionBy("dt").parquet(str(paths["native"]))
    t = DeltaTable.create(spark, str(paths["ours"]), schema=df.schema.simpleString()[7:-1], partition_by=["dt"])
    t.append(spark.read.parquet(str(paths["native"])).select(*COLUMNS))
    arrow = ds.dataset(str(paths["native"]), format="parquet", partitioning="hive").to_table()
    arrow = arrow.select(COLUMNS).cast(_rs_schema(arrow.select(COLUMNS).schema))
    deltalake.write_deltalake(str(paths["rs"]), arrow, partition_by=["dt"])
    (base / "done").write_text("ok")
    return {k: str(v) for k, v in paths.items()}


def _rs_schema(schema):
    import pyarrow as pa

    fields = []
    for f in schema:
        t = f.type
        if f.name == "dt":
            t = pa.date32()
        if pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC")
        fields.append(pa.field(f.name, t))
    return pa.schema(fields)


def run(rows: int, reps: int, *, scans_only: bool = False) -> list[dict]:
    """Every case (``scans_only``: the scans only, as bench/one_machine.py takes them)."""
    import deltalake
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from airflow_delta_provider_apps.engine import DeltaTable

    spark = _session()
    paths = build(spark, rows)
    work = DATA / "work"
    results: list[dict] = []

    def row(case, ours, rs=None, native=None, note=""):
        results.append({"case": case, "ours_s": ours, "deltalake_s": rs, "spark_native_s": native, "note": note})
        fmt = lambda x: f"{x:8.2f}" if isinstance(x, float) else f"{'-':>8}"  # noqa: E731
        print(f"{case:<38} ours {fmt(ours)}  deltalake {fmt(rs)}  spark-native {fmt(native)}  {note}", flush=True)

    agg = F.sum(F.hash(*COLUMNS))
    ours = DeltaTable.for_path(spark, paths["ours"])
    native = lambda: spark.read.parquet(paths["native"])  # noqa: E731

    # ---- scans
    o, _ = _timed(lambda: ours.to_df().agg(agg).collect(), reps)
    n, _ = _timed(lambda: native().agg(agg).collect(), reps)
    r, _ = _timed(lambda: deltalake.DeltaTable(paths["rs"]).to_pyarrow_table(), reps)
    row("full scan (hash of every column)", o, r, n, "deltalake: read all to Arrow")
    pred = "v < 0.01"
    o, oc = _timed(lambda: ours.to_df(predicate=pred).count(), reps)
    n, nc = _timed(lambda: native().filter(pred).count(), reps)
    r, rc = _timed(
        lambda: deltalake.DeltaTable(paths["rs"]).to_pyarrow_dataset().to_table(filter=pc.field("v") < 0.01).num_rows,
        reps,
    )
    assert oc == nc == rc, (oc, nc, rc)
    row("filtered scan, v < 0.01 (~1%)", o, r, n, f"{oc} rows")
    o, oc = _timed(lambda: ours.to_df(predicate="dt = DATE '2026-01-05'").count(), reps)
    n, nc = _timed(lambda: native().filter("dt = DATE '2026-01-05'").count(), reps)
    assert oc == nc
    row("filtered scan, one partition", o, None, n, f"{oc} rows")
    if scans_only:
        spark.stop()
        return results

    # ---- writes and DML on fresh copies
    def fresh(kind, name=None):
        dst = work / (name or kind)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(paths[kind], dst)
        return str(dst)

    extra = _rows_df(spark, rows, max(1, rows // 5)).cache()
    extra.count()
    extra_arrow = extra.toArrow().select(COLUMNS)
    extra_arrow = extra_arrow.cast(_rs_schema(extra_arrow.schema))
    cases = {}

    def ours_case(fn):
        holder = {}
        t, out = _timed(
            lambda: fn(DeltaTable.for_path(spark, holder["p"])), reps, lambda: holder.update(p=fresh("ours"))
        )
        return t, out, holder

    def rs_case(fn):
        holder = {}
        t, out = _timed(lambda: fn(deltalake.DeltaTable(holder["p"])), reps, lambda: holder.update(p=fresh("rs")))
        return t, out, holder

    def native_case(fn):
        holder = {}
        t, out = _timed(lambda: fn(holder["p"]), reps, lambda: holder.update(p=fresh("native")))
        return t, out

    def counts(h_ours, h_rs):
        a = spark.read.format("parquet")  # noqa: F841 (session warm)
        c_ours = DeltaTable.for_path(spark, h_ours["p"]).to_df().count()
        c_rs = deltalake.DeltaTable(h_rs["p"]).to_pyarrow_dataset().count_rows()
        assert c_ours == c_rs, (c_ours, c_rs)
        return c_ours

    o, _, ho = ours_case(lambda t: t.append(extra))
    r, _, hr = rs_case(lambda d: deltalake.write_deltalake(d, extra_arrow, mode="append"))
    n, _ = native_case(lambda p: extra.write.mode("append").partitionBy("dt").parquet(p))
    row(f"append {extra_arrow.num_rows} rows", o, r, n, f"{counts(ho, hr)} rows after")
    # the table's own size appended again, read from parquet: ours and Spark's partitioned write alternate
    big = spark.read.parquet(paths["native"]).select(*COLUMNS)
    held: dict = {}
    t_big, _ = _alternating(
        {
            "ours": (lambda: DeltaTable.for_path(spark, held["o"]).append(big), lambda: held.update(o=fresh("ours"))),
            "native": (
                lambda: big.write.mode("append").partitionBy("dt").parquet(held["n"]),
                lambda: held.update(n=fresh("native")),
            ),
        },
        reps,
        warm=True,
    )
    after = DeltaTable.for_path(spark, held["o"]).to_df().count()
    assert after == 2 * rows, after
    row(f"append {rows} rows from parquet", t_big["ours"], None, t_big["native"], f"{after} rows after")

    day = "dt = '2026-01-05'"
    sc = spark.sparkContext
    o, res, ho = ours_case(lambda t: t.delete(day))
    sc.setJobGroup("bench-partition-delete", "partition-only delete")
    jobs_before = len(sc.statusTracker().getJobIdsForGroup("bench-partition-delete"))
    DeltaTable.for_path(spark, fresh("ours")).delete(day)
    jobs = len(sc.statusTracker().getJobIdsForGroup("bench-partition-delete")) - jobs_before
    sc.setJobGroup("bench", "bench")
    r, _, hr = rs_case(lambda d: d.delete(day))
    n, _ = native_case(lambda p: shutil.rmtree(os.path.join(p, "dt=2026-01-05")))
    row("delete one partition", o, r, n, f"{jobs} Spark jobs; {counts(ho, hr)} rows left")
    cases["partition_delete_jobs"] = jobs

    # ---- DML by a data predicate: both engines on copies of the SAME files (deltalake's table), the
    # engines alternating within each repetition; ours through Spark and in process
    def dml_case(label, command, args, metric, verb, native_fn):
        h_spark, h_local, h_rs = {}, {}, {}

        def ours(session, holder):
            return getattr(DeltaTable.for_path(session, holder["p"]), command)(*args)

        times, outs = _alternating(
            {
                "spark": (lambda: ours(spark, h_spark), lambda: h_spark.update(p=fresh("rs", "ours_spark"))),
                "local": (lambda: ours(None, h_local), lambda: h_local.update(p=fresh("rs", "ours_local"))),
                "rs": (
                    lambda: _rs_dml(deltalake.DeltaTable(h_rs["p"]), command, args),
                    lambda: h_rs.update(p=fresh("rs")),
                ),
            },
            reps,
        )
        n, _ = native_case(native_fn)
        left = counts(h_spark, h_rs)
        assert counts(h_local, h_rs) == left
        r = times["rs"]
        row(label, times["spark"], r, n, f"{outs['spark'][metric]} {verb}; {left} rows; same files")
        row(f"{label}, in process", times["local"], r, None, f"{outs['local'][metric]} {verb}; same files")
        for i, (where, session) in enumerate((("Spark local[2]", spark), ("in process", None))):
            text = _dml_breakdown(session, fresh("rs", "breakdown"), command, args, where)
            print(f"    {label}, {text}", flush=True)
            results[i - 2]["breakdown"] = f"{label}, {text}"

    dml_case(
        "delete ~1% by a data predicate",
        "delete",
        ("v < 0.01",),
        "numDeletedRows",
        "deleted",
        lambda p: (
            spark.read.parquet(p).filter("NOT (v < 0.01)").write.mode("overwrite").partitionBy("dt").parquet(p + "_new")
        ),
    )
    dml_case(
        "update ~1%",
        "update",
        ({"n": "n + 1"}, "v < 0.01"),
        "numUpdatedRows",
        "updated",
        lambda p: (
            spark.read.parquet(p)
            .withColumn("n", F.when(F.col("v") < 0.01, F.col("n") + 1).otherwise(F.col("n")))
            .write.mode("overwrite")
            .partitionBy("dt")
            .parquet(p + "_new")
        ),
    )

    # MERGE has its own bench (bench/merge.py, on the same table)

    day_df = extra.filter("dt = DATE '2026-01-05'").cache()
    day_df.count()
    day_arrow = extra_arrow.filter(pc.equal(extra_arrow["dt"], pa.scalar(__import__("datetime").date(2026, 1, 5))))
    o, res, ho = ours_case(lambda t: t.overwrite(day_df, replace_where=day))
    r, _, hr = rs_case(lambda d: deltalake.write_deltalake(d, day_arrow, mode="overwrite", predicate=day))
    n, _ = native_case(lambda p: day_df.drop("dt").write.mode("overwrite").parquet(os.path.join(p, "dt=2026-01-05")))
    row("overwrite one partition (replace_where)", o, r, n, f"{counts(ho, hr)} rows after")

    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    for r_ in results:
        r_["ours_vs_spark"] = (r_["ours_s"] / r_["spark_native_s"]) if r_["spark_native_s"] else None
        r_["ours_vs_deltalake"] = (r_["ours_s"] / r_["deltalake_s"]) if r_["deltalake_s"] else None
    return results


def save(results: list[dict], rows: int, reps: int) -> None:
    RESULTS.mkdir(exist_ok=True)
    keys = ["case", "ours_s", "deltalake_s", "spark_native_s", "ours_vs_spark", "ours_vs_deltalake", "note"]
    with open(RESULTS / "dataplane.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in results:
            w.writerow({k: r.get(k) for k in keys})

    def f(x, ratio=False):
        if x is None:
            return "-"
        return f"{x:.2f}x" if ratio else f"{x:.2f} s"

    lines = [
        "# Data-plane bench (`python -m bench.dataplane`)",
        "",
        f"{rows:,} rows x 6 columns, 20 `dt` partitions; local[2], warm session, median of {reps}.",
        "Spark-native = the same job on plain parquet with Spark's own reader/writer (no Delta).",
        "",
        "| case | ours | deltalake | Spark native | ours / Spark | ours / deltalake | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['case']} | {f(r['ours_s'])} | {f(r['deltalake_s'])} | {f(r['spark_native_s'])} | "
            f"{f(r['ours_vs_spark'], True)} | {f(r['ours_vs_deltalake'], True)} | {r['note']} |"
        )
    notes = [f"- {r['breakdown']}" for r in results if r.get("breakdown")]
    if notes:
        lines += ["", "Where our DML time goes (one more run each, same files):", "", *notes]
    (RESULTS / "dataplane.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_ROWS", 5_000_000)))
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    p.add_argument("--quick", action="store_true", help="200k rows, one repetition")
    a = p.parse_args(argv)
    rows, reps = (200_000, 1) if a.quick else (a.rows, a.reps)
    results = run(rows, reps)
    save(results, rows, reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
