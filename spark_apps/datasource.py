"""Delta tables in any PySpark session without jars: a Python Data Source (``pyspark.sql.datasource``)
over the engine.

``register(spark)`` registers it as ``airflow_delta``, and as ``delta`` when the session has no other
``delta`` source (delta-spark's jars win where they are). Then::

    spark.read.format("delta").load(path)                         # latest; versionAsOf, timestampAsOf
    spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(path)
    df.write.format("delta").mode("append").save(path)            # or "overwrite"; replaceWhere, ...

Read: at analysis the schema comes from the snapshot (a time-travel version is pinned there); the
worker that plans the read loads the snapshot once (that version, else the latest, as delta-spark reads
a DataFrame's table when an action runs; columns added since are left out, a column changed since is
refused), skips files with the filters Spark pushes (pyspark 4.1+: partition values and min/max stats,
:func:`..expr.skipping.skip_files`) and deals the files left to partitions balanced by bytes
(:func:`.engine.spark.scan.files_table`, one per core of the registering session); each partition
streams exactly those files as Arrow batches through the engine's reader (deletion vectors, column
mapping, type widening, timestamps without zone). Every pushed filter is also returned to Spark, which
applies it again: skipping is never exact.

SQL: ``CREATE TEMPORARY VIEW v USING delta OPTIONS (path '...')``; ``CREATE TABLE t USING delta LOCATION
'...'`` (or ``OPTIONS (path '...')``, or ``spark.catalog.createTable(name, path=..., source="delta")``)
keeps the location in the schema the catalog stores (:data:`TABLE_KEY`), since Spark hands a Python
data source no catalog table's location; ``SELECT`` and ``INSERT INTO`` then find it. A catalog table
whose schema Spark did not ask this source for (columns declared in the CREATE, ``saveAsTable``, one
delta-spark registered) is refused on read, naming ``SELECT ... WITH ('path' = ...)``.

Write: the driver checks the data's schema against the table (or plans a new table) before any task
runs; tasks conform their Arrow batches and write data files with stats through the engine's writer
(NOT NULL, CHECK constraints, generated and identity columns), returning their AddFile actions; the
driver commits once through the engine's WRITE or CREATE command (:mod:`.engine.commands.write`), handed
the files as already written (:class:`WrittenPlane`). ``abort`` deletes the files the tasks wrote.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from pyspark.sql import datasource as _ds
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition, WriterCommitMessage

# TABLE_KEY: the field metadata key (on the first column) under which a catalog table made by ``CREATE
# TABLE ... USING delta LOCATION`` (or synced by the Hive metastore catalog) keeps its location and options
from .engine.catalog import TABLE_KEY
from .engine.commit_identity import TxnIdentity
from .engine.errors import InvalidArgumentError, TableNotFoundError

__all__ = ["NAME", "ChangesReader", "DeltaDataSource", "DeltaReader", "DeltaWriter", "WrittenPlane", "register"]

#: the name the source always has; ``delta`` too when nothing else in the session is called so
NAME = "airflow_delta"
#: pyspark 4.1+ hands filters to ``pushFilters`` only with this session property on
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: in the error of a load the source refuses: tells :func:`register` the ``delta`` it found is this one
_MARKER = "[airflow_delta source]"
_TRUE = ("true", "1", "yes")


def register(spark, *, pyfiles=None) -> list[str]:
    """Register the source on ``spark`` (classic or Spark Connect); returns the names it took.

    * always ``airflow_delta``; ``delta`` too when resolving ``format("delta")`` finds no source
      (a load of a path that does not exist is analysed, no job starts: delta-spark's source answers
      that the path is no table, a session without one says ``DATA_SOURCE_NOT_FOUND``);
    * over Spark Connect the server's Python workers need this package: ``pyfiles`` (the apps' zip the
      operators ship), else a zip of the installed package, is added to the session's Python path;
    * pyspark 4.1+: filter pushdown is switched on for the session (:data:`PUSHDOWN_CONF`).
    """
    from .engine.spark.scan import default_parallelism
    from .engine.spark.session import is_connect

    if is_connect(spark):
        _ship(spark, list(pyfiles) if pyfiles else [_package_zip()])
    if _pushdown_supported():
        spark.conf.set(PUSHDOWN_CONF, "true")
    parallelism = default_parallelism(spark)
    names = [NAME] + ([] if _other_delta(spark) else ["delta"])
    for name in names:
        spark.dataSource.register(_named(name, parallelism))
    return names


def _pushdown_supported() -> bool:
    return "pushFilters" in DataSourceReader.__dict__  # pyspark 4.1+


def _other_delta(spark) -> bool:
    """Whether ``format("delta")`` resolves to a source other than this one (see :func:`register`)."""
    import uuid

    try:
        _ = spark.read.format("delta").load(f"/nonexistent-{uuid.uuid4().hex}").schema  # analysis only
    except Exception as e:
        text = str(e)
        return "DATA_SOURCE_NOT_FOUND" not in text and _MARKER not in text
    return True


def _named(name: str, parallelism: int) -> type:
    """The source under ``name``, dealing reads to ``parallelism`` partitions (the registering
    session's cores: the planning worker has no session to ask)."""
    return type("DeltaDataSource", (DeltaDataSource,), {"_name": name, "parallelism": parallelism})


def _ship(spark, pyfiles: list[str]) -> None:
    """Add ``pyfiles`` to a Connect session's Python path once per session and set of file contents:
    after the upload a marker naming their hashes is cached in the session (the one kind of artifact
    whose presence a client can ask about), and a session holding it gets no second upload."""
    import hashlib

    from .engine.spark.session import add_pyfiles, holds_marker

    digests = []
    for p in pyfiles:
        with open(p, "rb") as f:
            digests.append(hashlib.file_digest(f, "sha256").hexdigest())
    marker = ("airflow_delta source pyfiles " + " ".join(digests)).encode()
    if not holds_marker(spark, marker):
        add_pyfiles(spark, pyfiles)
        spark.client.cache_artifact(marker)


@functools.cache
def _package_zip() -> str:
    """A zip of the installed package (deterministic bytes, named by their hash), for a Connect server
    (built once per process)."""
    import hashlib
    import os
    import tempfile

    from .package_zip import package_contents, write_zip

    blobs = package_contents(os.path.dirname(os.path.abspath(__file__)), __package__)
    digest = hashlib.sha256(b"".join(arc.encode() + b"\0" + data for arc, data in blobs)).hexdigest()[:16]
    target = os.path.join(tempfile.gettempdir(), "airflow-delta-provider", f"{__package__}-{digest}.zip")
    if not os.path.isfile(target):
        write_zip(target, blobs)
    return target


# --------------------------------------------------------------------------------------------------
# options


def _path(options) -> str:
    from .engine.storage import normalize_table_uri

    path = options.get("path")
    if not path:
        raise InvalidArgumentError(
            f"No table path given to the delta source {_MARKER}",
            f"load()/save() had no path and no 'path' option (options: {sorted(options)}); Spark hands a "
            "Python data source no location of a catalog table it did not create through this source "
            "(CREATE TABLE ... USING delta LOCATION, made with the source registered, carries it)",
            "pass the table's location: .load('/data/t') or .save('/data/t'); in SQL, "
            "CREATE TEMPORARY VIEW v USING delta OPTIONS (path '/data/t'), or "
            "SELECT * FROM t WITH ('path' = '/data/t') for a catalog table t",
        )
    return normalize_table_uri(path)


def _without_table_key(schema):
    """``schema`` without :data:`TABLE_KEY` (never written into a table's own schema)."""
    if not schema.fields or TABLE_KEY not in schema.fields[0].metadata:
        return schema
    from pyspark.sql.types import StructType

    copy = StructType.fromJson(schema.jsonValue())
    copy.fields[0].metadata = {k: v for k, v in copy.fields[0].metadata.items() if k != TABLE_KEY}
    return copy


def _creating_table(options) -> bool:
    """Whether Spark asks for the schema of a ``CREATE TABLE ... USING`` (its options are then the
    table's properties: ``provider`` and ``location`` among them, which no read passes)."""
    return "provider" in options and "location" in options


def _table_options(options) -> dict:
    """What a catalog table keeps of a CREATE TABLE's options: the path and the ``OPTIONS (...)``."""
    opts = {k[len("option.") :]: v for k, v in options.items() if k.startswith("option.")}
    opts.pop("path", None)
    return {"path": options["path"], **opts}


def _options_of(options, schema):
    """The read's options: its own, or for a catalog table read by name (no path), those its schema
    carries (:data:`TABLE_KEY`)."""
    if options.get("path") or not schema.fields:
        return options
    carried = schema.fields[0].metadata.get(TABLE_KEY)
    return _ds.CaseInsensitiveDict({**json.loads(carried), **dict(options)}) if carried else options


def _flag(options, key: str) -> bool:
    return str(options.get(key, "false")).strip().lower() in _TRUE


def _load_snapshot(root: str, options, version: int | None = None):
    """The snapshot a batch read reads: ``version`` (pinned at analysis), else latest, ``versionAsOf``
    or ``timestampAsOf``."""
    from .engine.log.snapshot import load_snapshot
    from .engine.storage import storage_for
    from .engine.values import parse_timestamp_ms, parse_version

    timestamp = None
    if version is None:
        given, timestamp = options.get("versionAsOf"), options.get("timestampAsOf")
        if given is not None and timestamp is not None:
            raise InvalidArgumentError(
                "Both versionAsOf and timestampAsOf were given", None, "pass only one of them for time travel"
            )
        version = parse_version(given, "versionAsOf") if given is not None else None
    try:
        return load_snapshot(
            storage_for(root),
            root,
            version=version,
            timestamp_ms=parse_timestamp_ms(timestamp) if timestamp is not None else None,
        )
    except TableNotFoundError as e:
        raise TableNotFoundError(f"{e} {_MARKER}") from None


def _time_travel(options) -> bool:
    return options.get("versionAsOf") is not None or options.get("timestampAsOf") is not None


def _read_columns(snapshot, schema) -> list[str] | None:
    """The columns of the table's current snapshot that a read planned with ``schema`` (the analysis
    schema: the DataFrame's, or a catalog table's) returns: None when they are all of them. Columns
    added since are left out (as delta-spark does); a column dropped, renamed or retyped since is
    refused, since its values would not be what the DataFrame declares."""
    current = {f.name.lower(): f for f in _spark_schema(snapshot.schema).fields}
    changed = [
        f"{f.name}: {f.dataType.simpleString()} -> "
        + (current[f.name.lower()].dataType.simpleString() if f.name.lower() in current else "gone")
        for f in schema.fields
        if f.name.lower() not in current or current[f.name.lower()].dataType.simpleString() != f.dataType.simpleString()
    ]
    if changed:
        raise InvalidArgumentError(
            f"The schema of the Delta table at '{snapshot.table_root}' changed since the read was planned",
            f"version {snapshot.version} differs in {', '.join(changed)}",
            "read the table again (a new spark.read...load()); for a catalog table, create it again "
            "so the catalog holds the new schema",
        )
    return None if len(schema.fields) == len(current) else [f.name for f in schema.fields]


def _change_plan(root: str, options):
    """The change data feed's plan of ``startingVersion``/``endingVersion`` (or their timestamps)."""
    from .engine.cdf import plan_changes
    from .engine.storage import storage_for
    from .engine.values import parse_version

    start, end = options.get("startingVersion"), options.get("endingVersion")
    if start is None and options.get("startingTimestamp") is None:
        raise InvalidArgumentError(
            "readChangeFeed needs a starting point",
            "neither startingVersion nor startingTimestamp was given",
            "add .option('startingVersion', 0) (or startingTimestamp)",
        )
    return plan_changes(
        storage_for(root),
        root,
        parse_version(start, "startingVersion") if start is not None else None,
        parse_version(end, "endingVersion") if end is not None else None,
        start_timestamp=options.get("startingTimestamp"),
        end_timestamp=options.get("endingTimestamp"),
    )


def _spark_schema(delta_schema):
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(delta_schema.to_json_string()))


