"""Exact, vectorised evaluation of a bound tree with pyarrow compute (Spark semantics).

``evaluate(expr, data)`` takes a ``pa.RecordBatch`` or ``pa.Table`` whose columns are the table's
top-level columns by name (as :mod:`airflow_delta_provider_apps.engine.reader` yields them) and returns one value per
row. Semantics are Spark 4's defaults (ANSI mode), checked against Spark itself by
tests/spark/test_sql_differential.py:

* three-valued logic: NULL in, NULL out; AND / OR are Kleene's; ``<=>`` is never NULL;
* floating point as Spark orders it: ``NaN = NaN`` is true and NaN is larger than every number;
* string comparison is by UTF-8 bytes, as in Spark; ``upper`` / ``lower`` use full Unicode case
  mapping (``upper('ß') = 'SS'``); ``length`` and ``substring`` count code points;
* ``%`` takes the sign of the dividend (Java), ``div`` truncates toward zero; decimal arithmetic is
  exact, rounded half-up to the result type's scale;
* casts follow Spark's ANSI rules: strings are trimmed of ASCII whitespace and control characters
  (``CAST(' 12 ' AS INT)`` is 12, ``'1.5'`` is no INT), booleans accept t/true/y/yes/1 and
  f/false/n/no/0, dates and timestamps accept Spark's partial forms (``'2026'``, ``'2026-1-2'``,
  ``'2026-01-02 10:00+01:00'``); numbers and timestamps print as Spark prints them (``1.0E10``);
* integer and decimal overflow, division by zero and invalid casts raise
  :class:`~airflow_delta_provider_apps.engine.errors.InvalidPredicateError` (ANSI errors) instead of returning NULL,
  but only for rows Spark evaluates them on: the branches of CASE / IF and the later arguments of
  coalesce are evaluated only on the rows that reach them, the right side of AND (OR) only where
  the left is not FALSE (TRUE), the other operand of a binary operator only where the first is not
  NULL (the divisor first for ``/``, ``%`` and ``div``). ``CASE WHEN y <> 0 THEN x / y END`` never
  fails.

:func:`true_mask` gives the rows where a predicate is TRUE (NULL counts as not true), which is what
DELETE removes and UPDATE changes; DELETE keeps ``NOT (p <=> TRUE)``, i.e. the rest.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Callable
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import variant as V
from ..errors import InvalidPredicateError, SchemaMismatchError
from ..schema import DataType, DecimalType
from . import nodes as n

__all__ = ["evaluate", "true_mask", "arrow_type", "compare"]


def arrow_type(t: DataType) -> pa.DataType:
    return pa.null() if t.name == "void" else t.to_arrow()


class _AnsiError(Exception):
    """A value Spark's ANSI mode refuses (bad cast, overflow, division by zero)."""


class _StoreError(Exception):
    """A value that does not fit the column it is assigned to: ``(StoreCast node, the value, error)``."""


#: what the engine or Arrow says about a value out of a type's range
_OVERFLOW = (
    "CAST_OVERFLOW",
    "NUMERIC_VALUE_OUT_OF_RANGE",
    "NUMERIC_OUT_OF_SUPPORTED_RANGE",
    "not in range",
    "overflow",
)


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
    except _StoreError as e:
        node, bad, err = e.args
        t = n.type_name(node.type)
        raise SchemaMismatchError(
            f"Cannot write the value {bad!r} into {node.where} of type {t}",
            f"the {n.type_name(node.child.type)} value does not convert to {t} ({_first_line(err)}): a value set "
            "into a column is cast to the column's type, and one that does not fit is refused, as Spark's ANSI "
            "store assignment refuses it (CAST_OVERFLOW_IN_TABLE_INSERT)",
            "fix or filter that value in the source, or widen the column to a type that holds it first "
            "(change_column_type; a partition column cannot be widened: recreate the table)",
        ) from None
    except (
        _AnsiError,
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        ZeroDivisionError,
        OverflowError,
        decimal.DecimalException,
    ) as e:
        raise InvalidPredicateError(
            "Cannot evaluate the expression on the table's rows",
            # our own ANSI errors carry Spark's error class in the text; others say what raised them
            f"{'' if isinstance(e, _AnsiError) else type(e).__name__ + ': '}{_first_line(e)} "
            "(Spark's ANSI mode refuses it too)",
            _fix_for(e),
        ) from None
    return _broadcast(out, data.num_rows, expr.type)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _fix_for(e: Exception) -> str:
    """The advice for an expression a value made fail, by what failed."""
    text = str(e)
    if isinstance(e, ZeroDivisionError) or "DIVIDE_BY_ZERO" in text or "REMAINDER_BY_ZERO" in text:
        return "guard the division (e.g. CASE WHEN y <> 0 THEN x / y END)"
    if isinstance(e, OverflowError) or any(w in text for w in _OVERFLOW):
        return "compute in a wider type (e.g. CAST(x AS BIGINT), or DECIMAL), or filter out the values that overflow"
    if "CAST_INVALID_INPUT" in text:
        return "fix or filter the values that do not convert, or guard the cast (CASE WHEN ... THEN CAST(...) END)"
    return "fix the expression for these values, or cast explicitly where the types differ"


