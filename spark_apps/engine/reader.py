"""Pure-pyarrow reading of Delta data files into the table schema.

``iter_data_file_batches`` streams one parquet file named by the log as Arrow record batches whose
columns are exactly the table schema's (or the requested subset), in order, with the table's Arrow
types (:meth:`schema.StructType.to_arrow_schema`); ``read_data_file`` is the same stream
concatenated into one table (there is one code path). Streaming reads the file row group by row
group, at most ``batch_rows`` rows at a time, so a reader holds about one row group's column chunks
plus one batch, whatever the file size (files are written up to 128 MiB compressed). Algorithm:

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
   missing fields as nulls and lose unknown ones; list/map elements are conformed in place; a
   variant's value and metadata binaries are taken by name, a shredded variant (``typed_value``)
   is put back together (:func:`.variant.as_variant`).
   A column absent from the file is all null (schema evolution: added columns).
4. Partition columns come from the log's ``partitionValues`` strings, typed with
   :func:`partitions.partition_column_array` (never from directory names); with column mapping
   the map is keyed by physical names.
5. Deletion vectors (``deletion_vector``): the rows whose 0-based physical index *in the file* is
   in the vector are dropped (:mod:`.dv`). The stream counts raw rows across batches and row
   groups, and each batch looks up its index range in the sorted vector (binary search); rows are
   dropped before conforming: a batch with a few deleted rows becomes zero-copy slices around them,
   one with more is filtered through a mask.
6. Output columns: table-schema order, or the order of ``columns`` when given. With no column at
   all (``columns=[]``, e.g. count(*)) the batches have no columns but carry the live row count;
   with only partition columns the file's data pages are not read (the footer's row count is used).
7. Output nullability: a field is nullable when the table says so or when the batch holds nulls in
   it (an old file may hold nulls in a NOT NULL column); ``read_data_file`` unifies this across
   batches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import variant
from .config import TableProperties
from .errors import (
    CorruptDataFileError,
    DataFileMissingError,
    InvalidArgumentError,
    InvalidSchemaError,
    LogCorruptedError,
    StorageError,
)
from .partitions import partition_column_array
from .paths import data_file_uri
from .schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from .storage import Storage, normalized_io_errors

__all__ = [
    "ROW_INDEX",
    "data_file_uri",
    "read_data_file",
    "read_files_batches",
    "read_snapshot_table",
    "conform_array",
    "file_conformer",
    "iter_data_file_batches",
    "batches_to_table",
    "DEFAULT_BATCH_ROWS",
]

_ID = "delta.columnMapping.id"
#: the column :func:`iter_data_file_batches` adds with ``row_index=True``
ROW_INDEX = "__delta_row_index"
DEFAULT_BATCH_ROWS = 65536  # rows per streamed batch: bounds a reader's memory to about one batch


# --------------------------------------------------------------------------------------------
# locating files
# --------------------------------------------------------------------------------------------


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
    if isinstance(target, PrimitiveType) and target.name == "variant":
        # either field order; a shredded variant (variantShredding) put back together
        return variant.as_variant(arr, where)
    if isinstance(target, StructType):
        st = target
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
        if not (
            pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)
        ):
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
        if pa.types.is_string(tgt) and not (
            pa.types.is_string(arr.type)
            or pa.types.is_large_string(arr.type)
            or pa.types.is_binary(arr.type)
            or pa.types.is_large_binary(arr.type)
            or getattr(pa.types, "is_string_view", lambda _: False)(arr.type)
        ):
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
        return pa.struct(
            [pa.field(t.field(i).name, _relaxed(t.field(i).type), nullable=True) for i in range(t.num_fields)]
        )
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _relaxed(t.value_type), nullable=True))
    if pa.types.is_map(t):
        return pa.map_(
            pa.field("key", _relaxed(t.key_type), nullable=False),
            pa.field("value", _relaxed(t.item_type), nullable=True),
        )
    return t


# --------------------------------------------------------------------------------------------
# one file
# --------------------------------------------------------------------------------------------


def open_parquet(storage: Storage, location: str, path_in_log: str) -> pq.ParquetFile:
    try:
        f = storage.open_input_file(location)
    except FileNotFoundError:
        raise missing_data_file(path_in_log, location) from None
    except OSError as e:
        raise _open_error(e, path_in_log, location) from None
    try:
        with normalized_io_errors(location):  # the footer is read here
            return pq.ParquetFile(f, coerce_int96_timestamp_unit="us")
    except BaseException as e:
        f.close()
        if isinstance(e, pa.ArrowInvalid):
            raise CorruptDataFileError(
                f"Data file '{path_in_log}' of the table is not a readable parquet file",
                f"{str(e).splitlines()[0]} (at '{location}')",
                "restore the file from a backup, or remove it from the table (DELETE its rows or RESTORE "
                "an earlier version); it was overwritten or damaged outside Delta",
            ) from None
        if isinstance(e, OSError):
            raise _open_error(e, path_in_log, location) from None
        raise


def _open_error(e: OSError, path_in_log: str, location: str):
    if isinstance(e, FileNotFoundError):
        return missing_data_file(path_in_log, location)
    return StorageError(f"Cannot read data file '{location}'", str(e), "check the storage and retry")


def missing_data_file(path_in_log: str, location: str) -> DataFileMissingError:
    return DataFileMissingError(
        f"Data file '{path_in_log}' referenced by the table's log is missing (looked at '{location}')",
        "it was deleted outside Delta, or removed by VACUUM while this version (time travel to an old "
        "version?) still references it",
        "read a newer version of the table, or restore the file from a backup",
    )


_MISSING = re.compile(r"^Data file '(.+)' referenced by the table's log is missing \(looked at '")


def missing_file_path(error: DataFileMissingError) -> str | None:
    """The log path of the file a :func:`missing_data_file` error names (also after the error crossed
    from an executor, which carries its text only)."""
    m = _MISSING.match(error.problem)
    return m.group(1) if m else None


def _dv_descriptor(dv: Any):
    if dv is None:
        return None
    if isinstance(dv, str):
        dv = json.loads(dv)
    if isinstance(dv, dict) and dv.get("storageType") is None and dv.get("storage_type") is None:
        return None  # an all-null struct row
    return dv


def _deleted_rows(storage: Storage, table_root: str, deletion_vector: Any) -> np.ndarray | None:
    """Sorted uint64 physical row indexes deleted by ``deletion_vector`` (None: no vector)."""
    dv = _dv_descriptor(deletion_vector)
    if dv is None:
        return None
    from . import dv as dv_mod  # lazy: only tables with deletion vectors need it

    rows = np.asarray(dv_mod.deleted_row_indexes(storage, table_root, dv), dtype=np.uint64)
    if len(rows) > 1 and bool((rows[1:] < rows[:-1]).any()):
        rows = np.sort(rows)
    return rows


# A batch with at most this many deleted rows is yielded as zero-copy slices around them (a point
# DELETE/UPDATE leaves one); more are filtered out with a mask (a copy of the batch).
SLICE_MAX_DELETED = 8


def _kept(deleted: np.ndarray, offset: int, n: int) -> tuple[Any, int]:
    """What to keep of the ``n`` rows starting at physical row ``offset``, and their count: None
    (every row: no deletion touches them, found by binary search in the sorted vector), a list of
    ``(start, length)`` slices (few rows deleted) or a boolean mask, False where deleted."""
    lo = int(np.searchsorted(deleted, np.uint64(offset), side="left"))
    hi = int(np.searchsorted(deleted, np.uint64(offset + n), side="left"))
    if hi <= lo:
        return None, n
    gone = (deleted[lo:hi] - np.uint64(offset)).astype(np.int64)
    if hi - lo <= SLICE_MAX_DELETED:
        starts = [0, *(gone + 1).tolist()]
        ends = [*gone.tolist(), n]
        return [(a, b - a) for a, b in zip(starts, ends) if b > a], n - (hi - lo)
    mask = np.ones(n, dtype=bool)
    mask[gone] = False
    # Arrow's bit-packed booleans straight from numpy's packing (pa.array packs bit by bit)
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.BooleanArray.from_buffers(pa.bool_(), n, [None, bits]), n - (hi - lo)


def close_parquet(pf: pq.ParquetFile) -> None:
    try:
        pf.close(force=True)  # also closes the input file we opened
    except Exception:  # pragma: no cover - best effort
        pass


def _empty_batch(rows: int) -> pa.RecordBatch:
    """A batch with no columns and ``rows`` rows (count(*) / partition-less selections)."""
    return pa.record_batch({"_": pa.nulls(rows)}).drop_columns(["_"])


def iter_data_file_batches(
    storage: Storage,
    table_root: str,
    path: str,
    partition_values: Mapping[str, str | None] | None,
    schema: StructType,
    partition_columns: Sequence[str],
    columns: Sequence[str] | None = None,
    deletion_vector: Any = None,
    *,
    column_mapping_mode: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    row_groups: Any = None,
    row_index: bool = False,
    row_tracking: tuple | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream one data file in the table schema, one bounded batch at a time (see module docstring).

    The file's footer, the column selection and the deletion vector are resolved on the call, so a
    missing file (:class:`DataFileMissingError`), an unknown column or a damaged deletion vector
    raise here, before the first batch; the returned iterator then reads the file's row groups in
    order, at most ``batch_rows`` rows per batch. Every batch has the same columns; a field's
    nullability may differ between batches (it is nullable in a batch holding nulls, as in
    :func:`read_data_file`). Batches whose rows are all deleted are skipped, but an iterator always
    yields at least one batch (empty when the file has no live rows), so the schema is known.

    :param path: ``add.path`` exactly as in the log (URI-encoded, relative or absolute).
    :param partition_values: ``add.partitionValues`` (strings; missing key = null).
    :param columns: subset of table columns (any order; names matched case-insensitively); ``[]``
        yields column-less batches that carry the live row count.
    :param deletion_vector: ``add.deletionVector`` (dict with camelCase keys, its JSON, or
        :class:`actions.DeletionVectorDescriptor`), or None.
    :param column_mapping_mode: "none"/"name"/"id"; None infers it from the schema metadata.
    :param batch_rows: most rows per batch (before deletion-vector filtering); bounds memory.
    :param row_groups: ``fn(parquet FileMetaData) -> [bool per row group]``: groups marked False are
        not read (a predicate's pushdown; deletion-vector row indexes stay aligned).
    :param row_index: add the column :data:`ROW_INDEX`: each live row's 0-based physical index in
        the file (what a deletion vector holds)
    :param row_tracking: ``(row id column, row commit version column, baseRowId,
        defaultRowCommitVersion)``: add those two columns (after the table's, before
        :data:`ROW_INDEX`) holding each row's stable row id and row commit version
        (:func:`..row_tracking.stable_ids`)
    """
    if int(batch_rows) < 1:
        raise InvalidArgumentError(
            f"batch_rows must be at least 1, got {batch_rows}",
            "a batch holds at least one row",
            "pass a positive batch_rows",
        )
    batch_rows = int(batch_rows)
    if column_mapping_mode is None:
        mode = TableProperties.of(None).column_mapping_mode_for(schema)
    else:
        mode = str(column_mapping_mode).lower()
    wanted = _select_fields(schema, columns)
    part_low = {c.lower() for c in partition_columns}
    location = data_file_uri(table_root, path)
    pf = open_parquet(storage, location, path)
    try:
        file_schema = pf.schema_arrow
        m = _Match(list(file_schema), mode)
        # per output column: ("part", array) | ("null", arrow type) | ("data", name in the file)
        plan: list[tuple[StructField, str, Any]] = []
        num_rows = pf.metadata.num_rows
        pvals = partition_lookup(partition_values or {}, schema, mode, path)
        part_len = max(0, min(batch_rows, num_rows))
        for f in wanted:
            if f.name.lower() in part_low:
                plan.append((f, "part", partition_column_array(pvals(f), f.type, length=part_len)))
                continue
            i = m.find(f)
            if i is None:
                plan.append((f, "null", f.type.to_arrow()))
            else:
                plan.append((f, "data", file_schema.field(i).name))
        read_names = {src for _, kind, src in plan if kind == "data"}
        if row_tracking is not None:  # the materialized columns the file has (absent: all NULL)
            read_names |= {c for c in row_tracking[:2] if file_schema.get_field_index(c) >= 0}
        read_names = sorted(read_names, key=file_schema.get_field_index)
        deleted = _deleted_rows(storage, table_root, deletion_vector)
    except BaseException:
        close_parquet(pf)
        raise
    keep_groups = row_groups(pf.metadata) if row_groups is not None else None
    return _stream_file(
        pf, path, location, plan, read_names, num_rows, deleted, mode, batch_rows, keep_groups, row_index, row_tracking
    )


