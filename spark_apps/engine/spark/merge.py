"""MERGE's data plane in Spark, the source's side and file by file (the plan and the commit are
:mod:`..commands.merge`; the join is :mod:`.merge_join`).

* :func:`source_key_values`: a source whose reads could differ is materialised once
  (``localCheckpoint`` on local disk: every later use reads the same rows, as Delta's
  MergeIntoMaterializeSource guarantees); a deterministic scan of files is read where it lies
  (:func:`stable_source`). One aggregation gives its row count and, per ``target.k = source expr``
  key, min, max, NULLs and an estimate of distinct values; keys with few values get them exactly (a
  second, small job); an upsert's keys are checked unique in Arrow on the driver when they fit
  :func:`narrow_limit` (else by one aggregation).
* :func:`small_source` / :func:`execute_merge_by_file`: a small source read once into Arrow and
  shipped to the tasks, which merge the candidate files one by one (:mod:`..merge.by_file`); the
  inserts are written on the driver.
* :func:`speller`, :func:`spill_level`, :func:`narrow_limit`: what the join strategy
  (:mod:`.merge_join`, large sources or no key equality to look up) shares with the source's side.
"""

from __future__ import annotations

import logging
import os

from ..errors import DuplicateMatchError, InvalidArgumentError
from ..expr.sql import quote
from ..merge import MergeOutcome
from .columns import to_column

__all__ = [
    "source_key_values",
    "speller",
    "spill_level",
    "narrow_limit",
    "execute_merge_by_file",
    "small_source",
    "deduplicated",
    "check_unique_keys",
    "MergeOutcome",
    "DuplicateMatchError",
]

log = logging.getLogger(__name__)


def deduplicated(source, key_columns: list[str], dedupe_by: str):
    """An upsert's source with one row per key: the greatest ``dedupe_by``, NULLs last. Rows with a
    NULL key never match, so they are kept as they are. (Without ``dedupe_by`` the merge itself
    refuses duplicate keys: :func:`check_unique_keys`.)"""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ..errors import InvalidArgumentError

    if dedupe_by.lower() not in {c.lower() for c in source.columns}:
        raise InvalidArgumentError(
            f"dedupe_by column '{dedupe_by}' is not in the source",
            f"the source has {', '.join(source.columns)}",
            "name a source column (e.g. an update timestamp)",
        )
    keys = [F.col(quote(k)) for k in key_columns]
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | k.isNull()
    order = Window.partitionBy(*keys).orderBy(F.col(quote(dedupe_by)).desc_nulls_last())
    ranked = source.withColumn("__rank", F.when(null_key, F.lit(1)).otherwise(F.row_number().over(order)))
    return ranked.filter("__rank = 1").drop("__rank")


def check_unique_keys(
    src, columns: list[str], names: list[str], *, rows=None, key_bytes=0, plan=None, refuse=True
) -> bool:
    """Whether a (prefixed) source holds each non-NULL key once; one held twice is refused
    (``refuse``), else False. When its ``rows`` flat keys (fixed widths from the ``plan``'s source
    schema, plus ``key_bytes`` of strings), with the sort's index and copy, fit :func:`narrow_limit`,
    the key columns are read into Arrow and checked here (no shuffle); else by a distinct count of them."""
    from pyspark.sql import functions as F

    from ..merge import duplicate_keys_error, first_duplicate_key, fixed_width

    if rows is not None and plan is not None:
        fields = [plan.source_schema.fields[int(c[3:])] for c in columns]
        width = sum(4 if getattr(f.type, "name", "") in ("string", "binary") else fixed_width(f.type) for f in fields)
        flat = all(getattr(f.type, "name", "") for f in fields)  # (Arrow cannot sort nested keys)
        # the keys, their validity, the sort's 8-byte index and the sorted copy
        if flat and rows * (2 * width + 9) + 2 * key_bytes <= narrow_limit(src.sparkSession):
            dup = first_duplicate_key(src.select(*[quote(c) for c in columns]).toArrow(), columns)
            if dup is not None and refuse:
                raise duplicate_keys_error(names, dup)
            return dup is None
    cols = [F.col(c) for c in columns]
    not_null = F.lit(True)
    for c in cols:
        not_null = not_null & c.isNotNull()
    # one aggregation: as many distinct non-NULL keys as rows holding one (a distinct count's partial
    # aggregation shuffles less than grouping every key); only a duplicate is then looked for
    got = src.agg(F.count(F.when(not_null, 1)).alias("n"), F.count_distinct(*cols).alias("d")).collect()[0]
    if got["n"] == got["d"]:
        return True
    if not refuse:
        return False
    dup = src.filter(not_null).groupBy(*cols).count().filter("count > 1").limit(1).collect()
    if not dup:  # (the two counts disagreed with the grouping: trust the grouping)
        return True
    raise duplicate_keys_error(names, [dup[0][i] for i in range(len(columns))])


