"""Snapshot -> Spark DataFrame, through the engine's pure-pyarrow reader.

Algorithm:

1. The driver turns the snapshot's live files (``snapshot.files``, an Arrow table: no Python object
   per file) into a small Arrow table with one row per file: ``path`` (as written in the log),
   ``partition_values`` (JSON), ``deletion_vector`` (JSON or null) and ``size``; files are dealt to
   ``num_tasks`` tasks by a greedy size balance (largest first onto the lightest task).
2. That table becomes a DataFrame (``spark.createDataFrame(arrow_table)``), is repartitioned by the
   task number and mapped with ``mapInArrow``: each task reads its files with
   :func:`spark_apps.engine.reader.read_data_file` (missing columns -> null, partition columns typed
   from the log values, never from directory names; deletion vectors applied by the reader) and
   yields Arrow batches cast to the Arrow form of the declared Spark schema.
3. The declared schema is ``StructType.fromJson(schema_json)``: the Delta schema JSON is Spark's.

An empty table gives an empty DataFrame with the right schema and runs no job. Time travel is a
snapshot choice (``load_snapshot(..., version=..., timestamp_ms=...)``) made before calling this.

``with_file_column=True`` appends a ``_file`` string column holding each row's ``add.path`` (as in
the log), which is how DELETE/UPDATE/MERGE will find the touched files; :func:`scan_files` also
returns the exact file list that was scanned.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass

import pyarrow as pa

FILE_COLUMN = "_file"
_TASK_COLUMN = "_task"


@dataclass
class ScanResult:
    """A scan's DataFrame and the live files (``snapshot.files`` rows) it reads."""

    df: object
    files: pa.Table


def _default_parallelism(spark) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        try:
            return max(1, int(spark.conf.get("spark.default.parallelism")))
        except Exception:
            return 2


def _files_table(files: pa.Table, num_tasks: int) -> pa.Table:
    """One row per file with the columns the executors need, plus the task number."""
    n = files.num_rows
    paths = files.column("path")
    pv = files.column("partition_values").to_pylist() if "partition_values" in files.column_names else [None] * n
    pv_json = [json.dumps(dict(v) if v is not None else {}) for v in pv]
    if "deletion_vector" in files.column_names:
        dvs = files.column("deletion_vector")
        dv_json = [None if d is None else json.dumps(d) for d in dvs.to_pylist()] if dvs.null_count < n else [None] * n
    else:
        dv_json = [None] * n
    sizes = files.column("size").to_pylist() if "size" in files.column_names else [0] * n
    # greedy balance: biggest files first onto the lightest task
    heap = [(0, t) for t in range(num_tasks)]
    tasks = [0] * n
    for i in sorted(range(n), key=lambda i: -(sizes[i] or 0)):
        load, t = heapq.heappop(heap)
        tasks[i] = t
        heapq.heappush(heap, (load + (sizes[i] or 0), t))
    return pa.table({
        "path": paths.cast(pa.string()),
        "partition_values": pa.array(pv_json, pa.string()),
        "deletion_vector": pa.array(dv_json, pa.string()),
        "size": pa.array(sizes, pa.int64()),
        _TASK_COLUMN: pa.array(tasks, pa.int32()),
    })


def scan_files(spark, snapshot, *, files: pa.Table | None = None, columns: list[str] | None = None,
               with_file_column: bool = False, num_tasks: int | None = None) -> ScanResult:
    """Scan a snapshot (or a subset of its live files) into a DataFrame.

    :param spark: the SparkSession
    :param snapshot: a :class:`~spark_apps.engine.log.snapshot.Snapshot`
    :param files: a subset of ``snapshot.files`` rows to read (default: all live files)
    :param columns: table columns to return (default: all, in table order)
    :param with_file_column: append a ``_file`` column with each row's ``add.path``
    :param num_tasks: Spark tasks to read with (default: min(files, 2 x default parallelism))
    """
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    from ..storage import normalize_table_uri

    schema_json = snapshot.metadata.schema_string
    full_schema = StructType.fromJson(json.loads(schema_json))
    if columns is not None:
        by_name = {f.name: f for f in full_schema.fields}
        missing = [c for c in columns if c not in by_name]
        if missing:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"Unknown column(s) {missing}", f"the table has columns {list(by_name)}",
                "ask for columns that exist in the table schema",
            )
        out_schema = StructType([by_name[c] for c in columns])
    else:
        out_schema = full_schema
    if with_file_column:
        out_schema = StructType(list(out_schema.fields) + [StructField(FILE_COLUMN, StringType(), False)])

    files = snapshot.files if files is None else files
    if files.num_rows == 0:
        return ScanResult(spark.createDataFrame([], out_schema), files)

    n_tasks = num_tasks or min(files.num_rows, 2 * _default_parallelism(spark))
    listing = _files_table(files, n_tasks)
    arrow_schema = to_arrow_schema(out_schema, timezone="UTC")
    table_root = normalize_table_uri(snapshot.table_root)
    partition_columns = list(snapshot.metadata.partition_columns)
    cols = list(columns) if columns is not None else None

    def fn(batches, _root=table_root, _schema_json=schema_json, _parts=partition_columns, _cols=cols,
           _arrow=arrow_schema, _with_file=with_file_column):
        from spark_apps.engine.spark.scan import read_files_batches

        return read_files_batches(batches, _root, _schema_json, _parts, _cols, _arrow, _with_file)

    files_df = spark.createDataFrame(listing)
    if n_tasks > 1:
        files_df = files_df.repartitionByRange(n_tasks, _TASK_COLUMN)
    else:
        files_df = files_df.coalesce(1)
    return ScanResult(files_df.mapInArrow(fn, out_schema), files)


def to_dataframe(spark, snapshot, *, columns: list[str] | None = None, with_file_column: bool = False):
    """The snapshot's rows as a DataFrame (see :func:`scan_files`)."""
    return scan_files(spark, snapshot, columns=columns, with_file_column=with_file_column).df


def read_files_batches(batches, table_root: str, schema_json: str, partition_columns: list[str],
                       columns: list[str] | None, arrow_schema: pa.Schema, with_file_column: bool):
    """Executor side: read every file named in ``batches`` and yield Arrow batches in ``arrow_schema``.

    Usable without Spark (any iterable of batches with ``path``, ``partition_values``,
    ``deletion_vector`` columns).
    """
    from .. import reader
    from ..actions import DeletionVectorDescriptor
    from ..schema import parse_schema
    from ..storage import storage_for

    storage = storage_for(table_root)
    schema = parse_schema(schema_json)
    for batch in batches:
        paths = batch.column("path").to_pylist()
        pvs = batch.column("partition_values").to_pylist()
        dvs = batch.column("deletion_vector").to_pylist()
        for path, pv, dv in zip(paths, pvs, dvs):
            dv_obj = DeletionVectorDescriptor.from_json(json.loads(dv)) if dv else None
            table = reader.read_data_file(
                storage, table_root, path, json.loads(pv) if pv else {}, schema, partition_columns,
                columns=columns, deletion_vector=dv_obj,
            )
            if with_file_column:
                table = table.append_column(pa.field(FILE_COLUMN, pa.string(), nullable=False),
                                            pa.array([path] * table.num_rows, pa.string()))
            table = _conform(table, arrow_schema)
            for b in table.to_batches():
                if b.num_rows:
                    yield b


def _conform(table: pa.Table, arrow_schema: pa.Schema) -> pa.Table:
    if table.schema.equals(arrow_schema, check_metadata=False):
        return table
    table = table.select([f.name for f in arrow_schema])
    return table.cast(arrow_schema)