# --------------------------------------------------------------------------------------------------
# the source


class DeltaDataSource(DataSource):
    """Delta tables through the engine (see the module docstring); register with :func:`register`."""

    _name = NAME
    #: partitions a read is dealt to at most (set by :func:`register`: the session's cores)
    parallelism = 8

    @classmethod
    def name(cls) -> str:
        return cls._name

    def schema(self):
        """The table's schema at analysis; a time-travel read's version is pinned here (a
        ``timestampAsOf`` resolved once). Called in a planning worker; Spark pickles this instance
        afterwards and hands it to the worker that plans the read."""
        root = _path(self.options)
        if _flag(self.options, "readChangeFeed"):
            from .engine.cdf import ChangeReader
            from .engine.spark.scan import changes_spark_schema

            if self.options.get("startingVersion") is None and self.options.get("startingTimestamp") is None:
                from .datasource_streaming import changes_schema_at_latest  # a stream starts at the snapshot

                return changes_schema_at_latest(root)  # (a batch read is refused when it plans)

            return changes_spark_schema(ChangeReader(_change_plan(root, self.options)))
        snapshot = _load_snapshot(root, self.options)
        if _time_travel(self.options):
            self.pinned_version = snapshot.version
        schema = _spark_schema(snapshot.schema)
        if _creating_table(self.options) and schema.fields:  # the catalog keeps the location in the schema
            first = schema.fields[0]
            first.metadata = {**first.metadata, TABLE_KEY: json.dumps(_table_options(self.options))}
        return schema

    def reader(self, schema):
        options = _options_of(self.options, schema)
        if _flag(options, "readChangeFeed"):
            return ChangesReader(options, schema, self.parallelism)
        return DeltaReader(options, schema, self.parallelism, getattr(self, "pinned_version", None))

    def writer(self, schema, overwrite: bool):  # INSERT INTO a catalog table: its schema carries the location
        return DeltaWriter(_options_of(self.options, schema), _without_table_key(schema), overwrite)

    def streamReader(self, schema):  # readStream: see .datasource_streaming
        from .datasource_streaming import FLAGS, DeltaStreamReader

        options = _options_of(self.options, schema)
        flags = {k: _flag(options, k) for k in FLAGS}
        return DeltaStreamReader(_path(options), options, flags, schema, self.parallelism)

    def streamWriter(self, schema, overwrite: bool):  # writeStream; overwrite: outputMode("complete")
        from .datasource_streaming import DeltaStreamWriter, batch_options

        options = _options_of(self.options, schema)
        return DeltaStreamWriter(options, DeltaWriter(batch_options(options), _without_table_key(schema), overwrite))


