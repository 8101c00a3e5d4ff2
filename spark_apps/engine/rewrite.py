"""Rewriting one data file for DELETE and UPDATE, in pure pyarrow (runs in a Spark task or in-process).

For each candidate file (one that partition pruning and data skipping could not rule out):

1. **Probe**: stream only the columns the predicate reads (column pruning in the parquet reader) and
   count the rows where the predicate is TRUE. No match: the file is untouched, nothing is written,
   and the rest of its columns are never read.
2. **Rewrite** a touched file: stream all its columns once more and write, through the core writer
   (:mod:`airflow_delta_provider_apps.engine.writer`), the rows DELETE keeps (those where the predicate is not TRUE:
   ``NOT (p <=> TRUE)``, so rows where it is NULL stay) or every row with UPDATE's ``SET`` values
   taken where the predicate is TRUE (an updated partition column moves rows to their new partition).

Counts come out of these two passes (rows in the file, rows matched, rows written), so a command
never reads data a third time to compute its metrics. The outcome per file says what to remove (the
file read) and what to add (the files written).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .expr.nodes import Expr
from .writer import WriteSpec, WrittenFile, write_batches

__all__ = ["RewriteSpec", "FileOutcome", "rewrite_file", "rewrite_files"]


@dataclass(frozen=True)
class RewriteSpec:
    """Everything a task needs to rewrite files (small and picklable; expressions travel as the bound
    trees the driver checked, never as text parsed again).

    :param predicate: the bound condition (None: every row matches)
    :param updates: UPDATE's ``((column, bound expression), ...)``; empty for DELETE
    """

    write: WriteSpec
    predicate: Expr | None
    updates: tuple[tuple[str, Expr], ...] = ()
    column_mapping_mode: str = "none"


@dataclass
class FileOutcome:
    """What happened to one candidate file."""

    path: str
    num_rows: int = 0
    num_matched: int = 0
    written: list[WrittenFile] = field(default_factory=list)
    probe_ms: int = 0
    rewrite_ms: int = 0

    @property
    def touched(self) -> bool:
        return self.num_matched > 0

    @property
    def num_written_rows(self) -> int:
        return sum(w.num_rows for w in self.written)


class _Bound:
    """The spec's expressions bound to the table schema (once per task)."""

    def __init__(self, spec: RewriteSpec):
        from .schema import parse_schema

        self.schema = parse_schema(spec.write.schema_json)
        self.predicate = spec.predicate
        self.updates = dict(spec.updates)
        self.probe_columns = sorted({p[0] for p in self.predicate.columns()}) if self.predicate else []


def _mask(bound: _Bound, batch: pa.RecordBatch) -> pa.Array:
    from .expr import true_mask

    if bound.predicate is None:
        return pa.repeat(pa.scalar(True), batch.num_rows)
    mask = true_mask(bound.predicate, batch)
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def rewrite_file(
    spec: RewriteSpec,
    storage,
    path: str,
    partition_values: Mapping[str, str | None] | None,
    deletion_vector: Any = None,
    *,
    task_id: int = 0,
    bound: _Bound | None = None,
) -> FileOutcome:
    """Probe and, when touched, rewrite one file (see the module docstring)."""
    from .expr import evaluate
    from .reader import iter_data_file_batches

    bound = bound or _Bound(spec)
    root = spec.write.table_uri
    parts = list(spec.write.partition_columns)
    out = FileOutcome(path)

    def stream(columns):
        return iter_data_file_batches(
            storage,
            root,
            path,
            partition_values,
            bound.schema,
            parts,
            columns,
            deletion_vector,
            column_mapping_mode=spec.column_mapping_mode,
        )

    started = time.monotonic()
    for batch in stream(bound.probe_columns):
        out.num_rows += batch.num_rows
        if bound.predicate is not None and batch.num_rows:
            out.num_matched += int(pc.sum(pc.cast(_mask(bound, batch), pa.int64())).as_py() or 0)
    if bound.predicate is None:
        out.num_matched = out.num_rows
    out.probe_ms = int((time.monotonic() - started) * 1000)
    if not out.touched:
        return out

    started = time.monotonic()

    def rewritten() -> Iterator[pa.RecordBatch]:
        for batch in stream(None):
            if not batch.num_rows:
                continue
            mask = _mask(bound, batch)
            if not bound.updates:  # DELETE: keep the rows where the predicate is not TRUE
                kept = batch.filter(pc.invert(mask))
                if kept.num_rows:
                    yield kept
                continue
            columns = []
            for name in batch.schema.names:
                col = batch.column(name)
                expr = bound.updates.get(name)
                if expr is not None:
                    new = evaluate(expr, batch)
                    new = new.combine_chunks() if isinstance(new, pa.ChunkedArray) else new
                    col = pc.if_else(mask, new.cast(col.type), col)
                columns.append(col)
            yield pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    out.written = list(write_batches(spec.write, rewritten(), task_id=task_id))
    out.rewrite_ms = int((time.monotonic() - started) * 1000)
    return out


def rewrite_files(spec: RewriteSpec, files: pa.Table, *, task_id: int = 0) -> list[FileOutcome]:
    """Rewrite each file of ``files`` (rows of ``snapshot.files``) in this process."""
    from .storage import storage_for

    storage = storage_for(spec.write.table_uri)
    bound = _Bound(spec)
    has_dv = "deletion_vector" in files.column_names
    outcomes = []
    for row in files.select(["path", "partition_values"] + (["deletion_vector"] if has_dv else [])).to_pylist():
        pv = dict(row["partition_values"] or [])
        outcomes.append(
            rewrite_file(spec, storage, row["path"], pv, row.get("deletion_vector"), task_id=task_id, bound=bound)
        )
    return outcomes
