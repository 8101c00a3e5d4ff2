"""Snapshot -> Spark DataFrame, through the engine's pure-pyarrow reader.

Algorithm:

1. The driver turns the snapshot's live files (``snapshot.files``, an Arrow table: no Python object
   per file) into a small Arrow table with one row per file: ``path`` (as written in the log),
   ``partition_values`` (map), ``deletion_vector`` (struct, only when some file has one) and
   ``size``; files are dealt to tasks by bytes, in the contiguous slices Spark cuts a local relation
   into (:func:`listing_for_tasks`, one task per slice).
2. That table becomes a DataFrame (``spark.createDataFrame(arrow_table)``: no range-partitioning job
   or shuffle before the scan's one job) mapped with ``mapInArrow``: each task streams its files with
   :func:`airflow_delta_provider_apps.engine.reader.iter_data_file_batches` (row group by row group, at most
   ``MAX_BATCH_ROWS`` rows per batch, so a task's memory is bounded by a row group, not a file;
   missing columns -> null, partition columns typed from the log values, never from directory
   names; deletion vectors applied by the reader by physical row index) and yields Arrow batches
   cast to the Arrow form of the declared Spark schema.
3. The declared schema is ``StructType.fromJson(schema_json)``: the Delta schema JSON is Spark's.

A DeltaError on an executor (e.g. a data file missing after VACUUM) reaches the driver inside Spark's
exception; :func:`airflow_delta_provider_apps.engine.spark.session.delta_error_from` recovers it (the CLI does).

An empty table gives an empty DataFrame with the right schema and runs no job. Time travel is a
snapshot choice (``load_snapshot(..., version=..., timestamp_ms=...)``) made before calling this.

``with_file_column=True`` appends a ``_file`` string column holding each row's ``add.path`` (as in
the log), which is how DELETE/UPDATE/MERGE will find the touched files; :func:`scan_files` also
returns the exact file list that was scanned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from ..paths import file_locations
from .session import map_in_arrow

FILE_COLUMN = "_file"
#: the physical row index column of ``scan_files(with_row_index=True)`` (internal: no user column's name)
ROW_COLUMN = "__delta_row_index"
MAX_BATCH_ROWS = 65536  # rows per Arrow batch handed back to Spark
#: optional column of a file listing: the row groups (list<int32>) of the file this row reads, the
#: rest left to other rows of the same file (a large file split across tasks); null: every group
ROW_GROUPS_COLUMN = "row_groups"
TASK_COLUMN = "_task"


@dataclass
class ScanResult:
    """A scan's DataFrame and the live files (``snapshot.files`` rows) it reads."""

    df: object
    files: pa.Table


def check_read_supported(snapshot) -> None:
    """The reader-feature gate for a snapshot."""
    from .. import features

    features.check_read_supported(snapshot.protocol, snapshot.metadata)


def default_parallelism(spark) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        try:
            return max(1, int(spark.conf.get("spark.default.parallelism", None) or 8))
        except Exception:
            return 8


def files_table(files: pa.Table, num_tasks: int) -> pa.Table:
    """One row per file with the columns the executors need, plus the task number (vectorised).

    Files are dealt to tasks round-robin in decreasing size order, which balances bytes per task
    within one file's size.
    """
    import numpy as np

    n = files.num_rows
    sizes = files.column("size").to_numpy(zero_copy_only=False) if "size" in files.column_names else np.zeros(n)
    sizes = np.nan_to_num(np.asarray(sizes, dtype="float64"))
    order = np.argsort(-sizes, kind="stable")
    tasks = np.empty(n, dtype="int32")
    tasks[order] = np.arange(n, dtype="int64") % max(1, num_tasks)
    pv = (
        files.column("partition_values")
        if "partition_values" in files.column_names
        else pa.nulls(n, pa.map_(pa.string(), pa.string()))
    )
    dv = files.column("deletion_vector") if "deletion_vector" in files.column_names else None
    cols = {
        "path": files.column("path").cast(pa.string()),
        "partition_values": pv,
        "size": pa.array(sizes.astype("int64")),
        TASK_COLUMN: pa.array(tasks),
    }
    if dv is not None and dv.null_count < n:
        cols["deletion_vector"] = dv
    if ROW_GROUPS_COLUMN in files.column_names:  # a file read in pieces: the row groups of each
        cols[ROW_GROUPS_COLUMN] = files.column(ROW_GROUPS_COLUMN)
    return pa.table(cols)


