"""Checkpoint writer: classic V1 checkpoints (single file, or multi-part above a size threshold).

Rules (PROTOCOL.md "Checkpoints", "Checkpoint Schema"; delta-spark's ``Checkpoints.scala``):

* Content of the checkpoint of version ``v``, one row per action, one nullable struct column per
  action type (``txn``, ``add``, ``remove``, ``metaData``, ``protocol``, ``domainMetadata``):
  the protocol, the metadata, every live add (``snapshot.files``), the *unexpired* tombstones
  (``deletionTimestamp > now - delta.deletedFileRetentionDuration``), the txns not expired by
  ``delta.setTransactionRetentionDuration`` (``lastUpdated``), the non-removed domain metadata.
  Never commitInfo or cdc. As in delta-spark, file actions are written with ``dataChange=false``.
* ``add.stats`` (JSON string) is written when ``delta.checkpoint.writeStatsAsJson`` (default
  true); ``add.stats_parsed`` and ``add.partitionValues_parsed`` (typed structs) when
  ``delta.checkpoint.writeStatsAsStruct=true``. Removes carry no stats/tags.
* Built vectorised from ``snapshot.files`` / ``snapshot.tombstones`` (pyarrow tables): no Python
  object per file.
* Multi-part: more than ``part_size`` actions -> ``ceil(n / part_size)`` parts
  ``<v>.checkpoint.<i:010d>.<n:010d>.parquet``. Non-file actions go to part 1; file actions are
  sorted by path and split into contiguous ranges, so every path sits in exactly one part (the
  spec asks for Spark hash partitioning by path; readers do not depend on which part a path is in).
* Crash safety: each part is serialised in memory and stored with one atomic whole-file write
  (``Storage.write_bytes(overwrite=True)``: temp file + rename locally), so a part file exists
  complete or not at all; an incomplete multi-part set is ignored by readers; ``_last_checkpoint``
  is written last, and never moved back to an older version.
* Written only for a version whose commit exists (post-commit or explicit ``DeltaTable.checkpoint()``),
  and only for tables whose writer features this engine implements (the feature gate).
* Tables with the ``v2Checkpoint`` feature get V2 content, never multi-part. With
  ``delta.checkpointPolicy=v2`` (as delta-spark writes it; PROTOCOL.md "V2 Checkpoint"): sidecar
  parquet files ``_delta_log/_sidecars/<v>.checkpoint.<i:010d>.<n:010d>.<uuid>.parquet`` (columns
  ``add``, ``remove``: every file action, ``part_size`` per sidecar), then the top-level
  ``<v>.checkpoint.<uuid>.parquet`` with the non-file actions, one ``checkpointMetadata`` and one
  ``sidecar`` action per sidecar; both written put-if-absent, sidecars first, so a crash leaves
  at most unreferenced sidecars (readers never list ``_sidecars``; log cleanup removes them).
  ``_last_checkpoint`` then carries ``v2Checkpoint`` {path, sizeInBytes, modificationTime,
  sidecarFiles}. Otherwise the same rows plus one ``checkpointMetadata`` go into a classic-named
  file (allowed by the spec).
"""

from __future__ import annotations

import logging
import math
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions import snake_case
from ..config import TableProperties
from .file_actions import DV_TYPE, STRING_MAP
from .listing import SIDECAR_DIR_NAME, classic_checkpoint_name, log_dir_of, multipart_checkpoint_name

log = logging.getLogger(__name__)

DEFAULT_PART_SIZE = 5_000_000  # actions per part (delta-spark spark.databricks.delta.checkpoint.partSize)

TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])

FORMAT_TYPE = pa.struct([("provider", pa.string()), ("options", STRING_MAP)])

METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", FORMAT_TYPE),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)

PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)

DOMAIN_TYPE = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])

