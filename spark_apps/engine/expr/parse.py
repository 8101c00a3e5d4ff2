"""Spark SQL text -> a typed tree bound to a table schema (the one parser of predicates and expressions).

sqlglot (Spark dialect, imported on first use) parses the text; this module walks its tree once and
builds :mod:`.nodes`, resolving every column against the table schema (case-insensitively, as Spark
does by default; ``a.b`` reaches into structs; backticks quote names, dots included) and typing every
node. Implicit casts follow Spark's comparison rules and are made explicit in the tree:

* numbers widen to a common type (byte < short < integer < long < decimal < float < double; an
  integral beside a decimal becomes a decimal wide enough for it; a decimal beside a float or double
  becomes double);
* a string literal beside a typed value is cast to that type (``dt = '2026-01-01'`` compares dates);
* a date beside a timestamp becomes a timestamp; NULL takes the type of the other side.

Literals are folded when cast, so a bad literal (``dt = 'yesterday'``) fails here, before anything is
read. Refused with :class:`InvalidPredicateError` (problem, cause, fix): unknown columns (the message
lists the table's columns), comparisons of incompatible types, subqueries, aggregates, window
functions, non-deterministic functions (``rand``, ``uuid``, ``current_timestamp``...), functions
not listed in :class:`.nodes.Function`, and anything else not supported (the message names it).

String literals are read exactly as Spark 4 reads them (doubled quotes, backslash escapes, raw strings,
adjacent literals concatenated: :mod:`.literals` lexes them before sqlglot sees the text). AND/OR
chains bind to one flat node whatever their length (``a OR b OR ... `` of thousands of terms), the
binding is linear in the text's size, and nesting (parentheses, or expressions inside expressions)
deeper than :data:`MAX_DEPTH` levels is refused by name, never with a raw ``RecursionError``. A long
``IN`` list of plain literals (``customer_id IN ('a', 'b', ...)``, a GDPR erasure) reaches sqlglot as
one marker and its items are bound straight from the text (:func:`compact_in_lists`), to the same tree:
5,000 values bind in ~15 ms and 20,000 in ~0.1 s (item by item through sqlglot: ~0.13 s and ~0.5 s;
50 values: ~0.3 ms).

UPDATE's ``SET col = expr`` goes through :func:`bind_assignments`: the expression is cast to the
column's type under Spark's ANSI store-assignment rules (numeric narrowing, string to number and
the like are refused; widening and exact literal casts are allowed).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import sys
from collections.abc import Mapping
from contextlib import contextmanager

from ..errors import DeltaError, InvalidPredicateError
from ..schema import ArrayType, DataType, DecimalType, MapType, PrimitiveType, StructType
from . import nodes as n
from .literals import LexedText, UnterminatedString, extract_strings

__all__ = [
    "check_text",
    "check_syntax",
    "parse_predicate",
    "parse_expression",
    "bind_assignments",
    "cast_literal",
    "common_type",
]

#: deepest nesting accepted: parentheses in the text, and levels of the bound tree (AND/OR chains count
#: as one level however long). Every consumer (evaluation, skipping, rendering, pickling to Spark tasks)
#: recurses per level, so the bound keeps them all far from Python's recursion limit.
MAX_DEPTH = 128
# sqlglot's recursive descent spends ~20 Python frames per parenthesis level: the limit parsing and
# binding run under (restored afterwards)
_PARSE_RECURSION_LIMIT = 40 * MAX_DEPTH + 2000

_FIX = "write a Spark SQL boolean expression over the table's columns, e.g. dt = '2026-01-01' AND id <= 4"
_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_LIMIT = {name: 2 ** (bits - 1) for name, bits in _BITS.items()}  # integral ranges: [-limit, limit)
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3, "decimal": 4, "float": 5, "double": 6}
_NONDETERMINISTIC = (
    "rand",
    "randn",
    "random",
    "uuid",
    "current_timestamp",
    "current_date",
    "now",
    "localtimestamp",
    "current_timezone",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "shuffle",
)
# sqlglot's node classes bound by one rule each: by comparison, arithmetic operator, date part
_COMPARISONS = {"EQ": "=", "NullSafeEQ": "<=>", "NEQ": "!=", "LT": "<", "LTE": "<=", "GT": ">", "GTE": ">="}
_ARITHMETIC = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%", "IntDiv": "div"}
_DATE_PARTS = {"Year": "year", "Month": "month", "Day": "dayofmonth", "DayOfMonth": "dayofmonth"}
_VARIANT_GETS = ("variant_get", "try_variant_get")
VARIANT = PrimitiveType("variant")


def _type_text(t: DataType) -> str:
    """A type as variant_get's type argument spells it (Spark's simple names: int, bigint, decimal(p,s))."""
    return t.simple_string()


def _err(problem: str, cause: str | None = None, fix: str = _FIX) -> InvalidPredicateError:
    return InvalidPredicateError(problem, cause, fix)


def _sqlglot():
    from sqlglot import exp, parse_one
    from sqlglot.errors import ParseError, TokenError

    return exp, parse_one, (ParseError, TokenError)


def check_text(text, what: str = "predicate") -> None:
    """Refuse what is not a condition's text before anything else looks at it: only ``None`` (no
    argument) means every row; ``""`` and blank strings (a template that rendered empty) are errors."""
    if not isinstance(text, str):
        raise _err(f"The {what} is not text", f"got {type(text).__name__} {text!r}", f"pass the {what} as a string")
    if not text.strip():
        raise _err(
            f"The {what} is empty",
            f"got {text!r}; an empty or blank {what} is refused so that a template rendering to '' never acts on "
            "every row",
            f"write a condition such as dt = '2026-01-01', or pass no {what} at all (None) to act on every row",
        )


def _too_deep(text: str, what: str) -> InvalidPredicateError:
    return _err(
        f"The {what} '{_clip(text)}' is nested too deeply",
        f"it nests parentheses or expressions more than {MAX_DEPTH} levels deep",
        f"flatten it: a long AND/OR chain or an IN list of any length is fine, nesting deeper than {MAX_DEPTH} "
        "levels is not",
    )


_EXPRESSION_FIX = "write a Spark SQL expression over the table's columns, e.g. v * 2, upper(name) or 'done'"


def _fix_for(what: str) -> str:
    """The fix line for a text that is a condition (a boolean) or a value expression."""
    return _EXPRESSION_FIX if what == "expression" else _FIX


def _syntax_cause(e, lexed) -> str:
    """A parser error in the user's terms: what is wrong and the text up to where it was found (no
    parser class names)."""
    info = (getattr(e, "errors", None) or [{}])[0]
    desc = str(info.get("description") or str(e).splitlines()[0])
    if desc.startswith("Required keyword"):
        what = "an operand is missing"
    elif desc.startswith("Expecting )"):
        what = "a closing parenthesis is missing"
    elif "Unexpected token" in desc or "Invalid expression" in desc:
        what = "unexpected text"
    else:
        import re

        what = re.sub(r"\s*for <class '[^']*'>", "", desc).strip() or "it is not Spark SQL"
    near = lexed.restore(f"{info.get('start_context') or ''}{info.get('highlight') or ''}").strip()
    return f"{what} at '{near}'" if near else what


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@contextmanager
def _recursion_room():
    """Parsing and binding run with room for :data:`MAX_DEPTH` levels of sqlglot's recursive descent."""
    before = sys.getrecursionlimit()
    if before < _PARSE_RECURSION_LIMIT:
        sys.setrecursionlimit(_PARSE_RECURSION_LIMIT)
    try:
        yield
    finally:
        if before < _PARSE_RECURSION_LIMIT:
            sys.setrecursionlimit(before)


