"""MERGE INTO the table USING a source DataFrame, after Delta's MergeIntoCommand.

1. **Check and bind before anything is read**: the writer feature gate and ``delta.appendOnly``
   (only insert-only merges may run on append-only tables); the ON condition over both relations by
   alias (:func:`..expr.parse.parse_over`), each clause's condition (matched: both relations; not
   matched: the source only; not matched by source: the target only) and its assignments, cast to the
   target column's type as UPDATE / INSERT do (NOT NULL and impossible casts refused here). Clause
   order rules are Delta's: any number of each kind, evaluated in order, only the last of a kind may
   omit its condition. ``*_all`` clauses pair columns by name; a target column the source leaves out
   is, as in delta-spark, refused without ``merge_schema`` and with it kept by an update and NULL in
   an insert (:func:`bind_plan`).
2. **Candidate target files** (:func:`candidate_predicate`): the files that can hold a matched row
   are pruned by partition values and min/max stats with (a) the ON condition's target-only conjuncts
   and (b) the source's own values for every ``target.k = <source expression>`` conjunct (its distinct
   values when few, else its min/max, computed in one pass over the materialised source); NOT
   MATCHED BY SOURCE clauses add the files their conditions may select (an unconditional one: all).
   The predicate and the candidates are registered on the transaction, so a concurrent append into
   the merged key range, or a concurrent delete of a candidate, conflicts as in Delta; others do not.
3. **File by file** when ON has key equalities and the source is small (at most
   :data:`..rewrite.merge.MAX_SOURCE_BYTES`, estimated from its schema; read once into Arrow, which is
   its materialisation): the source travels to the tasks and each candidate file is probed on its
   key columns and rewritten only when a clause changes one of its rows (:mod:`..rewrite.merge`,
   the plane's ``merge_by_file``): no join over the table, no shuffle. Otherwise **by join** (the
   plane's ``merge_by_join``: Spark's, docs/design.md "MERGE's two strategies"): the
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
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError, InvalidPredicateError
from ..foreign import translated_methods
from ..merge_clauses import KINDS, MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, clause_problem, order_problem
from ..plane import in_process_plane
from ..progress import report
from .base import Command
from .reads import reads_snapshot_files
from .result import CommandResult, MergeMetrics

__all__ = ["MergeBuilder", "MergeClause", "merge"]

#: at most this many distinct source key values become an IN list; more become a min/max range
MAX_PRUNING_VALUES = 1000


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause: its kind, action (``update`` / ``delete`` / ``insert``), condition text and
    ``{target column: expression text}`` (``None`` for ``*_all``; empty for delete)."""

    kind: str
    action: str
    condition: str | None = None
    assignments: Mapping[str, str] | None = field(default_factory=dict)

    def describe(self) -> dict:
        out = {"actionType": self.action}
        if self.condition is not None:
            out["predicate"] = self.condition
        return out


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

    def unique_keys(self, columns: list[str]) -> MergeBuilder:
        """Refuse a source holding one of these source columns' (non-NULL) values twice (an upsert
        without ``dedupe_by``), checked on the source the merge reads anyway."""
        self._unique_keys = list(columns)
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

    def execute(self, *, app_id=None, app_version=None, user_metadata=None, watermark=None) -> dict:
        """Run the MERGE; ``watermark``: ``(app id, version)`` of the source's change range it consumes
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
            app_id=app_id,
            app_version=app_version,
            user_metadata=user_metadata,
            watermark=watermark,
        ).to_dict()


def clauses_from_specs(specs) -> list[MergeClause]:
    """Clauses from their parts as the CLI and the operator pass them (``{"when", "then",
    "condition", "set", "values"}`` each), through the builder's own rules."""
    b = MergeBuilder(None, None, "", source_alias="source", target_alias="target", merge_schema=False)
    for c in specs or []:
        b.clause(**c)
    return list(b._clauses)


# --------------------------------------------------------------------------------------------------
# binding


@dataclass
class BoundClause:
    """A clause bound to the schemas: ``condition`` a tree or None; ``values`` ``{column: tree}``
    (update: the assigned columns; insert: every target column, NULL where not given)."""

    clause: MergeClause
    condition: object | None
    values: dict


