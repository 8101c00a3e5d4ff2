"""DELETE and UPDATE: one algorithm over a snapshot, after Delta's DeleteCommand and UpdateCommand.

1. **Check before anything is read or written**: the writer feature gate, ``delta.appendOnly``
   (refused), the predicate and the ``SET`` expressions parsed and bound to the table schema
   (:mod:`airflow_delta_provider_apps.engine.expr`; unknown columns, bad types and bad literals are errors here).
2. **Open the transaction on the snapshot** the command was given (no reload), with Delta's
   ``operationParameters`` (``predicate`` as a JSON list of Spark SQL text).
3. **Find the candidate files** (:func:`airflow_delta_provider_apps.engine.expr.skipping.skip_files`): partition values
   decide partition conjuncts exactly; min/max/nullCount stats drop files that cannot match. What was
   read is registered on the transaction (the predicate and the candidate files), so a concurrent
   commit that adds matching files or removes a candidate is a conflict.
4. **DELETE without a data condition** (no predicate, or one on partition columns only) removes the
   candidate files from metadata alone: no data is read; ``numDeletedRows`` comes from the files'
   stats when every removed file has ``numRecords``.
5. **Otherwise each candidate file is probed and, when touched, rewritten**
   (:mod:`airflow_delta_provider_apps.engine.rewrite`) by the command's data plane (:mod:`..plane`: in
   this process, or in Spark tasks): untouched files are neither removed nor rewritten.
6. **Commit** ``remove`` (touched files) + ``add`` (rewritten files) atomically. When nothing matches,
   no commit is made and the result carries the snapshot's version.

Metrics use Delta's names (:class:`~.result.DeleteMetrics`, :class:`~.result.UpdateMetrics`);
``numCopiedRows`` are the rows of touched files written back unchanged, so for DELETE
``rows of removed files = numDeletedRows + numCopiedRows`` and for UPDATE
``rows of removed files = numUpdatedRows + numCopiedRows``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..actions import RemoveFile
from ..commit_identity import TxnIdentity
from ..errors import InvalidArgumentError
from ..plane import in_process_plane
from ..progress import report
from .base import Command
from .reads import reads_snapshot_files
from .result import CommandResult, DeleteMetrics, Stopwatch, UpdateMetrics

__all__ = [
    "delete",
    "update",
    "removes_for",
    "rewrite_candidates",
    "apply_outcomes",
    "kept_with_deletion_vectors",
]


def removes_for(files: pa.Table, *, data_change: bool = True, now_ms: int | None = None) -> list[RemoveFile]:
    """RemoveFile actions for rows of ``snapshot.files`` (with their partition values, size, stats
    and deletion vector, so readers of the log can account for what was removed)."""
    from ..actions import DeletionVectorDescriptor

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    wanted = [
        c for c in ("path", "partition_values", "size", "stats", "tags", "deletion_vector") if c in files.column_names
    ]
    out = []
    for row in files.select(wanted).to_pylist():
        dv = row.get("deletion_vector")
        out.append(
            RemoveFile(
                path=row["path"],
                data_change=data_change,
                deletion_timestamp=now_ms,
                extended_file_metadata=True,
                partition_values=dict(row.get("partition_values") or []),
                size=row.get("size"),
                stats=row.get("stats"),
                tags=dict(row["tags"]) if row.get("tags") else None,
                deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv else None,
            )
        )
    return out


def _sum(files: pa.Table, column: str) -> int:
    return int(pc.sum(files.column(column)).as_py() or 0) if files.num_rows else 0


def _stats_records(files: pa.Table) -> int | None:
    """Total ``numRecords`` of ``files`` from their stats; None when any file lacks it."""
    if files.num_rows == 0:
        return 0
    from ..expr.skipping import stats_table

    st = stats_table(files, [])
    if st is None:
        return None
    records = st.column("numRecords")
    if records.null_count:
        return None
    deleted = 0  # rows a deletion vector already removed are counted in numRecords, not live
    if "deletion_vector" in files.column_names:
        cardinality = pc.struct_field(files.column("deletion_vector").combine_chunks(), "cardinality")
        deleted = int(pc.sum(cardinality).as_py() or 0)
    return int(pc.sum(records).as_py() or 0) - deleted


class _Plan(Command):
    """A DML command on the skeleton (:mod:`.base`): its predicate bound, its candidate files found."""

    def __init__(self, snapshot, operation: str, predicate: str | None, *, plane, identity: TxnIdentity | None):
        from ..expr import parse_predicate, to_sql

        self.schema = snapshot.schema
        self.partition_columns = list(snapshot.metadata.partition_columns or [])
        self.plane = plane or in_process_plane()
        super().__init__(snapshot, operation, None, removes_rows=f"{operation} rows of", identity=identity)
        self.predicate = parse_predicate(predicate, self.schema) if predicate is not None else None
        self.predicate_sql = to_sql(self.predicate) if self.predicate is not None else None
        self.set_parameters(predicate=json.dumps([self.predicate_sql] if self.predicate_sql else []))

    def candidates(self, metrics) -> pa.Table:
        """Skip files and register the read on the transaction; fills the skipping metrics."""
        from ..expr.skipping import skip_files

        files = self.snapshot.files
        if self.predicate is None:
            kept = files
            before_bytes = after_bytes = _sum(files, "size")
            metrics.num_files_before_skipping = metrics.num_files_after_skipping = files.num_rows
        else:
            result = skip_files(files, self.schema, self.partition_columns, self.predicate)
            kept = result.files
            before_bytes, after_bytes = result.num_bytes_before, result.num_bytes_after
            metrics.num_files_before_skipping = result.num_files_before
            metrics.num_files_after_skipping = result.num_files_after
        self.read_rows(self.predicate)
        metrics.num_bytes_before_skipping = before_bytes
        metrics.num_bytes_after_skipping = after_bytes
        self.read_files(kept)
        report(self.operation, "files", table=files.num_rows, candidates=kept.num_rows, bytes=after_bytes)
        return kept

    def rewrite(self, files: pa.Table, updates: tuple = ()) -> list:
        return rewrite_candidates(self.snapshot, self.plane, self.predicate, files, updates)


def rewrite_candidates(snapshot, plane, predicate, files: pa.Table, updates: tuple = ()) -> list:
    """Probe ``files`` and rewrite the touched ones (:mod:`airflow_delta_provider_apps.engine.rewrite`)
    on ``plane``; one FileOutcome per file."""
    from ..features import writes_change_data, writes_deletion_vectors
    from ..rewrite import RewriteSpec
    from ..row_tracking import for_rewrite
    from ..writer import table_write_spec

    rows = for_rewrite(snapshot, files)
    spec = RewriteSpec(
        write=table_write_spec(snapshot, row_tracking=rows and (rows.row_id_column, rows.commit_version_column)),
        predicate=predicate,
        updates=tuple(updates),
        column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
        deletion_vectors=writes_deletion_vectors(snapshot.protocol, snapshot.metadata),
        change_data=writes_change_data(snapshot.metadata),
        row_tracking=rows,
    )
    return plane.rewrite_files(spec, files)


def apply_outcomes(watch: Stopwatch, candidates: pa.Table, outcomes: list, metrics) -> tuple[list, list, int, int]:
    """Removes and adds of the touched files; fills the file/byte/time metrics; returns them with
    the rows matched and the rows written. A file whose rows went into a new deletion vector is
    removed with its old one and added again with the new one (the same data file). The change
    data feed's files come last in the adds."""
    touched = [o for o in outcomes if o.touched]
    touched_paths = pa.array([o.path for o in touched], pa.string())
    removed = candidates.filter(pc.is_in(candidates.column("path"), value_set=touched_paths))
    written_files = [w.add for o in touched for w in o.written]
    adds, leaving = list(written_files), removed  # leaving: not added back with a deletion vector
    if any(o.marked for o in touched):
        new_dvs = {o.path: o.deletion_vector for o in touched if o.deletion_vector is not None}
        re_adds, leaving, counts = kept_with_deletion_vectors(removed, new_dvs)
        adds += re_adds
        metrics.num_deletion_vectors_added, metrics.num_deletion_vectors_updated = counts[:2]
        metrics.num_deletion_vectors_removed = counts[2]
    metrics.num_removed_files = leaving.num_rows
    metrics.num_removed_bytes = _sum(leaving, "size")
    metrics.num_added_files = len(written_files)
    metrics.num_added_bytes = sum(a.size for a in written_files)
    changes = [w.add for o in touched for w in o.changes]
    metrics.num_added_change_files = len(changes)
    adds += changes
    matched = sum(o.num_matched for o in touched)
    written = sum(o.num_written_rows for o in touched)
    probe = sum(o.probe_ms for o in outcomes)
    rewrite = sum(o.rewrite_ms for o in outcomes)
    # the two phases run fused in the same tasks: split the wall time by the tasks' own shares
    wall = watch.elapsed_ms()
    metrics.scan_time_ms = int(wall * probe / (probe + rewrite)) if probe + rewrite else 0
    metrics.rewrite_time_ms = int(wall * rewrite / (probe + rewrite)) if probe + rewrite else 0
    return removes_for(removed), adds, matched, written