def _stream_file(
    pf: pq.ParquetFile,
    path: str,
    location: str,
    plan: list,
    read_names: list[str],
    num_rows: int,
    deleted: np.ndarray | None,
    mode: str,
    batch_rows: int,
    keep_groups: list[bool] | None = None,
    row_index: bool = False,
    row_tracking: tuple | None = None,
) -> Iterator[pa.RecordBatch]:
    """Read, filter (deletion vector, by physical row index) and conform ``pf`` batch by batch.

    Row groups are read one at a time (``iter_batches(row_groups=[g])``) so that parquet's
    pre-buffering, which coalesces the reads of all the row groups it is given, holds one row
    group's column chunks at most.
    """
    yielded = False
    offset = 0  # physical index of the next raw row in the file
    try:
        if keep_groups is not None:  # skipped groups advance the physical row index by their size
            raws = _groups(pf, keep_groups, batch_rows, read_names)
        elif read_names:
            raws = (
                b
                for g in range(pf.metadata.num_row_groups)
                for b in pf.iter_batches(batch_size=batch_rows, row_groups=[g], columns=read_names)
            )
        else:  # no data column: only the row count matters
            raws = (min(batch_rows, num_rows - s) for s in range(0, num_rows, batch_rows))
        try:
            with normalized_io_errors(location):  # a remote file is fetched lazily: it may vanish now
                for raw in raws:
                    if isinstance(raw, _Skip):
                        offset += raw.rows
                        continue
                    n = raw if isinstance(raw, int) else raw.num_rows
                    keep, rows = (None, n) if deleted is None or n == 0 else _kept(deleted, offset, n)
                    wants_index = row_index or row_tracking is not None
                    index = pa.array(np.arange(offset, offset + n, dtype=np.int64)) if wants_index else None
                    offset += n
                    if rows == 0:
                        continue
                    data = None if isinstance(raw, int) else raw  # None: no data column, a row count
                    if isinstance(keep, list):  # zero-copy slices around the few deleted rows
                        pieces = [(_slice(data, a, k), k, _slice(index, a, k)) for a, k in keep]
                    elif keep is not None:  # before conforming: deleted rows cost no casts
                        pieces = [(_filter(data, keep), rows, _filter(index, keep))]
                    else:
                        pieces = [(data, rows, index)]
                    for piece, k, idx in pieces:
                        yielded = True
                        out = _conform_batch(piece, k, plan, mode)
                        if row_tracking is not None:
                            out = _with_row_ids(out, piece, idx, row_tracking)
                        yield out.append_column(ROW_INDEX, idx) if row_index else out
        except FileNotFoundError:
            raise missing_data_file(path, location) from None
        if not yielded:  # empty file, or every row deleted: one empty batch carries the schema
            out = _conform_batch(None, 0, plan, mode)
            if row_tracking is not None:
                out = _with_row_ids(out, None, pa.array([], pa.int64()), row_tracking)
            yield out.append_column(ROW_INDEX, pa.array([], pa.int64())) if row_index else out
    finally:
        close_parquet(pf)


