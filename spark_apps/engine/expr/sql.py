"""Rendering a bound tree back to Spark SQL text.

The output names columns in backticks, spells every implicit cast the binder added, and writes
literals in typed form (``DATE '2026-01-01'``, ``TIMESTAMP '...'``, ``1.50BD``-free ``CAST`` for
decimals), so that Spark (``F.expr``) evaluates exactly the tree we evaluate, and so that
``commitInfo.operationParameters.predicate`` reads as Delta writes it.
"""

from __future__ import annotations

import datetime as dt
import decimal

from . import nodes as n

__all__ = ["to_sql", "quote", "type_sql", "temporal_text", "column_sql"]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def type_sql(t) -> str:
    """Spark SQL's name of a Delta type (``INT``, ``DECIMAL(10,2)``, ...)."""
    return {"integer": "INT", "byte": "TINYINT", "short": "SMALLINT", "long": "BIGINT"}.get(t.name, t.name.upper())


def temporal_text(v, t) -> str:
    """The text of a date or timestamp literal: ISO, a ``timestamp`` in UTC with its ``+00:00``."""
    if t.name == "date":
        return v.isoformat()
    text = v.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ") if v.tzinfo else v.isoformat(sep=" ")
    return text + ("+00:00" if t.name == "timestamp" else "")


def _literal(e: n.Literal) -> str:
    v, t = e.value, e.type
    if v is None:
        return "NULL" if t.name == "void" else f"CAST(NULL AS {type_sql(t)})"
    if isinstance(v, bool):
        return "true" if v else "false"
    if t.name == "string":
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if t.name == "date":
        return f"DATE '{temporal_text(v, t)}'"
    if t.name in ("timestamp", "timestamp_ntz"):
        return f"{'TIMESTAMP' if t.name == 'timestamp' else 'TIMESTAMP_NTZ'} '{temporal_text(v, t)}'"
    if t.name == "binary":
        return f"X'{v.hex().upper()}'"
    if isinstance(v, decimal.Decimal):
        return f"CAST('{v}' AS {type_sql(t).upper()})"
    if t.name == "long":
        return f"{v}L"
    if t.name == "short":
        return f"{v}S"
    if t.name == "byte":
        return f"{v}Y"
    if t.name in ("float", "double"):
        if v != v or v in (float("inf"), float("-inf")):
            return f"CAST('{'NaN' if v != v else ('Infinity' if v > 0 else '-Infinity')}' AS {type_sql(t)})"
        return f"CAST({v!r} AS {type_sql(t)})" if t.name == "float" else f"{v!r}D"
    return str(v)


def to_sql(e: n.Expr, column=None) -> str:
    """Spark SQL text of a bound tree.

    :param column: how to spell a column (default: its quoted path, qualified by its relation's alias
        when it has one); MERGE passes its own to name the joined DataFrame's columns
    """
    spell = column or column_sql

    def render(node: n.Expr) -> str:
        return _render(node, render, spell)

    return render(e)


def column_sql(c: n.Column) -> str:
    """A column's default spelling: its quoted path, qualified by its relation's alias if any."""
    name = ".".join(quote(p) for p in c.path)
    return f"{quote(c.relation)}.{name}" if c.relation else name


def _render(e: n.Expr, to_sql, spell) -> str:
    if isinstance(e, n.Column):
        return spell(e)
    if isinstance(e, n.Literal):
        return _literal(e)
    if isinstance(e, n.Cast):
        return f"CAST({to_sql(e.child)} AS {type_sql(e.type)})"
    if isinstance(e, n.Compare):
        return f"({to_sql(e.left)} {e.op} {to_sql(e.right)})"
    if isinstance(e, n.And):
        return "(" + " AND ".join(to_sql(i) for i in e.items) + ")"
    if isinstance(e, n.Or):
        return "(" + " OR ".join(to_sql(i) for i in e.items) + ")"
    if isinstance(e, n.Not):
        return f"(NOT {to_sql(e.child)})"
    if isinstance(e, n.IsNull):
        return f"({to_sql(e.child)} IS {'NOT ' if e.negated else ''}NULL)"
    if isinstance(e, n.In):
        values = ", ".join(_literal(v) for v in e.values)
        return f"({to_sql(e.child)} {'NOT ' if e.negated else ''}IN ({values}))"
    if isinstance(e, n.Like):
        op = "ILIKE" if e.case_insensitive else "LIKE"
        pattern = _literal(n.Literal(e.pattern, n.STRING))
        return f"({to_sql(e.child)} {'NOT ' if e.negated else ''}{op} {pattern})"
    if isinstance(e, n.Arithmetic):
        return f"({to_sql(e.left)} {e.op} {to_sql(e.right)})"
    if isinstance(e, n.Negate):
        return f"(- {to_sql(e.child)})"
    if isinstance(e, n.Function):
        return f"{e.name}({', '.join(to_sql(a) for a in e.args)})"
    if isinstance(e, n.Case):
        whens = " ".join(f"WHEN {to_sql(c)} THEN {to_sql(v)}" for c, v in e.branches)
        return f"CASE {whens} ELSE {to_sql(e.otherwise)} END"
    raise TypeError(f"cannot render {type(e).__name__}")
