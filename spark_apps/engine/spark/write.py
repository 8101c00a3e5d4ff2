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

import pyarrow as pa

from ..actions import AddCDCFile, AddFile
from ..writer import (
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_TARGET_FILE_SIZE,
    WriteResult,
    WriteSpec,
    adds_table,
    write_batches,
)
from .session import collect_tasks, guard_executor

__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "DEFAULT_TARGET_FILE_SIZE",
    "WriteSpec",
    "write_data_files",
    "conform_dataframe",
    "write_partition_batches",
]
OUTPUT_SCHEMA = "add_json string, num_rows long"


# --------------------------------------------------------------------------------------------------
# driver side


def spark_schema(schema_json: str | dict):
    """pyspark ``StructType`` of a Delta schema JSON (string or parsed)."""
    from pyspark.sql.types import StructType

    obj = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    return StructType.fromJson(obj)


def conform_dataframe(df, schema_json: str | dict, *, keep=()):
    """Select and cast ``df``'s columns to the table schema, in table order.

    Column names match case-insensitively (Spark's default), at every nesting level; a table
    column missing from ``df`` gets the value rows that leave it out get
    (:func:`..defaults.default_value`: its DEFAULT's, else a typed null; the command has
    already checked it may be left out). Structs are rebuilt field by field BY NAME (Spark's struct cast is positional, which
    would silently swap same-typed fields given in another order), also inside arrays and maps.

    :param df: the DataFrame to write
    :param schema_json: the table's Delta schema JSON
    :param keep: columns of ``df`` kept after the table's, as they are (row tracking's materialized ids)
    """
    from pyspark.sql import functions as F

    from ..defaults import default_value
    from ..schema import StructType as DeltaStruct
    from .columns import conform_column

    target = spark_schema(schema_json)
    by_lower = {f.name.lower(): f for f in df.schema.fields}
    table = DeltaStruct.from_json(json.loads(schema_json) if isinstance(schema_json, str) else schema_json)
    cols = []
    for f in target.fields:
        src = by_lower.get(f.name.lower())
        if src is None:
            cols.append(F.lit(default_value(table.field(f.name))).cast(f.dataType).alias(f.name))
        else:
            cols.append(conform_column(F.col(_quote(src.name)), src.dataType, f.dataType).alias(f.name))
    return df.select(*cols, *[F.col(_quote(c)) for c in keep])


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


def task_partition_id() -> int:
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
        tid = task_partition_id() if task_id is None else task_id
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
    from pyspark.sql import functions as F

    from ..cdf import CHANGE_TYPE, INSERT
    from ..writer import table_write_spec
    from .scan import scan_files

    if not adds:
        return []
    rows = scan_files(spark, snapshot, files=adds_table(adds)).df.withColumn(CHANGE_TYPE, F.lit(INSERT))
    return list(write_data_files(rows, table_write_spec(snapshot), change_data=True).adds)


# --------------------------------------------------------------------------------------------------
# Spark's own parquet writer (the join-merge's output): stats from the written files' footers

#: ``false`` keeps every write on the core writer (mapInArrow), e.g. to compare the two
NATIVE_WRITE_CONF = "spark.airflowDelta.nativeWrite"
#: partition column types whose Hive folder name is Delta's partition value text
_NATIVE_PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "date", "boolean")
_NATIVE_TYPES = (*_NATIVE_PARTITION_TYPES, "float", "double", "decimal", "timestamp_ntz", "timestamp", "binary")
_NATIVE_TYPES += ("variant",)  # the Parquet Variant encoding, unshredded (see native_write_applies)
#: Spark's setting that shreds variants on write (a table without variantShredding must not get such files)
_SHREDDING_CONF = "spark.sql.variant.writeShredding.enabled"


def native_write_applies(spark, spec: WriteSpec) -> str | None:
    """Why Spark's own writer cannot write this table's rows exactly as the core writer would
    (None: it can). It writes plain parquet files; it cannot check NOT NULL, CHECK constraints,
    compute generated or identity columns, write physical column names, or honour a row constraint,
    so tables that need one of those keep the core writer. Timestamps need Spark's INT64 micros
    output (``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``, which our sessions set)."""
    from ..column_mapping import mode_of
    from ..constraints import rules_for
    from ..identity import identities
    from ..schema import DecimalType, parse_schema
    from .scan import NATIVE_SCHEMES, hadoop_reads
    from .session import conf_value

    if conf_value(spark, NATIVE_WRITE_CONF, "true").strip().lower() == "false":
        return f"{NATIVE_WRITE_CONF}=false"
    root = spec.table_uri
    scheme = root.split("://", 1)[0] if "://" in root else ""
    if scheme.lower() not in NATIVE_SCHEMES and not hadoop_reads(spark, scheme):
        return f"Spark has no filesystem for {scheme}://"
    if mode_of(spec.configuration) != "none":
        return "column mapping"
    if spec.row_constraint is not None:
        return "a row constraint"
    if spec.row_tracking:
        return "row tracking (materialized row ids)"
    schema = parse_schema(spec.schema_json)
    if rules_for(spec.schema_json, spec.configuration) or identities(schema):
        return "CHECK constraints, generated or identity columns"
    for f in schema.fields:
        kind = "decimal" if isinstance(f.type, DecimalType) else getattr(f.type, "name", "")
        if not f.nullable or kind not in _NATIVE_TYPES:
            return f"column {f.name} ({'NOT NULL' if not f.nullable else kind or 'nested'})"
        if f.name in spec.partition_columns and kind not in _NATIVE_PARTITION_TYPES:
            return f"partition column {f.name} of type {kind}"
        if kind == "variant" and conf_value(spark, _SHREDDING_CONF, "false").strip().lower() != "false":
            return f"variant column {f.name} with {_SHREDDING_CONF} (variants are written unshredded)"
        if kind == "timestamp":
            out = conf_value(spark, "spark.sql.parquet.outputTimestampType", "INT96").strip().upper()
            if out != "TIMESTAMP_MICROS":
                return f"timestamps written as {out}"
    return None


