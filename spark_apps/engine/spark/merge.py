"""MERGE's data plane in Spark (the plan and the commit are :mod:`..commands.merge`).

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
* :func:`execute_merge` (large sources, or no key equality to look up): joins in Spark in two phases
  (docs/design.md, "MERGE's two strategies"): a narrow join of the columns the conditions read, with
  each target row's file (``__file``) and physical index (``__row``), for the tallies, the
  duplicate-match check and the touched files; then the touched files alone joined whole and written
  (copy on write), or on a deletion-vector table the new and changed rows written and the changed ones
  marked in their files' vectors (:func:`mark_file`). Each row is tagged with the first clause that
  fires (``__action``: the clause's index, -1 copy, -2 drop). Conditions and values are the bound trees
  as Columns (:mod:`.columns`) over the joined DataFrame's own column names (``__t<i>`` / ``__s<i>``),
  so Spark evaluates exactly what was checked, with no SQL text parsed again. The output is written by
  Spark's own writer where it writes the table's files exactly (:func:`.write.write_native`), else by
  the core writer.
"""

from __future__ import annotations

import time

from ..errors import DuplicateMatchError, InvalidArgumentError
from ..expr.sql import quote
from ..merge import MergeOutcome, duplicate_match_error
from ..progress import report
from ..rewrite.common import as_written
from .columns import to_column

__all__ = [
    "source_key_values",
    "execute_merge",
    "execute_merge_by_file",
    "small_source",
    "deduplicated",
    "check_unique_keys",
    "MergeOutcome",
    "DuplicateMatchError",
]


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


def _speller(plan):
    """How the joined DataFrame names a bound column: ``__t<i>`` / ``__s<i>`` by top-level position."""
    t_index = {f.name: i for i, f in enumerate(plan.target_schema.fields)}
    s_index = {f.name: i for i, f in enumerate(plan.source_schema.fields)}

    def spell(c) -> str:
        head = f"__t{t_index[c.path[0]]}" if c.relation == plan.target_alias else f"__s{s_index[c.path[0]]}"
        return ".".join([quote(head), *(quote(p) for p in c.path[1:])])

    return spell


def _spill_level():
    """Where MERGE keeps what it reads more than once (the materialised source, the joined rows):
    on local disk only, as Delta's MERGE does. A serialized block kept in memory (or read back from
    disk into memory) is one heap buffer per partition, and a large partition's overran a 1g driver
    (OutOfMemoryError in BlockManager); a disk-only block is streamed, whatever its size, and the
    page cache keeps it fast."""
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


def _renamed(df, prefix: str):
    return df.toDF(*[f"{prefix}{i}" for i in range(len(df.columns))])


def source_key_values(spark, source, plan, keys: list, max_values: int, *, unique=None, refuse=True):
    """``(prefixed source, row count, [(values or None, min, max, has_null)] per key, unique)``.

    The source is read where it lies when :func:`stable_source` says every read gives the same rows
    (a deterministic scan of files, or rows held in the plan); otherwise it is materialised once
    (``localCheckpoint`` on local disk, :func:`_spill_level`), as Delta's MergeIntoMaterializeSource
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

    renamed = _renamed(source, "__s")
    if stable_source(spark, source):
        src = renamed
    else:
        with active(spark):  # (over Spark Connect the checkpoint's DataFrame binds to the active session)
            src = renamed.localCheckpoint(eager=True, storageLevel=_spill_level())
    spell = _speller(plan)
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


def _first(branches: list, otherwise):
    """The value of the first branch whose condition holds, else ``otherwise`` (Columns)."""
    from pyspark.sql import functions as F

    out = None
    for cond, value in branches:
        out = (F if out is None else out).when(cond, value)
    return otherwise if out is None else out.otherwise(otherwise)


def execute_merge(
    spark, snapshot, plan, src, candidates, source_rows: int | None = None, *, unique_matches: bool = False
) -> MergeOutcome:
    """MERGE by joins in Spark, in two phases as delta-spark's MergeIntoCommand (see the module
    docstring). Insert-only merges are one left anti join of the source with the candidates' ON
    columns. Otherwise :func:`_merge_two_phase`: the source joined with the candidates' rows reduced
    to the columns the ON condition and the clauses' conditions read (with their file and row index)
    gives the clause tallies, the duplicate-match check and the touched files; then either only the
    touched files are read whole and joined once more to write them back (copy on write), or, on a
    table that writes deletion vectors, the same join (carrying the source's columns and the target
    columns the written rows take) writes the updated and inserted rows and marks the changed ones.
    ``unique_matches``: no target row can match two source rows (the source's keys were checked
    unique), so the duplicate-match check is skipped."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    job = _JoinMerge(spark, snapshot, plan).with_source(src, source_rows)
    job.unique_matches = unique_matches
    if plan.insert_only:
        ons = job.refs([plan.on], plan.target_alias)
        target = job.target_rows(candidates, columns=ons, shuffle=False, locate=False, rid=False)
        joined = job.rows.join(target, job.on(), "left_anti")
        joined = joined.withColumn("__action", job.case("not_matched", -2))
        per_action = job.tally(joined, multi=False)
        scan_ms = int((time.monotonic() - started) * 1000)
        inserted = sum(n for n, _ in per_action.values())
        return job.write(
            [(joined.filter(F.col("__action").isin(job.inserts)), job.inserts)], [], per_action, scan_ms, rows=inserted
        )
    if job.writes_source_rows() is not None:
        return _merge_source_rows(job, candidates, started)
    if job.upsert() is not None:
        return _merge_upsert(job, candidates, started)
    return _merge_two_phase(job, candidates, started)


