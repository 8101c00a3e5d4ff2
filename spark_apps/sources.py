"""The source of an operation that reads one (WRITE, CREATE TABLE AS SELECT, MERGE): a file, folder
or Delta table read as a Spark DataFrame (or as Arrow data in the worker, ``execution="local"``),
then ``source_query`` over it; a Delta change feed with the watermark its target records. And the
one wording of a Spark error met while reading it (:func:`spark_error`)."""

from __future__ import annotations

import dataclasses
import os

from .engine.errors import DeltaError, InvalidArgumentError
from .engine.progress import report
from .operations import SOURCE_FORMATS

__all__ = ["Source", "read_source", "read_source_spec", "read_changes", "spark_error", "CHANGE_FEED_OPTIONS"]


def spark_error(e: Exception, what: str) -> DeltaError:
    """A clear DeltaError for a Spark exception (AnalysisException etc.)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cond = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    try:
        cond = cond() if callable(cond) else None
    except Exception:
        cond = None
    if cond == "PATH_NOT_FOUND" or "PATH_NOT_FOUND" in msg or "Path does not exist" in msg:
        return InvalidArgumentError(f"{what}: not found", msg[:500], "check the source location")
    if type(e).__name__ in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        return InvalidArgumentError(what, msg[:500], "check the source location, format and options")
    return DeltaError(what, msg[:500], "see the Spark log for details")


#: Delta's reader options for a change feed source (``source_format="delta"``)
CHANGE_FEED_OPTIONS = ("readChangeFeed", "startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp")


@dataclasses.dataclass
class Source:
    """A command's source: the DataFrame, and for a change feed the range it reads (``feed``) and
    the watermark the target's commit records (``(app id, ending version)``), so that the next run
    starts after it: each version's changes reach the target exactly once."""

    df: object
    watermark: tuple | None = None
    feed: dict | None = None
    #: how it was read: ``"spark"`` (a DataFrame) or ``"arrow"`` (Arrow data read in this process)
    read: str = "spark"


def read_changes(spark, source: str, options: dict, target_uri: str | None) -> Source:
    """A Delta table's change feed as a source (``readChangeFeed``): versions ``startingVersion`` (or
    ``startingTimestamp``, default 0) to ``endingVersion`` (``endingTimestamp``, default the latest),
    starting after the last version the target already consumed from that table (the ``txn`` version
    of application ``delta-changes:<source table id>`` in the target's log). Nothing new: an empty
    source, and no watermark to record."""
    from .engine import DeltaTable, cdf
    from .engine.values import parse_version

    src = DeltaTable.for_path(spark, source)
    start, end = options.get("startingVersion"), options.get("endingVersion")
    start = parse_version(start, "startingVersion") if start is not None else None
    end = parse_version(end, "endingVersion") if end is not None else None
    start, end, _ = cdf.resolve_range(
        src.storage, src.table_uri, start, end, options.get("startingTimestamp"), options.get("endingTimestamp")
    )
    snap = src.snapshot(version=end)
    app = f"delta-changes:{snap.metadata.id}"
    consumed = None
    if target_uri:
        target = DeltaTable(None, target_uri)
        if target.exists():
            txn = target.snapshot().set_transactions.get(app)
            consumed = txn.version if txn is not None else None
    if consumed is not None:
        start = max(start, consumed + 1)
    feed = {"source": source, "startingVersion": start, "endingVersion": end, "consumedBefore": consumed}
    if start > end:  # everything up to `end` already reached the target
        plan = cdf.ChangePlan(
            snap.table_root, start, end, snap.schema, list(snap.metadata.partition_columns or []), "none"
        )
        from .engine.spark.scan import changes_dataframe

        return Source(changes_dataframe(spark, plan), None, feed)
    return Source(src.changes_df(start, end), (app, end, consumed), feed)