# --------------------------------------------------------------------------------------------------
# read


def _filter_sql(f, schema) -> str | None:
    """Spark SQL text of one pushed pyspark ``Filter`` on ``schema`` (an engine StructType), or None
    when it is not one the engine can take (a column it cannot find, a value of another type)."""
    from pyspark.sql import datasource as ds

    from .engine.expr import nodes as n
    from .engine.expr.sql import quote, to_sql
    from .engine.schema import StructType

    if isinstance(f, ds.Not):
        inner = _filter_sql(f.child, schema)
        return None if inner is None else f"NOT ({inner})"
    field, struct = None, schema
    for part in f.attribute:
        field = struct.find(part) if isinstance(struct, StructType) else None
        if field is None:
            return None
        struct = field.type
    column = ".".join(quote(p) for p in f.attribute)

    def lit(v) -> str:
        t = field.type
        if t.name == "timestamp" and getattr(v, "tzinfo", None) is None:
            raise ValueError("a timestamp without its zone")  # its instant is not known here
        if t.name == "string" and not isinstance(v, str):
            raise ValueError("not a string")
        return to_sql(n.Literal(v, t))

    ops = {
        ds.EqualTo: "=",
        ds.EqualNullSafe: "<=>",
        ds.GreaterThan: ">",
        ds.GreaterThanOrEqual: ">=",
        ds.LessThan: "<",
        ds.LessThanOrEqual: "<=",
    }
    try:
        if type(f) in ops:
            return f"{column} {ops[type(f)]} {lit(f.value)}"
        if isinstance(f, ds.In):
            return f"{column} IN ({', '.join(lit(v) for v in f.value)})" if f.value else None
        if isinstance(f, ds.IsNull):
            return f"{column} IS NULL"
        if isinstance(f, ds.IsNotNull):
            return f"{column} IS NOT NULL"
        if isinstance(f, ds.StringStartsWith) and isinstance(f.value, str):
            pattern = f.value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            return f"{column} LIKE {to_sql(n.Literal(pattern, field.type))}"
    except (ValueError, TypeError, AttributeError):
        return None
    return None