@dataclass
class MergePlan:
    """Everything the Spark side needs: the bound ON condition and clauses, the schemas, the aliases."""

    on: object
    clauses: list[BoundClause]
    target_schema: object
    source_schema: object
    target_alias: str
    source_alias: str

    def of(self, kind: str) -> list[BoundClause]:
        return [c for c in self.clauses if c.clause.kind == kind]

    def codes(self) -> dict[str, list[int]]:
        """Clause indices (the join's ``__action`` codes) per kind."""
        return {k: [i for i, c in enumerate(self.clauses) if c.clause.kind == k] for k in KINDS}

    def counts(self, per_action: dict) -> dict:
        """Delta's row metrics from the join's per-clause tallies (target rows counted once each)."""
        out = dict.fromkeys(
            [
                "num_target_rows_inserted",
                "num_target_rows_matched_updated",
                "num_target_rows_matched_deleted",
                "num_target_rows_not_matched_by_source_updated",
                "num_target_rows_not_matched_by_source_deleted",
            ],
            0,
        )
        for i, c in enumerate(self.clauses):
            n, rows = per_action.get(i, (0, 0))
            kind, act = c.clause.kind, c.clause.action
            if act == "insert":
                out["num_target_rows_inserted"] += n
            elif kind == MATCHED:
                out[f"num_target_rows_matched_{act}d"] += rows
            else:
                out[f"num_target_rows_not_matched_by_source_{act}d"] += rows
        out["num_target_rows_updated"] = (
            out["num_target_rows_matched_updated"] + out["num_target_rows_not_matched_by_source_updated"]
        )
        out["num_target_rows_deleted"] = (
            out["num_target_rows_matched_deleted"] + out["num_target_rows_not_matched_by_source_deleted"]
        )
        return out

    @property
    def insert_only(self) -> bool:
        return all(c.clause.kind == NOT_MATCHED for c in self.clauses)

    @property
    def upsert_shaped(self) -> bool:
        """Whether the clauses are one unconditional WHEN MATCHED update and one unconditional WHEN NOT
        MATCHED insert of the same values: with unique source keys, every row updated or inserted is a
        source row as it is."""
        if len(self.clauses) != 2:
            return False
        update, insert = self.clauses
        shape = (update.clause.kind, update.clause.action, insert.clause.kind, insert.clause.action)
        if shape != (MATCHED, "update", NOT_MATCHED, "insert") or update.condition or insert.condition:
            return False
        return update.values == insert.values


def _check_clause_order(clauses: list[MergeClause]) -> None:
    problem = order_problem((c.kind, c.condition is not None) for c in clauses)
    if problem is None:
        return
    if not clauses:
        raise InvalidArgumentError(
            problem,
            "no when_matched_* / when_not_matched_* clause was added",
            "add e.g. .when_matched_update_all().when_not_matched_insert_all()",
        )
    raise InvalidArgumentError(
        f"{problem[0].upper()}{problem[1:]}",
        "a clause without a condition comes before another of its kind, which could then never apply",
        "give the earlier clause a condition, or move it last among its kind",
    )


def evolved_schema(target, source_schema, widen: frozenset = frozenset()):
    """``merge_schema=True``: the table's schema plus the source's columns it lacks (nullable, at the end),
    which ``*_all`` clauses then fill; rows that no clause sets get NULL there; a column of ``widen``
    (:func:`..schema.widening.widenable`) takes its source column's wider types where the protocol
    allows, in its nested struct fields too (``delta.typeChanges``). ``target`` itself when the source brings nothing new."""
    import dataclasses

    from ..schema import StructType
    from ..schema.widening import widened_to

    new = [dataclasses.replace(f, nullable=True) for f in source_schema.fields if target.find(f.name) is None]
    fields = list(target.fields)
    for i, f in enumerate(fields):
        s = source_schema.find(f.name)
        if s is not None and f.name.lower() in widen:
            fields[i] = widened_to(f, s.type) or f
    if not new and fields == list(target.fields):
        return target
    return StructType(tuple(fields) + tuple(new))