# (wire name, arrow type, snake-case source column)
ADD_FIELDS = [
    ("path", pa.string(), "path"),
    ("partitionValues", STRING_MAP, "partition_values"),
    ("size", pa.int64(), "size"),
    ("modificationTime", pa.int64(), "modification_time"),
    ("dataChange", pa.bool_(), "data_change"),
    ("tags", STRING_MAP, "tags"),
    ("deletionVector", DV_TYPE, "deletion_vector"),
    ("baseRowId", pa.int64(), "base_row_id"),
    ("defaultRowCommitVersion", pa.int64(), "default_row_commit_version"),
    ("clusteringProvider", pa.string(), "clustering_provider"),
    ("stats", pa.string(), "stats"),
]

REMOVE_FIELDS = [
    ("path", pa.string(), "path"),
    ("deletionTimestamp", pa.int64(), "deletion_timestamp"),
    ("dataChange", pa.bool_(), "data_change"),
    ("extendedFileMetadata", pa.bool_(), "extended_file_metadata"),
    ("partitionValues", STRING_MAP, "partition_values"),
    ("size", pa.int64(), "size"),
    ("deletionVector", DV_TYPE, "deletion_vector"),
    ("baseRowId", pa.int64(), "base_row_id"),
    ("defaultRowCommitVersion", pa.int64(), "default_row_commit_version"),
]

ADD_TYPE = pa.struct([(n, t) for n, t, _ in ADD_FIELDS])
REMOVE_TYPE = pa.struct([(n, t) for n, t, _ in REMOVE_FIELDS])

CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])

SIDECAR_TYPE = pa.struct(
    [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", STRING_MAP)]
)

COLUMN_ORDER = ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]


def checkpoint_schema(add_type: pa.DataType = ADD_TYPE, *, v2: bool = False) -> pa.Schema:
    """The parquet schema of a checkpoint (``add_type`` may carry the ``*_parsed`` fields); ``v2``
    adds the ``checkpointMetadata`` column of V2 content."""
    types = {
        "txn": TXN_TYPE,
        "add": add_type,
        "remove": REMOVE_TYPE,
        "metaData": METADATA_TYPE,
        "protocol": PROTOCOL_TYPE,
        "domainMetadata": DOMAIN_TYPE,
        "checkpointMetadata": CHECKPOINT_METADATA_TYPE,
    }
    cols = COLUMN_ORDER + (["checkpointMetadata"] if v2 else [])
    return pa.schema([pa.field(c, types[c], nullable=True) for c in cols])


def uses_v2_checkpoints(protocol) -> bool:
    """True when the table has the ``v2Checkpoint`` feature (checkpoints must carry V2 content)."""
    return "v2Checkpoint" in set(protocol.writer_features or ()) | set(protocol.reader_features or ())


def writes_sidecars(snapshot) -> bool:
    """True when checkpoints of ``snapshot`` are UUID-named V2 checkpoints with sidecars: the
    ``v2Checkpoint`` feature and ``delta.checkpointPolicy=v2``."""
    return uses_v2_checkpoints(snapshot.protocol) and _properties(snapshot).checkpoint_policy == "v2"


# --------------------------------------------------------------------------------------------
# vectorised column conversion
# --------------------------------------------------------------------------------------------


