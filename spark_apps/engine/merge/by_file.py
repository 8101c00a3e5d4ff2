"""MERGE file by file, in pure pyarrow (in a Spark task or in this process), as DELETE and UPDATE rewrite.

Used when the ON condition has key equalities (``target.k = <source expression>``) and the source
is small enough to travel to every task as Arrow (:func:`.source.source_row_limit`): no join of the whole
target with the source, no shuffle. Each candidate target file is

1. **probed** (unless NOT MATCHED BY SOURCE clauses must see every row): its key columns and the
   columns of the rest of ON are read, hash-joined with the source's keys (Acero: NULL keys never
   match; ``<=>`` keys carry a NULL flag so NULLs match each other), and the rest of ON evaluated on
   the pairs. The pairs say which source rows the file matches (what inserts need). No pair: the
   file is untouched and its other columns are never read.
2. **rewritten** when a pair exists (or NOT MATCHED BY SOURCE clauses may apply): batch by batch,
   each pair gets the first WHEN MATCHED clause that fires, each unpaired row the first WHEN NOT
   MATCHED BY SOURCE clause; a target row that more than one source row would update or delete is
   Delta's duplicate-match error; updated values are evaluated on their own rows only and scattered
   in place, deleted rows dropped, other rows copied. When no row changed in the end, what was
   written is deleted and the file stays (it is not removed from the table).

Source rows that no target row matched are what WHEN NOT MATCHED clauses may insert
(:func:`inserted_rows`, on the driver). Conditions and values are the trees bound on the driver,
with columns renamed to the positions used here (``__t<i>`` target, ``__s<i>`` source), so both
sides of a pair live in one batch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrays import as_array, numbers, scatter
from ..errors import InvalidArgumentError
from ..expr import nodes as n
from ..rewrite.common import LIKELY_MATCHES, FileOutcome, as_written, discard, marked_deletion_vector
from ..writer import TableWriter, WriteSpec, WrittenFile
from .clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE
from .plan import MAX_PRUNING_VALUES, MergeJob, MergeOutcome, duplicate_match_error, first_firing, source_columns
from .source import duplicate_keys_error, first_duplicate_key

__all__ = [
    "MergeFileOutcome",
    "MergeFilesSpec",
    "PreparedMerge",
    "TouchStreak",
    "execute_by_file",
    "inserted_rows",
    "likely_touched",
    "merge_by_file",
    "merge_file",
    "merge_files",
    "merged_outcome",
    "rewrite_file",
]


#: a key with many source values selects candidate files by at most this many value ranges
MAX_KEY_RANGES = 16


@dataclass(frozen=True)
class MergeFilesSpec:
    """What a task needs (small and picklable; the source travels separately as Arrow).

    :param write: the table's WriteSpec (with the evolved schema under ``merge_schema``)
    :param plan: the bound :class:`.plan.MergePlan`
    :param keys: its key equalities ``(target column, source expression, op)``
        (:func:`.plan.key_equalities`)
    """

    write: WriteSpec
    plan: Any
    keys: tuple = ()
    column_mapping_mode: str = "none"
    #: the target rows a clause changes are marked in their file's deletion vector and only the
    #: updated ones written (merge-on-read), instead of the file written again
    deletion_vectors: bool = False
    #: the changed target rows are written to the change data feed too (:mod:`..cdf`)
    change_data: bool = False
    #: row tracking enabled: rows written keep their stable row ids and commit versions
    #: (:class:`..row_tracking.RowTracking`; ``write.row_tracking`` names the same columns)
    row_tracking: Any = None


@dataclass
class MergeFileOutcome:
    """One candidate file: its live rows, the target rows each clause took (``clause_rows``), the
    source rows it matched (positions in the source), what was written (empty: file untouched)."""

    path: str
    num_rows: int = 0
    changed: int = 0
    clause_rows: dict = field(default_factory=dict)
    matched_source: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    written: list[WrittenFile] = field(default_factory=list)
    probe_ms: int = 0
    rewrite_ms: int = 0
    reads: int = 0
    #: with deletion vectors: the file's new one (descriptor, wire form), or ``fully_deleted``
    deletion_vector: dict | None = None
    fully_deleted: bool = False
    #: the change data feed's files of the file's changed rows
    changes: list[WrittenFile] = field(default_factory=list)

    #: what a per-file task reports (:func:`.common.to_task_row`)
    TASK_COUNTS = ("num_rows", "changed", "probe_ms", "rewrite_ms")
    TASK_EXTRA = (("clause_rows", pa.string()), ("matched", pa.binary()))

    def task_extra(self) -> dict:
        import json

        clause_rows = json.dumps({str(k): int(v) for k, v in self.clause_rows.items()})
        return {"clause_rows": clause_rows, "matched": self.matched_source.astype("int64").tobytes()}

    def from_task_extra(self, row: dict) -> None:
        import json

        self.clause_rows = {int(i): int(k) for i, k in json.loads(row["clause_rows"]).items()}
        self.matched_source = np.frombuffer(row["matched"], dtype=np.int64)

    @property
    def touched(self) -> bool:
        return self.changed > 0

    @property
    def num_written_rows(self) -> int:
        return sum(w.num_rows for w in self.written)


class PreparedMerge:
    """The spec bound for execution (once per task): renamed trees, the source with its key columns."""

    def __init__(self, spec: MergeFilesSpec, source: pa.Table, *, coded: bool = True):
        plan = spec.plan
        self.spec = spec
        self.plan = plan
        self.schema = plan.target_schema
        self.names = [f.name for f in self.schema.fields]
        t_index = {f.name: i for i, f in enumerate(plan.target_schema.fields)}
        s_index = {f.name: i for i, f in enumerate(plan.source_schema.fields)}

        def rename(e):
            if e is None:
                return None

            def one(c: n.Column):
                head = f"__t{t_index[c.path[0]]}" if c.relation == plan.target_alias else f"__s{s_index[c.path[0]]}"
                return replace(c, path=(head, *c.path[1:]), relation=None, physical_path=None)

            return n.map_columns(e, one)

        self.arrow_types = {f.name: f.type for f in self.schema.to_arrow_schema()}
        # one chunk per column, for fast row lookups (a hash join's large source stays in its chunks:
        # combining would copy it whole; take_source looks rows up chunk by chunk)
        self.source = source.combine_chunks() if coded else source
        self._chunks: list[pa.RecordBatch] | None = None
        keys = spec.keys
        key_conjuncts = set()
        for c in n.conjuncts(plan.on):
            for t, s, op in keys:
                if isinstance(c, n.Compare) and c.op == op and {id(c.left), id(c.right)} == {id(t), id(s)}:
                    key_conjuncts.add(id(c))
        rest = [c for c in n.conjuncts(plan.on) if id(c) not in key_conjuncts]
        self.residual = rename(n.and_all(rest)) if rest else None
        self.key_targets = [t.path[0] for t, _s, _op in keys]
        self.null_safe = [op == "<=>" for _t, _s, op in keys]
        # the source's key values (``source_keys``: per key equality, in the target column's type),
        # their distinct values and whether one is NULL; ``coded`` (what pairs() looks up): per key,
        # each value's position among the source's distinct values (a NULL one past them for '<=>';
        # for '=' a NULL never matches); the codes of all keys combine into one integer per row, and
        # the rows are sorted by it. A hash join of the whole source (:mod:`.by_hash`) needs no codes.
        from ..expr import evaluate

        self.source_keys: list[pa.Array] = []
        self.key_sets: list[pa.Array] = []
        self.key_nulls: list[bool] = []
        self.key_dense: list[pa.Array | None] = []  # combined codes re-numbered where they would overflow
        combined, valid = np.zeros(source.num_rows, np.int64), np.ones(source.num_rows, bool)
        for j, (_t, s, _op) in enumerate(keys):
            want = self.arrow_types[_t.path[0]]
            arr = as_array(evaluate(rename(s), self.source), source.num_rows, want).cast(want)
            self.source_keys.append(arr)
            self.key_sets.append(pc.unique(arr.drop_null()))
            self.key_nulls.append(arr.null_count > 0)
            if coded:
                code, ok, size = self._code(j, arr)
                combined, valid, dense = self._combine(combined, valid, code, ok, size, None)
                self.key_dense.append(dense)
        if coded:
            rows = np.flatnonzero(valid)
            order = np.argsort(combined[rows], kind="stable")
            self.source_codes = combined[rows][order]
            self.source_rows = rows[order]
        self.clauses = [
            (c.clause, rename(c.condition), {k: rename(v) for k, v in c.values.items()}) for c in plan.clauses
        ]
        self.changing = {i for i, (c, _, _) in enumerate(self.clauses) if c.action in ("update", "delete")}
        self.codes = plan.codes()
        matched = self.codes[MATCHED]
        only = matched[0] if len(matched) == 1 else None
        # Delta lets several source rows match one target row when the only matched clause is an
        # unconditional delete (every one of them deletes the same row)
        self.lone_delete = (
            only is not None and self.clauses[only][0].action == "delete" and self.clauses[only][1] is None
        )
        self.by_source = bool(self.codes[NOT_MATCHED_BY_SOURCE])
        self.rewrites = bool(self.changing)
        residual_cols = self.residual.columns() if self.residual is not None else []
        probe = {t for t in self.key_targets}
        probe |= {self.names[int(p[0][3:])] for p in residual_cols if p[0].startswith("__t")}
        self.probe_columns = sorted(probe)

    def key_values(self, max_values: int, max_ranges: int = MAX_KEY_RANGES) -> list[tuple]:
        """Per key equality: (its distinct source values when at most ``max_values``, min, max, has
        NULL, ranges), what the candidate-file predicate is made of. ``ranges`` (numbers and dates
        with more values than that): ``[(lo, hi), ...]``, at most ``max_ranges``, split at the widest
        gaps between the sorted values, so that keys in a few clusters (updates of old rows, inserts
        past the last key) select the files of those clusters, not everything in between."""

        out = []
        for values, has_null in zip(self.key_sets, self.key_nulls):
            bounds = pc.min_max(values) if len(values) else None
            lo = bounds["min"].as_py() if bounds is not None else None
            hi = bounds["max"].as_py() if bounds is not None else None
            few = values.to_pylist() if len(values) <= max_values else None
            ranges = None
            if few is None and max_ranges > 1:
                ordered = values.take(pc.sort_indices(values))
                nums = numbers(ordered)
                if nums is not None and len(nums) > 1:
                    cuts = np.sort(np.argsort(-np.diff(nums), kind="stable")[: max_ranges - 1])
                    starts, ends = np.concatenate([[0], cuts + 1]), np.concatenate([cuts, [len(nums) - 1]])
                    ranges = [(ordered[int(a)].as_py(), ordered[int(b)].as_py()) for a, b in zip(starts, ends)]
            out.append((few, lo, hi, has_null, ranges))
        return out

    def take_source(self, rows: np.ndarray) -> pa.Table:
        """The source's rows at positions ``rows``, in that order. From a source in several chunks they
        are taken chunk by chunk and put back in order (Arrow's take of a chunked column concatenates
        its chunks on every call)."""
        if all(c.num_chunks <= 1 for c in self.source.columns):
            return self.source.take(pa.array(rows, pa.int64()))
        if self._chunks is None:  # (a race only builds the same list twice)
            chunks = self.source.to_batches()  # zero-copy slices, aligned across the columns
            self._starts = np.cumsum([0] + [len(b) for b in chunks])
            self._chunks = chunks
        chunks, starts = self._chunks, self._starts
        rows = np.asarray(rows, np.int64)
        which = np.searchsorted(starts, rows, "right") - 1
        order = np.argsort(which, kind="stable")
        ordered = rows[order]
        bounds = np.searchsorted(which[order], np.arange(len(chunks) + 1))
        parts = [
            chunks[c].take(pa.array(ordered[bounds[c] : bounds[c + 1]] - starts[c]))
            for c in range(len(chunks))
            if bounds[c] < bounds[c + 1]
        ]
        taken = pa.Table.from_batches(parts, schema=self.source.schema).combine_chunks()
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return taken.take(pa.array(back))

    def _code(self, j: int, arr) -> tuple[np.ndarray, np.ndarray, int]:
        """Key ``j``'s code per row of ``arr``, whether the row has one, and how many codes there are."""
        values = self.key_sets[j]
        idx = pc.index_in(arr, value_set=values)
        if self.null_safe[j]:
            idx = pc.if_else(pc.is_null(arr), pa.scalar(len(values), idx.type), idx)
        ok = np.asarray(pc.is_valid(idx).to_numpy(zero_copy_only=False), dtype=bool)
        code = np.asarray(pc.fill_null(idx, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return code, ok, len(values) + (1 if self.null_safe[j] else 0)

    _LIMIT = 1 << 62

    def _combine(self, combined, valid, code, ok, size, dense):
        """``combined * size + code``; where that could overflow, the combined codes are first renumbered
        by the source's distinct combinations (``dense``: None when building them from the source)."""
        valid = valid & ok
        top = int(combined.max()) + 1 if len(combined) else 1
        if top * max(size, 1) < self._LIMIT:
            return combined * size + code, valid, None
        if dense is None:  # building: the source's combinations so far become the new codes
            dense = pa.array(np.unique(combined[valid]))
        idx = pc.index_in(pa.array(combined), value_set=dense)
        valid = valid & np.asarray(pc.is_valid(idx).to_numpy(zero_copy_only=False), dtype=bool)
        renumbered = np.asarray(pc.fill_null(idx, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return renumbered * size + code, valid, dense

    # ---- the join

    def pairs(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """(target row, source row) of every pair in ``batch`` (target columns by their names) that
        satisfies ON, ordered by target row then source row: the batch's keys are coded against the
        source's distinct values and looked up in the source's sorted codes (no hash table rebuilt
        per batch, no join plan)."""
        m = batch.num_rows
        combined, valid = np.zeros(m, np.int64), np.ones(m, bool)
        for j, name in enumerate(self.key_targets):
            code, ok, size = self._code(j, batch.column(name))
            dense = self.key_dense[j]
            if dense is not None:
                combined, valid = self._recombine(combined, valid, code, ok, size, dense)
            else:
                combined, valid = combined * size + code, valid & ok
        rows = np.flatnonzero(valid)
        keys = combined[rows]
        lo = np.searchsorted(self.source_codes, keys, "left")
        hi = np.searchsorted(self.source_codes, keys, "right")
        counts = hi - lo
        total = int(counts.sum())
        trow = np.repeat(rows, counts)
        if total:
            starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
            srow = self.source_rows[starts + np.arange(total)]
        else:
            srow = np.empty(0, np.int64)
        if self.residual is not None and len(trow):
            from ..expr import true_mask

            ok = np.asarray(true_mask(self.residual, self.pair_batch(batch, trow, srow)).to_numpy(zero_copy_only=False))
            trow, srow = trow[ok], srow[ok]
        return trow, srow

    @staticmethod
    def _recombine(combined, valid, code, ok, size, dense):
        idx = pc.index_in(pa.array(combined), value_set=dense)
        valid = valid & ok & np.asarray(pc.is_valid(idx).to_numpy(zero_copy_only=False), dtype=bool)
        renumbered = np.asarray(pc.fill_null(idx, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return renumbered * size + code, valid

    def renamed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        arrays = [batch.column(i) for i in range(len(names))]
        # row tracking's materialized columns are not the table's: they keep their names
        position = {c: i for i, c in enumerate(self.names)}
        return pa.RecordBatch.from_arrays(arrays, names=[f"__t{position[c]}" if c in position else c for c in names])

    def pair_batch(self, batch: pa.RecordBatch, trow: np.ndarray, srow: np.ndarray) -> pa.RecordBatch:
        """One row per pair: the target row's columns (``__t<i>``) beside the source row's (``__s<i>``)."""
        t = self.renamed(batch).take(pa.array(trow))
        s = self.take_source(srow)
        return pa.RecordBatch.from_arrays(
            [*t.columns, *(s.column(i).combine_chunks() for i in range(s.num_columns))],
            names=[*t.schema.names, *s.column_names],
        )

    # ---- the clauses

    def first_firing(self, codes: list[int], data: pa.RecordBatch) -> np.ndarray:
        """Per row of ``data``: the first clause of ``codes`` whose condition is TRUE, else -1
        (:func:`first_firing`, evaluated here)."""
        from ..expr import evaluate

        if not codes or data.num_rows == 0:
            return np.full(data.num_rows, -1, dtype=np.int64)
        case = first_firing([(i, self.clauses[i][1]) for i in codes], -1)
        got = as_array(evaluate(case, data), data.num_rows, pa.int64())
        return np.asarray(got.to_numpy(zero_copy_only=False), dtype=np.int64)

    def values(self, i: int, data: pa.RecordBatch | pa.Table, types: Mapping[str, pa.DataType]) -> dict:
        """Clause ``i``'s assignments evaluated on ``data`` (one row per row it sets), in ``types``."""
        from ..expr import evaluate

        out = {}
        for name, expr in self.clauses[i][2].items():
            t = types[name]
            out[name] = as_array(evaluate(expr, data), data.num_rows, t).cast(t)
        return out

    def apply(
        self, batch: pa.RecordBatch, trow: np.ndarray, srow: np.ndarray, out: MergeFileOutcome
    ) -> tuple[pa.RecordBatch, np.ndarray, pa.RecordBatch | None]:
        """``batch`` after the clauses (see the module docstring), per row the clause that changed it
        (-1: none), and with ``spec.change_data`` the change feed's rows of the changes (else None);
        counts into ``out``. With deletion vectors the batch holds only the updated rows (the others
        stay in the file; the changed ones are marked)."""
        m = batch.num_rows
        action = np.full(m, -1, dtype=np.int64)
        pairs_of = None
        winner = np.empty(0, dtype=np.int64)
        if len(trow):
            pb = self.pair_batch(batch, trow, srow)
            act = self.first_firing(self.codes[MATCHED], pb)
            changing = np.isin(act, list(self.changing)) if self.changing else np.zeros(len(act), bool)
            if not self.lone_delete and changing.any():
                per_row = np.bincount(trow[changing], minlength=m)
                if (per_row > 1).any():
                    raise duplicate_match_error()
            # one pair per target row: the one a clause changes it by, else any (the row is copied)
            order = np.lexsort((~changing, trow))
            ordered = trow[order]  # sorted: each target row's first pair starts a run (no hashing)
            first = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
            winner = order[first]
            action[trow[winner]] = act[winner]
            pairs_of = pb
        matched_rows = np.zeros(m, dtype=bool)
        matched_rows[trow] = True
        unmatched = np.flatnonzero(~matched_rows)
        renamed = None
        if self.by_source and len(unmatched):
            renamed = self.renamed(batch)
            sub = renamed.take(pa.array(unmatched))
            action[unmatched] = self.first_firing(self.codes[NOT_MATCHED_BY_SOURCE], sub)
        columns = {name: batch.column(name) for name in batch.schema.names}
        for i in (np.flatnonzero(np.bincount(action + 1)) - 1).tolist():  # the clauses taken, in order
            if i < 0:
                continue
            rows = np.flatnonzero(action == i)
            out.clause_rows[i] = out.clause_rows.get(i, 0) + len(rows)
            out.changed += len(rows)
            if self.clauses[i][0].action != "update":
                continue
            if self.clauses[i][0].kind == MATCHED:
                pick = winner[action[trow[winner]] == i]  # pairs in target-row order
                data = pairs_of.take(pa.array(pick))
            else:
                renamed = renamed if renamed is not None else self.renamed(batch)
                data = renamed.take(pa.array(rows))
            mask = np.zeros(m, dtype=bool)
            mask[rows] = True
            mask = pa.array(mask)
            types = {name: col.type for name, col in columns.items()}
            for name, new in self.values(i, data, types).items():
                columns[name] = scatter(columns[name], mask, new)
        updated = [i for i in self.changing if self.clauses[i][0].action == "update"]
        tracked = self.spec.row_tracking
        if tracked is not None and updated:  # an updated row keeps its id; its commit version is the new file's
            name = tracked.commit_version_column
            columns[name] = pc.if_else(pa.array(np.isin(action, updated)), pa.nulls(m, pa.int64()), columns[name])
        result = pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)
        deleted = [i for i in self.changing if self.clauses[i][0].action == "delete"]
        changes = self.change_rows(batch, result, action, updated, deleted) if self.spec.change_data else None
        if self.spec.deletion_vectors:
            return result.filter(pa.array(np.isin(action, updated))), action, changes
        if deleted:
            keep = ~np.isin(action, deleted)
            if not keep.all():
                result = result.filter(pa.array(keep))
        return result, action, changes

    @staticmethod
    def change_rows(before, after, action: np.ndarray, updated: list, deleted: list) -> pa.RecordBatch | None:
        """The change feed's rows of one batch: deleted rows, and updated rows' pre- and post-images."""
        from ..cdf import DELETE, UPDATE_POSTIMAGE, UPDATE_PREIMAGE, change_rows

        parts = []
        gone = pa.array(np.isin(action, deleted))
        if deleted and gone.true_count:
            parts.append(change_rows(before.filter(gone), DELETE))
        new = pa.array(np.isin(action, updated))
        if updated and new.true_count:
            parts.append(change_rows(before.filter(new), UPDATE_PREIMAGE))
            parts.append(change_rows(after.filter(new), UPDATE_POSTIMAGE))
        if not parts:
            return None
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0] if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------------------------------
# one file


def stream_file(
    prepared: PreparedMerge, storage, path, partition_values, dv, columns, *, row_index=False, row_groups=None
):
    from ..reader import iter_data_file_batches

    return iter_data_file_batches(
        storage,
        prepared.spec.write.table_uri,
        path,
        partition_values,
        prepared.schema,
        list(prepared.spec.write.partition_columns),
        columns,
        dv,
        column_mapping_mode=prepared.spec.column_mapping_mode,
        row_index=row_index,
        row_groups=row_groups,
        # every column read is a rewrite: the rows carry their stable ids
        row_tracking=tracked.of(path) if columns is None and (tracked := prepared.spec.row_tracking) else None,
    )


def merge_file(
    prepared: PreparedMerge,
    storage,
    path: str,
    partition_values: Mapping[str, str | None] | None,
    deletion_vector: Any = None,
    *,
    task_id: int = 0,
    likely: bool | None = False,
) -> MergeFileOutcome:
    """Probe one candidate file, and rewrite it when a clause changes one of its rows; a file
    ``likely`` touched (:func:`likely_touched`, or :class:`TouchStreak` where its stats give no
    estimate) is read once, without the probe."""

    out = MergeFileOutcome(path)
    started = time.perf_counter_ns()
    matched: list[np.ndarray] = []
    pv = dict(partition_values or {})
    probe = not prepared.by_source and not (likely and prepared.rewrites)
    if probe:  # the key (and rest-of-ON) columns only
        out.reads = 1
        rows = 0
        for batch in stream_file(prepared, storage, path, pv, deletion_vector, prepared.probe_columns):
            rows += batch.num_rows
            if batch.num_rows:
                _, srow = prepared.pairs(batch)
                if len(srow):
                    matched.append(srow)
        out.num_rows = rows
        out.matched_source = np.unique(np.concatenate(matched)) if matched else np.empty(0, np.int64)
        if not len(out.matched_source) or not prepared.rewrites:
            out.probe_ms = (time.perf_counter_ns() - started) // 1_000_000
            return out
    out.probe_ms = (time.perf_counter_ns() - started) // 1_000_000
    found = rewrite_file(
        prepared, storage, path, pv, deletion_vector, out, lambda batch, _at: prepared.pairs(batch), task_id
    )
    if not probe:
        out.matched_source = np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)
    out.rewrite_ms = (time.perf_counter_ns() - started) // 1_000_000 - out.probe_ms
    return out


def rewrite_file(
    prepared: PreparedMerge, storage, path: str, pv: dict, deletion_vector, out: MergeFileOutcome, pairs, task_id: int
) -> list[np.ndarray]:
    """Read one candidate file whole, batch by batch, apply the clauses to each batch's pairs
    (``pairs(batch, at)`` -> ``(target rows in the batch, source rows)``, ``at`` the batch's first
    row among the file's live rows) and write the result (copy on write), or mark the changed rows
    in the file's deletion vector and write the updated ones; into ``out``. When no clause changed
    a row, what was written is deleted. Returns the source rows of the pairs, per batch."""
    out.reads += 1
    writer = TableWriter(prepared.spec.write, task_id)
    changes = TableWriter(prepared.spec.write, task_id, change_data=True) if prepared.spec.change_data else None
    written: list[WrittenFile] = []
    rows, found, marked = 0, [], []
    dvs = prepared.spec.deletion_vectors
    from ..reader import ROW_INDEX

    physical = 0

    def footer(metadata):  # the file's physical row count (a deletion vector indexes those); read every group
        nonlocal physical
        physical = metadata.num_rows

    try:
        for batch in stream_file(prepared, storage, path, pv, deletion_vector, None, row_index=dvs, row_groups=footer):
            if not batch.num_rows:
                continue
            if dvs:
                index = batch.column(ROW_INDEX).to_numpy()
                batch = batch.drop_columns([ROW_INDEX])
            trow, srow = pairs(batch, rows)
            rows += batch.num_rows
            if len(srow):
                found.append(srow)
            result, action, changed = prepared.apply(batch, trow, srow, out)
            if dvs:
                marked.append(index[np.isin(action, list(prepared.changing))])
            if result.num_rows:
                written.extend(writer.write(result))
            if changed is not None:
                out.changes.extend(changes.write(changed))
        written.extend(writer.finish())
        if changes is not None:
            out.changes.extend(changes.finish())
        if not out.changed:  # no clause changed a row: the file stays as it is
            discard(storage, prepared.spec.write.table_uri, [FileOutcome(path, written=written)])
            written = []
        elif dvs:
            vector = marked_deletion_vector(
                storage, prepared.spec.write.table_uri, deletion_vector, np.concatenate(marked), physical
            )
            out.deletion_vector, out.fully_deleted = vector, vector is None
    except BaseException:
        for w in (writer, changes):
            if w is not None:
                w.abort()
        discard(storage, prepared.spec.write.table_uri, [FileOutcome(path, written=written, changes=out.changes)])
        raise
    out.num_rows = rows
    out.written = written
    return found


def merge_files(
    prepared: PreparedMerge, files: pa.Table, likely: list[bool | None], *, max_workers: int | None = None
) -> list[MergeFileOutcome]:
    """:func:`merge_file` over ``files`` (rows of ``snapshot.files``) in this process, in parallel
    across files; when one fails, what the others wrote is deleted and the error raised."""
    from ..rewrite.files import run_units
    from ..storage import storage_for

    if files.num_rows == 0:
        return []
    storage = storage_for(prepared.spec.write.table_uri)
    has_dv = "deletion_vector" in files.column_names
    rows = files.select(["path", "partition_values"] + (["deletion_vector"] if has_dv else [])).to_pylist()

    streak = TouchStreak()  # shared by the threads: what one learns, the next file uses

    def one(i: int) -> MergeFileOutcome:
        r = rows[i]
        return streak.merge(
            prepared, storage, r["path"], dict(r["partition_values"] or []), r.get("deletion_vector"), likely[i], 0
        )

    return run_units(storage, prepared.spec.write.table_uri, len(rows), one, None, max_workers)


#: the source rows no target row matched are made into inserted rows this many at a time
INSERT_PART_ROWS = 1 << 20


def inserted_rows(prepared: PreparedMerge, matched: np.ndarray):
    """The rows WHEN NOT MATCHED clauses insert for the source rows no target row matched (positions
    not in ``matched``): per part of at most :data:`INSERT_PART_ROWS` such source rows, the rows in
    the target schema sorted by partition (None: none) and ``{clause: rows}``."""
    codes = prepared.codes[NOT_MATCHED]
    if not codes:
        return
    keep = np.ones(prepared.source.num_rows, dtype=bool)
    keep[matched] = False
    unmatched = np.flatnonzero(keep)
    arrow_schema = prepared.schema.to_arrow_schema()
    partition_columns = list(prepared.spec.write.partition_columns)
    for start in range(0, len(unmatched), INSERT_PART_ROWS):
        data = prepared.take_source(unmatched[start : start + INSERT_PART_ROWS])
        action = prepared.first_firing(codes, data)
        parts, counts = [], {}
        for i in codes:
            rows = np.flatnonzero(action == i)
            if not len(rows):
                continue
            counts[i] = len(rows)
            values = prepared.values(i, data.take(pa.array(rows)), prepared.arrow_types)
            parts.append(pa.table([values[f.name] for f in arrow_schema], schema=arrow_schema))
        table = pa.concat_tables(parts) if parts else None
        if table is not None and partition_columns:
            table = table.sort_by([(c, "ascending") for c in partition_columns])
        yield table, counts


def likely_touched(files: pa.Table, prepared: PreparedMerge) -> list[bool | None]:
    """Per candidate file, whether its stats say source rows likely match some of its rows (then it
    is read once, with no probe): for each key on a data column of a number or date type, the
    source's distinct values inside the file's ``[min, max]`` times the file's density of values
    there (``numRecords / (max - min + 1)``, at most 1) estimates its matches; at least
    :data:`~.rewrite.LIKELY_MATCHES` on any key is likely. None where no key gives an estimate (no
    stats, or keys such as strings whose density the stats cannot tell): :class:`TouchStreak`
    decides as the files are merged. Correct either way; only the cost differs."""
    from ..expr.skipping import stats_table

    count = files.num_rows
    expected = np.zeros(count)
    known = np.zeros(count, dtype=bool)
    parts = {c.lower() for c in prepared.spec.write.partition_columns}
    try:
        for j, name in enumerate(prepared.key_targets):
            if name.lower() in parts:
                continue
            f = prepared.schema.find(name)
            values = numbers(prepared.key_sets[j])
            if values is None or not len(values):
                continue
            stats = stats_table(files, [n.Column((f.name,), f.type)])
            if stats is None or "minValues" not in stats.column_names:
                continue
            lo = numbers(pc.struct_field(stats.column("minValues").combine_chunks(), [0]))
            hi = numbers(pc.struct_field(stats.column("maxValues").combine_chunks(), [0]))
            records = numbers(stats.column("numRecords"))
            if lo is None or hi is None or records is None:
                continue
            values = np.sort(values)
            inside = np.searchsorted(values, hi, "right") - np.searchsorted(values, lo, "left")
            density = np.minimum(1.0, records / np.maximum(hi - lo + 1.0, 1.0))
            estimate = inside * density
            known |= ~np.isnan(estimate)
            expected = np.maximum(expected, np.nan_to_num(estimate, nan=0.0))
    except Exception:  # only a hint: probing is always correct
        return [False] * count
    return [bool(x) if k else None for x, k in zip(expected >= LIKELY_MATCHES, known)]


class TouchStreak:
    """Whether a candidate file with no estimate from its stats (:func:`likely_touched` None) is read
    once or probed first, learnt from the files merged before it by the same worker (a thread pool,
    or one Spark task): once the last :attr:`RUN` files were all changed, the next is read at once;
    a file read at once that no clause changed (its output deleted) sends the worker back to
    probing. Keys spread over every file (string keys of a whole-range table) then cost one read per
    file after the first few, keys clustered in few files a probe of each other file."""

    RUN = 2

    def __init__(self):
        self.streak = 0

    def merge(self, prepared, storage, path, partition_values, deletion_vector, likely, task_id) -> MergeFileOutcome:
        """:func:`merge_file`, the plan taken from ``likely`` or the streak; the outcome teaches it."""
        once = likely if likely is not None else self.streak >= self.RUN
        out = merge_file(prepared, storage, path, partition_values, deletion_vector, task_id=task_id, likely=once)
        if likely is None:  # files decided by their stats teach nothing about the others
            self.streak = self.streak + 1 if out.changed else 0
        return out


# --------------------------------------------------------------------------------------------------
# the by-file executor (in this process, or with Spark tasks handed in)


def execute_by_file(prepared, candidates, *, in_tasks=None, max_workers: int | None = None) -> MergeOutcome:
    """MERGE with the (small) source beside every candidate file: each is probed and, when a clause
    changes one of its rows, rewritten (:func:`merge_file`), in this process's threads (``in_tasks``
    None: the plane chose them), else by ``in_tasks(likely)`` (one Spark job over the files, dealt to
    tasks by bytes as DELETE/UPDATE do; ``max_workers`` threads, default one per core); the inserts
    are written here."""
    started = time.monotonic()
    outcomes: list = []
    if candidates.num_rows:
        likely = likely_touched(candidates, prepared)
        if in_tasks is None:
            outcomes = merge_files(prepared, candidates, likely, max_workers=max_workers)
        else:
            outcomes = in_tasks(likely)
    scan_ms = int((time.monotonic() - started) * 1000)
    matched = np.unique(np.concatenate([np.empty(0, np.int64), *(o.matched_source for o in outcomes)]))
    return merged_outcome(prepared, outcomes, matched, scan_ms)


def merged_outcome(prepared, outcomes: list, matched: np.ndarray, scan_ms: int) -> MergeOutcome:
    """The :class:`MergeOutcome` of the candidate files' ``outcomes``, once the rows WHEN NOT MATCHED
    clauses insert (the source rows not in ``matched``) are written here."""
    started = time.monotonic()
    spec = prepared.spec
    touched, adds, changes, written_rows = [], [], [], 0
    per_action: dict = {}
    vectors = {o.path: o.deletion_vector for o in outcomes if o.changed and o.deletion_vector is not None}
    for o in outcomes:
        if not o.changed:
            continue
        touched.append(o.path)
        adds += [w.add for w in o.written]
        changes += [w.add for w in o.changes]
        written_rows += o.num_written_rows
        for i, k in o.clause_rows.items():
            got = per_action.get(i, (0, 0))[1] + int(k)
            per_action[i] = (got, got)
    from ..identity import fill, identities
    from ..schema import parse_schema

    ids = identities(parse_schema(spec.write.schema_json))
    ids_given: dict = {}
    with_changes = bool(changes)  # a commit with change files has all its changes in them: the inserts too
    writer = TableWriter(spec.write, 0)
    written: list[WrittenFile] = []
    try:
        for table, inserted in inserted_rows(prepared, matched):
            for i, k in inserted.items():
                per_action[i] = (per_action.get(i, (0, 0))[0] + k, 0)
            if table is None:
                continue
            if ids:  # assigned here, so that the data and the change feed hold the same values
                table = pa.Table.from_batches([fill(ids, b, 0, ids_given) for b in table.to_batches()])
            for batch in table.to_batches():
                written.extend(writer.write(batch))
            if with_changes:
                changes += [w.add for w in inserted_changes(spec.write, table)]
        written.extend(writer.finish())
    except BaseException:  # e.g. an insert breaking a CHECK constraint: nothing of this MERGE stays
        writer.abort()
        leftover = [*[w.add for w in written], *adds, *changes]
        discard(writer.storage, spec.write.table_uri, [*outcomes, FileOutcome("", written=as_written(leftover))])
        raise
    adds += [w.add for w in written]
    written_rows += sum(w.num_rows for w in written)
    rewrite_ms = int((time.monotonic() - started) * 1000)
    return MergeOutcome(touched, adds, written_rows, per_action, scan_ms, rewrite_ms, vectors, changes)


def inserted_changes(write_spec, table) -> list:
    """The change feed's files of MERGE's inserted rows (``table``, in the target's columns)."""
    from ..cdf import INSERT, change_rows
    from ..writer import TableWriter

    writer = TableWriter(write_spec, 0, change_data=True)
    written = []
    for batch in table.to_batches():
        written.extend(writer.write(change_rows(batch, INSERT)))
    written.extend(writer.finish())
    return written


def merge_by_file(job: MergeJob, local: pa.Table, run) -> MergeOutcome:
    """MERGE ``job`` with its source held as ``local`` (one Arrow table, columns ``__s<i>``) beside
    every candidate file: the source's key values select the candidates, a key of ``job.unique_keys``
    held twice is refused, then ``run(prepared, candidates)`` (the plane's threads or tasks:
    :func:`execute_by_file`) merges them."""
    if not job.keys:
        raise InvalidArgumentError(
            "A MERGE without Spark needs ON to equate a target column with a source column",
            f"ON is {job.on!r}: without such a key every source row would be compared with every target row",
            "add a key equality (target.k = source.k) to ON, or run the MERGE with a Spark session",
        )
    prepared = PreparedMerge(job.spec, local)
    names, columns = source_columns(job.plan.source_schema, list(job.unique_keys))
    dup = first_duplicate_key(local, columns) if columns else None
    if dup is not None:
        raise duplicate_keys_error(names, dup)
    candidates = job.select(local.num_rows, prepared.key_values(MAX_PRUNING_VALUES), "file_by_file")
    return run(prepared, candidates)
