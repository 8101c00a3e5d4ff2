"""Small Arrow helpers of the engine's data work (rewrites, MERGE, the in-process plane): data handed
in as one table, an evaluated value as an array, new values scattered into a column, stats bounds
as numbers. Pure pyarrow and numpy; no table, log or command knowledge."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError

__all__ = ["arrow_table", "as_array", "scatter", "numbers"]


def arrow_table(data) -> pa.Table:
    """Arrow data handed in by a caller (a table, a record batch, a reader or batches) as one table."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    try:
        batches = list(data)
    except TypeError:
        batches = None
    if not batches or not all(isinstance(b, pa.RecordBatch) for b in batches):
        raise InvalidArgumentError(
            f"A table opened without Spark takes Arrow data, got {type(data).__name__}",
            "the table was opened without a Spark session, so the data cannot be a DataFrame",
            "pass a pyarrow Table (or record batches), or open the table with DeltaTable.for_path(spark, ...)",
        )
    return pa.Table.from_batches(batches)


def as_array(value, length: int, t: pa.DataType) -> pa.Array:
    """An evaluated expression (an array, a chunked array or a scalar) as one array of ``length``."""
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    if isinstance(value, pa.Scalar):
        value = pa.repeat(value, length) if value.is_valid else pa.nulls(length, t)
    return value


def scatter(col: pa.Array, mask: pa.Array, new: pa.Array) -> pa.Array:
    """``col`` with its rows where ``mask`` is TRUE replaced, in order, by ``new`` (one value each)."""
    try:
        return pc.replace_with_mask(col, mask, new)
    except pa.ArrowNotImplementedError:  # nested types: gather from the two arrays
        n = len(col)
        where = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
        index = np.arange(n, dtype=np.int64)
        index[where] = n + np.arange(int(where.sum()), dtype=np.int64)
        return pa.concat_arrays([col, new]).take(pa.array(index))


def numbers(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """Bounds (or literals) as float64 on one scale per type (days, microseconds); NaN = unknown."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_date32(t):
        arr = arr.cast(pa.int32())
    elif pa.types.is_date64(t):
        arr = pc.divide(arr.cast(pa.int64()), 86_400_000)
    elif pa.types.is_timestamp(t):
        arr = arr.cast(pa.timestamp("us", t.tz), safe=False).cast(pa.int64())
    elif pa.types.is_boolean(t):
        arr = arr.cast(pa.int8())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        return None
    return np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype="float64")