def read_source(spark, params: dict, *, arrow_if_small: bool = False) -> Source:
    """The source of write / create-as-select / merge (a change feed: :func:`read_changes`);
    ``arrow_if_small``: a small parquet, ORC or Delta source is read in this process as Arrow
    (:func:`small_source_as_arrow`, a MERGE's), no Spark job."""
    from .engine.storage import is_local, normalize_table_uri

    source = params.get("source")
    fmt = (params.get("source_format") or "").strip().lower()
    if not source:
        raise InvalidArgumentError("No source given", "--source is missing", "pass --source URI --source-format F")
    if fmt not in SOURCE_FORMATS:
        raise InvalidArgumentError(
            f"Unknown source format '{params.get('source_format')}'",
            f"supported: {', '.join(SOURCE_FORMATS)}",
            f"pass --source-format {'|'.join(SOURCE_FORMATS)}",
        )
    options = {str(k): str(v) for k, v in (params.get("source_options") or {}).items()}
    if is_local(source) and not os.path.exists(normalize_table_uri(source)):
        raise InvalidArgumentError(
            f"Source '{source}' not found", "no file or directory at that path", "check --source"
        )
    if spark is None:  # execution="local": Arrow data read in this process
        return _read_source_locally(source, fmt, options)
    if fmt == "delta" and str(options.get("readChangeFeed", "")).lower() == "true":
        feed = {k: v for k, v in options.items() if k in CHANGE_FEED_OPTIONS}
        unknown = sorted(set(options) - set(feed))
        if unknown:
            raise InvalidArgumentError(
                f"Unknown change feed option(s) {unknown}",
                f"a change feed source takes {', '.join(CHANGE_FEED_OPTIONS)}",
                "drop the other options",
            )
        return read_changes(spark, source, feed, params.get("table_uri"))
    if arrow_if_small:
        local = small_source_as_arrow(spark, source, fmt, options)
        if local is not None:
            return local
        report("MERGE", "source_spark")
    if fmt == "delta":
        from .engine import DeltaTable
        from .engine.values import parse_version

        version = options.pop("versionAsOf", None)
        ts = options.pop("timestampAsOf", None)
        version = parse_version(version, "versionAsOf") if version is not None else None
        return Source(DeltaTable.for_path(spark, source).to_df(version=version, timestamp=ts))
    if fmt == "csv":
        options = {"header": "true", "inferSchema": "true", **options}
    try:
        return Source(spark.read.format(fmt).options(**options).load(source))
    except Exception as e:
        raise spark_error(e, f"Cannot read source '{source}' as {fmt}") from None


#: Delta's reader options a Delta source read in this process takes
_DELTA_READ_OPTIONS = {"versionAsOf", "timestampAsOf"}


def _delta_snapshot(source: str, options: dict):
    """The snapshot of a Delta source at ``versionAsOf`` / ``timestampAsOf`` (else its latest)."""
    from .engine import DeltaTable
    from .engine.values import parse_version

    version = options.get("versionAsOf")
    version = parse_version(version, "versionAsOf") if version is not None else None
    return DeltaTable(None, source).snapshot(version=version, timestamp=options.get("timestampAsOf"))


def _read_source_locally(source: str, fmt: str, options: dict) -> Source:
    """A parquet file or folder, or a Delta table (``versionAsOf`` / ``timestampAsOf``), as one Arrow
    table read in this process: the source of a MERGE run without Spark (``execution="local"``)."""
    from .engine.reader import read_snapshot_table
    from .engine.storage import storage_for

    if fmt == "delta" and not set(options) - _DELTA_READ_OPTIONS:
        return Source(read_snapshot_table(_delta_snapshot(source, options)), read="arrow")
    if fmt == "parquet" and not options:
        files = _flat_files(source, fmt)
        if files is None:  # Spark would take columns from subfolders' names (k=v): reading the files alone loses them
            raise InvalidArgumentError(
                f"Cannot read the parquet folder '{source}' without Spark",
                "it has subfolders or files not named *.parquet; Spark reads partition columns from "
                "folder names such as k=v, which reading its files alone would drop",
                "use execution='spark', or give a folder of parquet files without subfolders",
            )
        return Source(storage_for(next(iter(files))).read_parquet_files(list(files)), read="arrow")
    raise InvalidArgumentError(
        f"Cannot read a {fmt} source{' with options' if options else ''} without Spark",
        "execution='local' reads parquet files and Delta tables (a version or a timestamp) in the worker",
        "use execution='spark', or give a parquet or delta source",
    )


