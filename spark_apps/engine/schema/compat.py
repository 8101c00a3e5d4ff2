"""Schema enforcement on write: whether data fits a table's schema, merging new columns, NOT NULL checks."""

from __future__ import annotations

import pyarrow as pa

from ..errors import SchemaMismatchError
from .types import DEFAULT_KEY, ArrayType, DataType, DecimalType, MapType, PrimitiveType, StructField, StructType
from .widening import is_widening, widened_to, widens_number

# --------------------------------------------------------------------------------------------
# Write compatibility
# --------------------------------------------------------------------------------------------


def computed(field: StructField) -> bool:
    """An identity or generated column: the writer assigns or computes it, so data may leave it out."""
    return bool({"delta.identity.step", "delta.generationExpression"} & set(field.metadata or {}))


def may_leave_out(field: StructField) -> bool:
    """Whether written rows may leave ``field`` out (the one rule for appends, in process and in Spark,
    and for MERGE's inserts): a column with a DEFAULT takes its value (``engine.defaults.default_value``),
    a nullable one is written NULL, a computed one (:func:`computed`) is filled by the writer; a NOT NULL
    column without a default has no value to take."""
    return field.nullable or computed(field) or field.default is not None


def nested_fit(
    data_type: DataType, table_type: DataType, leaf_ok, *, leave_out: bool = True, nulls: bool = False, path: str = ""
) -> list[str]:
    """Why a nested value of ``data_type`` cannot be written into ``table_type`` (empty: it can), the one
    by-name rule of every write path (appends, MERGE, UPDATE), as delta-spark resolves structs: fields by
    name (case-insensitively) whatever their order, at every level (in arrays' elements, maps' keys and
    values too); a field the data lacks is written NULL when ``leave_out`` and the field is nullable
    (:func:`may_leave_out`); a field the table lacks is refused (``merge_schema`` adds it first); a leaf
    pair is judged by ``leaf_ok(data type, table type)`` (each path's own casting rule); with ``nulls`` a
    nullable field, element or value into a NOT NULL one is refused too (else the data's values are checked)."""
    where = path or "the value"
    if isinstance(table_type, StructType) and isinstance(data_type, StructType):
        by_low = {f.name.lower(): f for f in data_type.fields}
        out: list[str] = []
        for tf in table_type.fields:
            at = f"{path}.{tf.name}" if path else tf.name  # the field's dotted path in the value
            df = by_low.pop(tf.name.lower(), None)
            if df is None:
                if not leave_out:
                    out.append(f"the data has no field '{at}' (without merge_schema every field must be given)")
                elif not may_leave_out(tf):
                    out.append(f"the data has no field '{at}', which the table holds NOT NULL")
                continue
            if nulls and df.nullable and not tf.nullable:
                out.append(f"field '{at}' may be NULL in the data but is NOT NULL in the table")
            out += nested_fit(df.type, tf.type, leaf_ok, leave_out=leave_out, nulls=nulls, path=at)
        out += [f"field '{path + '.' if path else ''}{f.name}' is not in the table" for f in by_low.values()]
        return out
    if isinstance(table_type, ArrayType) and isinstance(data_type, ArrayType):
        out = []
        if nulls and data_type.contains_null and not table_type.contains_null:
            out.append(f"'{where}' may hold NULL elements, which the table's array does not")
        return out + nested_fit(
            data_type.element_type,
            table_type.element_type,
            leaf_ok,
            leave_out=leave_out,
            nulls=nulls,
            path=f"{path}.element" if path else "element",
        )
    if isinstance(table_type, MapType) and isinstance(data_type, MapType):
        out = []
        if nulls and data_type.value_contains_null and not table_type.value_contains_null:
            out.append(f"'{where}' may hold NULL values, which the table's map does not")
        for part in ("key", "value"):
            out += nested_fit(
                getattr(data_type, f"{part}_type"),
                getattr(table_type, f"{part}_type"),
                leaf_ok,
                leave_out=leave_out,
                nulls=nulls,
                path=f"{path}.{part}" if path else part,
            )
        return out
    nested = (StructType, ArrayType, MapType)
    if (isinstance(table_type, nested) or isinstance(data_type, nested)) and data_type.name != "void":
        ok = False
    else:
        ok = leaf_ok(data_type, table_type)
    return (
        []
        if ok
        else [f"'{where}' is {data_type.simple_string()} in the data but {table_type.simple_string()} in the table"]
    )


