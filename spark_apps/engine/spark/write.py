"""DataFrame -> Delta data files + AddFile actions: the Spark plumbing around the core writer.

Algorithm (see docs/design.md, "Why the data plane uses mapInArrow"):

1. The driver conforms the DataFrame to the table schema (:func:`conform_dataframe`): columns in
   table order, types cast to the table's Spark types, missing nullable columns filled with nulls.
   Schema enforcement itself (:func:`airflow_delta_provider_apps.engine.schema.check_write_compatible`) runs before
   this, in the command, so a mismatch fails before any file is written.
2. Partitioned tables: each task hands its rows to the core writer in any partition order (no sort:
   Spark's sort by the partition columns cost a fifth of a partitioned append); the writer keeps a
   file per partition value it holds, with bounded memory and open files. ``optimize_write=True``
   (Delta's optimizeWrite) first repartitions by the partition columns, so every partition value
   lands in one task (fewer, larger files, at the price of a shuffle).
3. ``df.mapInArrow(fn, "add_json string, num_rows long")`` (public API; works over Spark Connect):
   each task hands its Arrow batches to :func:`airflow_delta_provider_apps.engine.writer.write_batches` (pure
   pyarrow: Delta file names, hive directories, row groups, rolling at the target size, stats from
   the batches written, NOT NULL checks) and yields one row per closed file.
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
from dataclasses import dataclass

import pyarrow as pa

from ..actions import AddCDCFile, AddFile
from ..writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_TARGET_FILE_SIZE, WriteSpec, write_batches
from .session import collect_tasks, guard_executor

__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "DEFAULT_TARGET_FILE_SIZE",
    "WriteSpec",
    "WriteResult",
    "write_data_files",
    "conform_dataframe",
    "write_partition_batches",
]
OUTPUT_SCHEMA = "add_json string, num_rows long"


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


def write_data_files(df, spec: WriteSpec, *, optimize_write: bool = False, change_data: bool = False) -> WriteResult:
    """Write ``df`` (already conformed to the table schema) as data files; return AddFile actions.

    Nothing is committed. Raises :class:`SchemaMismatchError` when a NOT NULL column holds nulls.

    :param df: DataFrame whose columns equal the table schema (see :func:`conform_dataframe`)
    :param spec: where and how to write
    :param optimize_write: shuffle rows by partition values first (fewer files; see step 2)
    :param change_data: ``df`` holds change feed rows (the table's columns, then ``_change_type``):
        written as change data files, returned as AddCDCFile actions
    """
    start = time.time()
    # Positional names for the trip through mapInArrow: pyspark resolves each input column by name
    # there, which fails for names holding dots; the tasks restore the table's names.
    names = list(df.columns)
    df = df.toDF(*[f"_c{i}" for i in range(len(names))])
    parts = [f"_c{names.index(c)}" for c in spec.partition_columns]
    if parts and optimize_write:
        df = df.repartition(*parts)

    def fn(batches, _spec=spec, _names=names, _change_data=change_data):
        from airflow_delta_provider_apps.engine.spark.write import write_partition_batches

        renamed = (pa.RecordBatch.from_arrays(b.columns, names=_names) for b in batches)
        return write_partition_batches(_spec, renamed, change_data=_change_data)

    rows = collect_tasks(df, fn, OUTPUT_SCHEMA)
    action = AddCDCFile if change_data else AddFile
    adds = [action.from_json(json.loads(r[0])) for r in rows]
    return WriteResult(
        adds=adds,
        num_output_rows=sum(int(r[1]) for r in rows),
        num_output_bytes=sum(a.size for a in adds),
        write_time_ms=int((time.time() - start) * 1000),
    )


# --------------------------------------------------------------------------------------------------
# executor side: the core writer (airflow_delta_provider_apps.engine.writer), wrapped for mapInArrow


def _task_partition_id() -> int:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return tc.partitionId() if tc is not None else 0
    except Exception:  # not inside a Spark task (unit use)
        return 0


def write_partition_batches(spec: WriteSpec, batches, *, task_id: int | None = None, change_data: bool = False):
    """Write one task's Arrow batches as data files (change data files with ``change_data``); yield
    one ``(add_json, num_rows)`` batch per file.

    Usable without Spark (``batches`` any iterable of ``pa.RecordBatch`` in table column order).
    """

    def run():
        tid = _task_partition_id() if task_id is None else task_id
        for written in write_batches(spec, batches, task_id=tid, change_data=change_data):
            yield pa.RecordBatch.from_pydict(
                {
                    "add_json": [json.dumps(written.add.to_json(), separators=(",", ":"))],
                    "num_rows": [written.num_rows],
                },
                schema=pa.schema([("add_json", pa.string()), ("num_rows", pa.int64())]),
            )

    return guard_executor(run())


def inserted_changes(spark, snapshot, adds: list) -> list:
    """The change feed's files of the rows in ``adds`` (files just written, not committed), each
    row an ``insert``: read back from those files in Spark tasks and written as change files."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from ..cdf import CHANGE_TYPE, INSERT
    from ..writer import table_write_spec
    from .scan import scan_files

    if not adds:
        return []
    files = pa.table(
        {
            "path": [a.path for a in adds],
            "partition_values": pa.array(
                [list((a.partition_values or {}).items()) for a in adds], pa.map_(pa.string(), pa.string())
            ),
            "size": pa.array([a.size for a in adds], pa.int64()),
        }
    )
    rows = scan_files(spark, snapshot, files=files).df.withColumn(CHANGE_TYPE, F.lit(INSERT))
    return list(write_data_files(rows, table_write_spec(snapshot), change_data=True).adds)
