"""Bound expression trees (:mod:`..expr.nodes`) as pyspark Columns, for classic and Connect sessions.

The Spark data plane evaluates the same tree the engine bound and checked, node for node: no SQL
text is rendered and parsed again by Spark (that round trip is :mod:`..expr.sql`'s, kept for
``commitInfo`` and error messages). Each node becomes the Catalyst expression its SQL text would:
comparisons, ``<=>`` (``eqNullSafe``), AND/OR/NOT, ``IS [NOT] NULL``, ``IN``, ``[I]LIKE``, arithmetic
(``div`` and the functions by name through ``call_function``), ``CAST`` and ``CASE``. Literals are typed
exactly as :func:`..expr.sql.to_sql` writes them (dates, timestamps and decimals cast from their
text, so no Python-side time zone or float rounding enters).
"""

from __future__ import annotations

import decimal
import math
from functools import reduce

from ..expr import nodes as n
from ..expr.sql import column_sql, temporal_text, type_sql

__all__ = ["conform_column", "to_column"]

_COMPARE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<=>": lambda a, b: a.eqNullSafe(b),
}
_ARITHMETIC = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "%": lambda a, b: a % b,
}


def to_column(e: n.Expr, column=None):
    """The pyspark Column of a bound tree.

    :param column: how to name a column node (default: its quoted path, qualified by its relation's
        alias when it has one), as for :func:`..expr.sql.to_sql`; MERGE passes its joined frame's names
    """
    from pyspark.sql import functions as F

    spell = column or column_sql

    def render(node: n.Expr):
        if isinstance(node, n.Column):
            return F.col(spell(node))
        if isinstance(node, n.Literal):
            return literal(node)
        if isinstance(node, n.StoreCast) and node.type.name in ("struct", "array", "map"):
            return _stored_nested(render(node.child), node.child.type, node.type)
        if isinstance(node, n.Cast):
            return render(node.child).cast(type_sql(node.type))
        if isinstance(node, n.Compare):
            return _COMPARE[node.op](render(node.left), render(node.right))
        if isinstance(node, n.And):
            return reduce(lambda a, b: a & b, [render(i) for i in node.items])
        if isinstance(node, n.Or):
            return reduce(lambda a, b: a | b, [render(i) for i in node.items])
        if isinstance(node, n.Not):
            return ~render(node.child)
        if isinstance(node, n.IsNull):
            c = render(node.child)
            return c.isNotNull() if node.negated else c.isNull()
        if isinstance(node, n.In):
            c = render(node.child).isin(*[literal(v) for v in node.values])
            return ~c if node.negated else c
        if isinstance(node, n.Like):
            c = render(node.child)
            c = c.ilike(node.pattern) if node.case_insensitive else c.like(node.pattern)
            return ~c if node.negated else c
        if isinstance(node, n.Arithmetic):
            a, b = render(node.left), render(node.right)
            return F.call_function("div", a, b) if node.op == "div" else _ARITHMETIC[node.op](a, b)
        if isinstance(node, n.Negate):
            return -render(node.child)
        if isinstance(node, n.Function):
            return F.call_function(node.name, *[render(a) for a in node.args])
        if isinstance(node, n.Case):
            out = None
            for cond, value in node.branches:
                out = (F if out is None else out).when(render(cond), render(value))
            return out.otherwise(render(node.otherwise)) if out is not None else render(node.otherwise)
        raise TypeError(f"cannot render {type(node).__name__} as a Column")

    return render(e)


def _stored_nested(col, src, dst):
    """A struct, array or map value stored into a column of another nested type: structs by name, as the
    in-process plane does (:func:`..expr.evaluate.store_cast`); Spark's own struct cast is positional."""
    from pyspark.sql.types import StructType

    def spark_type(t):
        field = {"name": "v", "type": t.to_json(), "nullable": True, "metadata": {}}
        return StructType.fromJson({"type": "struct", "fields": [field]})[0].dataType

    return conform_column(col, spark_type(src), spark_type(dst))


def conform_column(col, src_type, dst_type):
    """A Column expression turning ``col`` (of ``src_type``) into ``dst_type``, structs by name."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if src_type == dst_type:
        return col
    if isinstance(dst_type, StructType) and isinstance(src_type, StructType):
        by_lower = {f.name.lower(): f for f in src_type.fields}
        fields = []
        for f in dst_type.fields:
            s = by_lower.get(f.name.lower())
            if s is None:
                fields.append(F.lit(None).cast(f.dataType).alias(f.name))
            else:
                fields.append(conform_column(col.getField(s.name), s.dataType, f.dataType).alias(f.name))
        return F.when(col.isNull(), F.lit(None).cast(dst_type)).otherwise(F.struct(*fields))
    if isinstance(dst_type, ArrayType) and isinstance(src_type, ArrayType) and _has_struct(dst_type.elementType):
        return F.transform(col, lambda e: conform_column(e, src_type.elementType, dst_type.elementType))
    if (
        isinstance(dst_type, MapType)
        and isinstance(src_type, MapType)
        and (_has_struct(dst_type.keyType) or _has_struct(dst_type.valueType))
    ):
        m = col
        if src_type.keyType != dst_type.keyType:
            m = F.transform_keys(m, lambda k, v: conform_column(k, src_type.keyType, dst_type.keyType))
        return F.transform_values(m, lambda k, v: conform_column(v, src_type.valueType, dst_type.valueType))
    return col.cast(dst_type)


def _has_struct(t) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(t, StructType):
        return True
    if isinstance(t, ArrayType):
        return _has_struct(t.elementType)
    if isinstance(t, MapType):
        return _has_struct(t.keyType) or _has_struct(t.valueType)
    return False


def literal(e: n.Literal):
    """A typed literal Column, the value :func:`..expr.sql.to_sql` spells."""
    from pyspark.sql import functions as F

    v, t = e.value, e.type
    if v is None:
        return F.lit(None) if t.name == "void" else F.lit(None).cast(type_sql(t))
    if isinstance(v, bool) or t.name == "string":
        return F.lit(v)
    if t.name in ("date", "timestamp", "timestamp_ntz"):
        return F.lit(temporal_text(v, t)).cast(type_sql(t))
    if t.name == "binary":
        return F.unhex(F.lit(bytes(v).hex()))
    if isinstance(v, decimal.Decimal):
        return F.lit(str(v)).cast(type_sql(t))
    if t.name in ("float", "double") and not math.isfinite(v):
        return F.lit("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")).cast(type_sql(t))
    if t.name == "float" and "e" not in repr(v):
        # to_sql writes CAST(<repr> AS FLOAT): Spark reads the digits as a decimal and rounds them once
        return F.lit(decimal.Decimal(repr(v))).cast(type_sql(t))
    return F.lit(v).cast(type_sql(t))
