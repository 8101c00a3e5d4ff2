"""Pure-pyarrow reading of Delta data files into the table schema.

``read_data_file`` turns one parquet file named by the log into an Arrow table whose columns are
exactly the table schema's (or the requested subset), in order, with the table's Arrow types
(:meth:`schema.StructType.to_arrow_schema`). Algorithm:

1. Locate the file: ``add.path`` is a URI reference; a relative one is %-decoded and joined to the
   table root, an absolute ``file:`` URI becomes a local path, other absolute URIs are kept
   (:func:`data_file_uri`). A missing file raises :class:`DataFileMissingError`.
2. Match columns. Without column mapping by name: exact first, then case-insensitive (Delta
   column names are case-insensitive). With column mapping (``name`` or ``id`` mode: Spark writes
   physical names in both; ``id`` mode also tries parquet field ids first) by physical name from
   ``delta.columnMapping.physicalName``. Nested struct fields are matched the same way.
3. Conform each column to the target type, recursively: timestamps of any unit (including INT96,
   read as microseconds so far-away dates do not overflow) -> ``timestamp[us, UTC]`` (a zone-less
   parquet timestamp counts as UTC, as Spark writes INT96/UTC-adjusted values) or ``timestamp[us]``
   for timestamp_ntz; integer widening (type widening) and other lossless casts; structs get
   missing fields as nulls and lose unknown ones; list/map elements are conformed in place.
   A column absent from the file is all null (schema evolution: added columns).
4. Partition columns come from the log's ``partitionValues`` strings, typed with
   :func:`partitions.partition_column_array` (never from directory names); with column mapping
   the map is keyed by physical names.
5. Deletion vectors (``deletion_vector``): the rows whose 0-based physical index is in the
   vector are dropped (:mod:`.dv`).
6. Output columns: table-schema order, or the order of ``columns`` when given.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import DataFileMissingError, InvalidArgumentError, InvalidSchemaError, StorageError
from .partitions import decode_add_path, partition_column_array
from .schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from .storage import Storage

__all__ = [
    "data_file_uri", "read_data_file", "read_files_batches", "read_snapshot_table", "conform_array",
    "column_mapping_mode_of",
]

_PHYS = "delta.columnMapping.physicalName"
_ID = "delta.columnMapping.id"


# --------------------------------------------------------------------------------------------
# locating files
# --------------------------------------------------------------------------------------------


def data_file_uri(table_root: str, path_in_log: str) -> str:
    """Full location of a data file named ``path_in_log`` (as written in the log) under ``table_root``."""
    parsed = urlparse(path_in_log)
    if parsed.scheme and len(parsed.scheme) > 1:  # absolute URI (a 1-letter scheme is a Windows drive)
        if parsed.scheme == "file":
            return unquote(parsed.path)
        return path_in_log
    rel = decode_add_path(path_in_log)
    if rel.startswith("/"):
        return rel  # absolute local path (not a URI, but seen in the wild)
    return Storage.join(table_root, rel)


def column_mapping_mode_of(schema: StructType, configuration: Mapping[str, str] | None = None) -> str:
    """``delta.columnMapping.mode`` from the configuration, else "name" when the schema carries
    physical names (Spark writes physical names in both name and id mode), else "none"."""
    if configuration is not None and "delta.columnMapping.mode" in configuration:
        return str(configuration["delta.columnMapping.mode"]).lower()
    for _, f in schema.leaf_fields():
        if _PHYS in f.metadata:
            return "name"
    for f in schema.fields:
        if _PHYS in f.metadata:
            return "name"
    return "none"


# --------------------------------------------------------------------------------------------
# conforming arrays to the table types
# --------------------------------------------------------------------------------------------


class _Match:
    """Finds the source child for a target field: field id (id mode), physical name, exact name,
    then case-insensitive."""

    def __init__(self, fields: Sequence[pa.Field], mode: str):
        self.mode = mode
        self.exact: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.ids: dict[int, int] = {}
        for i, f in enumerate(fields):
            self.exact.setdefault(f.name, i)
            self.low.setdefault(f.name.lower(), i)
            md = f.metadata or {}
            fid = md.get(b"PARQUET:field_id")
            if fid is not None:
                try:
                    self.ids.setdefault(int(fid), i)
                except ValueError:
                    pass

    def find(self, target: StructField) -> int | None:
        if self.mode == "id" and target.metadata.get(_ID) is not None and self.ids:
            return self.ids.get(int(target.metadata[_ID]))
        names = [target.physical_name] if self.mode in ("name", "id") else [target.name]
        for n in names:
            if n in self.exact:
                return self.exact[n]
        for n in names:
            i = self.low.get(n.lower())
            if i is not None:
                return i
        return None


def _null_mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def conform_array(arr: pa.Array, target: DataType, mode: str = "none", where: str = "?") -> pa.Array:
    """Cast/reshape one (non-chunked) Arrow array to the Arrow type of ``target`` (see module doc)."""
    tgt = target.to_arrow()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.type == tgt and (mode == "none" or not isinstance(target, (StructType, ArrayType, MapType))):
        return arr
    if isinstance(target, PrimitiveType) and target.name == "void":
        return pa.nulls(len(arr), pa.null())
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), tgt)
    if isinstance(target, StructType) or (isinstance(target, PrimitiveType) and target.name == "variant"):
        st = target if isinstance(target, StructType) else StructType((
            StructField("value", PrimitiveType("binary"), False), StructField("metadata", PrimitiveType("binary"), False)))
        if not pa.types.is_struct(arr.type):
            raise _type_error(where, arr.type, target)
        src_fields = [arr.type.field(i) for i in range(arr.type.num_fields)]
        m = _Match(src_fields, mode)
        children = []
        for f in st.fields:
            i = m.find(f)
            if i is None:
                children.append(pa.nulls(len(arr), f.type.to_arrow()))
            else:
                # .field(i) keeps the child's own validity; parent nulls are carried by the mask
                child = arr.field(i)
                children.append(conform_array(child, f.type, mode, f"{where}.{f.name}"))
        out_fields = [f.to_arrow() for f in st.fields]
        # Arrow refuses nulls in non-nullable children only at validation; keep fields nullable
        # where the data has nulls to stay valid.
        out_fields = [of if not ch.null_count else of.with_nullable(True) for of, ch in zip(out_fields, children)]
        return pa.StructArray.from_arrays(children, fields=out_fields, mask=_null_mask(arr))
    if isinstance(target, ArrayType):
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)):
            raise _type_error(where, arr.type, target)
        if pa.types.is_fixed_size_list(arr.type) or getattr(pa.types, "is_list_view", lambda _: False)(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_field))
        offsets = arr.offsets
        if pa.types.is_large_list(arr.type):
            offsets = offsets.cast(pa.int32())
        values = conform_array(arr.values, target.element_type, mode, f"{where}.element")
        out_type = pa.list_(pa.field("element", values.type, nullable=True))
        return pa.ListArray.from_arrays(offsets, values, type=out_type, mask=_null_mask(arr))
    if isinstance(target, MapType):
        if not pa.types.is_map(arr.type):
            raise _type_error(where, arr.type, target)
        keys = conform_array(arr.keys, target.key_type, mode, f"{where}.key")
        items = conform_array(arr.items, target.value_type, mode, f"{where}.value")
        mtype = pa.map_(pa.field("key", keys.type, nullable=False), pa.field("value", items.type, nullable=True))
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=mtype, mask=_null_mask(arr))
    # primitives
    try:
        if pa.types.is_timestamp(tgt):
            if not (pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type)):
                raise _type_error(where, arr.type, target)
            if pa.types.is_timestamp(arr.type) and (arr.type.tz is None) != (tgt.tz is None):
                # zone-less <-> UTC: same instant numbers (the wall clock in UTC)
                arr = arr.cast(pa.timestamp(arr.type.unit, tz=tgt.tz))
            return arr.cast(tgt, safe=False)  # ns -> us truncates sub-microseconds
        if pa.types.is_string(tgt) and not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
                                            or pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
                                            or getattr(pa.types, "is_string_view", lambda _: False)(arr.type)):
            raise _type_error(where, arr.type, target)
        return arr.cast(tgt)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise InvalidSchemaError(
            f"Column '{where}' in a data file cannot be read as {target.simple_string()}",
            f"the file stores {arr.type}: {str(e).splitlines()[0]}",
            "the data file does not match the table schema; rewrite it or fix the schema",
        ) from None


def _type_error(where: str, have: pa.DataType, target: DataType) -> InvalidSchemaError:
    return InvalidSchemaError(
        f"Column '{where}' in a data file cannot be read as {target.simple_string()}",
        f"the file stores {have}",
        "the data file does not match the table schema; rewrite it or fix the schema",
    )


def _relaxed(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable (a NOT NULL nested field may still hold nulls in old files)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _relaxed(t.field(i).type), nullable=True) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _relaxed(t.value_type), nullable=True))
    if pa.types.is_map(t):
        return pa.map_(pa.field("key", _relaxed(t.key_type), nullable=False),
                       pa.field("value", _relaxed(t.item_type), nullable=True))
    return t


def _conform_column(col: pa.ChunkedArray, target: DataType, mode: str, where: str) -> pa.ChunkedArray:
    tgt = target.to_arrow()
    chunks = [conform_array(c, target, mode, where) for c in col.chunks]
    if not chunks:
        return pa.chunked_array([], type=tgt)
    return pa.chunked_array(chunks, type=chunks[0].type)


# --------------------------------------------------------------------------------------------
# one file
# --------------------------------------------------------------------------------------------


def _open_parquet(storage: Storage, location: str, path_in_log: str) -> pq.ParquetFile:
    try:
        f = storage.filesystem.open_input_file(storage.fs_path(location))
        return pq.ParquetFile(f, coerce_int96_timestamp_unit="us")
    except FileNotFoundError:
        raise _missing(path_in_log, location) from None
    except OSError as e:
        msg = str(e).lower()
        if "not found" in msg or "no such file" in msg or "does not exist" in msg:
            raise _missing(path_in_log, location) from None
        raise StorageError(f"Cannot read data file '{location}'", str(e), "check the storage and retry") from None


def _missing(path_in_log: str, location: str) -> DataFileMissingError:
    return DataFileMissingError(
        f"Data file '{path_in_log}' referenced by the table's log is missing (looked at '{location}')",
        "it was deleted outside Delta, or removed by VACUUM while this version (time travel to an old "
        "version?) still references it",
        "read a newer version of the table, or restore the file from a backup",
    )


def _dv_descriptor(dv: Any):
    if dv is None:
        return None
    if isinstance(dv, str):
        dv = json.loads(dv)
    if isinstance(dv, dict) and dv.get("storageType") is None and dv.get("storage_type") is None:
        return None  # an all-null struct row
    return dv


def read_data_file(storage: Storage, table_root: str, path: str, partition_values: Mapping[str, str | None] | None,
                   schema: StructType, partition_columns: Sequence[str], columns: Sequence[str] | None = None,
                   deletion_vector: Any = None, *, column_mapping_mode: str | None = None) -> pa.Table:
    """Read one data file into the table schema (see module docstring).

    :param path: ``add.path`` exactly as in the log (URI-encoded, relative or absolute).
    :param partition_values: ``add.partitionValues`` (strings; missing key = null).
    :param columns: subset of table columns (any order; names matched case-insensitively).
    :param deletion_vector: ``add.deletionVector`` (dict with camelCase keys or
        :class:`actions.DeletionVectorDescriptor`), or None.
    :param column_mapping_mode: "none"/"name"/"id"; None infers it from the schema metadata.
    """
    mode = column_mapping_mode_of(schema) if column_mapping_mode is None else str(column_mapping_mode).lower()
    wanted = _select_fields(schema, columns)
    part_low = {c.lower() for c in partition_columns}
    data_fields = [f for f in wanted if f.name.lower() not in part_low]
    location = data_file_uri(table_root, path)
    pf = _open_parquet(storage, location, path)
    file_schema = pf.schema_arrow
    m = _Match(list(file_schema), mode)
    idx = {f.name: m.find(f) for f in data_fields}
    read_names = sorted({file_schema.field(i).name for i in idx.values() if i is not None},
                        key=lambda n: file_schema.get_field_index(n))
    dv = _dv_descriptor(deletion_vector)
    try:
        if read_names:
            raw = pf.read(columns=read_names)
            n = raw.num_rows
        else:
            raw = None
            n = pf.metadata.num_rows
    except FileNotFoundError:
        raise _missing(path, location) from None
    finally:
        try:
            pf.close()
        except Exception:  # pragma: no cover - best effort
            pass
    keep_mask = None
    if dv is not None:
        from . import dv as dv_mod  # lazy: only tables with deletion vectors need it

        deleted = dv_mod.deleted_row_indexes(storage, table_root, dv)
        keep_mask = dv_mod.keep_mask(deleted, n)
    pvals = _partition_lookup(partition_values or {}, schema, mode)
    arrays, fields = [], []
    for f in wanted:
        if f.name.lower() in part_low:
            arr = partition_column_array(pvals(f), f.type, length=n)
            col = pa.chunked_array([arr], type=arr.type)
        else:
            i = idx[f.name]
            if i is None or raw is None:
                col = pa.chunked_array([pa.nulls(n, f.type.to_arrow())], type=f.type.to_arrow())
            else:
                src = raw.column(file_schema.field(i).name)
                col = _conform_column(src, f.type, mode, f.name)
        if keep_mask is not None:
            col = col.filter(keep_mask)
        arrays.append(col)
        fields.append(pa.field(f.name, col.type, nullable=f.nullable or col.null_count > 0))
    if not fields:  # no column asked for: keep the row count (e.g. count(*))
        rows = n if keep_mask is None else int(pc.sum(keep_mask).as_py() or 0)
        return pa.table({"_": pa.nulls(rows)}).drop(["_"])
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _select_fields(schema: StructType, columns: Sequence[str] | None) -> list[StructField]:
    if columns is None:
        return list(schema.fields)
    out = []
    for c in columns:
        f = schema.find(c)
        if f is None:
            raise InvalidArgumentError(
                f"Column '{c}' is not in the table",
                "the table's columns are " + ", ".join(schema.names),
                "select existing columns",
            )
        out.append(f)
    return out


def _partition_lookup(values: Mapping[str, str | None], schema: StructType, mode: str):
    low = {k.lower(): v for k, v in values.items()}

    def get(f: StructField) -> str | None:
        keys = [f.physical_name, f.name] if mode in ("name", "id") else [f.name]
        for k in keys:
            if k in values:
                return values[k]
        for k in keys:
            if k.lower() in low:
                return low[k.lower()]
        return None

    return get


# --------------------------------------------------------------------------------------------
# many files / snapshots
# --------------------------------------------------------------------------------------------


def _files_rows(files: pa.Table) -> Iterator[tuple[str, dict, Any]]:
    paths = files.column("path").to_pylist()
    pvs = files.column("partition_values").to_pylist() if "partition_values" in files.column_names else [None] * len(paths)
    dvs = files.column("deletion_vector").to_pylist() if "deletion_vector" in files.column_names else [None] * len(paths)
    for p, pv, dv in zip(paths, pvs, dvs):
        if isinstance(pv, list):
            pv = dict(pv)
        yield p, pv or {}, dv


def read_files_batches(storage: Storage, table_root: str, files: pa.Table, schema: StructType,
                       partition_columns: Sequence[str], columns: Sequence[str] | None = None, *,
                       column_mapping_mode: str | None = None) -> Iterator[pa.Table]:
    """Yield one table per file of ``files`` (a table with ``path``, ``partition_values`` and
    optionally ``deletion_vector`` columns, e.g. ``Snapshot.files``)."""
    for p, pv, dv in _files_rows(files):
        yield read_data_file(storage, table_root, p, pv, schema, partition_columns, columns, dv,
                             column_mapping_mode=column_mapping_mode)


def read_snapshot_table(snapshot, columns: Sequence[str] | None = None, *, check_features: bool = True) -> pa.Table:
    """All live rows of a snapshot as one Arrow table (tests, CLI, small tables).

    Runs the reader-feature gate (:func:`features.check_read_supported`) first unless told not to.
    """
    if check_features:
        from . import features  # lazy: owned by the log engineer

        features.check_read_supported(snapshot.protocol, snapshot.metadata)
    schema: StructType = snapshot.schema
    mode = column_mapping_mode_of(schema, snapshot.metadata.configuration or {})
    target = pa.schema([pa.field(f.name, _relaxed(f.type.to_arrow()), nullable=True)
                        for f in _select_fields(schema, columns)])
    parts = [t.cast(target) if not t.schema.equals(target) else t
             for t in read_files_batches(snapshot.storage, snapshot.table_root, snapshot.files, schema,
                                         snapshot.partition_columns, columns, column_mapping_mode=mode)]
    if not parts:
        return target.empty_table()
    return pa.concat_tables(parts)