def task_slices(spark) -> int:
    """How many partitions Spark gives a local relation (``spark.sql.leafNodeDefaultParallelism``,
    else the default parallelism)."""
    try:
        value = spark.conf.get("spark.sql.leafNodeDefaultParallelism", None)
        if value:
            return max(1, int(value))
    except Exception:  # a session without conf access, or a value that is not a number
        pass
    return default_parallelism(spark)


def listing_for_tasks(files: pa.Table, n_tasks: int) -> pa.Table:
    """The listing (:func:`files_table`) with each file's task, rows ordered by task.

    Spark runs a DataFrame made from a small local table (a local relation) in ``min(rows,
    spark.sql.leafNodeDefaultParallelism or defaultParallelism)`` partitions (:func:`task_slices`), each a contiguous slice of the rows (``i * n //
    slices`` to ``(i + 1) * n // slices``, as ``sparkContext.parallelize`` cuts): no range
    partitioning job, no shuffle. So the files are dealt to slices of exactly those lengths, largest
    first to the slice with the fewest bytes so far, and ordered by slice: each task gets about the
    same bytes. (Were Spark to cut differently, only this balance would suffer.)
    """
    return deal_to_tasks(files_table(files, n_tasks), n_tasks)


def deal_to_tasks(listing: pa.Table, n_tasks: int) -> pa.Table:
    """``listing`` (rows with ``size`` and a task column) dealt to ``n_tasks`` contiguous slices of
    the lengths Spark cuts, largest first to the slice with the fewest bytes so far, rows ordered by
    slice (see :func:`listing_for_tasks`)."""
    import heapq

    import numpy as np

    n = listing.num_rows
    n_tasks = max(1, n_tasks)
    sizes = listing.column("size").to_numpy()
    bounds = [(i * n) // n_tasks for i in range(n_tasks + 1)]
    room = [bounds[i + 1] - bounds[i] for i in range(n_tasks)]
    heap = [(0, t) for t in range(n_tasks) if room[t] > 0]
    tasks = np.empty(n, dtype="int32")
    for i in np.argsort(-sizes, kind="stable"):
        total, t = heapq.heappop(heap)
        tasks[i] = t
        room[t] -= 1
        if room[t]:
            heapq.heappush(heap, (total + int(sizes[i]), t))
    listing = listing.set_column(listing.column_names.index(TASK_COLUMN), TASK_COLUMN, pa.array(tasks))
    return listing.take(np.argsort(tasks, kind="stable"))


def scan_files(
    spark,
    snapshot,
    *,
    files: pa.Table | None = None,
    columns: list[str] | None = None,
    with_file_column: bool = False,
    num_tasks: int | None = None,
    predicate: str | None = None,
    with_row_index: bool = False,
    row_tracking=None,
) -> ScanResult:
    """Scan a snapshot (or a subset of its live files) into a DataFrame.

    :param spark: the SparkSession
    :param snapshot: a :class:`~airflow_delta_provider_apps.engine.log.snapshot.Snapshot`
    :param files: a subset of ``snapshot.files`` rows to read (default: all live files)
    :param columns: table columns to return (default: all, in table order)
    :param with_file_column: append a ``_file`` column with each row's ``add.path``
    :param num_tasks: Spark tasks to read with (default: one per slice Spark cuts a local relation
        into, :func:`task_slices`, at most one per file)
    :param predicate: keep only the rows where this Spark SQL condition is TRUE; files that cannot
        hold such rows (partition values, min/max stats) are not read at all
    :param with_row_index: append a :data:`ROW_COLUMN` column (long) with each row's 0-based physical index in
        its file, what a deletion vector marks (after ``_file`` when both are asked for)
    :param row_tracking: a :class:`..row_tracking.RowTracking`: append each row's stable row id and row
        commit version, under the materialized columns' names (last; read by the Arrow path)
    """
    from pyspark.sql.types import StringType, StructField, StructType

    from ..storage import normalize_table_uri

    check_read_supported(snapshot)
    schema_json = snapshot.metadata.schema_string
    full_schema = StructType.fromJson(json.loads(schema_json))
    if columns is not None:
        by_name = {f.name: f for f in full_schema.fields}
        missing = [c for c in columns if c not in by_name]
        if missing:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"Unknown column(s) {missing}",
                f"the table has columns {list(by_name)}",
                "ask for columns that exist in the table schema",
            )
        out_schema = StructType([by_name[c] for c in columns])
    else:
        out_schema = full_schema
    if with_file_column:
        out_schema = StructType(list(out_schema.fields) + [StructField(FILE_COLUMN, StringType(), False)])
    if with_row_index:
        from pyspark.sql.types import LongType

        out_schema = StructType(list(out_schema.fields) + [StructField(ROW_COLUMN, LongType(), False)])
    if row_tracking is not None:
        from pyspark.sql.types import LongType

        tracked = [
            StructField(c, LongType(), True) for c in (row_tracking.row_id_column, row_tracking.commit_version_column)
        ]
        out_schema = StructType(list(out_schema.fields) + tracked)

    files = snapshot.files if files is None else files
    expr = None
    if predicate is not None:  # "" is refused by the parser, never read as "every row"
        from ..expr import parse_predicate
        from ..expr.skipping import skip_files

        expr = parse_predicate(predicate, snapshot.schema)
        files = skip_files(files, snapshot.schema, list(snapshot.metadata.partition_columns), expr).files
    if files.num_rows == 0:
        return ScanResult(spark.createDataFrame([], out_schema), files)
    # Spark's own reader where the files allow it, the predicate applied by Spark (it prunes the
    # columns a count or projection does not need and the row groups the predicate's stats exclude);
    # on a table with non-binary collations a data predicate stays ours (it compares strings by their
    # bytes, as every other path of the engine does; Spark would compare by the collation)
    from ..expr.skipping import is_partition_only
    from ..schema.collations import collated_columns

    data_predicate = expr is not None and not is_partition_only(expr, list(snapshot.metadata.partition_columns))
    ours = row_tracking is not None or (data_predicate and bool(collated_columns(snapshot.schema)))
    how = None if ours else native_scan_applies(spark, snapshot, files)
    if how is not None:
        df = _native_scan(spark, snapshot, files, full_schema, out_schema, expr, how, with_file_column, with_row_index)
        return ScanResult(df, files)

    # one task per slice Spark cuts the listing (a local relation) into, dealt by bytes: no
    # range-partitioning job (a sampling pass) nor shuffle before the scan's one job
    slices = min(files.num_rows, task_slices(spark))
    n_tasks = num_tasks or slices
    listing = listing_for_tasks(files, n_tasks) if n_tasks == slices else files_table(files, n_tasks)
    arrow_schema = arrow_schema_of(out_schema)
    table_root = normalize_table_uri(snapshot.table_root)
    partition_columns = list(snapshot.metadata.partition_columns)
    cols = list(columns) if columns is not None else None

    mode = snapshot.properties.column_mapping_mode_for(snapshot.schema)

    def fn(
        batches,
        _root=table_root,
        _schema_json=schema_json,
        _parts=partition_columns,
        _cols=cols,
        _arrow=arrow_schema,
        _with_file=with_file_column,
        _mode=mode,
        _pred=expr,  # the bound tree itself: no text round-trip between driver and tasks
        _with_row=with_row_index,
        _tracking=row_tracking,
    ):
        from airflow_delta_provider_apps.engine.spark.scan import read_files_batches
        from airflow_delta_provider_apps.engine.spark.session import guard_executor

        return guard_executor(
            read_files_batches(
                batches,
                _root,
                _schema_json,
                _parts,
                _cols,
                _arrow,
                _with_file,
                _mode,
                _pred,
                with_row_index=_with_row,
                row_tracking=_tracking,
            )
        )

    files_df = spark.createDataFrame(listing)
    if n_tasks != slices:  # another task count than Spark's cut: the files moved to their tasks
        files_df = files_df.repartitionByRange(n_tasks, TASK_COLUMN) if n_tasks > 1 else files_df.coalesce(1)
    return ScanResult(map_in_arrow(files_df, fn, out_schema), files)


