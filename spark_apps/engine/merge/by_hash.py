"""MERGE by one hash join in this process (issue 44): a source held as Arrow, too large for
:mod:`.by_file` to look its keys up batch by batch (which hashes the source's key values once per
target batch), joined with the candidate files on Arrow's own multi-threaded engine (Acero).

1. **Keys** (``scan_ms``): the candidate files' key columns (and the target columns the rest of ON
   reads) are read in this process's threads, file after file, each row tagged with its file and
   its position among the file's live rows, and stream into one Acero hash join whose build side is
   the source's key values, hashed once (a ``<=>`` key carries a NULL flag, so NULLs match each other;
   with ``=`` a NULL never matches). The rest of ON is evaluated on the pairs. The pairs say which
   files a clause may change, which source rows matched (the others are what WHEN NOT MATCHED
   clauses insert), and which target rows matched more than once: when the first WHEN MATCHED
   clause changes every matched row, that is Delta's duplicate-match error, raised before anything
   is written.
2. **Rows** (``rewrite_ms``): only the files with a pair (every candidate when WHEN NOT MATCHED BY
   SOURCE clauses may apply) are read whole, batch by batch, and go through the clause code of
   :mod:`.by_file` (:func:`.by_file.rewrite_file`) with their pairs: written again (copy on
   write), or their changed rows marked in deletion vectors and only the updated rows written.

**Memory**, by design: the source as the plane holds it, its key values' hash table (Acero's), the
matched pairs (20 bytes each: file, row, source row), at most :data:`READ_AHEAD` files' key columns
waiting for the join per thread, and per thread one batch of a file with its writer's row-group
buffer. The target is never held whole, and nothing is collected because it seems small.

Which MERGE goes here is the plane's rule (:func:`joins_by_hash`): a source of more than
:data:`HASH_JOIN_ROWS` rows merged in this process (the in-process plane; a Spark plane whose file
work runs in its driver: a local master).
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..progress import report
from .by_file import MergeFileOutcome, PreparedMerge, merged_outcome, rewrite_file, stream_file
from .clauses import MATCHED
from .plan import MAX_PRUNING_VALUES, MergeJob, MergeOutcome, duplicate_match_error, source_columns
from .source import duplicate_keys_error, first_duplicate_key

__all__ = ["HASH_JOIN_ROWS", "STRATEGY", "joins_by_hash", "merge_by_hash"]

log = logging.getLogger(__name__)

#: a source of more rows than this, merged in this process, is joined by hash (below it, file by
#: file: each target batch looks the few source keys up, and a file that is likely touched is read
#: once instead of probed first)
HASH_JOIN_ROWS = 100_000
#: files whose key columns are read ahead of the join, per thread
READ_AHEAD = 2
#: the strategy's name in the MERGE's result (``strategy``) and its progress events
STRATEGY = "hash_join"


def joins_by_hash(job: MergeJob, num_source_rows: int) -> bool:
    """The rule: a MERGE merged in this process whose ON equates keys (as file by file needs) and
    whose source has more than :data:`HASH_JOIN_ROWS` rows is joined by hash; logged either way."""
    chosen = bool(job.keys) and num_source_rows > HASH_JOIN_ROWS
    log.info(
        "MERGE in this process: %s (%s source rows, hash join above %s)",
        STRATEGY if chosen else "file_by_file",
        f"{num_source_rows:,}",
        f"{HASH_JOIN_ROWS:,}",
    )
    return chosen


def merge_by_hash(job: MergeJob, local: pa.Table, *, max_workers: int | None = None) -> MergeOutcome:
    """MERGE ``job`` with its source held as ``local`` (columns ``__s<i>``) by one hash join with the
    candidate files (see the module docstring), in ``max_workers`` threads (default one per core)."""
    prepared = PreparedMerge(job.spec, local, coded=False)
    names, columns = source_columns(job.plan.source_schema, list(job.unique_keys))
    dup = first_duplicate_key(local, columns) if columns else None
    if dup is not None:
        raise duplicate_keys_error(names, dup)
    candidates = job.select(local.num_rows, prepared.key_values(MAX_PRUNING_VALUES), STRATEGY)
    workers = max(1, max_workers or os.cpu_count() or 1)
    from ..storage import storage_for

    storage = storage_for(job.spec.write.table_uri)
    has_dv = "deletion_vector" in candidates.column_names
    files = candidates.select(
        ["path", "partition_values", "size"] + (["deletion_vector"] if has_dv else [])
    ).to_pylist()
    started = time.monotonic()
    pairs = _pairs(prepared, storage, files, workers) if files else _Pairs.empty()
    _check_duplicates(prepared, pairs)
    scan_ms = int((time.monotonic() - started) * 1000)
    touched = pairs.files()
    report("MERGE", "matched", pairs=len(pairs.file), files=len(touched), ms=scan_ms)
    started = time.monotonic()
    if prepared.by_source:
        rewrite = list(range(len(files)))
    elif prepared.rewrites:
        rewrite = touched
    else:  # inserts only: the pairs tell which source rows not to insert
        rewrite = []
    outcomes = _rewrite(prepared, storage, files, rewrite, pairs, workers)
    rewrite_ms = int((time.monotonic() - started) * 1000)
    outcome = merged_outcome(prepared, outcomes, pairs.source, scan_ms)
    outcome.rewrite_ms += rewrite_ms
    return outcome


# --------------------------------------------------------------------------------------------------
# 1. the keys


class _Pairs:
    """The pairs that satisfy ON, sorted by file, target row, source row."""

    def __init__(self, file: np.ndarray, row: np.ndarray, source: np.ndarray):
        # one sort of a combined key (file in the high bits: a file holds fewer than 2**40 rows)
        order = np.argsort((file.astype(np.int64) << 40) | row, kind="stable")
        self.file, self.row, self.source = file[order], row[order], source[order]

    @classmethod
    def empty(cls) -> _Pairs:
        return cls(np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int64))

    def files(self) -> list[int]:
        """The files with a pair."""
        if not len(self.file):
            return []
        return self.file[np.flatnonzero(np.diff(self.file, prepend=-1))].tolist()

    def of(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """File ``i``'s pairs: (target rows, source rows)."""
        lo, hi = np.searchsorted(self.file, [i, i + 1])
        return self.row[lo:hi], self.source[lo:hi]

    def twice(self) -> bool:
        """Whether a target row is in more than one pair."""
        same = (self.file[1:] == self.file[:-1]) & (self.row[1:] == self.row[:-1])
        return bool(same.any())


