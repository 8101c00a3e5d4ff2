"""The typed expression tree: what a parsed and bound predicate or expression is.

Every node is a frozen dataclass with a ``type`` (an engine :mod:`~airflow_delta_provider_apps.engine.schema` type).
Trees are built by :mod:`.parse` (which binds names to the table schema and inserts the implicit
casts Spark would), evaluated by :mod:`.evaluate`, rewritten for data skipping by :mod:`.skipping`
and rendered back to Spark SQL by :mod:`.sql`. Nothing here knows about any of those uses.

A predicate is any node whose type is boolean. SQL's three-valued logic holds throughout: a NULL
input makes a comparison NULL, and AND / OR follow Kleene's tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..schema import DataType, DecimalType, PrimitiveType

BOOLEAN = PrimitiveType("boolean")
BYTE = PrimitiveType("byte")
SHORT = PrimitiveType("short")
INTEGER = PrimitiveType("integer")
LONG = PrimitiveType("long")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
STRING = PrimitiveType("string")
BINARY = PrimitiveType("binary")
DATE = PrimitiveType("date")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMP_NTZ = PrimitiveType("timestamp_ntz")
NULL = PrimitiveType("void")

INTEGRAL = ("byte", "short", "integer", "long")
FRACTIONAL = ("float", "double")


def type_name(t: DataType) -> str:
    return t.name if isinstance(t, (PrimitiveType, DecimalType)) else str(getattr(t, "name", t))


def is_integral(t: DataType) -> bool:
    return isinstance(t, PrimitiveType) and t.name in INTEGRAL


def is_numeric(t: DataType) -> bool:
    return isinstance(t, DecimalType) or (isinstance(t, PrimitiveType) and t.name in INTEGRAL + FRACTIONAL)


def is_temporal(t: DataType) -> bool:
    return isinstance(t, PrimitiveType) and t.name in ("date", "timestamp", "timestamp_ntz")


class Expr:
    """Base of every node."""

    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return ()

    def walk(self) -> Iterator[Expr]:
        """This node and every node below it, depth first."""
        yield self
        for c in self.children():
            yield from c.walk()

    def column_nodes(self) -> Iterator[Column]:
        """The Column nodes below this one, depth first, without descending into an IN's list
        (literals: no columns there, and a 20,000-value list would cost 20,000 visits)."""
        stack: list[Expr] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Column):
                yield node
            else:
                stack.extend(reversed((node.child,) if isinstance(node, In) else node.children()))

    def columns(self) -> list[tuple[str, ...]]:
        """Paths of the columns referenced, in first-seen order, without repeats."""
        return list(dict.fromkeys(c.path for c in self.column_nodes()))


class _Unary(Expr):
    """A node over one expression."""

    child: Expr  # a field of each subclass

    def children(self):
        return (self.child,)


class _Binary(Expr):
    """A node over two expressions."""

    left: Expr  # fields of each subclass
    right: Expr

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class Column(Expr):
    """A column of the table: ``path`` is the chain of field names from a top-level column into
    nested structs (names as in the schema, so resolution was case-insensitive)."""

    path: tuple[str, ...]
    type: DataType
    nullable: bool = True
    physical_path: tuple[str, ...] | None = None  # column mapping: the names inside data files/stats
    relation: str | None = None  # MERGE: the alias of the relation it belongs to (None: the one table)

    @property
    def name(self) -> str:
        return ".".join(self.path)


Value = None | bool | int | float | str | bytes | decimal.Decimal | dt.date | dt.datetime


@dataclass(frozen=True)
class Literal(Expr):
    """A constant. ``value`` is a Python value of ``type`` (timestamps are aware, in UTC; a
    ``timestamp_ntz`` is naive)."""

    value: Value
    type: DataType


@dataclass(frozen=True)
class Cast(_Unary):
    child: Expr
    type: DataType


@dataclass(frozen=True)
class StoreCast(Cast):
    """A value assigned to a table column, cast to the column's type (Spark's store assignment);
    ``where`` names the column (``column 'p'``) for a value that does not fit it."""

    where: str = ""


COMPARISONS = ("=", "<=>", "!=", "<", "<=", ">", ">=")
FLIPPED = {"=": "=", "<=>": "<=>", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Compare(_Binary):
    """``left op right`` with both sides of one comparable type (the binder casts them)."""

    op: str
    left: Expr
    right: Expr
    type: DataType = BOOLEAN


@dataclass(frozen=True)
class And(Expr):
    items: tuple[Expr, ...]
    type: DataType = BOOLEAN

    def children(self):
        return self.items


@dataclass(frozen=True)
class Or(Expr):
    items: tuple[Expr, ...]
    type: DataType = BOOLEAN

    def children(self):
        return self.items


@dataclass(frozen=True)
class Not(_Unary):
    child: Expr
    type: DataType = BOOLEAN


@dataclass(frozen=True)
class IsNull(_Unary):
    """``child IS NULL`` (``negated``: ``IS NOT NULL``). Never NULL itself."""

    child: Expr
    negated: bool = False
    type: DataType = BOOLEAN


@dataclass(frozen=True)
class In(Expr):
    """``child IN (values...)`` (``negated``: ``NOT IN``); values are literals of the child's type."""

    child: Expr
    values: tuple[Literal, ...]
    negated: bool = False
    type: DataType = BOOLEAN

    def children(self):
        return (self.child, *self.values)