def speller(plan):
    """How the joined DataFrame names a bound column: ``__t<i>`` / ``__s<i>`` by top-level position."""
    t_index = {f.name: i for i, f in enumerate(plan.target_schema.fields)}
    s_index = {f.name: i for i, f in enumerate(plan.source_schema.fields)}

    def spell(c) -> str:
        head = f"__t{t_index[c.path[0]]}" if c.relation == plan.target_alias else f"__s{s_index[c.path[0]]}"
        return ".".join([quote(head), *(quote(p) for p in c.path[1:])])

    return spell


def spill_level():
    """Where MERGE keeps what it reads more than once (the materialised source, the joined rows):
    on local disk only, as Delta's MERGE does. A serialized block kept in memory (or read back from
    disk into memory) is one heap buffer per partition, and a large partition's overran a 1g driver
    (OutOfMemoryError in BlockManager); a disk-only block is streamed, whatever its size, and the
    page cache keeps it fast."""
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


def positionally_renamed(df, prefix: str):
    return df.toDF(*[f"{prefix}{i}" for i in range(len(df.columns))])


def source_key_values(spark, source, plan, keys: list, max_values: int, *, unique=None, refuse=True):
    """``(prefixed source, row count, [(values or None, min, max, has_null)] per key, unique)``.

    The source is read where it lies when :func:`stable_source` says every read gives the same rows
    (a deterministic scan of files, or rows held in the plan); otherwise it is materialised once
    (``localCheckpoint`` on local disk, :func:`spill_level`), as Delta's MergeIntoMaterializeSource
    does, so that the two phases of the join and the checks all see the same rows. One aggregation
    gives its row count and, per ``target.k = source expr`` key, min, max, NULLs and an estimate of
    distinct values; keys with few values get them exactly (a second, small job).

    :param keys: ``(target column, source expression, op)`` of the ON condition's key equalities
    :param unique: ``(prefixed columns, names)`` whose non-NULL values must be unique (an upsert's
        keys; ``refuse`` False: whose uniqueness is asked): :func:`check_unique_keys` after the
        aggregation; the last item of the result says whether they are (None: not asked)
    """
    from pyspark.sql import functions as F

    from .session import active

    renamed = positionally_renamed(source, "__s")
    if stable_source(spark, source):
        src = renamed
    else:
        with active(spark):  # (over Spark Connect the checkpoint's DataFrame binds to the active session)
            src = renamed.localCheckpoint(eager=True, storageLevel=spill_level())
    spell = speller(plan)
    aggs = [F.count(F.lit(1)).alias("n")]
    for i, (_t, s, _op) in enumerate(keys):
        e = to_column(s, spell)
        aggs += [
            F.min(e).alias(f"lo{i}"),
            F.max(e).alias(f"hi{i}"),
            F.approx_count_distinct(e).alias(f"nd{i}"),
            F.max(e.isNull().cast("int")).alias(f"nl{i}"),
        ]
    varying = [c for c in (unique[0] if unique else []) if _variable_width(plan, c)]
    aggs += [F.sum(F.octet_length(F.col(quote(c)))).alias(f"vb{j}") for j, c in enumerate(varying)]
    row = src.agg(*aggs).collect()[0]
    rows = int(row["n"] or 0)
    distinct = None
    if unique:
        key_bytes = sum(int(row[f"vb{j}"] or 0) for j in range(len(varying)))
        distinct = check_unique_keys(src, *unique, rows=rows, key_bytes=key_bytes, plan=plan, refuse=refuse)
    out = []
    for i, (_t, s, _op) in enumerate(keys):
        values = None
        if row[f"nd{i}"] is not None and row[f"nd{i}"] <= max_values:
            got = [r[0] for r in src.select(to_column(s, spell)).distinct().limit(max_values + 1).collect()]
            values = got if len(got) <= max_values else None
        out.append((values, row[f"lo{i}"], row[f"hi{i}"], bool(row[f"nl{i}"])))
    return src, rows, out, distinct