def _key_arrays(prepared: PreparedMerge, keys: list[pa.Array]) -> dict[str, pa.Array]:
    """The join's key columns from one side's key values (in :func:`.plan.key_equalities`' order):
    ``__k<j>``, and for a ``<=>`` key its NULL flag ``__n<j>`` with the NULLs filled (so that they
    are equal)."""
    out = {}
    for j, (arr, null_safe) in enumerate(zip(keys, prepared.null_safe)):
        if null_safe:
            flag = pc.is_null(arr)
            out[f"__n{j}"] = flag
            arr = pc.if_else(flag, _filler(arr.type), arr) if arr.null_count else arr
        out[f"__k{j}"] = arr
    return out


def _filler(t: pa.DataType) -> pa.Scalar:
    """Any non-NULL value of a key type (numbers, dates, strings, booleans)."""
    try:
        return pa.scalar(0).cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.scalar("").cast(t)


def _target_columns(prepared: PreparedMerge) -> list[str]:
    """The target columns (``__t<i>``) the rest of ON reads."""
    if prepared.residual is None:
        return []
    return sorted({p[0] for p in prepared.residual.columns() if p[0].startswith("__t")})


def _probe_batch(prepared: PreparedMerge, batch: pa.RecordBatch, i: int, at: int, keep: list[str]) -> pa.RecordBatch:
    """A batch of file ``i``'s probe columns (its rows from position ``at``) in the join's form."""
    m = batch.num_rows
    keys = [batch.column(name) for name in prepared.key_targets]
    cols = _key_arrays(prepared, [k.cast(prepared.arrow_types[name]) for k, name in zip(keys, prepared.key_targets)])
    cols["__file"] = pa.array(np.full(m, i, np.int32))
    cols["__row"] = pa.array(np.arange(at, at + m, dtype=np.int64))
    renamed = prepared.renamed(batch)
    for name in keep:
        cols[name] = renamed.column(name)
    return pa.RecordBatch.from_pydict(cols)


