"""MERGE INTO the table USING a source DataFrame, after Delta's MergeIntoCommand.

1. **Check and bind before anything is read**: the writer feature gate and ``delta.appendOnly``
   (only insert-only merges may run on append-only tables); the ON condition over both relations by
   alias (:func:`..expr.parse.parse_over`), each clause's condition (matched: both relations; not
   matched: the source only; not matched by source: the target only) and its assignments, cast to the
   target column's type as UPDATE / INSERT do (NOT NULL and impossible casts refused here). Clause
   order rules are Delta's: any number of each kind, evaluated in order, only the last of a kind may
   omit its condition. ``*_all`` clauses pair columns by name; a target column the source leaves out
   is, as in delta-spark, refused without ``merge_schema`` and with it kept by an update and NULL in
   an insert (:func:`..merge.bind_plan`).
2. **Candidate target files** (:func:`..merge.candidate_predicate`): the files that can hold a matched row
   are pruned by partition values and min/max stats with (a) the ON condition's target-only conjuncts
   and (b) the source's own values for every ``target.k = <source expression>`` conjunct (its distinct
   values when few, else its min/max, computed in one pass over the materialised source); NOT
   MATCHED BY SOURCE clauses add the files their conditions may select (an unconditional one: all).
   The predicate and the candidates are registered on the transaction, so a concurrent append into
   the merged key range, or a concurrent delete of a candidate, conflicts as in Delta; others do not.
3. **File by file** when ON has key equalities and the source is small (at most
   :data:`..merge.MAX_SOURCE_BYTES`, estimated from its schema; read once into Arrow, which is
   its materialisation): the source travels to the tasks and each candidate file is probed on its
   key columns and rewritten only when a clause changes one of its rows (:mod:`..merge.by_file`):
   no join over the table, no shuffle. Otherwise **by join** (:mod:`..merge.by_join`, the join
   Spark's: docs/design.md "MERGE's two strategies"): the
   source materialised in Spark; insert-only merges are a left anti join against the candidates' ON
   columns and remove no file; otherwise a narrow join (the columns the conditions read, with each
   target row's file and row index) gives the tallies, the duplicate-match check and the touched
   files, then only the touched files are joined whole and rewritten, or on a deletion-vector table
   only the new and changed rows are written and the changed ones marked. Either way each target row
   gets the first clause that fires; a target
   row that more than one source row would update or delete is Delta's duplicate-match error
   (nothing written); touched files are those where some row is updated or deleted: only they are
   removed and rewritten (their other rows copied), next to the inserted rows.
4. **Commit** ``remove`` (touched) + ``add`` (rewritten and inserted) in one transaction, operation
   ``MERGE`` with Delta's operationParameters and metrics (:class:`~.result.MergeMetrics`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..commit_identity import TxnIdentity, takes_identity
from ..errors import InvalidArgumentError
from ..foreign import translated_methods
from ..merge import (
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    MergeClause,
    MergeFilesSpec,
    MergeJob,
    bind_plan,
    candidate_predicate,
    clause_problem,
    evolved_schema,
    key_equalities,
)
from ..plane import in_process_plane
from ..progress import report
from .base import Command
from .reads import reads_snapshot_files
from .result import CommandResult, MergeMetrics

__all__ = ["MergeBuilder", "MergeClause", "merge", "merge_into", "upsert"]


@translated_methods  # part of the facade: only our errors leave it
class MergeBuilder:
    """``DeltaTable.merge(...)`` returns this; add clauses in order, then :meth:`execute`."""

    def __init__(self, table, source, predicate: str, *, source_alias: str, target_alias: str, merge_schema: bool):
        self._table = table
        self._source = source
        self._predicate = predicate
        self._source_alias = source_alias
        self._target_alias = target_alias
        self._merge_schema = merge_schema
        self._clauses: list[MergeClause] = []
        self._unique_keys: list[str] | None = None
        self._dedupe: tuple | None = None

    def unique_keys(self, columns: list[str]) -> MergeBuilder:
        """Refuse a source holding one of these source columns' (non-NULL) values twice (an upsert
        without ``dedupe_by``), checked on the source the merge reads anyway."""
        self._unique_keys = list(columns)
        return self

    def dedupe(self, columns: list[str], by: str) -> MergeBuilder:
        """Keep one source row per value of ``columns`` (an upsert's keys): the one with the greatest
        ``by``; rows with a NULL key never match and are kept as they are."""
        self._dedupe = (list(columns), by)
        return self

    def _add(self, clause: MergeClause) -> MergeBuilder:
        self._clauses.append(clause)
        return self

    def when_matched_update(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(MATCHED, "update", predicate, dict(updates)))

    def when_matched_update_all(self, predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(MATCHED, "update", predicate, None))

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(MATCHED, "delete", predicate))

    def when_not_matched_insert(self, values: Mapping[str, str], predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(NOT_MATCHED, "insert", predicate, dict(values)))

    def when_not_matched_insert_all(self, predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(NOT_MATCHED, "insert", predicate, None))

    def when_not_matched_by_source_update(self, updates: Mapping[str, str], predicate: str | None = None):
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "update", predicate, dict(updates)))

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> MergeBuilder:
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "delete", predicate))

    def clause(self, when: str, then: str, condition: str | None = None, set=None, values=None) -> MergeBuilder:
        """A clause from its parts (``when`` matched / not_matched / not_matched_by_source, ``then`` the
        action: update, update_all, delete, insert, insert_all): what the CLI and the operator pass."""
        problem = clause_problem(when, then)
        if problem is not None:
            raise InvalidArgumentError(f"Unknown MERGE clause: {problem}", None, "use one of those pairs")
        method = getattr(self, f"when_{when}_{then}")
        if then == "update":
            return method(set or {}, condition)
        if then == "insert":
            return method(values or {}, condition)
        return method(condition)

    @takes_identity
    def execute(self, *, identity: TxnIdentity | None = None, watermark=None) -> dict:
        """Run the MERGE as ``identity`` (or ``app_id``, ``app_version``, ``user_metadata``); ``watermark``: ``(app id, version)`` of the source's change range it consumes
        (see :class:`~.base.Command`)."""
        return merge(
            self._table.snapshot(),
            self._source,
            self._predicate,
            self._clauses,
            plane=self._table.plane,
            source_alias=self._source_alias,
            target_alias=self._target_alias,
            merge_schema=self._merge_schema,
            unique_keys=self._unique_keys,
            dedupe=self._dedupe,
            identity=identity,
            watermark=watermark,
        ).to_dict()


def clauses_from_specs(specs) -> list[MergeClause]:
    """Clauses from their parts as the CLI and the operator pass them (``{"when", "then",
    "condition", "set", "values"}`` each), through the builder's own rules."""
    b = MergeBuilder(None, None, "", source_alias="source", target_alias="target", merge_schema=False)
    for c in specs or []:
        b.clause(**c)
    return list(b._clauses)


def merge_into(
    snapshot,
    source,
    *,
    predicate: str | None = None,
    clauses=None,
    key_columns=None,
    dedupe_by: str | None = None,
    source_alias: str = "source",
    target_alias: str = "target",
    merge_schema: bool = False,
    plane=None,
    target_file_size: int | None = None,
    identity: TxnIdentity | None = None,
    watermark=None,
) -> CommandResult:
    """MERGE as the operations registry declares it: an :func:`upsert` by ``key_columns``, or
    :func:`merge` ON ``predicate`` with ``clauses`` given by their parts (:func:`clauses_from_specs`)."""
    if key_columns:
        return upsert(
            snapshot,
            source,
            key_columns,
            dedupe_by=dedupe_by,
            merge_schema=merge_schema,
            plane=plane,
            target_file_size=target_file_size,
            identity=identity,
            watermark=watermark,
        )
    return merge(
        snapshot,
        source,
        predicate,
        clauses_from_specs(clauses),
        plane=plane,
        source_alias=source_alias,
        target_alias=target_alias,
        merge_schema=merge_schema,
        target_file_size=target_file_size,
        identity=identity,
        watermark=watermark,
    )


def upsert(
    snapshot,
    source,
    key_columns,
    *,
    dedupe_by: str | None = None,
    merge_schema: bool = False,
    plane=None,
    target_file_size: int | None = None,
    identity: TxnIdentity | None = None,
    watermark=None,
) -> CommandResult:
    """Upsert ``source`` by ``key_columns``: every column of the matched rows updated, the others
    inserted (:meth:`~..table.DeltaTable.upsert` documents the rules); a MERGE ON the keys' equality."""
    from ..merge import upsert_condition

    keys = list(key_columns or [])
    plane = plane or in_process_plane()
    source = plane.held(source)  # Arrow data as one table (read again by the merge)
    on = upsert_condition(snapshot.schema, plane.schema_of(source).names, keys)
    return merge(
        snapshot,
        source,
        on,
        [MergeClause(MATCHED, "update", None, None), MergeClause(NOT_MATCHED, "insert", None, None)],
        plane=plane,
        merge_schema=merge_schema,
        # one row per key in the plane's pass over the source, else duplicate keys refused on it
        unique_keys=None if dedupe_by is not None else keys,
        dedupe=(keys, dedupe_by) if dedupe_by is not None else None,
        target_file_size=target_file_size,
        identity=identity,
        watermark=watermark,
    )


@reads_snapshot_files("MERGE")
def merge(
    snapshot,
    source,
    on: str,
    clauses: list[MergeClause],
    *,
    plane=None,
    source_alias: str = "source",
    target_alias: str = "target",
    merge_schema: bool = False,
    unique_keys: list[str] | None = None,
    dedupe: tuple | None = None,
    target_file_size: int | None = None,
    identity: TxnIdentity | None = None,
    watermark=None,
) -> CommandResult:
    """MERGE ``source`` INTO the snapshot's table ON ``on``; see the module docstring. ``plane``: the
    data plane (:mod:`..plane`) that reads, joins and writes the rows; ``source`` its data: a Spark
    DataFrame, or on the in-process plane (None) Arrow data (a table, record batches) merged file by
    file in this process, no JVM involved (ON must then equate target and source keys).

    :param unique_keys: source columns whose (non-NULL) values must be unique (an upsert's keys)
    :param dedupe: ``(key columns, dedupe_by)``: one source row per key first (an upsert's ``dedupe_by``)
    :param identity: the run's transaction identity; ``watermark``: a change feed's range it
        consumes (see :class:`~.base.Command`)
    """
    from ..expr import to_sql
    from ..expr.skipping import skip_files
    from ..features import writes_change_data, writes_deletion_vectors
    from ..row_tracking import for_rewrite
    from ..writer import table_write_spec
    from .dml import kept_with_deletion_vectors, removes_for

    plane = plane or in_process_plane()
    source = plane.held(source)  # read more than once below
    source_schema = plane.schema_of(source)
    if merge_schema:
        from ..schema.widening import widenable

        md = snapshot.metadata
        widen = widenable(snapshot.schema, snapshot.properties.enable_type_widening, md.partition_columns, merge_schema)
        target_schema = evolved_schema(snapshot.schema, source_schema, widen)
    else:
        target_schema = snapshot.schema
    configuration = dict(snapshot.metadata.configuration or {})
    if target_schema is not snapshot.schema:  # new columns of a mapped table get their ids now
        from ..column_mapping import assign

        target_schema, configuration = assign(target_schema, configuration)
    plan = bind_plan(
        snapshot,
        source_schema,
        on,
        list(clauses),
        target_alias=target_alias,
        source_alias=source_alias,
        target_schema=target_schema,
        merge_schema=merge_schema,
    )
    params = {
        "predicate": json.dumps([to_sql(plan.on)]),
        "matchedPredicates": json.dumps([c.clause.describe() for c in plan.of(MATCHED)]),
        "notMatchedPredicates": json.dumps([c.clause.describe() for c in plan.of(NOT_MATCHED)]),
        "notMatchedBySourcePredicates": json.dumps([c.clause.describe() for c in plan.of(NOT_MATCHED_BY_SOURCE)]),
    }
    cmd = Command(
        snapshot,
        "MERGE",
        params,
        removes_rows=None if plan.insert_only else "MERGE with update or delete clauses into",
        append_only_fix="use only WHEN NOT MATCHED insert clauses, or set delta.appendOnly=false first",
        identity=identity,
        watermark=watermark,
    )
    if target_schema is not snapshot.schema:  # the new columns land in the same commit
        import dataclasses

        md = dataclasses.replace(
            snapshot.metadata, schema_string=target_schema.to_json_string(), configuration=configuration
        )
        cmd.update_metadata(md)
    metrics = MergeMetrics()
    if cmd.duplicate:
        return cmd.skipped(metrics)

    keys = key_equalities(plan)
    rows = for_rewrite(snapshot)  # row tracking: the rows keep their stable ids
    spec = MergeFilesSpec(
        write=table_write_spec(
            snapshot,
            target_file_size=target_file_size,
            schema_json=plan.target_schema.to_json_string(),
            row_tracking=rows and (rows.row_id_column, rows.commit_version_column),
        ),
        row_tracking=rows,
        plan=plan,
        keys=tuple(keys),
        column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
        deletion_vectors=writes_deletion_vectors(snapshot.protocol, snapshot.metadata),
        change_data=writes_change_data(snapshot.metadata),
    )
    files = snapshot.files
    parts = list(snapshot.metadata.partition_columns or [])
    chosen: dict = {}

    def select(num_source_rows: int, key_values: list, strategy: str):
        """The candidate files from the source's key values (step 2), read on the transaction."""
        metrics.num_source_rows = num_source_rows
        pred = candidate_predicate(plan, key_values)
        metrics.num_target_files_before_skipping = files.num_rows
        cmd.read_rows(pred)
        candidates = files if pred is None else skip_files(files, snapshot.schema, parts, pred).files
        cmd.read_files(candidates)
        metrics.num_target_files_after_skipping = candidates.num_rows
        report("MERGE", "files", table=files.num_rows, candidates=candidates.num_rows, source_rows=num_source_rows)
        report("MERGE", strategy)
        chosen.update(candidates=candidates, strategy=strategy)
        return candidates

    # the plane merges file by file a small source with keys to look up (read once into Arrow, its
    # materialisation), else materialises it and joins it with the table
    job = MergeJob(
        snapshot, spec, source, select, on=on, unique_keys=tuple(unique_keys or ()), dedupe=dedupe and tuple(dedupe)
    )
    outcome = plane.merge(job)
    candidates, strategy = chosen["candidates"], chosen["strategy"]
    metrics.scan_time_ms, metrics.rewrite_time_ms = outcome.scan_ms, outcome.rewrite_ms
    for name, value in plan.counts(outcome.per_action).items():
        setattr(metrics, name, value)
    report("MERGE", "rewritten", files=len(outcome.touched), written=outcome.rows_written)
    touched = candidates.filter(pc.is_in(candidates.column("path"), value_set=pa.array(outcome.touched, pa.string())))
    removes = removes_for(touched)
    adds, leaving = list(outcome.adds), touched  # leaving: not added back with a deletion vector
    if spec.deletion_vectors:  # rows marked, files kept
        re_adds, leaving, counts = kept_with_deletion_vectors(touched, outcome.deletion_vectors)
        adds += re_adds
        metrics.num_target_deletion_vectors_added, metrics.num_target_deletion_vectors_updated = counts[:2]
        metrics.num_target_deletion_vectors_removed = counts[2]
    metrics.num_target_files_removed = leaving.num_rows
    metrics.num_target_files_added = len(outcome.adds)
    metrics.num_target_bytes_removed = int(pc.sum(leaving.column("size")).as_py() or 0) if leaving.num_rows else 0
    metrics.num_target_bytes_added = int(sum(a.size or 0 for a in outcome.adds))
    metrics.num_target_rows_copied = (
        outcome.rows_written - metrics.num_target_rows_updated - (metrics.num_target_rows_inserted)
    )
    metrics.num_output_rows = outcome.rows_written
    changes = list(outcome.changes)
    if spec.change_data and touched.num_rows and not changes:  # files rewritten, no row changed
        from ..writer import empty_change_file

        changes.append(empty_change_file(spec.write, dict(touched.column("partition_values")[0].as_py() or [])))
    metrics.num_target_change_files_added = len(changes)
    adds += changes
    fields = {"strategy": strategy}
    if not removes and not adds:
        return cmd.unchanged(metrics, fields=fields)
    return cmd.commit([*removes, *adds], metrics, fields=fields)