_VALUE_ERRORS = (_AnsiError, pa.ArrowInvalid, OverflowError, decimal.DecimalException)


def first_failing(values, fn: Callable, errors: tuple = _VALUE_ERRORS) -> object:
    """The first value of ``values`` (an array or a chunked array) on which ``fn`` (of an array)
    raises one of ``errors``: a binary search over slices (a few calls, not one per value), or None."""

    def ok(a) -> bool:
        try:
            fn(a)
            return True
        except errors:
            return False

    for chunk in values.chunks if isinstance(values, pa.ChunkedArray) else [values]:
        if ok(chunk):
            continue
        lo, hi = 0, len(chunk)  # the first failing value is in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(chunk.slice(lo, mid - lo)):
                lo = mid
            else:
                hi = mid
        return chunk[lo].as_py()
    return None


def true_mask(expr: n.Expr, data: pa.RecordBatch | pa.Table) -> pa.Array:
    """Rows where the predicate is TRUE (NULL and FALSE are both False here)."""
    out = evaluate(expr, data)
    if out.type == pa.null():  # a NULL literal: no row
        return pa.repeat(pa.scalar(False), len(out))
    return pc.fill_null(out, False)


def _broadcast(value, length: int, t: DataType):
    if isinstance(value, pa.Scalar):
        return pa.repeat(value, length) if value.is_valid else pa.nulls(length, arrow_type(t))
    return value


def _is_float(t: DataType) -> bool:
    return t.name in n.FRACTIONAL


def _is_decimal(t: DataType) -> bool:
    return isinstance(t, DecimalType)


_CMP = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
# a null boolean made from buffers: ``pa.scalar`` converts a Python value, which imports pandas (~0.2 s)
_NULL_BOOL = pa.nulls(1, pa.bool_())[0]


def _fallible(e: n.Expr, memo: dict[int, bool]) -> bool:
    """Whether evaluating ``e`` can raise (so that WHICH rows it is evaluated on matters)."""
    key = id(e)
    if key in memo:
        return memo[key]
    stack, order = [e], []
    while stack:  # iterative: AND / OR chains can be hundreds of levels deep
        node = stack.pop()
        if id(node) in memo:
            continue
        order.append(node)
        stack.extend(node.children())
    for node in reversed(order):
        own = isinstance(node, (n.Arithmetic, n.Negate, n.Cast, n.Like)) or (
            isinstance(node, n.Function) and node.name in ("abs", "variant_get")
        )
        memo[id(node)] = own or any(memo.get(id(c), True) for c in node.children())
    return memo[key]


def _flatten(e: n.Expr, cls) -> list[n.Expr]:
    """``(a AND b) AND c`` -> ``[a, b, c]`` without recursion."""
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        if isinstance(node, cls):
            stack.extend(reversed(node.items))
        else:
            out.append(node)
    return out