def _conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast ``arr`` to ``target``, matching struct children by camelCase or snake_case name."""
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        names = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = []
        for f in target:
            idx = names.get(f.name, names.get(snake_case(f.name)))
            if idx is None:
                children.append(pa.nulls(len(arr), f.type))
            else:
                children.append(_conform(arr.field(idx), f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=arr.is_null())
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    return arr.cast(target)


def _column(table: pa.Table, source: str, wire: str, target: pa.DataType) -> pa.Array:
    for name in (source, wire):
        if name in table.column_names:
            col = table.column(name)
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            return _conform(arr, target)
    return pa.nulls(table.num_rows, target)


def _struct_from(
    table: pa.Table, fields: list, overrides: dict | None = None, extra: list[tuple[str, pa.Array]] | None = None
) -> pa.StructArray:
    overrides = overrides or {}
    arrays, out_fields = [], []
    for wire, typ, source in fields:
        arr = overrides[wire] if wire in overrides else _column(table, source, wire, typ)
        arrays.append(arr)
        out_fields.append(pa.field(wire, typ))
    for name, arr in extra or []:
        arrays.append(arr)
        out_fields.append(pa.field(name, arr.type))
    return pa.StructArray.from_arrays(arrays, fields=out_fields)


def _falses(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(False, pa.bool_()), n) if n else pa.array([], pa.bool_())


def _rows(n: int, column: str, values: pa.Array, schema: pa.Schema) -> pa.Table:
    cols = []
    for f in schema:
        cols.append(values if f.name == column else pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


# --------------------------------------------------------------------------------------------
# typed stats / partition values (writeStatsAsStruct)
# --------------------------------------------------------------------------------------------


def _stats_type(schema, partition_columns: list[str]) -> pa.DataType | None:
    """struct<numRecords, minValues, maxValues, nullCount, tightBounds> for the data columns."""

    def minmax(t: pa.DataType) -> pa.DataType | None:
        if pa.types.is_struct(t):
            kids = [pa.field(f.name, mt) for f in t if (mt := minmax(f.type)) is not None]
            return pa.struct(kids) if kids else None
        if (
            pa.types.is_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_decimal(t)
            or pa.types.is_string(t)
            or pa.types.is_date(t)
            or pa.types.is_timestamp(t)
        ):
            return t
        return None

    def nulls(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, nulls(f.type)) for f in t])
        return pa.int64()

    parts = set(partition_columns)
    data_fields = [f for f in schema.to_arrow_schema() if f.name not in parts]
    mm = [pa.field(f.name, t) for f in data_fields if (t := minmax(f.type)) is not None]
    nc = [pa.field(f.name, nulls(f.type)) for f in data_fields]
    fields = [pa.field("numRecords", pa.int64())]
    if mm:
        fields += [pa.field("minValues", pa.struct(mm)), pa.field("maxValues", pa.struct(mm))]
    if nc:
        fields.append(pa.field("nullCount", pa.struct(nc)))
    fields.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(fields)


def _parse_stats(stats: pa.Array, stats_type: pa.DataType) -> pa.Array:
    """JSON stats strings -> typed struct, vectorised with pyarrow's JSON reader."""
    import pyarrow.json as pj

    n = len(stats)
    if n == 0:
        return pa.nulls(0, stats_type)
    filled = pc.fill_null(stats.cast(pa.large_string()), "{}")
    filled = pc.if_else(pc.equal(pc.utf8_trim_whitespace(filled), ""), "{}", filled)
    joined = pc.binary_join(
        pa.LargeListArray.from_arrays(pa.array([0, n], pa.int64()), filled), pa.scalar("\n", pa.large_string())
    )
    data = joined[0].as_buffer()
    schema = pa.schema([pa.field(f.name, _dates_as_strings(f.type)) for f in stats_type])
    table = pj.read_json(
        pa.BufferReader(data),
        read_options=pj.ReadOptions(block_size=max(1 << 20, data.size + 1)),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    if table.num_rows != n:
        raise ValueError(f"parsed {table.num_rows} stats rows for {n} files")
    arrays = [table.column(f.name).combine_chunks().cast(f.type) for f in stats_type]
    return pa.StructArray.from_arrays(arrays, fields=list(stats_type), mask=stats.is_null())


def _dates_as_strings(t: pa.DataType) -> pa.DataType:
    """``t`` with date leaves as strings: pyarrow's JSON reader does not parse "YYYY-MM-DD" into a
    date32 (a cast does, afterwards)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _dates_as_strings(f.type)) for f in t])
    return pa.string() if pa.types.is_date(t) else t


def _parse_partition_values(pv: pa.Array, schema, partition_columns: list[str]) -> pa.Array | None:
    """map<string,string> partition values -> struct of typed partition columns."""
    from ..partitions import partition_column_array

    by_name = {f.name: f for f in schema}
    children, fields = [], []
    for col in partition_columns:
        sf = by_name.get(col)
        t = sf.type.to_arrow() if sf is not None else pa.string()
        raw = pc.map_lookup(pv, pa.scalar(col, pa.string()), "first")
        raw = pc.if_else(pc.equal(raw, ""), pa.scalar(None, pa.string()), raw)
        if sf is None:  # a partition column missing from the schema: no typed copy
            return None
        typed = partition_column_array(raw, sf.type)
        children.append(typed)
        fields.append(pa.field(col, t))
    return pa.StructArray.from_arrays(children, fields=fields) if fields else None


def _properties(snapshot) -> TableProperties:
    """The snapshot's table properties (cached on a Snapshot; parsed from ``.metadata`` otherwise)."""
    return TableProperties.of(getattr(snapshot, "properties", None) or snapshot.metadata)


def _add_parsed_fields(files: pa.Table, snapshot, want_struct: bool) -> list[tuple[str, pa.Array]]:
    if not want_struct:
        return []
    schema = getattr(snapshot, "schema", None)
    if schema is None:
        try:
            from ..schema import parse_schema

            schema = parse_schema(snapshot.metadata.schema_string)
        except Exception:
            return []
    part_cols = list(snapshot.metadata.partition_columns or [])
    if _properties(snapshot).column_mapping_mode != "none":
        # *_parsed must use physical names with column mapping: not written (they are optional)
        return []
    extra: list[tuple[str, pa.Array]] = []
    if part_cols:
        try:
            pv = _column(files, "partition_values", "partitionValues", STRING_MAP)
            parsed = _parse_partition_values(pv, schema, part_cols)
        except Exception as e:
            parsed = None
            log.warning("checkpoint: not writing partitionValues_parsed: %s", e)
        if parsed is None:  # required with stats_parsed on a partitioned table: write neither
            return []
        extra.append(("partitionValues_parsed", parsed))
    try:
        st = _stats_type(schema, part_cols)
        if st is not None:
            stats = _column(files, "stats", "stats", pa.string())
            extra.append(("stats_parsed", _parse_stats(stats, st)))
    except Exception as e:
        log.warning("checkpoint: not writing stats_parsed: %s", e)
    return extra


# --------------------------------------------------------------------------------------------
# building and writing
# --------------------------------------------------------------------------------------------


def _non_file_rows(snapshot, now_ms: int, schema: pa.Schema) -> tuple[list[pa.Table], dict]:
    md, proto = snapshot.metadata, snapshot.protocol
    tables = []
    p = proto
    tables.append(
        _rows(
            1,
            "protocol",
            pa.array(
                [
                    {
                        "minReaderVersion": p.min_reader_version,
                        "minWriterVersion": p.min_writer_version,
                        "readerFeatures": list(p.reader_features) if p.reader_features is not None else None,
                        "writerFeatures": list(p.writer_features) if p.writer_features is not None else None,
                    }
                ],
                PROTOCOL_TYPE,
            ),
            schema,
        )
    )
    fmt = md.format
    tables.append(
        _rows(
            1,
            "metaData",
            pa.array(
                [
                    {
                        "id": md.id,
                        "name": md.name,
                        "description": md.description,
                        "format": {
                            "provider": getattr(fmt, "provider", "parquet") or "parquet",
                            "options": list((getattr(fmt, "options", None) or {}).items()),
                        },
                        "schemaString": md.schema_string,
                        "partitionColumns": list(md.partition_columns or []),
                        "configuration": [
                            (k, None if v is None else str(v)) for k, v in (md.configuration or {}).items()
                        ],
                        "createdTime": md.created_time,
                    }
                ],
                METADATA_TYPE,
            ),
            schema,
        )
    )

    retention = _properties(snapshot).set_transaction_retention_ms
    txns = list((getattr(snapshot, "set_transactions", None) or {}).values())
    kept = [t for t in txns if retention is None or t.last_updated is None or t.last_updated >= now_ms - retention]
    if kept:
        tables.append(
            _rows(
                len(kept),
                "txn",
                pa.array(
                    [{"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated} for t in kept], TXN_TYPE
                ),
                schema,
            )
        )
    domains = [d for d in (getattr(snapshot, "domain_metadata", None) or {}).values() if not d.removed]
    if domains:
        tables.append(
            _rows(
                len(domains),
                "domainMetadata",
                pa.array(
                    [{"domain": d.domain, "configuration": d.configuration, "removed": False} for d in domains],
                    DOMAIN_TYPE,
                ),
                schema,
            )
        )
    return tables, {
        "num_txns": len(kept),
        "num_expired_txns": len(txns) - len(kept),
        "num_domain_metadata": len(domains),
    }


def _tombstones(snapshot, now_ms: int) -> tuple[pa.Table, int]:
    tomb = getattr(snapshot, "tombstones", None)
    if tomb is None or tomb.num_rows == 0:
        return pa.table({"path": pa.array([], pa.string())}), 0
    cutoff = now_ms - _properties(snapshot).deleted_file_retention_ms
    col = "deletion_timestamp" if "deletion_timestamp" in tomb.column_names else "deletionTimestamp"
    if col in tomb.column_names:
        # a missing deletionTimestamp counts as 0 (delta-spark: delTimestamp defaults to 0 -> expired)
        ts = pc.fill_null(tomb.column(col), 0)
        keep = pc.greater(ts, cutoff)
        kept = tomb.filter(keep)
    else:
        kept = tomb
    return kept, tomb.num_rows - kept.num_rows


def build_checkpoint_table(snapshot, *, now_ms: int | None = None, sort_by_path: bool = False) -> tuple[pa.Table, dict]:
    """The checkpoint content of ``snapshot`` as one arrow table (non-file actions first, then
    adds and removes; sorted by path when ``sort_by_path``, as multi-part splitting needs), plus counts."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    files: pa.Table = snapshot.files
    n_add = files.num_rows

    props = _properties(snapshot)
    extra = _add_parsed_fields(files, snapshot, props.write_stats_as_struct)
    overrides = {"dataChange": _falses(n_add)}
    if not props.write_stats_as_json:
        overrides["stats"] = pa.nulls(n_add, pa.string())
    add_struct = _struct_from(files, ADD_FIELDS, overrides, extra)
    v2 = uses_v2_checkpoints(snapshot.protocol)
    schema = checkpoint_schema(add_struct.type, v2=v2)

    tables, counts = _non_file_rows(snapshot, now_ms, schema)
    if v2:  # V2 content in a classic-named file: exactly one checkpointMetadata, everything inline
        tables.append(
            _rows(
                1,
                "checkpointMetadata",
                pa.array([{"version": snapshot.version, "tags": None}], CHECKPOINT_METADATA_TYPE),
                schema,
            )
        )
    kept_tomb, expired = _tombstones(snapshot, now_ms)
    n_rem = kept_tomb.num_rows
    rem_struct = _struct_from(kept_tomb, REMOVE_FIELDS, {"dataChange": _falses(n_rem)})

    file_rows = pa.concat_tables([_rows(n_add, "add", add_struct, schema), _rows(n_rem, "remove", rem_struct, schema)])
    if sort_by_path and file_rows.num_rows > 1:
        key = pa.concat_arrays([add_struct.field("path"), rem_struct.field("path")])
        file_rows = file_rows.take(pc.sort_indices(key))
    table = pa.concat_tables(tables + [file_rows])
    counts.update(
        {
            "num_add_files": n_add,
            "num_remove_files": n_rem,
            "num_expired_tombstones": expired,
            "num_non_file_actions": sum(t.num_rows for t in tables),
        }
    )
    return table, counts


def _sort_file_rows(table: pa.Table, num_non_file: int) -> pa.Table:
    head, rest = table.slice(0, num_non_file), table.slice(num_non_file)
    key = pc.coalesce(pc.struct_field(rest.column("add"), "path"), pc.struct_field(rest.column("remove"), "path"))
    return pa.concat_tables([head, rest.take(pc.sort_indices(key))])


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue().to_pybytes()


def write_checkpoint(
    storage,
    table_root: str,
    snapshot,
    *,
    now_ms: int | None = None,
    part_size: int | None = None,
    update_last_checkpoint: bool = True,
    check_features: bool = True,
) -> dict:
    """Write the V1 checkpoint of ``snapshot.version`` and then ``_last_checkpoint``.

    :param storage: table storage
    :param table_root: table location
    :param snapshot: the snapshot to checkpoint (its commit must exist)
    :param now_ms: "now" for tombstone / txn expiry (default: the clock)
    :param part_size: max actions per part; more -> multi-part (default 5,000,000)
    :param update_last_checkpoint: write ``_last_checkpoint`` (unless it names a newer checkpoint)
    :param check_features: refuse tables with writer features this engine does not implement
        (:func:`features.check_write_supported`); a checkpoint is a write of the log
    :returns: metrics: ``version``, ``num_actions``, ``num_parts``, ``size_in_bytes``,
        ``num_add_files``, ``num_remove_files``, ``num_expired_tombstones``, ``num_txns``,
        ``num_expired_txns``, ``num_domain_metadata``, ``paths``, ``last_checkpoint_updated``
    """
    from .last_checkpoint import read_last_checkpoint, write_last_checkpoint

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    part_size = DEFAULT_PART_SIZE if part_size is None else int(part_size)
    if part_size < 1:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"part_size={part_size} is not positive", None, "pass part_size >= 1")
    if check_features:
        from ..features import check_write_supported

        check_write_supported(snapshot.protocol, snapshot.metadata)
    version = snapshot.version
    log_dir = log_dir_of(storage, table_root)
    table, counts = build_checkpoint_table(snapshot, now_ms=now_ms)
    n = table.num_rows
    # multi-part checkpoints are forbidden with v2Checkpoint
    num_parts = 1 if uses_v2_checkpoints(snapshot.protocol) else max(1, math.ceil(n / part_size))
    if num_parts > 1:  # contiguous path ranges per part
        table = _sort_file_rows(table, counts["num_non_file_actions"])
    paths: list[str] = []
    total_bytes = 0
    v2_info = None
    if writes_sidecars(snapshot):
        n, total_bytes, v2_info = _write_v2(storage, log_dir, version, table, counts, part_size, paths)
        counts["num_sidecars"] = len(v2_info["sidecarFiles"])
    elif num_parts == 1:
        data = _parquet_bytes(table)
        path = storage.join(log_dir, classic_checkpoint_name(version))
        storage.write_bytes(path, data, overwrite=True)
        paths.append(path)
        total_bytes += len(data)
    else:
        for i in range(num_parts):
            part = table.slice(i * part_size, part_size)
            data = _parquet_bytes(part)
            path = storage.join(log_dir, multipart_checkpoint_name(version, i + 1, num_parts))
            storage.write_bytes(path, data, overwrite=True)
            paths.append(path)
            total_bytes += len(data)

    info: dict = {"version": version, "size": n}
    if num_parts > 1:
        info["parts"] = num_parts
    info["sizeInBytes"] = total_bytes
    info["numOfAddFiles"] = counts["num_add_files"]
    if v2_info is not None:
        info["v2Checkpoint"] = v2_info
    updated = False
    if update_last_checkpoint:
        current = read_last_checkpoint(storage, log_dir)
        if current is None or int(current.get("version", -1)) <= version:
            write_last_checkpoint(storage, log_dir, info)
            updated = True
    metrics = {"version": version, "num_actions": n, "num_parts": num_parts, "size_in_bytes": total_bytes}
    metrics.update(counts)
    metrics["paths"] = paths
    metrics["last_checkpoint_updated"] = updated
    return metrics


def uuid_checkpoint_name(version: int, fmt: str = "parquet") -> str:
    """``<v:020d>.checkpoint.<uuid>.<fmt>``: a fresh name for a V2 top-level checkpoint."""
    return f"{version:020d}.checkpoint.{uuid.uuid4()}.{fmt}"


def put_new(storage, path: str, data: bytes, now_ms: int) -> int:
    """Write ``data`` put-if-absent; its modification time (``now_ms`` if the store gives none)."""
    storage.write_bytes(path, data, overwrite=False)
    try:
        return storage.file_info(path).mtime_ms or now_ms
    except (OSError, NotImplementedError):
        return now_ms


def _write_v2(storage, log_dir: str, version: int, table: pa.Table, counts: dict, part_size: int, paths: list):
    """Write the sidecars and then the top-level UUID checkpoint of ``table`` (non-file rows first).

    :returns: ``(number of actions, bytes written, the _last_checkpoint v2Checkpoint object)``
    """
    now_ms = int(time.time() * 1000)
    nf = counts["num_non_file_actions"]
    head, files = table.slice(0, nf), table.slice(nf).select(["add", "remove"])
    n_side = math.ceil(files.num_rows / part_size) if files.num_rows else 0
    sidecars: list[dict] = []
    total = 0
    for i in range(n_side):
        name = f"{version:020d}.checkpoint.{i + 1:010d}.{n_side:010d}.{uuid.uuid4()}.parquet"
        data = _parquet_bytes(files.slice(i * part_size, part_size))
        path = storage.join(storage.join(log_dir, SIDECAR_DIR_NAME), name)
        mtime = put_new(storage, path, data, now_ms)
        paths.append(path)
        total += len(data)
        sidecars.append({"path": name, "sizeInBytes": len(data), "modificationTime": mtime})
    schema = head.schema.append(pa.field("sidecar", SIDECAR_TYPE, nullable=True))
    head = head.append_column("sidecar", pa.nulls(head.num_rows, SIDECAR_TYPE))
    side_rows = _rows(
        len(sidecars), "sidecar", pa.array([dict(sc, tags=None) for sc in sidecars], SIDECAR_TYPE), schema
    )
    top = pa.concat_tables([head, side_rows])
    name = uuid_checkpoint_name(version)
    data = _parquet_bytes(top)
    mtime = put_new(storage, storage.join(log_dir, name), data, now_ms)
    paths.append(storage.join(log_dir, name))
    total += len(data)
    v2 = {"path": name, "sizeInBytes": len(data), "modificationTime": mtime, "sidecarFiles": sidecars}
    return top.num_rows + files.num_rows, total, v2


def checkpoint_after_commit(
    storage,
    table_root: str,
    version: int,
    *,
    now_ms: int | None = None,
    part_size: int | None = None,
    listing=None,
) -> tuple[dict, dict | None]:
    """Post-commit hook: checkpoint ``version`` and, if enabled, clean up expired log files.

    :param listing: the committer's listing of the log up to ``version`` (no second listing), if any
    :returns: ``(checkpoint metrics, cleanup metrics or None)``
    """
    from .cleanup import cleanup_expired_logs
    from .snapshot import load_snapshot

    snap = load_snapshot(storage, table_root, version=version, listing=listing)
    metrics = write_checkpoint(storage, table_root, snap, now_ms=now_ms, part_size=part_size)
    cleanup = None
    if snap.properties.enable_expired_log_cleanup:
        cleanup = cleanup_expired_logs(storage, table_root, snap, now_ms=now_ms)
    return metrics, cleanup