# ---- long IN lists of plain literals, kept away from sqlglot
#
# sqlglot spends ~20 us per list item: a 5,000-value ``IN`` (a GDPR erasure) takes it ~0.1 s to parse. An
# IN list of at least FAST_IN_MIN items that are all plain literals (string placeholders, numbers with
# an optional minus sign, NULL, TRUE, FALSE) reaches sqlglot as one marker identifier, ``x IN
# (__delta_in_0__)``; the binder builds the items' literals with the code that binds sqlglot's literal
# nodes (_number_literal and friends), so the tree is the same as if sqlglot had parsed them. Anything
# else inside the parentheses (a column, an expression, a cast, a typed number such as 1L, a comment,
# a nested parenthesis) leaves the list as it is.

#: fewest items for the fast path (shorter lists cost little to parse; tests set it to force either path)
FAST_IN_MIN = 16
_IN_MARKER = "__delta_in_{}__"
_WS = r"[ \t\r\n]*"
# the numbers sqlglot reads into one literal token as they are written (no leading dot: sqlglot writes
# .5 as 0.5; no type suffix: 1L is a cast)
_NUMERAL = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
# keywords ignore case in ASCII only (``(?i)`` alone would take FALſE, an identifier, for FALSE)
_ITEM = rf"'__delta_str_[0-9]+__'|-{_WS}{_NUMERAL}|{_NUMERAL}|(?ai:NULL|TRUE|FALSE)"
# ``IN (item, item, ...)``, IN not part of a longer word; atomic items and possessive repetitions keep
# a failed match linear (a numeral can be cut in several places, backtracking through them would not be)
_IN_LIST = re.compile(rf"(?<!\w)(?ai:IN){_WS}\({_WS}(?>{_ITEM})(?:{_WS},{_WS}(?>{_ITEM}))*+{_WS}\)")
# one item of a matched list: (placeholder, minus sign, numeral, keyword)
_IN_ITEM = re.compile(rf"'(__delta_str_[0-9]+__)'|(-)?{_WS}({_NUMERAL})|(?ai:(NULL|TRUE|FALSE))")
_MARKER_RE = re.compile(r"__delta_in_[0-9]+__")


def compact_in_lists(text: str) -> tuple[str, dict[str, list[tuple[str, str, str, str]]]]:
    """``text`` with the items of each long IN list of plain literals replaced by one marker, and the
    items by marker (empty when no list qualifies, or the text already holds something marker-like)."""
    lists: dict[str, list[tuple[str, str, str, str]]] = {}
    if "__delta_in_" in text:
        return text, lists
    out: list[str] = []
    done = 0
    for m in _IN_LIST.finditer(text):
        open_paren = text.index("(", m.start())
        items = _IN_ITEM.findall(text, open_paren + 1, m.end() - 1)
        if len(items) < max(FAST_IN_MIN, 1):
            continue
        marker = _IN_MARKER.format(len(lists))
        lists[marker] = items
        out += (text[done : open_paren + 1], marker, ")")
        done = m.end()
    if not lists:
        return text, lists
    out.append(text[done:])
    return "".join(out), lists


def _lists_in_place(tree, lists: Mapping[str, object], exp) -> bool:
    """Whether every marker stands alone in the parentheses of an IN (and so can be bound as the list it
    replaced). A marker the regex put anywhere else (a comment, a backquoted name) is not, and the text
    is then parsed whole."""
    found = set()
    for node in tree.find_all(exp.In):
        items = node.expressions
        if len(items) == 1 and isinstance(items[0], exp.Column) and not items[0].comments:
            name = items[0].this
            if isinstance(name, exp.Identifier) and not name.quoted and len(items[0].parts) == 1:
                found.add(name.this)
    return found == lists.keys()


def parse_sql(text: str, what: str):
    """sqlglot's tree of ``text`` (string literals replaced by placeholders, long literal IN lists by
    markers), the lexed text and the IN lists' items by marker."""
    check_text(text, what)
    try:
        lexed = extract_strings(text)
    except UnterminatedString as e:
        raise _err(
            f"Cannot parse the {what} '{_clip(text)}'",
            f"{e.args[0]} starting at character {e.args[1] + 1}",
            "close the quote (inside a string, write a quote as '' or \\')",
        ) from None
    if lexed.depth > MAX_DEPTH:
        raise _too_deep(text, what)
    exp, parse_one, errors = _sqlglot()
    dialect = _dialect(lexed.text)
    compact, lists = compact_in_lists(lexed.text)
    tree = None
    if lists:
        try:
            with _recursion_room():
                tree = parse_one(compact, read=dialect)
        except (*errors, RecursionError):
            tree = None  # the whole text is parsed again below, for the same message as without markers
        if tree is None or not _lists_in_place(tree, lists, exp):
            tree, lists = None, {}
    try:
        if tree is None:
            with _recursion_room():
                tree = parse_one(lexed.text, read=dialect)
    except errors as e:
        raise _err(f"Cannot parse the {what} '{_clip(text)}'", _syntax_cause(e, lexed), _fix_for(what)) from None
    except RecursionError:
        raise _too_deep(text, what) from None
    if tree is None:
        raise _err(f"Cannot parse the {what} '{_clip(text)}'", "it holds no expression")
    if tree.find(exp.Select, exp.Subquery, exp.Exists) is not None:
        raise _err(f"Subqueries are not supported in '{_clip(text)}'", None, "use a condition over the table's columns")
    return tree, lexed, lists


#: a ``:`` that is no ``::`` cast: Spark's variant path (``v:a.b``), which sqlglot's Spark dialect does not
#: read and its Databricks dialect (Spark's, plus that syntax) does; string literals are placeholders here
_VARIANT_PATH = re.compile(r"(?<!:):(?!:)")


def _dialect(text: str) -> str:
    return "databricks" if _VARIANT_PATH.search(text) else "spark"


def check_syntax(text: str, what: str = "predicate") -> None:
    """Refuse what is wrong with ``text`` before any table is known (blank or unterminated text,
    nesting too deep, syntax, subqueries), with the errors :func:`parse_predicate` and
    :func:`parse_expression` raise for it: the parse-time check of a DAG's literal SQL. Columns,
    types and functions are bound to the table's schema later, by those."""
    parse_sql(text, what)


