"""Arrow batches -> Delta data files + AddFile actions, in pure pyarrow (no Spark, no JVM).

The task-side half of every write (append, overwrite, the rewrites of DELETE and UPDATE, and later
OPTIMIZE): the Spark data plane (:mod:`airflow_delta_provider_apps.engine.spark.write`) hands each task's batches to
:func:`write_batches`, and the per-file rewrite (:mod:`airflow_delta_provider_apps.engine.rewrite`) calls it directly.

* names ``[<hive partition dirs>/]part-<5-digit task id>-<uuid4>-c000.snappy.parquet``; partition
  directories from :func:`airflow_delta_provider_apps.engine.partitions.partition_path` (hive escaping) and
  ``add.path`` URI-encoded with ``encode_add_path``;
* partition columns are not stored in the files (Delta convention): their values go to
  ``add.partitionValues``, serialised as the protocol says. Rows arrive in any partition order (the
  Spark writer does not sort them: Spark's sort by partition cost a fifth of a partitioned append):
  each batch is split into runs of one partition value, and each value buffers its rows and keeps
  its own open file, so a task writes one file per partition value it holds. Memory is bounded: all buffers together hold at most
  ``row_group_bytes`` (past it, the largest is written out as a row group) and at most
  :data:`MAX_OPEN_FILES` files are open (past it, the least recently written is closed, and that
  value's next rows start a new file);
* rows are buffered into row groups of about ``row_group_bytes`` Arrow bytes (smaller when many
  partition values share that budget); a file is closed and a new one opened when it would pass
  ``target_file_size`` (estimated from the compression ratio seen so far);
* per-file stats (numRecords, minValues, maxValues, nullCount) come from
  :class:`airflow_delta_provider_apps.engine.stats.StatsCollector` over the very batches written (no second pass);
* NOT NULL columns, CHECK constraints and generated columns (:mod:`.constraints`) are checked on
  the batches (:class:`SchemaMismatchError`, :class:`ConstraintViolationError` before any commit),
  generated columns computed where NULL;
* ``data_change`` is written into each AddFile (``false`` for rearrangements such as OPTIMIZE).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .actions import AddCDCFile, AddFile
from .config import TableProperties
from .errors import InvalidArgumentError
from .partitions import require_data_column
from .paths import new_file_location

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
DICTIONARY_PAGE_BYTES = 64 * 1024
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
# open files per writer: bounds file handles and an object store's upload buffers when a task holds
# rows of many partition values
MAX_OPEN_FILES = 32

__all__ = [
    "WriteSpec",
    "WrittenFile",
    "TableWriter",
    "write_batches",
    "DEFAULT_TARGET_FILE_SIZE",
    "DEFAULT_ROW_GROUP_BYTES",
    "resolve_target_file_size",
]


@dataclass(frozen=True)
class WriteSpec:
    """Everything an executor needs to write a table's data files (small and picklable).

    :param table_uri: normalised table root
    :param schema_json: the table's Delta schema JSON (string)
    :param partition_columns: partition column names, in table order
    :param configuration: table properties (stats settings are read from them)
    :param target_file_size: roll to a new file once a file reaches about this many bytes
    :param row_group_bytes: Arrow bytes buffered per parquet row group
    :param data_change: ``add.dataChange`` of the files written
    :param row_constraint: a bound condition (``expr.Expr``) every written row must satisfy (overwrite's
        ``replace_where``); a row where it is not TRUE fails the write before any commit
    """

    table_uri: str
    schema_json: str
    partition_columns: tuple = ()
    configuration: dict = field(default_factory=dict)
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    data_change: bool = True
    row_constraint: Any = None
    #: row tracking's materialized (row id, row commit version) column names: a rewrite writes them
    #: into the files after the data columns (not in the schema, no stats); rows without them get NULL
    row_tracking: tuple | None = None

    def __post_init__(self):  # a file with no data column would lose every row written to it
        names = [f["name"] for f in json.loads(self.schema_json).get("fields", [])]
        require_data_column(names, self.partition_columns, "Writing to this table")


def table_write_spec(snapshot, *, target_file_size: int | None = None, **overrides) -> WriteSpec:
    """The WriteSpec of a snapshot's table: its root, schema, partition columns, properties and target
    file size (``target_file_size``, else ``delta.targetFileSize``, else the default); ``overrides``
    replace fields (e.g. an evolved ``schema_json``)."""
    md = snapshot.metadata
    fields = {
        "table_uri": snapshot.table_root,
        "schema_json": snapshot.schema.to_json_string(),
        "partition_columns": tuple(md.partition_columns or ()),
        "configuration": dict(md.configuration or {}),
        "target_file_size": resolve_target_file_size(snapshot.properties, target_file_size),
    }
    return WriteSpec(**{**fields, **overrides})


def resolve_target_file_size(properties: Any, target_file_size: int | None) -> int:
    """Explicit value, else the table's ``delta.targetFileSize``, else 128 MiB.

    :param properties: the table's :class:`~..config.TableProperties` (or its Metadata / configuration)
    """
    value = target_file_size
    if value is None:
        value = TableProperties.of(properties).target_file_size
    if value is None:
        return DEFAULT_TARGET_FILE_SIZE
    try:
        value = int(value)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise InvalidArgumentError(
            f"Target file size {target_file_size!r} is not a positive number of bytes",
            None,
            "pass a positive integer such as 134217728 (128 MiB)",
        )
    return value


@dataclass(frozen=True)
class WrittenFile:
    """One closed data file: its AddFile (not committed) and its row count (a change data file: its
    AddCDCFile)."""

    add: AddFile | AddCDCFile
    num_rows: int


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

    @classmethod
    def of(cls, written: list[WrittenFile], started: float) -> WriteResult:
        """The result of files written since ``started`` (``time.monotonic()``)."""
        import time

        adds = [w.add for w in written]
        elapsed = int((time.monotonic() - started) * 1000)
        return cls(adds, sum(w.num_rows for w in written), sum(a.size for a in adds), elapsed)


def adds_table(adds: list) -> pa.Table:
    """Files just written (AddFile actions) as a files table (``path``, ``partition_values``,
    ``size``: the columns the readers take), to read them back."""
    return pa.table(
        {
            "path": [a.path for a in adds],
            "partition_values": pa.array(
                [list((a.partition_values or {}).items()) for a in adds], pa.map_(pa.string(), pa.string())
            ),
            "size": pa.array([a.size for a in adds], pa.int64()),
        }
    )


def write_batches(
    spec: WriteSpec, batches: Iterable[pa.RecordBatch], *, task_id: int = 0, change_data: bool = False
) -> Iterator[WrittenFile]:
    """Write batches (columns in table order) as data files (change data files with ``change_data``:
    see :class:`TableWriter`); yield each file as it is closed."""
    writer = TableWriter(spec, task_id, change_data=change_data)
    try:
        for batch in batches:
            if batch.num_rows:
                yield from writer.write(batch)
        yield from writer.finish()
    except BaseException:  # a failed batch (a constraint, a NOT NULL) leaves no open file behind
        writer.abort()
        raise


def empty_change_file(spec: WriteSpec, partition_values: dict | None = None) -> AddCDCFile:
    """A change data file of no rows (in the partition ``partition_values``, keyed and serialized as
    the log's): what a commit that rewrote data files without changing a row carries on a table that
    records the change data feed. A version with change data files is read from them alone, so the
    feed shows no change; without one its readers take the rewrite's removes and adds for deletes
    and inserts."""
    writer = TableWriter(spec, 0, change_data=True)
    key = tuple((partition_values or {}).get(k) for k in writer.partition_keys)
    part = writer._part(key)
    for _closed in writer._open(part):  # (no other file is open)
        pass
    return writer._close(part).add


class TableWriter:
    """Writes one task's rows into rolling parquet files: a file per partition value it holds, at
    most :data:`MAX_OPEN_FILES` open at a time.

    With ``change_data`` it writes the change data feed's files instead (:mod:`.cdf`): rows carry
    the ``_change_type`` column too, files go under ``_change_data/`` as ``cdc-*`` files without
    stats, and each closes as an ``AddCDCFile`` (the rows were checked when first written)."""

    def __init__(self, spec: WriteSpec, task_id: int, *, change_data: bool = False):
        from . import schema as schema_mod
        from . import stats as stats_mod
        from .storage import storage_for

        self.spec = spec
        self.task_id = task_id
        self.change_data = change_data
        self.storage = storage_for(spec.table_uri)
        self.table_schema = schema_mod.parse_schema(spec.schema_json)
        if change_data:
            from .cdf import CHANGE_TYPE

            change_type = schema_mod.StructField(CHANGE_TYPE, schema_mod.PrimitiveType("string"))
            self.table_schema = schema_mod.StructType([*self.table_schema.fields, change_type])
        self.partition_columns = list(spec.partition_columns)
        part_set = set(self.partition_columns)
        self.partition_fields = {f.name: f for f in self.table_schema.fields if f.name in part_set}
        self.data_schema = self.table_schema.without(part_set)
        self.arrow_schema = self.data_schema.to_arrow_schema()
        # column mapping: files hold physical names (and field ids); partition values are keyed by them
        from . import column_mapping

        self.mapping = column_mapping.mode_of(spec.configuration)
        self.file_schema = (
            column_mapping.physical_schema(self.data_schema, self.mapping) if self.mapping != "none" else None
        )
        self.partition_keys = [
            self.partition_fields[c].physical_name if self.mapping != "none" else c for c in self.partition_columns
        ]
        names = () if change_data else tuple(spec.row_tracking or ())
        self.materialized = [pa.field(name, pa.int64()) for name in names]
        self._check_not_null_fn = schema_mod.check_not_null
        # CHECK constraints and generated columns (change data: generated values filled, not checked)
        from .constraints import rules_for

        self.rules = rules_for(spec.schema_json, spec.configuration)
        # identity columns: NULLs get this writer's next values (engine.identity)
        from .identity import identities

        self.identities = [] if change_data else identities(self.table_schema)
        self._identity_counts: dict = {}
        self._has_not_null = _has_not_null(self.table_schema) and not change_data
        self._stats_mod = stats_mod
        self._stats_config = stats_mod.stats_config_from_properties(spec.configuration or {})
        self.target = max(1, int(spec.target_file_size))
        self.row_group_bytes = max(1, int(spec.row_group_bytes))
        # state: one _Part per partition value with rows buffered or a file open, least recently
        # written first (a dict keeps insertion order; a written part moves to the end)
        from . import partitions as partitions_mod

        self._partitions = partitions_mod
        self._parts: dict[tuple, _Part] = {}
        self._buffer_bytes = 0  # all parts' buffers
        self._open_files = 0
        self._ratio = 0.5  # parquet bytes per Arrow byte, learned while writing

    @property
    def _file_arrow_schema(self) -> pa.Schema:
        schema = self.file_schema if self.file_schema is not None else self.arrow_schema
        for f in self.materialized:
            schema = schema.append(f)
        return schema

    # ---- input

    def write(self, batch: pa.RecordBatch):
        if self.identities:
            from .identity import fill

            batch = fill(self.identities, batch, self.task_id, self._identity_counts)
        if self.rules:
            batch = self.rules.fill(batch) if self.change_data else self.rules.apply(batch)
        self._check_not_null(batch)
        self._check_constraint(batch)
        if not self.partition_columns:
            yield from self._append(self._part(()), self._data_batch(batch))
            return
        data = self._data_batch(batch)
        for first, rows in grouped(batch, self.partition_columns):
            key = tuple(
                _serialize_partition_value(
                    self._partitions, batch.column(c)[first].as_py(), self.partition_fields[c].type
                )
                for c in self.partition_columns
            )
            # a run of several is taken into buffers of its own: a slice would keep the whole batch
            # alive in a part's buffer while counting only its own rows
            yield from self._append(self._part(key), data if rows is None else data.take(rows))

    def finish(self):
        # parts with an open file first: closing them makes room, so no other part's file is closed
        # early to open one for buffered rows
        for part in sorted(self._parts.values(), key=lambda p: p.file is None):
            yield from self._flush(part, final=True)
        self._parts.clear()

    def abort(self) -> None:
        """Give up the open files, if any: closed and deleted (best effort), their rows never listed.
        Files already closed are the caller's to discard (they were yielded)."""
        parts, self._parts = list(self._parts.values()), {}
        self._buffer_bytes = 0
        for part in parts:
            f, part.file = part.file, None
            if f is None:
                continue
            try:
                f["writer"].close()
                f["sink"].close()
            except Exception:  # the failure being handled matters more than this one
                pass
            try:
                self.storage.delete(new_file_location(self.spec.table_uri, f["rel"]))
            except Exception:
                pass
        self._open_files = 0

    def _check_constraint(self, batch: pa.RecordBatch) -> None:
        if self.spec.row_constraint is None or self.change_data:
            return
        from .errors import InvalidArgumentError
        from .expr import to_sql, true_mask

        ok = true_mask(self.spec.row_constraint, batch)
        bad = batch.num_rows - int(pc.sum(pc.cast(ok, pa.int64())).as_py() or 0)
        if bad:
            first = batch.filter(pc.invert(ok)).slice(0, 1).to_pylist()[0]
            raise InvalidArgumentError(
                f"{bad} row(s) written do not match replace_where '{to_sql(self.spec.row_constraint)}'",
                f"e.g. {first}",
                "filter the source to the rows the condition selects, or widen replace_where",
            )

    def _check_not_null(self, batch: pa.RecordBatch) -> None:
        # a SchemaMismatchError travels to the driver through guard_executor / delta_error_from
        if self._has_not_null:
            self._check_not_null_fn(self.table_schema, batch)

    def _part(self, key: tuple) -> _Part:
        """The state of partition value ``key``, made the most recently written."""
        part = self._parts.pop(key, None)
        if part is None:
            part = _Part(key)
        self._parts[key] = part
        return part

    def _append(self, part: _Part, data: pa.RecordBatch):
        """Buffer a part's rows (already in the file's columns); write out a full buffer."""
        part.buffer.append(data)
        part.buffer_bytes += data.nbytes
        self._buffer_bytes += data.nbytes
        if part.buffer_bytes >= self.row_group_bytes:
            yield from self._flush(part, final=False)
        elif self._buffer_bytes >= self.row_group_bytes:
            # all buffers together are full: the largest one becomes a row group
            yield from self._flush(max(self._parts.values(), key=lambda p: p.buffer_bytes), final=False)

    def _data_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = [fill_under_null_parents(batch.column(f.name), f.type) for f in self.arrow_schema]
        out = pa.RecordBatch.from_arrays(arrays, names=[f.name for f in self.arrow_schema])
        if out.schema != self.arrow_schema:
            out = out.cast(self.arrow_schema)
        if self.file_schema is not None:
            from .column_mapping import to_physical

            out = to_physical(out, self.file_schema)
        for f in self.materialized:  # already physical names
            have = f.name in batch.schema.names
            out = out.append_column(
                f, batch.column(f.name).cast(pa.int64()) if have else pa.nulls(len(out), pa.int64())
            )
        return out

    # ---- files

    def _flush(self, part: _Part, *, final: bool):
        """Write a part's buffered rows (as row groups) to its file, rolling files at the target size;
        ``final`` closes its file (and forgets the part)."""
        if part.buffer:
            table = pa.Table.from_batches(part.buffer, schema=self._file_arrow_schema).combine_chunks()
            self._buffer_bytes -= part.buffer_bytes
            part.buffer, part.buffer_bytes = [], 0
            offset = 0
            while offset < table.num_rows:
                if part.file is None:
                    yield from self._open(part)
                f = part.file
                remaining = table.num_rows - offset
                bytes_per_row = max(table.nbytes / max(table.num_rows, 1), 1e-9) * self._ratio
                room = self.target - f["sink"].tell()
                fit = max(1, int(room / bytes_per_row)) if room > 0 else 1
                n = min(remaining, fit)
                chunk = table.slice(offset, n)
                before = f["sink"].tell()
                f["writer"].write_table(chunk, row_group_size=max(n, 1))
                if f["collector"] is not None:
                    f["collector"].update(chunk)
                f["rows"] += n
                written = f["sink"].tell() - before
                if chunk.nbytes > 0 and written > 0:
                    self._ratio = written / chunk.nbytes
                offset += n
                if f["sink"].tell() >= self.target or n < remaining:
                    yield self._close(part)
        if final:
            if part.file is not None:
                yield self._close(part)
            self._parts.pop(part.key, None)

    def _open(self, part: _Part):
        """Open a new file for ``part``; past :data:`MAX_OPEN_FILES` open files, first close the least
        recently written one (yielded)."""
        import pyarrow.parquet as pq

        from . import partitions

        if self._open_files >= MAX_OPEN_FILES:
            lru = next(p for p in self._parts.values() if p.file is not None and p is not part)
            yield self._close(lru)
        kind = "cdc" if self.change_data else "part"
        name = f"{kind}-{self.task_id:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        pvalues: dict = {}
        if self.partition_columns:
            pvalues = dict(zip(self.partition_keys, part.key))
            rel_dir = partitions.partition_path(self.partition_keys, pvalues)
            rel = f"{rel_dir}/{name}"
        else:
            rel_dir, rel = "", name
        if self.change_data:
            from .cdf import CHANGE_DATA_DIR

            rel = f"{CHANGE_DATA_DIR}/{rel}"
        sink = self.storage.open_output_stream(new_file_location(self.spec.table_uri, rel))
        writer = pq.ParquetWriter(
            sink,
            self._file_arrow_schema,
            compression="snappy",
            use_dictionary=True,
            # a small dictionary page makes the encoder fall back to plain encoding early for
            # high-cardinality columns (with the 1 MiB default it dictionary-encoded 75k distinct values
            # per row group: half of a DML rewrite's write time, and larger files)
            dictionary_pagesize_limit=DICTIONARY_PAGE_BYTES,
            write_statistics=True,
        )
        collector = None if self.change_data else self._stats_mod.StatsCollector(self.data_schema, **self._stats_config)
        part.file = {
            "rel": rel,
            "sink": sink,
            "writer": writer,
            "collector": collector,
            "rows": 0,
            "partition_values": pvalues,
        }
        self._open_files += 1

    def _close(self, part: _Part) -> WrittenFile:
        from . import partitions

        f = part.file
        f["writer"].close()
        size = f["sink"].tell()
        f["sink"].close()
        # forgotten once closed: a close that fails leaves the file to abort(), which deletes it
        part.file = None
        self._open_files -= 1
        if self.change_data:
            cdc = AddCDCFile(
                path=partitions.encode_add_path(f["rel"]), partition_values=f["partition_values"], size=int(size)
            )
            return WrittenFile(cdc, int(f["rows"]))
        add = AddFile(
            path=partitions.encode_add_path(f["rel"]),
            partition_values=f["partition_values"],
            size=int(size),
            modification_time=int(time.time() * 1000),
            data_change=bool(self.spec.data_change),
            stats=f["collector"].to_json(),
        )
        return WrittenFile(add, int(f["rows"]))


class _Part:
    """One partition value's rows in a writer: its buffered batches and its open file, if any."""

    __slots__ = ("key", "buffer", "buffer_bytes", "file")

    def __init__(self, key: tuple):
        self.key = key  # serialised partition values, in partition column order
        self.buffer: list[pa.RecordBatch] = []
        self.buffer_bytes = 0
        self.file: dict | None = None


def _has_not_null(struct) -> bool:
    from .schema import StructType

    for f in struct.fields:
        if not f.nullable or (isinstance(f.type, StructType) and _has_not_null(f.type)):
            return True
    return False


def _serialize_partition_value(partitions, value, data_type) -> str | None:
    out = partitions.serialize_partition_value(value, data_type)
    # Delta (and Spark) store an empty string partition value as null.
    return None if out == "" else out


def _zero(t: pa.DataType) -> pa.Scalar:
    """A placeholder value of type ``t`` (never read: it sits under a NULL parent)."""
    if pa.types.is_struct(t):
        return pa.scalar({f.name: _zero(f.type).as_py() for f in t}, t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return pa.scalar([], t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False, t)
    if pa.types.is_decimal(t):
        import decimal

        return pa.scalar(decimal.Decimal(0), t)
    return pa.scalar(0, pa.int64()).cast(t)


def fill_under_null_parents(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """Give NOT NULL struct fields a placeholder where their parent struct is NULL.

    A NULL struct may hold a NOT NULL field (valid in Delta and Spark); Arrow still stores a slot
    for the field, which is NULL there, and the parquet writer refuses a NULL in a required field.
    The placeholder is never read (the parent is NULL), exactly as Spark writes such rows. A NULL
    under a valid parent is a real NOT NULL violation, refused earlier by ``check_not_null``.
    """
    if not pa.types.is_struct(t) or not isinstance(arr, pa.StructArray):
        return arr
    children = []
    for i, f in enumerate(t):
        child = arr.field(i)
        if not f.nullable and child.null_count:
            child = pc.fill_null(child, _zero(f.type))
        children.append(fill_under_null_parents(child, f.type))
    mask = pc.invert(arr.is_valid()) if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)


def grouped(batch: pa.RecordBatch, columns: list[str]) -> list[tuple[int, pa.Array | None]]:
    """The batch's runs of equal partition values: ``(a row of the run, its rows)`` each, the rows
    None when the run is the whole batch, else their indexes (in batch order within the run)."""
    if batch.num_rows == 0:
        return []
    if not _changes(batch, columns).any():
        return [(0, None)]
    keys = batch.select(columns)
    order = pc.sort_indices(keys, sort_keys=[(c, "ascending", "at_end") for c in columns])
    bounds = _run_bounds(_changes(keys.take(order), columns), batch.num_rows)
    return [(order[start].as_py(), order.slice(start, length)) for start, length in bounds]


def _changes(batch: pa.RecordBatch, columns: list[str]):
    """Boolean array: row i+1's partition values differ from row i's (nulls equal, NaNs equal)."""
    import numpy as np

    n = batch.num_rows
    change = np.zeros(max(n - 1, 0), dtype=bool)
    if n < 2:
        return change
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
    return change


def _run_bounds(change, n: int) -> list:
    import numpy as np

    if n == 0:
        return []
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    lengths = np.diff(np.concatenate([starts, [n]]))
    return list(zip(starts.tolist(), lengths.tolist()))
