"""Run the per-file rewrite (:mod:`airflow_delta_provider_apps.engine.rewrite`) over candidate files in Spark tasks.

The candidate files (after partition pruning and data skipping) become a small DataFrame, one row per
file with its plan flag (``likely``: rewrite in one pass, else probe first; decided on the driver
from the files' stats by :func:`~airflow_delta_provider_apps.engine.rewrite.likely_touched`), dealt to
one task per core, each with about the same bytes (:func:`listing_for_tasks`: the listing is a
local relation Spark cuts into contiguous slices, so no range-partitioning job or shuffle runs
before the ``mapInArrow`` job: ONE Spark job). Each task rewrites its files with pyarrow, writing
new files itself, and yields one small row per input file (the counts, the AddFile JSON of what it
wrote, its time split), which the driver collects.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa

from ..actions import AddCDCFile, AddFile
from ..rewrite import FileOutcome, RewriteSpec
from ..writer import WrittenFile
from .scan import _TASK_COLUMN, _as_dict, _default_parallelism, _files_table
from .session import collect_tasks, guard_executor

__all__ = ["rewrite_files"]

_COUNTS = ("num_rows", "num_matched", "probe_ms", "rewrite_ms", "read_ms", "eval_ms", "write_ms", "reads", "discarded")
_ARROW_OUTPUT = pa.schema(
    [("path", pa.string()), ("written", pa.string()), ("one_pass", pa.bool_())]
    + [("dv", pa.string()), ("fully_deleted", pa.bool_()), ("changes", pa.string())]
    + [(c, pa.int64()) for c in _COUNTS]
)
OUTPUT_SCHEMA = (
    "path string, written string, one_pass boolean, dv string, fully_deleted boolean, changes string, "
    + ", ".join(f"{c} long" for c in _COUNTS)
)
_LIKELY = "likely"


def rewrite_files(spark, spec: RewriteSpec, files: pa.Table) -> list[FileOutcome]:
    """Rewrite the touched files of ``files`` (rows of ``snapshot.files``) in Spark tasks; one
    outcome per file."""
    from ..rewrite import likely_touched, notify
    from ..schema import parse_schema

    if files.num_rows == 0:
        return []
    started = time.perf_counter_ns()
    n_tasks = min(files.num_rows, task_slices(spark))
    listing = listing_for_tasks(files, n_tasks)
    likely = likely_touched(
        files, parse_schema(spec.write.schema_json), list(spec.write.partition_columns), spec.predicate
    )
    listing = listing.append_column(_LIKELY, pa.array(likely, pa.bool_()))

    def fn(batches, _spec=spec):
        from airflow_delta_provider_apps.engine.spark.rewrite import rewrite_task

        return rewrite_task(_spec, batches)

    rows = collect_tasks(spark.createDataFrame(listing), fn, OUTPUT_SCHEMA)
    outcomes = []
    for r in rows:
        written = [WrittenFile(AddFile.from_json(a), int(k)) for a, k in json.loads(r["written"] or "[]")]
        o = FileOutcome(r["path"], written=written, one_pass=bool(r["one_pass"]))
        o.changes = [WrittenFile(AddCDCFile.from_json(a), int(k)) for a, k in json.loads(r["changes"] or "[]")]
        o.deletion_vector = json.loads(r["dv"]) if r["dv"] else None
        o.fully_deleted = bool(r["fully_deleted"])
        for c in _COUNTS:
            setattr(o, c, int(r[c] or 0))
        outcomes.append(o)
    notify(outcomes, (time.perf_counter_ns() - started) // 1_000_000)
    return outcomes


def task_slices(spark) -> int:
    """How many partitions Spark gives a local relation (``spark.sql.leafNodeDefaultParallelism``,
    else the default parallelism)."""
    try:
        value = spark.conf.get("spark.sql.leafNodeDefaultParallelism", None)
        if value:
            return max(1, int(value))
    except Exception:  # a session without conf access, or a value that is not a number
        pass
    return _default_parallelism(spark)


def listing_for_tasks(files: pa.Table, n_tasks: int) -> pa.Table:
    """The listing (:func:`~.scan._files_table`) with each file's task, rows ordered by task.

    Spark runs a DataFrame made from a small local table (a local relation) in ``min(rows,
    spark.sql.leafNodeDefaultParallelism or defaultParallelism)`` partitions (:func:`task_slices`), each a contiguous slice of the rows (``i * n //
    slices`` to ``(i + 1) * n // slices``, as ``sparkContext.parallelize`` cuts): no range
    partitioning job, no shuffle. So the files are dealt to slices of exactly those lengths, largest
    first to the slice with the fewest bytes so far, and ordered by slice: each task gets about the
    same bytes. (Were Spark to cut differently, only this balance would suffer.)
    """
    import heapq

    import numpy as np

    n = files.num_rows
    listing = _files_table(files, n_tasks)
    sizes = listing.column("size").to_numpy()
    bounds = [(i * n) // n_tasks for i in range(n_tasks + 1)]
    room = [bounds[i + 1] - bounds[i] for i in range(n_tasks)]
    heap = [(0, t) for t in range(n_tasks) if room[t] > 0]
    tasks = np.empty(n, dtype="int32")
    for i in np.argsort(-sizes, kind="stable"):
        total, t = heapq.heappop(heap)
        tasks[i] = t
        room[t] -= 1
        if room[t]:
            heapq.heappush(heap, (total + int(sizes[i]), t))
    listing = listing.set_column(listing.column_names.index(_TASK_COLUMN), _TASK_COLUMN, pa.array(tasks))
    return listing.take(np.argsort(tasks, kind="stable"))


def task_id_of() -> int:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return tc.partitionId() if tc is not None else 0
    except Exception:  # not inside a Spark task
        return 0


def rewrite_task(spec: RewriteSpec, batches):
    """Executor side: rewrite every file named in ``batches``; yield one output row per file."""

    def run():
        from ..rewrite import Bound, rewrite_file
        from ..storage import storage_for

        storage = storage_for(spec.write.table_uri)
        bound = Bound(spec)
        task = task_id_of()
        for batch in batches:
            names = batch.schema.names
            paths = batch.column("path").to_pylist()
            pvs = batch.column("partition_values").to_pylist()
            dvs = batch.column("deletion_vector").to_pylist() if "deletion_vector" in names else [None] * len(paths)
            likely = batch.column(_LIKELY).to_pylist() if _LIKELY in names else [False] * len(paths)
            for path, pv, dv, lk in zip(paths, pvs, dvs, likely):
                o = rewrite_file(spec, storage, path, _as_dict(pv), dv, task_id=task, bound=bound, likely=bool(lk))
                row = {c: getattr(o, c) for c in _COUNTS}
                row["path"] = o.path
                row["one_pass"] = o.one_pass
                row["dv"] = json.dumps(o.deletion_vector) if o.deletion_vector is not None else None
                row["fully_deleted"] = o.fully_deleted
                row["written"] = json.dumps([[w.add.to_json(), w.num_rows] for w in o.written], separators=(",", ":"))
                row["changes"] = json.dumps([[w.add.to_json(), w.num_rows] for w in o.changes], separators=(",", ":"))
                yield pa.RecordBatch.from_pylist([row], schema=_ARROW_OUTPUT)

    return guard_executor(run())