def with_deletion_vectors(files: pa.Table, new_dvs: dict) -> list:
    """``files`` (rows of ``snapshot.files``) as adds carrying their new deletion vectors. Their
    stats still describe every physical row, so they are marked ``tightBounds: false`` (min/max
    still bound the live rows; null counts may not), as Delta does."""
    import dataclasses

    from ..actions import DeletionVectorDescriptor
    from ..log.snapshot import add_from_row

    out = []
    for row in files.to_pylist(maps_as_pydicts="lossy"):
        add = add_from_row(row)
        stats = add.stats
        if stats:
            parsed = json.loads(stats)
            parsed["tightBounds"] = False
            stats = json.dumps(parsed, separators=(",", ":"))
        dv = DeletionVectorDescriptor.from_json(new_dvs[add.path])
        out.append(dataclasses.replace(add, deletion_vector=dv, stats=stats, data_change=True))
    return out


def kept_with_deletion_vectors(removed: pa.Table, new_dvs: dict) -> tuple[list, pa.Table, tuple[int, int, int]]:
    """What becomes of the files a command removed (rows of ``snapshot.files``) when some of them
    got a new deletion vector (``new_dvs``: path -> descriptor): their re-adds with it, the files
    that leave the table, and Delta's deletion-vector counts (added, updated, removed)."""
    kept = pc.is_in(removed.column("path"), value_set=pa.array(list(new_dvs), pa.string()))
    re_adds = with_deletion_vectors(removed.filter(kept), new_dvs)
    return re_adds, removed.filter(pc.invert(kept)), deletion_vector_counts(removed, kept)


