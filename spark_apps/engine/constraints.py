"""What every row written must satisfy beyond its types: CHECK constraints and generated columns
(Delta's ``checkConstraints`` and ``generatedColumns`` features), enforced in the one place every
write passes, the core writer (:class:`..writer.TableWriter`): appends, overwrites, the rows DELETE,
UPDATE and MERGE write back, and OPTIMIZE's.

* **CHECK constraints** are the table properties ``delta.constraints.<name> = <SQL condition>``. A
  row passes when the condition is TRUE; FALSE and NULL both fail it, as in Delta. The first row
  that fails stops the write with Delta's message (the constraint, its condition and the row's
  values of the columns it names); nothing is committed.
* **Generated columns** carry ``delta.generationExpression`` in their column metadata. A NULL value
  (the column left out of the data, or set to NULL) is computed from the row; a value given must
  equal the expression's (``<=>``), else the row fails as a constraint named ``Generated Column``.
  Commands that change a column a generated column depends on (UPDATE, MERGE) set the generated
  column to NULL (:func:`stale_generated`), so the writer computes it again from the new values.

The expressions go through the predicate model (:mod:`.expr`): parsed and bound once per table
schema and constraint set (cached), evaluated with Arrow kernels. An expression the model cannot
evaluate is refused when the table is opened for writing, naming it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .config import CONSTRAINT_PREFIX
from .errors import ConstraintViolationError, InvalidArgumentError, UnsupportedFeatureError

__all__ = ["GENERATION_EXPRESSION", "Rules", "rules_for", "constraints_of", "stale_generated", "check_constraint"]

GENERATION_EXPRESSION = "delta.generationExpression"


@dataclass(frozen=True)
class _Check:
    name: str
    sql: str
    expr: object
    columns: tuple


@dataclass(frozen=True)
class _Generated:
    column: str
    sql: str
    expr: object  # the value, cast to the column's type
    check: object  # ``column <=> expr``
    columns: tuple


@dataclass(frozen=True)
class Rules:
    """The CHECK constraints and generated columns of one table schema and configuration."""

    checks: tuple = ()
    generated: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.checks or self.generated)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its generated columns computed where NULL; raises
        :class:`ConstraintViolationError` for the first row that breaks a rule."""
        batch = self.fill(batch)
        for g in self.generated:
            self._require(batch, "Generated Column", f"{g.column} <=> {g.sql}", g.check, g.columns + (g.column,))
        for c in self.checks:
            self._require(batch, c.name, c.sql, c.expr, c.columns)
        return batch

    def fill(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its generated columns computed where NULL (the change data feed's rows get
        their post-images' values this way; they are not checked again)."""
        from .expr import evaluate

        if not batch.num_rows:
            return batch
        for g in self.generated:
            i = batch.schema.get_field_index(g.column)
            col = batch.column(i)
            if col.null_count:
                value = evaluate(g.expr, batch)
                if isinstance(value, pa.Scalar):
                    value = pa.repeat(value, batch.num_rows)
                value = value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value
                col = pc.if_else(pc.is_null(col), value.cast(col.type), col)
                batch = batch.set_column(i, batch.schema.field(i), col)
        return batch

    @staticmethod
    def _require(batch, name: str, sql: str, expr, columns: tuple) -> None:
        from .expr import true_mask

        ok = true_mask(expr, batch)
        bad = batch.num_rows - int(pc.sum(pc.cast(ok, pa.int64())).as_py() or 0)
        if not bad:
            return
        row = batch.filter(pc.invert(ok)).slice(0, 1).to_pylist()[0]
        values = "; ".join(f"{c} : {_shown(row.get(c))}" for c in columns)
        raise ConstraintViolationError(
            f"CHECK constraint {name} ({sql}) violated by row with values: {values}",
            f"{bad} row(s) of the data written break it (Delta's DELTA_VIOLATE_CONSTRAINT_WITH_VALUES); "
            "nothing was committed",
            "fix or filter those rows in the source, or change the constraint (drop_constraint)",
        )


def _shown(v) -> str:
    return "null" if v is None else str(v)


def constraints_of(configuration) -> dict[str, str]:
    """``{name: SQL condition}`` of the ``delta.constraints.*`` properties."""
    return {
        k[len(CONSTRAINT_PREFIX) :]: str(v)
        for k, v in dict(configuration or {}).items()
        if k.lower().startswith(CONSTRAINT_PREFIX)
    }


def rules_for(schema_json: str, configuration) -> Rules:
    """The rules of a table (cached per schema and constraint set: a writer per file reuses them)."""
    constraints = tuple(sorted(constraints_of(configuration).items()))
    if not constraints and GENERATION_EXPRESSION not in schema_json:
        return Rules()
    return _rules(schema_json, constraints)


@functools.lru_cache(maxsize=64)
def _rules(schema_json: str, constraints: tuple) -> Rules:
    from .expr import nodes as n
    from .expr import parse_predicate
    from .expr.parse import bind_assignments
    from .schema import parse_schema

    schema = parse_schema(schema_json)
    checks = []
    for name, sql in constraints:
        expr = _bound(name, sql, parse_predicate, sql, schema)
        checks.append(_Check(name, sql, expr, _columns(expr)))
    generated = []
    for f in schema.fields:
        sql = (f.metadata or {}).get(GENERATION_EXPRESSION)
        if sql is None:
            continue
        value = _bound(f"generated column {f.name}", sql, bind_assignments, {f.name: sql}, schema)[f.name]
        check = n.Compare("<=>", n.Column((f.name,), f.type), value)
        generated.append(_Generated(f.name, sql, value, check, _columns(value)))
    return Rules(tuple(checks), tuple(generated))


def _bound(what: str, sql: str, bind, *args):
    try:
        return bind(*args)
    except InvalidArgumentError as e:
        raise UnsupportedFeatureError(
            f"Cannot write to the table: {what} ({sql}) cannot be evaluated here",
            e.problem,
            "write with an engine that evaluates it (Spark with delta-spark), or change the expression",
        ) from None


def _columns(expr) -> tuple:
    return tuple(dict.fromkeys(".".join(p) for p in expr.columns()))


def stale_generated(schema, assigned) -> dict:
    """NULL assignments for the generated columns of ``schema`` that depend on a column in
    ``assigned`` and are not assigned themselves: the writer computes them from the new row."""
    from .expr import nodes as n

    low = {str(c).lower() for c in assigned}
    rules = rules_for(schema.to_json_string(), {})
    out = {}
    for g in rules.generated:
        if g.column.lower() not in low and any(c.split(".")[0].lower() in low for c in g.columns):
            f = schema.find(g.column)
            out[f.name] = n.Literal(None, f.type)
    return out


def check_constraint(name: str, sql: str, schema) -> str:
    """A new CHECK constraint's name and condition checked against the schema (a condition that
    binds); returns the property key."""
    import re

    from .expr import parse_predicate

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name or "")):
        raise InvalidArgumentError(
            f"Invalid constraint name {name!r}",
            "a name is letters, digits and underscores",
            "pass e.g. 'positive_amount'",
        )
    parse_predicate(sql, schema)
    return CONSTRAINT_PREFIX + str(name).lower()
