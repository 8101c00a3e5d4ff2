"""The PySpark data source bench (issue 41 item 1): ``spark.read.format("delta")`` through
``airflow_delta_provider_apps.datasource`` beside Spark's own parquet scan of the very same files, and a
write through it beside our own append (``python -m bench.datasource [--rows N] [--reps N]``).

The table: ``--rows`` rows (id long, k long, v double, s string) in 8 files of consecutive ids,
written by our append (no deletion vectors: Spark's parquet scan reads the same rows). Cases, each
``--reps`` runs after one untimed run (the sides in turns: both see the same load), in one local[2]
session; the table gives the least time of the runs (load only adds) and the medians' ratio:

* full scan: a hash of every column summed (every value read), source vs ``spark.read.parquet``;
* the same through a bare pyarrow data source over the same files (no log, no engine): the floor of
  any PySpark Python data source;
* selective scan: the same over ``id`` in one file's range: the source skips 7 files by stats on the
  driver; Spark's parquet scan prunes row groups by the same footers;
* write: the rows appended through the source vs ``DeltaTable.append`` of the same DataFrame.

The source pays for Python workers, and the table splits the CPU time into the JVM's and theirs.
Measured on 4M rows (local[2], CPU seconds): the JVM spends about what Spark's own scan spends (it
turns the Arrow batches into rows instead of decoding pages); the Python workers ~0.45-0.55: pyspark's
fixed cost per query ~0.13-0.15 (four worker round trips: the schema at analysis ~0.03, the planning
worker ~0.05, each of the two read tasks ~0.03; the engine's own part of them ~0.01), pyarrow's decode
~0.25, the engine's work over a bare ``iter_batches`` ~0.03, the Arrow stream to the JVM ~0.04. Each
run builds a fresh DataFrame: a reused one keeps its first physical plan in classic Spark, which is not
a real read.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_seconds() -> tuple[float, float] | None:
    """CPU time (user + system, reaped children included) of this process's descendants, as (the
    JVM's, its Python workers'). Linux only (None elsewhere). On a shared machine it is steadier than
    the wall time, which other load stretches."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        children: dict[int, list[tuple[int, bool, int]]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:  # gone meanwhile
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            jvm = "java" in stat[stat.index("(") + 1 : stat.rindex(")")]
            own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
            children.setdefault(int(fields[1]), []).append((int(pid), jvm, own, reaped))
    except (OSError, ValueError, AttributeError):
        return None
    jvm_ticks, python_ticks, stack = 0, 0, [os.getpid()]
    while stack:  # the JVM's and the daemon's reaped children are Python workers
        for child, jvm, own, reaped in children.get(stack.pop(), []):
            jvm_ticks += own if jvm else 0
            python_ticks += reaped + (0 if jvm else own)
            stack.append(child)
    return jvm_ticks / tick, python_ticks / tick


@dataclasses.dataclass
class Side:
    """One side's runs: wall seconds, and CPU seconds of the JVM and of the Python workers."""

    walls: list = dataclasses.field(default_factory=list)
    jvm: list = dataclasses.field(default_factory=list)
    python: list = dataclasses.field(default_factory=list)

    @property
    def cpus(self) -> list:
        return [j + p for j, p in zip(self.jvm, self.python)]


def _turns(fns, reps: int) -> list[Side]:
    """Each of ``fns`` run ``reps`` times in turns (after one untimed run each), so every side sees
    the same load on a shared machine."""
    sides = [Side() for _ in fns]
    for fn in fns:
        fn()
    for _ in range(reps):
        for fn, side in zip(fns, sides):
            c, t = _cpu_seconds(), time.perf_counter()
            fn()
            side.walls.append(time.perf_counter() - t)
            after = _cpu_seconds()
            if c is not None and after is not None:
                side.jvm.append(after[0] - c[0])
                side.python.append(after[1] - c[1])
    return sides