def _with_row_ids(out: pa.RecordBatch, raw, index: pa.Array, row_tracking: tuple) -> pa.RecordBatch:
    """``out`` with the stable row id and row commit version columns of its rows (PROTOCOL.md "Row
    Tracking", reader requirements): the materialized value where the file has one that is not NULL,
    else ``baseRowId`` + the row's physical index, and ``defaultRowCommitVersion``."""
    row_id, version, base, default = row_tracking
    names = raw.schema.names if raw is not None else ()
    index = np.asarray(index.to_numpy(), dtype=np.int64)
    ids = pa.array(index + int(base), pa.int64())
    versions = pa.array(np.full(len(index), int(default), dtype=np.int64), pa.int64())
    if row_id in names:
        ids = pc.coalesce(raw.column(row_id).cast(pa.int64()), ids)
    if version in names:
        versions = pc.coalesce(raw.column(version).cast(pa.int64()), versions)
    return out.append_column(pa.field(row_id, pa.int64()), ids).append_column(pa.field(version, pa.int64()), versions)


def _slice(x, start: int, length: int):
    return None if x is None else x.slice(start, length)


def _filter(x, mask):
    return None if x is None else x.filter(mask)


class _Skip:
    """A row group left unread (its rows only advance the physical row index)."""

    def __init__(self, rows: int):
        self.rows = rows