def _pairs(prepared: PreparedMerge, storage, files: list[dict], workers: int) -> _Pairs:
    """Phase 1: the candidate files' probe columns (read in ``workers`` threads, at most
    :data:`READ_AHEAD` files ahead each) joined by hash with the source's keys; the rest of ON
    evaluated on the pairs."""
    import pyarrow.acero as ac

    from ..threads import ThreadPool

    keep = _target_columns(prepared)
    source = pa.table(
        {**_key_arrays(prepared, prepared.source_keys), "__srow": pa.array(np.arange(prepared.source.num_rows))}
    )
    keys = [c for c in source.column_names if c != "__srow"]
    context = contextvars.copy_context()  # the caller's (object-store settings): Acero pulls in its own threads

    def read(i: int) -> list[pa.RecordBatch]:
        r, out, at = files[i], [], 0
        pv = dict(r["partition_values"] or [])
        for batch in stream_file(prepared, storage, r["path"], pv, r.get("deletion_vector"), prepared.probe_columns):
            if batch.num_rows:
                out.append(_probe_batch(prepared, batch, i, at, keep))
                at += batch.num_rows
        return out

    first = read(0)  # its schema is the join's (and the first file's batches start the stream)
    schema = first[0].schema if first else _probe_batch(prepared, _empty(prepared), 0, 0, keep).schema

    def batches():
        yield from first
        with ThreadPool(max_workers=workers, thread_name_prefix="delta-merge-keys") as pool:
            pending: deque = deque()
            try:
                for i in range(1, len(files)):
                    pending.append(pool.submit(context.copy().run, read, i))
                    if len(pending) >= READ_AHEAD * workers:
                        yield from pending.popleft().result()
                while pending:
                    yield from pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    join = ac.Declaration(
        "hashjoin",
        ac.HashJoinNodeOptions("inner", keys, keys, left_output=["__file", "__row", *keep], right_output=["__srow"]),
        inputs=[
            ac.Declaration("record_batch_reader_source", ac.RecordBatchReaderSourceNodeOptions(reader)),
            ac.Declaration("table_source", ac.TableSourceNodeOptions(source)),
        ],
    )
    file, row, src = [], [], []
    for b in join.to_reader(use_threads=True):
        if not b.num_rows:
            continue
        if prepared.residual is not None:
            b = b.filter(_residual_mask(prepared, b, keep))
        file.append(b.column("__file").to_numpy())
        row.append(b.column("__row").to_numpy())
        src.append(b.column("__srow").to_numpy())
    if not file:
        return _Pairs.empty()
    return _Pairs(np.concatenate(file), np.concatenate(row), np.concatenate(src))


def _empty(prepared: PreparedMerge) -> pa.RecordBatch:
    """No rows, in the probe columns' types (the join's schema when the first file has no live row)."""
    schema = pa.schema([pa.field(n, prepared.arrow_types[n]) for n in prepared.probe_columns])
    return pa.RecordBatch.from_pylist([], schema=schema)


def _residual_mask(prepared: PreparedMerge, joined: pa.RecordBatch, keep: list[str]) -> pa.Array:
    """Whether each joined pair satisfies the rest of ON (its target columns beside its source row's)."""
    from ..expr import true_mask

    s = prepared.take_source(joined.column("__srow").to_numpy())
    pairs = pa.RecordBatch.from_arrays(
        [*(joined.column(c) for c in keep), *(s.column(i).combine_chunks() for i in range(s.num_columns))],
        names=[*keep, *s.column_names],
    )
    return true_mask(prepared.residual, pairs)


def _check_duplicates(prepared: PreparedMerge, pairs: _Pairs) -> None:
    """Delta's duplicate-match error before anything is written, when the first WHEN MATCHED clause
    changes every matched row (no condition) and a target row matched twice; under conditions the
    rewrite finds it (:meth:`.by_file.PreparedMerge.apply`), and its files are discarded."""
    matched = prepared.codes[MATCHED]
    if not matched or prepared.lone_delete or not len(pairs.file):
        return
    first = matched[0]
    if prepared.clauses[first][1] is None and first in prepared.changing and pairs.twice():
        raise duplicate_match_error()


# --------------------------------------------------------------------------------------------------
# 2. the rows


def _rewrite(
    prepared: PreparedMerge, storage, files: list[dict], rewrite: list[int], pairs: _Pairs, workers: int
) -> list[MergeFileOutcome]:
    """Phase 2: files ``rewrite`` (indices into ``files``) through the clauses with their pairs, in
    ``workers`` threads (the one per-file loop, :func:`..rewrite.files.run_units`); when one fails,
    what the others wrote is deleted and the error raised."""
    from ..rewrite.files import run_units

    if not rewrite:
        return []

    def one(i: int) -> MergeFileOutcome:
        r = files[i]
        out = MergeFileOutcome(r["path"])
        rows, src = pairs.of(i)
        started = time.perf_counter_ns()

        def of_batch(batch, at):
            lo, hi = np.searchsorted(rows, [at, at + batch.num_rows])
            return rows[lo:hi] - at, src[lo:hi]

        pv = dict(r["partition_values"] or [])
        rewrite_file(prepared, storage, r["path"], pv, r.get("deletion_vector"), out, of_batch, 0)
        out.matched_source = src
        out.rewrite_ms = (time.perf_counter_ns() - started) // 1_000_000
        return out

    sizes = [files[i]["size"] for i in rewrite]  # the big ones first: no thread left alone with one last
    return run_units(storage, prepared.spec.write.table_uri, len(rewrite), lambda k: one(rewrite[k]), sizes, workers)