NATIVE_SCAN_CONF = "spark.airflowDelta.nativeScan"
_PLAIN_PATH = r"^[A-Za-z0-9._=/-]+$"  # needs no URI decoding, holds no glob or Hadoop-path specials
NATIVE_SCHEMES = ("", "file", "hdfs", "viewfs")  # filesystems Spark reads without extra jars


def native_scan_applies(spark, snapshot, files: pa.Table) -> str | None:
    """How Spark's own parquet scan can read these files exactly, or ``None`` (use the Arrow path).

    ``"hive"``: every file sits directly in the folders its log partition values name (hive layout,
    nothing that needs escaping), so Spark's partition discovery yields the log's values; ``"literal"``:
    all files are in one partition, whose values are added as typed literals; ``"joined"``: any other
    layout (e.g. Spark's own writer's files in a folder of their job), each row's partition values
    joined from a broadcast table of the files' log values. All need plain relative
    paths, no deletion vectors, no column mapping, no type widening and a filesystem Spark reads
    natively. Opt out with ``spark.airflowDelta.nativeScan=false``."""
    import pyarrow.compute as pc

    try:
        if str(spark.conf.get(NATIVE_SCAN_CONF, "true")).strip().lower() == "false":
            return None
    except Exception:  # a session without conf access: keep the Arrow path
        return None
    scheme = snapshot.table_root.split("://", 1)[0] if "://" in snapshot.table_root else ""
    if scheme.lower() not in NATIVE_SCHEMES and not hadoop_reads(spark, scheme):
        return None
    if snapshot.properties.column_mapping_mode_for(snapshot.schema) != "none":
        return None
    if "typeWidening" in set(snapshot.protocol.reader_features or []) | set(snapshot.protocol.writer_features or []):
        return None
    if "deletion_vector" in files.column_names and files.column("deletion_vector").null_count != files.num_rows:
        return None
    paths = files.column("path")
    if not pc.all(pc.match_substring_regex(paths, _PLAIN_PATH)).as_py():
        return None
    partition_columns = list(snapshot.metadata.partition_columns)
    if not partition_columns:
        return "literal"
    folders = pc.replace_substring_regex(paths, r"[^/]*$", "")
    names = pc.replace_substring_regex(paths, r"^.*/", "")
    hive = _hive_folders(files, partition_columns)
    if hive is not None and pc.all(pc.and_(pc.equal(folders, hive), pc.invert(pc.match_substring(names, "=")))).as_py():
        return "hive"
    from ..partitions import partition_keys

    return "literal" if len(pc.unique(partition_keys(files, partition_columns))) == 1 else "joined"


