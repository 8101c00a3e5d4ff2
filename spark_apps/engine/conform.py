"""Arrow data handed in by a caller, conformed to a table's schema before anything is written: the
table's columns, order and Arrow types, each value checked (Delta's schema enforcement for the
in-process plane; :func:`.spark.write.conform_dataframe` is Spark's)."""

from __future__ import annotations

from .defaults import default_value
from .errors import InvalidArgumentError, SchemaMismatchError
from .schema.compat import computed as _computed
from .schema.compat import may_leave_out, nested_fit

__all__ = ["conform_arrow"]


def _arrow_kind(t) -> str:
    """The family of an Arrow type, for what append_arrow converts: within a family a value-checked
    cast; across families (a string for a number) nothing, as Delta's schema enforcement."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_kind(t.value_type)
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return "nested"
    return str(t)


def _first_unfit(col, target):
    """The first value of ``col`` that does not survive a safe cast to ``target``, or None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .expr.evaluate import first_failing

    errors = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
    return first_failing(col, lambda a: pc.cast(a, target, safe=True), errors)


def conform_arrow(table_schema, data) -> list:
    """Arrow ``data`` as record batches in the table's columns, order and Arrow types, checked before
    anything is written (the in-process counterpart of :func:`..commands.write.prepare_dataframe`):

    * every table column is there (names case-insensitive), except those written rows may leave out
      (:func:`.schema.compat.may_leave_out`, the rule Spark's appends follow): a column with a
      DEFAULT gets its value, a nullable column is written NULL, identity and generated ones the
      writer assigns or computes;
    * no other column;
    * each column's values convert to the table's type: within a family (numbers, dates and
      timestamps, nested) by a cast that checks every value (an int64 into INT when it fits, a uint64
      into BIGINT up to 2^63-1); never across families (a string for a number).

    :raises SchemaMismatchError: naming the column, and for a value that does not fit, the value
    :raises InvalidArgumentError: ``data`` is not Arrow data
    """
    import pyarrow as pa

    if isinstance(data, pa.Table):
        batches = data.to_batches()
        schema = data.schema
    elif isinstance(data, pa.RecordBatch):
        batches, schema = [data], data.schema
    elif isinstance(data, pa.RecordBatchReader):
        schema = data.schema
        batches = list(data)
    else:
        try:
            batches = list(data)
        except TypeError:
            batches = None
        if batches is None or not all(isinstance(b, pa.RecordBatch) for b in batches):
            raise InvalidArgumentError(
                f"Cannot append {type(data).__name__} as Arrow data",
                "append_arrow takes a pyarrow Table, a RecordBatch, a RecordBatchReader or a list of RecordBatches",
                "convert the data first, e.g. pyarrow.Table.from_pandas(df) or pyarrow.table({...})",
            )
        schema = batches[0].schema if batches else None
    fix = "make the data's columns and types the table's (select, rename or cast them) and append again"
    names = {}
    for name in schema.names if schema is not None else []:
        if name.lower() in names:
            raise SchemaMismatchError(
                f"The data has column '{name}' twice", "column names are matched case-insensitively", fix
            )
        names[name.lower()] = name
    table_low = {f.name.lower() for f in table_schema.fields}
    extra = [n for n in names.values() if n.lower() not in table_low]
    if extra:
        raise SchemaMismatchError(
            "The data does not match the table schema",
            f"column(s) {', '.join(repr(n) for n in extra)} are not in the table "
            f"(its columns: {', '.join(table_schema.names)})",
            "drop them, or append through Spark with merge_schema=True to add them to the table",
        )
    missing = [f.name for f in table_schema.fields if f.name.lower() not in names and not may_leave_out(f)]
    if missing and schema is not None:
        raise SchemaMismatchError(
            f"NOT NULL column(s) {', '.join(repr(n) for n in missing)} of the table are missing from the data",
            "a column the data leaves out is written as NULL, which a NOT NULL column refuses",
            "add them to the data with their values",
        )
    target = table_schema.to_arrow_schema()
    # identity and generated columns may arrive NULL: the writer assigns or computes them
    target = pa.schema([f.with_nullable(True) if _computed(t) else f for f, t in zip(target, table_schema.fields)])
    # the value of each column the data leaves out (its DEFAULT's, else NULL), evaluated once
    fill = {
        f.name: pa.scalar(default_value(t), f.type)
        for f, t in zip(target, table_schema.fields)
        if f.name.lower() not in names
    }
    out = []
    for batch in batches:
        cols = []
        for f in target:
            name = names.get(f.name.lower())
            if name is None:
                cols.append(pa.repeat(fill[f.name], batch.num_rows))
                continue
            col = batch.column(batch.schema.get_field_index(name))
            cols.append(_converted(col, f, table_schema.field(f.name)))
        out.append(pa.RecordBatch.from_arrays(cols, schema=target))
    return out