@dataclass(frozen=True)
class Like(_Unary):
    """``child LIKE pattern`` (``%`` any run, ``_`` one character, ``\\`` escapes); ``ILIKE`` when
    ``case_insensitive``."""

    child: Expr
    pattern: str
    negated: bool = False
    case_insensitive: bool = False
    type: DataType = BOOLEAN


ARITHMETIC = ("+", "-", "*", "/", "%", "div")


@dataclass(frozen=True)
class Arithmetic(_Binary):
    op: str
    left: Expr
    right: Expr
    type: DataType


@dataclass(frozen=True)
class Negate(_Unary):
    child: Expr
    type: DataType


@dataclass(frozen=True)
class Function(Expr):
    """A deterministic scalar function by its Spark name (lower case): ``coalesce``, ``upper``,
    ``lower``, ``length``, ``substring``, ``concat``, ``trim``, ``ltrim``, ``rtrim``, ``abs``; on
    variants ``variant_get`` / ``try_variant_get`` (args: the variant, the path and the type name as
    string literals; Spark's ``v:path`` and casts of it bind to them), ``to_json``, ``is_variant_null``."""

    name: str
    args: tuple[Expr, ...]
    type: DataType

    def children(self):
        return self.args


@dataclass(frozen=True)
class Case(Expr):
    """``CASE WHEN c1 THEN v1 ... ELSE e END`` (``IF(c, a, b)`` is a one-branch Case)."""

    branches: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr
    type: DataType

    def children(self):
        out: list[Expr] = []
        for cond, value in self.branches:
            out += [cond, value]
        return (*out, self.otherwise)


def conjuncts(e: Expr) -> list[Expr]:
    """``a AND (b AND c)`` -> ``[a, b, c]``."""
    if isinstance(e, And):
        out: list[Expr] = []
        for item in e.items:
            out += conjuncts(item)
        return out
    return [e]


def and_all(items: list[Expr]) -> Expr:
    if not items:
        return Literal(True, BOOLEAN)
    return items[0] if len(items) == 1 else And(tuple(items))


def map_columns(e: Expr, fn: Callable[[Column], Expr]) -> Expr:
    """A copy of the tree with every :class:`Column` replaced by ``fn(column)``."""

    def one(v):
        if isinstance(v, Expr):
            return map_columns(v, fn)
        if isinstance(v, tuple):
            return tuple(one(x) for x in v)
        return v

    if isinstance(e, Column):
        return fn(e)
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, (Expr, tuple)):
            changes[f.name] = one(v)
    return dataclasses.replace(e, **changes) if changes else e


def relations_of(e: Expr) -> set[str | None]:
    """The relations (aliases) whose columns ``e`` reads."""
    return {node.relation for node in e.column_nodes()}
