"""OPTIMIZE's bins in Spark tasks: one bin per task (its files read and written again by
:func:`..compact.compact_bin` in the task), ONE job, no shuffle; the tasks return the
AddFile JSON of what they wrote."""

from __future__ import annotations

import json

import pyarrow as pa

from .session import collect_tasks, guard_executor

__all__ = ["compact_bins"]

_OUTPUT = "written string"


def compact_bins(spark, info: dict, bins: list[list[dict]], zorder_by: list[str]) -> list:
    from ..actions import AddFile
    from ..writer import WrittenFile

    listing = pa.table({"bin": pa.array(range(len(bins)), pa.int64())})

    def fn(batches, _info=info, _bins=bins, _z=zorder_by):
        from airflow_delta_provider_apps.engine.spark.optimize import compact_task

        return compact_task(_info, _bins, _z, batches)

    rows = collect_tasks(spark.createDataFrame(listing).repartition(len(bins)), fn, _OUTPUT)
    out = []
    for r in rows:
        out += [WrittenFile(AddFile.from_json(a), int(k)) for a, k in json.loads(r["written"])]
    return out


def compact_task(info: dict, bins: list[list[dict]], zorder_by: list[str], batches):
    """Executor side: compact the bins named in ``batches``; one output row per bin."""

    def run():
        from ..rewrite import compact_bin
        from .rewrite import task_id_of

        schema = pa.schema([("written", pa.string())])
        for batch in batches:
            for b in batch.column("bin").to_pylist():
                written = compact_bin(info, bins[b], zorder_by, task_id=task_id_of())
                payload = json.dumps([[w.add.to_json(), w.num_rows] for w in written], separators=(",", ":"))
                yield pa.RecordBatch.from_pylist([{"written": payload}], schema=schema)

    return guard_executor(run())