#: Spark property: ``all`` materialises every MERGE source joined in Spark, even a stable scan of files
#: (``auto``, the default: only sources whose reads could differ, see :func:`stable_source`)
MATERIALIZE_CONF = "spark.airflowDelta.merge.materializeSource"

#: the logical plan nodes a source that reads the same rows every time may hold: scans of files listed
#: once (their listing is fixed when the DataFrame is made; Spark itself assumes data files do not
#: change under a query), rows held in the plan, and relational operators whose output is a function
#: of their input's rows (no Window: ``row_number`` over ties may pick other rows in another read; no
#: Limit: which rows it keeps is not fixed)
_STABLE_NODES = {
    "LogicalRelation",
    "LocalRelation",
    "OneRowRelation",
    "Project",
    "Filter",
    "Join",
    "Union",
    "Aggregate",
    "Deduplicate",
    "Distinct",
    "Sort",
    "Repartition",
    "RepartitionByExpression",
    "SubqueryAlias",
}
#: expressions whose determinism Spark takes on trust (user code; Delta materialises for them too)
_TRUSTED_EXPRESSIONS = {"PythonUDF", "ScalaUDF", "ScalaUDAF", "PythonUDAF", "HiveSimpleUDF", "HiveGenericUDF"}
#: settings under which a later read may silently skip files an earlier one read
_IGNORING_FILES = ("spark.sql.files.ignoreMissingFiles", "spark.sql.files.ignoreCorruptFiles")


def stable_source(spark, source) -> bool:
    """Whether every read of ``source`` gives the same rows, so MERGE can read it more than once
    instead of materialising it: a classic session, :data:`MATERIALIZE_CONF` not ``all``, no setting
    that skips unreadable files, and an optimized plan (subqueries included) that is deterministic,
    made of :data:`_STABLE_NODES` with no user-defined function, whose file scans list their files
    once (``InMemoryFileIndex``: a partitioned catalog table lists its partitions again per query).
    Over Spark Connect (no plan to inspect here) and for anything else, False."""
    from .session import conf_value

    if conf_value(spark, MATERIALIZE_CONF, "auto").strip().lower() == "all":
        return False
    if any(conf_value(spark, key, "false").strip().lower() == "true" for key in _IGNORING_FILES):
        return False
    nodes = _plan_nodes(source, subqueries=True)
    if not nodes:
        return False
    try:
        if not nodes[0][1].deterministic():
            return False
        for kind, node in nodes:
            if kind not in _STABLE_NODES or _calls_user_code(node):
                return False
            if kind == "LogicalRelation":
                relation = node.relation()
                if relation.getClass().getSimpleName() != "HadoopFsRelation":
                    return False
                if relation.location().getClass().getSimpleName() != "InMemoryFileIndex":
                    return False
        return True
    except Exception:  # an internal API that moved: materialise
        return False


def _calls_user_code(node) -> bool:
    """Whether an expression of plan ``node`` calls a user-defined function."""
    expressions = node.expressions()
    todo = [expressions.apply(i) for i in range(expressions.size())]
    while todo:
        e = todo.pop()
        if e.getClass().getSimpleName() in _TRUSTED_EXPRESSIONS:
            return True
        children = e.children()
        todo += [children.apply(i) for i in range(children.size())]
    return False


