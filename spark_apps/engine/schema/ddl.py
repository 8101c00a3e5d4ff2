"""Spark DDL text -> Delta schema, with sqlglot's Spark dialect; and :func:`parse_schema` for any form.

Column lists such as ``"id BIGINT NOT NULL, name STRING COMMENT 'x', tags ARRAY<STRING>"`` map to the
model's types (BIGINT/LONG long, INT integer, ..., TIMESTAMP / TIMESTAMP_LTZ timestamp, TIMESTAMP_NTZ,
DECIMAL(p,s), VOID, VARIANT, ARRAY, MAP, STRUCT). ``NOT NULL`` sets nullable false; ``COMMENT`` goes
to metadata; ``CHAR(n)``/``VARCHAR(n)`` become ``string`` with Spark's char/varchar metadata.
Anything else is an :class:`InvalidSchemaError` naming the column and the type or clause.
:func:`parse_column_paths` reads comma-separated column references with the same tokenizer.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..errors import InvalidSchemaError
from .collations import COLLATIONS_KEY, collation_identifier
from .types import (
    CHAR_VARCHAR_KEY,
    DEFAULT_KEY,
    PRIMITIVE_NAMES,
    PRIMITIVES,
    STRING,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    StructField,
    StructType,
    type_ddl,
    validate_type,
)

# --------------------------------------------------------------------------------------------
# DDL parser: sqlglot (Spark dialect) parses, this section maps its DataType tree to ours
# --------------------------------------------------------------------------------------------
#
# sqlglot is imported on first use (~0.14 s to import; most engine work never parses DDL).
# Three Spark forms that sqlglot 30's Spark dialect does not read as Spark does are adjusted in
# the token stream before parsing (:func:`_spark_tokens`; the text itself is never rewritten):
#   * ``VOID``: Spark's null type (sqlglot knows the keyword only in its Databricks dialect);
#   * ``STRUCT<>``: tokenized as the ``<>`` operator; Spark's grammar reads it as an empty struct;
#   * ``TIMESTAMP WITHOUT TIME ZONE``: sqlglot keeps it as Spark's TIMESTAMP (TIMESTAMPTZ) but
#     Spark means ``timestamp_ntz``.
# A column list is parsed as the members of ``STRUCT<...>`` (synthetic tokens around the user's
# tokens), so top-level columns and struct fields follow one grammar: ``name [:] TYPE [NOT NULL]
# [COMMENT 'text']``. Names that are reserved SQL words (select, from, not, case, with ...) must be
# backquoted.

_TYPE_FIX = "write a Spark type such as BIGINT, DECIMAL(10,2), ARRAY<STRING>, MAP<STRING, INT> or STRUCT<a: INT>"
_DDL_FIX = (
    "write columns as 'name TYPE [NOT NULL] [COMMENT \\'text\\']' separated by commas, e.g. "
    "'id BIGINT NOT NULL, tags ARRAY<STRING>'; backquote names that are SQL keywords or hold "
    "special characters (`select`, `my col`)"
)

_SQLGLOT: tuple | None = None


def _sqlglot() -> tuple:
    """``(exp, ParseError, TokenError, Token, TokenType, spark_dialect)``, imported once."""
    global _SQLGLOT
    if _SQLGLOT is None:
        from sqlglot import exp
        from sqlglot.dialects.spark import Spark
        from sqlglot.errors import ParseError, TokenError
        from sqlglot.tokens import Token, TokenType

        _SQLGLOT = (exp, ParseError, TokenError, Token, TokenType, Spark())
    return _SQLGLOT


def _spark_tokens(text: str, what: str, *, types: bool = True) -> list:
    """sqlglot Spark-dialect tokens of ``text``; with ``types`` the adjustments listed above."""
    _, _, TokenError, Token, TokenType, dialect = _sqlglot()
    try:
        raw = dialect.tokenize(text)
    except TokenError as e:
        raise InvalidSchemaError(
            f"Cannot read the {what}",
            f"sqlglot: {str(e).splitlines()[0]} in '{text[:200]}'",
            "check for an unterminated `quoted` name or 'string' literal",
        ) from None
    if not types:
        return raw
    out: list = []
    i = 0
    while i < len(raw):
        t = raw[i]
        up = t.text.upper()
        if t.token_type == TokenType.VAR and up == "VOID":
            out.append(Token(TokenType.VOID, t.text, t.line, t.col, t.start, t.end, t.comments))
        elif t.token_type == TokenType.NEQ and out and out[-1].token_type == TokenType.STRUCT:
            out.append(Token(TokenType.LT, "<", t.line, t.col - 1, t.start, t.start))
            out.append(Token(TokenType.GT, ">", t.line, t.col, t.end, t.end))
        elif (
            t.token_type == TokenType.TIMESTAMPTZ
            and up == "TIMESTAMP"
            and [x.text.upper() for x in raw[i + 1 : i + 4]] == ["WITHOUT", "TIME", "ZONE"]
        ):
            z = raw[i + 3]
            out.append(Token(TokenType.TIMESTAMPNTZ, "TIMESTAMP_NTZ", z.line, z.col, t.start, z.end, t.comments))
            i += 3
        else:
            out.append(t)
        i += 1
    return out


def _near(text: str, start: int, end: int) -> str:
    line = text.count("\n", 0, start) + 1
    col = start - text.rfind("\n", 0, start)
    return f"at line {line}, column {col}, near '{text[max(0, start - 25) : end + 20]}'"


def _parse_tokens(text: str, tokens: list, into, what: str, fix: str = _DDL_FIX):
    """Parse ``tokens`` into one sqlglot ``into`` node; a ParseError becomes an InvalidSchemaError
    naming the token where parsing stopped (plain words for the usual mistakes, sqlglot's own
    description as the cause)."""
    exp, ParseError, _, _, TokenType, dialect = _sqlglot()
    try:
        return dialect.parser().parse_into(into, tokens, text)[0]
    except ParseError as e:
        info = (getattr(e, "errors", None) or [{}])[0]
    desc = "sqlglot: " + str(info.get("description") or "parse error").splitlines()[0]
    at = next(
        (i for i, t in enumerate(tokens) if t.line == info.get("line") and t.col == info.get("col") and t.line > 0),
        None,
    )
    if at is None:  # stopped on the synthetic closing '>' (or nowhere): the input ended early
        _raise(f"Cannot parse the {what}: it ends too early", f"{desc}, at the end of '{text[-60:]}'", fix)
    tok, prev = tokens[at], tokens[at - 1] if at else None
    nxt = tokens[at + 1] if at + 1 < len(tokens) else None
    if nxt is not None and nxt.token_type == TokenType.COLON:
        nxt = tokens[at + 2] if at + 2 < len(tokens) else None
    cause = f"{desc}, {_near(text, tok.start, tok.end)}"
    if prev is not None and prev.token_type == TokenType.COMMENT:
        _raise(f"Cannot parse the {what}: COMMENT must be followed by a quoted string, not '{tok.text}'", cause, fix)
    if into is exp.DataType and (prev is None or prev.token_type in (TokenType.LT, TokenType.COMMA)):
        # sqlglot stops at the start of the struct member / type it could not read
        opener = _opener(tokens, at)
        if opener is not None and opener.token_type == TokenType.STRUCT:  # at a member: name [:] type
            end = nxt is None or nxt.token_type in (TokenType.COMMA, TokenType.GT)
            if tok.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and end:
                _raise(f"Cannot parse the {what}: column '{tok.text}' has no type", cause, fix)
            if tok.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and nxt.token_type == TokenType.VAR:
                _raise(f"Cannot parse the {what}: unknown type '{nxt.text}' for column '{tok.text}'", cause, fix)
            if tok.text.isalpha() and not end and nxt.token_type in dialect.parser_class.TYPE_TOKENS:
                _raise(f"Cannot parse the {what}: column name '{tok.text}' is a reserved SQL word", cause, fix)
        elif tok.token_type == TokenType.VAR:  # at a type
            _raise(f"Cannot parse the {what}: unknown type '{tok.text}'", cause, fix)
    _raise(f"Cannot parse the {what} at '{tok.text}'", cause, fix)


def _opener(tokens: list, at: int):
    """The token before the unclosed ``<`` enclosing ``tokens[at]`` (``STRUCT``, ``ARRAY``, ``MAP``),
    or None at the top of a bare type."""
    _, _, _, _, TokenType, _ = _sqlglot()
    depth = 0
    for i in range(at - 1, -1, -1):
        tt = tokens[i].token_type
        if tt == TokenType.GT:
            depth += 1
        elif tt == TokenType.LT:
            if depth == 0:
                return tokens[i - 1] if i else None
            depth -= 1
    return None


def _raise(problem: str, cause: str | None, fix: str = _DDL_FIX):
    raise InvalidSchemaError(problem, cause, fix)


def _type_from_sqlglot(dt, where: str) -> tuple[DataType, dict]:
    """Our type for one sqlglot ``DataType`` node, plus column metadata (CHAR/VARCHAR only)."""
    exp, *_, dialect = _sqlglot()
    T = exp.DType
    stores = "Delta stores " + ", ".join(sorted(PRIMITIVE_NAMES)) + ", decimal(p,s), array, map and struct"
    if not isinstance(dt, exp.DataType) or not isinstance(dt.this, T):
        shown = dt.sql(dialect=dialect) if isinstance(dt, exp.Expr) else str(dt)
        interval = isinstance(dt, exp.DataType) and isinstance(dt.this, exp.Interval)
        _raise(
            f"Column '{where}' has type {shown}, which Delta cannot store",
            ("Delta has no interval types; " if interval else "") + stores,
        )
    kind, args = dt.this, dt.expressions
    prim = _SQLGLOT_PRIMITIVES.get(kind.name)
    # the Spark name of the type when we know it, else sqlglot's (e.g. DATETIME, UINT); with parameters
    shown = (type_ddl(PRIMITIVES[prim]) if prim else kind.name) + (
        f"({', '.join(a.sql(dialect=dialect) for a in args)})" if args and not dt.args.get("nested") else ""
    )
    if kind == T.ARRAY and len(args) == 1:
        return ArrayType(_type_from_sqlglot(args[0], where + ".element")[0], True), {}
    if kind == T.MAP and len(args) == 2:
        return MapType(
            _type_from_sqlglot(args[0], where + ".key")[0], _type_from_sqlglot(args[1], where + ".value")[0], True
        ), {}
    if kind == T.STRUCT:
        return StructType(tuple(_field_from_sqlglot(m, where) for m in args)), {}
    params = [a.name for a in args] if not dt.args.get("nested") else []
    if not all(p.isdigit() for p in params):
        _raise(f"Column '{where}' has an invalid type {shown}", "type parameters must be integers")
    params = [int(p) for p in params]
    if kind == T.DECIMAL and len(params) <= 2:
        try:
            return DecimalType(*(params + [10, 0][len(params) :])), {}
        except InvalidSchemaError as e:
            raise InvalidSchemaError(f"{e.problem} for column '{where}'", e.cause, e.fix) from None
    if kind in (T.CHAR, T.VARCHAR):
        if len(params) != 1 or params[0] < 1:
            _raise(
                f"Column '{where}' has type {shown} without a valid length",
                f"{kind.name} needs a length, e.g. {kind.name}(10)",
            )
        return STRING, {CHAR_VARCHAR_KEY: f"{kind.name.lower()}({params[0]})"}
    if prim is None:
        _raise(f"Column '{where}' has type {shown}, which Delta cannot store", stores)
    if args:
        _raise(f"Column '{where}' has type {shown}, but {prim} takes no parameters", stores)
    return PRIMITIVES[prim], {}


# sqlglot type (Spark dialect) -> Delta type. Spark's TIMESTAMP and TIMESTAMP_LTZ are the
# UTC-adjusted timestamp (sqlglot: TIMESTAMPTZ / TIMESTAMPLTZ); TIMESTAMP_NTZ has no zone.
# STRING is TEXT in sqlglot; REAL reads as FLOAT, LONG as BIGINT, SHORT as SMALLINT, BYTE as TINYINT.
_SQLGLOT_PRIMITIVES = {
    "TEXT": "string",
    "BIGINT": "long",
    "INT": "integer",
    "SMALLINT": "short",
    "TINYINT": "byte",
    "FLOAT": "float",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "BINARY": "binary",
    "DATE": "date",
    "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp",
    "TIMESTAMPNTZ": "timestamp_ntz",
    "NULL": "void",
    "VARIANT": "variant",
}


def _field_from_sqlglot(node, parent: str) -> StructField:
    """One column / struct member (a sqlglot ``ColumnDef``): name, type, NOT NULL, COMMENT."""
    exp, *_, dialect = _sqlglot()
    prefix = parent + "." if parent else ""
    if not isinstance(node, exp.ColumnDef) or not isinstance(node.this, exp.Identifier):
        _raise(
            f"Cannot parse the DDL schema: expected a column name but found '{node.sql(dialect=dialect)}'"
            + (f" in '{parent}'" if parent else ""),
            None,
        )
    name = node.this.this
    where = prefix + name
    if node.args.get("kind") is None:
        _raise(f"Column '{where}' has no type", None)
    t, md = _type_from_sqlglot(node.args["kind"], where)
    nullable, md = True, dict(md)
    for c in node.args.get("constraints") or []:
        k = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = nullable and bool(k.args.get("allow_null"))
        elif isinstance(k, exp.CommentColumnConstraint) and "comment" not in md:
            if not (isinstance(k.this, exp.Literal) and k.this.is_string):
                _raise(f"Cannot parse the DDL schema: COMMENT of column '{where}' must be a quoted string", None)
            md["comment"] = k.this.this
        elif isinstance(k, exp.GeneratedAsIdentityColumnConstraint) and not parent and t.name == "long":
            # GENERATED {ALWAYS | BY DEFAULT} AS IDENTITY [(START WITH s INCREMENT BY i)]: engine.identity
            start, step = (k.args.get(key) for key in ("start", "increment"))
            md["delta.identity.start"] = 1 if start is None else int(start.sql(dialect=dialect))
            md["delta.identity.step"] = 1 if step is None else int(step.sql(dialect=dialect))
            md["delta.identity.allowExplicitInsert"] = not bool(k.args.get("this"))
        elif isinstance(k, exp.ComputedColumnConstraint) and not parent:
            # GENERATED ALWAYS AS (expression): engine.constraints computes and checks it
            md["delta.generationExpression"] = k.this.sql(dialect=dialect)
        elif isinstance(k, exp.CollateColumnConstraint) and t == STRING and COLLATIONS_KEY not in md:
            # COLLATE name: the collation in the field's __COLLATIONS metadata, as Spark 4 stores it
            try:
                identifier = collation_identifier(k.this.name)
            except InvalidSchemaError as e:
                raise InvalidSchemaError(f"Column '{where}': {e.problem}", e.cause, e.fix) from None
            if identifier:  # UTF8_BINARY, the default, is not written (the protocol's rule)
                md[COLLATIONS_KEY] = {name: identifier}
        elif isinstance(k, exp.DefaultColumnConstraint) and not parent and DEFAULT_KEY not in md:
            # DEFAULT expression: rows that leave the column out get its value (engine.defaults)
            md[DEFAULT_KEY] = k.this.sql(dialect=dialect)
        else:
            _raise(
                f"Column '{where}' has a clause this engine cannot honour: {c.sql(dialect=dialect)}",
                "supported: NOT NULL, one COMMENT, COLLATE on a STRING column, and on a top-level column "
                "one DEFAULT expression, GENERATED ALWAYS AS (expression), GENERATED ALWAYS / BY DEFAULT AS "
                "IDENTITY (BIGINT) (no CHECK or key constraints)",
            )
    return StructField(name, t, nullable, md)


def parse_type(text: str) -> DataType:
    """Parse one DDL type, e.g. ``"ARRAY<DECIMAL(10,2)>"``."""
    exp = _sqlglot()[0]
    tokens = _spark_tokens(text, "type")
    if not tokens:
        _raise("The type is empty", None)
    t, _ = _type_from_sqlglot(_parse_tokens(text, tokens, exp.DataType, "type", _TYPE_FIX), "?")
    validate_type(t, ("?",))
    return t


def parse_ddl(text: str) -> StructType:
    """Parse a Spark DDL column list into a :class:`StructType` (validated).

    Also accepts a top-level ``STRUCT<...>`` type string.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("The DDL schema is empty", None, "list at least one column, e.g. 'id BIGINT'")
    exp, _, _, Token, TokenType, _ = _sqlglot()
    tokens = _spark_tokens(text, "DDL schema")
    if not tokens:
        raise InvalidSchemaError(
            "The DDL schema is empty", "it holds only comments", "list at least one column, e.g. 'id BIGINT'"
        )
    if len(tokens) > 1 and tokens[0].token_type == TokenType.STRUCT and tokens[1].token_type == TokenType.LT:
        t, _ = _type_from_sqlglot(_parse_tokens(text, tokens, exp.DataType, "DDL schema"), "")
        return t.validate()
    parens = 0
    for i, tok in enumerate(tokens):  # sqlglot tolerates a trailing comma, Spark does not
        parens += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tok.token_type, 0)
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.token_type == TokenType.COMMA and not parens and (nxt is None or nxt.token_type == TokenType.GT):
            _raise(
                f"Cannot parse the DDL schema: expected a column name after ',' but found "
                f"{'end of input' if nxt is None else repr(nxt.text)}",
                _near(text, tok.start, tok.end),
            )
    # the column list is read as the members of STRUCT<...>; synthetic tokens are on line 0
    wrapped = [
        Token(TokenType.STRUCT, "STRUCT", 0, 0, 0, -1),
        Token(TokenType.LT, "<", 0, 0, 0, -1),
        *tokens,
        Token(TokenType.GT, ">", 0, 0, len(text), len(text) - 1),
    ]
    t, _ = _type_from_sqlglot(_parse_tokens(text, wrapped, exp.DataType, "DDL schema"), "")
    return t.validate()