class _Eval:
    def __init__(self, batch: pa.RecordBatch, memo: dict[int, bool] | None = None):
        self.batch = batch
        self.length = batch.num_rows
        self.memo = {} if memo is None else memo

    def eval(self, e: n.Expr):
        out = getattr(self, f"_{type(e).__name__}")(e)
        want = arrow_type(e.type)
        if out.type != want and not (isinstance(e, n.Column) and e.type.name == "void"):
            out = out.cast(want)
        return out

    def arr(self, e: n.Expr) -> pa.Array:
        return _broadcast(self.eval(e), self.length, e.type)

    def where(self, e: n.Expr, mask: pa.Array | None) -> pa.Array:
        """``e`` evaluated only on the rows where ``mask`` (no NULLs) is true: what Spark evaluates
        lazily. Elsewhere the result is NULL, or any value when ``e`` cannot fail."""
        if mask is None or not _fallible(e, self.memo):
            return self.arr(e)
        hits = pc.sum(mask).as_py() or 0
        if hits == self.length:
            return self.arr(e)
        t = arrow_type(e.type)
        if hits == 0:
            return pa.nulls(self.length, t)
        sub = _Eval(self.batch.filter(mask), self.memo).arr(e)
        return pc.replace_with_mask(pa.nulls(self.length, t), mask, sub)

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
        return cast(self.arr(e.child), e.child.type, e.type)

    def _StoreCast(self, e: n.StoreCast):
        value = self.arr(e.child)
        try:
            return store_cast(value, e.child.type, e.type)
        except (_AnsiError, pa.ArrowInvalid, OverflowError, decimal.DecimalException) as err:
            bad = first_failing(value, lambda a: store_cast(a, e.child.type, e.type))
            raise _StoreError(e, bad, err) from None

    # ---- logic
    def _And(self, e: n.And):
        return self._junction(_flatten(e, n.And), stop=False)

    def _Or(self, e: n.Or):
        return self._junction(_flatten(e, n.Or), stop=True)

    def _junction(self, items: list[n.Expr], stop: bool):
        """AND (stop=False) / OR (stop=True) left to right: an item is evaluated only on the rows the
        items before it have not decided yet (Spark's short circuit)."""
        out = self.arr(items[0])
        kleene = pc.or_kleene if stop else pc.and_kleene
        for item in items[1:]:
            open_ = pc.invert(pc.fill_null(pc.equal(out, stop), False))  # not decided: NULL or the neutral value
            out = kleene(out, self.where(item, open_))
        return out

    def _Not(self, e: n.Not):
        return pc.invert(self.eval(e.child))

    def _IsNull(self, e: n.IsNull):
        value = self.eval(e.child)
        return pc.is_valid(value) if e.negated else pc.is_null(value)

    # ---- comparisons
    def _pair(self, first: n.Expr, second: n.Expr):
        """Both operands of a null-intolerant binary operator: ``second`` only where ``first`` is not NULL."""
        a = self.arr(first)
        return a, self.where(second, pc.is_valid(a))

    def _Compare(self, e: n.Compare):
        if e.op == "<=>":
            a, b = self.arr(e.left), self.arr(e.right)
        else:
            a, b = self._pair(e.left, e.right)
        return compare(e.op, a, b, _is_float(e.left.type))

    def _In(self, e: n.In):
        a = self.arr(e.child)
        values = [v.value for v in e.values]
        present = [v for v in values if v is not None]
        t = arrow_type(e.child.type)
        if _is_float(e.child.type):
            out = pc.if_else(pc.is_null(a), _NULL_BOOL, False)
            for v in present:
                out = pc.or_kleene(out, compare("=", a, pa.scalar(v, t), True))
        else:
            hit = pc.is_in(a, value_set=pa.array(present, t))
            out = pc.if_else(pc.is_null(a), _NULL_BOOL, hit)
        if len(present) < len(values):  # x IN (..., NULL): not found -> NULL
            out = pc.if_else(pc.fill_null(out, False), True, _NULL_BOOL)
        return pc.invert(out) if e.negated else out

    def _Like(self, e: n.Like):
        value = self.arr(e.child)
        pattern = e.pattern
        if e.case_insensitive:  # Spark: lower(x) LIKE lower(pattern)
            value, pattern = _lower(value), pattern.lower()
        if pc.all(pc.is_null(value)).as_py() is not False:
            return pa.nulls(self.length, pa.bool_())
        out = pc.match_substring_regex(value, _like_regex(pattern))
        return pc.invert(out) if e.negated else out

    # ---- arithmetic
    def _Arithmetic(self, e: n.Arithmetic):
        op = e.op
        if op in ("/", "%", "div"):  # Spark evaluates the divisor first (DivModLike)
            b = self.arr(e.right)
            a = self.where(e.left, pc.is_valid(b))
        else:
            a, b = self._pair(e.left, e.right)
        t = e.type
        if _is_decimal(t):
            return _decimal_arith(op, a, b, t)
        if op in ("/", "%", "div"):
            zero = pc.and_(pc.fill_null(pc.equal(b, pa.scalar(0, b.type)), False), pc.is_valid(a))
            if pc.any(zero).as_py():
                raise _AnsiError("[DIVIDE_BY_ZERO] division by zero" if op != "%" else "[REMAINDER_BY_ZERO]")
            # divide only where both are valid and the divisor is not zero (the rest is NULL)
            b = pc.if_else(pc.fill_null(pc.equal(b, pa.scalar(0, b.type)), False), pa.scalar(None, b.type), b)
        if op == "+":
            return pc.add_checked(a, b) if not _is_float(t) else pc.add(a, b)
        if op == "-":
            return pc.subtract_checked(a, b) if not _is_float(t) else pc.subtract(a, b)
        if op == "*":
            return pc.multiply_checked(a, b) if not _is_float(t) else pc.multiply(a, b)
        if op in ("/", "div"):
            return pc.divide_checked(a, b) if not _is_float(t) else pc.divide(a, b)
        # %: the sign follows the dividend, as in Java / Spark (fmod, not Python's %)
        valid = pc.and_(pc.is_valid(a), pc.is_valid(b))
        an = a.fill_null(1).to_numpy(zero_copy_only=False)
        bn = b.fill_null(1).to_numpy(zero_copy_only=False)
        with np.errstate(all="ignore"):
            r = np.fmod(an, bn)
        return pc.if_else(valid, pa.array(r, arrow_type(t)), pa.scalar(None, arrow_type(t)))

    def _Negate(self, e: n.Negate):
        value = self.arr(e.child)
        if _is_float(e.type):
            return pc.negate(value)
        return pc.negate_checked(value)

    # ---- functions
    def _Function(self, e: n.Function):
        name = e.name
        if name == "coalesce":  # later arguments only where the earlier ones are all NULL
            out = self.arr(e.args[0])
            for a in e.args[1:]:
                out = pc.coalesce(out, self.where(a, pc.is_null(out)))
            return out
        if name == "substring":
            return self._substring(e)
        if name in ("variant_get", "try_variant_get"):
            return variant_get(self.arr(e.args[0]), e.args[1].value, e.type, safe=name == "try_variant_get")
        if name in ("to_json", "is_variant_null"):
            return _variant_rows(self.arr(e.args[0]), name)
        args = [self.arr(a) for a in e.args]
        if name == "upper":
            return _upper(args[0])
        if name == "lower":
            return _lower(args[0])
        if name == "trim":
            return pc.utf8_trim(args[0], " ")
        if name == "ltrim":
            return pc.utf8_ltrim(args[0], " ")
        if name == "rtrim":
            return pc.utf8_rtrim(args[0], " ")
        if name == "length":
            return pc.cast(pc.utf8_length(args[0]), pa.int32())
        if name == "abs":
            if _is_float(e.type) or _is_decimal(e.type):
                return pc.abs(args[0])
            return pc.abs_checked(args[0])
        if name == "concat":
            return pc.binary_join_element_wise(*args, "")
        if name in ("year", "month", "dayofmonth"):
            part = {"year": pc.year, "month": pc.month, "dayofmonth": pc.day}[name]
            return pc.cast(part(args[0]), pa.int32())
        raise pa.ArrowNotImplementedError(f"function {name}")

    def _substring(self, e: n.Function):
        """Spark's substring(str, pos[, len]): 1-based; 0 is 1; a negative pos counts from the end;
        code points, not bytes."""
        s = self.arr(e.args[0])
        literal = [a.value if isinstance(a, n.Literal) else None for a in e.args[1:]]
        if all(v is not None for v in literal) and literal[0] > 0 and (len(literal) == 1 or literal[1] >= 0):
            start = literal[0] - 1  # the common case, vectorised: a positive position, a length >= 0
            stop = None if len(literal) == 1 else start + literal[1]
            return pc.utf8_slice_codeunits(s, start, stop)  # code points (Arrow's "codeunits" of UTF-8 text)
        pos = self.where(e.args[1], pc.is_valid(s))
        valid = pc.and_(pc.is_valid(s), pc.is_valid(pos))
        if len(e.args) > 2:
            length = self.where(e.args[2], valid)
            valid = pc.and_(valid, pc.is_valid(length))
        else:
            length = None
        out = []
        for v, p, k, ok in zip(
            s.to_pylist(),
            pos.to_pylist(),
            length.to_pylist() if length is not None else [None] * self.length,
            valid.to_pylist(),
        ):
            out.append(_substring_sql(v, p, 2**31 - 1 if length is None else k) if ok else None)
        return pa.array(out, pa.string())

    def _Case(self, e: n.Case):
        """The first condition on every row; each later condition only on the rows no earlier one
        took; each value only on the rows its condition took (Spark's CASE evaluates nothing else)."""
        t = arrow_type(e.type)
        out = pa.nulls(self.length, t)
        remaining = None  # rows no branch has taken yet (None: all)
        for cond, value in e.branches:
            c = pc.fill_null(self.where(cond, remaining), False)
            taken = c if remaining is None else pc.and_(remaining, c)
            out = pc.if_else(taken, self.where(value, taken).cast(t), out)
            left = pc.invert(taken)
            remaining = left if remaining is None else pc.and_(remaining, left)
        return pc.if_else(remaining, self.where(e.otherwise, remaining).cast(t), out)


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
    return pc.if_else(either_null, _NULL_BOOL, out)