class DeltaReader(DataSourceReader):
    """A batch read of one snapshot: loaded once in the worker that plans the read (``pushFilters``
    and ``partitions`` share it), at the version pinned at analysis for time travel, else the latest
    (as delta-spark: a DataFrame reads the table as it is when an action runs, in the columns it
    had at analysis). The partitions carry the snapshot's files: the tasks read exactly those."""

    def __init__(self, options, schema, parallelism: int, version: int | None = None):
        self.options = options
        self.schema = schema
        self.parallelism = max(1, int(parallelism))
        self.version = version
        self.predicate: str | None = None  # the pushed filters the engine took, as one condition
        self._snapshot = None
        self._columns: list[str] | None = None  # None: every column of the table

    def __getstate__(self):
        # Spark pickles the reader into every task's read function: the snapshot stays here
        return {**self.__dict__, "_snapshot": None}

    def _table(self):
        if self._snapshot is None:
            from .engine.spark.scan import check_read_supported

            snapshot = _load_snapshot(_path(self.options), self.options, self.version)
            check_read_supported(snapshot)
            self._columns = _read_columns(snapshot, self.schema)
            self._snapshot = snapshot
        return self._snapshot

    if _pushdown_supported():

        def pushFilters(self, filters):
            """Take every filter the engine can evaluate for file skipping and row-group pruning;
            return them all to Spark (skipping is not exact)."""
            schema = self._table().schema
            taken = [t for t in (_filter_sql(f, schema) for f in filters) if t is not None]
            self.predicate = " AND ".join(f"({t})" for t in taken) or None
            return filters

    def partitions(self):
        from .engine.expr import parse_predicate
        from .engine.expr.skipping import skip_files
        from .engine.spark.scan import TASK_COLUMN, arrow_schema_of, files_table

        snapshot = self._table()
        files = snapshot.files
        partition_columns = list(snapshot.metadata.partition_columns or [])
        expr = None
        if self.predicate is not None:
            expr = parse_predicate(self.predicate, snapshot.schema)
            files = skip_files(files, snapshot.schema, partition_columns, expr).files
        plan = {
            "root": snapshot.table_root,
            "schema_json": snapshot.metadata.schema_string,
            "partition_columns": partition_columns,
            "columns": self._columns,
            "mode": snapshot.properties.column_mapping_mode_for(snapshot.schema),
            "arrow": arrow_schema_of(self.schema),
            "predicate": expr,
        }
        if files.num_rows == 0:
            return [InputPartition(None)]
        if files.num_rows < self.parallelism:  # fewer files than cores: large ones read in pieces
            files = _row_group_pieces(snapshot, files, self.parallelism)
        # one partition per core, files balanced by bytes: more partitions measured more CPU for
        # the same rows (each is a Python task whose Arrow batches cross to the JVM); each
        # partition carries the plan (read() runs on a copy of the reader pickled before partitions())
        n_tasks = min(files.num_rows, self.parallelism)
        listing = files_table(files, n_tasks)
        tasks = listing.column(TASK_COLUMN).to_numpy()
        listing = listing.drop_columns([TASK_COLUMN])
        return [InputPartition((plan, listing.take((tasks == i).nonzero()[0]))) for i in range(n_tasks)]

    def read(self, partition):
        from .engine.spark.scan import read_planned_files
        from .engine.spark.session import guard_executor

        if partition.value is None:
            return iter(())
        p, listing = partition.value
        # row groups pruned, rows filtered by the engine (Spark filters again)
        return guard_executor(read_planned_files(p, listing, p["predicate"]))


