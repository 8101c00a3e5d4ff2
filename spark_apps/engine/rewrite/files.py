"""Rewriting data files for DELETE and UPDATE, in pure pyarrow (in a Spark task or in this process).

A rewritten file keeps the rows DELETE keeps (those where the predicate is not TRUE:
``NOT (p <=> TRUE)``, so rows where it is NULL stay), or every row with UPDATE's ``SET`` values
taken where the predicate is TRUE (evaluated on those rows only, as Spark's ``CASE WHEN``; an
updated partition column moves rows to their new partition), written through the core writer
(:mod:`airflow_delta_provider_apps.engine.writer`).

Each candidate file (one that partition pruning and data skipping could not rule out) follows one
of two plans, chosen per file on the driver from its min/max stats (:func:`likely_touched`):

* **One pass**, for a file the stats say is likely touched (the predicate's expected matches,
  estimated from where its literals fall in each column's ``[min, max]``, are at least
  :data:`LIKELY_MATCHES` rows; every file when there is no predicate): all columns are streamed
  once; each batch's mask is computed and counted, and the kept or updated rows go to the writer.
  Batches before the first match are held back (up to ``row_group_bytes``, the writer's own row
  group buffer), so a file that turns out untouched usually writes nothing; past that the writer is
  fed, and when nothing matched in the end the files written are deleted (storage ``delete``) and
  the file is reported untouched.
* **Probe, then rewrite**, for the others: stream only the predicate's columns (row groups whose
  parquet statistics rule the predicate out are not read) and stop at the first batch with a
  match. No match: the file is untouched, nothing is written, its other columns are never read. A
  match: the file is rewritten as in one pass (its predicate columns are read a second time).

On a table that writes deletion vectors (``RewriteSpec.deletion_vectors``) neither plan runs: one
read finds the physical indexes of the matching rows, which join the file's vector
(:meth:`FileRewrite.mark`); only UPDATE's new row versions are written.

An untouched file yields no written file and must not be removed. Counts come out of the passes
themselves (rows in the file, rows matched, rows written), so a command never reads data again to
compute its metrics. In this process the files are rewritten in parallel, by a pool of
``os.cpu_count()`` threads (pyarrow releases the GIL in parquet reading, writing and compute); in
Spark, tasks give the parallelism (:mod:`airflow_delta_provider_apps.engine.spark.rewrite`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrays import numbers, scatter
from ..expr import nodes as n
from ..expr.nodes import Expr
from ..threads import ThreadPool
from ..writer import TableWriter, WriteSpec, WrittenFile
from .common import LIKELY_MATCHES, FileOutcome, discard, has_deletion_vector, marked_deletion_vector, notify

__all__ = ["RewriteSpec", "Bound", "rewrite_file", "rewrite_files", "run_units", "likely_touched"]


@dataclass(frozen=True)
class RewriteSpec:
    """Everything a task needs to rewrite files (small and picklable; expressions travel as the bound
    trees the driver checked, never as text parsed again).

    :param predicate: the bound condition (None: every row matches)
    :param updates: UPDATE's ``((column, bound expression), ...)``; empty for DELETE
    :param deletion_vectors: DELETE and UPDATE mark the matching rows in the file's deletion vector
        (merge-on-read; UPDATE writes the new row versions alone) instead of writing the file again
    :param change_data: write the change data feed's rows of what changed (:mod:`..cdf`): DELETE's
        deleted rows (none with deletion vectors: readers take them from the vectors, as Delta
        does), UPDATE's pre- and post-images
    """

    write: WriteSpec
    predicate: Expr | None
    updates: tuple[tuple[str, Expr], ...] = ()
    column_mapping_mode: str = "none"
    deletion_vectors: bool = False
    change_data: bool = False
    #: row tracking enabled: the rows written keep their stable row ids and commit versions
    #: (:class:`..row_tracking.RowTracking`; ``write.row_tracking`` names the same columns)
    row_tracking: Any = None


# ---------------------------------------------------------------------------------------------
# one file


class Bound:
    """The spec's expressions bound to the table schema (once per task)."""

    def __init__(self, spec: RewriteSpec):
        from ..schema import parse_schema

        self.schema = parse_schema(spec.write.schema_json)
        self.predicate = spec.predicate
        self.updates = dict(spec.updates)
        if self.updates and spec.row_tracking is not None:  # an updated row's commit version is the new file's
            self.updates[spec.row_tracking.commit_version_column] = n.Literal(None, n.LONG)
        self.probe_columns = sorted({p[0] for p in self.predicate.columns()}) if self.predicate else []