# --------------------------------------------------------------------------------------------------
# strings


def _map_strings(value: pa.Array, fn: Callable[[str], str]) -> pa.Array:
    """``fn`` over the distinct strings of ``value`` (Python), mapped back to every row."""
    if pc.all(pc.string_is_ascii(value)).as_py() is not False:
        return None  # type: ignore[return-value]  # the caller's ASCII fast path applies
    encoded = pc.dictionary_encode(value)
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(mapped, encoded.indices)


def _upper(value: pa.Array) -> pa.Array:
    """Full Unicode upper case, as Java's ``toUpperCase`` (``'ß'`` -> ``'SS'``); Arrow's utf8_upper
    maps one code point to one."""
    out = _map_strings(value, str.upper)
    return pc.ascii_upper(value) if out is None else out


def _lower(value: pa.Array) -> pa.Array:
    out = _map_strings(value, str.lower)
    return pc.ascii_lower(value) if out is None else out


def _substring_sql(s: str, pos: int, length: int) -> str:
    """``UTF8String.substringSQL``."""
    size = len(s)
    start = pos - 1 if pos > 0 else (size + pos if pos < 0 else 0)
    end = start + length
    start = max(start, 0)
    return "" if start >= end else s[start:end]


_LIKE_META = set("\\.+*?()|[]{}^$")


