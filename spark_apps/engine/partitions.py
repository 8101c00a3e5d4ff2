"""Partition values: typed value <-> log string, Hive directory escaping, add.path URI encoding.

Rules (PROTOCOL.md appendix "Partition Value Serialization", Spark's ExternalCatalogUtils):

* ``partitionValues`` holds strings. An empty string or JSON null means null (a key may also be
  absent from the map: readers treat that as null too).
* Serialisation (:func:`serialize_partition_value`): string as-is (the empty string becomes null, as
  in Spark); integers and decimals as plain decimal text (``decimal(10,2)`` 1.5 -> ``"1.50"``);
  float/double like Java's ``toString`` (``"0.0"``, ``"1.0E20"``, ``"NaN"``, ``"Infinity"``);
  boolean ``"true"``/``"false"``; date ``YYYY-MM-DD``; timestamp ``YYYY-MM-DDTHH:MM:SS.ffffffZ``
  (ISO-8601 in UTC; see below); timestamp_ntz ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (trailing fraction
  zeros dropped as Spark's cast to string does); binary: the raw bytes decoded as UTF-8 (what Spark
  writes; bytes that are not UTF-8 are refused).
* Timestamp choice: the spec allows ``YYYY-MM-DD HH:MM:SS[.ffffff]`` interpreted in the *writer's
  local time zone* (ambiguous to every reader) or ISO-8601 with ``Z``. delta-spark writes the ISO
  ``Z`` form (``spark.databricks.delta.write.utcTimestampPartitionValues``, on by default) and reads
  it correctly whatever the session time zone; delta-rs (deltalake 1.6.6) writes the space form in
  UTC but reads both forms to the same instant (checked in tests/unit/test_partitions.py). So we
  write the ``Z`` form.
* Parsing (:func:`partition_column_array`, vectorised with pyarrow compute): null and ``""`` ->
  null; timestamps accept both forms (``T`` or space, optional fraction, ``Z``/``+hh:mm`` offset or
  none); **a zone-less timestamp is read as UTC** (what delta-rs and delta-kernel-rs do; a table
  written by a JVM in another zone, e.g. golden ``data-reader-partition-values`` written in
  America/Los_Angeles, therefore reads shifted: the log does not record the writer's zone).
* Directory names (:func:`hive_escape`): Spark's ``escapePathName`` set (ASCII 0x01-0x1F, ``"``
  ``#`` ``%`` ``'`` ``*`` ``/`` ``:`` ``=`` ``?`` ``\\`` 0x7F ``{`` ``[`` ``]`` ``^``) as ``%XX``
  (upper-case hex), null and ``""`` -> ``__HIVE_DEFAULT_PARTITION__``. Directory names are a
  convention only: readers take partition values from the log, never from paths.
* ``add.path`` is a URI reference (:func:`encode_add_path`): the directory name is %-encoded once
  more like ``java.net.URI`` (Hadoop ``Path.toUri``) does: ``%`` -> ``%25``, space -> ``%20``, other
  characters outside RFC 2396's allowed set -> UTF-8 %XX, non-ASCII letters kept. So value
  ``/%20%f`` -> dir ``letter=%2F%2520%25f`` -> add.path ``letter=%252F%252520%2525f/...``.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .schema import DataType

__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "serialize_partition_value",
    "parse_partition_value",
    "partition_column_array",
    "hive_escape",
    "hive_unescape",
    "partition_path",
    "encode_add_path",
    "decode_add_path",
]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)


def require_data_column(column_names: Sequence[str], partition_columns: Sequence[str] | None, what: str) -> None:
    """Refuse a schema whose every top-level column is a partition column: the data files would hold
    no column, so their row counts (and every appended row) would be lost. Spark refuses it too
    ("Cannot use all columns for partition columns"); checked at CREATE, at every metadata change a
    transaction commits and by every writer.

    :param what: what is being done, for the message (e.g. "DROP COLUMN id")
    """
    parts = {str(c).lower() for c in partition_columns or ()}
    if parts and all(str(n).lower() in parts for n in column_names):
        raise InvalidArgumentError(
            f"{what} is refused: every column of the table would be a partition column",
            f"columns {list(column_names)}, partition columns {list(partition_columns or ())}; a Delta table "
            "needs at least one data column stored in its files (else appended rows are lost)",
            "keep at least one column that is not a partition column (add one before dropping the last, "
            "or leave one column unpartitioned)",
        )


def _as_type(delta_type: DataType | str) -> DataType:
    if isinstance(delta_type, str):
        # the schema package loads on first use: a log replay (paths -> here) does not need it
        from .schema import type_from_json

        return type_from_json(delta_type)
    return delta_type


def _type_name(t: DataType) -> str:
    from .schema import DecimalType

    return "decimal" if isinstance(t, DecimalType) else getattr(t, "name", "?")


# --------------------------------------------------------------------------------------------
# value -> string
# --------------------------------------------------------------------------------------------


def _java_double_str(x: float, *, single: bool = False) -> str:
    """Java ``Double.toString``/``Float.toString`` style: shortest round-trip digits, ``.0`` for
    integral values, ``E`` exponent for |x| >= 1e7 or < 1e-3, ``NaN``/``Infinity``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    # shortest round-trip digits of the value in its own precision (Java does the same)
    text = str(np.float32(x)) if single else repr(float(x))
    mant_exp = float(text)
    ax = abs(mant_exp)
    if 1e-3 <= ax < 1e7:
        d = _decimal.Decimal(text)
        s = format(d, "f")
        if "." not in s:
            s += ".0"
        s = s.rstrip("0")
        if s.endswith("."):
            s += "0"
        return s
    d = _decimal.Decimal(text).normalize()
    sign, digs, exp = d.as_tuple()
    digs_s = "".join(map(str, digs))
    e10 = exp + len(digs_s) - 1
    mant = digs_s[0] + "." + (digs_s[1:] or "0")
    return ("-" if sign else "") + mant + "E" + str(e10)


