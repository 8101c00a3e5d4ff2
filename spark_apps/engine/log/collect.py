"""What the log readers collect: file-action sources and non-file actions, in log order.

The JSON commit reader (:mod:`.commit_read`) and the checkpoint reader (:mod:`.checkpoint_read`)
fill one :class:`Collected`; replay (:mod:`.replay`) reconciles it.
"""

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..buffers import np_bools, pa_bools
from ..errors import LogCorruptedError
from .file_actions import struct_child

# ---------------------------------------------------------------------------------------------
# sources


@dataclass
class FileSource:
    """Raw ``add`` or ``remove`` struct rows from one place (one chunk of one column).

    ``keep`` (checkpoint parquet chunks only) marks the rows that are file actions (valid struct,
    non-null path); the other rows are skipped at reconciliation instead of being filtered out
    here (a filter would copy every path and stats string). ``None`` means every row counts.
    """

    kind: str  # "add" | "remove"
    rows: pa.StructArray
    order: np.ndarray | None  # int64 global order numbers (commit rows; None for checkpoint rows)
    from_json: bool  # rows parsed from JSON (partition values still inferred structs)
    in_checkpoint: bool = False  # part of the (already reconciled) checkpoint
    keep: np.ndarray | None = None


@dataclass
class Collected:
    sources: list[FileSource] = field(default_factory=list)
    # (order, version, action) of non-file actions in log order
    actions: list[tuple[int, int, object]] = field(default_factory=list)
    next_order: int = 0
    last_commit_info_line: tuple[int, str] | None = None


def strip_nones(obj):
    if isinstance(obj, dict):
        return {k: strip_nones(v) for k, v in obj.items() if v is not None}
    return obj


def add_struct_rows(
    col: pa.ChunkedArray | pa.Array,
    kind: str,
    coll: Collected,
    from_json: bool,
    order_base: np.ndarray | None,
    *,
    in_checkpoint: bool = False,
) -> None:
    """Register the file-action rows of an ``add``/``remove`` struct column (one source per chunk).

    A row counts when the struct is valid and has a path. Commit rows are filtered to those here
    (commits are small); checkpoint parquet chunks are kept whole with a ``keep`` mask (no copy).
    """
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    pos = 0
    for arr in chunks:
        n = len(arr)
        lo = pos
        pos += n
        if n == 0 or pa.types.is_null(arr.type) or arr.null_count == n:
            continue
        p = struct_child(arr, "path")
        if p is None:
            raise LogCorruptedError(
                f"A '{kind}' action has no 'path'",
                "the path field is required",
                "repair the log; the table was written by a non-conforming writer",
            )
        keep = None
        if arr.null_count or p.null_count:  # a row without path is not a file action we can key on
            keep = np_bools(arr.is_valid())
            if p.null_count:
                keep &= np_bools(p.is_valid())
            if not keep.any():
                continue
        if in_checkpoint and not from_json:
            coll.sources.append(FileSource(kind, arr, None, from_json, True, keep))
            continue
        order = None if in_checkpoint else order_base[lo : lo + n]
        if keep is not None:
            arr = arr.filter(pa_bools(keep))
            order = None if order is None else order[keep]
        coll.sources.append(FileSource(kind, arr, order, from_json, in_checkpoint))