def _like_regex(pattern: str) -> str:
    """A LIKE pattern (``%``, ``_``, escape ``\\``) as an anchored RE2 regex; Spark refuses an escape
    before any other character and at the end."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 == len(pattern):
                raise _AnsiError(f"[INVALID_FORMAT.ESC_AT_THE_END] the LIKE pattern '{pattern}' ends with the escape")
            nxt = pattern[i + 1]
            if nxt not in ("_", "%", "\\"):
                raise _AnsiError(f"[INVALID_FORMAT.ESC_IN_THE_MIDDLE] the LIKE pattern '{pattern}' escapes '{nxt}'")
            out.append("\\" + nxt if nxt in _LIKE_META else nxt)
            i += 2
            continue
        if c == "_":
            out.append(".")
        elif c == "%":
            out.append(".*")
        else:
            out.append("\\" + c if c in _LIKE_META else c)
        i += 1
    return "(?s)\\A" + "".join(out) + "\\z"


# --------------------------------------------------------------------------------------------------
# casts (Spark's ANSI Cast)

_TRIM_ALL = "".join(chr(c) for c in range(33)) + "\x7f"  # UTF8String.trimAll: ASCII whitespace and controls
_TRIM_JAVA = "".join(chr(c) for c in range(33))  # String.trim (Double.parseDouble)
_INT_RE = re.compile(r"[+-]?\d+")
_DECIMAL_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")
_HEX_DOUBLE_RE = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP]([+-]?\d+)[fFdD]?")
_SPECIAL_DOUBLES = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf}
_SPECIAL_DOUBLES |= {"-inf": -math.inf, "-infinity": -math.inf, "nan": math.nan}
_TRUE = {"t", "true", "y", "yes", "1"}
_FALSE = {"f", "false", "n", "no", "0"}
_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_WIDE = decimal.Context(prec=120, rounding=decimal.ROUND_HALF_UP, Emax=999999, Emin=-999999)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _bad(value, target: DataType) -> _AnsiError:
    return _AnsiError(f"[CAST_INVALID_INPUT] the value {value!r} cannot be cast to {n.type_name(target)}")


def _map_values(value: pa.Array, fn: Callable, target: pa.DataType) -> pa.Array:
    """``fn`` over the distinct non-NULL values (Python), mapped back to every row."""
    if len(value) == 0:
        return pa.array([], target)
    if pa.types.is_floating(value.type) or pa.types.is_boolean(value.type):
        return pa.array([None if v is None else fn(v) for v in value.to_pylist()], target)
    encoded = pc.dictionary_encode(value)
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], target)
    return pc.take(mapped, encoded.indices)


def store_cast(value: pa.Array, src: DataType, dst: DataType) -> pa.Array:
    """``value`` (of type ``src``) stored into a column of type ``dst``: :func:`cast`, except that a
    struct's fields are matched by name (case-insensitively; a field the value lacks is NULL), in arrays'
    elements and maps' keys and values too, as the binder checked (:func:`..schema.compat.nested_fit`)."""
    from ..schema import ArrayType, MapType, StructType

    if src == dst or not isinstance(dst, (StructType, ArrayType, MapType)) or src.name == "void":
        return cast(value, src, dst)
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    mask = value.is_null() if value.null_count else None
    if isinstance(dst, StructType):
        index = {f.name.lower(): i for i, f in enumerate(src.fields)}
        children = []
        for f in dst.fields:
            i = index.get(f.name.lower())
            if i is None:
                children.append(pa.nulls(len(value), arrow_type(f.type)))
            else:
                children.append(store_cast(value.field(i), src.fields[i].type, f.type))
        fields = [pa.field(f.name, arrow_type(f.type), f.nullable) for f in dst.fields]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    offsets = value.offsets  # index the whole child array, whatever the slice
    if isinstance(dst, ArrayType):
        values = store_cast(value.values, src.element_type, dst.element_type)
        return pa.ListArray.from_arrays(offsets, values, type=arrow_type(dst), mask=mask)
    keys = store_cast(value.keys, src.key_type, dst.key_type)
    items = store_cast(value.items, src.value_type, dst.value_type)
    return pa.MapArray.from_arrays(offsets, keys, items, type=arrow_type(dst), mask=mask)


def cast(value: pa.Array, src: DataType, dst: DataType) -> pa.Array:
    """``CAST(value AS dst)`` of an array of type ``src``, as Spark's ANSI Cast."""
    target = arrow_type(dst)
    if src == dst:
        return value
    if src.name == "void":
        return pa.nulls(len(value), target)
    if dst.name == "string":
        return _to_string(value, src)
    if src.name == "string":
        return _map_values(value, lambda v: _parse_string(v, dst), target)
    if dst.name == "boolean":
        if n.is_numeric(src):
            if _is_decimal(src):
                return _map_values(value, lambda v: v != 0, target)
            return pc.not_equal(value, pa.scalar(0, value.type))
        raise _AnsiError(f"cannot cast {n.type_name(src)} to boolean")
    if src.name == "boolean":
        if _is_decimal(dst):
            return _map_values(value, lambda v: _fit_decimal(decimal.Decimal(int(v)), dst), target)
        return pc.cast(value, target)
    if _is_decimal(dst):
        if _is_float(src):  # via Java's Double.toString (BigDecimal(Double)), NaN and infinities -> NULL
            return _map_values(
                value, lambda v: None if not math.isfinite(v) else _fit_decimal(_D(repr(v)), dst), target
            )
        return _map_values(value, lambda v: _fit_decimal(decimal.Decimal(v), dst), target)
    if dst.name in n.INTEGRAL:
        lo, hi = -(2 ** (_BITS[dst.name] - 1)), 2 ** (_BITS[dst.name] - 1)

        def to_int(v):
            if isinstance(v, float):  # Spark compares in double: floor(v) <= Long.MaxValue admits 2^63
                if not (math.isfinite(v) and math.floor(v) <= float(hi - 1) and math.ceil(v) >= float(lo)):
                    raise _AnsiError(f"[CAST_OVERFLOW] {v} cannot be cast to {n.type_name(dst)}")
                return min(max(int(v), lo), hi - 1)  # truncates toward zero, saturates like Java
            k = int(v)  # decimals: truncate toward zero
            if not lo <= k < hi:
                raise _AnsiError(f"[CAST_OVERFLOW] {v} cannot be cast to {n.type_name(dst)}")
            return k

        if n.is_integral(src):
            return pc.cast(value, target)  # a safe cast: overflow raises
        return _map_values(value, to_int, target)
    if dst.name in n.FRACTIONAL:
        if _is_decimal(src):  # correctly rounded (Arrow's decimal -> double is not)
            if dst.name == "float":
                return _map_values(value, lambda v: float(np.float32(float(v))), target)
            return _map_values(value, float, target)
        return pc.cast(value, target, safe=False)
    if dst.name == "date":
        if src.name in ("timestamp", "timestamp_ntz"):
            return _map_values(value, lambda v: v.date() if v.tzinfo is None else v.astimezone(dt.UTC).date(), target)
    if dst.name in ("timestamp", "timestamp_ntz"):
        if src.name == "date":
            tz = None if dst.name == "timestamp_ntz" else dt.UTC
            return _map_values(value, lambda v: dt.datetime(v.year, v.month, v.day, tzinfo=tz), target)
        if src.name in ("timestamp", "timestamp_ntz"):  # the session time zone is UTC
            return pc.cast(value, target)
    raise _AnsiError(f"cannot cast {n.type_name(src)} to {n.type_name(dst)}")