def _plan_nodes(df, *, subqueries: bool = False) -> list:
    """``(class name, node)`` of every node of ``df``'s optimized logical plan, root first, with
    ``subqueries`` also those of the subqueries its expressions hold (classic Spark; [] over Spark
    Connect, which has no JVM here, or where the internal API moved)."""
    from .session import is_connect

    if is_connect(df.sparkSession):
        return []
    try:
        out, todo = [], [df._jdf.queryExecution().optimizedPlan()]
        while todo:
            node = todo.pop()
            out.append((node.getClass().getSimpleName(), node))
            children = node.children()
            todo += [children.apply(i) for i in range(children.size() - 1, -1, -1)]
            if subqueries:
                inner = node.subqueries()
                todo += [inner.apply(i) for i in range(inner.size())]
        return out
    except Exception:  # an internal API that moved
        return []


def _variable_width(plan, column: str) -> bool:
    """Whether prefixed source column ``column`` (``__s<i>``) holds strings or binary values."""
    field = plan.source_schema.fields[int(column[3:])]
    return getattr(field.type, "name", "") in ("string", "binary")


def narrow_limit(spark) -> int:
    """The most bytes of a source's few key columns the driver holds (as a broadcast join's build side,
    or as Arrow to check the keys unique): :data:`NARROW_BROADCAST_BYTES`, at most a sixteenth of the
    driver's memory."""
    from .session import conf_value, memory_bytes

    driver = memory_bytes(conf_value(spark, "spark.driver.memory", "1g"))
    return min(NARROW_BROADCAST_BYTES, driver // 16)


#: the most bytes (estimated from the schema) of a narrow source side broadcast to the first phase's inner join
NARROW_BROADCAST_BYTES = 64 << 20


# --------------------------------------------------------------------------------------------------
# file by file (a small source shipped to the tasks; see engine/merge/by_file.py)


#: what merging a source held here costs per row beyond its Arrow bytes, counted against the cap of
#: a source read from its files (:func:`read_within`): the hash join's working memory (the key
#: table, the source's distinct keys, the pairs, what the allocator keeps of them) grows with the
#: rows, not their width. Measured through local[2] with one BIGINT key on 10M rows: 150 to 180 B
#: (a 0.9 GiB source peaked at 2.9 GiB, a 0.3 GiB one of the same rows at 2.5 GiB)
HELD_ROW_BYTES = 200
#: how many times its files' bytes a parquet or ORC source may take as Arrow (encoded and compressed
#: columns grow when decoded): the estimate from a listing that must fit the cap before it is read
ARROW_GROWTH = 32


def small_source(source, plan, max_rows: int):
    """The source as one Arrow table (columns ``__s<i>``, the source schema's Arrow types), read once,
    when it holds at most ``max_rows`` rows and fits :func:`collect_cap`; None otherwise (then it
    is joined in Spark). Its size is known before anything is collected: Spark's own estimate when
    that is far below the cap, else one aggregation measures its rows and their Arrow bytes (string
    lengths summed), so a source too big for the driver (or a Connect client) is never collected.
    The decision is logged with its sizes and the cap's rule."""
    import pyarrow as pa

    renamed = positionally_renamed(source, "__s")
    cap, rule = source_cap(source.sparkSession)
    size = _plan_size(renamed)
    if size is not None and size > cap and _bare_scan(renamed):  # its files alone are over the cap
        _log_source("joined in Spark", f"its files' {_mib(size)} are over the cap of {_mib(cap)}", rule)
        return None
    if size is None or size * ARROW_GROWTH > cap:  # not clearly small
        rows, nbytes = measured_size(renamed, plan.source_schema)
        if rows > max_rows or nbytes > cap:
            why = f"{rows:,} rows (at most {max_rows:,}), {_mib(nbytes)} of Arrow (cap {_mib(cap)})"
            _log_source("joined in Spark", why, rule)
            return None
    table = renamed.toArrow()
    _log_source("collected", f"{table.num_rows:,} rows, {_mib(table.nbytes)} of Arrow (cap {_mib(cap)})", rule)
    schema = plan.source_schema.to_arrow_schema()
    want = pa.schema([pa.field(f"__s{i}", f.type, f.nullable) for i, f in enumerate(schema)])
    return pa.Table.from_arrays([table.column(i).cast(f.type) for i, f in enumerate(want)], schema=want)


def scanned_files_as_arrow(source):
    """A DataFrame that is Spark's plain read of local Parquet files, read from those files in this
    process by pyarrow (no Spark job, no JVM between), on a local master whose file work runs here,
    within the cap of a source read from files (:func:`source_cap`): an Arrow table with the
    DataFrame's column names and types, else None (then the source goes the DataFrame's way,
    :func:`small_source`). Bounded by design: files whose bytes alone are over the cap are not read,
    and the read streams batch by batch and stops as soon as what it holds, with what merging it
    costs per row (:data:`HELD_ROW_BYTES`), is over the cap (:func:`read_within`).

    Only where that is provably the rows Spark reads: the optimized plan is a scan of files listed
    once (``InMemoryFileIndex``, no partition columns taken from folder names, no bucketing, no
    reader option), under at most a projection of its plain columns; the files are on this
    machine's file system (``file:`` URIs, the ones Spark listed); what was read has the
    DataFrame's columns, the files' own types as Spark reads them (:func:`spark_reads_alike`), and
    casts to the DataFrame's types."""
    spark = source.sparkSession
    if not held_here(spark):  # (never over Spark Connect: no local master there)
        return None
    files = _scanned_files(source)
    if files is None:
        return None
    import pyarrow as pa

    from ..schema import parse_schema
    from ..storage import normalize_table_uri

    paths = [normalize_table_uri(f) for f in files]
    cap, rule = source_cap(spark, from_files=True)
    try:
        size = sum(os.path.getsize(p) for p in paths)
        if size > cap:
            _log_source("not read from its files", f"its files' {_mib(size)} are over the cap of {_mib(cap)}", rule)
            return None
        dataset = local_parquet_dataset(paths)
        if set(source.columns) - set(dataset.schema.names) or not spark_reads_alike(dataset.schema, paths):
            return None
        table = read_within(dataset, list(source.columns), cap)
        if table is None:
            why = f"its rows and their merge's {HELD_ROW_BYTES} B per row over the cap of {_mib(cap)} while reading (its files' {_mib(size)})"
            _log_source("not read from its files", why, rule)
            return None
        want = parse_schema(source.schema.jsonValue()).to_arrow_schema()
        table = pa.Table.from_arrays([table.column(c).cast(f.type) for c, f in zip(source.columns, want)], schema=want)
    except (OSError, pa.ArrowException, ValueError):  # Spark reads it, and says what is wrong
        return None
    why = f"{table.num_rows:,} rows, {_mib(table.nbytes)} of Arrow from {len(paths)} parquet file(s) (cap {_mib(cap)})"
    _log_source("read from its files", why, rule)
    return table


def local_parquet_dataset(paths: list[str]):
    """A pyarrow dataset of local Parquet files (paths), read without pre-buffering: that holds a
    file's column chunks (for one file, nearly all of it) beside the rows decoded from them, up to
    twice the source while it is read; over a local disk it saves nothing."""
    import pyarrow.dataset as ds

    options = ds.ParquetFragmentScanOptions(pre_buffer=False)
    return ds.dataset(paths, format=ds.ParquetFileFormat(default_fragment_scan_options=options))


def read_within(dataset, columns: list[str], cap: int):
    """``columns`` of a pyarrow ``dataset`` of local Parquet files as one Arrow table, streamed batch
    by batch and given up (None) as soon as what merging it costs, its bytes plus
    :data:`HELD_ROW_BYTES` per row, is over ``cap``; while it reads it holds that plus the batches
    read ahead (not pre-buffered: :func:`local_parquet_dataset`)."""
    import pyarrow as pa

    batches, cost = [], 0
    for batch in dataset.to_batches(columns=columns):
        batches.append(batch)
        cost += batch.nbytes + batch.num_rows * HELD_ROW_BYTES
        if cost > cap:
            return None
    return pa.Table.from_batches(batches, pa.schema([dataset.schema.field(c) for c in columns]))


def read_files_as_spark(paths: list[str], fmt: str, cap: int | None = None):
    """Parquet or ORC files (locations as :mod:`..storage` takes them) read in this process as Spark
    reads them (every column nullable), or None when Spark reads them by its own rules
    (:func:`spark_reads_alike`). With ``cap``, local Parquet files stream through :func:`read_within`
    (None once what merging them costs is over it), as a DataFrame's scanned files do."""
    import pyarrow as pa

    from ..storage import is_local, storage_for

    if cap is not None and fmt == "parquet" and all(is_local(p) for p in paths):
        dataset = local_parquet_dataset(list(paths))
        if not spark_reads_alike(dataset.schema, paths):
            return None
        table = read_within(dataset, dataset.schema.names, cap)
        if table is None:
            return None
        return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))
    table = storage_for(paths[0]).read_parquet_files(list(paths), file_format=fmt)
    if not spark_reads_alike(table.schema, paths if fmt == "parquet" else []):
        return None
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def spark_reads_alike(schema, parquet_paths: list[str]) -> bool:
    """Whether Spark reads columns of this Arrow ``schema`` (of files) as pyarrow does: no timestamp
    without a time zone (Spark reads it as its local-time ``timestamp``, or ``timestamp_ntz``) and,
    with dates or timestamps, no Parquet file of ``parquet_paths`` written in Spark's legacy hybrid
    calendar (its old dates differ)."""
    import pyarrow as pa

    types = [f.type for f in schema]
    if any(pa.types.is_timestamp(t) and t.tz is None for t in types):
        return False
    if any(pa.types.is_timestamp(t) or pa.types.is_date(t) for t in types):
        return not any(_legacy_calendar(p) for p in parquet_paths)
    return True