def _row_group_pieces(snapshot, files, parallelism: int):
    """``files`` with each file of several row groups split into up to its share of ``parallelism``
    pieces (by its bytes), each a contiguous range of row groups balanced by their bytes, in the
    column :data:`.engine.spark.scan.ROW_GROUPS_COLUMN`. Reads the footers of these few files."""
    import numpy as np
    import pyarrow as pa

    from .engine.paths import data_file_uri
    from .engine.reader import close_parquet, open_parquet
    from .engine.spark.scan import ROW_GROUPS_COLUMN

    sizes = np.nan_to_num(np.asarray(files.column("size").to_numpy(zero_copy_only=False), dtype="float64"))
    total = max(float(sizes.sum()), 1.0)
    rows, groups, piece_sizes = [], [], []
    for i, path in enumerate(files.column("path").to_pylist()):
        want = max(1, round(parallelism * sizes[i] / total))
        bounds = None
        if want > 1:
            pf = open_parquet(snapshot.storage, data_file_uri(snapshot.table_root, path), path)
            try:
                md = pf.metadata
                group_bytes = np.array([md.row_group(g).total_byte_size for g in range(md.num_row_groups)], "float64")
            finally:
                close_parquet(pf)
            if len(group_bytes) > 1:  # cut after the group where the running bytes cross each 1/want
                cuts = np.searchsorted(np.cumsum(group_bytes), group_bytes.sum() * np.arange(1, want) / want) + 1
                bounds = sorted({0, len(group_bytes), *(int(c) for c in cuts)})
        if bounds is None or len(bounds) < 3:  # one piece: the whole file
            rows.append(i), groups.append(None), piece_sizes.append(sizes[i])
            continue
        for a, b in zip(bounds, bounds[1:]):
            rows.append(i), groups.append(list(range(a, b))), piece_sizes.append(group_bytes[a:b].sum())
    out = files.take(pa.array(rows, pa.int64()))
    out = out.set_column(out.schema.get_field_index("size"), "size", pa.array(np.asarray(piece_sizes, "int64")))
    return out.append_column(ROW_GROUPS_COLUMN, pa.array(groups, pa.list_(pa.int32())))


