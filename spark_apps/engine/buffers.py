"""numpy <-> arrow through buffers.

pyarrow imports pandas (~0.25 s) the first time it converts numpy or Python values to arrow
(``pa.array``, ``pa.scalar``, a Python scalar passed to a compute function, ``empty_table``) or
arrow to numpy (``to_numpy``) when pandas is installed, and ``Table.group_by`` imports it through
``pyarrow.dataset``. The log replay goes through buffers instead, so a fresh process that opens a
table does not pay for pandas (the slow fallbacks for malformed logs still may).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def pa_ints(values: np.ndarray) -> pa.Array:
    """An int32/int64 numpy array as an arrow array (zero-copy, no nulls)."""
    if values.dtype != np.int32:
        values = values.astype(np.int64, copy=False)
    values = np.ascontiguousarray(values)
    type_ = pa.int32() if values.dtype == np.int32 else pa.int64()
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def pa_bools(values: np.ndarray) -> pa.Array:
    """A numpy bool array as an arrow boolean array (no nulls)."""
    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def pa_strings(values: list[str]) -> pa.Array:
    """A list of Python strings as an arrow string array (no nulls)."""
    enc = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in enc], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(enc), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))])


def str_scalar(value: str) -> pa.Scalar:
    return pa_strings([value])[0]


S_EMPTY, S_AT, S_NUL, S_TRUE, S_FALSE = (str_scalar(x) for x in ("", "@", "\x00", "true", "false"))


def np_ints(arr: pa.Array) -> np.ndarray:
    """A signed integer arrow array without nulls as a numpy view (zero-copy)."""
    width = arr.type.bit_width // 8
    return np.frombuffer(arr.buffers()[1], dtype=np.dtype(f"<i{width}"), count=len(arr), offset=arr.offset * width)


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    raw = np.frombuffer(buf, dtype=np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(raw, bitorder="little")[offset : offset + n].view(bool)


def np_bools(arr: pa.Array) -> np.ndarray:
    """A boolean arrow array as a numpy bool array, null counting as ``False``."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    validity, data = arr.buffers()[:2]
    out = _bits(data, arr.offset, n)
    if arr.null_count and validity is not None:
        out = out & _bits(validity, arr.offset, n)
    return out
