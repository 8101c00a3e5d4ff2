"""The Arrow form of file actions: ``FILE_SCHEMA`` / ``REMOVE_SCHEMA`` and the conversions into them.

Every reader of the log (JSON commits, parquet checkpoints) turns ``add`` / ``remove`` actions into
tables of these schemas; nothing here reads files. numpy <-> arrow conversions go through buffers,
never ``pa.array``/``to_numpy``/Python scalars in compute calls: those make pyarrow import pandas
(~0.25 s in a fresh process).
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions import Metadata, camel_case
from ..buffers import S_AT, S_EMPTY, S_FALSE, S_TRUE, np_bools, pa_bools, pa_ints, pa_strings
from ..config import TableProperties
from ..errors import LogCorruptedError

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

#: the fields ``add`` and ``remove`` both carry, in this order, after their own
_SHARED = [
    ("stats", pa.string()),
    ("tags", STRING_MAP),
    ("deletion_vector", DV_TYPE),
    ("base_row_id", pa.int64()),
    ("default_row_commit_version", pa.int64()),
]

#: live files of a snapshot: one row per logical file (path, dv id)
FILE_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partition_values", STRING_MAP),
        ("size", pa.int64()),
        ("modification_time", pa.int64()),
        ("data_change", pa.bool_()),
        *_SHARED,
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
        *_SHARED,
    ]
)


# wire (camelCase) name for each column
WIRE = {n: camel_case(n) for n in FILE_SCHEMA.names + REMOVE_SCHEMA.names}

MAP_FIELDS = ("partitionValues", "tags")


NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


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
# vectorised helpers


def _null(type_: pa.DataType, n: int) -> pa.Array:
    return pa.nulls(n, type=type_)


def struct_child(struct: pa.StructArray, name: str) -> pa.Array | None:
    t = struct.type
    idx = t.get_field_index(name)
    if idx < 0:
        return None
    return struct.field(idx)


def dv_unique_ids(dv: pa.Array | None, n: int) -> pa.Array:
    """``storageType + pathOrInlineDv [+ "@" + offset]`` per row, null without DV (vectorised)."""
    if dv is None or n == 0 or pa.types.is_null(dv.type):
        return _null(pa.string(), n)
    st = struct_child(dv, "storageType")
    p = struct_child(dv, "pathOrInlineDv")
    if st is None or p is None:
        return _null(pa.string(), n)
    st = st.cast(pa.string())
    p = p.cast(pa.string())
    base = pc.binary_join_element_wise(st, p, S_EMPTY)
    off = struct_child(dv, "offset")
    if off is not None and not pa.types.is_null(off.type):
        with_off = pc.binary_join_element_wise(base, off.cast(pa.string()), S_AT)
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
        offsets = pa_ints(np.zeros(n + 1, dtype=np.int32))
        items = pa_strings([])
        keys_arr = pa_strings([])
    else:
        flat = pa.concat_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols])
        order = (np.arange(n, dtype=np.int64)[:, None] + np.arange(k, dtype=np.int64)[None, :] * n).ravel()
        items = flat.take(pa_ints(order))
        keys_arr = pa_strings(keys).take(pa_ints(np.tile(np.arange(k, dtype=np.int64), n)))
        if keep_null_values:
            offsets = pa_ints(np.arange(0, n * k + 1, k, dtype=np.int32))
        else:
            valid = np_bools(items.is_valid())
            counts = valid.reshape(n, k).sum(axis=1)
            offsets = pa_ints(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            sel = pa_bools(valid)
            items = items.filter(sel)
            keys_arr = keys_arr.filter(sel)
    out = pa.MapArray.from_arrays(offsets, keys_arr, items, type=STRING_MAP)
    if rows_valid is not None and struct.null_count:
        out = pc.if_else(rows_valid, out, _null(STRING_MAP, n))
    return out


def _to_string(arr: pa.Array) -> pa.Array:
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, S_TRUE, S_FALSE)
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
        c = struct_child(arr, f.name)
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
    ``writeStatsAsJson=false`` that still carry ``stats_parsed`` (:func:`stats_only_parsed`).
    """
    out = []
    for row in parsed.to_pylist():
        if row is None:
            out.append(None)
            continue
        d = _drop_nulls(row)
        out.append(json.dumps(d, separators=(",", ":"), default=_stats_default) if d else None)
    return pa.array(out, pa.string())


def stats_only_parsed(struct: pa.Array) -> bool:
    """A checkpoint's adds carry typed ``stats_parsed`` but no JSON ``stats`` (the field absent or
    all null: ``delta.checkpoint.writeStatsAsJson=false``), so the JSON must be rebuilt from it."""
    parsed, stats = struct_child(struct, "stats_parsed"), struct_child(struct, "stats")
    if parsed is None or not pa.types.is_struct(parsed.type):
        return False
    return stats is None or stats.null_count == len(stats)


def normalize_file_actions(struct: pa.Array, schema: pa.Schema, *, partition_keys: list[str] | None) -> pa.Table:
    """Project an ``add``/``remove`` struct array (all rows valid) onto ``schema`` (snake_case).

    :param partition_keys: for adds: the fixed map keys of ``partition_values`` when the source
        holds inferred structs (JSON); ``None`` for removes (non-null entries kept).
    """
    n = len(struct)
    cols = []
    for f in schema:
        src = struct_child(struct, WIRE[f.name]) if n else None
        if f.name == "partition_values":
            cols.append(_to_map(src, n, partition_keys, keep_null_values=partition_keys is not None))
        elif f.name == "tags":
            cols.append(_to_map(src, n, None, keep_null_values=False))
        elif f.name == "deletion_vector":
            cols.append(_to_dv(src, n))
        elif f.name == "stats" and n and stats_only_parsed(struct):
            cols.append(stats_json_from_parsed(struct_child(struct, "stats_parsed")))
        elif src is None or pa.types.is_null(src.type):
            cols.append(_null(f.type, n))
        elif src.type != f.type:
            try:
                cols.append(src.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise LogCorruptedError(
                    f"Field '{WIRE[f.name]}' of a file action has the wrong type",
                    f"expected {f.type}, found {src.type}: {e}",
                    "repair the log; the table was written by a non-conforming writer",
                ) from None
        else:
            cols.append(src)
    return pa.Table.from_arrays(cols, schema=schema)


def partition_keys_of(metadata: Metadata) -> list[str]:
    """Keys used in ``partitionValues``: the partition columns, physical names under column mapping."""
    cols = list(metadata.partition_columns or [])
    if not cols or TableProperties.of(metadata).column_mapping_mode == "none":
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