class ChangesReader(DataSourceReader):
    """A read of the change data feed: the plan's change files dealt to partitions."""

    def __init__(self, options, schema, parallelism: int):
        self.options = options
        self.schema = schema
        self.parallelism = max(1, int(parallelism))

    def partitions(self):
        from .engine.cdf import ChangeReader
        from .engine.spark.scan import arrow_schema_of

        plan = _change_plan(_path(self.options), self.options)
        reader = (ChangeReader(plan), arrow_schema_of(self.schema))
        n_tasks = max(1, min(len(plan.files), self.parallelism))
        texts = [json.dumps(dataclasses.asdict(f)) for f in plan.files]
        return [InputPartition((reader, texts[i::n_tasks])) for i in range(n_tasks)]

    def read(self, partition):
        import pyarrow as pa

        from .engine.spark.scan import read_change_files
        from .engine.spark.session import guard_executor

        (reader, arrow), texts = partition.value
        batches = [pa.record_batch({"file": pa.array(texts, pa.string())})]
        return guard_executor(read_change_files(reader, batches, arrow))  # an error reaches the driver as ours


# --------------------------------------------------------------------------------------------------
# write

_WRITE_OPTIONS = ("replaceWhere", "mergeSchema", "userMetadata", "txnAppId", "txnVersion", "targetFileSize")


