"""MERGE's source: how big it may be to travel beside every file (:data:`MAX_SOURCE_BYTES`, estimated
from its schema), its form there (columns ``__s<i>``), deduplicated for an upsert, and its keys checked
unique. Engine-neutral Arrow; the Spark side of each is in :mod:`..spark.merge`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

__all__ = [
    "MAX_SOURCE_BYTES",
    "deduplicated_arrow",
    "duplicate_keys_error",
    "first_duplicate_key",
    "fixed_width",
    "prefixed",
    "row_width",
    "source_row_limit",
]

#: a source up to about this many Arrow bytes is shipped to every task; larger ones are joined by Spark
MAX_SOURCE_BYTES = 256 << 20


def duplicate_keys_error(names: list[str], values: list) -> InvalidArgumentError:
    shown = ", ".join(f"{k}={v!r}" for k, v in zip(names, values))
    return InvalidArgumentError(
        "The upsert source holds duplicate keys",
        f"more than one source row has {shown}; which one should win is not defined",
        "deduplicate the source first, or pass dedupe_by='<column>' to keep the row with its greatest value",
    )


def first_duplicate_key(table: pa.Table, columns: list[str]) -> list | None:
    """The values of a key (``columns`` of ``table``, none NULL) held by more than one row, or None.
    The keys are sorted and neighbours compared: memory a few times the key columns' (a hash
    grouping of millions of keys holds ten times more)."""
    valid = None
    for c in columns:
        ok = pc.is_valid(table.column(c))
        valid = ok if valid is None else pc.and_(valid, ok)
    keys = table.select(columns).filter(valid) if valid is not None else table.select(columns)
    if keys.num_rows < 2:
        return None
    if len(columns) == 1 and pa.types.is_integer(keys.column(0).type):  # one integer key: NumPy's sort, faster
        v = np.sort(keys.column(0).to_numpy())
        if not (v[1:] == v[:-1]).any():
            return None  # (a key held twice is found below, with its value)
    keys = keys.take(pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in columns]))
    same = None
    for c in columns:
        col = keys.column(c)
        after, before = col.slice(1), col.slice(0, keys.num_rows - 1)
        eq = pc.equal(after, before)
        if pa.types.is_floating(col.type):  # NaN equals NaN as a key (as Spark's grouping has it)
            eq = pc.or_(eq, pc.and_(pc.is_nan(after), pc.is_nan(before)))
        same = eq if same is None else pc.and_(same, eq)
    at = pc.index(same, True).as_py()
    return None if at < 0 else [keys.column(c)[at].as_py() for c in columns]


def fixed_width(t) -> int:
    """Bytes per value of a fixed-width type in Arrow (8 for others: a conservative guess)."""
    from ..schema import DecimalType

    if isinstance(t, DecimalType):
        return 16
    return {"boolean": 1, "byte": 1, "short": 2, "integer": 4, "date": 4, "float": 4}.get(getattr(t, "name", ""), 8)


def row_width(schema) -> int:
    """Estimated bytes per row of ``schema`` (fixed widths, 32 per string or binary value, 64 per
    nested value): a guess from the schema alone, where no data has been read."""
    width = 0
    for f in schema.fields:
        name = getattr(f.type, "name", "")
        width += 32 if name in ("string", "binary") else fixed_width(f.type) if name else 64
    return max(width, 1)


def source_row_limit(source_schema, max_bytes: int | None = None) -> int:
    """How many rows of a source with this schema are small enough to send to every task."""
    return (MAX_SOURCE_BYTES if max_bytes is None else max_bytes) // row_width(source_schema)


def prefixed(table: pa.Table, source_schema) -> pa.Table:
    """``table`` with columns ``__s<i>`` in the Arrow types of ``source_schema`` (the form
    :class:`PreparedMerge` reads)."""
    schema = source_schema.to_arrow_schema()
    want = pa.schema([pa.field(f"__s{i}", f.type, f.nullable) for i, f in enumerate(schema)])
    return pa.Table.from_arrays([table.column(i).cast(f.type) for i, f in enumerate(want)], schema=want)


def deduplicated_arrow(table: pa.Table, key_columns: list[str], dedupe_by: str) -> pa.Table:
    """:func:`..spark.merge.deduplicated` for Arrow data: one row per key, the greatest ``dedupe_by``
    (NULLs last); rows with a NULL key never match and are kept as they are."""
    by_lower = {c.lower(): c for c in table.column_names}
    if dedupe_by.lower() not in by_lower:
        raise InvalidArgumentError(
            f"dedupe_by column '{dedupe_by}' is not in the source",
            f"the source has {', '.join(table.column_names)}",
            "name a source column (e.g. an update timestamp)",
        )
    keys = [by_lower.get(k.lower(), k) for k in key_columns]
    order = pc.array_sort_indices(
        table.column(by_lower[dedupe_by.lower()]), order="descending", null_placement="at_end"
    )
    ranked = table.take(order).append_column("__rank", pa.array(np.arange(table.num_rows), pa.int64()))
    null_key = pc.is_null(ranked.column(keys[0]))
    for k in keys[1:]:
        null_key = pc.or_(null_key, pc.is_null(ranked.column(k)))
    first = ranked.filter(pc.invert(null_key)).group_by(keys).aggregate([("__rank", "min")])
    keep = pa.concat_arrays(
        [first.column("__rank_min").combine_chunks(), ranked.filter(null_key).column("__rank").combine_chunks()]
    )
    return table.take(order).take(keep)
