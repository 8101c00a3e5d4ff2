"""DataFrame -> Delta data files + AddFile actions, without Spark's parquet writer.

Algorithm (see docs/design.md, "Why the data plane uses mapInArrow"):

1. The driver conforms the DataFrame to the table schema (:func:`conform_dataframe`): columns in
   table order, types cast to the table's Spark types, missing nullable columns filled with nulls.
   Schema enforcement itself (:func:`spark_apps.engine.schema.check_write_compatible`) runs before
   this, in the command, so a mismatch fails before any file is written.
2. Partitioned tables: ``repartition(*partition_columns)`` then ``sortWithinPartitions`` on them, so
   every partition value lands in ONE task and arrives there as one contiguous run of rows: a task
   keeps at most one parquet file open at a time (bounded memory).
3. ``df.mapInArrow(fn, "add_json string, num_rows long")`` (public API; works over Spark Connect):
   on the executor, ``fn`` receives Arrow batches and writes parquet files itself with pyarrow,
   through ``storage_for(table_uri).filesystem`` (any ``pyarrow.fs``):

   * names ``[<hive partition dirs>/]part-<5-digit task partition id>-<uuid4>-c000.snappy.parquet``;
     partition directories come from :func:`spark_apps.engine.partitions.partition_path`
     (hive escaping) and ``add.path`` is URI-encoded with ``encode_add_path``;
   * partition columns are not stored in the files (Delta convention): their values go to
     ``add.partitionValues``, serialised as the protocol says;
   * rows are buffered into row groups of about ``row_group_bytes`` Arrow bytes; a file is closed and a
     new one opened when it would pass ``target_file_size`` (estimated from the compression ratio seen
     so far, so even a tiny target yields several files);
   * per-file stats (numRecords, minValues, maxValues, nullCount) are gathered with
     :class:`spark_apps.engine.stats.StatsCollector` from the very batches being written (no second pass);
   * NOT NULL columns are checked on the batches; a violation fails the job before any commit
     (executor DeltaErrors come back to the driver as the same class, see session.guard_executor);
   * one output row per closed file: the AddFile JSON (size from the written file,
     modificationTime = close time, dataChange=true, stats) and its row count.
4. The driver collects those rows (one small row per file) and returns AddFile actions. Nothing is
   committed here: a failed job leaves only orphan data files, which VACUUM removes later.
   Spark never writes ``_delta_log/``.

Timestamps: the session runs with ``spark.sql.session.timeZone=UTC`` (see session.py), so Spark hands
``timestamp`` columns over as ``timestamp[us, tz=UTC]`` (UTC-adjusted micros) and ``timestamp_ntz`` as
``timestamp[us]``; they are written as parquet INT64 TIMESTAMP(MICROS) with isAdjustedToUTC true/false.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs

from ..actions import AddFile
from .session import delta_error_from, guard_executor

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
OUTPUT_SCHEMA = "add_json string, num_rows long"


@dataclass(frozen=True)
class WriteSpec:
    """Everything an executor needs to write a table's data files (small and picklable).

    :param table_uri: normalised table root
    :param schema_json: the table's Delta schema JSON (string)
    :param partition_columns: partition column names, in table order
    :param configuration: table properties (stats settings are read from them)
    :param target_file_size: roll to a new file once a file reaches about this many bytes
    :param row_group_bytes: Arrow bytes buffered per parquet row group
    """

    table_uri: str
    schema_json: str
    partition_columns: tuple = ()
    configuration: dict = field(default_factory=dict)
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES


@dataclass
class WriteResult:
    """What a write job produced: the AddFile actions (not committed) and Delta's write metrics."""

    adds: list
    num_output_rows: int
    num_output_bytes: int
    write_time_ms: int

    @property
    def num_files(self) -> int:
        return len(self.adds)


# --------------------------------------------------------------------------------------------------
# driver side


def spark_type_for(delta_type_json):
    """The pyspark DataType for a Delta type's JSON (the Delta schema JSON IS Spark's JSON)."""
    from pyspark.sql.types import StructType, _parse_datatype_json_value

    if isinstance(delta_type_json, dict) and delta_type_json.get("type") == "struct":
        return StructType.fromJson(delta_type_json)
    return _parse_datatype_json_value(delta_type_json)