def _bare_source(files: list[str], schema: str, parallelism: int):
    """The floor of a PySpark Python data source over these Parquet files: a bare pyarrow reader (no
    Delta log, no engine), the files dealt round robin to ``parallelism`` partitions, each streamed as
    ``iter_batches`` of the engine's batch size. Defined here (pickled by value into the workers)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from airflow_delta_provider_apps.engine.spark.scan import MAX_BATCH_ROWS

    class BareReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(files[i::parallelism]) for i in range(parallelism)]

        def read(self, partition):
            import pyarrow.parquet as pq

            for f in partition.value:
                yield from pq.ParquetFile(f).iter_batches(batch_size=MAX_BATCH_ROWS)

    class BareParquet(DataSource):
        @classmethod
        def name(cls):
            return "bench_bare_parquet"

        def schema(self):
            return schema

        def reader(self, schema):
            return BareReader()

    return BareParquet


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from airflow_delta_provider_apps.datasource import register
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.spark.scan import default_parallelism
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

        floor = _bare_source(parquet, "id BIGINT, k BIGINT, v DOUBLE, s STRING", default_parallelism(spark))
        spark.dataSource.register(floor)

        def bare():
            return spark.read.format(floor.name()).load()

        assert scan(source)() == scan(native)() == scan(bare)()
        assert scan(source, selective)() == scan(native, selective)()
        out = []
        full, floor_side, that = _turns([scan(source), scan(bare), scan(native)], args.reps)
        out.append(("full scan", "spark.read.parquet", full, that))
        out.append(("full scan, bare pyarrow source (the floor)", "spark.read.parquet", floor_side, that))
        out.append(
            (
                "selective scan (1 of 8 files)",
                "spark.read.parquet",
                *_turns([scan(source, selective), scan(native, selective)], args.reps),
            )
        )
        data = rows.repartition(2).cache()
        data.count()
        targets = iter(range(1000))

        def via_source():
            data.write.format("delta").mode("append").save(str(work / f"w{next(targets)}"))

        def via_append():
            p = str(work / f"w{next(targets)}")
            DeltaTable.create(spark, p, schema="id BIGINT, k BIGINT, v DOUBLE, s STRING")
            DeltaTable.for_path(spark, p).append(data)

        out.append(("write (new table)", "DeltaTable.append", *_turns([via_source, via_append], args.reps)))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def ratio(a: list, b: list) -> str:
        return f"{min(a) / min(b):.2f}x ({statistics.median(a) / statistics.median(b):.2f}x)" if a and b else "n/a"

    def cpu(side: Side) -> str:  # the run of least CPU, in its parts
        if not side.cpus:
            return "n/a"
        i = side.cpus.index(min(side.cpus))
        return f"{side.cpus[i]:.2f} = {side.jvm[i]:.2f} + {side.python[i]:.2f}"

    lines = [
        f"# Data source bench: {args.rows:,} rows, 8 files, local[2], min (median) of {args.reps} runs in turns",
        "",
        "| case | beside | wall s | that, wall s | wall ratio | CPU s = JVM + Python | that, CPU s | CPU ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {n} | {what} | {min(a.walls):.2f} | {min(b.walls):.2f} | {ratio(a.walls, b.walls)} | {cpu(a)} "
            f"| {cpu(b)} | {ratio(a.cpus, b.cpus)} |"
            for n, what, a, b in out
        ],
        "",
        "Times are the least of the runs (other load on a shared machine only adds to them); ratios are "
        "of the least, the medians' in parentheses. CPU: user + system time of the JVM and of its Python "
        "workers (of the run of least CPU). The source's extra is its Python workers: pyspark's fixed "
        "cost per query (the schema at analysis, the planning worker, each read task's round trip), "
        "pyarrow decoding the Parquet pages and the Arrow stream to the JVM, which turns the batches into "
        "rows for about what Spark's own scan spends decoding them. The bare pyarrow source pays the "
        "same without the Delta log or the engine: the floor of any PySpark Python data source.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "datasource.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