#: footer keys Spark writes into a file in the legacy hybrid (Julian) calendar
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


def _legacy_calendar(path: str) -> bool:
    import pyarrow.parquet as pq

    from ..storage import storage_for

    storage = storage_for(path)
    with storage.open_input_file(path) as f:
        meta = pq.read_metadata(f).metadata or {}
    return any(k in meta for k in _LEGACY_KEYS)


def _scanned_files(df) -> list[str] | None:
    """The ``file:`` URIs of the Parquet files ``df`` reads when it is a plain scan of them (see
    :func:`scanned_files_as_arrow`), else None."""
    nodes = _plan_nodes(df)
    if not nodes or nodes[-1][0] != "LogicalRelation":
        return None
    try:
        for kind, node in nodes[:-1]:
            if kind != "Project" or _calls_user_code(node):
                return None
            exprs = node.expressions()
            if any(exprs.apply(i).getClass().getSimpleName() != "AttributeReference" for i in range(exprs.size())):
                return None
        relation = nodes[-1][1].relation()
        if relation.getClass().getSimpleName() != "HadoopFsRelation":
            return None
        if relation.fileFormat().getClass().getSimpleName() != "ParquetFileFormat":
            return None
        if relation.location().getClass().getSimpleName() != "InMemoryFileIndex":
            return None
        if not relation.partitionSchema().isEmpty() or not relation.bucketSpec().isEmpty():
            return None
        options = relation.options()
        keys = options.keys().iterator()
        while keys.hasNext():
            if str(keys.next()).lower() not in ("path", "paths"):
                return None
        names = set(relation.dataSchema().fieldNames())
    except Exception:  # an internal API that moved: Spark reads it
        return None
    if set(df.columns) - names or len(set(df.columns)) != len(df.columns):
        return None
    files = list(df.inputFiles())
    if not files or not all(f.startswith("file:") for f in files):
        return None
    return files


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):,.1f} MiB"


