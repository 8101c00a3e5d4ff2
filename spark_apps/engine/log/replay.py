"""Vectorised (pyarrow) log replay: checkpoint + JSON commits -> table state.

Replay rules (PROTOCOL.md "Action Reconciliation"; Delta's ``InMemoryLogReplay``):

1. Actions are applied in log order: the checkpoint first (its rows are already reconciled), then
   every JSON commit ``checkpoint+1 .. version`` in version order, lines in file order.
2. ``protocol`` and ``metaData``: the latest one wins (full replace). Both must exist at the end,
   otherwise :class:`LogCorruptedError`.
3. ``txn``: the latest action per ``appId`` wins (its version need not grow).
4. ``domainMetadata``: the latest action per ``domain`` wins; ``removed=true`` drops the domain from
   the snapshot.
5. File actions: the logical file key is ``(path, deletionVector.uniqueId)`` (``uniqueId`` =
   ``storageType + pathOrInlineDv [+ "@" + offset]``; ``(path, NULL)`` without a DV). The newest
   action per key wins; a winning ``add`` is a live file, a winning ``remove`` is a tombstone.
   So an ``add`` after a ``remove`` of the same key is live again, and a re-``add`` of a live key
   replaces its stats/metadata. ``path`` is compared exactly as written (URI-encoded).
6. ``commitInfo``, ``cdc``, ``checkpointMetadata``/``sidecar`` (outside checkpoints) and unknown
   actions do not take part in the state; the ``commitInfo`` of the last commit is kept for
   :attr:`ReplayResult.commit_info`.
7. Checkpoint + later commits: a checkpoint (all its parts, sidecars and inline rows together) is
   already reconciled, i.e. holds at most one action per file key (the protocol requires it; it is
   trusted, not re-checked), and every commit after it is newer. So rule 5 reduces to: among the
   commits' own actions the newest per key wins; a checkpoint row survives iff no later commit
   names its key ``(path, dv uniqueId)`` (whatever that commit's action: add, remove, re-add).
   A commit action on the same path with a different DV names another key and leaves the row.

Algorithm (no Python object per file):

* Parquet checkpoints (classic, multi-part, V2 with sidecars, V2 JSON) are read with
  ``pyarrow.parquet``, only the ``add``/``remove`` sub-columns we keep (never ``stats_parsed`` /
  ``partitionValues_parsed``, except ``stats_parsed`` when a checkpoint has no JSON ``stats``: then
  the JSON strings are rebuilt from it, a slow path); non-file actions (a handful of rows) become
  dataclasses. A checkpoint alone is already reconciled: no dedup.
* JSON commits are copied into one buffer; line boundaries are found with numpy and file-action
  lines recognised by their exact prefix (``{"add":`` / ``{"remove":``, vectorised). The few other
  lines are ``json.loads``-ed in Python (``commitInfo``: only the last one is kept) and then
  overwritten with spaces, so ONE ``pyarrow.json`` call over the whole buffer yields exactly one
  row per file action, in line order. The explicit schema leaves ``partitionValues``/``tags`` to
  inference as structs (pyarrow.json cannot build maps); they become ``map<string,string>`` via
  ``MapArray.from_arrays``. If arrow cannot parse the lines (bad JSON, conflicting types of unknown
  fields) a per-line Python fallback parses them or names the broken commit.
* Reconciliation (rules 5 and 7), no work proportional to the checkpoint beyond one hash probe:
  every commit file action has a global order number (line index). The commits' keys (``path``, or
  ``path + NUL + dvUniqueId`` when any source has a DV) are hash-encoded once
  (``dictionary_encode``); ``np.maximum.at`` gives the newest order per key and marks the winning
  commit rows. The dictionary is the set of keys named by commits: one ``is_in`` of the checkpoint
  paths against it finds the superseded checkpoint rows (with DVs: paths first, then the full key
  of just those candidate rows). A checkpoint without later commits is taken as is; a JSON-only
  log has no checkpoint rows, so the group step covers every row (the general path). Inline file
  actions of a V2 JSON checkpoint are checkpoint rows too.
* Checkpoint parquet columns are never filtered when read: a chunk of the ``add``/``remove``
  column keeps a mask of its file-action rows (valid struct with a path; the other rows are other
  action types). The chunk is normalised whole and the mask (minus superseded rows) is applied
  last as zero-copy slices of its runs when there are at most ``_MAX_SLICE_RUNS``, else one
  ``filter``. Checkpoints whose stats exist only as ``stats_parsed`` are filtered first instead
  (the JSON rebuild is slow per row).
* numpy <-> arrow conversions go through buffers, never ``pa.array``/``to_numpy``/Python scalars
  in compute calls/``group_by``: those make pyarrow import pandas (~0.25 s in a fresh process).
* Partition values of JSON adds are rebuilt with exactly the table's partition keys (physical names
  under column mapping), a missing key being a null value; JSON removes keep their non-null
  entries; checkpoint maps are kept as written.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..actions import (
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
    action_from_json,
    load_action_line,
)
from ..errors import LogCorruptedError, StorageError
from ..storage import LocalStorage, Storage
from .listing import SIDECAR_DIR_NAME, Checkpoint, LogFile

# ---------------------------------------------------------------------------------------------
# schemas

STRING_MAP = pa.map_(pa.string(), pa.string())

DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)

#: live files of a snapshot: one row per logical file (path, dv id)
FILE_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partition_values", STRING_MAP),
        ("size", pa.int64()),
        ("modification_time", pa.int64()),
        ("data_change", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletion_vector", DV_TYPE),
        ("base_row_id", pa.int64()),
        ("default_row_commit_version", pa.int64()),
        ("clustering_provider", pa.string()),
    ]
)

#: tombstones of a snapshot
REMOVE_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("deletion_timestamp", pa.int64()),
        ("data_change", pa.bool_()),
        ("extended_file_metadata", pa.bool_()),
        ("partition_values", STRING_MAP),
        ("size", pa.int64()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletion_vector", DV_TYPE),
        ("base_row_id", pa.int64()),
        ("default_row_commit_version", pa.int64()),
    ]
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# wire (camelCase) name for each column
_WIRE = {n: _camel(n) for n in FILE_SCHEMA.names + REMOVE_SCHEMA.names}

_MAP_FIELDS = ("partitionValues", "tags")

# explicit JSON schema for commit file-action lines (maps left out: inferred as structs)
_JSON_ADD = pa.struct([(_WIRE[f.name], f.type) for f in FILE_SCHEMA if f.type != STRING_MAP])
_JSON_REMOVE = pa.struct([(_WIRE[f.name], f.type) for f in REMOVE_SCHEMA if f.type != STRING_MAP])
_JSON_FILE_SCHEMA = pa.schema([("add", _JSON_ADD), ("remove", _JSON_REMOVE)])


def _json_file_schema(partition_keys: list[str]) -> pa.Schema:
    """The explicit JSON schema, with the known partition keys declared as strings.

    Declaring them matters: pyarrow.json infers ISO-looking strings ("2021-01-01") as timestamps.
    Keys not declared here are still inferred (and checked afterwards, see ``_lossy_inference``).
    """
    if not partition_keys:
        return _JSON_FILE_SCHEMA
    pv = ("partitionValues", pa.struct([(k, pa.string()) for k in partition_keys]))
    return pa.schema([("add", pa.struct(list(_JSON_ADD) + [pv])), ("remove", pa.struct(list(_JSON_REMOVE) + [pv]))])


def _lossy_inference(t: pa.Table) -> bool:
    """True if a map-like field was inferred with a type whose string form differs from the JSON text
    (timestamps/dates from ISO-looking strings, floats, nested values): then re-parse per line."""
    for kind in ("add", "remove"):
        if kind not in t.column_names:
            continue
        st = t.schema.field(kind).type
        for name in _MAP_FIELDS:
            i = st.get_field_index(name)
            if i < 0 or not pa.types.is_struct(st.field(i).type):
                continue
            for f in st.field(i).type:
                ft = f.type
                if not (
                    pa.types.is_string(ft) or pa.types.is_null(ft) or pa.types.is_integer(ft) or pa.types.is_boolean(ft)
                ):
                    return True
    return False


_NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


def _empty(schema: pa.Schema) -> pa.Table:
    # not ``schema.empty_table()``: that converts Python values, which makes pyarrow import pandas
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


_EMPTY_FILES = _empty(FILE_SCHEMA)
_EMPTY_TOMBSTONES = _empty(REMOVE_SCHEMA)


def empty_files() -> pa.Table:
    return _EMPTY_FILES  # tables are immutable: one shared instance


def empty_tombstones() -> pa.Table:
    return _EMPTY_TOMBSTONES


# ---------------------------------------------------------------------------------------------
# result


@dataclass
class ReplayResult:
    """State after replay. ``files``/``tombstones`` follow :data:`FILE_SCHEMA`/:data:`REMOVE_SCHEMA`."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    files: pa.Table = field(default_factory=empty_files)
    tombstones: pa.Table = field(default_factory=empty_tombstones)
    set_transactions: dict[str, SetTransaction] = field(default_factory=dict)
    domain_metadata: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_info: CommitInfo | None = None
    #: version whose commit carried the winning protocol / metaData (checkpoint version if from it)
    protocol_version: int | None = None
    metadata_version: int | None = None