def small_source_as_arrow(spark, source: str, fmt: str, options: dict) -> Source | None:
    """A MERGE's parquet or ORC file or folder, or Delta table (``versionAsOf`` / ``timestampAsOf``),
    read in this process as Arrow, no Spark job, when its size, known without reading it (the files'
    bytes from a listing or the Delta log), times :data:`~.engine.spark.merge.ARROW_GROWTH` fits the
    cap of a source read from files (:func:`~.engine.spark.merge.source_cap`: on a local master a share
    of this machine's memory), and what was read does too. The merge then runs with the source held
    here (:meth:`~.engine.spark.plane.SparkPlane.merge`).

    None (Spark reads it, as before): another format, reader options, a folder with subfolders (Spark
    takes partition columns from their names) or files of other names, files Spark reads by its own
    rules (:func:`~.engine.spark.merge.read_files_as_spark`: timestamps without a time zone, Spark's
    legacy calendar), a store this process cannot read (the listing fails: no credentials here),
    over the cap."""
    import pyarrow as pa

    from .engine.errors import DeltaError
    from .engine.reader import read_snapshot_table
    from .engine.spark import merge

    cap = merge.collect_cap(spark, from_files=True)
    try:
        if fmt == "delta" and not set(options) - _DELTA_READ_OPTIONS:
            snapshot = _delta_snapshot(source, options)
            if int(snapshot.size_in_bytes) * merge.ARROW_GROWTH > cap:
                return None
            table = read_snapshot_table(snapshot)
        elif fmt in ("parquet", "orc") and not options:
            files = _flat_files(source, fmt)
            if files is None or sum(files.values()) * merge.ARROW_GROWTH > cap:
                return None
            # held here on a local master: streamed and bounded by its merge's cost (elsewhere shipped as before)
            table = merge.read_files_as_spark(list(files), fmt, cap if merge.held_here(spark) else None)
            if table is None:
                return None
        else:
            return None
    except (DeltaError, OSError, pa.ArrowException):  # Spark reads it, and says what is wrong if anything
        return None
    if table.nbytes > cap:
        return None
    report("MERGE", "source_arrow", rows=table.num_rows, bytes=table.nbytes)
    return Source(table, read="arrow")


def _flat_files(source: str, fmt: str) -> dict[str, int] | None:
    """``{location: bytes}`` of a parquet or ORC source: the file itself, or a folder's files (hidden
    ones left out, as Spark does); None when the folder has subfolders or a file without the format's
    extension (Spark would read them otherwise than a plain list of files)."""
    from .engine.paths import new_file_location
    from .engine.storage import normalize_table_uri, storage_for

    root = normalize_table_uri(source)
    storage = storage_for(root)
    listing = storage.list_files(root, skip_hidden=True)
    if not listing.num_rows:  # a file (or an empty folder: Spark's error)
        return {root: storage.file_info(root).size}
    paths = listing.column("path").to_pylist()
    if any("/" in p or not p.endswith(f".{fmt}") for p in paths):
        return None
    return {new_file_location(root, p): size for p, size in zip(paths, listing.column("size").to_pylist())}


def read_source_spec(spark, params: dict, *, arrow_if_small: bool = False) -> Source:
    """The source of write / create-as-select / merge: ``source`` read as ``source_format``, then
    ``source_query`` (Spark SQL) over it as the temporary view ``source``; a query alone reads what
    it names itself (e.g. ``parquet.`/path```). ``arrow_if_small`` (a MERGE's source): a small file
    source without a query is read in this process (:func:`small_source_as_arrow`)."""
    query = params.get("source_query")
    small = arrow_if_small and not query
    src = read_source(spark, params, arrow_if_small=small) if params.get("source") else Source(None)
    if not query:
        return src
    if spark is None:
        raise InvalidArgumentError(
            "source_query needs Spark",
            "execution='local' runs in the worker, where no Spark SQL runs",
            "use execution='spark', or give the source without a query",
        )
    try:
        if src.df is None:
            return dataclasses.replace(src, df=spark.sql(query))
        # the source is bound as a parameter, not a temporary view: a shared Spark Connect session
        # keeps no view of this run, and concurrent runs cannot see each other's source
        return dataclasses.replace(src, df=spark.sql(_source_placeholder(query), source=src.df))
    except InvalidArgumentError:
        raise
    except Exception as e:
        raise spark_error(e, "Cannot run source_query") from None


def _source_placeholder(query: str) -> str:
    """``query`` with its references to the table ``source`` as ``{source}`` (pyspark's DataFrame
    parameter) and every other brace doubled (pyspark formats the text)."""
    import sqlglot
    from sqlglot import exp

    marker = "__delta_provider_source__"
    try:
        tree = sqlglot.parse_one(query, dialect="spark")
    except sqlglot.errors.ParseError as e:
        raise InvalidArgumentError(
            "Cannot parse source_query", str(e).splitlines()[0], "write source_query in Spark SQL"
        ) from None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if table.name.lower() == "source" and not table.db and not table.catalog and "source" not in ctes:
            alias = table.args.get("alias")
            table.replace(
                exp.Table(
                    this=exp.to_identifier(marker), alias=alias or exp.TableAlias(this=exp.to_identifier("source"))
                )
            )
    text = tree.sql(dialect="spark").replace("{", "{{").replace("}", "}}")
    return text.replace(f"`{marker}`", "{source}").replace(marker, "{source}")