def variant_get(value: pa.Array, path: str, dst: DataType, *, safe: bool = False) -> pa.Array:
    """Spark's ``variant_get(v, path, type)`` (``try_variant_get`` when ``safe``) over a variant column:
    the value at ``path`` (NULL where the path is missing or the variant is NULL), as a variant, or
    cast from its own type (:func:`..variant.natural`: integers long, decimals, strings...) to ``dst``
    as Spark's cast; the variant null is NULL. A value that does not cast is Spark's
    INVALID_VARIANT_CAST error, NULL for try_variant_get; an object or array reads only as a string
    (its JSON)."""
    steps = V.parse_path(path)
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    parts = dict(zip((value.type.field(i).name for i in range(value.type.num_fields)), value.flatten()))
    values, metadata = parts["value"].to_pylist(), parts["metadata"].to_pylist()
    found = [None if v is None else V.lookup(v, m, steps) for v, m in zip(values, metadata)]
    if dst.name == "variant":
        missing = pa.array([f is None for f in found])
        return pa.StructArray.from_arrays(
            [pa.array([f or b"" for f in found], pa.binary()), pa.array([m or b"" for m in metadata], pa.binary())],
            fields=list(V.arrow_type()),
            mask=missing,
        )
    from ..schema import type_from_json

    out: list = [None] * len(found)
    groups: dict[str, list[tuple[int, object]]] = {}
    for i, f in enumerate(found):
        if f is not None and not V.is_null(f):
            v, kind = V.natural(f, metadata[i])
            groups.setdefault(kind, []).append((i, v))
    for kind, items in groups.items():
        if kind in ("object", "array"):
            if dst.name != "string" and not safe:
                raise _AnsiError(f"[INVALID_VARIANT_CAST] a variant {kind} cannot be cast to {n.type_name(dst)}")
            for i, text in items:
                out[i] = text if dst.name == "string" else None
            continue
        src = type_from_json(kind)
        column = pa.array([v for _, v in items], arrow_type(src))
        try:
            done = cast(column, src, dst).to_pylist()
        except (_AnsiError, pa.ArrowInvalid, OverflowError, decimal.DecimalException):
            bad = first_failing(column, lambda a, src=src: cast(a, src, dst))
            if not safe:
                raise _AnsiError(
                    f"[INVALID_VARIANT_CAST] the variant value {bad!r} cannot be cast to {n.type_name(dst)}"
                ) from None
            done = []
            for v in column:
                try:
                    done.append(cast(pa.array([v.as_py()], column.type), src, dst)[0].as_py())
                except (_AnsiError, pa.ArrowInvalid, OverflowError, decimal.DecimalException):
                    done.append(None)
        for (i, _), v in zip(items, done):
            out[i] = v
    return pa.array(out, arrow_type(dst))


def _variant_rows(value: pa.Array, name: str) -> pa.Array:
    """``to_json(v)`` (Spark's JSON text; NULL for NULL) or ``is_variant_null(v)`` (whether the value is
    the variant null; false for a SQL NULL) of each row of a variant column."""
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    parts = dict(zip((value.type.field(i).name for i in range(value.type.num_fields)), value.flatten()))
    pairs = zip(parts["value"].to_pylist(), parts["metadata"].to_pylist())
    if name == "is_variant_null":
        return pa.array([v is not None and V.is_null(v) for v, _ in pairs], pa.bool_())
    return pa.array([None if v is None else V.to_json(v, m) for v, m in pairs], pa.string())


def _D(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)