def _groups(pf: pq.ParquetFile, keep: list[bool], batch_rows: int, read_names: list[str]):
    for g, wanted in enumerate(keep):
        rows = pf.metadata.row_group(g).num_rows
        if not wanted:
            yield _Skip(rows)
        elif read_names:
            yield from pf.iter_batches(batch_size=batch_rows, row_groups=[g], columns=read_names)
        else:
            yield from (min(batch_rows, rows - s) for s in range(0, rows, batch_rows))


def _conform_batch(raw: pa.RecordBatch | None, rows: int, plan: list, mode: str) -> pa.RecordBatch:
    """One output batch of ``rows`` live rows: data columns from ``raw`` (already filtered by the
    deletion vector) conformed, missing ones null, partition columns sliced from the file's
    constant arrays (at least ``rows`` long)."""
    if not plan:
        return _empty_batch(rows)
    arrays, fields = [], []
    for f, kind, src in plan:
        if kind == "part":
            arr = src.slice(0, rows)
        elif kind == "null" or raw is None:
            arr = pa.nulls(rows, f.type.to_arrow() if kind == "data" else src)
        else:
            arr = conform_array(raw.column(src), f.type, mode, f.name)
        arrays.append(arr)
        fields.append(pa.field(f.name, arr.type, nullable=f.nullable or arr.null_count > 0))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def file_conformer(fields: Sequence[StructField], mode: str = "none") -> Callable[[pa.Table], pa.Table]:
    """For data files read whole by pyarrow (each with its own columns and types, as its writer left
    them): a function giving a file's table as the table's ``fields``, columns matched and conformed
    batch by batch as :func:`iter_data_file_batches` does (a zone-less timestamp read as UTC,
    nanoseconds as microseconds, a narrower integer widened, names case-insensitive), a column the
    file lacks all NULL. Files of different writers then share one schema and can be combined. A
    file already in the table's columns and types (as we write them) is returned as it is."""
    names = [f.name for f in fields]
    types = [f.type.to_arrow() for f in fields]

    def conform(raw: pa.Table) -> pa.Table:
        if raw.schema.names == names and raw.schema.types == types:
            return raw
        m = _Match(list(raw.schema), mode)
        plan = []
        for f in fields:
            i = m.find(f)
            plan.append((f, "null", f.type.to_arrow()) if i is None else (f, "data", raw.schema.field(i).name))
        batches = [_conform_batch(b, b.num_rows, plan, mode) for b in raw.to_batches()]
        return batches_to_table(batches or [_conform_batch(None, 0, plan, mode)])

    return conform