_PATHS_FIX = (
    "list column names separated by commas, nested fields with dots, e.g. 'a, b.c, `x.y`.z'; "
    "backquote names holding dots or commas or that are SQL keywords or literals (`true`)"
)


def parse_column_paths(text: str, what: str = "column list") -> list[tuple[str, ...]]:
    """Comma-separated Spark column references as name paths: ``"a, b.c, `x.y`.z"`` ->
    ``[("a",), ("b", "c"), ("x.y", "z")]``.

    sqlglot's Spark dialect tokenizes and parses each entry (backquotes quote a part, a doubled
    backquote is a literal one; unquoted parts keep their case). Empty entries are skipped. A
    part that is a reserved SQL word must be backquoted.

    :raises InvalidSchemaError: naming the entry that is not a column reference.
    """
    exp, _, _, _, TokenType, dialect = _sqlglot()
    tokens = _spark_tokens(text, what, types=False)
    groups: list[list] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.COMMA:
            groups.append([])
        else:
            groups[-1].append(tok)
    out: list[tuple[str, ...]] = []
    for g in groups:
        if not g:
            continue
        node = _parse_tokens(text, g, exp.Column, what, _PATHS_FIX)
        parts = node.parts if isinstance(node, (exp.Column, exp.Dot)) else None
        if not parts or not all(isinstance(p, exp.Identifier) for p in parts):
            entry = text[g[0].start : g[-1].end + 1]
            _raise(
                f"Cannot parse the {what}: '{entry}' is not a column name",
                f"sqlglot reads it as {type(node).__name__} {node.sql(dialect=dialect)}",
                _PATHS_FIX,
            )
        out.append(tuple(p.this for p in parts))
    return out


def parse_schema(value: Any) -> StructType:
    """A :class:`StructType` from a DDL string, a Delta/Spark JSON schema (string or dict), an
    Arrow schema, or a StructType (returned validated)."""
    if isinstance(value, StructType):
        return value.validate()
    if isinstance(value, pa.Schema):
        return StructType.from_arrow(value)
    if isinstance(value, dict):
        return StructType.from_json(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("{"):
            return StructType.from_json(s)
        return parse_ddl(s)
    raise InvalidSchemaError(
        f"Cannot use a {type(value).__name__} as a schema",
        None,
        "pass a DDL string ('id BIGINT, name STRING'), a Delta JSON schema (string or dict) or a pyarrow schema",
    )