def _fit_decimal(v: decimal.Decimal, t: DecimalType) -> decimal.Decimal:
    """``v`` rounded half-up to ``t``'s scale; more digits than its precision is an ANSI error."""
    q = v.quantize(decimal.Decimal(1).scaleb(-t.scale), context=_WIDE)
    if q.adjusted() >= t.precision - t.scale and q != 0:
        raise _AnsiError(f"[NUMERIC_VALUE_OUT_OF_RANGE] {v} cannot be represented as {t.name}")
    return q


def _parse_string(text: str, dst: DataType):
    name = dst.name
    if name in n.INTEGRAL:
        s = text.strip(_TRIM_ALL)
        if not _INT_RE.fullmatch(s):
            raise _bad(text, dst)
        k = int(s)
        if not -(2 ** (_BITS[name] - 1)) <= k < 2 ** (_BITS[name] - 1):
            raise _bad(text, dst)
        return k
    if _is_decimal(dst):
        s = text.strip(_TRIM_JAVA)
        if not _DECIMAL_RE.fullmatch(s):
            raise _bad(text, dst)
        d = decimal.Decimal(s)
        if d.adjusted() >= 38:
            raise _AnsiError(f"[NUMERIC_OUT_OF_SUPPORTED_RANGE] {text!r}")
        return _fit_decimal(d, dst)
    if name in n.FRACTIONAL:
        v = _parse_double(text)
        if v is None:
            raise _bad(text, dst)
        return float(np.float32(v)) if name == "float" else v
    if name == "boolean":
        s = text.strip(_TRIM_ALL).lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise _bad(text, dst)
    if name == "date":
        d = _parse_date(text.strip(_TRIM_ALL))
        if d is None:
            raise _bad(text, dst)
        return d
    if name in ("timestamp", "timestamp_ntz"):
        ts = _parse_timestamp(text.strip(_TRIM_ALL), ntz=name == "timestamp_ntz")
        if ts is None:
            raise _bad(text, dst)
        return ts
    if name == "binary":
        return text.encode()
    raise _bad(text, dst)


def _parse_double(text: str) -> float | None:
    """Java's Double.parseDouble, then Spark's special literals (inf, infinity, nan in any case)."""
    s = text.strip(_TRIM_JAVA)
    if _DOUBLE_RE.fullmatch(s):
        body = s.rstrip("fFdD") if not s.endswith(("NaN", "Infinity")) else s
        if body.lstrip("+-") == "NaN":
            return math.nan
        if body.lstrip("+-") == "Infinity":
            return -math.inf if body.startswith("-") else math.inf
        return float(body)
    m = _HEX_DOUBLE_RE.fullmatch(s)
    if m:
        sign, mantissa, exponent = m.groups()
        return float.fromhex(f"{sign}0x{mantissa}p{exponent}")
    return _SPECIAL_DOUBLES.get(s.lower())