def _log_source(what: str, why: str, rule: str) -> None:
    """The one log line of where a MERGE's source goes, with the sizes and the cap's rule."""
    log.info("MERGE source %s: %s; the cap: %s", what, why, rule)


#: a Spark property that lowers the cap (bytes, or a size such as ``64m``): a driver shared with others
MAX_SOURCE_CONF = "spark.airflowDelta.merge.maxSourceBytes"

#: over Spark Connect the source travels to the server's tasks inside a plan message (gRPC's limit
#: is 128 MiB by default on both sides): a source shipped that way stays well under it
CONNECT_SOURCE_BYTES = 64 << 20


def collect_cap(spark, *, from_files: bool = False) -> int:
    """The most bytes of Arrow a MERGE holds of its source in this process (:func:`source_cap`)."""
    return source_cap(spark, from_files=from_files)[0]


def held_here(spark) -> bool:
    """Whether a MERGE source held in this process stays here: a local master whose file work runs
    in this process's threads (:data:`.session.FILE_WORK_CONF` not ``tasks``), so nothing ships it
    to tasks."""
    from .session import FILE_WORK_CONF, conf_value, local_master

    return local_master(spark) and conf_value(spark, FILE_WORK_CONF, "auto").strip().lower() != "tasks"


def source_cap(spark, *, from_files: bool = False) -> tuple[int, str]:
    """``(bytes, rule)``: the most bytes of Arrow a MERGE holds of its source in this process (above
    it the source is joined in Spark, whose memory spills), and the rule that gave it, for the log.

    * On a local master whose file work runs here (:func:`held_here`) the source is this machine's
      memory, shipped nowhere: :func:`.session.local_source_cap` (a share of the memory available
      now). Read from its files in this process (``from_files``: no JVM between), that alone;
      collected from a DataFrame (``toArrow``), also at most :data:`..merge.MAX_SOURCE_BYTES`, an
      eighth of the driver's memory and ``spark.driver.maxResultSize`` (the JVM holds the collected
      batches: a larger collect is slow, and a 1g driver loses task results).
    * Elsewhere (a cluster, Spark Connect) it is shipped to every task: :data:`..merge.MAX_SOURCE_BYTES`,
      at most an eighth of the driver's memory (``spark.driver.memory``, Spark's default 1g), and over
      Spark Connect at most :data:`CONNECT_SOURCE_BYTES`.
    * :data:`MAX_SOURCE_CONF`, when set, lowers it everywhere."""
    from ..merge import MAX_SOURCE_BYTES
    from .session import LOCAL_SOURCE_SHARE, conf_value, is_connect, local_source_cap, memory_bytes

    driver = memory_bytes(conf_value(spark, "spark.driver.memory", "1g")) // 8
    if held_here(spark):
        cap = local_source_cap()
        rule = f"local master: {LOCAL_SOURCE_SHARE:g} of this machine's available memory"
        if not from_files:
            results = memory_bytes(conf_value(spark, "spark.driver.maxResultSize", "1g")) or cap
            cap = min(cap, MAX_SOURCE_BYTES, driver, results)
            rule += ", at most the shipped source's bytes, an eighth of driver memory and spark.driver.maxResultSize"
    else:
        cap = min(MAX_SOURCE_BYTES, driver)
        rule = "the source shipped to every task, at most an eighth of driver memory"
        if is_connect(spark):
            cap = min(cap, CONNECT_SOURCE_BYTES)
            rule += ", over Spark Connect at most 64 MiB"
    limit = conf_value(spark, MAX_SOURCE_CONF, "")
    if limit:
        try:
            cap = min(cap, memory_bytes(limit, plain="", strict=True))
        except ValueError as e:
            raise InvalidArgumentError(
                f"Spark property {MAX_SOURCE_CONF} is not a size", str(e), "set it to bytes or a size such as 64m"
            ) from None
        rule += f", {MAX_SOURCE_CONF}={limit}"
    return cap, rule