def _bind(schema: StructType, text: str, what: str, relations: Mapping[str, StructType] | None = None) -> n.Expr:
    tree, lexed, lists = parse_sql(text, what)
    exp, top = _sqlglot()[0], tree
    while isinstance(top, exp.Paren):
        top = top.this
    # a value that is a column as it is (SET s = source.s) may be a struct, an array or a map: it is
    # copied, never computed on; anything else works on primitive columns
    whole = what == "expression" and isinstance(top, (exp.Column, exp.Dot))
    try:
        with _recursion_room():
            e = _Binder(schema, text, lexed, relations, lists, whole_columns=whole).bind(tree)
    except RecursionError:
        raise _too_deep(text, what) from None
    if depth(e) > MAX_DEPTH:
        raise _too_deep(text, what)
    return e


def depth(e: n.Expr) -> int:
    """Levels of a bound tree (iterative: safe on any tree)."""
    deepest, stack = 0, [(e, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in node.children() if not isinstance(c, n.Literal))
    return deepest


def parse_predicate(text: str, schema: StructType) -> n.Expr:
    """Parse and bind a boolean Spark SQL expression (a WHERE clause without ``WHERE``)."""
    e = _bind(schema, text, "predicate")
    if e.type.name not in ("boolean", "void"):
        raise _err(
            f"The predicate '{text}' is not a condition",
            f"it is a value of type {n.type_name(e.type)}, not boolean",
            f"compare it with a value, e.g. {text} = <value>",
        )
    return e


def parse_expression(text: str, schema: StructType) -> n.Expr:
    """Parse and bind any scalar Spark SQL expression (``v * 2``, ``CAST(x AS DATE)``)."""
    return _bind(schema, text, "expression")


def parse_over(text: str, relations: Mapping[str, StructType], *, condition: bool, what: str = "condition") -> n.Expr:
    """Parse and bind ``text`` over several relations by alias (MERGE's ``target`` and ``source``).

    A column is ``alias.name`` (aliases case-insensitive, as Spark's) or a bare name that exactly one
    relation has (a name both have is ambiguous: an error naming both spellings). Every
    :class:`.nodes.Column` carries its ``relation``. ``condition``: the result must be boolean.
    """
    first = next(iter(relations.values()))
    e = _bind(first, text, what, relations)
    if condition and e.type.name not in ("boolean", "void"):
        raise _err(
            f"The {what} '{_clip(text)}' is not a condition",
            f"it is a value of type {n.type_name(e.type)}, not boolean",
            "compare it with a value",
        )
    return e


def bind_assignments(updates: Mapping[str, str], schema: StructType) -> dict[str, n.Expr]:
    """UPDATE's ``SET``: ``{column: expression text}`` -> ``{top-level column name: typed tree}``.

    Each expression is cast to its column's type (store assignment, ANSI): NULL into a NOT NULL
    column, an unknown column, a column named twice, or a cast Spark would refuse are errors.
    """
    if not updates:
        raise _err("UPDATE needs at least one column to set", "updates is empty", "pass e.g. {'v': 'v * 2'}")
    return _assign(updates, schema, lambda text: parse_expression(text, schema))


def bind_assignments_over(
    updates: Mapping[str, str],
    target: StructType,
    relations: Mapping[str, StructType],
    *,
    target_alias: str,
    leave_out: bool = False,
) -> dict[str, n.Expr]:
    """MERGE's ``SET`` / ``INSERT`` values: as :func:`bind_assignments`, the expressions over ``relations``
    by alias (:func:`parse_over`); a column name may be qualified by the target's alias; ``leave_out``
    (``merge_schema``): a struct value may lack nullable fields (:func:`store_assign`)."""

    def unqualified(name: str) -> str:
        name = str(name).strip()
        head, dot, rest = name.partition(".")
        return rest if dot and head.strip("`").lower() == target_alias.lower() else name

    named = {unqualified(k): v for k, v in updates.items()}
    if len(named) != len(updates):
        raise _err("A column is set twice", f"columns {list(updates)}", "set each column once")
    return _assign(
        named, target, lambda text: parse_over(text, relations, condition=False, what="expression"), leave_out=leave_out
    )


def _assign(updates: Mapping[str, str], schema: StructType, parse, *, leave_out: bool = False) -> dict[str, n.Expr]:
    out: dict[str, n.Expr] = {}
    for raw_name, text in updates.items():
        f = schema.find(str(raw_name).strip().strip("`"))
        if f is None:
            raise _err(
                f"Cannot update unknown column '{raw_name}'",
                f"the table has columns {', '.join(schema.names)}",
                "name an existing top-level column",
            )
        if f.name in out:
            raise _err(f"Column '{f.name}' is set twice", None, "set each column once")
        value = parse(str(text)) if not isinstance(text, n.Expr) else text
        if value.type.name == "void" and not f.nullable:
            raise _err(f"Cannot set NOT NULL column '{f.name}' to NULL", f"expression '{text}'", "set a value")
        out[f.name] = store_assign(value, f.type, f"column '{f.name}'", leave_out=leave_out)
    return out


# --------------------------------------------------------------------------------------------------
# types


def common_type(a: DataType, b: DataType) -> DataType | None:
    """The type both sides of a comparison are cast to, or None when Spark would refuse it."""
    if a == b:
        return a
    if a.name == "void":
        return b
    if b.name == "void":
        return a
    if n.is_numeric(a) and n.is_numeric(b):
        return _wider_number(a, b)
    names = {a.name, b.name}
    if names <= {"date", "timestamp", "timestamp_ntz"}:
        return n.TIMESTAMP if "timestamp" in names else n.TIMESTAMP_NTZ
    return None


def _rank(t: DataType) -> int:
    return _RANK["decimal" if isinstance(t, DecimalType) else t.name]


def _as_decimal(t: DataType) -> DecimalType:
    return t if isinstance(t, DecimalType) else DecimalType(_INTEGRAL_DIGITS[t.name], 0)


def _wider_number(a: DataType, b: DataType) -> DataType:
    if isinstance(a, DecimalType) or isinstance(b, DecimalType):
        if _rank(a) > 4 or _rank(b) > 4:
            return n.DOUBLE
        da, db = _as_decimal(a), _as_decimal(b)
        scale = max(da.scale, db.scale)
        whole = max(da.precision - da.scale, db.precision - db.scale)
        return DecimalType(min(38, whole + scale), scale)
    names = {a.name, b.name}
    if "float" in names and names & {"integer", "long"}:  # ANSI: a float cannot hold every int or long
        return n.DOUBLE
    return a if _rank(a) >= _rank(b) else b


def _bounded(precision: int, scale: int) -> DecimalType:
    """Spark's ``adjustPrecisionScale`` (precision loss allowed): beyond 38 digits the scale gives way,
    down to 6, so that the integral digits fit."""
    if precision <= 38:
        return DecimalType(precision, scale)
    whole = precision - scale
    return DecimalType(38, max(38 - whole, min(scale, 6)))


def decimal_result(op: str, a: DecimalType, b: DecimalType) -> DecimalType:
    """The result type of ``a op b`` on decimals (Spark's DecimalPrecision)."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return _bounded(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return _bounded(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return _bounded(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)  # %
    return _bounded(min(p1 - s1, p2 - s2) + scale, scale)


def _can_store(src: DataType, dst: DataType) -> bool:
    """Spark's ANSI store assignment: what an UPDATE may write into a column without an explicit cast."""
    if src == dst or src.name == "void":
        return True
    if n.is_numeric(src) and n.is_numeric(dst):
        return True  # checked per value: an overflow is an error at run time, as in ANSI mode
    if src.name == "date" and dst.name in ("timestamp", "timestamp_ntz"):
        return True
    if {src.name, dst.name} == {"timestamp", "timestamp_ntz"}:
        return True
    return False


def _copies_into(src: DataType, dst: DataType) -> bool:
    """A nested value (struct, array, map) of type ``src`` stored as it is in ``dst``: the same shape
    and leaf types (field names equal, field metadata aside), and no NULL where ``dst`` forbids one.
    Nested values are copied, never cast (a cast inside one is refused: cast it explicitly)."""
    if isinstance(src, StructType) and isinstance(dst, StructType):
        return len(src.fields) == len(dst.fields) and all(
            a.name == b.name and (b.nullable or not a.nullable) and _copies_into(a.type, b.type)
            for a, b in zip(src.fields, dst.fields)
        )
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        return (dst.contains_null or not src.contains_null) and _copies_into(src.element_type, dst.element_type)
    if isinstance(src, MapType) and isinstance(dst, MapType):
        nulls_ok = dst.value_contains_null or not src.value_contains_null
        return nulls_ok and _copies_into(src.key_type, dst.key_type) and _copies_into(src.value_type, dst.value_type)
    return src == dst


def store_assign(value: n.Expr, target: DataType, where: str, *, leave_out: bool = False) -> n.Expr:
    """``value`` as written into a column of type ``target`` (``where`` names it): Spark's ANSI store
    assignment; a struct, array or map by name (:func:`..schema.compat.nested_fit`), the fields a
    struct value lacks NULL only with ``leave_out`` (MERGE's ``merge_schema``)."""
    if value.type == target:
        return value
    if isinstance(target, (StructType, ArrayType, MapType)) and not isinstance(value, n.Literal):
        from ..schema.compat import nested_fit

        if _copies_into(value.type, target):
            return value
        problems = nested_fit(value.type, target, _can_store, leave_out=leave_out, nulls=True)
        if not problems:
            return n.StoreCast(value, target, where)  # fields by name, leaves cast (evaluate.store_cast)
        raise _err(
            f"Cannot assign a {value.type.simple_string()} to {where} of type {target.simple_string()}",
            f"in {where}: " + "; ".join(problems) + " (a struct's fields are matched by name, each value "
            "stored as Spark's ANSI store assignment allows)",
            "make the source's value match the column (add, rename or cast its fields), pass merge_schema=True "
            "(MERGE) to add new fields to the table and write NULL in the ones it leaves out, or widen the "
            "table's column first (change_column_type, or merge_schema on a type-widening table)",
        )
    if isinstance(value, n.Literal):
        return cast_literal(value, target, where)
    if not _can_store(value.type, target):
        raise _err(
            f"Cannot assign a {n.type_name(value.type)} to {where} of type {n.type_name(target)}",
            "Spark's store assignment (ANSI) does not cast it implicitly",
            f"cast it explicitly, e.g. CAST(... AS {n.type_name(target).upper()})",
        )
    return n.StoreCast(value, target, where)


_TS_RE = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?))?\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)