# ---------------------------------------------------------------------------------------------
# numpy <-> arrow through buffers
#
# pyarrow imports pandas (~0.25 s) the first time it converts numpy or Python values to arrow
# (``pa.array``, ``pa.scalar``, a Python scalar passed to a compute function, ``empty_table``) or
# arrow to numpy (``to_numpy``) when pandas is installed, and ``Table.group_by`` imports it through
# ``pyarrow.dataset``. The replay goes through buffers instead, so a fresh process that opens a
# table does not pay for pandas (the slow fallbacks for malformed logs still may).


def _pa_ints(values: np.ndarray) -> pa.Array:
    """An int32/int64 numpy array as an arrow array (zero-copy, no nulls)."""
    if values.dtype != np.int32:
        values = values.astype(np.int64, copy=False)
    values = np.ascontiguousarray(values)
    type_ = pa.int32() if values.dtype == np.int32 else pa.int64()
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _pa_bools(values: np.ndarray) -> pa.Array:
    """A numpy bool array as an arrow boolean array (no nulls)."""
    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def _pa_strings(values: list[str]) -> pa.Array:
    """A list of Python strings as an arrow string array (no nulls)."""
    enc = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in enc], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(enc), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))])


def _str_scalar(value: str) -> pa.Scalar:
    return _pa_strings([value])[0]


_S_EMPTY, _S_AT, _S_NUL, _S_TRUE, _S_FALSE = (_str_scalar(x) for x in ("", "@", "\x00", "true", "false"))