def measured_size(df, schema) -> tuple[int, int]:
    """``(rows, Arrow bytes)`` of ``df`` in one aggregation: fixed widths from the schema, string and
    binary values by their summed lengths (plus offsets), nested values by their JSON text's."""
    from pyspark.sql import functions as F

    from ..merge import fixed_width

    aggs, fixed = [F.count(F.lit(1)).alias("n")], 0
    for i, f in enumerate(schema.fields):
        col, name = F.col(f"__s{i}"), getattr(f.type, "name", "")
        if name in ("string", "binary"):
            aggs.append(F.sum(F.octet_length(col)).alias(f"b{i}"))
            fixed += 4
        elif not name:  # struct, array, map
            aggs.append(F.sum(F.octet_length(F.to_json(col))).alias(f"b{i}"))
            fixed += 8
        else:
            fixed += fixed_width(f.type)
    row = df.agg(*aggs).collect()[0]
    rows = int(row["n"])
    return rows, rows * fixed + sum(int(row[a] or 0) for a in row.asDict() if a != "n")


def _bare_scan(df) -> bool:
    """Whether ``df`` is columns of a scan of Parquet or ORC files, nothing filtered: then Spark's
    size estimate (from the files' bytes, which encode and compress the rows) is below their Arrow
    size."""

    def columnar(node) -> bool:
        try:
            return node.relation().fileFormat().getClass().getSimpleName() in ("ParquetFileFormat", "OrcFileFormat")
        except Exception:  # not a file relation
            return False

    nodes = _plan_nodes(df)
    return bool(nodes) and all(
        kind == "Project" or (kind == "LogicalRelation" and columnar(node)) for kind, node in nodes
    )