def write_native(df, spec: WriteSpec) -> WriteResult:
    """Write ``df`` (conformed to the table schema; see :func:`native_write_applies`) with Spark's
    own parquet writer into a new folder of the table (``<uuid>/``, Hive partition folders below
    it: a job's own folder, so concurrent jobs never share Spark's ``_temporary``), then read each
    written file's footer on the driver for its Delta stats (O(files), no data read again) and
    return the AddFile actions. Nothing is committed: a failed job's files are deleted here, and an
    uncommitted folder is VACUUM's like any orphan."""
    import uuid

    from ..paths import new_file_location
    from ..storage import normalize_table_uri, storage_for

    start = time.time()
    root = normalize_table_uri(spec.table_uri)
    folder = uuid.uuid4().hex
    location = new_file_location(root, folder)
    storage = storage_for(root)
    writer = (
        df.write.mode("error")  # (Spark Connect knows this name only)
        .option("compression", "snappy")
        .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")  # no _SUCCESS file
    )
    if spec.partition_columns:
        writer = writer.partitionBy(*spec.partition_columns)
    try:
        writer.parquet(location if "://" in location else "file://" + location)
        adds, rows = _footer_adds(storage, spec, root, folder)
    except BaseException:
        _delete_folder(storage, root, folder)
        raise
    return WriteResult(
        adds=adds,
        num_output_rows=rows,
        num_output_bytes=sum(a.size for a in adds),
        write_time_ms=int((time.time() - start) * 1000),
    )


def _footer_adds(storage, spec: WriteSpec, root: str, folder: str) -> tuple[list, int]:
    """AddFile actions of the parquet files Spark wrote in the table's ``folder`` (their stats from their
    footers, read in threads); other files there (Hadoop's ``.crc`` checksums) and empty files are
    deleted."""
    import pyarrow.parquet as pq

    from .. import partitions
    from ..paths import new_file_location
    from ..schema import parse_schema
    from ..stats import StatsCollector, stats_config_from_properties
    from ..threads import ThreadPool

    def at(rel: str) -> str:
        return new_file_location(root, f"{folder}/{rel}")

    listing = storage.list_files(new_file_location(root, folder))
    paths = listing.column("path").to_pylist()
    sizes = dict(zip(paths, listing.column("size").to_pylist()))
    data = [p for p in paths if p.endswith(".parquet") and not p.rsplit("/", 1)[-1].startswith((".", "_"))]
    for p in set(paths) - set(data):
        storage.delete(at(p))
    schema = parse_schema(spec.schema_json)
    data_schema = schema.without(set(spec.partition_columns))
    config = stats_config_from_properties(spec.configuration or {})

    def one(rel: str):
        with storage.open_input_file(at(rel)) as f:
            md = pq.ParquetFile(f).metadata
        return rel, md

    with ThreadPool(max_workers=8) as pool:
        footers = list(pool.map(one, data))
    adds, rows = [], 0
    for rel, md in footers:
        if md.num_rows == 0:  # Spark writes one empty file for an empty input
            storage.delete(at(rel))
            continue
        dirs = rel.split("/")[:-1]
        values = dict(d.split("=", 1) for d in dirs)
        pvalues = {c: partitions.hive_unescape(values[partitions.hive_escape(c)]) for c in spec.partition_columns}
        stats = StatsCollector(data_schema, **config).update_from_parquet(md)
        adds.append(
            AddFile(
                path=partitions.encode_add_path(f"{folder}/{rel}"),
                partition_values=pvalues,
                size=int(sizes[rel]),
                modification_time=int(time.time() * 1000),
                data_change=bool(spec.data_change),
                stats=stats.to_json(),
            )
        )
        rows += md.num_rows
    return adds, rows


def _delete_folder(storage, root: str, folder: str) -> None:
    """Best effort: the files of a failed native write (what is left is VACUUM's)."""
    from ..paths import new_file_location

    try:
        for p in storage.list_files(new_file_location(root, folder)).column("path").to_pylist():
            storage.delete(new_file_location(root, f"{folder}/{p}"))
    except Exception:  # cleanup must not hide the write's own error
        pass