@dataclasses.dataclass
class WrittenFiles(WriterCommitMessage):
    """One task's files: their AddFile actions (JSON), rows and bytes."""

    adds: list
    rows: int = 0


@dataclasses.dataclass
class Written:
    """The data of a write whose tasks already wrote it: its schema and files (handed to the command)."""

    schema: Any
    adds: list
    rows: int


class WrittenPlane:
    """The data plane of a command whose data the source's tasks already wrote with ``spec``: the
    command's conform and write find the schema and spec the tasks used, or refuse (the table changed
    between planning and commit: nothing is committed, the files are aborted). Other work goes to the
    in-process plane."""

    def __init__(self, spec):
        self.spec = spec

    def held(self, data):
        return data

    def schema_of(self, data):
        return data.schema

    def conform(self, data, schema, *, keep: tuple = ()):
        if schema.to_json_string() != self.spec.schema_json:
            raise _changed("its schema")
        return data

    def write(self, data, spec, *, change_data: bool = False):
        from .engine.writer import WriteResult

        same = (spec.schema_json, spec.partition_columns, spec.row_constraint is None) == (
            self.spec.schema_json,
            self.spec.partition_columns,
            self.spec.row_constraint is None,
        )
        if change_data or not same:
            raise _changed("its schema or partitioning")
        return WriteResult(list(data.adds), data.rows, sum(a.size for a in data.adds), 0)

    def __getattr__(self, name):
        # the rest (replaceWhere's rewrite of partly replaced files, the change feed's insert files)
        # runs in the committing process, as the engine's in-process writes do
        from .engine.plane import in_process_plane

        return getattr(in_process_plane(), name)


def _changed(what: str):
    from .engine.errors import CommitConflictError

    return CommitConflictError(
        f"The table changed ({what}) while the data source was writing",
        "another writer committed between the planning of this write and its commit",
        "run the write again",
    )


#: pyspark 4.1+ hands a writer's tasks Arrow batches (4.0: Rows, turned into batches by :func:`_arrow_batches`)
_WRITER_BASE = getattr(_ds, "DataSourceArrowWriter", DataSourceWriter)