def hadoop_reads(spark, scheme: str) -> bool:
    """Whether this Spark has a Hadoop filesystem for ``scheme`` (``s3a`` with hadoop-aws, ``gs``
    with the GCS connector, ``abfss`` with hadoop-azure): then its own scan reads object-store tables
    too. A stock pyspark has none, and the Arrow path (pyarrow.fs in the tasks) reads them."""
    from ..storage import hadoop_object_schemes

    if scheme.lower() not in hadoop_object_schemes():
        return False
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, spark.sparkContext._jsc.hadoopConfiguration())
        return True
    except Exception:  # no such filesystem class, or no JVM access (Spark Connect)
        return False


def _hive_folders(files: pa.Table, partition_columns: list[str]) -> pa.Array | None:
    """``c1=v1/c2=v2/`` of every file from its log partition values (NULL as Hive's default name);
    ``None`` when a value is empty or holds a character Spark would need escaped."""
    import pyarrow.compute as pc

    pv = files.column("partition_values")
    parts = []
    for c in partition_columns:
        value = pc.map_lookup(pv, pa.scalar(c), "first")
        present = pc.drop_null(value)
        if len(present) and not pc.all(pc.match_substring_regex(present, r"^[A-Za-z0-9._-]+$")).as_py():
            return None
        value = pc.fill_null(value, "__HIVE_DEFAULT_PARTITION__")
        parts.append(pc.binary_join_element_wise(pa.scalar(f"{c}="), value, pa.scalar("/"), ""))
    return pc.binary_join_element_wise(*parts, "")


