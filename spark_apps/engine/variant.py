"""Variant values (Delta's ``variantType``): the Parquet Variant binary encoding, decoded in process.

A variant value is two binaries (Parquet's VariantEncoding spec, the layout Spark 4 and delta-rs write):

* ``metadata``: a header byte (version 1 in bits 0-3, ``sorted_strings`` bit 4, offset size - 1 in bits
  6-7), the dictionary size, ``size + 1`` offsets (each of that offset size, little-endian) and the
  UTF-8 bytes of the object keys the value refers to by id.
* ``value``: a header byte whose low 2 bits are the basic type: 0 a primitive (the upper 6 bits its type
  id: null, true, false, int8/16/32/64, double, decimal4/8/16, date, timestamp (UTC, micros),
  timestamp_ntz, float, binary, string, time, timestamp nanos (UTC and ntz), uuid), 1 a short string
  (its length in the upper bits), 2 an object (``num_elements``, field ids, ``num + 1`` offsets, the
  values; ids ordered by key), 3 an array (``num_elements``, ``num + 1`` offsets, the values).

A nested value is itself a valid variant with the same metadata, so a path lookup (:func:`lookup`)
returns a slice of ``value`` and never re-encodes. In Arrow a variant column is
``struct<value: binary, metadata: binary>`` (:func:`is_variant_arrow`; Spark's Arrow form, which also
tags ``metadata`` with ``{"variant": "true"}``). Shredded variants (``variantShredding``: a
``typed_value`` column beside ``value``) are put back together into this binary form by
:func:`unshred` when a file is read.

Paths (:func:`parse_path`) are Spark's ``variant_get`` paths: ``$``, then ``.key``, ``['key']`` /
``["key"]`` or ``[index]``. Nothing here imports pyspark.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
import struct
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError

__all__ = [
    "VariantError",
    "decode",
    "lookup",
    "parse_path",
    "to_json",
    "natural",
    "is_variant_arrow",
    "arrow_type",
    "unshred",
]

# primitive type ids (Parquet VariantEncoding.md)
NULL, TRUE, FALSE, INT8, INT16, INT32, INT64, DOUBLE, DECIMAL4, DECIMAL8, DECIMAL16 = range(11)
DATE, TIMESTAMP, TIMESTAMP_NTZ, FLOAT, BINARY, STRING, TIME, TIMESTAMP_NANOS, TIMESTAMP_NTZ_NANOS, UUID = range(11, 21)
PRIMITIVE, SHORT_STRING, OBJECT, ARRAY = range(4)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
#: fixed sizes of the primitives' payloads (after the header byte); binary and string carry a 4-byte length
_FIXED = {NULL: 0, TRUE: 0, FALSE: 0, INT8: 1, INT16: 2, INT32: 4, INT64: 8, DOUBLE: 8, DECIMAL4: 5, DECIMAL8: 9}
_FIXED |= {DECIMAL16: 17, DATE: 4, TIMESTAMP: 8, TIMESTAMP_NTZ: 8, FLOAT: 4, TIME: 8, TIMESTAMP_NANOS: 8}
_FIXED |= {TIMESTAMP_NTZ_NANOS: 8, UUID: 16}


class VariantError(InvalidArgumentError):
    """A variant binary that is not valid Parquet Variant encoding."""


def _malformed(why: str) -> VariantError:
    return VariantError(
        "A variant value is malformed",
        why,
        "rewrite the value with a writer that follows the Parquet Variant encoding (Spark's parse_json, delta-rs)",
    )


def _uint(data: bytes, pos: int, size: int) -> int:
    if pos + size > len(data):
        raise _malformed(f"it ends at byte {len(data)}, before a {size}-byte field at {pos}")
    return int.from_bytes(data[pos : pos + size], "little")


# ---------------------------------------------------------------------------------------------
# metadata


def keys(metadata: bytes) -> list[str]:
    """The dictionary of object keys in ``metadata``."""
    if not metadata:
        raise _malformed("its metadata is empty")
    header = metadata[0]
    if header & 0x0F != 1:
        raise _malformed(f"its metadata has version {header & 0x0F}, only version 1 exists")
    size = ((header >> 6) & 0x03) + 1
    count = _uint(metadata, 1, size)
    start = 1 + size * (count + 2)
    offsets = [_uint(metadata, 1 + size * (i + 1), size) for i in range(count + 1)]
    if start + offsets[-1] > len(metadata):
        raise _malformed("its metadata's dictionary runs past its end")
    return [metadata[start + offsets[i] : start + offsets[i + 1]].decode("utf-8") for i in range(count)]


# ---------------------------------------------------------------------------------------------
# values


def _header(value: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(value):
        raise _malformed(f"it ends at byte {len(value)}, before a value at {pos}")
    b = value[pos]
    return b & 0x03, b >> 2


def _container(value: bytes, pos: int, basic: int, head: int) -> tuple[int, int, int, int, int]:
    """``(count, ids_at, id_size, offsets_at, offset_size)`` of the object or array at ``pos``; the
    values start after the offsets."""
    offset_size = (head & 0x03) + 1
    if basic == OBJECT:
        id_size = ((head >> 2) & 0x03) + 1
        large = (head >> 4) & 0x01
    else:
        id_size = 0
        large = (head >> 2) & 0x01
    count_size = 4 if large else 1
    count = _uint(value, pos + 1, count_size)
    ids_at = pos + 1 + count_size
    return count, ids_at, id_size, ids_at + id_size * count, offset_size


def _children(value: bytes, pos: int, basic: int, head: int) -> tuple[list[int], list[int], int]:
    """The field ids (objects; empty for arrays) and the positions of the children; and the end of the
    container."""
    count, ids_at, id_size, offsets_at, offset_size = _container(value, pos, basic, head)
    data = offsets_at + offset_size * (count + 1)
    ids = [_uint(value, ids_at + i * id_size, id_size) for i in range(count)] if basic == OBJECT else []
    offsets = [_uint(value, offsets_at + i * offset_size, offset_size) for i in range(count + 1)]
    end = data + (offsets[-1] if basic == ARRAY else max(offsets, default=0))
    return ids, [data + o for o in offsets[:count]], end


def size(value: bytes, pos: int = 0) -> int:
    """The number of bytes of the value at ``pos``."""
    basic, head = _header(value, pos)
    if basic == SHORT_STRING:
        return 1 + head
    if basic == PRIMITIVE:
        if head in (BINARY, STRING):
            return 5 + _uint(value, pos + 1, 4)
        if head not in _FIXED:
            raise _malformed(f"it has the unknown primitive type id {head}")
        return 1 + _FIXED[head]
    if basic == ARRAY:
        _, children, end = _children(value, pos, basic, head)
        return end - pos
    # an object's values may be in any order: its end is after the value that ends last
    _, children, _ = _children(value, pos, basic, head)
    return max((c + size(value, c) for c in children), default=_children(value, pos, basic, head)[2]) - pos


def _primitive(value: bytes, pos: int, type_id: int):
    p = pos + 1
    if type_id == NULL:
        return None
    if type_id in (TRUE, FALSE):
        return type_id == TRUE
    if type_id in (INT8, INT16, INT32, INT64):
        width = {INT8: 1, INT16: 2, INT32: 4, INT64: 8}[type_id]
        return int.from_bytes(_slice(value, p, width), "little", signed=True)
    if type_id == DOUBLE:
        return struct.unpack("<d", _slice(value, p, 8))[0]
    if type_id == FLOAT:
        return struct.unpack("<f", _slice(value, p, 4))[0]
    if type_id in (DECIMAL4, DECIMAL8, DECIMAL16):
        width = {DECIMAL4: 4, DECIMAL8: 8, DECIMAL16: 16}[type_id]
        scale = _uint(value, p, 1)
        unscaled = int.from_bytes(_slice(value, p + 1, width), "little", signed=True)
        return decimal.Decimal(unscaled).scaleb(-scale)
    if type_id == DATE:
        return _EPOCH_DATE + dt.timedelta(days=int.from_bytes(_slice(value, p, 4), "little", signed=True))
    if type_id in (TIMESTAMP, TIMESTAMP_NTZ, TIMESTAMP_NANOS, TIMESTAMP_NTZ_NANOS, TIME):
        n = int.from_bytes(_slice(value, p, 8), "little", signed=True)
        micros = n // 1000 if type_id in (TIMESTAMP_NANOS, TIMESTAMP_NTZ_NANOS) else n
        if type_id == TIME:
            return (dt.datetime.min + dt.timedelta(microseconds=micros)).time()
        t = _EPOCH + dt.timedelta(microseconds=micros)
        return t.replace(tzinfo=dt.UTC) if type_id in (TIMESTAMP, TIMESTAMP_NANOS) else t
    if type_id in (BINARY, STRING):
        n = _uint(value, p, 4)
        raw = bytes(_slice(value, p + 4, n))
        return raw.decode("utf-8") if type_id == STRING else raw
    if type_id == UUID:
        return uuid.UUID(bytes=bytes(_slice(value, p, 16)))
    raise _malformed(f"it has the unknown primitive type id {type_id}")


def _slice(value: bytes, pos: int, n: int) -> bytes:
    if pos + n > len(value):
        raise _malformed(f"it ends at byte {len(value)}, before {n} bytes at {pos}")
    return value[pos : pos + n]


def decode(value: bytes, metadata: bytes, pos: int = 0, names: list[str] | None = None):
    """The Python value of a variant: None, bool, int, float, Decimal, str, bytes, date, datetime (aware
    in UTC for timestamps, naive for timestamp_ntz), time, UUID, dict (keys in the value's order, which
    is by key) or list."""
    if names is None:
        names = keys(metadata)
    basic, head = _header(value, pos)
    if basic == PRIMITIVE:
        return _primitive(value, pos, head)
    if basic == SHORT_STRING:
        return bytes(_slice(value, pos + 1, head)).decode("utf-8")
    ids, children, _ = _children(value, pos, basic, head)
    if basic == ARRAY:
        return [decode(value, metadata, c, names) for c in children]
    try:
        return {names[i]: decode(value, metadata, c, names) for i, c in zip(ids, children)}
    except IndexError:
        raise _malformed(f"an object names a key id beyond the metadata's {len(names)} keys") from None


def lookup(value: bytes, metadata: bytes, path: tuple) -> bytes | None:
    """The value at ``path`` (keys and array indexes, :func:`parse_path`) as its own variant value
    (a slice of ``value``, same metadata), or None when the path does not exist in it (a key missing,
    an index out of range, a key into a non-object)."""
    names = keys(metadata) if any(isinstance(p, str) for p in path) else []
    pos = 0
    for step in path:
        basic, head = _header(value, pos)
        if isinstance(step, str):
            if basic != OBJECT:
                return None
            ids, children, _ = _children(value, pos, basic, head)
            found = next((c for i, c in zip(ids, children) if i < len(names) and names[i] == step), None)
            if found is None:
                return None
            pos = found
        else:
            if basic != ARRAY:
                return None
            _, children, _ = _children(value, pos, basic, head)
            if not 0 <= step < len(children):
                return None
            pos = children[step]
    return bytes(value[pos : pos + size(value, pos)]) if pos else bytes(value)


def is_null(value: bytes) -> bool:
    """Whether the variant value is the variant null (a JSON ``null``; SQL reads it as NULL)."""
    return len(value) > 0 and value[0] == 0


# ---------------------------------------------------------------------------------------------
# the Spark types of scalar values (variant_get's cast starts from them)


def natural(value: bytes, metadata: bytes):
    """``(python value, Delta type name)`` of a variant as Spark reads it before a cast: integers are
    ``long``, decimals ``decimal(p,s)`` (p the digits, at least the scale), objects and arrays
    ``object``/``array`` (their value is the JSON text), the variant null ``(None, "void")``."""
    basic, head = _header(value, 0)
    if basic == SHORT_STRING:
        return decode(value, metadata), "string"
    if basic in (OBJECT, ARRAY):
        return to_json(value, metadata), "object" if basic == OBJECT else "array"
    v = _primitive(value, 0, head)
    if head == NULL:
        return None, "void"
    if head in (TRUE, FALSE):
        return v, "boolean"
    if head in (INT8, INT16, INT32, INT64):
        return v, "long"
    if head in (DECIMAL4, DECIMAL8, DECIMAL16):
        scale = max(0, -v.as_tuple().exponent)
        return v, f"decimal({max(len(v.as_tuple().digits), scale, 1)},{scale})"
    name = {DOUBLE: "double", FLOAT: "float", DATE: "date", TIMESTAMP: "timestamp", TIMESTAMP_NANOS: "timestamp"}
    name |= {TIMESTAMP_NTZ: "timestamp_ntz", TIMESTAMP_NTZ_NANOS: "timestamp_ntz", BINARY: "binary", STRING: "string"}
    if head in name:
        return v, name[head]
    return str(v), "string"  # time and uuid: Spark has no such SQL type; their text


# ---------------------------------------------------------------------------------------------
# JSON


def to_json(value: bytes, metadata: bytes) -> str:
    """The JSON text of a variant as Spark's ``to_json`` writes it: no spaces, object keys in the
    value's order, decimals as written (``1.50``), doubles as Java prints them, dates and timestamps
    as quoted text (timestamps in UTC with ``+00:00``), binary as base64, uuids as their text."""
    out: list[str] = []
    _json(value, metadata, 0, keys(metadata), out)
    return "".join(out)


def _json(value: bytes, metadata: bytes, pos: int, names: list[str], out: list[str]) -> None:
    basic, head = _header(value, pos)
    if basic == OBJECT:
        ids, children, _ = _children(value, pos, basic, head)
        out.append("{")
        for k, (i, c) in enumerate(zip(ids, children)):
            out.append(("," if k else "") + json.dumps(names[i], ensure_ascii=False) + ":")
            _json(value, metadata, c, names, out)
        out.append("}")
        return
    if basic == ARRAY:
        _, children, _ = _children(value, pos, basic, head)
        out.append("[")
        for k, c in enumerate(children):
            out.append("," if k else "")
            _json(value, metadata, c, names, out)
        out.append("]")
        return
    v = decode(value, metadata, pos, names)
    out.append(_scalar_json(v, head if basic == PRIMITIVE else STRING))


def _scalar_json(v, type_id: int) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, float):
        return java_double(v, single=type_id == FLOAT)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bytes):
        return json.dumps(base64.b64encode(v).decode())
    if isinstance(v, dt.datetime):
        text = v.strftime("%Y-%m-%d %H:%M:%S") + (f".{v.microsecond:06d}".rstrip("0") if v.microsecond else "")
        return json.dumps(text + ("+00:00" if v.tzinfo is not None else ""))
    return json.dumps(str(v))


def java_double(v: float, *, single: bool = False) -> str:
    """``v`` as Java's ``Double.toString`` (``Float.toString`` when ``single``) writes it: the shortest
    digits that read back, ``1.0``, ``1.0E20``, ``1.5E-5``; NaN and the infinities quoted."""
    if math.isnan(v) or math.isinf(v):
        return json.dumps("NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity"))
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    if single:
        import numpy as np

        text = str(np.float32(v))
    else:
        text = repr(v)
    d = decimal.Decimal(text).normalize()
    if 1e-3 <= abs(v) < 1e7:
        plain = format(d, "f")
        return plain if "." in plain else plain + ".0"
    sign, digits, exponent = d.as_tuple()
    body = "".join(map(str, digits))
    return ("-" if sign else "") + body[0] + "." + (body[1:] or "0") + "E" + str(len(digits) + exponent - 1)


# ---------------------------------------------------------------------------------------------
# encoding (shredded values put back together; tests build values with it)


def _width(n: int) -> int:
    """Bytes of the smallest unsigned field (1..4) that holds ``n``."""
    return 1 if n < 1 << 8 else 2 if n < 1 << 16 else 3 if n < 1 << 24 else 4


def encode_object(entries: list[tuple[int, bytes]], names: list[str]) -> bytes:
    """An object of ``(key id, encoded value)`` entries (ids into ``names``, the metadata's keys);
    field ids are listed by key, as the spec requires."""
    entries = sorted(entries, key=lambda e: names[e[0]].encode())
    data = b"".join(v for _, v in entries)
    offsets, at = [], 0
    for _, v in entries:
        offsets.append(at)
        at += len(v)
    offsets.append(at)
    id_size, offset_size, large = _width(max((i for i, _ in entries), default=0)), _width(at), len(entries) > 255
    head = OBJECT | (offset_size - 1) << 2 | (id_size - 1) << 4 | int(large) << 6
    out = bytearray([head]) + len(entries).to_bytes(4 if large else 1, "little")
    for i, _ in entries:
        out += i.to_bytes(id_size, "little")
    for o in offsets:
        out += o.to_bytes(offset_size, "little")
    return bytes(out + data)


def encode_array(items: list[bytes]) -> bytes:
    """An array of encoded values."""
    data = b"".join(items)
    offsets, at = [], 0
    for v in items:
        offsets.append(at)
        at += len(v)
    offsets.append(at)
    offset_size, large = _width(at), len(items) > 255
    out = bytearray([ARRAY | (offset_size - 1) << 2 | int(large) << 4])
    out += len(items).to_bytes(4 if large else 1, "little")
    for o in offsets:
        out += o.to_bytes(offset_size, "little")
    return bytes(out + data)


def _prim(type_id: int, payload: bytes = b"") -> bytes:
    return bytes([type_id << 2]) + payload


def encode_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) < 64:
        return bytes([SHORT_STRING | len(raw) << 2]) + raw
    return _prim(STRING, len(raw).to_bytes(4, "little") + raw)


def encode_scalar(v, kind: str) -> bytes:
    """A scalar by its kind: null, boolean, int8/16/32/64, float, double, decimal4/8/16, date (days),
    timestamp/timestamp_ntz (micros), timestamp_nanos/timestamp_ntz_nanos (nanos), string, binary, uuid."""
    if v is None or kind == "null":
        return _prim(NULL)
    if kind == "boolean":
        return _prim(TRUE if v else FALSE)
    ints = {"int8": (INT8, 1), "int16": (INT16, 2), "int32": (INT32, 4), "int64": (INT64, 8), "date": (DATE, 4)}
    ints |= {"timestamp": (TIMESTAMP, 8), "timestamp_ntz": (TIMESTAMP_NTZ, 8), "time": (TIME, 8)}
    ints |= {"timestamp_nanos": (TIMESTAMP_NANOS, 8), "timestamp_ntz_nanos": (TIMESTAMP_NTZ_NANOS, 8)}
    if kind in ints:
        type_id, width = ints[kind]
        return _prim(type_id, int(v).to_bytes(width, "little", signed=True))
    if kind == "double":
        return _prim(DOUBLE, struct.pack("<d", v))
    if kind == "float":
        return _prim(FLOAT, struct.pack("<f", v))
    if kind in ("decimal4", "decimal8", "decimal16"):
        type_id, width = {"decimal4": (DECIMAL4, 4), "decimal8": (DECIMAL8, 8), "decimal16": (DECIMAL16, 16)}[kind]
        sign, digits, exponent = v.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        scale = max(0, -exponent)
        unscaled *= 10 ** max(0, exponent)
        return _prim(type_id, bytes([scale]) + unscaled.to_bytes(width, "little", signed=True))
    if kind == "string":
        return encode_string(v)
    if kind == "binary":
        return _prim(BINARY, len(v).to_bytes(4, "little") + bytes(v))
    if kind == "uuid":
        return _prim(UUID, v.bytes if isinstance(v, uuid.UUID) else bytes(v))
    raise TypeError(kind)


def encode_metadata(names: list[str]) -> bytes:
    """Metadata holding ``names`` in this order (``sorted_strings`` set when they are sorted and unique)."""
    raw = [k.encode("utf-8") for k in names]
    total = sum(map(len, raw))
    offset_size = _width(max(total, len(raw)))
    is_sorted = raw == sorted(set(raw))
    out = bytearray([1 | int(is_sorted) << 4 | (offset_size - 1) << 6]) + len(raw).to_bytes(offset_size, "little")
    at = 0
    for k in raw:
        out += at.to_bytes(offset_size, "little")
        at += len(k)
    out += at.to_bytes(offset_size, "little")
    return bytes(out + b"".join(raw))


def encode(obj) -> tuple[bytes, bytes]:
    """``(value, metadata)`` of a Python value (the types :func:`decode` returns; ints as the smallest
    integer type, Decimals as the smallest decimal that holds them)."""
    names: list[str] = []
    ids: dict[str, int] = {}

    def key(k: str) -> int:
        if k not in ids:
            ids[k] = len(names)
            names.append(k)
        return ids[k]

    def one(v) -> bytes:
        if isinstance(v, dict):
            return encode_object([(key(str(k)), one(x)) for k, x in v.items()], names)
        if isinstance(v, (list, tuple)):
            return encode_array([one(x) for x in v])
        if isinstance(v, dt.datetime):
            aware = v.tzinfo is not None
            since = (v.astimezone(dt.UTC).replace(tzinfo=None) if aware else v) - _EPOCH
            micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
            return encode_scalar(micros, "timestamp" if aware else "timestamp_ntz")
        if isinstance(v, dt.date):
            return encode_scalar((v - _EPOCH_DATE).days, "date")
        return encode_scalar(v, _kind_of(v))

    value = one(obj)
    return value, encode_metadata(names)


def _kind_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        for kind, bits in (("int8", 8), ("int16", 16), ("int32", 32), ("int64", 64)):
            if -(1 << (bits - 1)) <= v < 1 << (bits - 1):
                return kind
        raise _malformed(f"the integer {v} does not fit 64 bits")
    if isinstance(v, float):
        return "double"
    if isinstance(v, decimal.Decimal):
        _, ds, exponent = v.as_tuple()
        digits = max(len(ds) + max(0, exponent), -exponent)
        return "decimal4" if digits <= 9 else "decimal8" if digits <= 18 else "decimal16"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (bytes, bytearray)):
        return "binary"
    if isinstance(v, uuid.UUID):
        return "uuid"
    raise TypeError(f"cannot encode {type(v).__name__} as a variant")


# ---------------------------------------------------------------------------------------------
# shredded variants (variantShredding)


def unshred(arr: pa.StructArray) -> pa.StructArray:
    """A shredded variant column (``metadata``, ``value``, ``typed_value``) as its unshredded Arrow form
    (:func:`arrow_type`): each row's value put back together from the typed columns and the residual
    ``value`` (Parquet's VariantShredding spec). A row whose ``value`` and ``typed_value`` are both
    null is the variant null."""
    parts = _fields(arr)
    metadata = parts["metadata"].to_pylist()
    valid = arr.is_valid()
    names = [keys(m) if m else [] for m in metadata]
    rebuilt = _rebuild(parts.get("value"), parts.get("typed_value"), names)
    values = [_prim(NULL) if v is None else v for v in rebuilt]
    return pa.StructArray.from_arrays(
        [pa.array(values, pa.binary()), pa.array([m or b"" for m in metadata], pa.binary())],
        fields=list(arrow_type()),
        mask=pc.invert(valid) if arr.null_count else None,
    )


def _rebuild(value: pa.Array | None, typed: pa.Array | None, names: list[list[str]]) -> list[bytes | None]:
    """Each row's encoded value from a (``value``, ``typed_value``) pair of columns; None where the
    value is missing (both null: an object field that is not there)."""
    n = len(names)
    residual = value.to_pylist() if value is not None else [None] * n
    if typed is None:
        return residual
    t = typed.type
    valid = typed.is_valid().to_pylist()
    if pa.types.is_struct(t):
        fields = {}
        for name, child in _fields(typed).items():
            pair = _fields(child)
            fields[name] = _rebuild(pair.get("value"), pair.get("typed_value"), names)
        out = []
        for r in range(n):
            if not valid[r]:
                out.append(residual[r])
                continue
            ids = {k: i for i, k in enumerate(names[r])}
            entries = _object_entries(residual[r]) if residual[r] is not None else []
            for name, col in fields.items():
                if col[r] is not None:
                    if name not in ids:
                        raise _malformed(f"the shredded field '{name}' is not in the row's metadata")
                    entries.append((ids[name], col[r]))
            out.append(encode_object(entries, names[r]))
        return out
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = typed.offsets.to_pylist()
        flat = typed.values
        element_names = [names[r] for r in range(n) for _ in range(offsets[r + 1] - offsets[r])]
        pair = _fields(flat.slice(offsets[0], offsets[-1] - offsets[0]))
        items = _rebuild(pair.get("value"), pair.get("typed_value"), element_names)
        base = offsets[0]
        return [
            encode_array(
                [x if x is not None else _prim(NULL) for x in items[offsets[r] - base : offsets[r + 1] - base]]
            )
            if valid[r]
            else residual[r]
            for r in range(n)
        ]
    kind = _arrow_kind(t)
    raw = typed.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(t) or pa.types.is_time(t) else None
    if pa.types.is_date32(t):
        raw = typed.cast(pa.int32()).to_pylist()
    py = raw if raw is not None else typed.to_pylist()
    return [encode_scalar(py[r], kind) if valid[r] else residual[r] for r in range(n)]


def _fields(arr: pa.StructArray) -> dict[str, pa.Array]:
    """A struct array's children by name, null where the struct is (``flatten`` applies its validity)."""
    return {arr.type.field(i).name: child for i, child in enumerate(arr.flatten())}


def _object_entries(value: bytes) -> list[tuple[int, bytes]]:
    """The ``(key id, encoded value)`` fields of an encoded object (a shredded object's residual)."""
    basic, head = _header(value, 0)
    if basic != OBJECT:
        raise _malformed("a shredded object's residual value is not an object")
    ids, children, _ = _children(value, 0, basic, head)
    return [(i, bytes(value[c : c + size(value, c)])) for i, c in zip(ids, children)]


def _arrow_kind(t: pa.DataType) -> str:
    """The variant scalar kind a shredded ``typed_value`` column of Arrow type ``t`` holds."""
    simple = {pa.bool_(): "boolean", pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32"}
    simple |= {pa.int64(): "int64", pa.float32(): "float", pa.float64(): "double", pa.date32(): "date"}
    simple |= {pa.string(): "string", pa.large_string(): "string", pa.binary(): "binary"}
    simple |= {pa.large_binary(): "binary", pa.binary(16): "uuid"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return "decimal4" if t.precision <= 9 else "decimal8" if t.precision <= 18 else "decimal16"
    if pa.types.is_timestamp(t):
        nanos = "_nanos" if t.unit == "ns" else ""
        if t.unit not in ("us", "ns"):
            raise _malformed(f"a shredded timestamp has unit {t.unit}; the spec allows us and ns")
        return ("timestamp" if t.tz is not None else "timestamp_ntz") + nanos
    if pa.types.is_time64(t):
        return "time"
    raise _malformed(f"a shredded typed_value has Arrow type {t}, which the Variant spec does not shred")


# ---------------------------------------------------------------------------------------------
# paths

_KEY = re.compile(r"\.([^.\[]+)")
_QUOTED = re.compile(r"\[\s*(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")\s*\]")
_INDEX = re.compile(r"\[\s*(\d+)\s*\]")


def parse_path(text: str) -> tuple:
    """A ``variant_get`` path (``$.a.b[0]['c d']``) as its steps (keys as str, indexes as int).

    :raises InvalidArgumentError: the text is not such a path
    """
    if not isinstance(text, str) or not text.startswith("$"):
        raise _bad_path(text)
    steps: list = []
    pos = 1
    while pos < len(text):
        for pattern in (_KEY, _QUOTED, _INDEX):
            m = pattern.match(text, pos)
            if m:
                break
        else:
            raise _bad_path(text)
        if pattern is _INDEX:
            steps.append(int(m.group(1)))
        elif pattern is _KEY:
            steps.append(m.group(1))
        else:
            raw = m.group(1) if m.group(1) is not None else m.group(2)
            steps.append(re.sub(r"\\(.)", r"\1", raw))
        pos = m.end()
    return tuple(steps)


def path_text(steps: tuple) -> str:
    """The ``variant_get`` path of ``steps`` (:func:`parse_path`'s inverse)."""
    out = "$"
    for s in steps:
        if isinstance(s, int):
            out += f"[{s}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s):
            out += "." + s
        else:
            out += "['" + s.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return out


def _bad_path(text) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Invalid variant path {text!r}",
        "a path starts with $ and goes on with .key, ['key'] or [index] steps",
        "write a path such as '$.order.items[0].sku'",
    )


# ---------------------------------------------------------------------------------------------
# Arrow


def arrow_type() -> pa.StructType:
    """The Arrow form of a variant column: Spark's (``value`` first, ``metadata`` tagged)."""
    return pa.struct(
        [
            pa.field("value", pa.binary(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
        ]
    )


def is_variant_arrow(t: pa.DataType) -> bool:
    """Whether ``t`` is the Arrow form of a variant: a struct of binary ``value`` and ``metadata``
    (in either order; a shredded one also has ``typed_value``)."""
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    return (
        set(names) <= {"value", "metadata", "typed_value"}
        and pa.types.is_binary(names.get("metadata", pa.null()))
        and (pa.types.is_binary(names.get("value", pa.binary())))
    )


def as_variant(arr: pa.Array, where: str) -> pa.Array:
    """An Arrow column bound for a variant column, in :func:`arrow_type`'s form: a struct of binary
    ``value`` and ``metadata`` in either order (delta-rs and Parquet put ``metadata`` first), a shredded
    one put back together (:func:`unshred`). Values are not re-encoded.

    :raises SchemaMismatchError: the column is not a variant's struct
    """
    from .errors import SchemaMismatchError

    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([as_variant(c, where) for c in arr.chunks], arrow_type())
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), arrow_type())
    if not is_variant_arrow(arr.type) or arr.type.get_field_index("metadata") < 0:
        raise SchemaMismatchError(
            f"Column '{where}' holds {arr.type} values, which are no variant",
            "a variant is a struct of two binaries, value and metadata, in the Parquet Variant encoding",
            "encode the values as variants first (Spark's parse_json, or engine.variant.encode in Python), "
            "or write them to a column of their own type",
        )
    if arr.type.get_field_index("typed_value") >= 0:
        return unshred(arr)
    parts = _fields(arr)
    if "value" not in parts:
        raise SchemaMismatchError(
            f"Column '{where}' is a variant without its value binary",
            f"it has the fields {arr.type}",
            "write the variant's value and metadata binaries",
        )
    return pa.StructArray.from_arrays(
        [parts["value"], parts["metadata"]],
        fields=list(arrow_type()),
        mask=pc.invert(arr.is_valid()) if arr.null_count else None,
    )
