"""Column defaults (PROTOCOL.md "Default Columns", the ``allowColumnDefaults`` writer feature).

A column's default is Spark SQL text in its ``CURRENT_DEFAULT`` metadata (:attr:`.schema.StructField.default`). A row written without a
value for the column (an append that leaves it out, a MERGE insert that does not set it) gets the
default's value: evaluated once per write by the expression model (:mod:`..expr`), stored into the
column's type as Spark's store assignment does. A default is a constant: no column references, no
non-deterministic function (``current_timestamp()``, ``rand()``: refused, the value would differ
between the engines that evaluate it), as the model can evaluate.
"""

from __future__ import annotations

from .errors import InvalidPredicateError, InvalidSchemaError
from .schema.types import DEFAULT_KEY, VARIANT, StructField, StructType, walk

FEATURE = "allowColumnDefaults"


def default_value(field: StructField):
    """The value rows that leave ``field`` out get (:func:`.schema.compat.may_leave_out`): its default
    evaluated and stored into its type (a Python value as :class:`.expr.nodes.Literal` holds), or None
    (NULL; an identity or generated column's writer fills it) when it has no default.

    :raises InvalidSchemaError: the default cannot be parsed, is not a constant, is not deterministic
        or does not fit the column's type (naming the column, its type and the default)
    """
    text = field.default
    if text is None:
        return None
    import pyarrow as pa

    from .expr import evaluate, parse_expression
    from .expr.parse import store_assign

    if field.type == VARIANT and text.strip().upper() != "NULL":
        raise InvalidSchemaError(
            f"Column '{field.name}' is a VARIANT with a DEFAULT other than NULL: {text!r}",
            "the protocol requires every variant column to default to NULL",
            f"remove the DEFAULT of '{field.name}'",
        )
    where = f"column '{field.name}'"
    try:
        if not text.strip():
            raise InvalidPredicateError("The default is empty", None, "write a constant, e.g. 0 or 'n/a'")
        bound = store_assign(parse_expression(text, StructType(())), field.type, where)
        value = evaluate(bound, pa.record_batch({"_": pa.nulls(1)}))[0].as_py()
    except InvalidPredicateError as e:
        raise InvalidSchemaError(
            f"Column '{field.name}' ({field.type.simple_string()}) has a DEFAULT this engine cannot use: {text!r}",
            f"{e.problem}" + (f" ({e.cause})" if e.cause else ""),
            "give a constant of the column's type (a literal or an expression over literals, e.g. 0, 'n/a', "
            "DATE'2026-01-01', 1.5 * 2); a time of day or a random value: compute it and write it in the data",
        ) from None
    if value is None and not field.nullable:
        raise InvalidSchemaError(
            f"Column '{field.name}' is NOT NULL but its DEFAULT {text!r} is NULL",
            "a row that leaves the column out would be written NULL",
            "give a non-NULL default, or drop NOT NULL",
        )
    return value


def check_defaults(schema: StructType) -> None:
    """Every default in ``schema`` is usable (:func:`default_value`), and only on top-level columns
    (Spark's DEFAULT is a column clause)."""
    for path, _, f in walk(schema):
        if f is None or f.default is None:
            continue
        if len(path) > 1:
            raise InvalidSchemaError(
                f"Field '{'.'.join(path)}' has a DEFAULT",
                "a default belongs to a top-level column (Spark's DEFAULT is a column clause)",
                f"remove {DEFAULT_KEY} from the nested field's metadata",
            )
        default_value(f)