def bind_plan(
    snapshot,
    source_schema,
    on: str,
    clauses: list[MergeClause],
    *,
    target_alias: str,
    source_alias: str,
    target_schema=None,
    merge_schema: bool = False,
):
    """Bind every text of the merge to the schemas (step 1 of the module docstring); ``target_schema``:
    the table's schema after this merge (evolved), default the snapshot's. ``*_all`` clauses follow
    delta-spark on target columns the source leaves out: refused without ``merge_schema`` (schema
    evolution); with it, left unchanged by ``update_all`` and NULL in ``insert_all`` (a NOT NULL one
    refused). Identity and generated columns the source leaves out are assigned or computed."""
    from ..constraints import stale_generated
    from ..expr.parse import bind_assignments_over, parse_over
    from ..expr.sql import quote as quote_name
    from ..schema.compat import computed, may_leave_out

    if not str(target_alias).strip() or not str(source_alias).strip():
        raise InvalidArgumentError("MERGE aliases cannot be empty", None, "pass e.g. target_alias='t'")
    if target_alias.lower() == source_alias.lower():
        raise InvalidArgumentError(
            f"MERGE needs two different aliases, got '{target_alias}' for both",
            "a column qualified by the alias would be ambiguous",
            "pass distinct source_alias= and target_alias=",
        )
    _check_clause_order(clauses)
    target = target_schema if target_schema is not None else snapshot.schema
    both = {target_alias: target, source_alias: source_schema}
    only_source, only_target = {source_alias: source_schema}, {target_alias: target}
    bound_on = parse_over(on, both, condition=True, what="merge condition")
    out = []
    for c in clauses:
        scope = {MATCHED: both, NOT_MATCHED: only_source, NOT_MATCHED_BY_SOURCE: only_target}[c.kind]
        cond = parse_over(c.condition, scope, condition=True) if c.condition is not None else None
        values: dict = {}
        if c.action in ("update", "insert"):
            texts = c.assignments
            if texts is None:  # *_all: by column name, from the source
                left_out = [f for f in target.fields if source_schema.find(f.name) is None and not computed(f)]
                what = f"WHEN {c.kind.upper().replace('_', ' ')} {c.action}_all"
                if left_out and not merge_schema:
                    raise InvalidArgumentError(
                        f"{what}: the source has no column {', '.join(f.name for f in left_out)}",
                        f"without merge_schema, {c.action}_all sets every target column from the source "
                        "column of the same name (Delta's rule without schema evolution)",
                        "add the columns to the source, or pass merge_schema=True to leave them unchanged in "
                        f"updated rows and NULL in inserted ones, or name the columns with when_{c.kind}_{c.action}",
                    )
                not_null = [f.name for f in left_out if not may_leave_out(f)] if c.action == "insert" else []
                if not_null:
                    raise InvalidArgumentError(
                        f"{what}: the source has no column {', '.join(not_null)}, which the table holds NOT NULL",
                        "a column the source leaves out is inserted as NULL",
                        "add the columns to the source with their values, or list the insert's values",
                    )
                texts = {
                    f.name: f"{quote_name(source_alias)}.{quote_name(source_schema.find(f.name).name)}"
                    for f in target.fields
                    if source_schema.find(f.name) is not None
                }
            values = bind_assignments_over(texts, target, scope, target_alias=target_alias) if texts else {}
            if c.action == "update":
                from ..identity import refuse_updates

                refuse_updates(target, values)
            else:
                from ..identity import refuse_given

                refuse_given(target, values)
            if c.action == "insert":
                values = _complete_insert(values, target)
            else:  # generated columns of the columns it sets: computed again by the writer
                values = {**values, **stale_generated(target, values)}
        out.append(BoundClause(c, cond, values))
    return MergePlan(bound_on, out, target, source_schema, target_alias, source_alias)


def _complete_insert(values: dict, target) -> dict:
    """An INSERT sets every target column: the ones not given get their DEFAULT, else NULL, which a NOT
    NULL column refuses (:func:`..schema.compat.may_leave_out`)."""
    from ..defaults import default_value
    from ..expr import nodes as n
    from ..schema.compat import may_leave_out

    out = {}
    for f in target.fields:
        if f.name in values:
            out[f.name] = values[f.name]
        elif not may_leave_out(f):
            # (a generated column left NULL is computed, an identity column assigned)
            raise InvalidPredicateError(
                f"WHEN NOT MATCHED insert gives no value for NOT NULL column '{f.name}'",
                "a column an INSERT does not set is NULL",
                f"set '{f.name}' in the insert's values (or use insert_all with a source column of that name)",
            )
        else:
            out[f.name] = n.Literal(default_value(f), f.type)
    return out