def spark_schema(schema_json: str | dict):
    """pyspark ``StructType`` of a Delta schema JSON (string or parsed)."""
    from pyspark.sql.types import StructType

    obj = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    return StructType.fromJson(obj)


def conform_dataframe(df, schema_json: str | dict):
    """Select and cast ``df``'s columns to the table schema, in table order.

    Column names match case-insensitively (Spark's default), at every nesting level; a table
    column missing from ``df`` becomes a typed null (the command has already checked it is
    nullable). Structs are rebuilt field by field BY NAME (Spark's struct cast is positional, which
    would silently swap same-typed fields given in another order), also inside arrays and maps.

    :param df: the DataFrame to write
    :param schema_json: the table's Delta schema JSON
    """
    from pyspark.sql import functions as F

    target = spark_schema(schema_json)
    by_lower = {f.name.lower(): f for f in df.schema.fields}
    cols = []
    for f in target.fields:
        src = by_lower.get(f.name.lower())
        if src is None:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
        else:
            cols.append(_conform_column(F.col(_quote(src.name)), src.dataType, f.dataType).alias(f.name))
    return df.select(*cols)


def _conform_column(col, src_type, dst_type):
    """A Column expression turning ``col`` (of ``src_type``) into ``dst_type``, structs by name."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if src_type == dst_type:
        return col
    if isinstance(dst_type, StructType) and isinstance(src_type, StructType):
        by_lower = {f.name.lower(): f for f in src_type.fields}
        fields = []
        for f in dst_type.fields:
            s = by_lower.get(f.name.lower())
            if s is None:
                fields.append(F.lit(None).cast(f.dataType).alias(f.name))
            else:
                fields.append(_conform_column(col.getField(s.name), s.dataType, f.dataType).alias(f.name))
        return F.when(col.isNull(), F.lit(None).cast(dst_type)).otherwise(F.struct(*fields))
    if isinstance(dst_type, ArrayType) and isinstance(src_type, ArrayType) and _has_struct(dst_type.elementType):
        return F.transform(col, lambda e: _conform_column(e, src_type.elementType, dst_type.elementType))
    if (
        isinstance(dst_type, MapType)
        and isinstance(src_type, MapType)
        and (_has_struct(dst_type.keyType) or _has_struct(dst_type.valueType))
    ):
        m = col
        if src_type.keyType != dst_type.keyType:
            m = F.transform_keys(m, lambda k, v: _conform_column(k, src_type.keyType, dst_type.keyType))
        return F.transform_values(m, lambda k, v: _conform_column(v, src_type.valueType, dst_type.valueType))
    return col.cast(dst_type)


def _has_struct(t) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(t, StructType):
        return True
    if isinstance(t, ArrayType):
        return _has_struct(t.elementType)
    if isinstance(t, MapType):
        return _has_struct(t.keyType) or _has_struct(t.valueType)
    return False


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def write_data_files(df, spec: WriteSpec) -> WriteResult:
    """Write ``df`` (already conformed to the table schema) as data files; return AddFile actions.

    Nothing is committed. Raises :class:`SchemaMismatchError` when a NOT NULL column holds nulls.

    :param df: DataFrame whose columns equal the table schema (see :func:`conform_dataframe`)
    :param spec: where and how to write
    """
    start = time.time()
    parts = list(spec.partition_columns)
    if parts:
        df = df.repartition(*[_quote(c) for c in parts]).sortWithinPartitions(*[_quote(c) for c in parts])

    def fn(batches, _spec=spec):
        from spark_apps.engine.spark.write import write_partition_batches

        return write_partition_batches(_spec, batches)

    try:
        rows = df.mapInArrow(fn, OUTPUT_SCHEMA).collect()
    except Exception as e:  # executor errors arrive wrapped in Spark exceptions
        err = delta_error_from(e)
        if err is not None:
            raise err from None
        raise
    adds = [AddFile.from_json(json.loads(r[0])) for r in rows]
    return WriteResult(
        adds=adds,
        num_output_rows=sum(int(r[1]) for r in rows),
        num_output_bytes=sum(a.size for a in adds),
        write_time_ms=int((time.time() - start) * 1000),
    )


# --------------------------------------------------------------------------------------------------
# executor side (pure pyarrow + engine modules; no pyspark besides TaskContext)


def _task_partition_id() -> int:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return tc.partitionId() if tc is not None else 0
    except Exception:  # not inside a Spark task (unit use)
        return 0


def write_partition_batches(spec: WriteSpec, batches, *, task_id: int | None = None):
    """Write one task's Arrow batches as data files; yield one ``(add_json, num_rows)`` batch per file.

    Usable without Spark (``batches`` any iterable of ``pa.RecordBatch`` in table column order).

    :param spec: the write spec
    :param batches: Arrow record batches of this task
    :param task_id: the number used in file names (default: the Spark task's partition id)
    """

    def run():
        writer = _TaskWriter(spec, _task_partition_id() if task_id is None else task_id)
        for batch in batches:
            if batch.num_rows:
                yield from writer.write(batch)
        yield from writer.finish()

    return guard_executor(run())


class _TaskWriter:
    """Writes one task's rows into rolling parquet files (one open file at a time)."""

    def __init__(self, spec: WriteSpec, task_id: int):
        from .. import schema as schema_mod
        from .. import stats as stats_mod
        from ..storage import storage_for

        self.spec = spec
        self.task_id = task_id
        self.storage = storage_for(spec.table_uri)
        self.fs = self.storage.filesystem
        self.table_schema = schema_mod.parse_schema(spec.schema_json)
        self.partition_columns = list(spec.partition_columns)
        part_set = set(self.partition_columns)
        self.partition_fields = {f.name: f for f in self.table_schema.fields if f.name in part_set}
        self.data_schema = self.table_schema.without(part_set)
        self.arrow_schema = self.data_schema.to_arrow_schema()
        self._check_not_null_fn = schema_mod.check_not_null
        self._has_not_null = _has_not_null(self.table_schema)
        self._stats_mod = stats_mod
        self._stats_config = stats_mod.stats_config_from_properties(spec.configuration or {})
        self.target = max(1, int(spec.target_file_size))
        self.row_group_bytes = max(1, int(spec.row_group_bytes))
        # state
        self._pvalues: tuple | None = None  # serialised partition values of the current run
        from .. import partitions as partitions_mod

        self._partitions = partitions_mod
        self._buffer: list[pa.RecordBatch] = []
        self._buffer_bytes = 0
        self._file = None  # open file state (dict)
        self._ratio = 0.5  # parquet bytes per Arrow byte, learned while writing
        self._made_dirs: set[str] = set()

    # ---- input

    def write(self, batch: pa.RecordBatch):
        self._check_not_null(batch)
        if not self.partition_columns:
            yield from self._append(batch)
            return
        for start, length in _runs(batch, self.partition_columns):
            run = batch.slice(start, length)
            key = tuple(
                _serialize_partition_value(self._partitions, run.column(c)[0].as_py(), self.partition_fields[c].type)
                for c in self.partition_columns
            )
            if key != self._pvalues:
                yield from self._flush(final=True)
                self._pvalues = key
            yield from self._append(run)

    def finish(self):
        yield from self._flush(final=True)

    def _check_not_null(self, batch: pa.RecordBatch) -> None:
        # a SchemaMismatchError travels to the driver through guard_executor / delta_error_from
        if self._has_not_null:
            self._check_not_null_fn(self.table_schema, batch)

    def _append(self, batch: pa.RecordBatch):
        data = self._data_batch(batch)
        self._buffer.append(data)
        self._buffer_bytes += data.nbytes
        if self._buffer_bytes >= self.row_group_bytes:
            yield from self._flush(final=False)

    def _data_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = [batch.column(f.name) for f in self.arrow_schema]
        out = pa.RecordBatch.from_arrays(arrays, names=[f.name for f in self.arrow_schema])
        if out.schema != self.arrow_schema:
            out = out.cast(self.arrow_schema)
        return out

    # ---- files

    def _flush(self, *, final: bool):
        """Write the buffered rows (as row groups), rolling files at the target size."""
        if self._buffer:
            table = pa.Table.from_batches(self._buffer, schema=self.arrow_schema).combine_chunks()
            self._buffer, self._buffer_bytes = [], 0
            offset = 0
            while offset < table.num_rows:
                if self._file is None:
                    self._open()
                remaining = table.num_rows - offset
                bytes_per_row = max(table.nbytes / max(table.num_rows, 1), 1e-9) * self._ratio
                room = self.target - self._file["sink"].tell()
                fit = max(1, int(room / bytes_per_row)) if room > 0 else 1
                n = min(remaining, fit)
                chunk = table.slice(offset, n)
                before = self._file["sink"].tell()
                self._file["writer"].write_table(chunk, row_group_size=max(n, 1))
                self._file["collector"].update(chunk)
                self._file["rows"] += n
                written = self._file["sink"].tell() - before
                if chunk.nbytes > 0 and written > 0:
                    self._ratio = written / chunk.nbytes
                offset += n
                if self._file["sink"].tell() >= self.target or n < remaining:
                    yield self._close()
        if final and self._file is not None:
            yield self._close()

    def _open(self) -> None:
        import pyarrow.parquet as pq

        from .. import partitions

        name = f"part-{self.task_id:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        pvalues: dict = {}
        if self.partition_columns:
            pvalues = dict(zip(self.partition_columns, self._pvalues or ()))
            rel_dir = partitions.partition_path(self.partition_columns, pvalues)
            rel = f"{rel_dir}/{name}"
        else:
            rel_dir, rel = "", name
        full = self.storage.join(self.spec.table_uri, rel)
        fs_path = self.storage.fs_path(full)
        parent = fs_path.rsplit("/", 1)[0]
        if parent not in self._made_dirs:
            # object stores have no directories (and HDFS creates parents itself): only local needs it
            if isinstance(self.fs, pafs.LocalFileSystem):
                self.fs.create_dir(parent, recursive=True)
            self._made_dirs.add(parent)
        sink = self.fs.open_output_stream(fs_path)
        writer = pq.ParquetWriter(
            sink,
            self.arrow_schema,
            compression="snappy",
            use_dictionary=True,
            write_statistics=True,
        )
        collector = self._stats_mod.StatsCollector(self.data_schema, **self._stats_config)
        self._file = {
            "rel": rel,
            "sink": sink,
            "writer": writer,
            "collector": collector,
            "rows": 0,
            "partition_values": pvalues,
        }

    def _close(self) -> pa.RecordBatch:
        from .. import partitions

        f, self._file = self._file, None
        f["writer"].close()
        size = f["sink"].tell()
        f["sink"].close()
        add = AddFile(
            path=partitions.encode_add_path(f["rel"]),
            partition_values=f["partition_values"],
            size=int(size),
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=f["collector"].to_json(),
        )
        return pa.RecordBatch.from_pydict(
            {"add_json": [json.dumps(add.to_json(), separators=(",", ":"))], "num_rows": [f["rows"]]},
            schema=pa.schema([("add_json", pa.string()), ("num_rows", pa.int64())]),
        )


def _has_not_null(struct) -> bool:
    from ..schema import StructType

    for f in struct.fields:
        if not f.nullable or (isinstance(f.type, StructType) and _has_not_null(f.type)):
            return True
    return False


def _serialize_partition_value(partitions, value, data_type) -> str | None:
    out = partitions.serialize_partition_value(value, data_type)
    # Delta (and Spark) store an empty string partition value as null.
    return None if out == "" else out


def _runs(batch: pa.RecordBatch, columns: list[str]):
    """(start, length) of the runs of equal partition values in a batch sorted by those columns."""
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return []
    change = np.zeros(n - 1, dtype=bool)
    for c in columns:
        col = batch.column(c)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        a, b = col.slice(1), col.slice(0, n - 1)
        if pa.types.is_floating(col.type):
            # NaN != NaN: compare their bit patterns through "is_nan" flags too
            eq = pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_nan(a), pc.is_nan(b)))
        else:
            eq = pc.equal(a, b)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        same = pc.or_(pc.fill_null(eq, False), both_null)
        change |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    ends = np.concatenate([starts[1:], [n]])
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]