def _parse_timestamp(text: str, *, ntz: bool) -> dt.datetime:
    m = _TS_RE.match(text)
    if not m:
        raise ValueError(text)
    date_part, time_part, zone = m.groups()
    time_part = time_part or "00:00:00"
    if "." in time_part:  # Python takes at most 6 fraction digits
        head, frac = time_part.split(".")
        time_part = f"{head}.{frac[:6]}"
    z = "" if not zone else ("+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:]))
    value = dt.datetime.fromisoformat(f"{date_part}T{time_part}{z}")
    if ntz:
        return value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def cast_literal(lit: n.Literal, target: DataType, where: str = "the value") -> n.Literal:
    """Fold ``CAST(lit AS target)`` now; an impossible cast is an error naming the value."""
    v = lit.value
    if lit.type == target:
        return lit
    if v is None:
        return n.Literal(v, target)
    try:
        out = _cast_value(v, lit.type, target)
    except (ValueError, TypeError, ArithmeticError, OverflowError):
        raise _err(
            f"Cannot use {_show(v)} as {_a(n.type_name(target))} for {where}",
            f"the value cannot be cast from {n.type_name(lit.type)} to {n.type_name(target)}",
            f"write {_a(n.type_name(target))} literal"
            + (" such as '2026-01-01'" if target.name == "date" else "")
            + (" such as '2026-01-01 12:00:00'" if target.name.startswith("timestamp") else ""),
        ) from None
    return n.Literal(out, target)


def _a(word: str) -> str:
    """``word`` with its indefinite article ("an integer", "a date")."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _show(v) -> str:
    return f"'{v}'" if isinstance(v, str) else repr(v)


def _cast_value(v, src: DataType, dst: DataType):
    name = dst.name
    if isinstance(dst, DecimalType):
        d = decimal.Decimal(str(v).strip()) if not isinstance(v, bool) else None
        if d is None or not d.is_finite():
            raise ValueError(v)
        q = d.quantize(decimal.Decimal(1).scaleb(-dst.scale), rounding=decimal.ROUND_HALF_UP)
        if len(q.as_tuple().digits) > dst.precision and q != 0:
            raise OverflowError(v)
        return q
    if name in n.INTEGRAL:
        if type(v) is not int:  # an int (an integer literal, the usual case) is only range-checked
            if isinstance(v, bool):
                raise TypeError(v)
            if isinstance(v, str):
                v = decimal.Decimal(v.strip())
            if isinstance(v, (float, decimal.Decimal)):
                if v != v or v in (float("inf"), float("-inf")):
                    raise ValueError(v)
                v = int(v)  # Spark truncates toward zero
        limit = _LIMIT[name]
        if not -limit <= int(v) < limit:
            raise OverflowError(v)
        return int(v)
    if name in n.FRACTIONAL:
        if isinstance(v, bool):
            raise TypeError(v)
        return float(v.strip() if isinstance(v, str) else v)
    if name == "string":
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dt.datetime):
            return v.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".")
        return str(v)
    if name == "boolean":
        if isinstance(v, str):
            s = v.strip().lower()
            if s in ("true", "t", "yes", "y", "1"):
                return True
            if s in ("false", "f", "no", "n", "0"):
                return False
            raise ValueError(v)
        if isinstance(v, bool):
            return v
        raise TypeError(v)
    if name == "date":
        if isinstance(v, dt.datetime):
            return v.date()
        if isinstance(v, str):
            s = v.strip()
            return dt.date.fromisoformat(s[:10]) if _TS_RE.match(s) else dt.date.fromisoformat(s)
        raise TypeError(v)
    if name in ("timestamp", "timestamp_ntz"):
        ntz = name == "timestamp_ntz"
        if isinstance(v, dt.datetime):
            return _parse_timestamp(v.isoformat(), ntz=ntz)
        if isinstance(v, dt.date):
            base = dt.datetime(v.year, v.month, v.day)
            return base if ntz else base.replace(tzinfo=dt.UTC)
        if isinstance(v, str):
            return _parse_timestamp(v, ntz=ntz)
        raise TypeError(v)
    if name == "binary":
        if isinstance(v, bytes):
            return v
        if isinstance(v, str):
            return v.encode()
        raise TypeError(v)
    raise TypeError(v)


# --------------------------------------------------------------------------------------------------
# binding

_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_DECIMAL_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_KEYWORD_LITERALS = {
    "NULL": n.Literal(None, n.NULL),
    "TRUE": n.Literal(True, n.BOOLEAN),
    "FALSE": n.Literal(False, n.BOOLEAN),
}


def _number_literal(text: str) -> n.Literal:
    """A number literal as Spark types it (its sign included: ``-5`` is one literal), for sqlglot's number
    nodes and the items of compacted IN lists alike."""
    if _INTEGER_TEXT.fullmatch(text):
        v = int(text)
        if -(2**31) <= v < 2**31:
            return n.Literal(v, n.INTEGER)
        if -(2**63) <= v < 2**63:
            return n.Literal(v, n.LONG)
        d = decimal.Decimal(text)
        if len(d.as_tuple().digits) > 38:
            raise _err(f"Number {text} is too large", "it exceeds decimal(38,0)", "use a smaller value")
        return n.Literal(d, DecimalType(max(1, len(d.as_tuple().digits)), 0))
    if _DECIMAL_TEXT.fullmatch(text):  # Spark: 1.5 is a decimal literal
        d = decimal.Decimal(text)
        t = d.as_tuple()
        scale = max(0, -t.exponent)
        precision = max(len(t.digits), scale, 1)
        if precision > 38:
            return n.Literal(float(text), n.DOUBLE)
        return n.Literal(d, DecimalType(precision, scale))
    return n.Literal(float(text), n.DOUBLE)  # 1e3 and the like are doubles in Spark


class _Lazy:
    """A message fragment rendered only if an error needs it (rendering every IN element's context
    eagerly made binding quadratic)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __str__(self) -> str:
        return self.fn()


class _Binder:
    def __init__(
        self,
        schema: StructType,
        text: str,
        lexed: LexedText,
        relations: Mapping[str, StructType] | None = None,
        lists: Mapping[str, list[tuple[str, str, str, str]]] | None = None,
        *,
        whole_columns: bool = False,
    ):
        self.whole_columns = whole_columns  # a nested-typed column may be the whole value
        self.schema = schema
        self.relations = dict(relations or {})
        self.text = _clip(text)
        self.lexed = lexed
        self.lists = lists or {}  # IN-list items by marker (see compact_in_lists)
        self.exp = _sqlglot()[0]

    def _sql(self, node) -> str:
        """A node as the user wrote it (for messages): rendered by sqlglot, IN lists and literals put back."""
        sql = node.sql(_dialect(self.lexed.text))  # v:a stays v:a
        if self.lists:  # each item as sqlglot renders its literal node: 'x', -5, 1.50, NULL
            sql = _MARKER_RE.sub(
                lambda m: ", ".join(
                    f"'{key}'" if key else kw.upper() if kw else sign + num for key, sign, num, kw in self.lists[m[0]]
                ),
                sql,
            )
        return _clip(self.lexed.restore(sql), 120)

    def _quoted(self, node) -> _Lazy:
        return _Lazy(lambda: f"'{self._sql(node)}'")

    # ---- entry
    def bind(self, node) -> n.Expr:
        exp = self.exp
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            raise _err(
                f"Subqueries are not supported in '{self.text}'", None, "use a condition over the table's columns"
            )
        if isinstance(node, exp.Window):
            raise _err(f"Window functions are not allowed in '{self.text}'", None, _FIX)
        if isinstance(node, exp.AggFunc):
            raise _err(
                f"Aggregate function {self._sql(node)} is not allowed in '{self.text}'",
                "a row-level condition cannot aggregate",
                _FIX,
            )
        kind = type(node).__name__
        if kind in _COMPARISONS:
            return self._compare(_COMPARISONS[kind], node.this, node.expression)
        if kind in _ARITHMETIC:
            return self._arith(_ARITHMETIC[kind], node)
        if kind in _DATE_PARTS:
            return self._date_part(_DATE_PARTS[kind], node)
        handler = getattr(self, f"_b_{kind}", None)
        if handler is None:
            return self._fallback(node)
        return handler(node)

    def _fallback(self, node):
        exp = self.exp
        if isinstance(node, exp.Func):
            name = (node.sql_name() if hasattr(node, "sql_name") else type(node).__name__).lower()
            if isinstance(node, exp.Anonymous):
                name = str(node.this).lower()
            if name in _NONDETERMINISTIC or type(node).__name__.lower() in _NONDETERMINISTIC:
                raise _err(
                    f"Non-deterministic function {name}() is not allowed in '{self.text}'",
                    "the result would differ between the files a command reads and rewrites",
                    "compute the value first and pass it as a literal (Airflow: a template such as '{{ ds }}')",
                )
            raise _err(
                f"Function {name}() is not supported in '{self.text}'",
                "supported: coalesce, if, upper, lower, trim, ltrim, rtrim, length, substring, concat, abs, "
                "year, month, day, dayofmonth, to_date, variant_get, try_variant_get (and v:path), "
                "is_variant_null, to_json of a variant",
                "rewrite the condition with supported functions, comparisons, IN, LIKE, BETWEEN, IS NULL",
            )
        raise _err(
            f"Cannot use '{self._sql(node)}' in '{self.text}'",
            f"{type(node).__name__} expressions are not supported",
            _FIX,
        )

    # ---- leaves
    def _b_Column(self, node) -> n.Expr:
        parts = [p.name for p in node.parts]
        return self._column(parts)

    def _b_Dot(self, node) -> n.Expr:
        parts = []
        cur = node
        while isinstance(cur, self.exp.Dot):
            parts.insert(0, cur.expression.name)
            cur = cur.this
        if not isinstance(cur, self.exp.Column):
            return self._fallback(node)
        return self._column([p.name for p in cur.parts] + parts)

    def _column(self, parts: list[str]) -> n.Column:
        if not self.relations:
            return self._column_in(self.schema, parts, None)
        by_alias = {a.lower(): a for a in self.relations}
        if len(parts) > 1 and parts[0].lower() in by_alias:
            alias = by_alias[parts[0].lower()]
            return self._column_in(self.relations[alias], parts[1:], alias)
        having = [a for a, s in self.relations.items() if s.find(parts[0]) is not None]
        if len(having) > 1:
            raise _err(
                f"Column '{'.'.join(parts)}' is ambiguous in '{self.text}'",
                f"both {' and '.join(having)} have it",
                f"qualify it: {' or '.join(f'{a}.{parts[0]}' for a in having)}",
            )
        if not having:
            listed = "; ".join(f"{a}: {', '.join(s.names)}" for a, s in self.relations.items())
            raise _err(
                f"Unknown column '{'.'.join(parts)}' in '{self.text}'",
                f"the columns are {listed}",
                f"use a column of one of them, qualified by its alias ({', '.join(self.relations)})",
            )
        return self._column_in(self.relations[having[0]], parts, having[0])

    def _column_in(self, schema: StructType, parts: list[str], relation: str | None) -> n.Column:
        fields = schema.field_path(parts)
        path = [f.name for f in fields]
        if not fields:
            whose = "the table" if relation is None else f"'{relation}'"
            shown = parts if relation is None else [relation, *parts]
            raise _err(
                f"Unknown column '{'.'.join(shown)}' in '{self.text}'",
                f"{whose} has columns {', '.join(schema.names)}",
                f"use one of {whose}'s columns (quote names with special characters in `backticks`)",
            )
        field = fields[-1]
        if len(fields) < len(parts):  # the path stops at ``field``
            if not isinstance(field.type, StructType):
                raise _err(
                    f"Column '{'.'.join(path)}' is not a struct in '{self.text}'",
                    f"it is {n.type_name(field.type)}",
                    "quote a column name that contains dots with backticks, e.g. `a.b`",
                )
            raise _err(
                f"Unknown field '{parts[len(fields)]}' in '{'.'.join(parts)}' of '{self.text}'",
                f"'{'.'.join(path)}' has fields {', '.join(field.type.names)}",
                "name an existing struct field",
            )
        if not isinstance(field.type, (PrimitiveType, DecimalType)) and not self.whole_columns:
            raise _err(
                f"Column '{'.'.join(path)}' of type {field.type.simple_string()} cannot be used in '{self.text}'",
                "conditions work on primitive columns (nested struct fields included)",
                "reference a primitive field, e.g. s.a",
            )
        return n.Column(tuple(path), field.type, field.nullable, tuple(f.physical_name for f in fields), relation)

    def _b_Literal(self, node) -> n.Literal:
        if node.is_string:
            return self._string_literal(node.this)
        return _number_literal(node.this)

    def _string_literal(self, text: str) -> n.Literal:
        # the user's literals are placeholders (see .literals); sqlglot's own are not
        return n.Literal(self.lexed.strings.get(text, text), n.STRING)

    def _b_Boolean(self, node) -> n.Literal:
        return _KEYWORD_LITERALS["TRUE" if node.this else "FALSE"]

    def _b_Null(self, node) -> n.Literal:
        return _KEYWORD_LITERALS["NULL"]

    def _b_HexString(self, node) -> n.Literal:
        return n.Literal(bytes.fromhex(node.this), n.BINARY)

    def _b_Neg(self, node) -> n.Expr:
        # Spark's grammar reads a minus sign before a number (or a typed one such as 128Y) as part of
        # the literal: -2147483648 is an int and -128Y a tinyint; -(2147483648) stays a bigint negated
        inner = node.this
        number = inner.this if isinstance(inner, self.exp.TryCast) and not inner.args.get("safe") else inner
        if isinstance(number, self.exp.Literal) and not number.is_string and not number.this.startswith("-"):
            if number is inner:
                return _number_literal("-" + number.this)
            signed = inner.copy()
            signed.this.set("this", "-" + number.this)
            return self.bind(signed)
        child = self.bind(node.this)
        if isinstance(child, n.Literal) and n.is_numeric(child.type) and child.value is not None:
            bits = _BITS.get(child.type.name)
            if bits is None or -child.value < 2 ** (bits - 1):  # -(-2147483648) overflows: left to run time
                return n.Literal(-child.value, child.type)
        self._need_number(child, "-")
        return n.Negate(child, child.type)

    # ---- casts
    def _b_Cast(self, node) -> n.Expr:
        from ..schema import parse_type

        target = parse_type(node.args["to"].sql("spark"))
        if not isinstance(target, (PrimitiveType, DecimalType)):
            raise _err(f"Cannot cast to {target.simple_string()} in '{self.text}'", None, "cast to a primitive type")
        child = self.bind(node.this)
        if child.type == VARIANT:
            return self._variant_get(child, target, safe=isinstance(node, self.exp.TryCast))
        if isinstance(child, n.Literal):
            return cast_literal(child, target, self._quoted(node))
        return n.Cast(child, target)

    _b_TryCast = _b_Cast

    # ---- variants: variant_get, try_variant_get, Spark's v:path and casts of them
    def _variant_get(self, child: n.Expr, target: DataType, *, safe: bool, path: str = "$") -> n.Expr:
        """``variant_get(child, path, target)`` (``try_variant_get`` when ``safe``); a cast of a
        ``variant_get`` into a variant folds into it, as Spark's cast of a variant is its variant_get."""
        if not isinstance(target, (PrimitiveType, DecimalType)) or target.name == "void":
            raise _err(
                f"Cannot read a variant as {target.simple_string()} in '{self.text}'",
                "conditions read variant values as primitive types (or as variant)",
                "read a primitive, e.g. variant_get(v, '$.a', 'int') or v:a::string",
            )
        if isinstance(child, n.Function) and child.name in _VARIANT_GETS and child.type == VARIANT:
            child, path = child.args[0], child.args[1].value
            safe = safe or child.name == "try_variant_get"
        if child.type != VARIANT:
            raise _err(
                f"variant_get needs a variant, got {n.type_name(child.type)} in '{self.text}'",
                "variant paths and variant_get read variant columns",
                "apply them to a variant column (parse_json strings into a variant column first)",
            )
        name = "try_variant_get" if safe else "variant_get"
        return n.Function(name, (child, n.Literal(path, n.STRING), n.Literal(_type_text(target), n.STRING)), target)

    def _b_JSONExtract(self, node) -> n.Expr:
        if not node.args.get("variant_extract"):
            return self._fallback(node)
        child = self.bind(node.this)
        steps = []
        for part in node.expression.expressions:
            kind = type(part).__name__
            if kind == "JSONPathRoot":
                continue
            if kind == "JSONPathKey" and isinstance(part.this, str):
                steps.append(self.lexed.strings.get(part.this, part.this))  # a quoted key was lexed out
            elif kind == "JSONPathSubscript" and isinstance(part.this, int):
                steps.append(part.this)
            else:
                raise _err(
                    f"The variant path '{self._sql(node)}' is not supported in '{self.text}'",
                    "paths are keys and array indexes (v:a.b[0]); wildcards and slices are not",
                    "name each key and index, e.g. v:items[0].sku",
                )
        from ..variant import path_text

        return self._variant_get(child, VARIANT, safe=False, path=path_text(tuple(steps)))

    def _variant_arg(self, node, name: str) -> n.Expr:
        child = self.bind(node)
        if child.type != VARIANT:
            raise _err(
                f"{name} needs a variant, got {n.type_name(child.type)} in '{self.text}'",
                f"{name} reads variant values",
                "apply it to a variant column or a v:path",
            )
        return child

    def _b_JSONFormat(self, node) -> n.Expr:
        """``to_json(v)`` of a variant: its JSON text (Spark's); to_json of anything else is not supported."""
        if node.args.get("options") is not None:
            return self._fallback(node)
        return n.Function("to_json", (self._variant_arg(node.this, "to_json"),), n.STRING)

    def _variant_function(self, name: str, node) -> n.Expr:
        """``variant_get(v, path[, type])`` / ``try_variant_get``: the path and type string literals."""
        from ..schema import parse_type
        from ..variant import parse_path

        args = node.expressions
        if len(args) not in (2, 3):
            raise _err(f"{name} takes 2 or 3 arguments in '{self.text}'", None, f"write {name}(v, '$.a', 'int')")
        child = self.bind(args[0])
        literals = [self.bind(a) for a in args[1:]]
        if not all(isinstance(a, n.Literal) and a.type.name == "string" for a in literals):
            raise _err(
                f"{name}'s path and type must be string literals in '{self.text}'",
                None,
                f"write {name}(v, '$.a', 'int')",
            )
        try:
            parse_path(literals[0].value)
            target = parse_type(literals[1].value) if len(literals) == 2 else VARIANT
        except DeltaError as e:
            raise _err(f"Cannot use {self._sql(node)} in '{self.text}'", e.problem, e.fix) from None
        return self._variant_get(child, target, safe=name == "try_variant_get", path=literals[0].value)

    # ---- logic
    def _b_And(self, node) -> n.Expr:
        return n.And(self._chain(node, self.exp.And, n.And))

    def _b_Or(self, node) -> n.Expr:
        return n.Or(self._chain(node, self.exp.Or, n.Or))

    def _chain(self, node, kind, bound_kind) -> tuple[n.Expr, ...]:
        """The operands of an AND (or OR) chain, in order, as one flat tuple: sqlglot nests a chain of
        n terms n levels deep; walking it with a stack keeps binding free of that depth."""
        exp = self.exp
        items: list[n.Expr] = []
        stack = [node]
        while stack:
            cur = stack.pop()
            while isinstance(cur, exp.Paren):
                cur = cur.this
            if isinstance(cur, kind):
                stack += [cur.expression, cur.this]  # ``this`` is taken first: text order
                continue
            bound = self._predicate(cur)
            items += bound.items if isinstance(bound, bound_kind) else [bound]
        return tuple(items)

    def _b_Not(self, node) -> n.Expr:
        inner = node.this
        exp = self.exp
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Is):
            e = self._b_Is(inner)
            return n.IsNull(e.child, not e.negated)
        if isinstance(inner, exp.In):
            e = self._b_In(inner)
            return n.In(e.child, e.values, not e.negated) if isinstance(e, n.In) else n.Not(e)
        return n.Not(self._predicate(inner))

    def _predicate(self, node) -> n.Expr:
        e = self.bind(node)
        if e.type.name == "void":
            return n.Literal(None, n.BOOLEAN)
        if e.type.name != "boolean":
            raise _err(
                f"'{self._sql(node)}' is not a condition in '{self.text}'",
                f"it is a value of type {n.type_name(e.type)}",
                "compare it with something",
            )
        return e

    # ---- comparisons
    def _compare(self, op: str, left, right) -> n.Expr:
        a, b = self.bind(left), self.bind(right)
        a, b = self._coerce_pair(a, b, _Lazy(lambda: f"'{self._sql(left)} {op} {self._sql(right)}'"))
        return n.Compare(op, a, b)

    def _coerce_pair(self, a: n.Expr, b: n.Expr, where: str) -> tuple[n.Expr, n.Expr]:
        if VARIANT in (a.type, b.type):
            raise _err(
                f"Cannot compare a variant in {where}",
                "a variant is not comparable (as in Spark); its values are read with a type first",
                "read the value as a type, e.g. v:a::int = 1, variant_get(v, '$.a', 'string') = 'x', "
                "or test it with IS NULL",
            )
        if a.type == b.type:
            return a, b
        # a string literal takes the other side's type
        if isinstance(b, n.Literal) and b.type.name == "string" and a.type.name != "string":
            return a, cast_literal(b, a.type, where)
        if isinstance(a, n.Literal) and a.type.name == "string" and b.type.name != "string":
            return cast_literal(a, b.type, where), b
        t = common_type(a.type, b.type)
        if t is None:
            raise _err(
                f"Cannot compare {n.type_name(a.type)} with {n.type_name(b.type)} in {where}",
                "Spark has no implicit cast between these types",
                "cast one side explicitly, e.g. CAST(x AS STRING)",
            )
        return self._to(a, t, where), self._to(b, t, where)

    def _to(self, e: n.Expr, t: DataType, where: str) -> n.Expr:
        if e.type == t:
            return e
        if isinstance(e, n.Literal):
            return cast_literal(e, t, where)
        return n.Cast(e, t)

    def _b_Is(self, node) -> n.IsNull:
        if not isinstance(node.expression, self.exp.Null):
            raise _err(f"Only IS NULL / IS NOT NULL are supported in '{self.text}'", None, _FIX)
        return n.IsNull(self.bind(node.this))

    def _b_Between(self, node) -> n.Expr:
        return n.And(
            (
                self._compare(">=", node.this, node.args["low"]),
                self._compare("<=", node.this, node.args["high"]),
            )
        )

    def _b_In(self, node) -> n.Expr:
        if node.args.get("query") or node.args.get("unnest"):
            raise _err(f"Subqueries are not supported in '{self.text}'", None, "list the values: x IN (1, 2, 3)")
        child = self.bind(node.this)
        if child.type == VARIANT:
            self._coerce_pair(child, child, self._quoted(node))  # refused: a variant is not comparable
        items = self._compacted(node)
        if items is not None:  # a long list of plain literals: bound from its items (see compact_in_lists)
            string, keyword = self._string_literal, _KEYWORD_LITERALS
            values = [
                string(key) if key else keyword[kw.upper()] if kw else _number_literal(sign + num)
                for key, sign, num, kw in items
            ]
        else:
            values = [self.bind(v) for v in node.expressions]
            if not all(isinstance(v, n.Literal) for v in values):
                # IN over expressions: an OR of equalities, exactly as SQL defines it
                return n.Or(tuple(self._compare("=", node.this, v) for v in node.expressions))
        t = child.type
        # the common type, folded over the values' types; each step is computed once per pair of type
        # objects (a value's type is mostly a shared constant): the pair is kept, so its ids stay its own
        steps: dict[tuple[int, int], tuple[DataType, DataType, DataType]] = {}
        for v in values:
            vt = v.type
            step = steps.get((id(t), id(vt)))
            if step is None:
                after = (common_type(t, vt) or t) if vt.name not in ("void", "string") or t.name == "string" else t
                step = steps[id(t), id(vt)] = (t, vt, after)
            t = step[2]
        where = self._quoted(node)
        child = self._to(child, t, where)
        lits = tuple(cast_literal(v, t, where) for v in values)
        return n.In(child, lits)

    def _compacted(self, node) -> list[tuple[str, str, str, str]] | None:
        """The items of the IN list a marker stands for, or None for a list sqlglot parsed."""
        if self.lists and len(node.expressions) == 1 and isinstance(node.expressions[0], self.exp.Column):
            return self.lists.get(node.expressions[0].name)
        return None

    def _like(self, node, *, case_insensitive: bool) -> n.Expr:
        child = self.bind(node.this)
        pattern = self.bind(node.expression)
        if not isinstance(pattern, n.Literal) or pattern.type.name != "string":
            raise _err(f"LIKE needs a string literal pattern in '{self.text}'", None, "write x LIKE 'abc%'")
        if node.args.get("escape") is not None:
            raise _err(f"LIKE ... ESCAPE is not supported in '{self.text}'", None, "use the default escape \\")
        if child.type.name != "string":
            child = self._to(child, n.STRING, "LIKE")
        return n.Like(child, pattern.value, bool(node.args.get("negate")), case_insensitive)

    def _b_Like(self, node):
        return self._like(node, case_insensitive=False)

    def _b_ILike(self, node):
        return self._like(node, case_insensitive=True)

    # ---- arithmetic
    def _need_number(self, e: n.Expr, op: str) -> None:
        if not n.is_numeric(e.type) and e.type.name != "void":
            raise _err(
                f"Operator {op} needs numbers in '{self.text}'",
                f"got a {n.type_name(e.type)}",
                "cast the value to a number first",
            )

    def _arith(self, op: str, node) -> n.Expr:
        a, b = self.bind(node.this), self.bind(node.expression)
        for side in (a, b):
            self._need_number(side, op)
        if a.type.name == "void" or b.type.name == "void":
            other = b if a.type.name == "void" else a
            return n.Literal(None, other.type if other.type.name != "void" else n.INTEGER)
        t = _wider_number(a.type, b.type)
        if isinstance(t, DecimalType) and op != "div":
            # each side keeps its own decimal type (an integral column as decimal(10,0) and the like, an
            # integral literal with just its digits); the result type is Spark's DecimalPrecision rule
            da, db = self._decimal_operand(a), self._decimal_operand(b)
            return n.Arithmetic(op, self._to(a, da, op), self._to(b, db, op), decimal_result(op, da, db))
        if op == "/":
            return n.Arithmetic(op, self._to(a, n.DOUBLE, op), self._to(b, n.DOUBLE, op), n.DOUBLE)
        if op == "div":
            t = n.LONG
            if not (n.is_integral(a.type) and n.is_integral(b.type)):
                raise _err(f"DIV needs integers in '{self.text}'", None, "use / for fractional division")
            return n.Arithmetic(op, self._to(a, t, op), self._to(b, t, op), t)
        return n.Arithmetic(op, self._to(a, t, op), self._to(b, t, op), t)

    @staticmethod
    def _decimal_operand(e: n.Expr) -> DecimalType:
        if isinstance(e.type, DecimalType):
            return e.type
        if isinstance(e, n.Literal) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return DecimalType(max(1, len(str(abs(e.value)))), 0)  # Spark's DecimalType.fromLiteral
        return _as_decimal(e.type)

    # ---- functions
    def _b_Coalesce(self, node) -> n.Expr:
        args = [self.bind(a) for a in [node.this, *node.expressions]]
        t = args[0].type
        for a in args[1:]:
            t = self._unify(t, a, "coalesce")
        return n.Function("coalesce", tuple(self._to(a, t, "coalesce") for a in args), t)

    def _unify(self, t: DataType, e: n.Expr, where: str) -> DataType:
        if isinstance(e, n.Literal) and e.type.name == "string" and t.name not in ("string", "void"):
            return t
        u = common_type(t, e.type)
        if u is None:
            raise _err(
                f"{where}: cannot mix {n.type_name(t)} and {n.type_name(e.type)} in '{self.text}'",
                None,
                "cast the values to one type",
            )
        return u

    def _b_Case(self, node) -> n.Expr:
        if node.this is not None:
            raise _err(f"CASE x WHEN ... is not supported in '{self.text}'", None, "write CASE WHEN x = ... THEN")
        branches = [(self._predicate(i.this), self.bind(i.args["true"])) for i in node.args["ifs"]]
        default = node.args.get("default")
        otherwise = self.bind(default) if default is not None else n.Literal(None, n.NULL)
        return self._case(branches, otherwise)

    def _b_If(self, node) -> n.Expr:
        false = node.args.get("false")
        otherwise = self.bind(false) if false is not None else n.Literal(None, n.NULL)
        return self._case([(self._predicate(node.this), self.bind(node.args["true"]))], otherwise)

    def _case(self, branches, otherwise) -> n.Expr:
        t = otherwise.type
        for _, v in branches:
            t = self._unify(t, v, "CASE")
        return n.Case(
            tuple((c, self._to(v, t, "CASE")) for c, v in branches),
            self._to(otherwise, t, "CASE"),
            t,
        )

    def _string_fn(self, name: str, node) -> n.Expr:
        a = self.bind(node.this)
        return n.Function(name, (self._to(a, n.STRING, name),), n.STRING)

    def _b_Upper(self, node):
        return self._string_fn("upper", node)

    def _b_Lower(self, node):
        return self._string_fn("lower", node)

    def _b_Trim(self, node):
        if node.args.get("expression") is not None:
            raise _err(f"TRIM(chars FROM x) is not supported in '{self.text}'", None, "use trim(x)")
        position = str(node.args.get("position") or "").upper()
        return self._string_fn({"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim"), node)

    def _b_Length(self, node):
        a = self.bind(node.this)
        return n.Function("length", (self._to(a, n.STRING, "length"),), n.INTEGER)

    def _date_part(self, name: str, node) -> n.Expr:
        """year / month / dayofmonth of a date (a timestamp or a date string is cast to a date first,
        as Spark does: timestamps in UTC)."""
        return n.Function(name, (self._to(self.bind(node.this), n.DATE, name),), n.INTEGER)

    def _b_TsOrDsToDate(self, node):
        if node.args.get("format") is not None:
            return self._fallback(node)
        return self._to(self.bind(node.this), n.DATE, "to_date")

    def _b_Substring(self, node):
        a = self._to(self.bind(node.this), n.STRING, "substring")
        start = self._to(self.bind(node.args["start"]), n.INTEGER, "substring")
        length = node.args.get("length")
        args = (a, start) + ((self._to(self.bind(length), n.INTEGER, "substring"),) if length is not None else ())
        return n.Function("substring", args, n.STRING)

    def _b_Concat(self, node):
        args = tuple(self._to(self.bind(a), n.STRING, "concat") for a in node.expressions)
        return n.Function("concat", args, n.STRING)

    def _b_Abs(self, node):
        a = self.bind(node.this)
        self._need_number(a, "abs")
        return n.Function("abs", (a,), a.type)

    def _b_Anonymous(self, node):
        name = str(node.this).lower()
        if name in _VARIANT_GETS:
            return self._variant_function(name, node)
        if name == "is_variant_null" and len(node.expressions) == 1:
            return n.Function(name, (self._variant_arg(node.expressions[0], name),), n.BOOLEAN)
        if name in ("ltrim", "rtrim") and len(node.expressions) == 1:
            a = self.bind(node.expressions[0])
            return n.Function(name, (self._to(a, n.STRING, name),), n.STRING)
        return self._fallback(node)