def upsert_condition(target, source_columns: list[str], key_columns: list[str]) -> str:
    """The ON condition of an upsert by ``key_columns`` (``target.k = source.k AND ...``); every key must
    be a column of both sides."""
    from ..expr.sql import quote

    if not key_columns:
        raise InvalidArgumentError("An upsert needs key columns", "key_columns is empty", "pass e.g. ['id']")
    missing_t = [k for k in key_columns if target.find(k) is None]
    low = {c.lower(): c for c in source_columns}
    missing_s = [k for k in key_columns if k.lower() not in low]
    if missing_t or missing_s:
        where = [f"{', '.join(m)} not in the {side}" for m, side in ((missing_t, "table"), (missing_s, "source")) if m]
        raise InvalidArgumentError(
            f"Upsert key column(s) missing: {'; '.join(where)}",
            f"the table has {', '.join(target.names)}; the source has {', '.join(source_columns)}",
            "name key columns that both the table and the source have",
        )
    return " AND ".join(f"target.{quote(target.find(k).name)} = source.{quote(low[k.lower()])}" for k in key_columns)


# --------------------------------------------------------------------------------------------------
# candidate files


def _target_side(e, target_alias: str):
    """``e`` as a predicate over the target table alone (relation dropped), or None if it reads the source."""
    from dataclasses import replace

    from ..expr import nodes as n

    if n.relations_of(e) - {target_alias}:
        return None
    return n.map_columns(e, lambda c: replace(c, relation=None))


def key_equalities(plan: MergePlan) -> list[tuple[object, object, str]]:
    """``(target column, source expression, op)`` of every ``target.k = <source-only expression>`` conjunct of ON."""
    from ..expr import nodes as n

    out = []
    for c in n.conjuncts(plan.on):
        if not (isinstance(c, n.Compare) and c.op in ("=", "<=>")):
            continue
        for t, s in ((c.left, c.right), (c.right, c.left)):
            if (
                isinstance(t, n.Column)
                and t.relation == plan.target_alias
                and len(t.path) == 1
                and n.relations_of(s) == {plan.source_alias}
                and t.type == s.type
                and _prunable_type(t.type)
            ):
                out.append((t, s, c.op))
                break
    return out


def _prunable_type(t) -> bool:
    # exact Python values round-trip from Spark for these (timestamps come back in the session zone,
    # floats have NaN ordering questions: those keys are not used for pruning, which stays correct)
    from ..expr import nodes as n
    from ..schema import DecimalType

    return isinstance(t, DecimalType) or t.name in (*n.INTEGRAL, "string", "date", "boolean")


def candidate_predicate(plan: MergePlan, key_values: list) -> object | None:
    """The target-only predicate that selects every file a matched row can live in (None: all files).

    :param key_values: per :func:`key_equalities` entry ``(distinct values or None, min, max, has_null[,
        ranges])``; ``ranges`` (or None) ``[(lo, hi), ...]`` covering every value, used instead of min/max
    """
    from dataclasses import replace

    from ..expr import nodes as n
    from ..expr.parse import cast_literal

    parts = [p for p in (_target_side(c, plan.target_alias) for c in n.conjuncts(plan.on)) if p is not None]

    def between(col, t, lo, hi):
        return n.And(
            (
                n.Compare(">=", col, cast_literal(n.Literal(lo, t.type), t.type)),
                n.Compare("<=", col, cast_literal(n.Literal(hi, t.type), t.type)),
            )
        )

    for (t, _s, op), (values, lo, hi, has_null, *more) in zip(key_equalities(plan), key_values):
        ranges = more[0] if more else None
        col = replace(t, relation=None)
        null_ok = op == "<=>" and has_null
        if values is not None:
            lits = tuple(cast_literal(n.Literal(v, t.type), t.type) for v in values if v is not None)
            pred = n.In(col, lits) if lits else n.Literal(False, n.BOOLEAN)
        elif lo is None:
            pred = n.Literal(False, n.BOOLEAN)
        elif ranges and len(ranges) > 1:
            pred = n.Or(tuple(between(col, t, a, b) for a, b in ranges))
        else:
            pred = between(col, t, lo, hi)
        parts.append(n.Or((pred, n.IsNull(col))) if null_ok else pred)
    matched = n.and_all(parts) if parts else None
    nmbs = plan.of(NOT_MATCHED_BY_SOURCE)
    if not nmbs or plan.insert_only:
        return matched
    if any(c.condition is None for c in nmbs) or matched is None:
        return None
    either = [_target_side(c.condition, plan.target_alias) for c in nmbs]
    return n.Or((matched, *either))


def _source_columns(source_schema, keys: list[str]) -> tuple[list[str], list[str]]:
    """The source columns ``keys`` as the schema names them, and as the join names them (``__s<i>``)."""
    names = [source_schema.find(k).name for k in keys]
    return names, [f"__s{source_schema.names.index(k)}" for k in names]