def _to_epoch_micros(value: Any) -> int:
    """Epoch microseconds of a datetime (naive = UTC wall clock), date, numpy datetime64 or int."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, np.datetime64):
        return int(value.astype("datetime64[us]").astype(np.int64))
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            d = value - _EPOCH_NAIVE
        else:
            d = value - _EPOCH
        return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(value, _dt.date):
        return (value - _dt.date(1970, 1, 1)).days * 86_400_000_000
    raise TypeError(f"not a timestamp: {value!r}")


def _fmt_micros(micros: int, *, sep: str, frac: str) -> str:
    """Render epoch microseconds as ``YYYY-MM-DD<sep>HH:MM:SS`` + fraction.

    ``frac``: "full" (always 6 digits), "trim" (Spark cast style: trailing zeros dropped, none if 0).
    """
    secs, us = divmod(micros, 1_000_000)
    days, sod = divmod(secs, 86_400)
    d = _dt.date(1970, 1, 1) + _dt.timedelta(days=days)
    hh, rem = divmod(sod, 3600)
    mm, ss = divmod(rem, 60)
    out = f"{d.year:04d}-{d.month:02d}-{d.day:02d}{sep}{hh:02d}:{mm:02d}:{ss:02d}"
    if frac == "full":
        out += f".{us:06d}"
    elif us:
        out += ("." + f"{us:06d}").rstrip("0")
    return out


def serialize_partition_value(value: Any, delta_type: DataType | str) -> str | None:
    """The ``partitionValues`` string for one typed value (None for null). See module rules.

    ``value`` may be a Python value, a numpy scalar or a ``pyarrow.Scalar``.
    """
    if isinstance(value, pa.Scalar):
        if isinstance(value, pa.TimestampScalar) and value.is_valid:
            unit = value.type.unit
            raw = value.cast(pa.int64()).as_py()
            value = raw * {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}[unit] if unit != "ns" else raw // 1000
        else:
            value = value.as_py()
    if value is None:
        return None
    t = _as_type(delta_type)
    name = _type_name(t)
    if name == "string":
        s = str(value)
        return s if s != "" else None
    if name in ("long", "integer", "short", "byte"):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if isinstance(value, (float, _decimal.Decimal)) and value == int(value):
                value = int(value)
            else:
                raise InvalidArgumentError(
                    f"Partition value {value!r} is not an integer",
                    None,
                    f"pass an integer for the {name} partition column",
                )
        return str(int(value))
    if name in ("double", "float"):
        return _java_double_str(float(value), single=(name == "float"))
    if name == "boolean":
        return "true" if bool(value) else "false"
    if name == "date":
        if isinstance(value, _dt.datetime):
            value = value.date()
        if isinstance(value, _dt.date):
            return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        if isinstance(value, (int, np.integer)):
            d = _dt.date(1970, 1, 1) + _dt.timedelta(days=int(value))
            return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
        raise InvalidArgumentError(f"Partition value {value!r} is not a date", None, "pass a datetime.date")
    if name == "timestamp":
        return _fmt_micros(_to_epoch_micros(value), sep="T", frac="full") + "Z"
    if name == "timestamp_ntz":
        if isinstance(value, _dt.datetime) and value.tzinfo is not None:
            value = value.replace(tzinfo=None)
        return _fmt_micros(_to_epoch_micros(value), sep=" ", frac="trim")
    if name == "decimal":
        d = value if isinstance(value, _decimal.Decimal) else _decimal.Decimal(str(value))
        from .schema import DecimalType

        if isinstance(t, DecimalType):
            try:
                d = d.quantize(_decimal.Decimal(1).scaleb(-t.scale))
            except _decimal.InvalidOperation:
                pass
        return format(d, "f")
    if name == "binary":
        b = bytes(value)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                "A binary partition value is not valid UTF-8",
                "Delta stores binary partition values as UTF-8 text, so these bytes cannot round-trip",
                "partition by a string (e.g. hex-encoded) column instead",
            ) from None
    raise InvalidArgumentError(
        f"Cannot partition by a column of type {t.simple_string() if hasattr(t, 'simple_string') else t}",
        "Delta partition columns must be of a primitive type",
        "partition by a string, number, boolean, date, timestamp or decimal column",
    )


# --------------------------------------------------------------------------------------------
# string -> typed (vectorised)
# --------------------------------------------------------------------------------------------

_DATE_ONLY = r"^\s*-?\d{4,}-\d{1,2}-\d{1,2}\s*$"
_HAS_ZONE = r"(Z|z|[+-]\d{2}(:?\d{2})?|UTC|GMT)\s*$"


def _normalize_timestamp_strings(arr: pa.Array, *, with_zone: bool) -> pa.Array:
    arr = pc.utf8_trim_whitespace(arr)
    date_only = pc.match_substring_regex(arr, _DATE_ONLY)
    arr = pc.if_else(date_only, pc.binary_join_element_wise(arr, pa.scalar(" 00:00:00"), ""), arr)
    # "UTC"/"GMT" suffixes (seen from some JVM writers) -> Z
    arr = pc.replace_substring_regex(arr, r"\s*(UTC|GMT)$", "Z")
    if with_zone:
        has_zone = pc.match_substring_regex(arr, _HAS_ZONE)
        arr = pc.if_else(has_zone, arr, pc.binary_join_element_wise(arr, pa.scalar("Z"), ""))
    else:
        # timestamp_ntz: a zone suffix has no meaning; drop a trailing Z
        arr = pc.replace_substring_regex(arr, r"[Zz]$", "")
    return arr


def partition_column_array(
    strings: pa.Array | pa.ChunkedArray | Sequence[str | None] | str | None,
    delta_type: DataType | str,
    length: int | None = None,
) -> pa.Array:
    """Typed Arrow array from partition value strings (vectorised).

    :param strings: an Arrow string array (or list) of serialised values; or a single string/None
        together with ``length``, which yields that value repeated ``length`` times (parsed once).
    :param delta_type: the partition column's Delta type.
    :param length: output length when ``strings`` is a single value.
    :raises InvalidArgumentError: a value cannot be parsed as the column type (names the value).
    """
    t = _as_type(delta_type)
    target = t.to_arrow()
    if strings is None or isinstance(strings, str):
        n = 1 if length is None else int(length)
        one = partition_column_array(pa.array([strings], pa.string()), t)
        if n == 1:
            return one
        return pa.repeat(one[0], n) if one[0].is_valid else pa.nulls(n, target)
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks() if strings.num_chunks != 1 else strings.chunk(0)
    if not isinstance(strings, pa.Array):
        strings = pa.array(list(strings), pa.string())
    if not pa.types.is_string(strings.type):
        strings = strings.cast(pa.string())
    name = _type_name(t)
    if name == "void":
        return pa.nulls(len(strings), pa.null())
    # "" -> null
    arr = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)
    try:
        if name == "string":
            return arr
        if name == "binary":
            return arr.cast(pa.binary())
        if name == "boolean":
            low = pc.utf8_lower(pc.utf8_trim_whitespace(arr))
            ok = pc.or_kleene(pc.equal(low, "true"), pc.equal(low, "false"))
            if pc.any(pc.invert(pc.fill_null(ok, True))).as_py():
                raise ValueError("not a boolean")
            return pc.equal(low, "true")
        if name == "timestamp":
            return _normalize_timestamp_strings(arr, with_zone=True).cast(target)
        if name == "timestamp_ntz":
            return _normalize_timestamp_strings(arr, with_zone=False).cast(target)
        if name == "date":
            # like Spark's cast to date, a trailing time part ("2021-09-08 00:00:00") is ignored
            d = pc.replace_substring_regex(pc.utf8_trim_whitespace(arr), r"^(-?\d{4,}-\d{1,2}-\d{1,2})[T ].*$", r"\1")
            return d.cast(target)
        if name == "decimal":
            try:
                return arr.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                # e.g. more fractional digits than the scale: round half-up like Spark's cast
                q = _decimal.Decimal(1).scaleb(-t.scale)
                vals = [
                    None if v is None else _decimal.Decimal(v.strip()).quantize(q, rounding=_decimal.ROUND_HALF_UP)
                    for v in arr.to_pylist()
                ]
                return pa.array(vals, target)
        if name in ("double", "float"):
            return pc.utf8_trim_whitespace(arr).cast(pa.float64()).cast(target)
        # integers: parse as int64 then narrow with overflow check
        return pc.utf8_trim_whitespace(arr).cast(pa.int64()).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, _decimal.InvalidOperation) as e:
        bad = _first_unparsable(arr, t)
        raise InvalidArgumentError(
            f"Partition value {bad!r} cannot be read as {name}",
            str(e).split("\n")[0],
            "repair the table's partition values (the log holds a value of the wrong type)",
        ) from None


def _first_unparsable(arr: pa.Array, t: DataType):
    """The first value of ``arr`` that does not parse as ``t`` (for error messages)."""
    vals = [v for v in arr.to_pylist() if v is not None]
    if len(vals) == 1:
        return vals[0]
    for v in vals:
        try:
            partition_column_array(pa.array([v], pa.string()), t)
        except InvalidArgumentError:
            return v
    return None


def parse_partition_value(value: str | None, delta_type: DataType | str) -> Any:
    """One partition string -> Python value (None for null/empty); uses the vectorised parser."""
    return partition_column_array(pa.array([value], pa.string()), delta_type)[0].as_py()


# --------------------------------------------------------------------------------------------
# Hive directory names and add.path
# --------------------------------------------------------------------------------------------

_ESCAPE = frozenset(
    [chr(c) for c in range(0x00, 0x20)]  # NUL included: escaped as %00, as Hive does
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)


def hive_escape(value: str | None) -> str:
    """Spark's ``ExternalCatalogUtils.escapePathName`` (non-Windows set); null/"" -> default name."""
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    if not any(c in _ESCAPE for c in value):
        return value
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