def read_data_file(
    storage: Storage,
    table_root: str,
    path: str,
    partition_values: Mapping[str, str | None] | None,
    schema: StructType,
    partition_columns: Sequence[str],
    columns: Sequence[str] | None = None,
    deletion_vector: Any = None,
    *,
    column_mapping_mode: str | None = None,
    row_tracking: tuple | None = None,
) -> pa.Table:
    """Read one data file into the table schema: all of :func:`iter_data_file_batches`' batches as
    one table (field nullability unified: nullable when any batch holds nulls).

    :param path: ``add.path`` exactly as in the log (URI-encoded, relative or absolute).
    :param partition_values: ``add.partitionValues`` (strings; missing key = null).
    :param columns: subset of table columns (any order; names matched case-insensitively).
    :param deletion_vector: ``add.deletionVector`` (dict with camelCase keys or
        :class:`actions.DeletionVectorDescriptor`), or None.
    :param column_mapping_mode: "none"/"name"/"id"; None infers it from the schema metadata.
    :param row_tracking: as for :func:`iter_data_file_batches`
    """
    batches = list(
        iter_data_file_batches(
            storage,
            table_root,
            path,
            partition_values,
            schema,
            partition_columns,
            columns,
            deletion_vector,
            column_mapping_mode=column_mapping_mode,
            row_tracking=row_tracking,
        )
    )
    return batches_to_table(batches)