def _native_scan(
    spark,
    snapshot,
    files: pa.Table,
    full_schema,
    out_schema,
    expr,
    how: str,
    with_file_column: bool = False,
    with_row_index: bool = False,
):
    """One ``spark.read.parquet`` of the given files; partition values come from the folder names
    (``how="hive"``, checked to equal the log's) or are added as typed literals (``"literal"``, one
    partition). The predicate goes to Spark, which prunes columns and row groups itself. A row's
    file (as the log names it) and physical index come from Spark's file metadata
    (``_metadata.file_path`` past the table root's path, ``_metadata.row_index``): the files are
    plain paths under the root (see :func:`native_scan_applies`), so no decoding is needed."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from ..expr.skipping import partition_table
    from ..storage import normalize_table_uri
    from .columns import to_column

    partition_columns = list(snapshot.metadata.partition_columns)
    joined = bool(partition_columns) and how == "joined"
    root = normalize_table_uri(snapshot.table_root).rstrip("/")
    # the snapshot's paths are confined to the root; the one resolver turns them into locations
    paths = file_locations(root, files.column("path"))
    if "://" not in root:  # Spark needs the scheme to read local files whatever fs.defaultFS says
        root = "file://" + root
        paths = ["file://" + p for p in paths]
    data_schema = StructType([f for f in full_schema.fields if f.name not in partition_columns])
    reader = spark.read
    if how == "hive" and partition_columns:
        parts = [full_schema[c] for c in partition_columns]
        reader = reader.schema(StructType(list(data_schema.fields) + parts)).option("basePath", root)
    else:
        reader = reader.schema(data_schema)
    # The paths are exact files from the log: listing them must not start Spark's distributed file
    # listing job (it does above parallelPartitionDiscovery.threshold paths, 32 by default, and that
    # costs more than the scan of a few partitions). Our sessions start with a threshold no table
    # reaches (DEFAULT_CONF); on another session it is raised for this call only (a shared Spark
    # Connect session is never changed by a run: concurrent runs would see each other's setting).
    threshold_conf = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(threshold_conf, None)
    raise_it = int(before or 32) <= len(paths)
    try:  # Spark checks that every path exists here, before any job
        if raise_it:
            spark.conf.set(threshold_conf, str(len(paths) + 1))
        df = reader.parquet(*paths)
        if with_file_column or joined:  # the log's relative path: what follows the root's path in Spark's URI
            root_path = "/" + root.split("://", 1)[1].split("/", 1)[1].rstrip("/") + "/"
            literal = root_path.replace("\\", "\\\\").replace("'", "\\'")
            df = df.withColumn(
                FILE_COLUMN,
                F.expr(f"substring(_metadata.file_path, instr(_metadata.file_path, '{literal}') + {len(root_path)})"),
            )
        if with_row_index:
            df = df.withColumn(ROW_COLUMN, F.col("_metadata.row_index"))
    except Exception as e:
        if "PATH_NOT_FOUND" not in str(e):
            raise
        from ..reader import missing_data_file

        hit = next(((p, full) for p, full in zip(files.column("path").to_pylist(), paths) if p in str(e)), None)
        raise missing_data_file(*(hit or ("(one of the table's files)", root))) from None
    finally:
        if raise_it and before is None:
            spark.conf.unset(threshold_conf)
        elif raise_it:
            spark.conf.set(threshold_conf, before)
    if partition_columns and how == "literal":
        values = partition_table(files.slice(0, 1), snapshot.schema, partition_columns).to_pylist()[0]
        for name in partition_columns:
            df = df.withColumn(name, F.lit(values[name]).cast(full_schema[name].dataType))
    elif joined:  # one row per file: its path as the log names it, its typed partition values
        values = partition_table(files, snapshot.schema, partition_columns)
        by_file = spark.createDataFrame(values.append_column("__pv_file", files.column("path").combine_chunks()))
        df = df.join(F.broadcast(by_file), df[FILE_COLUMN] == by_file["__pv_file"]).drop("__pv_file")
        for name in partition_columns:
            df = df.withColumn(name, F.col(f"`{name}`").cast(full_schema[name].dataType))
    if expr is not None:
        df = df.filter(to_column(expr))
    return df.select(*[F.col(f"`{f.name}`") for f in out_schema.fields])


def to_dataframe(
    spark, snapshot, *, columns: list[str] | None = None, with_file_column: bool = False, predicate: str | None = None
):
    """The snapshot's rows as a DataFrame (see :func:`scan_files`)."""
    return scan_files(spark, snapshot, columns=columns, with_file_column=with_file_column, predicate=predicate).df