_UNESCAPE_RE = re.compile(r"%([0-9A-Fa-f]{2})")


def hive_unescape(name: str) -> str | None:
    """Inverse of :func:`hive_escape` (Spark's ``unescapePathName``); default name -> None."""
    if name == HIVE_DEFAULT_PARTITION:
        return None
    return _UNESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), name)


def partition_path(partition_columns: Sequence[str], values: Mapping[str, str | None]) -> str:
    """Hive-style relative directory for serialised partition values: ``"a=1/b=x%2Fy"``.

    Column names are escaped too (as Spark does). A column missing from ``values`` is null.
    """
    parts = []
    for c in partition_columns:
        v = values.get(c)
        part = f"{hive_escape(c)}={hive_escape(v)}"
        if len(part.encode("utf-8")) > MAX_DIR_NAME_BYTES:
            raise InvalidArgumentError(
                f"Partition value of column '{c}' is too long for a directory name",
                f"'{part[:60]}...' is {len(part.encode('utf-8'))} bytes after escaping; file systems and object "
                f"stores allow {MAX_DIR_NAME_BYTES} per path segment",
                "shorten the values of this partition column (e.g. partition by a hash or a prefix of it)",
            )
        parts.append(part)
    return "/".join(parts)


MAX_DIR_NAME_BYTES = 255