def batches_to_table(batches: Sequence[pa.RecordBatch]) -> pa.Table:
    """Concatenate one file's batches (:func:`iter_data_file_batches`) into a table, unifying the
    data-dependent nullability of fields (top-level and nested) across batches."""
    schemas = [b.schema for b in batches]
    if all(s.equals(schemas[0]) for s in schemas[1:]):
        return pa.Table.from_batches(batches, schema=schemas[0])
    target = pa.unify_schemas(schemas)
    return pa.Table.from_batches([b if b.schema.equals(target) else b.cast(target) for b in batches], schema=target)


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


def partition_lookup(values: Mapping[str, str | None], schema: StructType, mode: str, path: str = "?"):
    """The file's value of a partition column; a partition column the file's ``partitionValues``
    does not name at all is a corrupt log (a NULL value is spelled as a key with a null value)."""
    low = {k.lower(): v for k, v in values.items()}

    def get(f: StructField) -> str | None:
        keys = [f.physical_name, f.name] if mode in ("name", "id") else [f.name]
        for k in keys:
            if k in values:
                return values[k]
        for k in keys:
            if k.lower() in low:
                return low[k.lower()]
        raise LogCorruptedError(
            f"The log's entry for data file '{path}' has no value for partition column '{f.name}'",
            f"its partitionValues name only {sorted(values) or 'nothing'}",
            "repair the log: every add must carry every partition column (null as a null value)",
        )

    return get


# --------------------------------------------------------------------------------------------
# many files / snapshots
# --------------------------------------------------------------------------------------------


def _files_rows(files: pa.Table) -> Iterator[tuple[str, dict, Any]]:
    paths = files.column("path").to_pylist()
    pvs = (
        files.column("partition_values").to_pylist()
        if "partition_values" in files.column_names
        else [None] * len(paths)
    )
    dvs = (
        files.column("deletion_vector").to_pylist() if "deletion_vector" in files.column_names else [None] * len(paths)
    )
    for p, pv, dv in zip(paths, pvs, dvs):
        if isinstance(pv, list):
            pv = dict(pv)
        yield p, pv or {}, dv


def read_files_batches(
    storage: Storage,
    table_root: str,
    files: pa.Table,
    schema: StructType,
    partition_columns: Sequence[str],
    columns: Sequence[str] | None = None,
    *,
    column_mapping_mode: str | None = None,
) -> Iterator[pa.Table]:
    """Yield one table per file of ``files`` (a table with ``path``, ``partition_values`` and
    optionally ``deletion_vector`` columns, e.g. ``Snapshot.files``)."""
    for p, pv, dv in _files_rows(files):
        yield read_data_file(
            storage, table_root, p, pv, schema, partition_columns, columns, dv, column_mapping_mode=column_mapping_mode
        )


def read_snapshot_table(snapshot, columns: Sequence[str] | None = None, *, check_features: bool = True) -> pa.Table:
    """All live rows of a snapshot as one Arrow table (tests, CLI, small tables).

    Runs the reader-feature gate (:func:`features.check_read_supported`) first unless told not to.
    """
    if check_features:
        from . import features  # lazy: reading one file needs no feature gate

        features.check_read_supported(snapshot.protocol, snapshot.metadata)
    schema: StructType = snapshot.schema
    mode = snapshot.properties.column_mapping_mode_for(schema)
    target = pa.schema(
        [pa.field(f.name, _relaxed(f.type.to_arrow()), nullable=True) for f in _select_fields(schema, columns)]
    )
    parts = [
        t.cast(target) if not t.schema.equals(target) else t
        for t in read_files_batches(
            snapshot.storage,
            snapshot.table_root,
            snapshot.files,
            schema,
            snapshot.partition_columns,
            columns,
            column_mapping_mode=mode,
        )
    ]
    if not parts:
        return target.empty_table()
    return pa.concat_tables(parts)