def read_files_batches(
    batches,
    table_root: str,
    schema_json: str,
    partition_columns: list[str],
    columns: list[str] | None,
    arrow_schema: pa.Schema,
    with_file_column: bool,
    column_mapping_mode: str = "none",
    predicate=None,
    *,
    with_row_index: bool = False,
    row_tracking=None,
):
    """Executor side: read every file named in ``batches`` and yield Arrow batches in ``arrow_schema``
    (with ``row_tracking``, a :class:`..row_tracking.RowTracking`, each row's stable row id and commit
    version last).

    Files are streamed (:func:`airflow_delta_provider_apps.engine.reader.iter_data_file_batches`): a task holds about
    one row group and one batch of at most ``MAX_BATCH_ROWS`` rows per file at a time, never a
    whole file, so its memory does not grow with the data file size.

    Usable without Spark (any iterable of batches with ``path``, ``partition_values`` (map or JSON)
    and optionally ``deletion_vector`` (struct with Delta's camelCase fields) and
    :data:`ROW_GROUPS_COLUMN` (a piece of a file) columns).
    """
    from .. import reader
    from ..schema import parse_schema
    from ..storage import storage_for

    storage = storage_for(table_root)
    schema = parse_schema(schema_json)
    expr, read_columns = None, columns
    if predicate is not None:  # a bound tree (``expr.Expr``)
        from ..expr import true_mask
        from ..expr.skipping import row_groups_may_match

        expr = predicate
        if columns is not None:  # the predicate's columns are read too, then dropped
            read_columns = list(dict.fromkeys([*columns, *(p[0] for p in expr.columns())]))
    for batch in batches:
        paths = batch.column("path").to_pylist()
        pvs = batch.column("partition_values").to_pylist()
        names = batch.schema.names
        dvs = batch.column("deletion_vector").to_pylist() if "deletion_vector" in names else [None] * len(paths)
        pieces = batch.column(ROW_GROUPS_COLUMN).to_pylist() if ROW_GROUPS_COLUMN in names else [None] * len(paths)
        for path, pv, dv, piece in zip(paths, pvs, dvs, pieces):
            pv = as_dict(pv)
            row_groups = None
            if expr is not None or piece is not None:
                # row groups of another piece of the file, or whose statistics rule the predicate
                # out, are not read (the reader keeps the physical row index, for deletion vectors)

                def row_groups(md, _pv=pv, _piece=None if piece is None else set(piece)):
                    keep = [_piece is None or g in _piece for g in range(md.num_row_groups)]
                    if expr is None:
                        return keep
                    return [
                        k and m for k, m in zip(keep, row_groups_may_match(md, expr, schema, partition_columns, _pv))
                    ]

            for b in reader.iter_data_file_batches(
                storage,
                table_root,
                path,
                pv,
                schema,
                partition_columns,
                columns=read_columns,
                deletion_vector=dv,
                column_mapping_mode=column_mapping_mode,
                batch_rows=MAX_BATCH_ROWS,
                row_groups=row_groups,
                row_index=with_row_index,
                row_tracking=row_tracking.of(path) if row_tracking is not None else None,
            ):
                if expr is not None and b.num_rows:
                    b = b.filter(true_mask(expr, b))
                    if read_columns is not columns:
                        b = b.select([*columns, *([reader.ROW_INDEX] if with_row_index else [])])
                if not b.num_rows:
                    continue
                index = None
                if with_row_index:
                    index = b.column(reader.ROW_INDEX)
                    b = b.drop_columns([reader.ROW_INDEX])
                if with_file_column:
                    b = b.append_column(
                        pa.field(FILE_COLUMN, pa.string(), nullable=False),
                        pa.repeat(pa.scalar(path, pa.string()), b.num_rows),
                    )
                if index is not None:
                    b = b.append_column(pa.field(ROW_COLUMN, pa.int64(), nullable=False), index)
                if row_tracking is not None:  # the reader put them after the data columns: last here
                    names = (row_tracking.row_id_column, row_tracking.commit_version_column)
                    b = b.select([c for c in b.schema.names if c not in names] + list(names))
                yield _conform(b, arrow_schema)


def as_dict(pv) -> dict:
    if pv is None:
        return {}
    if isinstance(pv, dict):
        return pv
    if isinstance(pv, str):
        return json.loads(pv)
    return dict(pv)  # Arrow map -> list of (key, value)


