"""MERGE's plan: the clauses (:mod:`.clauses`' rules), bound to the schemas (the ON condition, each
clause's condition and assignments: step 1 of :mod:`..commands.merge`), the order in which clauses fire
(:func:`first_firing`), the key equalities of ON and the candidate predicate they give (step 2), and
the job a data plane runs (:class:`MergeJob`) with what it hands back (:class:`MergeOutcome`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import DuplicateMatchError, InvalidArgumentError, InvalidPredicateError
from ..expr import nodes as n
from .clauses import KINDS, MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, order_problem

__all__ = [
    "MAX_PRUNING_VALUES",
    "BoundClause",
    "MergeClause",
    "MergeJob",
    "MergeOutcome",
    "MergePlan",
    "bind_plan",
    "candidate_predicate",
    "duplicate_match_error",
    "evolved_schema",
    "first_firing",
    "key_equalities",
    "source_columns",
    "upsert_condition",
]

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
    which ``*_all`` clauses then fill; rows that no clause sets get NULL there; the fields a source
    column's structs add (nullable, at the end: :func:`..schema.compat.with_new_fields`); a column of ``widen``
    (:func:`..schema.widening.widenable`) takes its source column's wider types where the protocol
    allows, in its nested fields, arrays' elements and maps' keys and values too (``delta.typeChanges``).
    ``target`` itself when the source brings nothing new."""
    import dataclasses

    from ..schema import StructType
    from ..schema.compat import with_new_fields
    from ..schema.widening import widened_to

    new = [dataclasses.replace(f, nullable=True) for f in source_schema.fields if target.find(f.name) is None]
    fields = list(target.fields)
    for i, f in enumerate(fields):
        s = source_schema.find(f.name)
        if s is not None and f.name.lower() in widen:
            f = fields[i] = widened_to(f, s.type) or f
        if s is not None:
            fields[i] = f.with_type(with_new_fields(f.type, s.type))
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
            values = (
                bind_assignments_over(texts, target, scope, target_alias=target_alias, leave_out=merge_schema)
                if texts
                else {}
            )
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


def source_columns(source_schema, keys: list[str]) -> tuple[list[str], list[str]]:
    """The source columns ``keys`` as the schema names them, and as the join names them (``__s<i>``)."""
    names = [source_schema.find(k).name for k in keys]
    return names, [f"__s{source_schema.names.index(k)}" for k in names]


def duplicate_match_error() -> DuplicateMatchError:
    return DuplicateMatchError(
        "Cannot perform MERGE: multiple source rows matched and attempted to modify the same target row of the table",
        "a target row that a WHEN MATCHED update or delete applies to matched more than one source row, so the "
        "result would depend on which one wins; nothing was written",
        "deduplicate the source on the merge keys first (for an upsert: dedupe_by=...), or tighten the ON "
        "condition so each target row matches at most one source row",
    )


def first_firing(conditions: list[tuple[int, Any]], otherwise: int):
    """Delta's clause order as one expression of the predicate model: the index of the first clause
    whose condition is TRUE (a clause without one always fires), else ``otherwise``. ``conditions``:
    ``(clause index, bound condition or None)`` in clause order. ``CASE WHEN c1 THEN i1 ... ELSE
    otherwise END``: each condition sees only the rows no earlier clause took. Every data plane
    evaluates this one tree (pyarrow here, Spark through :func:`..spark.columns.to_column`)."""
    from ..schema.types import LONG

    branches = []
    for i, cond in conditions:
        if cond is None:  # always fires: the clauses after it never do
            otherwise = i
            break
        branches.append((cond, n.Literal(i, LONG)))
    if not branches:
        return n.Literal(otherwise, LONG)
    return n.Case(tuple(branches), n.Literal(otherwise, LONG), LONG)


@dataclass
class MergeJob:
    """One MERGE as the command hands it to the data plane (:meth:`..plane.DataPlane.merge`): the plan
    and write spec, the ON text, the source in the plane's form, the source columns whose values must be unique
    (an upsert's keys), ``dedupe`` ``(key columns, dedupe_by)`` to keep one row per key first, and
    ``select(num_source_rows, key_values, strategy)``: the candidate files once the plane knows the
    source's key values (:func:`key_equalities`' order), which the command also reads on its
    transaction."""

    snapshot: Any
    spec: Any  # by_file.MergeFilesSpec
    source: Any
    select: Callable[[int, list, str], Any]
    on: str = ""  # the ON condition as given (for messages)
    unique_keys: tuple = ()
    dedupe: tuple | None = None

    @property
    def plan(self) -> MergePlan:
        return self.spec.plan

    @property
    def keys(self) -> tuple:
        return self.spec.keys


@dataclass
class MergeOutcome:
    """What a plane's MERGE wrote, not committed."""

    touched: list[str]
    adds: list
    rows_written: int
    per_action: dict  # clause index (-1 copy, -2 drop) -> (joined rows, distinct target rows)
    scan_ms: int
    rewrite_ms: int
    #: touched file -> its new deletion vector (the file stays in the table with it)
    deletion_vectors: dict = field(default_factory=dict)
    #: the change data feed's files (AddCDCFile)
    changes: list = field(default_factory=list)