def deletion_vector_counts(removed: pa.Table, kept: pa.Array) -> tuple[int, int, int]:
    """Delta's deletion-vector counts over the files a command removed, ``kept`` marking those added
    back with a new vector: added (the file had none), updated (it had one), removed (a file with
    one left the table whole)."""
    if "deletion_vector" in removed.column_names:
        had = pc.is_valid(removed.column("deletion_vector"))
    else:
        had = pa.array([False] * removed.num_rows, pa.bool_())

    def count(mask) -> int:
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)

    return count(pc.and_(kept, pc.invert(had))), count(pc.and_(kept, had)), count(pc.and_(pc.invert(kept), had))


@reads_snapshot_files("DELETE")
def delete(snapshot, predicate: str | None = None, *, plane=None, identity: TxnIdentity | None = None) -> CommandResult:
    """DELETE FROM the table WHERE ``predicate`` (all rows when None); see the module docstring.

    :param snapshot: the table's snapshot to read at (the transaction opens on it)
    :param predicate: Spark SQL condition, e.g. ``dt = '2026-01-01' AND id <= 4``
    :param plane: the data plane (:mod:`..plane`) that rewrites files; None: this process
    :param identity: the run's transaction identity
    """
    from ..expr.skipping import is_partition_only

    plan = _Plan(snapshot, "DELETE", predicate, plane=plane, identity=identity)
    metrics = DeleteMetrics()
    if plan.duplicate:
        return plan.skipped(metrics)
    candidates = plan.candidates(metrics)
    if plan.predicate is None or is_partition_only(plan.predicate, plan.partition_columns):
        # metadata only: every candidate file matches entirely (partition pruning is exact)
        if candidates.num_rows == 0:
            return plan.unchanged(metrics)
        metrics.num_removed_files = candidates.num_rows
        metrics.num_removed_bytes = _sum(candidates, "size")
        metrics.num_deleted_rows = _stats_records(candidates)
        return plan.commit(removes_for(candidates), metrics)
    outcomes = plan.rewrite(candidates)
    removes, adds, matched, written = apply_outcomes(plan.watch, candidates, outcomes, metrics)
    report("DELETE", "rewritten", files=len(removes), matched=matched)
    metrics.num_deleted_rows = matched
    metrics.num_copied_rows = written
    if not removes:
        return plan.unchanged(metrics)
    return plan.commit([*removes, *adds], metrics)


@reads_snapshot_files("UPDATE")
def update(
    snapshot,
    updates: Mapping[str, str],
    predicate: str | None = None,
    *,
    plane=None,
    identity: TxnIdentity | None = None,
) -> CommandResult:
    """UPDATE the table SET ``updates`` WHERE ``predicate``; see the module docstring.

    :param updates: ``{column: Spark SQL expression}``, e.g. ``{"v": "v * 2", "status": "'done'"}``;
        values are cast to the column types as Spark's UPDATE does (ANSI store assignment)
    """
    from ..constraints import stale_generated
    from ..expr import bind_assignments

    if updates is not None and not isinstance(updates, Mapping):
        raise InvalidArgumentError(
            f"UPDATE's assignments must be a mapping, got {type(updates).__name__}",
            "each column to set is a key, its Spark SQL expression the value",
            "pass updates as a dict such as {'v': 'v * 2'}",
        )
    plan = _Plan(snapshot, "UPDATE", predicate, plane=plane, identity=identity)
    bound = bind_assignments(dict(updates or {}), plan.schema)  # errors before anything is read
    from ..identity import refuse_updates

    refuse_updates(plan.schema, bound)
    bound.update(stale_generated(plan.schema, bound))  # computed again by the writer from the new values
    metrics = UpdateMetrics()
    if plan.duplicate:
        return plan.skipped(metrics)
    candidates = plan.candidates(metrics)
    if candidates.num_rows == 0:
        return plan.unchanged(metrics)
    outcomes = plan.rewrite(candidates, tuple(bound.items()))
    removes, adds, matched, written = apply_outcomes(plan.watch, candidates, outcomes, metrics)
    report("UPDATE", "rewritten", files=len(removes), matched=matched)
    metrics.num_updated_rows = matched
    metrics.num_copied_rows = written - matched
    if not removes:
        return plan.unchanged(metrics)
    return plan.commit([*removes, *adds], metrics)