def _plan_size(df) -> int | None:
    """Spark's own estimate of ``df``'s size in bytes (file sizes, cached sizes), when it has one
    (classic Spark; None over Spark Connect, which has no JVM here, or when unknown)."""
    from .session import is_connect

    if is_connect(df.sparkSession):
        return None
    try:
        size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # an internal API that moved
        return None
    return size if 0 <= size < (1 << 60) else None


def execute_merge_by_file(spark, prepared, candidates) -> MergeOutcome:
    """:func:`..merge.execute_by_file` in Spark tasks (where the plane sends candidates too
    large for the driver's threads, :meth:`.plane.SparkPlane.in_driver`)."""
    from ..merge import execute_by_file

    return execute_by_file(
        prepared, candidates, in_tasks=lambda likely: _merge_in_tasks(spark, prepared, candidates, likely)
    )


def _merge_in_tasks(spark, prepared, candidates, likely: list[bool | None]) -> list:
    """:func:`..merge.by_file.merge_file` over the candidates in Spark tasks (the source shipped as
    Arrow IPC in the task closure, which PySpark broadcasts when large)."""
    import functools

    import pyarrow as pa

    from ..merge import MergeFileOutcome
    from .rewrite import run_file_tasks

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, prepared.source.schema) as w:
        w.write_table(prepared.source)
    worker = functools.partial(_FileMerger, prepared.spec, sink.getvalue().to_pybytes())
    return run_file_tasks(spark, candidates, likely, worker, MergeFileOutcome)


class _FileMerger:
    """MERGE's per-file work in a task (:func:`..merge.by_file.merge_file`), the source read once;
    the task's files share one :class:`..merge.TouchStreak`."""

    def __init__(self, spec, payload: bytes):
        import pyarrow as pa

        from ..merge import PreparedMerge, TouchStreak

        self.prepared = PreparedMerge(spec, pa.ipc.open_stream(payload).read_all())
        self.table_uri = spec.write.table_uri
        self.streak = TouchStreak()

    def __call__(self, storage, path, partition_values, deletion_vector, likely, task_id):
        return self.streak.merge(self.prepared, storage, path, partition_values, deletion_vector, likely, task_id)