class _Clock:
    """Nanoseconds spent reading, evaluating and writing one file."""

    __slots__ = ("read", "eval", "write")

    def __init__(self):
        self.read = self.eval = self.write = 0


def _ms(ns: int) -> int:
    return int(ns // 1_000_000)


def _timed_reads(batches, clock: _Clock) -> Iterator[pa.RecordBatch]:
    """``batches``, the time spent producing each counted as reading; closes them when left early."""
    it = iter(batches)
    try:
        while True:
            started = time.perf_counter_ns()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                clock.read += time.perf_counter_ns() - started
            yield batch
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _mask_count(bound: Bound, batch: pa.RecordBatch) -> tuple[pa.Array | None, int]:
    """(rows where the predicate is TRUE, how many); (None, rows) without a predicate."""
    if bound.predicate is None:
        return None, batch.num_rows
    from ..expr import true_mask

    mask = true_mask(bound.predicate, batch)
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return mask, int(pc.sum(mask).as_py() or 0)


def _apply(bound: Bound, batch: pa.RecordBatch, mask: pa.Array | None, matched: int) -> pa.RecordBatch:
    """What a batch with ``matched`` rows matching becomes: DELETE keeps the rows where the
    predicate is not TRUE; UPDATE takes the ``SET`` values where it is. The ``SET`` expressions are
    evaluated on the matching rows only, as Spark's ``CASE WHEN p THEN e ELSE col END`` does (so a
    value they cannot handle in another row, e.g. a division by zero, is no error)."""
    if not matched:
        return batch
    if not bound.updates:
        if matched == batch.num_rows:
            return batch.slice(0, 0)
        return batch.filter(pc.invert(mask))
    from ..expr import evaluate

    every = mask is None or matched == batch.num_rows
    rows = batch if every else batch.filter(mask)
    columns = []
    for name in batch.schema.names:
        col = batch.column(name)
        expr = bound.updates.get(name)
        if expr is not None:
            new = evaluate(expr, rows)
            new = new.combine_chunks() if isinstance(new, pa.ChunkedArray) else new
            if isinstance(new, pa.Scalar):
                new = pa.repeat(new, rows.num_rows) if new.is_valid else pa.nulls(rows.num_rows, col.type)
            if new.type != col.type:  # (a same-type cast refuses NULL structs with NOT NULL fields, e.g. variants)
                new = new.cast(col.type)
            col = new if every else scatter(col, mask, new)
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


class FileRewrite:
    """One candidate file: how to stream it, and what was found and written."""

    def __init__(self, spec, storage, path, partition_values, deletion_vector, bound, task_id):
        self.spec = spec
        self.storage = storage
        self.path = path
        self.partition_values = dict(partition_values or {})
        self.deletion_vector = deletion_vector
        self.bound = bound
        self.task_id = task_id
        self.clock = _Clock()
        self.out = FileOutcome(path)
        self._changes: TableWriter | None = None

    def record_changes(self, before: pa.RecordBatch, after: pa.RecordBatch | None, mask: pa.Array | None) -> None:
        """The change data feed's rows of one batch (``spec.change_data``): the rows ``mask`` selects
        of ``before`` as deleted, or with UPDATE's ``after`` (the batch with the new values) as
        pre- and post-images."""
        from ..cdf import DELETE, UPDATE_POSTIMAGE, UPDATE_PREIMAGE, change_rows

        if mask is not None:
            before = before.filter(mask)
            after = after.filter(mask) if after is not None else None
        if self._changes is None:
            self._changes = TableWriter(self.spec.write, self.task_id, change_data=True)
        if after is None:
            self.out.changes.extend(self._changes.write(change_rows(before, DELETE)))
            return
        self.out.changes.extend(self._changes.write(change_rows(before, UPDATE_PREIMAGE)))
        self.out.changes.extend(self._changes.write(change_rows(after, UPDATE_POSTIMAGE)))

    def abort(self, writer) -> None:
        """A failed file: the open data and change files closed and deleted (the closed ones are
        discarded by the caller)."""
        for w in (writer, self._changes):
            if w is not None:
                w.abort()

    def finish_changes(self) -> None:
        if self._changes is not None:
            self.out.changes.extend(self._changes.finish())

    def stream(self, columns, row_groups=None, *, row_index: bool = False):
        from ..reader import iter_data_file_batches

        started = time.perf_counter_ns()
        try:
            batches = iter_data_file_batches(
                self.storage,
                self.spec.write.table_uri,
                self.path,
                self.partition_values,
                self.bound.schema,
                list(self.spec.write.partition_columns),
                columns,
                self.deletion_vector,
                column_mapping_mode=self.spec.column_mapping_mode,
                row_groups=row_groups,
                row_index=row_index,
                # every column read is a rewrite: the rows carry their stable ids
                row_tracking=self.spec.row_tracking.of(self.path)
                if columns is None and self.spec.row_tracking is not None
                else None,
            )
        finally:  # opening the file and reading its footer
            self.clock.read += time.perf_counter_ns() - started
        return _timed_reads(batches, self.clock)

    def probe(self) -> bool:
        """Whether any row matches, reading the predicate's columns up to the first match; when
        none does, ``num_rows`` is the file's live row count."""
        from ..expr.skipping import row_groups_may_match

        bound, clock = self.bound, self.clock
        skipped_rows = 0

        def row_groups(metadata):
            nonlocal skipped_rows
            keep = row_groups_may_match(
                metadata, bound.predicate, bound.schema, list(self.spec.write.partition_columns), self.partition_values
            )
            skipped_rows = sum(metadata.row_group(g).num_rows for g, k in enumerate(keep) if not k)
            return keep

        # with a deletion vector, a skipped group's live rows are not known from the footer
        prune = None if has_deletion_vector(self.deletion_vector) else row_groups
        rows = 0
        batches = self.stream(bound.probe_columns, prune)
        try:
            for batch in batches:
                rows += batch.num_rows
                if not batch.num_rows:
                    continue
                started = time.perf_counter_ns()
                _, matched = _mask_count(bound, batch)
                clock.eval += time.perf_counter_ns() - started
                if matched:
                    return True
        finally:
            batches.close()
        self.out.num_rows = rows + skipped_rows
        return False

    def mark(self) -> None:
        """DELETE and UPDATE with deletion vectors: the physical indexes of the live rows matching
        the predicate (row groups its stats rule out are skipped; DELETE reads its columns only)
        join the file's deletion vector, written as a new file; UPDATE writes the new versions of
        those rows, and only them, to new data files. A file left with no live row is removed
        whole instead (``fully_deleted``)."""
        from ..expr.skipping import row_groups_may_match
        from ..reader import ROW_INDEX

        bound, clock, out = self.bound, self.clock, self.out
        physical = 0

        def row_groups(metadata):
            nonlocal physical
            physical = metadata.num_rows
            if bound.predicate is None:
                return None
            parts = list(self.spec.write.partition_columns)
            return row_groups_may_match(metadata, bound.predicate, bound.schema, parts, self.partition_values)

        matched: list[np.ndarray] = []
        writer: TableWriter | None = None
        columns = None if bound.updates else bound.probe_columns
        batches = self.stream(columns, row_groups, row_index=True)
        try:
            for batch in batches:
                out.num_rows += batch.num_rows
                if not batch.num_rows:
                    continue
                started = time.perf_counter_ns()
                mask, count = _mask_count(bound, batch)
                if count:
                    index = batch.column(ROW_INDEX)
                    matched.append((index if mask is None else index.filter(mask)).to_numpy())
                    if bound.updates:  # the updated rows, alone, to new files
                        rows = (batch if mask is None else batch.filter(mask)).drop_columns([ROW_INDEX])
                        updated = _apply(bound, rows, None, count)
                        clock.eval += time.perf_counter_ns() - started
                        started = time.perf_counter_ns()
                        writer = writer or TableWriter(self.spec.write, self.task_id)
                        out.written.extend(writer.write(updated))
                        if self.spec.change_data:
                            self.record_changes(rows, updated, None)
                        clock.write += time.perf_counter_ns() - started
                        continue
                clock.eval += time.perf_counter_ns() - started
            if writer is not None:
                out.written.extend(writer.finish())
            self.finish_changes()
        except BaseException:
            self.abort(writer)
            discard(self.storage, self.spec.write.table_uri, [out])
            raise
        finally:
            batches.close()
        out.num_matched = int(sum(len(m) for m in matched))
        if not out.num_matched:
            return
        started = time.perf_counter_ns()
        table_uri = self.spec.write.table_uri
        vector = marked_deletion_vector(
            self.storage, table_uri, self.deletion_vector, np.concatenate(matched), physical
        )
        out.deletion_vector, out.fully_deleted = vector, vector is None
        clock.write += time.perf_counter_ns() - started

    def rewrite(self) -> None:
        """Read every column once: count, and write the kept/updated rows (see the module docstring)."""
        out, clock, bound = self.out, self.clock, self.bound
        out.num_rows = out.num_matched = 0
        budget = max(1, int(self.spec.write.row_group_bytes))
        writer: TableWriter | None = None
        written: list[WrittenFile] = []
        held: list[pa.RecordBatch] = []
        held_bytes = 0

        def feed(batches) -> None:
            nonlocal writer
            started = time.perf_counter_ns()
            if writer is None:
                writer = TableWriter(self.spec.write, self.task_id)
            for b in batches:
                if b.num_rows:
                    written.extend(writer.write(b))
            clock.write += time.perf_counter_ns() - started

        batches = self.stream(None)
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                started = time.perf_counter_ns()
                mask, matched = _mask_count(bound, batch)
                result = _apply(bound, batch, mask, matched)
                clock.eval += time.perf_counter_ns() - started
                if matched and self.spec.change_data:
                    started = time.perf_counter_ns()
                    self.record_changes(batch, result if bound.updates else None, mask)
                    clock.write += time.perf_counter_ns() - started
                out.num_rows += batch.num_rows
                out.num_matched += matched
                if writer is None and not out.num_matched:  # nothing matched yet: hold the rows back
                    held.append(result)
                    held_bytes += result.nbytes
                    if held_bytes >= budget:  # too much to hold: write them (deleted if untouched)
                        feed(held)
                        held = []
                    continue
                feed([*held, result])
                held = []
            started = time.perf_counter_ns()
            if writer is not None:
                written.extend(writer.finish())
            self.finish_changes()
            if not out.num_matched:  # untouched after all: take back what was written
                discard(self.storage, self.spec.write.table_uri, [FileOutcome(self.path, written=written)])
                out.discarded, written = len(written), []
            clock.write += time.perf_counter_ns() - started
        except BaseException:
            self.abort(writer)
            discard(self.storage, self.spec.write.table_uri, [FileOutcome(self.path, written=written), out])
            raise
        finally:
            batches.close()
        out.written = written


def rewrite_file(
    spec: RewriteSpec,
    storage,
    path: str,
    partition_values: Mapping[str, str | None] | None,
    deletion_vector: Any = None,
    *,
    task_id: int = 0,
    bound: Bound | None = None,
    likely: bool = False,
) -> FileOutcome:
    """Rewrite one file when a row matches (see the module docstring): in one pass when ``likely``
    (or without a predicate), else probe first."""
    f = FileRewrite(spec, storage, path, partition_values, deletion_vector, bound or Bound(spec), task_id)
    out, clock = f.out, f.clock
    started = time.perf_counter_ns()
    if spec.deletion_vectors:  # merge-on-read: one read, rows marked in the file's deletion vector
        out.reads = 1
        f.mark()
        found = clock.read + clock.eval
    elif likely or f.bound.predicate is None:
        out.one_pass, out.reads = True, 1
        f.rewrite()
        found = clock.read + clock.eval
    else:
        out.reads = 1
        touched = f.probe()
        found = time.perf_counter_ns() - started
        if touched:
            out.reads = 2
            f.rewrite()
    total = time.perf_counter_ns() - started
    out.probe_ms = _ms(found)
    out.rewrite_ms = max(0, _ms(total) - out.probe_ms)
    out.read_ms, out.eval_ms, out.write_ms = _ms(clock.read), _ms(clock.eval), _ms(clock.write)
    return out


def rewrite_files(
    spec: RewriteSpec,
    files: pa.Table,
    *,
    task_id: int = 0,
    max_workers: int | None = None,
    one_pass: bool | None = None,
) -> list[FileOutcome]:
    """Rewrite each file of ``files`` (rows of ``snapshot.files``) in this process, in parallel
    across files (``max_workers`` threads, default ``os.cpu_count()``); one outcome per file, in
    the order of ``files``.

    :param one_pass: the plan for every file (True: one pass, False: probe first); None chooses
        per file from its stats (:func:`likely_touched`)
    """
    from ..storage import storage_for

    if files.num_rows == 0:
        return []
    started = time.perf_counter_ns()
    storage = storage_for(spec.write.table_uri)
    bound = Bound(spec)
    if one_pass is None:
        likely = likely_touched(files, bound.schema, list(spec.write.partition_columns), spec.predicate)
    else:
        likely = [bool(one_pass)] * files.num_rows
    has_dv = "deletion_vector" in files.column_names
    rows = files.select(["path", "partition_values"] + (["deletion_vector"] if has_dv else [])).to_pylist()

    def one(i: int) -> FileOutcome:
        row = rows[i]
        pv = dict(row["partition_values"] or [])
        return rewrite_file(
            spec,
            storage,
            row["path"],
            pv,
            row.get("deletion_vector"),
            task_id=task_id,
            bound=bound,
            likely=likely[i],
        )

    sizes = files.column("size").to_pylist() if "size" in files.column_names else None
    outcomes = run_units(storage, spec.write.table_uri, len(rows), one, sizes, max_workers)
    notify(outcomes, _ms(time.perf_counter_ns() - started))
    return outcomes


def run_units(storage, table_uri: str, count: int, one, sizes: list | None, max_workers: int | None) -> list:
    """The one per-file loop in this process: ``one(i)`` for each of ``count`` units (a file of
    DELETE or UPDATE, a bin of OPTIMIZE's files), each giving the outcome of what it wrote, in
    parallel across units (``max_workers`` threads, default ``os.cpu_count()``; the units of the
    most bytes, ``sizes``, first: balanced); the outcomes in unit order. When one fails, the others
    finish (or fail) and every file they wrote is deleted before the error goes on: the command
    fails and what was written is never committed."""
    workers = max(1, min(count, max_workers or os.cpu_count() or 1))
    done: list = []
    try:
        if workers == 1:
            for i in range(count):
                done.append(one(i))
            return done
        order = sorted(range(count), key=lambda i: -((sizes[i] if sizes else 0) or 0))
        with ThreadPool(max_workers=workers, thread_name_prefix="delta-rewrite") as pool:
            futures = {i: pool.submit(one, i) for i in order}
            try:
                return [futures[i].result() for i in range(count)]
            except BaseException:
                for fut in futures.values():
                    fut.cancel()
                pool.shutdown(wait=True)  # the running units finish (or fail) before the cleanup
                done = [f.result() for f in futures.values() if f.done() and not f.cancelled() and not f.exception()]
                raise
    except BaseException:
        discard(storage, table_uri, done)
        raise


# ---------------------------------------------------------------------------------------------
# which files are likely touched (from their stats)


def likely_touched(files: pa.Table, schema, partition_columns: list[str], predicate: Expr | None) -> list[bool]:
    """One flag per file of ``files`` (rows of ``snapshot.files``): its stats say the predicate
    likely matches at least one of its rows, so it is rewritten in one pass.

    The share of a file's rows matching is estimated per file, assuming values spread evenly over
    each column's ``[min, max]`` (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``;
    partition columns are constant per file): ``col < v`` covers ``(v - min) / (max - min)`` of the
    range (counting values for integral types, dates and timestamps), ``col = v`` one value of it,
    ``IN`` the sum of its values, ``IS NULL`` ``nullCount / numRecords``; AND multiplies (a
    conjunct that cannot be estimated constrains nothing), OR and NOT combine as probabilities.
    Strings only count where the bounds decide (outside ``[min, max]``, or ``min = max``). A file
    is likely touched when share x ``numRecords`` >= :data:`LIKELY_MATCHES`. Anything unknown
    (no stats, an expression not understood) is not likely: those files are probed, which is
    always correct. Without a predicate every file is likely touched.
    """
    count = files.num_rows
    if predicate is None:
        return [True] * count
    if count == 0:
        return []
    try:
        est = _Estimate(files, schema, partition_columns, predicate)
        share = est.share(predicate)
        if share is None or est.records is None:
            return [False] * count
        expected = np.nan_to_num(share * est.records, nan=0.0)
        return [bool(x) for x in expected >= LIKELY_MATCHES]
    except Exception:  # only a hint: a failure to estimate means "probe first", always correct
        return [False] * count


_DISCRETE = (*n.INTEGRAL, "date", "timestamp", "timestamp_ntz", "boolean")
_NUMERIC = (*_DISCRETE, *n.FRACTIONAL)


def _is_number(t) -> bool:
    return t.name in n.INTEGRAL or t.name in n.FRACTIONAL or isinstance(t, n.DecimalType)


def _on_one_scale(c: n.Column, lo_arr, hi_arr, values: list) -> tuple | None:
    """A numeric, date or timestamp column's file bounds and ``values`` as float64 on one scale;
    None when a bound or a value is unknown there (or NaN)."""
    try:
        lo, hi = numbers(lo_arr), numbers(hi_arr)
        if _is_number(c.type):  # (decimal bounds are float64: see stats_table)
            v = np.array([float(x) for x in values])
        else:  # dates and timestamps: on the bounds' scale
            v = numbers(pa.array(values, lo_arr.type))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if lo is None or hi is None or v is None or np.isnan(v).any():
        return None
    return lo, hi, v


def _column(e: Expr) -> Expr:
    """The column under numeric casts (``CAST(short_col AS INT)``, float to double, decimal to
    decimal: they keep the order of values, so the column's bounds still apply), else ``e``."""
    while (
        isinstance(e, n.Cast)
        and isinstance(e.child, (n.Column, n.Cast))
        and _is_number(e.type)
        and _is_number(e.child.type)
    ):
        e = e.child
    return e


class _Estimate:
    """Per-file shares of matching rows (float arrays, NaN = unknown for that file)."""

    def __init__(self, files, schema, partition_columns, predicate):
        from ..expr.skipping import partition_table, stats_table

        self.n = files.num_rows
        self.parts = {c.lower(): c for c in partition_columns}
        data_columns = [
            c for c in predicate.column_nodes() if not (len(c.path) == 1 and c.path[0].lower() in self.parts)
        ]
        self.stats = stats_table(files, data_columns)
        self.ptable = partition_table(files, schema, partition_columns) if partition_columns else None
        records = None
        if self.stats is not None:
            records = numbers(self.stats.column("numRecords"))
        self.records = records

    # ---- bounds

    def _leaf(self, top: str, path: tuple[str, ...]) -> pa.Array | None:
        if self.stats is None or top not in self.stats.column_names:
            return None
        col = self.stats.column(top).combine_chunks()
        for p in path:
            if not pa.types.is_struct(col.type) or col.type.get_field_index(p) < 0:
                return None
            col = pc.struct_field(col, [col.type.get_field_index(p)])
        return col

    def bounds(self, c: n.Column) -> tuple[pa.Array | None, pa.Array | None]:
        if len(c.path) == 1 and c.path[0].lower() in self.parts and self.ptable is not None:
            v = self.ptable.column(self.ptable.column_names[list(self.parts).index(c.path[0].lower())])
            v = v.combine_chunks()
            return v, v
        path = c.physical_path or c.path
        return self._leaf("minValues", path), self._leaf("maxValues", path)

    def non_null_share(self, c: n.Column) -> np.ndarray:
        if len(c.path) == 1 and c.path[0].lower() in self.parts:
            lo, _ = self.bounds(c)
            return np.where(np.asarray(lo.is_valid().to_numpy(zero_copy_only=False)), 1.0, 0.0)
        nulls = self._leaf("nullCount", c.physical_path or c.path)
        if nulls is None or self.records is None:
            return np.ones(self.n)
        share = 1.0 - numbers(nulls) / np.maximum(self.records, 1.0)
        return np.nan_to_num(np.clip(share, 0.0, 1.0), nan=1.0)

    # ---- shares

    def share(self, e: Expr) -> np.ndarray | None:
        if isinstance(e, n.And):
            parts = [s for s in (self.share(i) for i in e.items) if s is not None]
            if not parts:
                return None
            known = np.ones(self.n)
            any_known = np.zeros(self.n, dtype=bool)
            for s in parts:
                known = known * np.where(np.isnan(s), 1.0, s)
                any_known |= ~np.isnan(s)
            return np.where(any_known, known, np.nan)
        if isinstance(e, n.Or):
            miss = np.ones(self.n)
            for i in e.items:
                s = self.share(i)
                if s is None:
                    return None
                miss = miss * (1.0 - s)
            return 1.0 - miss
        if isinstance(e, n.Not):
            s = self.share(e.child)
            return None if s is None else 1.0 - s
        if isinstance(e, n.Literal):
            return np.full(self.n, 1.0 if e.value is True else 0.0)
        if isinstance(e, n.IsNull) and isinstance(e.child, n.Column):
            s = 1.0 - self.non_null_share(e.child)
            return 1.0 - s if e.negated else s
        if isinstance(e, n.In) and isinstance(_column(e.child), n.Column):
            s = self._in_share(_column(e.child), [v.value for v in e.values if v.value is not None])
            if s is None:
                return None
            return 1.0 - s if e.negated else s
        if isinstance(e, n.Compare):
            left, right = _column(e.left), _column(e.right)
            if isinstance(left, n.Column) and isinstance(right, n.Literal):
                return self._compare(left, e.op, right)
            if isinstance(right, n.Column) and isinstance(left, n.Literal):
                return self._compare(right, n.FLIPPED[e.op], left)
        return None

    def _in_share(self, c: n.Column, values: list) -> np.ndarray | None:
        """Share of rows equal to one of ``values``: the sum of the equalities' shares (capped at 1),
        from how many values fall within each file's bounds (a binary search, not one pass per value)."""
        if not values:
            return np.zeros(self.n)
        lo_arr, hi_arr = self.bounds(c)
        if lo_arr is None or hi_arr is None:
            return None
        name = c.type.name
        if name in _NUMERIC or isinstance(c.type, n.DecimalType):
            scaled = _on_one_scale(c, lo_arr, hi_arr, values)
            if scaled is None:
                return None
            lo, hi, v = scaled
            v = np.sort(v)
            with np.errstate(invalid="ignore", divide="ignore"):
                if name in _DISCRETE:  # each value inside holds 1/width of the file's rows
                    inside = np.searchsorted(v, hi, side="right") - np.searchsorted(v, lo, side="left")
                    width = hi - lo + 1.0
                    share = np.where(np.isnan(width), np.nan, np.minimum(inside / width, 1.0))
                else:  # continuous: only a file whose min = max = one of the values is known to match
                    hit = (lo == hi) & (np.searchsorted(v, lo, side="left") < np.searchsorted(v, hi, side="right"))
                    share = np.where(np.isnan(hi - lo), np.nan, np.where(hit, 1.0, 0.0))
            return share * self.non_null_share(c)
        if name == "string" and all(isinstance(x, str) for x in values):
            import bisect

            v = sorted(set(values))
            out = np.full(self.n, np.nan)
            for i, (a, b) in enumerate(zip(lo_arr.to_pylist(), hi_arr.to_pylist())):
                if a is None or b is None:
                    continue
                j = bisect.bisect_left(v, a)  # the first value at or above the file's min
                if j == len(v) or (v[j] > b and len(b) < 32):  # a long max may be a truncated prefix
                    out[i] = 0.0
                elif a == b:
                    out[i] = 1.0 if v[j] == a else 0.0
            return out * self.non_null_share(c)
        return None

    def _compare(self, c: n.Column, op: str, lit: n.Literal) -> np.ndarray | None:
        if lit.value is None:
            return np.zeros(self.n) if op != "<=>" else None
        if op == "!=":
            eq = self._compare(c, "=", lit)
            return None if eq is None else (1.0 - eq) * self.non_null_share(c)
        if op not in ("=", "<=>", "<", "<=", ">", ">="):
            return None
        lo_arr, hi_arr = self.bounds(c)
        if lo_arr is None or hi_arr is None:
            return None
        name = c.type.name
        if name in _NUMERIC or isinstance(c.type, n.DecimalType):
            scaled = _on_one_scale(c, lo_arr, hi_arr, [lit.value])
            if scaled is None:
                return None
            lo, hi, v = scaled
            return self._range_share(lo, hi, float(v[0]), op, discrete=name in _DISCRETE) * self.non_null_share(c)
        if name == "string" and isinstance(lit.value, str):
            lo_s, hi_s = lo_arr.to_pylist(), hi_arr.to_pylist()
            out = np.full(self.n, np.nan)
            v = lit.value
            for i, (a, b) in enumerate(zip(lo_s, hi_s)):
                if a is None or b is None:
                    continue
                if op in ("=", "<=>"):
                    if v < a or (v > b and len(b) < 32):  # a long max may be a truncated prefix
                        out[i] = 0.0
                    elif a == b == v:
                        out[i] = 1.0
            return out * self.non_null_share(c)
        return None

    @staticmethod
    def _range_share(lo: np.ndarray, hi: np.ndarray, v: float, op: str, *, discrete: bool) -> np.ndarray:
        """Share of ``[lo, hi]`` where ``x op v`` holds, values spread evenly (NaN where unknown)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            if discrete:
                width = hi - lo + 1.0
                if op in ("=", "<=>"):
                    inside = (v >= lo) & (v <= hi)
                    return np.where(np.isnan(width), np.nan, np.where(inside, 1.0 / width, 0.0))
                if op == "<":
                    covered = v - lo
                elif op == "<=":
                    covered = v - lo + 1.0
                elif op == ">":
                    covered = hi - v
                else:  # >=
                    covered = hi - v + 1.0
                return np.clip(covered / width, 0.0, 1.0)
            width = hi - lo
            if op in ("=", "<=>"):
                return np.where(np.isnan(width), np.nan, np.where((lo == v) & (hi == v), 1.0, 0.0))
            at_bound = {"<": v > lo, "<=": v >= lo, ">": v < hi, ">=": v <= hi}[op]  # when min = max
            share = (v - lo) / width if op in ("<", "<=") else (hi - v) / width
            share = np.where(width > 0, np.clip(share, 0.0, 1.0), np.where(at_bound, 1.0, 0.0))
            return np.where(np.isnan(width), np.nan, share)