def _converted(col, field, table_field):
    """``col`` cast to the table column's Arrow type (see :func:`conform_arrow`)."""
    import pyarrow as pa

    if col.type == field.type:
        return col
    if getattr(table_field.type, "name", None) == "variant":  # a variant's struct, in either field order
        from .variant import as_variant

        return as_variant(col, table_field.name)
    have, want = _arrow_kind(col.type), _arrow_kind(field.type)
    simple = table_field.type.simple_string()
    if have != want and have != "null":
        example = next((v for v in col.to_pylist() if v is not None), None)
        raise SchemaMismatchError(
            f"Column '{table_field.name}' has {col.type} values in the data (e.g. {example!r}) but is {simple} in the table",
            f"a {have} is not converted to a {want} when written (Delta's schema enforcement)",
            f"convert the column to {simple} before appending (e.g. pyarrow.compute.cast), or fix the source",
        )
    if have == want == "nested":
        return _nested(col, table_field)
    bad = _first_unfit(col, field.type)
    if bad is not None:
        raise SchemaMismatchError(
            f"Column '{table_field.name}' holds the value {bad!r}, which {simple} cannot hold",
            f"it is out of {simple}'s range, or would lose precision, when cast from {col.type}",
            "fix or filter that value, or store the column as a wider type (e.g. DECIMAL(20,0) for uint64)",
        )
    try:
        return col.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(
            f"Column '{table_field.name}' of type {col.type} in the data cannot be written as {simple}",
            str(e).splitlines()[0][:300],
            f"convert the column to {simple} before appending",
        ) from None


def _nested(col, table_field):
    """A struct, array or map column as the table's column: fields by name, case-insensitively, at every
    level (:func:`.schema.compat.nested_fit`, the rule every write path follows; Arrow's own cast matches
    names exactly and drops a field the table lacks without a word), each leaf value checked."""
    import pyarrow as pa

    from .expr.evaluate import first_failing, store_cast
    from .schema import StructType

    simple = table_field.type.simple_string()
    data_type = StructType.from_arrow(pa.schema([("v", col.type)])).fields[0].type
    problems = nested_fit(
        data_type,
        table_field.type,
        lambda d, t: d.name == "void" or _arrow_kind(d.to_arrow()) == _arrow_kind(t.to_arrow()),
        path=table_field.name,
    )
    if problems:
        raise SchemaMismatchError(
            f"Column '{table_field.name}' does not fit the table's {simple}",
            "; ".join(problems) + " (fields are matched by name, at every level)",
            "make the data's fields the table's (drop, rename or cast them), or append through Spark with "
            "merge_schema=True to add new fields to the table",
        )
    try:
        return store_cast(col, data_type, table_field.type)
    except Exception as e:  # a leaf value out of its type's range (Arrow's or the ANSI cast's error)
        bad = first_failing(col, lambda a: store_cast(a, data_type, table_field.type), (Exception,))
        raise SchemaMismatchError(
            f"Column '{table_field.name}' holds the value {bad!r}, which {simple} cannot hold",
            f"a nested value does not convert ({str(e).splitlines()[0][:300]})",
            "fix or filter that value, or store the column as a wider type",
        ) from None