class _JoinMerge:
    """What the join strategies share: the prepared source and target rows, the clause expressions
    (bound trees rendered for the joined DataFrame's own column names), the checks and the write."""

    def __init__(self, spark, snapshot, plan):
        from pyspark.sql import functions as F

        from ..features import writes_change_data, writes_deletion_vectors

        self.spark, self.snapshot, self.plan = spark, snapshot, plan
        #: rows a clause changes are marked in their files' deletion vectors, the files stay
        self.deletion_vectors = writes_deletion_vectors(snapshot.protocol, snapshot.metadata)
        self.spell = _speller(plan)
        self.clauses = plan.clauses
        self.codes = plan.codes()  # clause indices per kind
        self.changing = [i for i, c in enumerate(self.clauses) if c.clause.action in ("update", "delete")]
        self.updates = [i for i in self.changing if self.clauses[i].clause.action == "update"]
        self.inserts = [i for i in range(len(self.clauses)) if self.clauses[i].clause.action == "insert"]
        self.change_data = writes_change_data(snapshot.metadata)
        self.unique_matches = False  # see execute_merge
        from ..row_tracking import for_rewrite

        #: row tracking: the rows written from a target row keep its stable id (and, copied, its commit version)
        self.row_tracking = for_rewrite(snapshot)
        self._F = F

    def with_source(self, src, rows: int | None):
        """The source (as :func:`source_key_values` returned it) and its row count (None: unknown), see
        :meth:`source`."""
        from .session import conf_value, memory_bytes

        self.rows = src.withColumn("__sp", self._F.lit(True))  # for an anti join, which never builds its left side
        self.source_rows = rows
        self.threshold = memory_bytes(conf_value(self.spark, "spark.sql.autoBroadcastJoinThreshold", "10m"), plain="")
        return self

    def source(self, columns: set[int] | None = None, *, narrow: bool = False):
        """``(source rows, broadcast)``: the source's ``columns`` (indices; default all) and ``__sp``,
        broadcast to the join when its rows (estimated from the schema) fit Spark's broadcast
        threshold, else the join shuffles both sides (Spark sizes the target's rows by the file list
        they are read from, a few rows, and would broadcast the whole table: its own choice is not
        safe here). ``narrow``: a few key columns joined INNER, broadcast up to
        :func:`narrow_limit` (the driver builds it)."""
        from ..merge import row_width
        from ..schema import StructType

        fields = self.plan.source_schema.fields
        keep = range(len(fields)) if columns is None else sorted(columns)
        df = self.rows.select(*[f"__s{i}" for i in keep], "__sp")
        width = row_width(StructType(tuple(fields[i] for i in keep)))
        limit = self.threshold
        if narrow:
            limit = max(limit, narrow_limit(self.spark))
        broadcast = self.source_rows is not None and self.source_rows * width <= limit
        return (df.hint("broadcast") if broadcast else df), broadcast

    def refs(self, trees, relation: str) -> set[int]:
        """Indices of the top-level columns (of the target's or the source's schema) that ``trees``
        read from ``relation``."""
        plan = self.plan
        schema = plan.target_schema if relation == plan.target_alias else plan.source_schema
        index = {f.name: i for i, f in enumerate(schema.fields)}
        return {index[c.path[0]] for t in trees if t is not None for c in t.column_nodes() if c.relation == relation}

    def needed(self, *, writes: bool) -> tuple[set[int], set[int]]:
        """``(target, source)`` column indices a join must carry: what the ON condition and the
        clauses' conditions read; with ``writes`` (rows are written from the join) also the whole
        source, what the assignments read, the target columns an update leaves as they are, and all
        the target's when the change feed records the rows before the change."""
        plan = self.plan
        trees = [plan.on, *(c.condition for c in plan.clauses)]
        if writes:
            trees += [v for c in plan.clauses for v in c.values.values()]
        target, source = self.refs(trees, plan.target_alias), self.refs(trees, plan.source_alias)
        if writes:
            names = [f.name for f in plan.target_schema.fields]
            source = set(range(len(plan.source_schema.fields)))
            for c in plan.clauses:
                if c.clause.action == "update":
                    target |= {j for j, name in enumerate(names) if name not in c.values}
            if self.change_data:
                target = set(range(len(names)))
        return target, source

    def joined(self, src, target, how: str | None = None):
        """``src`` joined with ``target`` ON the merge condition, each row tagged (``__action``) with
        its first firing clause (-1: none, a copy; -2: a source row dropped). The join keeps the
        source's lone rows only with NOT MATCHED clauses, the target's only with NOT MATCHED BY
        SOURCE clauses, unless ``how`` says otherwise."""
        F, codes = self._F, self.codes
        if how is None:
            nmbs, inserts = bool(codes["not_matched_by_source"]), bool(codes["not_matched"])
            how = "full_outer" if nmbs and inserts else "right_outer" if nmbs else "left_outer" if inserts else "inner"
        action = _first(
            [
                (F.col("__sp").isNotNull() & F.col("__tp").isNotNull(), self.case("matched", -1)),
                (F.col("__tp").isNotNull(), self.case("not_matched_by_source", -1)),
            ],
            self.case("not_matched", -2),
        )
        return src.join(target, self.on(), how).withColumn("__action", action)

    def case(self, kind: str, otherwise: int):
        """The first clause of ``kind`` whose condition holds, as its index; else ``otherwise``
        (:func:`..merge.first_firing`, as a Column)."""
        from ..merge import first_firing

        conditions = [(i, self.clauses[i].condition) for i in self.codes[kind]]
        return to_column(first_firing(conditions, otherwise), self.spell)

    def on(self):
        return to_column(self.plan.on, self.spell)

    def target_rows(
        self,
        files,
        *,
        columns: set[int] | None = None,
        shuffle: bool = True,
        locate: bool = True,
        rid: bool = True,
        ids: bool = False,
    ):
        """The rows of ``files``: their ``columns`` (indices into the target schema, default all) as
        ``__t<i>``, with ``locate`` their file ``__file`` and physical index in it ``__row`` (Spark's
        own ``_metadata`` where its parquet scan reads the files), ``__tp``, with ``rid`` a row id
        ``__rid``, with ``ids`` on a row-tracking table its stable row id ``__rowid`` and commit version
        ``__rowcv``; hinted to a sort-merge join when ``shuffle`` (not joined with a broadcast source)."""
        from .scan import FILE_COLUMN, ROW_COLUMN, scan_files

        F, plan, snapshot = self._F, self.plan, self.snapshot
        fields = plan.target_schema.fields
        keep = range(len(fields)) if columns is None else sorted(columns)
        present = [j for j in keep if j < len(snapshot.schema.fields)]
        names = [fields[j].name for j in present]
        from ..row_tracking import for_rewrite

        tracking = for_rewrite(snapshot, files) if ids and self.row_tracking is not None else None
        df = scan_files(
            self.spark,
            snapshot,
            files=files,
            columns=names,
            with_file_column=locate,
            with_row_index=locate,
            row_tracking=tracking,
        ).df
        cols = [_bytewise(F.col(quote(fields[j].name)), fields[j]).alias(f"__t{j}") for j in present]
        added = [j for j in keep if j >= len(snapshot.schema.fields)]
        if added:  # merge_schema: columns the files lack
            from .write import spark_schema

            types = spark_schema(plan.target_schema.to_json()).fields
            cols += [F.lit(None).cast(types[j].dataType).alias(f"__t{j}") for j in added]
        if locate:
            cols += [F.col(FILE_COLUMN).alias("__file"), F.col(ROW_COLUMN).alias("__row")]
        if tracking is not None:
            cols += [
                F.col(quote(tracking.row_id_column)).alias("__rowid"),
                F.col(quote(tracking.commit_version_column)).alias("__rowcv"),
            ]
        target = df.select(*cols).withColumn("__tp", F.lit(True))
        if rid:
            target = target.withColumn("__rid", F.monotonically_increasing_id())
        return target.hint("merge") if shuffle else target

    def multi_matches(self, pairs) -> bool:
        """Whether a target row matched more than one source row (a shuffle of the matched pairs only,
        aggregated to one row: never a row per target row on the driver); Delta's error when one such
        row would be changed twice."""
        F = self._F
        changing_matched = [i for i in self.codes["matched"] if i in self.changing]
        per_row = (
            pairs.groupBy("__rid")
            .agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("__action").isin(changing_matched).cast("int")).alias("ch"))
            .filter("n > 1")
        )
        found = per_row.agg(F.count(F.lit(1)).alias("rows"), F.max("ch").alias("ch")).collect()[0]
        first = self.clauses[self.codes["matched"][0]] if len(self.codes["matched"]) == 1 else None
        lone_delete = first is not None and first.clause.action == "delete" and first.condition is None
        if changing_matched and not lone_delete and (found["ch"] or 0) > 1:
            raise duplicate_match_error()
        return found["rows"] > 0

    def tally(self, rows, *, multi: bool) -> dict:
        """Per clause: joined rows, and the target rows they concern (distinct only where a target
        row can appear more than once)."""
        F = self._F
        rows_of = F.lit(0) if self.plan.insert_only else F.countDistinct("__rid") if multi else F.count(F.lit(1))
        agg = rows.groupBy("__action").agg(F.count(F.lit(1)).alias("n"), rows_of.alias("rows")).collect()
        return {r["__action"]: (r["n"], r["rows"]) for r in agg}

    def tally_and_touched(self, rows, *, multi: bool, touch_matched: bool = False) -> tuple[dict, list[str]]:
        """:meth:`tally` and the touched files: those a changing clause fired in (and, with
        ``touch_matched``, those holding a matched row). Without multiple matches both come from one
        aggregation by clause and file (a pass over the joined rows, not two)."""
        F = self._F
        touch = F.col("__action").isin(self.changing)
        if touch_matched:
            touch = touch | (F.col("__sp").isNotNull() & F.col("__tp").isNotNull())
        if multi:
            found = rows.filter(touch).select("__file").distinct().collect()
            return self.tally(rows, multi=multi), sorted(r["__file"] for r in found if r["__file"] is not None)
        per_action: dict = {}
        touched = set()
        grouped = rows.groupBy("__action", "__file", touch.alias("__touch")).agg(F.count(F.lit(1)).alias("n"))
        for r in grouped.collect():
            n = per_action.get(r["__action"], (0, 0))[0] + r["n"]
            per_action[r["__action"]] = (n, n)
            if r["__touch"] and r["__file"] is not None:
                touched.add(r["__file"])
        return per_action, sorted(touched)

    def observed_inserts(self, rows):
        """``(rows, observation)``: ``rows`` counting, as an action reads them, the lone source rows an
        insert clause takes (``observation.get["n"]`` after the write): the exact inserted count when
        phase 1 saw only the matched pairs, where a source row matching two target rows pairs twice."""
        from pyspark.sql import Observation

        F = self._F
        lone = F.col("__tp").isNull() & F.col("__action").isin(self.inserts)
        observation = Observation("merge_inserts")
        return rows.observe(observation, F.count(F.when(lone, 1)).alias("n")), observation

    def rewritten(self, rows, multi: bool):
        """The target rows written back: updated rows and, copying on write (``rows`` are the
        touched files' rows), the unchanged ones (one per target row)."""
        from pyspark.sql import Window

        F = self._F
        if multi:  # one output row per target row: the clause that fires (at most one), else a copy
            best = F.max("__action").over(Window.partitionBy("__rid"))
            rows = rows.withColumn("__best", best).filter("__action = __best").drop("__best")
            rows = rows.dropDuplicates(["__rid"])
        return rows.filter(self.kept())

    def upsert(self) -> int | None:
        """The insert clause's index when this MERGE is an upsert whose written rows are the source's
        own: no target row can match twice (the source's keys were checked unique), the row count of
        the source known, no change feed and no row tracking (the rows would need the target's), and
        the clauses exactly one unconditional WHEN MATCHED update and one unconditional WHEN NOT
        MATCHED insert of the same values (``plan.upsert_shaped``; an insert sets every column, so the
        update does too). Then a matched target row's new values are its source row's, whichever
        clause fires."""
        if not self.unique_matches or self.change_data or self.row_tracking is not None:
            return None
        if self.source_rows is None or not self.plan.upsert_shaped:
            return None
        return 1

    def upsert_actions(self, updated: int, touched: list[str]) -> dict:
        """The per-clause tallies of an upsert (:meth:`upsert`) that updated ``updated`` target rows
        in the ``touched`` files (the rest of the source is inserted), reported to the task log."""
        inserted = (self.source_rows or 0) - updated
        report("MERGE", "upsert", deletion_vectors=int(self.deletion_vectors))
        report("MERGE", "joined", touched=len(touched), multiple_matches=0)
        return {0: (updated, updated), self.upsert(): (inserted, inserted)}

    def writes_source_rows(self) -> int | None:
        """:meth:`upsert` on a table that writes deletion vectors: the source rows are written as they
        are and only the marks need the target (:func:`_merge_source_rows`)."""
        return self.upsert() if self.deletion_vectors else None

    def pairs_tally(self, pairs, keys: list[str], candidates) -> tuple[dict, list[str]] | None:
        """:meth:`tally_and_touched` of an inner join's matched pairs, ``None`` when a source row
        matched two target rows (the target holds its key twice): one job, grouping each source row's
        pairs (by ``keys``, the source's ON columns, which hold its unique key) to their count and a
        file, then by clause and file. A file travels as the 64-bit hash of its path (the first
        grouping moves a row per matched source row), named again from the ``candidates``' paths."""
        F = self._F
        names = self._hashed_paths(candidates)
        file = F.xxhash64("__file") if names is not None else F.col("__file")
        per_row = pairs.groupBy(*keys).agg(
            F.count(F.lit(1)).alias("n"), F.first(file).alias("__f"), F.first("__action").alias("__action")
        )
        grouped = per_row.groupBy("__action", "__f").agg(F.sum("n").alias("n"), F.max("n").alias("most"))
        per_action: dict = {}
        touched = set()
        for r in grouped.collect():
            if r["most"] > 1:
                return None
            n = per_action.get(r["__action"], (0, 0))[0] + r["n"]
            per_action[r["__action"]] = (n, n)
            touched.add(r["__f"] if names is None else names[r["__f"]])
        return per_action, sorted(touched)

    def _hashed_paths(self, candidates) -> dict | None:
        """``{xxhash64(path): path}`` of the candidates' paths as Spark hashes them (one small job),
        or None when two collide (then the paths themselves are grouped)."""
        F = self._F
        paths = candidates.column("path").to_pylist()
        df = self.spark.createDataFrame([(p,) for p in paths], "__file string")
        names = {r["h"]: r["__file"] for r in df.select("__file", F.xxhash64("__file").alias("h")).collect()}
        return names if len(names) == len(set(paths)) else None

    def kept(self):
        """Which target rows (of touched files) are written: updated ones and, copying on write, the
        unchanged ones too."""
        F = self._F
        keep = F.col("__action").isin(self.updates)
        if not self.deletion_vectors:  # the touched files are rewritten: their unchanged rows copied
            keep = keep | (F.col("__action") == -1)
        return keep

    def marked(
        self, changed, touched: list[str] | None, candidates, *, counts: dict | None = None, once_by=None
    ) -> dict | None:
        """Touched file -> its new deletion vector: the physical indexes of the target rows a clause
        updated or deleted (``changed``) joined with the file's vector, written in the tasks (one
        group per file: its row indexes only). A file left with no live row is not in the dict: it
        leaves the table whole. ``touched`` None: any candidate may be; ``counts`` gets each marked
        file's number of marked rows.

        ``once_by``: the source's ON columns of matched pairs (``changed``), which hold its unique
        key: each source row's pairs are first reduced to one (its count, file and row; the file as
        the 64-bit hash of its path, named again in the task) in the same job, and None is returned
        when a source row matched two target rows (vectors written by then are never committed)."""
        import json

        import pyarrow as pa
        import pyarrow.compute as pc

        from ..storage import normalize_table_uri

        F = self._F
        files = candidates
        if touched is not None:
            files = candidates.filter(pc.is_in(candidates.column("path"), value_set=pa.array(touched, pa.string())))
        has_dv = "deletion_vector" in files.column_names
        olds = files.column("deletion_vector").to_pylist() if has_dv else [None] * files.num_rows
        old = {p: json.dumps(d) for p, d in zip(files.column("path").to_pylist(), olds) if d}
        root = normalize_table_uri(self.snapshot.table_root)
        names = self._hashed_paths(candidates) if once_by else None
        rows = changed.select("__file", "__row")
        if once_by:
            file = F.xxhash64("__file") if names is not None else F.col("__file")
            rows = changed.groupBy(*once_by).agg(
                F.count(F.lit(1)).alias("__n"), F.first(file).alias("__file"), F.first("__row").alias("__row")
            )

        def fn(table):  # one argument, as applyInArrow requires: the rest is in its closure
            from airflow_delta_provider_apps.engine.spark.merge import mark_file
            from airflow_delta_provider_apps.engine.spark.session import guard_executor

            def one():
                if "__n" in table.column_names:
                    if pc.max(table.column("__n")).as_py() > 1:  # a source row matched twice: no vector
                        none = pa.array([None], pa.string())
                        yield pa.table({"path": none, "dv": none, "rows": pa.array([-1], pa.int64())})
                        return
                    if names is not None:
                        path = names[table.column("__file")[0].as_py()]
                        named = pa.table({"__file": pa.array([path] * table.num_rows), "__row": table.column("__row")})
                        yield mark_file(named, old, root)
                        return
                yield mark_file(table, old, root)

            return next(guard_executor(one()))  # a DeltaError reaches the driver in a form it decodes

        from .session import ensure_python_workers

        ensure_python_workers(rows.sparkSession)
        out = rows.groupBy("__file").applyInArrow(fn, "path string, dv string, rows long")
        got = out.collect()
        if any(r["rows"] < 0 for r in got):  # the vectors the other files got are never committed
            _discard_vectors(root, [json.loads(r["dv"]) for r in got if r["dv"] is not None])
            return None
        if counts is not None:
            counts.update((r["path"], r["rows"]) for r in got)
        return {r["path"]: json.loads(r["dv"]) for r in got if r["dv"] is not None}

    def project(self, rows, fired: list):
        """``rows`` in the table's columns: each takes the values of the clause (of ``fired``) that
        fired on it, else the target row's own (NULL for source rows alone)."""
        F, plan, clauses = self._F, self.plan, self.clauses
        has_target = "__tp" in rows.columns
        cols = []
        for j, f in enumerate(plan.target_schema.fields):
            branches = [
                (F.col("__action") == i, to_column(clauses[i].values[f.name], self.spell))
                for i in fired
                if f.name in clauses[i].values
            ]
            # (a target column the join does not carry is one every firing clause assigns)
            otherwise = F.col(quote(f"__t{j}")) if has_target and f"__t{j}" in rows.columns else F.lit(None)
            cols.append(_first(branches, otherwise).alias(f.name))
        rt = self.row_tracking
        if rt is not None:  # a row from a target row keeps its id; only a copy keeps its commit version
            carried = "__rowid" in rows.columns
            none = F.lit(None).cast("long")
            cols.append((F.col("__rowid") if carried else none).alias(rt.row_id_column))
            copied = F.when(F.col("__action") == -1, F.col("__rowcv")) if carried else none
            cols.append(copied.alias(rt.commit_version_column))
        return rows.select(*cols)

    def changes(self, changed, inserted, multi: bool):
        """The change feed's rows (table columns, then ``_change_type``) of the target rows a clause
        changed (``changed``: joined rows whose clause updates or deletes) and of the ``inserted``
        rows (or None), conformed to the table's types."""
        from ..cdf import CHANGE_TYPE, DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
        from .write import conform_dataframe

        F, fields = self._F, self.plan.target_schema.fields
        schema_json = self.plan.target_schema.to_json()
        if multi:  # a target row a lone DELETE clause matched more than once changed once
            changed = changed.dropDuplicates(["__rid"])
        deletes = [i for i in self.changing if i not in self.updates]
        updated = changed.filter(F.col("__action").isin(self.updates))
        before = [F.col(quote(f"__t{j}")).alias(f.name) for j, f in enumerate(fields)]
        parts = [
            (updated.select(*before), UPDATE_PREIMAGE),
            (self.project(updated, self.updates), UPDATE_POSTIMAGE),
            (changed.filter(F.col("__action").isin(deletes)).select(*before), DELETE),
        ]
        if inserted is not None:
            from ..identity import identities

            if identities(self.plan.target_schema):
                from ..errors import InvalidArgumentError

                raise InvalidArgumentError(
                    "Cannot MERGE as a Spark join into a table with identity columns that records the change data feed",
                    "the inserted rows' identity values are assigned in the writing tasks, and the change "
                    "rows would be computed apart from them",
                    "merge a smaller source (under the memory cap: the file-by-file MERGE records them), or "
                    "insert the new rows with a write first",
                )
            parts.append((self.project(inserted, self.inserts), INSERT))
        out = None
        for rows, kind in parts:
            rows = conform_dataframe(rows, schema_json).withColumn(CHANGE_TYPE, F.lit(kind))
            out = rows if out is None else out.unionByName(rows)
        return out

    def write(
        self, outputs: list, touched: list[str], per_action: dict, scan_ms: int, changes=None, marked=None, *, rows: int
    ) -> MergeOutcome:
        """The output rows in the table's columns, written through the core writer. ``outputs``:
        ``(rows, clauses)`` pairs: each row takes the values of the clause (of ``clauses``) that
        fired on it, else the target row's own (NULL for source rows alone). ``changes``: the
        change feed's rows (:meth:`changes`), written as change data files. ``marked``: the target rows
        to mark in their files' deletion vectors (:meth:`marked`), on a table that writes them."""
        from ..writer import table_write_spec
        from .write import conform_dataframe, native_write_applies, write_data_files, write_native

        started = time.monotonic()
        plan = self.plan
        adds, written, cdc = [], 0, []
        rt = self.row_tracking
        tracked = (rt.row_id_column, rt.commit_version_column) if rt is not None else ()
        spec = table_write_spec(
            self.snapshot, schema_json=plan.target_schema.to_json_string(), row_tracking=tracked or None
        )
        if outputs:
            projected = [self.project(o, fired) for o, fired in outputs]
            out = projected[0]
            for o in projected[1:]:
                out = out.unionByName(o)
            out = conform_dataframe(out, plan.target_schema.to_json(), keep=tracked)
            out = out.coalesce(self._write_tasks(rows, spec.target_file_size))
            # Spark's own writer where it writes the table's files exactly (stats from the footers)
            native = native_write_applies(self.spark, spec) is None
            result = write_native(out, spec) if native else write_data_files(out, spec)
            adds, written = list(result.adds), result.num_output_rows
            report("MERGE", "written", files=len(adds), rows=written, native=int(native))
        vectors = {}
        try:
            if changes is not None:
                cdc = list(write_data_files(changes, spec, change_data=True).adds)
            if marked is not None and touched:
                vectors = self.marked(*marked)
        except BaseException:  # the files written above are never committed: deleted
            from ..rewrite import FileOutcome, discard
            from ..storage import storage_for

            discard(storage_for(spec.table_uri), spec.table_uri, [FileOutcome("", written=as_written(adds + cdc))])
            raise
        rewrite_ms = int((time.monotonic() - started) * 1000)
        return MergeOutcome(touched, adds, written, per_action, scan_ms, rewrite_ms, vectors, changes=cdc)

    def _write_tasks(self, rows: int, target_file_size: int) -> int:
        """At most this many tasks write the output (a task writes at least one file): as many as
        ``rows`` (the rows to write, estimated) need files of the target size, rounded up to a multiple
        of the cluster's parallelism. A join's output otherwise has a partition per shuffle partition and a
        small MERGE would write that many small files."""
        from ..merge import row_width
        from .scan import _default_parallelism

        needed = -(-rows * row_width(self.plan.target_schema) // max(1, target_file_size))
        cores = max(1, _default_parallelism(self.spark))
        return -(-max(1, needed) // cores) * cores  # whole rounds: 3 tasks on 2 cores leave one idle half the time

    def changed_any(self, per_action: dict) -> bool:
        """Whether a clause updated or deleted a row (then the commit's changes go to change files)."""
        return any(per_action.get(i, (0, 0))[0] for i in self.changing)


def _merge_two_phase(job: _JoinMerge, candidates, started: float) -> MergeOutcome:
    """Phase 1: the source joined with the candidates' rows, both reduced to the columns the ON
    condition and the clauses' conditions read (the target's with ``__file`` and ``__row``), each
    pair or lone row tagged with its first firing clause, persisted (narrow: a few columns per row).
    The join keeps the source's unmatched rows only when a NOT MATCHED clause may insert them, the
    target's only when a NOT MATCHED BY SOURCE clause may change them. From it: the duplicate-match
    check, the per-clause tallies and the touched files (a changing clause fired in them; with
    NOT MATCHED clauses also every file holding a matched row, so that in phase 2 a source row that
    finds no partner in the touched files matched nothing at all, as in delta-spark).

    Phase 2, copy on write: only the touched files are read whole and joined with the whole source
    once more (right outer, full outer with inserts), each row written back updated or copied, the
    inserted rows beside them; nothing of this join is persisted. On a table that writes deletion
    vectors phase 1's join already carries the whole source and the target columns the written rows
    take (:meth:`_JoinMerge.needed`): the updated and inserted rows are written from it, the
    changed rows marked in their files' vectors, and no file is read twice."""
    F, codes = job._F, job.codes
    dv = job.deletion_vectors
    inserts = bool(codes["not_matched"])
    t_cols, s_cols = job.needed(writes=dv)
    # the matched pairs alone tell the tallies and the touched files when no target row can match twice,
    # nothing changes unmatched target rows and every unmatched source row is inserted: an inner join,
    # whose narrow source side may be broadcast up to a larger size (a key column or two)
    pairs_only = (
        not dv
        and job.unique_matches
        and not codes["not_matched_by_source"]
        and len(codes["not_matched"]) <= 1
        and all(job.clauses[i].condition is None for i in codes["not_matched"])
    )
    src, broadcast = job.source(None if dv else s_cols, narrow=pairs_only)
    target = job.target_rows(candidates, columns=t_cols, shuffle=not broadcast, rid=not job.unique_matches, ids=dv)
    joined = job.joined(src, target, "inner" if pairs_only else None)
    # read more than once (checks, tallies, writes, marks) unless the tallies are all that is needed
    persisted = dv or not job.unique_matches
    if persisted:
        joined = joined.persist(_spill_level())
    try:
        matched = F.col("__sp").isNotNull() & F.col("__tp").isNotNull()
        multi = False if job.unique_matches else job.multi_matches(joined.filter(matched))
        per_action, touched = job.tally_and_touched(joined, multi=multi, touch_matched=inserts and not dv)
        inserted_count = None
        if pairs_only and inserts:  # an estimate until the write counts them: a source row may pair twice
            left = max(0, (job.source_rows or 0) - sum(n for n, _rows in per_action.values()))
            per_action[codes["not_matched"][0]] = (left, left)
        scan_ms = int((time.monotonic() - started) * 1000)
        report("MERGE", "joined", touched=len(touched), multiple_matches=int(multi))
        outputs, inserted, changes, marked = [], None, None, None
        if dv:
            rows, written = joined, sum(per_action.get(i, (0, 0))[1] for i in job.updates)
        elif touched:
            src, broadcast = job.source()
            files = _only(candidates, touched)
            target = job.target_rows(files, shuffle=not broadcast, locate=False, rid=multi, ids=True)
            rows = job.joined(src, target, "full_outer" if inserts else "right_outer")
            written = _rows_estimate(files)
            if pairs_only and inserts:  # the lone source rows, counted by the write as it writes them
                rows, inserted_count = job.observed_inserts(rows)
        else:  # nothing to rewrite: the inserts alone (no source row matched a candidate row)
            rows, written = job.rows.withColumn("__action", job.case("not_matched", -2)), 0
        target_side = "__tp" in rows.columns
        lone = F.col("__tp").isNull() if target_side else F.lit(True)
        if inserts:
            inserted = rows.filter(lone & F.col("__action").isin(job.inserts))
            written += sum(per_action.get(i, (0, 0))[0] for i in job.inserts)
        if touched and target_side and multi:  # a target row matched twice: written once (a window)
            outputs.append((job.rewritten(rows.filter(F.col("__tp").isNotNull()), multi), job.updates))
            if inserts:
                outputs.append((inserted, job.inserts))
        elif touched and target_side or inserts:  # one pass over the join: kept rows, each clause's values
            keep, fired = lone & F.col("__action").isin(job.inserts), list(job.inserts)
            if touched and target_side:
                keep, fired = keep | (F.col("__tp").isNotNull() & job.kept()), [*job.updates, *job.inserts]
            outputs.append((rows.filter(keep), fired))
        changed = rows.filter(F.col("__tp").isNotNull() & F.col("__action").isin(job.changing)) if target_side else None
        # change files hold all of a commit's changes: needed when a clause changed a row, and when
        # files are rewritten at all (a file holding only matched rows that no clause changed is
        # rewritten too, and its copies must not read as inserted rows)
        rewrites = bool(touched) and not dv
        if job.change_data and (job.changed_any(per_action) or rewrites):
            changes = job.changes(changed, inserted, multi)
        if dv and touched:
            marked = (changed, touched, candidates)
        outcome = job.write(outputs, touched, per_action, scan_ms, changes, marked, rows=written)
        if inserted_count is not None:
            try:
                n = _observed(inserted_count, "n")
            except BaseException:  # the files written are never committed: deleted
                _discard(job, [*outcome.adds, *outcome.changes])
                raise
            per_action[codes["not_matched"][0]] = (n, n)
        return outcome
    finally:
        if persisted:
            joined.unpersist()


#: how long the observed metrics of a finished write may take to arrive (they come with its end)
OBSERVED_TIMEOUT_S = 120.0


def _observed(observation, name: str) -> int:
    """Metric ``name`` of an Observation whose write has finished. Classic pyspark's ``get`` waits
    without a bound for metrics that never come: it runs in a daemon thread, and a wait past
    :data:`OBSERVED_TIMEOUT_S` is a retryable error, never a hang."""
    import threading

    from ..errors import DeltaError

    got: dict = {}

    def wait():
        try:
            got["value"] = observation.get
        except BaseException as e:  # handed to the caller
            got["error"] = e

    waiter = threading.Thread(target=wait, name="delta-observed-metrics", daemon=True)
    waiter.start()
    waiter.join(OBSERVED_TIMEOUT_S)
    if "error" in got:
        raise got["error"]
    if "value" not in got:
        late = DeltaError(
            "Spark did not report the MERGE's inserted-row count",
            f"the write finished, but its observed metrics did not arrive within {OBSERVED_TIMEOUT_S:.0f} s",
            "retry the task (nothing was committed)",
        )
        late.retryable = True  # Spark's side, not the input's
        raise late
    return int(got["value"].get(name) or 0)


def _discard_vectors(table_root: str, vectors: list) -> None:
    """Delete the deletion-vector files of ``vectors`` (descriptors; inline ones have none), best
    effort: one left behind is an orphan VACUUM removes."""
    from ..dv import dv_file_path
    from ..storage import storage_for

    storage = storage_for(table_root)
    for dv in vectors:
        if dv.get("storageType") == "i":
            continue
        try:
            storage.delete(dv_file_path(table_root, dv))
        except Exception:  # cleanup must not hide why the MERGE changed its plan
            pass


def _discard(job: _JoinMerge, actions: list) -> None:
    """Delete files this MERGE wrote and will not commit."""
    from ..rewrite import FileOutcome, discard
    from ..storage import storage_for

    uri = job.snapshot.table_root
    discard(storage_for(uri), uri, [FileOutcome("", written=as_written(actions))])


def _merge_source_rows(job: _JoinMerge, candidates, started: float) -> MergeOutcome:
    """An upsert into a deletion-vector table (:meth:`_JoinMerge.writes_source_rows`): the source's
    ON columns joined with the candidates' (with file and row index) give the matched pairs, marked
    per file in one job whose output also counts them (the updated rows; the rest of the source is
    inserted); then the source itself is written, each row as the clauses give it. The target is
    read once, its ON columns only; nothing is persisted.

    Writing each source row once is right only when no source row matched two target rows (the
    target may hold a key twice, and Delta updates each such row): the marking job counts each
    source row's pairs first, and if one had two, the MERGE runs in two phases instead."""
    from pyspark.sql import functions as F

    t_cols, s_cols = job.needed(writes=False)
    src, broadcast = job.source(s_cols, narrow=True)
    pairs = src.join(job.target_rows(candidates, columns=t_cols, shuffle=not broadcast, rid=False), job.on(), "inner")
    counts: dict = {}
    vectors = job.marked(pairs, None, candidates, counts=counts, once_by=[f"__s{i}" for i in sorted(s_cols)])
    if vectors is None:  # a source row matched two target rows: each is updated, by the two phases
        return _merge_two_phase(job, candidates, started)
    touched = sorted(counts)
    insert = job.writes_source_rows()
    scan_ms = int((time.monotonic() - started) * 1000)
    per_action = job.upsert_actions(sum(counts.values()), touched)
    rows = job.rows.withColumn("__action", F.lit(insert))
    outcome = job.write([(rows, [insert])], touched, per_action, scan_ms, rows=job.source_rows or 0)
    outcome.deletion_vectors = vectors
    return outcome


def _merge_upsert(job: _JoinMerge, candidates, started: float) -> MergeOutcome:
    """A copy-on-write upsert (:meth:`_JoinMerge.upsert`). Phase 1: the source's ON columns joined
    (inner; broadcast up to :func:`narrow_limit`) with the candidates' ON columns and file give the
    matched pairs, counted per source row in one job (:meth:`_JoinMerge.pairs_tally`): the touched
    files and the updated rows. Phase 2 writes the touched files' rows that no source row matches (a
    left anti join with the source's ON columns, broadcast the same way) beside the source rows
    themselves, each an update or an insert of the same values: the whole rows of the target and the
    source are never joined. A source row that matched two target rows (the target holds its key
    twice, and each is updated) sends the MERGE to :func:`_merge_two_phase`."""
    F = job._F
    t_cols, s_cols = job.needed(writes=False)
    keys, broadcast = job.source(s_cols, narrow=True)
    target = job.target_rows(candidates, columns=t_cols, shuffle=not broadcast, rid=False)
    tally = job.pairs_tally(job.joined(keys, target, "inner"), [f"__s{i}" for i in sorted(s_cols)], candidates)
    if tally is None:
        return _merge_two_phase(job, candidates, started)
    counted, touched = tally
    insert = job.upsert()
    updated = sum(n for n, _rows in counted.values())
    scan_ms = int((time.monotonic() - started) * 1000)
    per_action = job.upsert_actions(updated, touched)
    outputs = [(job.rows.withColumn("__action", F.lit(insert)), [insert])]
    written = job.source_rows or 0
    if touched:
        files = _only(candidates, touched)
        whole = job.target_rows(files, shuffle=not broadcast, locate=False, rid=False)
        copies = whole.join(keys, job.on(), "left_anti").withColumn("__action", F.lit(-1))
        outputs.insert(0, (copies, []))
        written += max(0, _rows_estimate(files) - updated)
    return job.write(outputs, touched, per_action, scan_ms, rows=written)


def _only(candidates, paths: list[str]):
    """The rows of ``candidates`` whose path is in ``paths``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return candidates.filter(pc.is_in(candidates.column("path"), value_set=pa.array(paths, pa.string())))


def _rows_estimate(files) -> int:
    """The rows of ``files`` from their stats' ``numRecords`` (typed checkpoint stats or JSON; 0 where
    a file has none): :func:`..expr.skipping.stats_table`, the one reader of file stats."""
    import pyarrow.compute as pc

    from ..expr.skipping import stats_table

    stats = stats_table(files, []) if files.num_rows else None
    return int(pc.sum(stats.column("numRecords")).as_py() or 0) if stats is not None else 0


def mark_file(table, old_vectors: dict, table_root: str):
    """Executor side of :meth:`_JoinMerge.marked`: one file's changed rows (``__file``, ``__row``) ->
    ``{"path", "dv"}``, its new deletion vector as JSON (None: no row of the file stays live). The
    file's physical row count, which a vector must not reach, comes from its footer."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..paths import file_locations
    from ..reader import missing_data_file
    from ..rewrite.common import marked_deletion_vector
    from ..storage import storage_for

    path = table.column("__file")[0].as_py()
    storage = storage_for(table_root)
    [location] = file_locations(table_root, pa.array([path], pa.string()))
    try:
        with storage.open_input_file(location) as f:
            physical = pq.ParquetFile(f).metadata.num_rows
    except FileNotFoundError:  # deleted since the scan (VACUUM after a concurrent remove): say which
        raise missing_data_file(path, location) from None
    old = json.loads(old_vectors[path]) if path in old_vectors else None
    rows = table.column("__row").to_numpy()
    vector = marked_deletion_vector(storage, table_root, old, rows, physical)
    return pa.table(
        {
            "path": pa.array([path], pa.string()),
            "dv": pa.array([None if vector is None else json.dumps(vector)], pa.string()),
            "rows": pa.array([len(rows)], pa.int64()),
        }
    )


# --------------------------------------------------------------------------------------------------
# file by file (a small source shipped to the tasks; see engine/merge/by_file.py)


def small_source(source, plan, max_rows: int):
    """The source as one Arrow table (columns ``__s<i>``, the source schema's Arrow types), read once,
    when it holds at most ``max_rows`` rows and fits :func:`collect_cap`; None otherwise (then it
    is joined in Spark). Its size is known before anything is collected: Spark's own estimate when
    that is far below the cap, else one aggregation measures its rows and their Arrow bytes (string
    lengths summed), so a source too big for the driver (or a Connect client) is never collected."""
    import pyarrow as pa

    renamed = _renamed(source, "__s")
    cap = collect_cap(source.sparkSession)
    size = _plan_size(renamed)
    if size is not None and size > cap and _bare_scan(renamed):  # its files alone are over the cap
        return None
    if size is None or size * 32 > cap:  # not clearly small (compressed files may grow 10x as Arrow)
        rows, nbytes = _measured(renamed, plan.source_schema)
        if rows > max_rows or nbytes > cap:
            return None
    table = renamed.toArrow()
    schema = plan.source_schema.to_arrow_schema()
    want = pa.schema([pa.field(f"__s{i}", f.type, f.nullable) for i, f in enumerate(schema)])
    return pa.Table.from_arrays([table.column(i).cast(f.type) for i, f in enumerate(want)], schema=want)


#: a Spark property that lowers the cap (bytes, or a size such as ``64m``): a driver shared with others
MAX_SOURCE_CONF = "spark.airflowDelta.merge.maxSourceBytes"

#: over Spark Connect the source travels to the server's tasks inside a plan message (gRPC's limit
#: is 128 MiB by default on both sides): a source shipped that way stays well under it
CONNECT_SOURCE_BYTES = 64 << 20


def collect_cap(spark) -> int:
    """The most bytes of Arrow a MERGE collects from its source: :data:`..merge.MAX_SOURCE_BYTES`,
    at most an eighth of the driver's memory (``spark.driver.memory``, Spark's default 1g: the JVM
    holds the collected batches while Python reads them), and over Spark Connect at most
    :data:`CONNECT_SOURCE_BYTES`, and at most :data:`MAX_SOURCE_CONF` when set. A hard cap: above it
    the source is joined in Spark instead."""
    from ..merge import MAX_SOURCE_BYTES
    from .session import conf_value, is_connect, memory_bytes

    cap = min(MAX_SOURCE_BYTES, memory_bytes(conf_value(spark, "spark.driver.memory", "1g")) // 8)
    limit = conf_value(spark, MAX_SOURCE_CONF, "")
    if limit:
        try:
            cap = min(cap, memory_bytes(limit, plain="", strict=True))
        except ValueError as e:
            raise InvalidArgumentError(
                f"Spark property {MAX_SOURCE_CONF} is not a size", str(e), "set it to bytes or a size such as 64m"
            ) from None
    return min(cap, CONNECT_SOURCE_BYTES) if is_connect(spark) else cap


def _measured(df, schema) -> tuple[int, int]:
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


def _bytewise(col, field):
    """``col`` (the target's ``field``) compared by its bytes: Spark 4 compares a string with a collation
    (``__COLLATIONS``) by that collation, and refuses to compare it with a plain one; the engine compares
    strings as bytes everywhere (the file-by-file MERGE, DELETE, UPDATE), so the join does too. The
    values are unchanged."""
    from pyspark.sql import functions as F

    from ..schema.collations import non_binary_collation

    # (pyspark before 4 has no collations: its strings compare by bytes already)
    return F.collate(col, "UTF8_BINARY") if non_binary_collation(field) and hasattr(F, "collate") else col
