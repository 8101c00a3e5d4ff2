"""Deletion vectors: descriptor -> the set of deleted row indexes of a data file, and back.

Format (PROTOCOL.md "Deletion Vectors", "Deletion Vector Format"):

* Descriptor ``storageType``:
  ``u`` - file under the table root: ``pathOrInlineDv`` = optional random prefix + the last 20
  chars, a Z85-encoded UUID; file ``<root>/<prefix>/deletion_vector_<uuid>.bin``;
  ``p`` - ``pathOrInlineDv`` is an absolute path URI of the file;
  ``i`` - ``pathOrInlineDv`` is the Z85-encoded serialized bitmap itself.
  ``offset`` (absent for ``i``, treat absent as 1 for files: just after the version byte) points
  at the bitmap's framing in the file; ``sizeInBytes`` is the bitmap size; ``cardinality`` the
  number of deleted rows.
* File layout: 1 byte format version (1), then per DV: 4-byte big-endian data size, the data,
  4-byte big-endian CRC-32 of the data (checked here).
* Data: 4-byte little-endian magic 1681511377, then a RoaringBitmap 64-bit "portable"
  serialization: u64 LE bucket count, then per bucket a u32 LE key (high 32 bits of the row
  index) and a standard 32-bit RoaringBitmap (portable format: cookie 12346 without run
  containers or 12347 with; descriptive header of (key, cardinality-1) u16 pairs; offsets
  header; array containers (u16 values), bitmap containers (1024 u64 words), run containers
  (u16 count, then (start, length-1) u16 pairs)).
* Z85 (ZeroMQ RFC 32): 5 chars -> 4 bytes, big-endian base 85 over the alphabet below.

Bitmaps are decoded and encoded by CRoaring (``pyroaring.BitMap64``, whose portable serialization is
this format) straight from and to numpy arrays (no Python object per deleted row). Readers drop the
rows whose 0-based physical row index in the file is in the set (:func:`keep_mask`); writers encode
a set (:func:`encode_bitmap`, run containers where smaller) and store it in the log
when small (storage type ``i``) or in a file of its own under the table root (storage type ``u``):
:func:`deletion_vector`.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from .actions import camel_case
from .errors import DataFileMissingError, LogCorruptedError
from .paths import resolve_log_path
from .storage import Storage, normalized_io_errors

__all__ = [
    "z85_decode",
    "z85_encode",
    "dv_file_path",
    "read_dv_bytes",
    "decode_bitmap",
    "deleted_row_indexes",
    "keep_mask",
    "encode_bitmap",
    "write_dv_file",
    "deletion_vector",
    "INLINE_MAX_BYTES",
    "MAGIC",
]

MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = np.full(256, -1, dtype=np.int64)
for _i, _c in enumerate(_Z85):
    _Z85_INDEX[ord(_c)] = _i
_POW85 = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.int64)


def _corrupt(what: str, cause: str) -> LogCorruptedError:
    return LogCorruptedError(
        f"Deletion vector {what} is invalid",
        cause,
        "the deletion vector file or descriptor is damaged; restore it or rewrite the data file",
    )


def z85_decode(text: str) -> bytes:
    """Z85 text (length a multiple of 5) -> bytes."""
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    if len(raw) % 5:
        raise _corrupt("encoding", f"Z85 text length {len(raw)} is not a multiple of 5")
    digits = _Z85_INDEX[raw]
    if (digits < 0).any():
        raise _corrupt("encoding", "a character is not in the Z85 alphabet")
    words = (digits.reshape(-1, 5) * _POW85).sum(axis=1)
    if (words > 0xFFFFFFFF).any():
        raise _corrupt("encoding", "a Z85 group overflows 32 bits")
    return words.astype(">u4").tobytes()


def z85_encode(data: bytes) -> str:
    """bytes (length a multiple of 4) -> Z85 text."""
    if len(data) % 4:
        raise ValueError("Z85 input length must be a multiple of 4")
    words = np.frombuffer(data, dtype=">u4").astype(np.int64)
    out = []
    for w in words.tolist():
        chunk = []
        for p in (85**4, 85**3, 85**2, 85, 1):
            chunk.append(_Z85[(w // p) % 85])
        out.append("".join(chunk))
    return "".join(out)


def _get(dv: Any, snake: str):
    """A descriptor field from a wire dict (camelCase keys, snake_case accepted) or an object."""
    if isinstance(dv, dict):
        return dv.get(camel_case(snake), dv.get(snake))
    return getattr(dv, snake, None)


def dv_file_path(table_root: str, dv: Any) -> str:
    """Location of an on-disk deletion vector (storage type ``u`` or ``p``)."""
    st = _get(dv, "storage_type")
    p = _get(dv, "path_or_inline_dv")
    if st == "u":
        if len(p) < 20:
            raise _corrupt("descriptor", f"pathOrInlineDv '{p}' is shorter than a Z85 UUID (20 chars)")
        prefix, enc = p[:-20], p[-20:]
        u = uuid.UUID(bytes=z85_decode(enc))
        name = f"deletion_vector_{u}.bin"
        return resolve_log_path(table_root, f"{prefix}/{name}" if prefix else name, kind="deletion vector")
    if st == "p":
        return resolve_log_path(table_root, p, kind="deletion vector")
    raise _corrupt("descriptor", f"storageType '{st}' has no file")


def read_dv_bytes(storage: Storage, table_root: str, dv: Any) -> bytes:
    """The serialized bitmap (magic + roaring64) of a descriptor."""
    st = _get(dv, "storage_type")
    p = _get(dv, "path_or_inline_dv")
    size = _get(dv, "size_in_bytes")
    if st == "i":
        data = z85_decode(p)
        return data[:size] if size else data
    location = dv_file_path(table_root, dv)
    offset = _get(dv, "offset")
    offset = 1 if offset is None else int(offset)
    try:
        with storage.open_input_file(location) as f, normalized_io_errors(location):
            f.seek(offset)
            head = f.read(4)
            if len(head) != 4:
                raise _corrupt("file", f"'{location}' ends before offset {offset}")
            (n,) = struct.unpack(">i", head)
            data = f.read(n)
            crc_b = f.read(4)
    except FileNotFoundError:
        raise DataFileMissingError(
            f"Deletion vector file '{location}' is missing",
            "it was deleted outside Delta or vacuumed while a table version still references it",
            "read a newer version of the table, or restore the file",
        ) from None
    if len(data) != n or len(crc_b) != 4:
        raise _corrupt("file", f"'{location}' is truncated")
    if size is not None and int(size) != n:
        raise _corrupt("file", f"'{location}' holds {n} bytes at offset {offset}, the descriptor says {size}")
    (crc,) = struct.unpack(">I", crc_b)
    if zlib.crc32(data) & 0xFFFFFFFF != crc:
        raise _corrupt("file", f"CRC-32 mismatch in '{location}' at offset {offset}")
    return data


def decode_bitmap(data: bytes) -> np.ndarray:
    """Serialized DV (magic + roaring64 portable) -> sorted uint64 row indexes."""
    if len(data) < 12:
        raise _corrupt("bitmap", f"only {len(data)} bytes")
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic != MAGIC:
        raise _corrupt("bitmap", f"magic number {magic} is not {MAGIC}")
    try:
        bitmap = BitMap64.deserialize(memoryview(data)[4:])
    except (ValueError, MemoryError) as e:  # CRoaring's own validation of the portable format
        raise _corrupt("bitmap", f"it is not a valid 64-bit portable RoaringBitmap ({e})") from None
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)


def deleted_row_indexes(storage: Storage, table_root: str, dv: Any) -> np.ndarray:
    """Row indexes (uint64, sorted) deleted by descriptor ``dv``; checks the cardinality."""
    rows = decode_bitmap(read_dv_bytes(storage, table_root, dv))
    card = _get(dv, "cardinality")
    if card is not None and int(card) != len(rows):
        raise _corrupt("bitmap", f"it holds {len(rows)} rows, the descriptor says cardinality {card}")
    return rows


def keep_mask(deleted: np.ndarray, num_rows: int) -> pa.Array:
    """Boolean Arrow mask of length ``num_rows``: False for deleted row indexes."""
    mask = np.ones(num_rows, dtype=bool)
    if len(deleted):
        d = deleted[deleted < np.uint64(num_rows)].astype(np.int64)
        mask[d] = False
    return pa.array(mask, pa.bool_())


def encode_bitmap(rows: np.ndarray) -> bytes:
    """Row indexes -> serialized DV (magic + roaring64 portable), what :func:`decode_bitmap` reads."""
    return _encode_unique(np.unique(np.asarray(rows, dtype=np.uint64)))


def _encode_unique(rows: np.ndarray) -> bytes:
    """:func:`encode_bitmap` of sorted unique uint64 row indexes (run containers where smaller)."""
    bitmap = BitMap64(rows)
    bitmap.run_optimize()
    return struct.pack("<I", MAGIC) + bitmap.serialize()


#: a set whose serialized bitmap takes at most this many bytes is stored in the log itself (storage
#: type ``i``): a point DELETE or UPDATE writes no vector file (one object-store PUT less per data file)
#: and the log carries ~1.25x the bytes as Z85 text; larger sets go to files
INLINE_MAX_BYTES = 256


def deletion_vector(storage: Storage, table_root: str, rows: np.ndarray) -> dict:
    """The descriptor (wire form) of the set ``rows``: inline in the log when its bitmap is at most
    :data:`INLINE_MAX_BYTES`, else a vector file of its own (:func:`write_dv_file`)."""
    rows = np.unique(np.asarray(rows, dtype=np.uint64))
    data = _encode_unique(rows)
    if len(data) <= INLINE_MAX_BYTES:
        return {
            "storageType": "i",
            "pathOrInlineDv": z85_encode(data + b"\0" * (-len(data) % 4)),  # Z85 takes whole 4-byte words
            "sizeInBytes": len(data),
            "cardinality": len(rows),
        }
    return write_dv_file(storage, table_root, rows)


def write_dv_file(storage: Storage, table_root: str, rows: np.ndarray) -> dict:
    """Write the set ``rows`` as a new deletion vector file ``deletion_vector_<uuid>.bin`` under the
    table root (format version 1, one framed bitmap with its CRC-32); returns its descriptor (wire
    form, camelCase keys). A file that is never committed is an orphan VACUUM removes."""
    from .paths import new_file_location

    rows = np.unique(np.asarray(rows, dtype=np.uint64))
    data = _encode_unique(rows)
    u = uuid.uuid4()
    framed = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data) & 0xFFFFFFFF)
    storage.write_bytes(new_file_location(table_root, f"deletion_vector_{u}.bin"), framed)
    return {
        "storageType": "u",
        "pathOrInlineDv": z85_encode(u.bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }
