"""Exact, vectorised evaluation of a bound tree with pyarrow compute (Spark semantics).

``evaluate(expr, data)`` takes a ``pa.RecordBatch`` or ``pa.Table`` whose columns are the table's
top-level columns by name (as :mod:`airflow_delta_provider_apps.engine.reader` yields them) and returns one value per
row. Semantics are Spark 4's defaults (ANSI mode):

* three-valued logic: NULL in, NULL out; AND / OR are Kleene's; ``<=>`` is never NULL;
* floating point as Spark orders it: ``NaN = NaN`` is true and NaN is larger than every number;
* string comparison is by UTF-8 bytes, as in Spark;
* integer and decimal overflow, division by zero and invalid casts raise
  :class:`~airflow_delta_provider_apps.engine.errors.InvalidPredicateError` (ANSI errors) instead of returning NULL.

:func:`true_mask` gives the rows where a predicate is TRUE (NULL counts as not true), which is what
DELETE removes and UPDATE changes; DELETE keeps ``NOT (p <=> TRUE)``, i.e. the rest.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidPredicateError
from ..schema import DataType
from . import nodes as n

__all__ = ["evaluate", "true_mask", "arrow_type"]


def arrow_type(t: DataType) -> pa.DataType:
    return pa.null() if t.name == "void" else t.to_arrow()


def evaluate(expr: n.Expr, data: pa.RecordBatch | pa.Table) -> pa.Array | pa.ChunkedArray:
    """The value of ``expr`` for each row of ``data`` (an array of ``expr.type``)."""
    if isinstance(data, pa.Table):
        data = data.combine_chunks()
        batches = data.to_batches()
        if len(batches) != 1:
            if data.num_rows == 0:
                return pa.array([], arrow_type(expr.type))
            data = pa.RecordBatch.from_arrays([c.combine_chunks() for c in data.columns], schema=data.schema)
        else:
            data = batches[0]
    try:
        out = _Eval(data).eval(expr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ZeroDivisionError, OverflowError) as e:
        raise InvalidPredicateError(
            "Cannot evaluate the expression on the table's rows",
            f"{type(e).__name__}: {str(e).splitlines()[0]} (Spark's ANSI mode refuses it too)",
            "guard the expression (e.g. CASE WHEN y <> 0 THEN x / y END) or cast explicitly",
        ) from None
    return _broadcast(out, data.num_rows, expr.type)


def true_mask(expr: n.Expr, data: pa.RecordBatch | pa.Table) -> pa.Array:
    """Rows where the predicate is TRUE (NULL and FALSE are both False here)."""
    return pc.fill_null(evaluate(expr, data), False)


def _broadcast(value, length: int, t: DataType):
    if isinstance(value, pa.Scalar):
        return pa.repeat(value, length) if value.is_valid else pa.nulls(length, arrow_type(t))
    return value


def _is_float(t: DataType) -> bool:
    return t.name in n.FRACTIONAL


_CMP = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


class _Eval:
    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch
        self.length = batch.num_rows

    def eval(self, e: n.Expr):
        return getattr(self, f"_{type(e).__name__}")(e)

    def arr(self, e: n.Expr) -> pa.Array:
        return _broadcast(self.eval(e), self.length, e.type)

    # ---- leaves
    def _Column(self, e: n.Column):
        names = self.batch.schema.names
        top = e.path[0]
        if top not in names:
            low = {c.lower(): c for c in names}
            if top.lower() not in low:
                raise InvalidPredicateError(
                    f"Column '{e.name}' is not in the data being evaluated",
                    f"the data has columns {', '.join(names)}",
                    "read the columns the expression references",
                )
            top = low[top.lower()]
        col = self.batch.column(top)
        for part in e.path[1:]:
            col = pc.struct_field(col, [col.type.get_field_index(part)])
        return col

    def _Literal(self, e: n.Literal):
        return pa.scalar(e.value, type=arrow_type(e.type))

    def _Cast(self, e: n.Cast):
        value = self.eval(e.child)
        target = arrow_type(e.type)
        src = e.child.type
        if src.name in n.FRACTIONAL and n.is_integral(e.type):
            value = pc.trunc(value)  # Spark truncates toward zero
        if src.name == "string" and e.type.name == "timestamp":
            try:
                return pc.cast(value, target)
            except pa.ArrowInvalid:  # zone-less text is in the session time zone (UTC)
                return pc.assume_timezone(pc.cast(value, pa.timestamp("us")), "UTC")
        if src.name == "string" and e.type.name == "boolean":
            low = pc.utf8_lower(pc.utf8_trim_whitespace(value))
            true = pc.is_in(low, pa.array(["true", "t", "yes", "y", "1"]))
            false = pc.is_in(low, pa.array(["false", "f", "no", "n", "0"]))
            bad = pc.and_(pc.invert(pc.or_(true, false)), pc.is_valid(low))
            if pc.any(bad).as_py():
                raise pa.ArrowInvalid("invalid boolean string")
            return pc.if_else(pc.is_null(low), pa.scalar(None, pa.bool_()), true)
        return pc.cast(value, target)

    # ---- logic
    def _And(self, e: n.And):
        out = self.eval(e.items[0])
        for item in e.items[1:]:
            out = pc.and_kleene(out, self.eval(item))
        return out

    def _Or(self, e: n.Or):
        out = self.eval(e.items[0])
        for item in e.items[1:]:
            out = pc.or_kleene(out, self.eval(item))
        return out

    def _Not(self, e: n.Not):
        return pc.invert(self.eval(e.child))

    def _IsNull(self, e: n.IsNull):
        value = self.eval(e.child)
        return pc.is_valid(value) if e.negated else pc.is_null(value)

    # ---- comparisons
    def _Compare(self, e: n.Compare):
        a, b = self.eval(e.left), self.eval(e.right)
        return compare(e.op, a, b, _is_float(e.left.type))

    def _In(self, e: n.In):
        a = self.eval(e.child)
        values = [v.value for v in e.values]
        present = [v for v in values if v is not None]
        t = arrow_type(e.child.type)
        if _is_float(e.child.type):
            out = None
            for v in present:
                eq = compare("=", a, pa.scalar(v, t), True)
                out = eq if out is None else pc.or_kleene(out, eq)
            if out is None:
                out = pc.if_else(pc.is_null(a), pa.scalar(None, pa.bool_()), False) if isinstance(a, pa.Array) else a
        else:
            hit = pc.is_in(a, value_set=pa.array(present, t))
            out = pc.if_else(pc.is_null(a), pa.scalar(None, pa.bool_()), hit)
        if len(present) < len(values):  # x IN (..., NULL): not found -> NULL
            out = pc.if_else(pc.fill_null(out, False), True, pa.scalar(None, pa.bool_()))
        return pc.invert(out) if e.negated else out

    def _Like(self, e: n.Like):
        out = pc.match_like(self.eval(e.child), e.pattern, ignore_case=e.case_insensitive)
        return pc.invert(out) if e.negated else out

    # ---- arithmetic
    def _Arithmetic(self, e: n.Arithmetic):
        a, b = self.eval(e.left), self.eval(e.right)
        op = e.op
        if op == "+":
            return pc.add_checked(a, b)
        if op == "-":
            return pc.subtract_checked(a, b)
        if op == "*":
            return pc.multiply_checked(a, b)
        zero = pc.fill_null(pc.equal(b, pa.scalar(0, b.type)), False)
        if pc.any(_broadcast(zero, self.length, e.right.type)).as_py() and (
            pc.any(pc.is_valid(_broadcast(a, self.length, e.left.type))).as_py()
        ):
            raise ZeroDivisionError("division by zero")
        if op in ("/", "div"):
            return pc.divide_checked(a, b)
        # %: the sign follows the dividend, as in Java / Spark
        a_arr, b_arr = _broadcast(a, self.length, e.type), _broadcast(b, self.length, e.type)
        if isinstance(e.type, n.DecimalType):
            q = pc.trunc(pc.divide(pc.cast(a_arr, pa.float64()), pc.cast(b_arr, pa.float64())))
            return pc.subtract_checked(a_arr, pc.multiply_checked(pc.cast(q, a_arr.type), b_arr))
        valid = pc.and_(pc.is_valid(a_arr), pc.is_valid(b_arr))
        an = a_arr.fill_null(1).to_numpy(zero_copy_only=False)
        bn = b_arr.fill_null(1).to_numpy(zero_copy_only=False)
        r = np.fmod(an, bn)
        return pc.if_else(valid, pa.array(r, arrow_type(e.type)), pa.scalar(None, arrow_type(e.type)))

    def _Negate(self, e: n.Negate):
        return pc.negate_checked(self.eval(e.child))

    # ---- functions
    def _Function(self, e: n.Function):
        name = e.name
        if name == "coalesce":
            return pc.coalesce(*[self.arr(a) for a in e.args])
        args = [self.eval(a) for a in e.args]
        if name == "upper":
            return pc.utf8_upper(args[0])
        if name == "lower":
            return pc.utf8_lower(args[0])
        if name == "trim":
            return pc.utf8_trim(args[0], " ")
        if name == "ltrim":
            return pc.utf8_ltrim(args[0], " ")
        if name == "rtrim":
            return pc.utf8_rtrim(args[0], " ")
        if name == "length":
            return pc.cast(pc.utf8_length(args[0]), pa.int32())
        if name == "abs":
            return pc.abs_checked(args[0])
        if name == "concat":
            return pc.binary_join_element_wise(*[self.arr(a) for a in e.args], "")
        if name == "substring":
            return self._substring(e, args)
        raise pa.ArrowNotImplementedError(f"function {name}")

    def _substring(self, e: n.Function, args):
        literal = [isinstance(a, n.Literal) for a in e.args[1:]]
        if not all(literal):
            raise pa.ArrowNotImplementedError("substring with a non-literal position or length")
        pos = e.args[1].value
        length = e.args[2].value if len(e.args) > 2 else None
        if pos is None or (len(e.args) > 2 and length is None):
            return pa.nulls(self.length, pa.string())
        start = pos - 1 if pos > 0 else pos  # 1-based; 0 is 1; negative counts from the end
        if length is None:
            return pc.utf8_slice_codeunits(args[0], start)
        if length <= 0:
            return pc.if_else(pc.is_null(args[0]), pa.scalar(None, pa.string()), "")
        stop = start + length
        if start < 0 <= stop:
            return pc.utf8_slice_codeunits(args[0], start)
        return pc.utf8_slice_codeunits(args[0], start, stop)

    def _Case(self, e: n.Case):
        t = arrow_type(e.type)
        conds = [pc.fill_null(self.arr(c), False) for c, _ in e.branches]
        values = [pc.cast(self.arr(v), t) for _, v in e.branches]
        otherwise = pc.cast(self.arr(e.otherwise), t)
        out = otherwise
        for cond, value in reversed(list(zip(conds, values))):
            out = pc.if_else(cond, value, out)
        return out


def compare(op: str, a, b, floating: bool):
    """``a op b`` with Spark's NULL and NaN rules (``floating``: the operands are float/double)."""
    if op == "<=>":
        eq = compare("=", a, b, floating)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        return pc.if_else(pc.or_(pc.is_null(a), pc.is_null(b)), both_null, eq)
    out = _CMP[op](a, b)
    if not floating:
        return out
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    if op in ("=", "!="):
        both = pc.and_(nan_a, nan_b)
        out = pc.or_(pc.equal(a, b), both) if op == "=" else pc.and_(pc.not_equal(a, b), pc.invert(both))
    elif op in ("<", "<="):  # NaN is the largest value
        strict = pc.and_(pc.invert(nan_a), pc.or_(nan_b, pc.less(a, b)))
        out = strict if op == "<" else pc.or_(strict, compare("=", a, b, True))
    else:
        strict = pc.and_(pc.invert(nan_b), pc.or_(nan_a, pc.greater(a, b)))
        out = strict if op == ">" else pc.or_(strict, compare("=", a, b, True))
    either_null = pc.or_(pc.is_null(a), pc.is_null(b))
    return pc.if_else(either_null, pa.scalar(None, pa.bool_()), out)