# java.net.URI path characters allowed unquoted: unreserved + punct + "/" + "@"
_URI_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-!.~'()*,;:$&+=/@")


def _uri_char(c: str) -> str:
    if c in _URI_SAFE:
        return c
    if ord(c) >= 0x80 and not unicodedata.category(c).startswith(("C", "Z")):
        return c  # java.net.URI keeps "other" (non-ASCII, non-control, non-space) chars
    return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def encode_add_path(relative_path: str) -> str:
    """URI-encode a table-relative file path for ``add.path`` (as Hadoop ``Path.toUri`` does)."""
    if all(c in _URI_SAFE for c in relative_path):
        return relative_path
    return "".join(_uri_char(c) for c in relative_path)


def decode_add_path(path: str) -> str:
    """Inverse of :func:`encode_add_path`: %-decode (UTF-8) a path taken from the log."""
    if "%" not in path:
        return path
    return unquote(path, encoding="utf-8", errors="strict")


_NULL_KEY = "\x00null"  # stands for a NULL partition value inside a combined key
_KEY_SEP = "\x00/"


def partition_key(values: Mapping[str, str | None], partition_columns: Sequence[str]) -> str:
    """One string naming a file's partition (its serialised partition values, NULL-safe)."""
    return _KEY_SEP.join(_NULL_KEY if values.get(c) is None else values[c] for c in partition_columns)


def partition_keys(files: pa.Table, partition_columns: Sequence[str]) -> pa.Array:
    """:func:`partition_key` of every row of a files table (its ``partition_values`` map), vectorised."""
    pv = files.column("partition_values")
    parts = [pc.fill_null(pc.map_lookup(pv, pa.scalar(c), "first"), _NULL_KEY) for c in partition_columns]
    return pc.binary_join_element_wise(*parts, _KEY_SEP)
