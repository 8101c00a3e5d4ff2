"""Run the per-file rewrite (:mod:`airflow_delta_provider_apps.engine.rewrite`) over candidate files in Spark tasks.

The candidate files (after partition pruning and data skipping) become a small DataFrame, one row per
file with its plan flag (``likely``: rewrite in one pass, else probe first; decided on the driver
from the files' stats by :func:`~airflow_delta_provider_apps.engine.rewrite.likely_touched`), dealt to
one task per core, each with about the same bytes (:func:`.scan.listing_for_tasks`: the listing is a
local relation Spark cuts into contiguous slices, so no range-partitioning job or shuffle runs
before the ``mapInArrow`` job: ONE Spark job). Each task rewrites its files with pyarrow, writing
new files itself, and yields one small row per input file (the counts, the AddFile JSON of what it
wrote, its time split), which the driver collects.
"""

from __future__ import annotations

import functools
import time

import pyarrow as pa

from ..rewrite import FileOutcome, RewriteSpec
from ..rewrite.common import from_task_row, task_schema, to_task_row
from .scan import TASK_COLUMN, as_dict, deal_to_tasks, listing_for_tasks, task_slices
from .session import collect_tasks, guard_executor

__all__ = ["rewrite_files", "run_file_tasks", "unit_listing", "file_task", "task_id_of"]

_LIKELY = "likely"
_DDL_TYPES = {pa.string(): "string", pa.bool_(): "boolean", pa.int64(): "long", pa.binary(): "binary"}


def rewrite_files(spark, spec: RewriteSpec, files: pa.Table) -> list[FileOutcome]:
    """Rewrite the touched files of ``files`` (rows of ``snapshot.files``) in Spark tasks; one
    outcome per file."""
    from ..rewrite import likely_touched, notify
    from ..schema import parse_schema

    if files.num_rows == 0:
        return []
    started = time.perf_counter_ns()
    likely = likely_touched(
        files, parse_schema(spec.write.schema_json), list(spec.write.partition_columns), spec.predicate
    )
    outcomes = run_file_tasks(spark, files, likely, functools.partial(_Rewriter, spec), FileOutcome)
    notify(outcomes, (time.perf_counter_ns() - started) // 1_000_000)
    return outcomes


def run_file_tasks(spark, files: pa.Table, likely: list[bool] | None, worker, outcome_class, *, units=None) -> list:
    """The per-file work of a command over ``files`` in Spark tasks, in ONE job: the files dealt to
    the tasks by bytes (:func:`.scan.listing_for_tasks`), each with its plan flag (``likely``: rewrite in
    one pass, else probe first; None: no estimate). ``worker`` (picklable; called once per task, on the executor)
    returns ``fn(storage, path, partition_values, deletion_vector, likely, task_id)`` giving the
    file's outcome, an ``outcome_class`` shipped back as one row (:func:`..rewrite.common.to_task_row`).

    ``units`` (lists of row indices of ``files``; OPTIMIZE's bins) groups the files: each unit is
    one row of the listing, dealt by its bytes, and ``fn(storage, rows, task_id)`` gets the unit's
    file rows (``path``, ``partition_values``, ``deletion_vector``) and gives the unit's outcome."""
    if units is not None:
        listing = unit_listing(files, units)
        listing = deal_to_tasks(listing, min(listing.num_rows, task_slices(spark)))
    else:
        listing = listing_for_tasks(files, min(files.num_rows, task_slices(spark)))
        flags = dict(zip(files.column("path").to_pylist(), likely))  # listing rows are in task order
        paths = listing.column("path").to_pylist()
        # None: no estimate from the stats (the worker decides as it goes, see merge.by_file.TouchStreak)
        listing = listing.append_column(_LIKELY, pa.array([flags[p] for p in paths], pa.bool_()))
    schema = task_schema(outcome_class)
    ddl = ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in schema)

    def fn(batches, _worker=worker, _schema=schema):
        from airflow_delta_provider_apps.engine.spark.rewrite import file_task

        return file_task(_worker, _schema, batches)

    rows = collect_tasks(spark.createDataFrame(listing), fn, ddl)
    outcomes = [from_task_row(outcome_class, r.asDict()) for r in rows]
    if units is not None:  # back in unit order
        order = listing.column(_UNIT).to_pylist()
        outcomes = [o for _, o in sorted(zip(order, outcomes), key=lambda p: p[0])]
    return outcomes


#: a unit listing's columns: the unit's number and its file rows (JSON text: no nested Arrow types
#: for Spark to convert)
_UNIT = "unit"
_UNIT_FILES = "unit_files"


def unit_listing(files: pa.Table, units: list[list[int]]) -> pa.Table:
    """One row per unit of ``files``: its number, its file rows as JSON, its bytes and a task column."""
    import json

    wanted = [c for c in ("path", "partition_values", "deletion_vector", "size") if c in files.column_names]
    rows = files.select(wanted).to_pylist()
    texts, sizes = [], []
    for u in units:
        chosen = [rows[i] for i in u]
        texts.append(
            json.dumps(
                [
                    {
                        "path": r["path"],
                        "partition_values": dict(r.get("partition_values") or []),
                        "deletion_vector": r.get("deletion_vector"),
                    }
                    for r in chosen
                ],
                separators=(",", ":"),
            )
        )
        sizes.append(sum(int(r.get("size") or 0) for r in chosen))
    return pa.table(
        {
            _UNIT: pa.array(range(len(units)), pa.int64()),
            _UNIT_FILES: pa.array(texts, pa.string()),
            "size": pa.array(sizes, pa.int64()),
            TASK_COLUMN: pa.array([0] * len(units), pa.int32()),
        }
    )


def file_task(worker, schema: pa.Schema, batches):
    """Executor side of :func:`run_file_tasks`: the worker over every file (or unit) named in
    ``batches``, one output row per file (or unit)."""

    def run():
        import json

        from ..storage import storage_for

        work = worker()
        storage = storage_for(work.table_uri)
        task = task_id_of()
        for batch in batches:
            names = batch.schema.names
            if _UNIT_FILES in names:
                for text in batch.column(_UNIT_FILES).to_pylist():
                    o = work(storage, json.loads(text), task)
                    yield pa.RecordBatch.from_pylist([to_task_row(o)], schema=schema)
                continue
            paths = batch.column("path").to_pylist()
            pvs = batch.column("partition_values").to_pylist()
            dvs = batch.column("deletion_vector").to_pylist() if "deletion_vector" in names else [None] * len(paths)
            likely = batch.column(_LIKELY).to_pylist()
            for path, pv, dv, lk in zip(paths, pvs, dvs, likely):
                o = work(storage, path, as_dict(pv), dv, lk, task)
                yield pa.RecordBatch.from_pylist([to_task_row(o)], schema=schema)

    return guard_executor(run())


class _Rewriter:
    """DELETE/UPDATE's per-file work in a task (:func:`..rewrite.rewrite_file`), its bound plan built once."""

    def __init__(self, spec: RewriteSpec):
        from ..rewrite import Bound

        self.spec, self.bound, self.table_uri = spec, Bound(spec), spec.write.table_uri

    def __call__(self, storage, path, partition_values, deletion_vector, likely, task_id):
        from ..rewrite import rewrite_file

        return rewrite_file(
            self.spec,
            storage,
            path,
            partition_values,
            deletion_vector,
            task_id=task_id,
            bound=self.bound,
            likely=bool(likely),
        )


def task_id_of() -> int:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return tc.partitionId() if tc is not None else 0
    except Exception:  # not inside a Spark task
        return 0