def _conform(batch: pa.RecordBatch, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in the declared Spark schema's Arrow form (column order, types, nullability).

    NOT NULL fields under a NULL struct get a placeholder (as Spark holds them), since Spark's Arrow
    conversion refuses a NULL in a non-nullable field even where its parent is NULL."""
    from ..writer import fill_under_null_parents

    if any(pa.types.is_struct(f.type) for f in arrow_schema):
        names = [f.name for f in arrow_schema]
        batch = batch.select(names)
        columns = [fill_under_null_parents(batch.column(i), f.type) for i, f in enumerate(arrow_schema)]
        batch = pa.RecordBatch.from_arrays(columns, names=names)
    if batch.schema.equals(arrow_schema, check_metadata=False):
        return batch
    batch = batch.select([f.name for f in arrow_schema])
    if batch.num_columns == 0:
        return batch  # RecordBatch.cast would drop the row count of a column-less batch
    return batch.cast(arrow_schema)


def changes_dataframe(spark, plan, columns: list[str] | None = None):
    """The change rows of a :class:`~..cdf.ChangePlan` as a DataFrame (the table's columns, or
    ``columns``, then ``_change_type``, ``_commit_version``, ``_commit_timestamp``): one row per
    change file, dealt to tasks, each read there one bounded batch at a time (:class:`~..cdf.ChangeReader`)."""
    import dataclasses

    from ..cdf import ChangeReader

    reader = ChangeReader(plan, columns)  # unknown columns fail here, on the driver
    out_schema = changes_spark_schema(reader)
    if not plan.files:
        return spark.createDataFrame([], out_schema)
    # one row per file: Spark cuts the listing (a local relation) into one slice per task, with no
    # range-partitioning job nor shuffle before the read's one job
    listing = pa.table({"file": [json.dumps(dataclasses.asdict(f)) for f in plan.files]})

    arrow_schema = arrow_schema_of(out_schema)

    def fn(batches, _reader=reader, _arrow=arrow_schema):
        from airflow_delta_provider_apps.engine.spark.scan import read_change_files

        return read_change_files(_reader, batches, _arrow)

    return map_in_arrow(spark.createDataFrame(listing), fn, out_schema)


def changes_spark_schema(reader):
    """The pyspark schema of the change rows a :class:`~..cdf.ChangeReader` reads: its columns, then
    ``_change_type``, ``_commit_version`` and ``_commit_timestamp``."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from ..cdf import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION

    table = StructType.fromJson(json.loads(reader.table_schema.to_json_string()))
    return StructType(
        [
            *[f for f in table.fields if f.name in reader.names],
            StructField(CHANGE_TYPE, StringType()),
            StructField(COMMIT_VERSION, LongType()),
            StructField(COMMIT_TIMESTAMP, TimestampType()),
        ]
    )


def arrow_schema_of(spark_schema) -> pa.Schema:
    """The Arrow form in which Spark takes rows of ``spark_schema`` from Python (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(spark_schema, timezone="UTC")  # pyspark 4.1 and later
    except TypeError:  # pyspark 4.0: no timezone argument, timestamps are UTC
        return to_arrow_schema(spark_schema)


def read_change_files(reader, batches, arrow_schema: pa.Schema):
    """Executor side of :func:`changes_dataframe`: the change rows of every file named in ``batches``
    (in ``arrow_schema``, Spark's form of the output)."""
    from ..cdf import ChangeFile
    from ..storage import storage_for
    from .session import guard_executor

    def run():
        storage = storage_for(reader.table_root)
        for batch in batches:
            for text in batch.column("file").to_pylist():
                for b in reader.batches(storage, ChangeFile(**json.loads(text))):
                    yield _conform(b, arrow_schema)

    return guard_executor(run())


def read_planned_files(plan: dict, listing, predicate=None):
    """The Arrow batches of a planned partition: ``listing``'s files read with the read's ``plan``
    (root, schema, partition columns, columns, Arrow schema, column mapping mode); the data source's batch
    and stream reads both read their files here."""
    return read_files_batches(
        listing.to_batches(),
        plan["root"],
        plan["schema_json"],
        plan["partition_columns"],
        plan["columns"],
        plan["arrow"],
        False,
        plan["mode"],
        predicate,
    )