def _equated_source_columns(keys: list, source_alias: str) -> list[str]:
    """The top-level source columns ON's ``target.k = source.c`` equalities (``=``) name; empty when a
    key is anything else (a ``<=>`` or an expression), which a unique check of them would not cover."""
    from ..expr import nodes as n

    out = []
    for _t, s, op in keys:
        if op != "=" or not isinstance(s, n.Column) or s.relation != source_alias or len(s.path) != 1:
            return []
        out.append(s.path[0])
    return list(dict.fromkeys(out))


def _covers(keys: list, names: list[str], source_alias: str) -> bool:
    """Whether ON's ``target.k = source.c`` equalities (``=``: a NULL never matches) name every one
    of the source columns ``names``, whose non-NULL values are unique: then two source rows matching
    one target row would share all of them, and no target row can match twice."""
    from ..expr import nodes as n

    equal = {s.path for _t, s, op in keys if op == "=" and isinstance(s, n.Column) and s.relation == source_alias}
    return all((name,) in equal for name in names)


# --------------------------------------------------------------------------------------------------
# the command


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
    **txn_options,
) -> CommandResult:
    """MERGE ``source`` INTO the snapshot's table ON ``on``; see the module docstring. ``plane``: the
    data plane (:mod:`..plane`) that reads, joins and writes the rows; ``source`` its data: a Spark
    DataFrame, or on the in-process plane (None) Arrow data (a table, record batches) merged file by
    file in this process, no JVM involved (ON must then equate target and source keys).

    :param unique_keys: source columns whose (non-NULL) values must be unique (an upsert's keys)
    """
    from ..expr import to_sql
    from ..expr.skipping import skip_files
    from ..features import writes_change_data, writes_deletion_vectors
    from ..rewrite.merge import (
        MergeFilesSpec,
        PreparedMerge,
        duplicate_keys_error,
        first_duplicate_key,
        source_row_limit,
    )
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
        txn_options=txn_options,
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
    # a small source with keys to look up is read once into Arrow (that copy is its materialisation)
    # and merged file by file; otherwise the plane materialises it and joins it with the table
    if not keys and not plane.joins:
        raise InvalidArgumentError(
            "A MERGE without Spark needs ON to equate a target column with a source column",
            f"ON is {on!r}: without such a key every source row would be compared with every target row",
            "add a key equality (target.k = source.k) to ON, or run the MERGE with a Spark session",
        )
    local = plane.merge_source(source, plan, source_row_limit(plan.source_schema)) if keys else None
    prepared = PreparedMerge(spec, local) if local is not None else None
    names, columns = _source_columns(source_schema, unique_keys or [])
    if prepared is not None:
        num_source_rows, key_values = local.num_rows, prepared.key_values(MAX_PRUNING_VALUES)
        dup = first_duplicate_key(local, columns) if columns else None
        if dup is not None:
            raise duplicate_keys_error(names, dup)
    else:  # the uniqueness check runs in the same pass over the source as the key values
        asked = [] if columns or not plan.upsert_shaped else _equated_source_columns(keys, plan.source_alias)
        if asked:  # an upsert by clauses: are its ON keys unique? (then it joins as key_columns does)
            names, columns = _source_columns(source_schema, asked)
        materialised, num_source_rows, key_values, distinct = plane.source_key_values(
            source, plan, keys, MAX_PRUNING_VALUES, unique=(columns, names) if columns else None, refuse=not asked
        )
        if asked and not distinct:
            columns = []
    # whether no target row can match two source rows
    unique_matches = bool(columns) and _covers(keys, names, plan.source_alias)
    metrics.num_source_rows = num_source_rows
    pred = candidate_predicate(plan, key_values)
    files = snapshot.files
    parts = list(snapshot.metadata.partition_columns or [])
    metrics.num_target_files_before_skipping = files.num_rows
    cmd.read_rows(pred)
    candidates = files if pred is None else skip_files(files, snapshot.schema, parts, pred).files
    cmd.read_files(candidates)
    metrics.num_target_files_after_skipping = candidates.num_rows
    strategy = "file_by_file" if prepared is not None else "join"
    report("MERGE", "files", table=files.num_rows, candidates=candidates.num_rows, source_rows=num_source_rows)
    report("MERGE", strategy)
    if prepared is not None:
        outcome = plane.merge_by_file(prepared, candidates)
    else:
        outcome = plane.merge_by_join(
            snapshot, plan, materialised, candidates, num_source_rows, unique_matches=unique_matches
        )
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
