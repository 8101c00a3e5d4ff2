"""Z-order keys in pure pyarrow/numpy: rows sorted by them cluster on every z-order column at once.

Each column's values become range ids (their rank among the rows, scaled to ``bits`` bits), and the ids of all columns are interleaved bit by bit (the most significant bit of each
column first) into one unsigned 64-bit key (NULLs rank last). Sorting by it keeps rows close in every column close
in the file order, so files written in that order have narrow min/max ranges on each column and
a point predicate on any of them reads few files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["range_ids", "interleave", "zorder_indices"]


def range_ids(column: pa.Array | pa.ChunkedArray, bits: int) -> np.ndarray:
    """Per row, its value's rank among the rows scaled to ``[0, 2**bits)`` (equal values, equal ids;
    NULLs rank last)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    ranks = pc.rank(column, sort_keys="ascending", tiebreaker="min")
    r = np.asarray(ranks.to_numpy(zero_copy_only=False), dtype=np.float64) - 1.0
    top = float((1 << bits) - 1)
    return np.floor(r / max(n - 1, 1) * top).astype(np.uint64)


def interleave(ids: list[np.ndarray], bits: int) -> np.ndarray:
    """One key per row from per-column ids of ``bits`` bits each (bit ``b`` of column ``c`` lands at
    position ``b * len(ids) + c``, counting from the least significant)."""
    k = len(ids)
    out = np.zeros(len(ids[0]) if ids else 0, dtype=np.uint64)
    for b in range(bits):
        for c, col in enumerate(ids):
            bit = (col >> np.uint64(b)) & np.uint64(1)
            out |= bit << np.uint64(b * k + c)
    return out


def _column(table: pa.Table, column) -> pa.ChunkedArray:
    """A column by name, or a nested field by its name parts (``["a", "b"]``: ``a.b``)."""
    if isinstance(column, str):
        return table.column(column)
    data = table.column(column[0])
    for part in column[1:]:
        data = pc.struct_field(data, part)
    return data


def zorder_indices(table: pa.Table, columns: list) -> np.ndarray:
    """The row order that sorts ``table`` by the z-order key of ``columns`` (names, or name parts of
    nested fields)."""
    bits = max(1, 64 // max(len(columns), 1))
    bits = min(bits, 21)  # ranks of up to two million distinct values keep their resolution
    key = interleave([range_ids(_column(table, c), bits) for c in columns], bits)
    return np.argsort(key, kind="stable")
