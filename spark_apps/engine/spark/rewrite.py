"""Run the per-file rewrite (:mod:`airflow_delta_provider_apps.engine.rewrite`) over candidate files in Spark tasks.

The candidate files (after partition pruning and data skipping) become a small DataFrame, one row per
file, dealt to tasks by size (as the scan does) and mapped with ``mapInArrow``: each task probes its
files and rewrites the touched ones with pyarrow, writing new files itself. One Spark job, no
shuffle of table data, nothing read twice but the touched files. Each task yields one small row per
input file (the counts and the AddFile JSON of what it wrote), which the driver collects.
"""

from __future__ import annotations

import json

import pyarrow as pa

from ..actions import AddFile
from ..rewrite import FileOutcome, RewriteSpec
from ..writer import WrittenFile
from .scan import _TASK_COLUMN, _as_dict, _default_parallelism, _files_table
from .session import delta_error_from, guard_executor

__all__ = ["rewrite_files"]

OUTPUT_SCHEMA = "path string, num_rows long, num_matched long, written string, probe_ms long, rewrite_ms long"
_ARROW_OUTPUT = pa.schema(
    [
        ("path", pa.string()),
        ("num_rows", pa.int64()),
        ("num_matched", pa.int64()),
        ("written", pa.string()),
        ("probe_ms", pa.int64()),
        ("rewrite_ms", pa.int64()),
    ]
)


def rewrite_files(spark, spec: RewriteSpec, files: pa.Table) -> list[FileOutcome]:
    """Probe and rewrite ``files`` (rows of ``snapshot.files``) in Spark tasks; one outcome per file."""
    if files.num_rows == 0:
        return []
    n_tasks = min(files.num_rows, 2 * _default_parallelism(spark))
    listing = _files_table(files, n_tasks)

    def fn(batches, _spec=spec):
        from airflow_delta_provider_apps.engine.spark.rewrite import rewrite_task

        return rewrite_task(_spec, batches)

    df = spark.createDataFrame(listing)
    df = df.repartitionByRange(n_tasks, _TASK_COLUMN) if n_tasks > 1 else df.coalesce(1)
    try:
        rows = df.mapInArrow(fn, OUTPUT_SCHEMA).collect()
    except Exception as e:  # executor errors arrive wrapped in Spark exceptions
        err = delta_error_from(e)
        if err is not None:
            raise err from None
        raise
    outcomes = []
    for r in rows:
        written = [WrittenFile(AddFile.from_json(a), int(k)) for a, k in json.loads(r["written"] or "[]")]
        outcomes.append(
            FileOutcome(r["path"], int(r["num_rows"]), int(r["num_matched"]), written, r["probe_ms"], r["rewrite_ms"])
        )
    return outcomes


def _task_id() -> int:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return tc.partitionId() if tc is not None else 0
    except Exception:  # not inside a Spark task
        return 0


def rewrite_task(spec: RewriteSpec, batches):
    """Executor side: rewrite every file named in ``batches``; yield one output row per file."""

    def run():
        from ..rewrite import _Bound, rewrite_file
        from ..storage import storage_for

        storage = storage_for(spec.write.table_uri)
        bound = _Bound(spec)
        task = _task_id()
        for batch in batches:
            names = batch.schema.names
            paths = batch.column("path").to_pylist()
            pvs = batch.column("partition_values").to_pylist()
            dvs = batch.column("deletion_vector").to_pylist() if "deletion_vector" in names else [None] * len(paths)
            for path, pv, dv in zip(paths, pvs, dvs):
                o = rewrite_file(spec, storage, path, _as_dict(pv), dv, task_id=task, bound=bound)
                written = json.dumps([[w.add.to_json(), w.num_rows] for w in o.written], separators=(",", ":"))
                yield pa.RecordBatch.from_pylist(
                    [
                        {
                            "path": o.path,
                            "num_rows": o.num_rows,
                            "num_matched": o.num_matched,
                            "written": written,
                            "probe_ms": o.probe_ms,
                            "rewrite_ms": o.rewrite_ms,
                        }
                    ],
                    schema=_ARROW_OUTPUT,
                )

    return guard_executor(run())