def _parse_date(s: str) -> dt.date | None:
    """Spark's stringToDate: [+-]yyyy[-[m]m[-[d]d[ |T]anything]] (year of 4 to 7 digits)."""
    j = 0
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        j = 1
    segments, digits, value, i = [1, 1, 1], 0, 0, 0
    while j < len(s) and i < 3 and s[j] not in (" ", "T"):
        c = s[j]
        if i < 2 and c == "-":
            if not _valid_date_digits(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        elif "0" <= c <= "9":
            value, digits = value * 10 + int(c), digits + 1
        else:
            return None
        j += 1
    if not _valid_date_digits(i, digits):
        return None
    if i < 2 and j < len(s):
        return None
    segments[i] = value
    try:
        return dt.date(sign * segments[0], segments[1], segments[2])
    except ValueError:
        return None


def _valid_date_digits(segment: int, digits: int) -> bool:
    return (segment == 0 and 4 <= digits <= 7) or (segment != 0 and 0 < digits <= 2)


def _parse_timestamp(s: str, *, ntz: bool) -> dt.datetime | None:
    """Spark's stringToTimestamp for the date-and-time forms (a time without a date, which Spark
    completes with today's date, is refused): [+-]yyyy[-[m]m[-[d]d[( |T)[h]h[:[m]m[:[s]s[.f]]][zone]]]]."""
    j = 0
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        j = 1
    seg = [1, 1, 1, 0, 0, 0, 0]
    i, value, digits, fraction_digits, zone = 0, 0, 0, 0, None
    if j < len(s) and s[j] == "T":
        return None
    while j < len(s):
        c = s[j]
        if "0" <= c <= "9":
            if i == 6:
                fraction_digits += 1
                if digits < 6:
                    value = value * 10 + int(c)
            else:
                value = value * 10 + int(c)
            digits += 1
        elif i < 2:
            if c != "-" or not _valid_ts_digits(i, digits):
                return None
            seg[i], value, digits, i = value, 0, 0, i + 1
        elif i == 2:
            if c not in (" ", "T") or not _valid_ts_digits(i, digits):
                return None
            seg[i], value, digits, i = value, 0, 0, i + 1
        elif i in (3, 4):
            if c != ":" or not _valid_ts_digits(i, digits):
                return None
            seg[i], value, digits, i = value, 0, 0, i + 1
        elif i in (5, 6):
            if c == "." and i == 5:
                if not _valid_ts_digits(i, digits):
                    return None
                seg[i], value, digits, i = value, 0, 0, i + 1
            else:
                if not _valid_ts_digits(i, digits):
                    return None
                seg[i], value, digits = value, 0, 0
                i = 7
                zone = s[j:]
                break
        else:
            return None
        j += 1
    if zone is None:
        if not _valid_ts_digits(i, digits):
            return None
        seg[i] = value
    seg[6] *= 10 ** (6 - min(fraction_digits, 6))
    if not (0 <= seg[3] <= 23 and 0 <= seg[4] <= 59 and 0 <= seg[5] <= 59):
        return None
    try:
        local = dt.datetime(sign * seg[0], seg[1], seg[2], seg[3], seg[4], seg[5], seg[6])
    except ValueError:
        return None
    if ntz:
        return local
    tz = dt.UTC if zone is None else _zone(zone.strip())
    if tz is None:
        return None
    return local.replace(tzinfo=tz).astimezone(dt.UTC)


def _valid_ts_digits(segment: int, digits: int) -> bool:
    if segment == 6:
        return True
    if segment == 0:
        return 4 <= digits <= 6
    return 0 < digits <= 2


_OFFSET_RE = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def _zone(text: str) -> dt.tzinfo | None:
    if text in ("Z", "UTC", "GMT", "UT", "z"):
        return dt.UTC
    m = _OFFSET_RE.fullmatch(text)
    if m:
        sign, hh, mm, ss = m.groups()
        delta = dt.timedelta(hours=int(hh), minutes=int(mm or 0), seconds=int(ss or 0))
        if delta > dt.timedelta(hours=18):
            return None
        return dt.timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(text)
    except (ValueError, KeyError, OSError):
        return None


# ---- values as Spark prints them


def _to_string(value: pa.Array, src: DataType) -> pa.Array:
    name = src.name
    if n.is_integral(src) or name in ("boolean", "void"):
        return pc.cast(value, pa.string())
    if name in n.FRACTIONAL:
        return _map_values(value, lambda v: _java_float_string(v, single=name == "float"), pa.string())
    if _is_decimal(src):  # plain, with all the type's scale digits
        return _map_values(value, lambda v: format(v, "f"), pa.string())
    if name == "date":
        return _map_values(value, lambda v: f"{v.year:04d}-{v.month:02d}-{v.day:02d}", pa.string())
    if name in ("timestamp", "timestamp_ntz"):
        return _map_values(value, _timestamp_string, pa.string())
    if name == "binary":
        return _map_values(value, lambda v: v.decode("utf-8", "replace"), pa.string())
    raise _AnsiError(f"cannot cast {n.type_name(src)} to string")


def _timestamp_string(v: dt.datetime) -> str:
    if v.tzinfo is not None:
        v = v.astimezone(dt.UTC)
    text = f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    if v.microsecond:
        text += f".{v.microsecond:06d}".rstrip("0")
    return text


def _java_float_string(v: float, single: bool = False) -> str:
    """Java's Double.toString / Float.toString (:func:`..variant.java_double`), ``NaN`` and
    ``Infinity`` unquoted."""
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return V.java_double(v, single=single)


# --------------------------------------------------------------------------------------------------
# decimal arithmetic: exact, rounded half-up to the result type, overflow is an ANSI error


def _decimal_arith(op: str, a: pa.Array, b: pa.Array, t: DecimalType) -> pa.Array:
    if op in ("+", "-", "*"):  # vectorised when Arrow's exact result already has the result type's scale
        kernel = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[op]
        try:
            exact = kernel(a, b)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # beyond decimal128: exactly, in Python
            exact = None
        if exact is not None and pa.types.is_decimal128(exact.type) and exact.type.scale == t.scale:
            if exact.type.precision <= t.precision:
                return exact.cast(arrow_type(t))
            try:
                return exact.cast(arrow_type(t))  # a safe cast: more digits than t holds is an error
            except pa.ArrowInvalid:
                raise _AnsiError(f"[NUMERIC_VALUE_OUT_OF_RANGE] {op} overflows {t.name}") from None
    out = []
    for x, y in zip(a.to_pylist(), b.to_pylist()):
        if x is None or y is None:
            out.append(None)
            continue
        x, y = decimal.Decimal(x), decimal.Decimal(y)
        if op == "+":
            r = _WIDE.add(x, y)
        elif op == "-":
            r = _WIDE.subtract(x, y)
        elif op == "*":
            r = _WIDE.multiply(x, y)
        else:
            if y == 0:
                raise _AnsiError("[DIVIDE_BY_ZERO] division by zero" if op != "%" else "[REMAINDER_BY_ZERO]")
            if op == "/":  # BigDecimal.divide(y, 39, HALF_UP), then the result type's scale
                r = _WIDE.divide(x, y).quantize(decimal.Decimal(1).scaleb(-39), context=_WIDE)
            elif op == "%":  # BigDecimal.remainder: the sign of the dividend
                r = _WIDE.remainder(x, y)
            else:  # div
                r = _WIDE.divide_int(x, y)
        out.append(_fit_decimal(r, t))
    return pa.array(out, arrow_type(t))