def with_new_fields(table_type: DataType, data_type: DataType) -> DataType:
    """``table_type`` with the struct fields ``data_type`` has and it lacks (by name, case-insensitively)
    added at the end, nullable, at every level (inside structs, arrays' elements and maps' values): what
    ``merge_schema`` adds for nested data (MERGE's evolution; appends: :func:`check_write_compatible`)."""
    if isinstance(table_type, StructType) and isinstance(data_type, StructType):
        fields = []
        for f in table_type.fields:
            d = data_type.find(f.name)
            fields.append(f if d is None else f.with_type(with_new_fields(f.type, d.type)))
        low = {f.name.lower() for f in table_type.fields}
        fields += [StructField(f.name, f.type, True, f.metadata) for f in data_type.fields if f.name.lower() not in low]
        return StructType(tuple(fields))
    if isinstance(table_type, ArrayType) and isinstance(data_type, ArrayType):
        return ArrayType(with_new_fields(table_type.element_type, data_type.element_type), table_type.contains_null)
    if isinstance(table_type, MapType) and isinstance(data_type, MapType):
        value = with_new_fields(table_type.value_type, data_type.value_type)
        return MapType(table_type.key_type, value, table_type.value_contains_null)
    return table_type


def is_safe_upcast(data_type: DataType, table_type: DataType) -> bool:
    """True when values of ``data_type`` can be written into a ``table_type`` column without loss.

    Allowed (besides equal types): byte -> short -> integer -> long; float -> double;
    byte/short/integer -> double (exact); decimal(p1,s1) -> decimal(p2,s2) when s2 >= s1 and
    p2 - s2 >= p1 - s1; integer types -> decimal with enough integer digits (byte 3, short 5,
    int 10, long 20); void (an all-null column) -> any type; timestamp_ntz -> timestamp (in the session
    time zone, UTC, as Spark's store assignment does). Nested types: element/key/value/field
    wise with the same rules; a data struct may omit nullable fields. Nothing else (no
    timestamp -> timestamp_ntz, no string <-> number): Delta's schema enforcement would refuse.
    """
    if data_type == table_type:
        return True
    if isinstance(data_type, PrimitiveType) and data_type.name == "void":
        return True
    if isinstance(data_type, PrimitiveType) and isinstance(table_type, PrimitiveType):
        a, b = data_type.name, table_type.name
        if a == "timestamp_ntz" and b == "timestamp":
            # Spark's store assignment: a zone-less value is read in the session time zone (UTC
            # here); what a pandas-made parquet file holds for a TIMESTAMP column
            return True
        return widens_number(a, b)
    if isinstance(data_type, PrimitiveType) and isinstance(table_type, DecimalType):
        digits = {"byte": 3, "short": 5, "integer": 10, "long": 20}.get(data_type.name)
        return digits is not None and table_type.precision - table_type.scale >= digits
    if isinstance(data_type, DecimalType) and isinstance(table_type, DecimalType):
        return is_widening(data_type, table_type)  # no fewer integer or fraction digits
    if isinstance(data_type, ArrayType) and isinstance(table_type, ArrayType):
        return is_safe_upcast(data_type.element_type, table_type.element_type)
    if isinstance(data_type, MapType) and isinstance(table_type, MapType):
        return is_safe_upcast(data_type.key_type, table_type.key_type) and is_safe_upcast(
            data_type.value_type, table_type.value_type
        )
    if isinstance(data_type, StructType) and isinstance(table_type, StructType):
        problems: list[str] = []
        _compare_struct(table_type, data_type, (), problems, merge=False, merged=None)
        return not problems
    return False


def _compare_struct(
    table: StructType,
    data: StructType,
    path: tuple[str, ...],
    problems: list[str],
    *,
    merge: bool,
    merged: list | None,
    widen: frozenset = frozenset(),
) -> None:
    """Append human-readable problems; with ``merged`` (a list) collect the merged fields; a column of
    ``widen`` (top level) takes the data's wider types, its nested fields' too (:func:`.widening.widened_to`)."""
    data_by_low = {f.name.lower(): f for f in data.fields}
    table_low = {f.name.lower() for f in table.fields}
    for tf in table.fields:
        where = ".".join(path + (tf.name,))
        df = data_by_low.get(tf.name.lower())
        if df is None:
            if not may_leave_out(tf):
                problems.append(f"missing non-nullable column '{where}' ({tf.type.simple_string()} NOT NULL)")
            if merged is not None:
                merged.append(tf)
            continue
        md = tf.metadata or {}
        if "delta.identity.step" in md and str(md.get("delta.identity.allowExplicitInsert", "false")).lower() != "true":
            problems.append(f"column '{where}' is GENERATED ALWAYS AS IDENTITY: leave it out, the table assigns it")
        if not path and tf.name.lower() in widen:  # the data's wider types (nested ones too) taken
            tf = widened_to(tf, df.type) or tf
        new_type = tf.type
        if isinstance(tf.type, StructType) and isinstance(df.type, StructType):
            sub_merged: list | None = [] if merged is not None else None
            _compare_struct(tf.type, df.type, path + (tf.name,), problems, merge=merge, merged=sub_merged)
            if sub_merged is not None:
                new_type = StructType(tuple(sub_merged))
        else:
            if merge:  # new fields of structs in arrays and maps (directly nested ones: above)
                new_type = with_new_fields(tf.type, df.type)
            if not is_safe_upcast(df.type, new_type):
                problems.append(
                    f"column '{where}' has type {df.type.simple_string()} in the data but "
                    f"{new_type.simple_string()} in the table"
                )
        if merged is not None:
            merged.append(tf.with_type(new_type))
    extra = [f for f in data.fields if f.name.lower() not in table_low]
    for f in extra:
        where = ".".join(path + (f.name,))
        if not merge:
            problems.append(f"extra column '{where}' ({f.type.simple_string()}) is not in the table")
        elif DEFAULT_KEY in (f.metadata or {}):
            # PROTOCOL.md "Default Columns": a column is never added with its default in one go
            problems.append(
                f"new column '{where}' carries a DEFAULT ({f.metadata[DEFAULT_KEY]!r}), which a column "
                "cannot get in the command that adds it (Delta's rule: add it, then set its default)"
            )
        elif merged is not None:
            merged.append(StructField(f.name, f.type, True, f.metadata))