def _np_ints(arr: pa.Array) -> np.ndarray:
    """A signed integer arrow array without nulls as a numpy view (zero-copy)."""
    width = arr.type.bit_width // 8
    return np.frombuffer(arr.buffers()[1], dtype=np.dtype(f"<i{width}"), count=len(arr), offset=arr.offset * width)


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    raw = np.frombuffer(buf, dtype=np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(raw, bitorder="little")[offset : offset + n].view(bool)


def _np_bools(arr: pa.Array) -> np.ndarray:
    """A boolean arrow array as a numpy bool array, null counting as ``False``."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    validity, data = arr.buffers()[:2]
    out = _bits(data, arr.offset, n)
    if arr.null_count and validity is not None:
        out = out & _bits(validity, arr.offset, n)
    return out


# ---------------------------------------------------------------------------------------------
# vectorised helpers


def _null(type_: pa.DataType, n: int) -> pa.Array:
    return pa.nulls(n, type=type_)


def _child(struct: pa.StructArray, name: str) -> pa.Array | None:
    t = struct.type
    idx = t.get_field_index(name)
    if idx < 0:
        return None
    return struct.field(idx)


def dv_unique_ids(dv: pa.Array | None, n: int) -> pa.Array:
    """``storageType + pathOrInlineDv [+ "@" + offset]`` per row, null without DV (vectorised)."""
    if dv is None or n == 0 or pa.types.is_null(dv.type):
        return _null(pa.string(), n)
    st = _child(dv, "storageType")
    p = _child(dv, "pathOrInlineDv")
    if st is None or p is None:
        return _null(pa.string(), n)
    st = st.cast(pa.string())
    p = p.cast(pa.string())
    base = pc.binary_join_element_wise(st, p, _S_EMPTY)
    off = _child(dv, "offset")
    if off is not None and not pa.types.is_null(off.type):
        with_off = pc.binary_join_element_wise(base, off.cast(pa.string()), _S_AT)
        base = pc.coalesce(with_off, base)
    if dv.null_count:
        base = pc.if_else(dv.is_valid(), base, _null(pa.string(), n))
    return base


def _map_from_struct(struct: pa.Array | None, n: int, keys: list[str] | None, keep_null_values: bool) -> pa.Array:
    """Turn a (JSON-inferred) struct of string-ish values into ``map<string,string>``.

    :param keys: the map keys for every row (fixed-key mode; missing fields are null values), or
        ``None`` to use the struct's own fields.
    :param keep_null_values: keep entries whose value is null (else they are dropped).
    """
    if struct is None or pa.types.is_null(struct.type):
        if keys is None:
            return _null(STRING_MAP, n)
        struct = None
    if keys is None:
        keys = [f.name for f in struct.type]
        rows_valid = struct.is_valid()
    else:
        rows_valid = None
    k = len(keys)
    cols = []
    for key in keys:
        col = None
        if struct is not None:
            idx = struct.type.get_field_index(key)
            if idx < 0:  # case-insensitive fallback (legacy writers)
                lower = [f.name.lower() for f in struct.type]
                if lower.count(key.lower()) == 1:
                    idx = lower.index(key.lower())
            if idx >= 0:
                col = struct.field(idx)
                if pa.types.is_null(col.type):
                    col = None
                elif not pa.types.is_string(col.type):
                    col = _to_string(col)
        cols.append(col if col is not None else _null(pa.string(), n))
    if k == 0:
        offsets = _pa_ints(np.zeros(n + 1, dtype=np.int32))
        items = _pa_strings([])
        keys_arr = _pa_strings([])
    else:
        flat = pa.concat_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols])
        order = (np.arange(n, dtype=np.int64)[:, None] + np.arange(k, dtype=np.int64)[None, :] * n).ravel()
        items = flat.take(_pa_ints(order))
        keys_arr = _pa_strings(keys).take(_pa_ints(np.tile(np.arange(k, dtype=np.int64), n)))
        if keep_null_values:
            offsets = _pa_ints(np.arange(0, n * k + 1, k, dtype=np.int32))
        else:
            valid = _np_bools(items.is_valid())
            counts = valid.reshape(n, k).sum(axis=1)
            offsets = _pa_ints(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            sel = _pa_bools(valid)
            items = items.filter(sel)
            keys_arr = keys_arr.filter(sel)
    out = pa.MapArray.from_arrays(offsets, keys_arr, items, type=STRING_MAP)
    if rows_valid is not None and struct.null_count:
        out = pc.if_else(rows_valid, out, _null(STRING_MAP, n))
    return out


def _to_string(arr: pa.Array) -> pa.Array:
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, _S_TRUE, _S_FALSE)
    try:
        return arr.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([None if v is None else json.dumps(v) for v in arr.to_pylist()], pa.string())


def _to_map(arr: pa.Array | None, n: int, keys: list[str] | None, keep_null_values: bool) -> pa.Array:
    if arr is None or pa.types.is_null(arr.type):
        return _map_from_struct(None, n, keys, keep_null_values)
    if pa.types.is_map(arr.type):
        if arr.type == STRING_MAP:
            return arr
        return arr.cast(STRING_MAP)
    if pa.types.is_struct(arr.type):
        return _map_from_struct(arr, n, keys, keep_null_values)
    raise LogCorruptedError(
        "A partitionValues/tags field of a file action is not a map",
        f"found type {arr.type}",
        "repair the log; partitionValues and tags must be JSON objects of strings",
    )


def _to_dv(arr: pa.Array | None, n: int) -> pa.Array:
    if arr is None or pa.types.is_null(arr.type):
        return _null(DV_TYPE, n)
    if arr.type == DV_TYPE:
        return arr
    children = []
    for f in DV_TYPE:
        c = _child(arr, f.name)
        children.append(_null(f.type, n) if c is None or pa.types.is_null(c.type) else c.cast(f.type))
    mask = pc.invert(arr.is_valid()) if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=mask)


def _stats_default(v):
    import datetime as _dt
    import decimal as _dec

    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.UTC)
            return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
        return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}"
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, _dec.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return None
    raise TypeError(type(v).__name__)


def _drop_nulls(obj):
    if isinstance(obj, dict):
        return {k: _drop_nulls(v) for k, v in obj.items() if v is not None}
    return obj


def stats_json_from_parsed(parsed: pa.Array) -> pa.Array:
    """``stats`` JSON strings rebuilt from a checkpoint's typed ``add.stats_parsed`` column.

    Slow path (one Python object per file), used only for checkpoints written with
    ``writeStatsAsJson=false`` that still carry ``stats_parsed``.
    """
    out = []
    for row in parsed.to_pylist():
        if row is None:
            out.append(None)
            continue
        d = _drop_nulls(row)
        out.append(json.dumps(d, separators=(",", ":"), default=_stats_default) if d else None)
    return pa.array(out, pa.string())


def normalize_file_actions(struct: pa.Array, schema: pa.Schema, *, partition_keys: list[str] | None) -> pa.Table:
    """Project an ``add``/``remove`` struct array (all rows valid) onto ``schema`` (snake_case).

    :param partition_keys: for adds: the fixed map keys of ``partition_values`` when the source
        holds inferred structs (JSON); ``None`` for removes (non-null entries kept).
    """
    n = len(struct)
    cols = []
    for f in schema:
        src = _child(struct, _WIRE[f.name]) if n else None
        if f.name == "partition_values":
            cols.append(_to_map(src, n, partition_keys, keep_null_values=partition_keys is not None))
        elif f.name == "tags":
            cols.append(_to_map(src, n, None, keep_null_values=False))
        elif f.name == "deletion_vector":
            cols.append(_to_dv(src, n))
        elif f.name == "stats" and src is None and n and _child(struct, "stats_parsed") is not None:
            cols.append(stats_json_from_parsed(_child(struct, "stats_parsed")))
        elif src is None or pa.types.is_null(src.type):
            cols.append(_null(f.type, n))
        elif src.type != f.type:
            try:
                cols.append(src.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise LogCorruptedError(
                    f"Field '{_WIRE[f.name]}' of a file action has the wrong type",
                    f"expected {f.type}, found {src.type}: {e}",
                    "repair the log; the table was written by a non-conforming writer",
                ) from None
        else:
            cols.append(src)
    return pa.Table.from_arrays(cols, schema=schema)


# ---------------------------------------------------------------------------------------------
# sources


@dataclass
class _FileSource:
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
class _Collected:
    sources: list[_FileSource] = field(default_factory=list)
    # (order, version, action) of non-file actions in log order
    actions: list[tuple[int, int, object]] = field(default_factory=list)
    next_order: int = 0
    last_commit_info_line: tuple[int, str] | None = None


def _strip_nones(obj):
    if isinstance(obj, dict):
        return {k: _strip_nones(v) for k, v in obj.items() if v is not None}
    return obj


def _add_struct_rows(
    col: pa.ChunkedArray | pa.Array,
    kind: str,
    coll: _Collected,
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
        p = _child(arr, "path")
        if p is None:
            raise LogCorruptedError(
                f"A '{kind}' action has no 'path'",
                "the path field is required",
                "repair the log; the table was written by a non-conforming writer",
            )
        keep = None
        if arr.null_count or p.null_count:  # a row without path is not a file action we can key on
            keep = _np_bools(arr.is_valid())
            if p.null_count:
                keep &= _np_bools(p.is_valid())
            if not keep.any():
                continue
        if in_checkpoint and not from_json:
            coll.sources.append(_FileSource(kind, arr, None, from_json, True, keep))
            continue
        order = None if in_checkpoint else order_base[lo : lo + n]
        if keep is not None:
            arr = arr.filter(_pa_bools(keep))
            order = None if order is None else order[keep]
        coll.sources.append(_FileSource(kind, arr, order, from_json, in_checkpoint))


class CheckpointReadError(LogCorruptedError):
    """A checkpoint (or one of its parts/sidecars) is missing or unreadable.

    The snapshot loader reacts by falling back to an older checkpoint (or to the JSON commits)
    when the log still allows it.
    """


def _read_parquet(storage: Storage, path: str, *, only_files: bool = False, no_files: bool = False) -> pa.Table:
    """Read the action columns we need from one checkpoint/sidecar parquet file."""
    try:
        fh = storage.filesystem.open_input_file(storage.fs_path(path))
    except FileNotFoundError:
        raise FileNotFoundError(path) from None
    except OSError as e:
        if "no such file" in str(e).lower() or "not found" in str(e).lower():
            raise FileNotFoundError(path) from None
        raise StorageError(f"Cannot open '{path}'", str(e), "check the storage and retry") from None
    with fh:
        try:
            pf = pq.ParquetFile(fh)
            schema = pf.schema_arrow
        except (pa.ArrowInvalid, OSError) as e:
            raise CheckpointReadError(
                f"Checkpoint file '{path}' is not readable parquet",
                str(e),
                "delete the broken checkpoint (and fix _last_checkpoint); the JSON commits rebuild the state",
            ) from None
        cols: list[str] = []
        for kind, fschema in () if no_files else (("add", FILE_SCHEMA), ("remove", REMOVE_SCHEMA)):
            idx = schema.get_field_index(kind)
            if idx < 0:
                continue
            t = schema.field(idx).type
            if not pa.types.is_struct(t):
                continue
            present = {f.name for f in t}
            cols += [f"{kind}.{_WIRE[n]}" for n in fschema.names if _WIRE[n] in present]
            if kind == "add" and "stats" not in present and "stats_parsed" in present:
                cols.append("add.stats_parsed")  # only then: JSON stats are rebuilt from it
        if not only_files:
            cols += [c for c in _NON_FILE_COLUMNS if schema.get_field_index(c) >= 0]
        if not cols:
            return pa.table({})
        try:
            return pf.read(columns=cols, use_threads=True)
        except (pa.ArrowInvalid, OSError) as e:
            raise CheckpointReadError(
                f"Checkpoint file '{path}' is not readable parquet",
                str(e),
                "delete the broken checkpoint (and fix _last_checkpoint); the JSON commits rebuild the state",
            ) from None


def _collect_parquet_table(t: pa.Table, version: int, coll: _Collected, *, files_only: bool = False) -> list[dict]:
    """Add the file rows of a checkpoint table to ``coll``; return its non-file actions as dicts."""
    n = t.num_rows
    base = coll.next_order
    for kind in ("add", "remove"):
        if kind in t.column_names:
            _add_struct_rows(t.column(kind), kind, coll, False, None, in_checkpoint=True)
    coll.next_order = base + n
    out: list[dict] = []
    if files_only:
        return out
    for c in _NON_FILE_COLUMNS:
        if c not in t.column_names:
            continue
        col = t.column(c)
        if pa.types.is_null(col.type):
            continue
        rows = col.filter(col.is_valid())
        for r in rows.to_pylist(maps_as_pydicts="lossy"):
            out.append({c: _strip_nones(r)})
    return out


def _sidecar_path(storage: Storage, log_dir: str, path: str) -> str:
    from ..paths import resolve_log_path

    table_root = log_dir.rstrip("/").rsplit("/", 1)[0]
    return resolve_log_path(table_root, path, kind="sidecar", base=storage.join(log_dir, SIDECAR_DIR_NAME))


def _read_checkpoint(
    storage: Storage, log_dir: str, cp: Checkpoint, coll: _Collected, *, include_files: bool = True
) -> None:
    """Collect every action of ``cp`` (all parts, sidecars) into ``coll`` (before any commit)."""
    non_file: list[dict] = []
    name = cp.files[0].name
    try:
        if cp.format == "json":
            data = storage.read_bytes(cp.files[0].path)
            _collect_json([(cp.version, data)], coll, where=name, in_checkpoint=True, include_files=include_files)
            # the non-file actions were parsed into coll.actions; pull sidecars out of them
            sidecars = [a for (_, _, a) in coll.actions if isinstance(a, dict) and "sidecar" in a]
            coll.actions = [x for x in coll.actions if not (isinstance(x[2], dict) and "sidecar" in x[2])]
        else:
            for f in cp.files:
                t = _read_parquet(storage, f.path, no_files=not include_files)
                non_file += _collect_parquet_table(t, cp.version, coll)
            sidecars = [a for a in non_file if "sidecar" in a]
        for sc in sidecars if include_files else []:
            p = (sc["sidecar"] or {}).get("path")
            if not p:
                raise CheckpointReadError(
                    f"A sidecar action in checkpoint {name} has no path",
                    None,
                    "delete the broken checkpoint (and _last_checkpoint); the JSON commits rebuild the state",
                )
            t = _read_parquet(storage, _sidecar_path(storage, log_dir, p), only_files=True)
            _collect_parquet_table(t, cp.version, coll, files_only=True)
        actions = [
            action_from_json(obj) for obj in non_file if "sidecar" not in obj and "checkpointMetadata" not in obj
        ]
    except FileNotFoundError as e:
        raise CheckpointReadError(
            f"Checkpoint {cp.version} of the table is incomplete",
            f"file '{e.args[0] if e.args else e}' referenced by it is missing",
            "delete the broken checkpoint (and _last_checkpoint) or restore the missing file",
        ) from None
    except CheckpointReadError:
        raise
    except LogCorruptedError as e:
        raise CheckpointReadError(f"Checkpoint {name}: {e.problem}", e.cause, e.fix) from None
    for a in actions:
        coll.actions.append((-1, cp.version, a))


def _read_all(storage: Storage, commits: list[LogFile]) -> list[bytes]:
    """Read the commit files; in parallel threads for remote storage (latency-bound)."""
    if len(commits) <= 8 or isinstance(storage, LocalStorage):
        return [storage.read_bytes(c.path) for c in commits]
    with ThreadPoolExecutor(max_workers=16) as ex:
        return list(ex.map(lambda c: storage.read_bytes(c.path), commits))


_ADD_PREFIX = np.frombuffer(b'{"add":', dtype=np.uint8)
_REMOVE_PREFIX = np.frombuffer(b'{"remove":', dtype=np.uint8)
_COMMIT_INFO_PREFIX = b'{"commitInfo":'
_CDC_PREFIX = b'{"cdc":'
_WS = b" \t\r\n"


def _has_prefix(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Vectorised ``line.startswith(prefix)`` for every line ``buf[starts[i]:ends[i]]``."""
    ok = (ends - starts) >= len(prefix)
    last = len(buf) - 1
    for j, byte in enumerate(prefix.tolist()):
        ok &= buf[np.minimum(starts + j, last)] == byte
    return ok


def _blank(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Overwrite the given line ranges with spaces (in place, vectorised)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return
    rel = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    buf[np.repeat(starts, lengths) + rel] = 32


def _collect_json(
    datas: list[tuple[int, bytes]],
    coll: _Collected,
    *,
    where: str | None = None,
    in_checkpoint: bool = False,
    include_files: bool = True,
) -> None:
    """Parse NDJSON commits ``[(version, bytes)]`` (in version order) into ``coll``.

    Lines are found with numpy; file-action lines are recognised by their exact prefix
    (``{"add":`` / ``{"remove":``, vectorised). Every other line is handled in Python (a handful per
    commit) and then blanked out, so one ``pyarrow.json`` call over the whole buffer yields exactly
    one row per file action, in line order.
    """
    sizes = []
    chunks = []
    for _, d in datas:
        if b"\r" in d:
            d = d.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if d and not d.endswith(b"\n"):
            d = d + b"\n"
        chunks.append(d)
        sizes.append(len(d))
    total = sum(sizes)
    if total == 0:
        return
    buf = np.empty(total, dtype=np.uint8)
    pos = 0
    for d in chunks:
        buf[pos : pos + len(d)] = np.frombuffer(d, dtype=np.uint8)
        pos += len(d)
    del chunks
    ends = np.flatnonzero(buf == 10)  # every line ends with a newline
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    n_lines = len(ends)
    file_starts = np.cumsum([0] + sizes[:-1])
    line_versions = np.array([v for v, _ in datas], dtype=np.int64)[
        np.searchsorted(file_starts, starts, side="right") - 1
    ]
    base = coll.next_order
    coll.next_order = base + n_lines

    is_file = _has_prefix(buf, starts, ends, _ADD_PREFIX) | _has_prefix(buf, starts, ends, _REMOVE_PREFIX)
    other = np.flatnonzero(~is_file & (ends > starts))
    keep_extra: list[int] = []
    blank: list[int] = []
    raw = memoryview(buf)
    for i in other.tolist():
        text = bytes(raw[starts[i] : ends[i]])
        v = int(line_versions[i])
        if text.startswith(_COMMIT_INFO_PREFIX) or text.startswith(_CDC_PREFIX):
            # not replayed, but a torn or malformed line means a damaged commit: refuse it
            obj = load_action_line(text, f"Commit {v} of the table ({where or f'{v:020d}.json'}) has a line that is")
            if text.startswith(_CDC_PREFIX):
                try:
                    action_from_json(obj)
                except LogCorruptedError as e:
                    raise LogCorruptedError(f"Commit {v} of the table: {e.problem}", e.cause, e.fix) from None
            else:
                coll.last_commit_info_line = (v, text)
            blank.append(i)
            continue
        if not text.strip(_WS):
            continue  # blank line: the JSON reader skips it
        blank.append(i)
        obj = load_action_line(text, f"Commit {v} of the table ({where or f'{v:020d}.json'}) has a line that is")
        if not isinstance(obj, dict):
            continue
        if "add" in obj or "remove" in obj:  # unusual formatting of a file action: let arrow parse it
            blank.pop()
            keep_extra.append(i)
            continue
        if "commitInfo" in obj:
            coll.last_commit_info_line = (v, text)
            continue
        if in_checkpoint and "sidecar" in obj:
            coll.actions.append((base + i, v, obj))
            continue
        if "checkpointMetadata" in obj or "sidecar" in obj:
            continue
        try:
            a = action_from_json(obj)
        except LogCorruptedError as e:
            raise LogCorruptedError(f"Commit {v} of the table: {e.problem}", e.cause, e.fix) from None
        if a is not None:
            coll.actions.append((base + i, v, a))
    if blank:
        b = np.array(blank, dtype=np.int64)
        _blank(buf, starts[b], ends[b])
    file_lines = np.flatnonzero(is_file)
    if keep_extra:
        file_lines = np.sort(np.concatenate([file_lines, np.array(keep_extra, dtype=np.int64)]))
    if len(file_lines) == 0 or not include_files:
        return
    orders = file_lines.astype(np.int64) + base
    doc = pa.py_buffer(buf)
    keys: list[str] = []
    for _, _, a in coll.actions:  # every metaData seen so far (checkpoint + these commits)
        if isinstance(a, Metadata):
            keys += [k for k in partition_keys_of(a) if k not in keys]
    try:
        t = pajson.read_json(
            pa.BufferReader(doc),
            read_options=pajson.ReadOptions(use_threads=True, block_size=_json_block_size(total)),
            parse_options=pajson.ParseOptions(
                explicit_schema=_json_file_schema(keys), unexpected_field_behavior="infer"
            ),
        )
        if t.num_rows != len(file_lines):
            raise pa.ArrowInvalid("row count does not match the file-action lines")
        if _lossy_inference(t):
            raise pa.ArrowInvalid("partitionValues/tags inferred with a non-string type")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        texts = [bytes(raw[starts[i] : ends[i]]).decode("utf-8", "replace") for i in file_lines.tolist()]
        t = _parse_file_lines_slow(texts, line_versions[file_lines], where)
    for kind in ("add", "remove"):
        if kind in t.column_names:
            _add_struct_rows(t.column(kind), kind, coll, True, orders, in_checkpoint=in_checkpoint)


def _json_block_size(total: int) -> int:
    """Blocks of ~1/4 of the input (>= 1 MiB) so pyarrow parses in parallel."""
    return int(min(max(1 << 20, total // 4 + 1), (1 << 31) - 1))


def _parse_file_lines_slow(texts: list[str], versions: np.ndarray, where: str | None) -> pa.Table:
    """Fallback when the vectorised parse fails (type conflicts, bad JSON): per line, with errors."""
    adds, removes = [], []
    for text, v in zip(texts, versions.tolist()):
        obj = load_action_line(text, f"Commit {v} of the table ({where or f'{v:020d}.json'}) has a line that is")
        a = obj.get("add") if isinstance(obj, dict) else None
        r = obj.get("remove") if isinstance(obj, dict) else None
        for target, val, schema in ((adds, a, FILE_SCHEMA), (removes, r, REMOVE_SCHEMA)):
            if isinstance(val, dict):
                row = {}
                for name in schema.names:
                    w = _WIRE[name]
                    x = val.get(w)
                    if w in _MAP_FIELDS and isinstance(x, dict):
                        x = {
                            str(k): (None if vv is None else vv if isinstance(vv, str) else json.dumps(vv))
                            for k, vv in x.items()
                        }
                    elif w == "stats" and x is not None and not isinstance(x, str):
                        x = json.dumps(x)
                    row[w] = x
                target.append(row)
            else:
                target.append(None)
    add_t = pa.struct([(_WIRE[f.name], f.type) for f in FILE_SCHEMA])
    rem_t = pa.struct([(_WIRE[f.name], f.type) for f in REMOVE_SCHEMA])
    try:
        return pa.table({"add": pa.array(adds, add_t), "remove": pa.array(removes, rem_t)})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise LogCorruptedError(
            f"A file action in the log ({where or 'commits'}) has fields of the wrong type",
            str(e),
            "repair the log; the table was written by a non-conforming writer",
        ) from None


# ---------------------------------------------------------------------------------------------
# the replay


def partition_keys_of(metadata: Metadata) -> list[str]:
    """Keys used in ``partitionValues``: the partition columns, physical names under column mapping."""
    cols = list(metadata.partition_columns or [])
    mode = (metadata.configuration or {}).get("delta.columnMapping.mode", "none")
    if not cols or mode in (None, "none"):
        return cols
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except (ValueError, AttributeError):
        return cols
    phys = {}
    for f in fields:
        md = f.get("metadata") or {}
        phys[f.get("name")] = md.get("delta.columnMapping.physicalName", f.get("name"))
    return [phys.get(c, c) for c in cols]


def replay(
    storage: Storage,
    log_dir: str,
    checkpoint: Checkpoint | None,
    commits: list[LogFile] | tuple[LogFile, ...],
    *,
    include_files: bool = True,
) -> ReplayResult:
    """Reconstruct the state from ``checkpoint`` (optional) + ``commits`` (contiguous, in order).

    See the module docstring for the rules. Raises :class:`LogCorruptedError` when protocol or
    metaData is missing at the end.

    :param include_files: ``False`` replays only the non-file actions (protocol, metaData, txn,
        domainMetadata, commitInfo): no file-action parsing, no sidecars; ``files``/``tombstones``
        stay empty. Much cheaper for metadata-only questions.
    """
    coll = _Collected()
    if checkpoint is not None:
        _read_checkpoint(storage, log_dir, checkpoint, coll, include_files=include_files)
    n_cp_actions = len(coll.actions)
    if commits:
        try:
            datas = _read_all(storage, list(commits))
        except FileNotFoundError as e:
            raise StorageError(
                "A commit file disappeared while the snapshot was being read",
                f"'{e.filename or (e.args[0] if e.args else e)}' was listed but is gone (log cleanup running?)",
                "retry; if it persists, the log is damaged and must be restored",
            ) from None
        _collect_json([(c.version, d) for c, d in zip(commits, datas)], coll, include_files=include_files)
    res = ReplayResult()
    # non-file actions, in log order (checkpoint ones first, then by line order)
    cp_actions = coll.actions[:n_cp_actions]
    json_actions = sorted(coll.actions[n_cp_actions:], key=lambda x: x[0])
    for _, v, a in cp_actions + json_actions:
        if isinstance(a, Protocol):
            res.protocol, res.protocol_version = a, v
        elif isinstance(a, Metadata):
            res.metadata, res.metadata_version = a, v
        elif isinstance(a, SetTransaction):
            res.set_transactions[a.app_id] = a
        elif isinstance(a, DomainMetadata):
            if a.removed:
                res.domain_metadata.pop(a.domain, None)
            else:
                res.domain_metadata[a.domain] = a
    if coll.last_commit_info_line is not None and commits and coll.last_commit_info_line[0] == commits[-1].version:
        try:
            res.commit_info = CommitInfo.from_json(json.loads(coll.last_commit_info_line[1])["commitInfo"])
        except (ValueError, KeyError, TypeError):
            res.commit_info = None
    last_v = commits[-1].version if commits else (checkpoint.version if checkpoint else None)
    if res.protocol is None or res.metadata is None:
        missing = "protocol" if res.protocol is None else "metaData"
        raise LogCorruptedError(
            f"The table's log has no '{missing}' action (state at version {last_v})",
            f"no checkpoint or commit up to version {last_v} contains a {missing} action",
            "restore the log from a backup; every Delta table needs protocol and metaData (version 0 has them)",
        )
    res.files, res.tombstones = _reconcile_files(coll.sources, partition_keys_of(res.metadata))
    return res


#: a selection of rows that forms at most this many runs is taken as zero-copy slices
_MAX_SLICE_RUNS = 256


def _select_rows(t: pa.Table, keep: np.ndarray) -> pa.Table:
    """Rows of ``t`` where ``keep``: zero-copy slices of the kept runs when they are few, else a filter."""
    m = np.concatenate(([False], keep, [False]))
    edges = np.flatnonzero(m[1:] != m[:-1])
    starts, ends = edges[0::2], edges[1::2]
    if len(starts) == 1 and starts[0] == 0 and ends[0] == len(keep):
        return t
    if len(starts) == 0:
        return t.slice(0, 0)
    if len(starts) <= _MAX_SLICE_RUNS:
        return pa.concat_tables([t.slice(int(s), int(e - s)) for s, e in zip(starts, ends)])
    return t.filter(_pa_bools(keep))


def _path_of(rows: pa.Array) -> pa.Array:
    p = _child(rows, "path")
    return p.cast(pa.string()) if p.type != pa.string() else p


def _has_dv(s: _FileSource) -> bool:
    dv = _child(s.rows, "deletionVector")
    return dv is not None and not pa.types.is_null(dv.type) and dv.null_count < len(dv)


def _file_keys(rows: pa.Array, with_dv: bool) -> pa.Array:
    """The logical file key per row: ``path``, or ``path + NUL + dvUniqueId`` (``""`` without DV)
    when the log has deletion vectors (NUL never occurs in a URI path)."""
    path = _path_of(rows)
    if not with_dv:
        return path
    dv_id = pc.fill_null(dv_unique_ids(_child(rows, "deletionVector"), len(rows)), _S_EMPTY)
    return pc.binary_join_element_wise(path, dv_id, _S_NUL)


def _encode(keys: list[pa.Array]) -> tuple[pa.Array, np.ndarray]:
    """Hash-encode the keys of several arrays: (distinct keys, int code per row, all arrays in turn)."""
    enc = pc.dictionary_encode(pa.chunked_array(keys, pa.string()))
    dictionary = enc.chunks[-1].dictionary
    if any(len(c.dictionary) != len(dictionary) for c in enc.chunks):  # chunks share one dictionary
        enc = pa.chunked_array([pc.dictionary_encode(pa.concat_arrays(keys))])
        dictionary = enc.chunks[0].dictionary
    codes = [_np_ints(c.indices) for c in enc.chunks]
    return dictionary, codes[0] if len(codes) == 1 else np.concatenate(codes)


def _reconcile_files(sources: list[_FileSource], partition_keys: list[str]) -> tuple[pa.Table, pa.Table]:
    """Live files and tombstones from the collected sources (rule 5; see "Algorithm" above)."""
    if not sources:
        return empty_files(), empty_tombstones()
    commit_sources = [s for s in sources if not s.in_checkpoint]
    winner_masks: dict[int, np.ndarray] = {}  # commit source -> its rows that win their key
    keep_of: dict[int, np.ndarray | None] = {}  # checkpoint source -> its rows no commit supersedes
    if commit_sources:
        with_dv = any(_has_dv(s) for s in sources)
        keys = [_file_keys(s.rows, with_dv) for s in commit_sources]
        named, codes = _encode(keys)
        orders = np.concatenate([s.order for s in commit_sources])
        newest = np.full(len(named), -1, dtype=np.int64)
        np.maximum.at(newest, codes, orders)  # newest commit action per key
        wins = orders == newest[codes]
        for s, w in zip(commit_sources, np.split(wins, np.cumsum([len(k) for k in keys])[:-1])):
            winner_masks[id(s)] = w
        # a checkpoint row is superseded iff a later commit names its key
        cp_sources = [s for s in sources if s.in_checkpoint]
        named_paths = named
        if cp_sources and with_dv:
            named_paths = pc.unique(pa.chunked_array([_path_of(s.rows) for s in commit_sources], pa.string()))
        for s in cp_sources:
            hit = _np_bools(pc.is_in(_path_of(s.rows), value_set=named_paths))
            if hit.any() and with_dv:  # same path: compare the full keys of just those rows
                idx = np.flatnonzero(hit)
                sub = s.rows.take(_pa_ints(idx))
                hit[idx[~_np_bools(pc.is_in(_file_keys(sub, True), value_set=named))]] = False
            if not hit.any():
                keep_of[id(s)] = s.keep
            else:
                keep_of[id(s)] = ~hit if s.keep is None else s.keep & ~hit
    adds, removes = [], []
    for s in sources:
        rows, keep = s.rows, None
        if s.in_checkpoint:
            keep = keep_of.get(id(s), s.keep)
            if keep is not None and _child(rows, "stats") is None and _child(rows, "stats_parsed") is not None:
                rows, keep = rows.filter(_pa_bools(keep)), None  # slow stats rebuild: only for kept rows
        else:
            w = winner_masks[id(s)]
            if not w.all():
                rows = rows.filter(_pa_bools(w))
        if s.kind == "add":
            t = normalize_file_actions(rows, FILE_SCHEMA, partition_keys=partition_keys if s.from_json else None)
        else:
            t = normalize_file_actions(rows, REMOVE_SCHEMA, partition_keys=None)
        (adds if s.kind == "add" else removes).append(t if keep is None else _select_rows(t, keep))
    files = pa.concat_tables(adds) if adds else empty_files()
    tombs = pa.concat_tables(removes) if removes else empty_tombstones()
    return files, tombs


# ---------------------------------------------------------------------------------------------
# commitInfo of single commits (history, in-commit timestamps)


def commit_info_from_bytes(data: bytes) -> CommitInfo | None:
    """The ``commitInfo`` action of one commit file (first one found), or ``None``.

    Only the line holding ``"commitInfo"`` is parsed (usually the first), so a commit with 100k
    adds costs a substring search, not a full parse.
    """
    pos = data.find(b'"commitInfo"')
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[start:end]
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("commitInfo"), dict):
            return CommitInfo.from_json(obj["commitInfo"])
        pos = data.find(b'"commitInfo"', end)
    return None