class DeltaWriter(_WRITER_BASE):
    """A batch write (see the module docstring). Planned on the driver before any task runs."""

    def __init__(self, options, schema, overwrite: bool):
        from .engine.commands import write as write_cmd
        from .engine.commands.create_table import to_delta_schema
        from .engine.commands.write import evolved_schema, write_spec
        from .engine.expr import parse_predicate
        from .engine.log.snapshot import load_snapshot
        from .engine.storage import storage_for
        from .engine.values import parse_version

        self.root = _path(options)
        self.overwrite = overwrite
        self.merge_schema = _flag(options, "mergeSchema")
        self.replace_where = options.get("replaceWhere")
        self.user_metadata = options.get("userMetadata")
        self.app_id = options.get("txnAppId")
        version = options.get("txnVersion")
        if (self.app_id is None) != (version is None):
            raise InvalidArgumentError(
                "txnAppId and txnVersion go together",
                f"only {'txnAppId' if version is None else 'txnVersion'} was given",
                "pass both for an idempotent write, or neither",
            )
        self.app_version = parse_version(version, "txnVersion") if version is not None else None
        size = options.get("targetFileSize")
        target_size = int(size) if size is not None and str(size).strip().isdigit() else size
        if self.replace_where is not None and not overwrite:
            raise InvalidArgumentError(
                "replaceWhere needs mode('overwrite')",
                "an append replaces nothing",
                "write with .mode('overwrite') and the replaceWhere condition",
            )
        self.data_schema = to_delta_schema(schema)
        try:
            snapshot = load_snapshot(storage_for(self.root), self.root)
        except TableNotFoundError:
            snapshot = None
        self.skip = False
        if snapshot is None:  # the first write creates the table (as delta-spark's does)
            target, partition_columns, configuration, predicate = self.data_schema, [], {}, None
            if self.replace_where is not None:
                raise InvalidArgumentError(
                    f"replaceWhere on '{self.root}', where no table is yet",
                    "there are no rows to replace",
                    "drop replaceWhere for the write that creates the table",
                )
        else:
            from .engine import features

            features.check_write_supported(snapshot.protocol, snapshot.metadata)
            target, _ = evolved_schema(snapshot, self.data_schema, self.merge_schema)
            partition_columns = list(snapshot.metadata.partition_columns or [])
            configuration = snapshot.metadata.configuration
            predicate = parse_predicate(self.replace_where, snapshot.schema) if self.replace_where else None
            if self.app_id is not None:  # landed already: tasks write nothing, the command skips
                self.skip = write_cmd.open_append(snapshot, TxnIdentity(self.app_id, self.app_version)).duplicate
        self.created = snapshot is None
        self.spec = write_spec(
            self.root, target, partition_columns, configuration, target_file_size=target_size, row_constraint=predicate
        )

    # -- tasks
    def write(self, iterator):
        from .engine.conform import conform_arrow
        from .engine.schema import parse_schema
        from .engine.spark.write import task_partition_id
        from .engine.writer import write_batches

        if self.skip:  # this txn version landed already: the command will skip it, write nothing
            for _ in iterator:
                pass
            return WrittenFiles([])
        target = parse_schema(self.spec.schema_json)
        batches = (b for batch in _arrow_batches(iterator) for b in conform_arrow(target, batch))
        written = []
        try:
            for w in write_batches(self.spec, batches, task_id=task_partition_id()):
                written.append(w)
        except BaseException:  # the files this task closed before failing go with it
            _delete(self.root, [w.add for w in written])
            raise
        return WrittenFiles([w.add.to_json() for w in written], sum(w.num_rows for w in written))

    # -- driver
    def commit(self, messages):
        from .engine.actions import AddFile
        from .engine.commands import write as write_cmd
        from .engine.commands.create_table import create_table
        from .engine.log.snapshot import load_snapshot
        from .engine.storage import storage_for

        adds = [AddFile.from_json(a) for m in messages if m is not None for a in m.adds]
        data = Written(self.data_schema, adds, sum(m.rows for m in messages if m is not None))
        plane = WrittenPlane(self.spec)
        identity = TxnIdentity(self.app_id, self.app_version, self.user_metadata)
        if self.created:
            result = create_table(self.root, schema=None, source=data, plane=plane, identity=identity)
        elif self.overwrite:
            snapshot = load_snapshot(storage_for(self.root), self.root)
            result = write_cmd.overwrite(
                snapshot,
                data,
                plane=plane,
                replace_where=self.replace_where,
                merge_schema=self.merge_schema,
                identity=identity,
            )
        else:
            result = write_cmd.append(self.root, data, plane=plane, merge_schema=self.merge_schema, identity=identity)
        if getattr(result, "skipped", False):  # the txn version landed meanwhile: these files are not needed
            _delete(self.root, adds)

    def abort(self, messages):
        from .engine.actions import AddFile

        _delete(self.root, [AddFile.from_json(a) for m in messages if m is not None for a in m.adds])


def _arrow_batches(iterator):
    """The task's input as Arrow batches (pyspark 4.0 hands Rows to a plain writer)."""
    import pyarrow as pa

    rows = []
    for item in iterator:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict(recursive=True))
        if len(rows) >= 65536:
            yield pa.RecordBatch.from_pylist(rows)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows)


def _delete(root: str, adds: list) -> None:
    from .engine.rewrite import FileOutcome, discard
    from .engine.storage import storage_for
    from .engine.writer import WrittenFile

    if adds:
        discard(storage_for(root), root, [FileOutcome("", written=[WrittenFile(a, 0) for a in adds])])