def check_write_compatible(
    table_schema: StructType, data_schema: StructType, *, merge_schema: bool = False, widen: frozenset = frozenset()
) -> StructType:
    """Schema enforcement for appends/overwrites into an existing table.

    Rules (Delta's schema enforcement on write):

    * every data column must match a table column by name (case-insensitively); an extra column
      is an error unless ``merge_schema`` (then it is appended to the table schema as nullable,
      also inside nested structs);
    * a table column absent from the data is allowed when nullable (written as null); a missing
      NOT NULL column is an error ("nullability violation"); whether a present nullable data
      column actually holds nulls for a NOT NULL table column is a data check
      (:func:`check_not_null`), not a schema one, as in Delta;
    * types must be equal or a safe upcast (:func:`is_safe_upcast`); a column named in ``widen``
      (:func:`.widening.widenable`: ``merge_schema`` on a type-widening table) whose data type is a
      widening of its own takes the wider type, recorded in ``delta.typeChanges``.

    :returns: the schema the table has after the write: ``table_schema`` itself when nothing
        changes, else the merged schema (``merge_schema=True`` with new columns).
    :raises SchemaMismatchError: listing every problem found.
    """
    problems: list[str] = []
    merged: list = []
    _compare_struct(table_schema, data_schema, (), problems, merge=merge_schema, merged=merged, widen=widen)
    if problems:
        raise SchemaMismatchError(
            "The data does not match the table schema",
            "; ".join(problems),
            "select/cast the data to the table's columns and types"
            # merge_schema adds columns; it does not change types, so only extra columns get the hint
            + (
                ""
                if merge_schema or not any("extra column" in p for p in problems)
                else ", or write with merge_schema=True to add the new columns"
            ),
        )
    out = StructType(tuple(merged))
    return table_schema if out == table_schema else out.validate()


def check_not_null(table_schema: StructType, data: pa.Table | pa.RecordBatch) -> None:
    """Raise :class:`SchemaMismatchError` if a NOT NULL column (top level or nested struct field
    under non-null parents) holds a null in ``data``. Columns are matched case-insensitively;
    absent columns count as all null."""
    problems: list[str] = []
    names = {n.lower(): n for n in data.schema.names}

    def check(arr, st: StructType, path: tuple[str, ...]):
        for _i, f in enumerate(st.fields):
            where = ".".join(path + (f.name,))
            col = arr(f.name)
            if col is None:
                if not f.nullable and data.num_rows:
                    problems.append(f"'{where}' is missing (all null)")
                continue
            if not f.nullable and col.null_count:
                problems.append(f"'{where}' has {col.null_count} null value(s)")
            if isinstance(f.type, StructType) and pa.types.is_struct(col.type):
                chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                for ch in chunks:
                    # children of a null parent are not checked (the parent itself is null)
                    valid = ch.filter(ch.is_valid()) if ch.null_count else ch
                    sub_names = {ch.type.field(j).name.lower(): j for j in range(ch.type.num_fields)}

                    def sub(name, valid=valid, sub_names=sub_names):
                        j = sub_names.get(name.lower())
                        return None if j is None else valid.field(j)

                    check(sub, f.type, path + (f.name,))

    def top(name):
        n = names.get(name.lower())
        if n is None:
            return None
        return data.column(data.schema.get_field_index(n))

    check(top, table_schema, ())
    if problems:
        raise SchemaMismatchError(
            "NOT NULL constraint violated",
            "; ".join(dict.fromkeys(problems)),
            "filter out or fill the null values before writing",
        )
