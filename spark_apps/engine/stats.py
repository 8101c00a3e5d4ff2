"""Per-file statistics (``add.stats``) gathered incrementally from the Arrow batches being written.

Output (PROTOCOL.md appendix "Per-file Statistics"; shapes follow delta-spark's
``StatisticsCollection``)::

    {"numRecords": N, "minValues": {...}, "maxValues": {...}, "nullCount": {...}[, "tightBounds": true]}

with ``minValues``/``maxValues``/``nullCount`` nested like the (physical) schema.

Rules:

* Which columns: partition columns never; then ``delta.dataSkippingStatsColumns`` (comma-separated,
  nested with dots, backquotes allowed, case-insensitive; a named struct means all its leaves) if
  set, else the first ``delta.dataSkippingNumIndexedCols`` leaf columns in schema order (default
  32; -1 = all; 0 = numRecords only). Structs are descended; arrays and maps count as one leaf.
* ``nullCount`` for every selected leaf, whatever its type (binary, boolean, arrays, maps,
  variant too: delta-spark counts null values of every leaf). A null struct makes its fields null.
  A selected column absent from the data counts as all null.
* ``minValues``/``maxValues`` only for byte/short/integer/long/float/double/decimal/date/
  timestamp/timestamp_ntz/string (delta-spark's ``SkippingEligibleDataType``); none for boolean,
  binary, arrays, maps, variant. A column whose values are all null has no min/max key (as
  Spark's ``to_json`` drops nulls); a struct left empty is dropped. A date/timestamp bound outside
  years 0001..9999 is omitted (ISO text cannot express it).
* Float/double: NaN is ignored for min/max; an infinite bound is omitted (JSON has no infinity),
  which only makes skipping more conservative. Values are the shortest round-trip text of the
  value in its own precision (``0.1`` for float 0.1f, like Java's ``Float.toString``).
* Decimals are JSON numbers with the column's scale (``1.50``), never floats.
* Dates ``"YYYY-MM-DD"``. Timestamps ``"YYYY-MM-DDTHH:MM:SS.mmmZ"`` in UTC, timestamp_ntz the same
  without ``Z`` (Spark's JSON format). Stats have millisecond precision: **min is truncated down to
  the millisecond and max is rounded UP to the next millisecond when it has sub-millisecond
  digits**, so ``min <= every value <= max`` holds exactly and no reader can wrongly skip a file.
  (delta-spark truncates the max down and compensates at read time by adding 1 ms; our bound is
  never below delta-spark's and stays a valid upper bound for every reader.)
* Strings are truncated to ``string_prefix_length`` (32) characters (code points): the min keeps
  the prefix (a prefix is <= the string); a truncated max is delta-spark's
  ``truncateMaxStringAgg``: prefix, then the following characters as long as they are >= U+FFFD,
  then U+FFFD as a tie-breaker - an upper bound of the true max in code-point (= UTF-8 byte) order.
* With column mapping (``column_mapping_mode`` "name"/"id") keys are the physical names.
* ``tightBounds`` is written only when asked (tables with deletion vectors), as ``true``.

Incremental: :meth:`StatsCollector.update` folds each batch into running min/max/null counts with
pyarrow compute kernels (one pass, no Python object per row), so the writer computes stats while it
writes and never reads the file back.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .config import DEFAULT_NUM_INDEXED_COLS, TableProperties, parse_stats_columns
from .errors import InvalidArgumentError
from .schema import DataType, DecimalType, StructType

#: optional last column of a snapshot's files, after the ``FILE_SCHEMA`` ones: the typed stats of a
#: parquet checkpoint's ``add.stats_parsed`` (its own struct type, physical names; null for files
#: added by later commits). The ``stats`` JSON stays the reference (checkpoints, conflicts).
STATS_PARSED = "stats_parsed"

__all__ = [
    "StatsCollector",
    "stats_config_from_properties",
    "collect_stats",
    "parse_stats_columns",
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_STRING_PREFIX_LENGTH",
    "MINMAX_TYPES",
]

DEFAULT_STRING_PREFIX_LENGTH = 32
MINMAX_TYPES = frozenset(
    ["byte", "short", "integer", "long", "float", "double", "decimal", "date", "timestamp", "timestamp_ntz", "string"]
)
_TIE_BREAKER = "\ufffd"


def type_name(t: DataType) -> str:
    return "decimal" if isinstance(t, DecimalType) else getattr(t, "name", "?")


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


def stats_config_from_properties(configuration: Mapping[str, str] | TableProperties | None) -> dict:
    """Keyword arguments for :class:`StatsCollector` from the table properties.

    Honours ``delta.dataSkippingNumIndexedCols`` (int, -1 = all) and
    ``delta.dataSkippingStatsColumns`` (takes precedence when set); passes
    ``delta.columnMapping.mode`` on (stats keyed by physical names under column mapping).
    """
    props = TableProperties.of(configuration)
    stats_columns = props.data_skipping_stats_columns
    return {
        "num_indexed_cols": DEFAULT_NUM_INDEXED_COLS
        if stats_columns is not None
        else props.data_skipping_num_indexed_cols,
        "stats_columns": stats_columns,
        "column_mapping_mode": props.column_mapping_mode,
    }


# --------------------------------------------------------------------------------------------
# column selection
# --------------------------------------------------------------------------------------------


def _truncate(st: StructType, budget: int) -> tuple[StructType, int]:
    """delta-spark ``truncateSchema``: keep fields while fewer than ``budget`` leaves were taken."""
    used = 0
    out = []
    for f in st.fields:
        if used >= budget:
            break
        if isinstance(f.type, StructType):
            sub, cnt = _truncate(f.type, budget - used)
            used += cnt
            out.append(f.with_type(sub))
        else:
            used += 1
            out.append(f)
    return StructType(tuple(out)), used


def _filter(st: StructType, paths: list[tuple[str, ...]]) -> StructType:
    """delta-spark ``filterSchema``: keep the named columns (case-insensitive), whole structs when named."""
    groups: dict[str, list[tuple[str, ...]]] = {}
    for p in paths:
        groups.setdefault(p[0].lower(), []).append(p[1:])
    out = []
    for f in st.fields:
        rests = groups.get(f.name.lower())
        if rests is None:
            continue
        if any(len(r) == 0 for r in rests):
            out.append(f)
        elif isinstance(f.type, StructType):
            out.append(f.with_type(_filter(f.type, [r for r in rests if r])))
    return StructType(tuple(out))


@dataclass
class _Leaf:
    names: tuple[tuple[str, ...], ...]  # per level: candidate names to find in the data (first wins)
    keys: tuple[str, ...]  # JSON key path
    type: DataType
    minmax: bool
    null_count: int | None = 0  # None: unknown (a footer without it), then no count is written
    min: Any = None
    max: Any = None
    bounded: bool = True  # False: some values have no known bound (a footer without min/max)


# --------------------------------------------------------------------------------------------
# collector
# --------------------------------------------------------------------------------------------


class StatsCollector:
    """Incremental ``add.stats`` builder for one data file.

    :param schema: the table schema (partition columns are excluded via ``partition_columns``).
    :param num_indexed_cols: ``delta.dataSkippingNumIndexedCols`` (-1 all, 0 none).
    :param stats_columns: ``delta.dataSkippingStatsColumns`` (string or list of paths); wins over
        ``num_indexed_cols`` when not None.
    :param string_prefix_length: string truncation length (delta-spark default 32).
    :param partition_columns: columns not stored in data files, hence without stats.
    :param column_mapping_mode: "none", "name" or "id": with a mapping, JSON keys are physical names.
    :param tight_bounds: when not None, write ``"tightBounds": <value>`` (deletion-vector tables).
    """

    def __init__(
        self,
        schema: StructType,
        num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
        stats_columns: str | Sequence | None = None,
        string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH,
        *,
        partition_columns: Iterable[str] = (),
        column_mapping_mode: str | None = "none",
        tight_bounds: bool | None = None,
    ):
        if string_prefix_length < 1:
            raise InvalidArgumentError("string_prefix_length must be >= 1", None, "use the default of 32")
        self.schema = schema
        self.string_prefix_length = int(string_prefix_length)
        self.tight_bounds = tight_bounds
        self.mapping = (column_mapping_mode or "none").lower() not in ("none", "")
        data_schema = schema.without(list(partition_columns))
        if stats_columns is not None:
            paths = (
                parse_stats_columns(stats_columns)
                if not (
                    isinstance(stats_columns, (list, tuple)) and stats_columns and isinstance(stats_columns[0], tuple)
                )
                else [tuple(p) for p in stats_columns]
            )
            selected = _filter(data_schema, [tuple(x.lower() for x in p) for p in paths])
        elif num_indexed_cols is None or int(num_indexed_cols) < 0:
            selected = data_schema
        else:
            selected, _ = _truncate(data_schema, int(num_indexed_cols))
        self.stats_schema = selected
        self.num_records = 0
        self._leaves: list[_Leaf] = []
        self._build(selected, (), ())

    def _build(self, st: StructType, names: tuple, keys: tuple) -> None:
        for f in st.fields:
            cand = (f.physical_name, f.name) if self.mapping else (f.name,)
            key = f.physical_name if self.mapping else f.name
            if isinstance(f.type, StructType):
                self._build(f.type, names + (cand,), keys + (key,))
            else:
                self._leaves.append(_Leaf(names + (cand,), keys + (key,), f.type, type_name(f.type) in MINMAX_TYPES))

    @property
    def leaf_paths(self) -> list[tuple[str, ...]]:
        return [leaf.keys for leaf in self._leaves]

    # --- folding --------------------------------------------------------------------------
    def update(self, batch: pa.RecordBatch | pa.Table) -> StatsCollector:
        """Fold a batch (or table) into the running stats. Returns self."""
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self._update_batch(b)
            if batch.num_rows == 0:
                return self
            return self
        self._update_batch(batch)
        return self

    def _update_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        self.num_records += n
        top = _Lookup(batch.schema.names, lambda i: batch.column(i))
        cache: dict[tuple, Any] = {}
        for leaf in self._leaves:
            arr = self._resolve(top, leaf.names, cache)
            if arr is None:
                leaf.null_count += n
                continue
            leaf.null_count += arr.null_count
            if leaf.minmax and arr.null_count < len(arr):
                self._fold_minmax(leaf, arr)

    def update_from_parquet(self, metadata) -> StatsCollector:
        """Fold a written parquet file's footer (``pyarrow.parquet.FileMetaData``) into the stats:
        its row count and, per top-level leaf column, the row groups' null counts and min/max, so a
        file another writer wrote (Spark's own) gets its stats without a byte of data read again.
        A row group without a count or a bound for values it holds leaves the leaf without one
        (nothing wrong is ever written); float and double columns get no bounds, nested leaves
        neither bounds nor counts (a variant gets its count: its metadata binary's nulls). Returns self."""
        self.num_records += metadata.num_rows
        arrow = metadata.schema.to_arrow_schema()
        columns = {metadata.schema.column(j).path: j for j in range(metadata.num_columns)}
        for leaf in self._leaves:
            name = next((c for c in leaf.names[0] if c in columns), None) if len(leaf.names) == 1 else None
            variant_metadata = None
            if type_name(leaf.type) == "variant" and len(leaf.names) == 1:  # a group: its binaries are the leaves
                variant_metadata = next(
                    (columns[f"{c}.metadata"] for c in leaf.names[0] if f"{c}.metadata" in columns), None
                )
            if variant_metadata is not None:  # a variant's metadata binary is required in it: its nulls
                for g in range(metadata.num_row_groups):  # are the variant's (no bounds: none asked)
                    st = metadata.row_group(g).column(variant_metadata).statistics
                    nulls = st.null_count if st is not None and st.has_null_count else None
                    leaf.null_count = None if nulls is None or leaf.null_count is None else leaf.null_count + nulls
                continue
            if name is None or not _flat(arrow.field(name).type):
                absent = len(leaf.names) == 1 and not any(c in arrow.names for c in leaf.names[0])
                # a column the file lacks is all null; anything else unknown
                leaf.null_count = (
                    leaf.null_count + metadata.num_rows if absent and leaf.null_count is not None else None
                )
                leaf.bounded = leaf.bounded and absent
                continue
            kind = arrow.field(name).type
            if pa.types.is_floating(kind):  # parquet-java's float bounds are wrong around NaN (a max
                leaf.bounded = False  # below the true max was seen): none rather than a wrong one
            for g in range(metadata.num_row_groups):
                rg = metadata.row_group(g)
                st = rg.column(columns[name]).statistics
                nulls = st.null_count if st is not None and st.has_null_count else None
                leaf.null_count = None if nulls is None or leaf.null_count is None else leaf.null_count + nulls
                if not leaf.minmax or (nulls is not None and nulls == rg.num_rows):
                    continue  # no bound asked, or only nulls here
                if st is None or not st.has_min_max:
                    leaf.bounded = False
                    continue
                self._fold_minmax(leaf, pa.array([st.min, st.max], kind))
        return self

    def _resolve(self, top: _Lookup, names: tuple, cache: dict):
        level = top
        arr = None
        for depth, cand in enumerate(names):
            key = names[: depth + 1]
            if key in cache:
                arr = cache[key]
            else:
                arr = level.get(cand)
                if arr is not None and pa.types.is_dictionary(arr.type):
                    arr = arr.dictionary_decode()
                cache[key] = arr
            if arr is None:
                return None
            if depth < len(names) - 1:
                if not pa.types.is_struct(arr.type):
                    return None
                children = arr.flatten()  # merges the parent's validity into each child
                level = _Lookup(
                    [arr.type.field(i).name for i in range(arr.type.num_fields)], lambda i, ch=children: ch[i]
                )
        return arr

    def _fold_minmax(self, leaf: _Leaf, arr: pa.Array) -> None:
        name = type_name(leaf.type)
        if pa.types.is_floating(arr.type):
            mm = pc.min_max(arr)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is not None and math.isnan(lo):
                lo = hi = None  # only NaNs (and nulls)
        elif pa.types.is_timestamp(arr.type):
            factor = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}[arr.type.unit]
            mm = pc.min_max(arr.cast(pa.int64()))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            lo = None if lo is None else lo * factor  # nanoseconds
            hi = None if hi is None else hi * factor
        elif pa.types.is_date(arr.type):
            a = arr if pa.types.is_date32(arr.type) else arr.cast(pa.date32())
            mm = pc.min_max(a.cast(pa.int32()))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
        elif pa.types.is_large_string(arr.type) or getattr(pa.types, "is_string_view", lambda _: False)(arr.type):
            mm = pc.min_max(arr.cast(pa.string()))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
        else:
            try:
                mm = pc.min_max(arr)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                return  # a type without ordering in the data (should not happen for eligible types)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return
        if name == "string" and isinstance(lo, str):
            # prefix(min) == min(prefix): keep only the prefix of the running min
            lo = lo[: self.string_prefix_length]
        if leaf.min is None or lo < leaf.min:
            leaf.min = lo
        if leaf.max is None or hi > leaf.max:
            leaf.max = hi

    # --- rendering ------------------------------------------------------------------------
    def _render(self, leaf: _Leaf, value: Any, *, is_max: bool):
        """JSON-ready value (``_Raw`` for numbers written verbatim) or None to omit."""
        name = type_name(leaf.type)
        if value is None:
            return None
        if name in ("byte", "short", "integer", "long"):
            return int(value)
        if name == "double":
            return None if math.isinf(value) else _Raw(repr(float(value)))
        if name == "float":
            if math.isinf(value):
                return None
            return _Raw(_float32_text(value))
        if name == "decimal":
            d = value if isinstance(value, _decimal.Decimal) else _decimal.Decimal(str(value))
            return _Raw(format(d, "f"))
        if name == "date":
            try:
                d = _dt.date(1970, 1, 1) + _dt.timedelta(days=int(value))
            except OverflowError:
                return None  # outside years 1..9999: no bound (skipping stays correct)
            return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
        if name in ("timestamp", "timestamp_ntz"):
            ns = int(value)
            ms = -((-ns) // 1_000_000) if is_max else ns // 1_000_000  # ceil for max, floor for min
            try:
                return _fmt_ms(ms) + ("Z" if name == "timestamp" else "")
            except OverflowError:
                return None
        if name == "string":
            s = str(value)
            p = self.string_prefix_length
            if len(s) <= p:
                return s
            if not is_max:
                return s[:p]
            return truncate_max_string(s, p)
        return None

    def to_dict(self) -> dict:
        """The stats object (numbers that must keep their text are ``_Raw`` strings)."""
        out: dict[str, Any] = {"numRecords": self.num_records}
        mins: dict = {}
        maxs: dict = {}
        nulls: dict = {}
        for leaf in self._leaves:
            if leaf.null_count is not None:
                _put(nulls, leaf.keys, leaf.null_count)
            if leaf.minmax and leaf.bounded:
                lo = self._render(leaf, leaf.min, is_max=False)
                hi = self._render(leaf, leaf.max, is_max=True)
                if lo is not None:
                    _put(mins, leaf.keys, lo)
                if hi is not None:
                    _put(maxs, leaf.keys, hi)
        if mins:
            out["minValues"] = mins
        if maxs:
            out["maxValues"] = maxs
        if nulls:
            out["nullCount"] = nulls
        if self.tight_bounds is not None:
            out["tightBounds"] = bool(self.tight_bounds)
        return out

    def to_json(self) -> str:
        """The ``add.stats`` JSON string (compact, UTF-8 text kept as is)."""
        return _dumps(self.to_dict())


def collect_stats(schema: StructType, data: pa.Table | pa.RecordBatch, **kwargs) -> str:
    """One-shot helper: stats JSON for ``data`` (see :class:`StatsCollector` for kwargs)."""
    return StatsCollector(schema, **kwargs).update(data).to_json()


def _flat(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t))


def truncate_max_string(s: str, prefix_length: int) -> str:
    """delta-spark's ``truncateMaxStringAgg``: an upper bound of ``s`` at most a few chars longer
    than ``prefix_length`` (prefix + following chars >= U+FFFD + U+FFFD)."""
    if len(s) <= prefix_length:
        return s
    i = prefix_length
    while i < len(s) and s[i] >= _TIE_BREAKER:
        i += 1
    return s[:i] + _TIE_BREAKER


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


class _Lookup:
    """Find a column by candidate names: exact match of each candidate first, then case-insensitive."""

    def __init__(self, names: list[str], get):
        self.names = names
        self.get_i = get
        self.exact = {}
        self.low = {}
        for i, n in enumerate(names):
            self.exact.setdefault(n, i)
            self.low.setdefault(n.lower(), i)

    def get(self, candidates: tuple[str, ...]):
        for c in candidates:
            if c in self.exact:
                return self.get_i(self.exact[c])
        for c in candidates:
            i = self.low.get(c.lower())
            if i is not None:
                return self.get_i(i)
        return None


class _Raw(str):
    """A JSON number token written verbatim."""


def _put(d: dict, keys: tuple[str, ...], v: Any) -> None:
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = v


def _dumps(o: Any) -> str:
    if isinstance(o, _Raw):
        return str(o)
    if isinstance(o, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dumps(v) for k, v in o.items()) + "}"
    return json.dumps(o, ensure_ascii=False)


def _float32_text(x: float) -> str:
    t = str(np.float32(x))
    # numpy prints e.g. "1e+20"; both are valid JSON numbers. Make "3." style impossible.
    if t.endswith("."):
        t += "0"
    return t


def _fmt_ms(ms: int) -> str:
    secs, milli = divmod(ms, 1000)
    days, sod = divmod(secs, 86_400)
    d = _dt.date(1970, 1, 1) + _dt.timedelta(days=days)
    hh, rem = divmod(sod, 3600)
    mm, ss = divmod(rem, 60)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{milli:03d}"
