"""MERGE by join in Spark (large sources, or no key equality to look up): :func:`execute_merge`, in
phases as delta-spark's MergeIntoCommand (docs/design.md, "MERGE's two strategies"): a narrow join of
the columns the conditions read, with each target row's file (``__file``) and physical index
(``__row``), for the tallies, the duplicate-match check and the touched files; then the touched files
alone joined whole and written (copy on write), or on a deletion-vector table the new and changed rows
written and the changed ones marked in their files' vectors (:func:`mark_file`). Each row is tagged
with the first clause that fires (``__action``: the clause's index, -1 copy, -2 drop). Conditions and
values are the bound trees as Columns (:mod:`.columns`) over the joined DataFrame's own column names
(``__t<i>`` / ``__s<i>``), so Spark evaluates exactly what was checked, with no SQL text parsed again.
The output is written by Spark's own writer where it writes the table's files exactly
(:func:`.write.write_native`), else by the core writer.

The phases are functions over one :class:`JoinInputs` (fixed before the first); each takes the rows
and tallies of the one before and returns its own. The source's side (materialised, its key values)
is :mod:`.merge`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..expr.sql import quote
from ..merge import MergeOutcome, duplicate_match_error
from ..progress import report
from ..rewrite.common import as_written
from .columns import to_column

__all__ = ["JoinInputs", "execute_merge", "join_inputs", "mark_file"]


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
    job = join_inputs(spark, snapshot, plan, src, source_rows, unique_matches=unique_matches)
    if plan.insert_only:
        ons = column_refs(job, [plan.on], plan.target_alias)
        target = target_rows(job, candidates, columns=ons, shuffle=False, locate=False, rid=False)
        joined = job.rows.join(target, on_column(job), "left_anti")
        joined = joined.withColumn("__action", first_clause(job, "not_matched", -2))
        per_action = tally_rows(job, joined, multi=False)
        scan_ms = int((time.monotonic() - started) * 1000)
        inserted = sum(n for n, _ in per_action.values())
        return write_outputs(
            job,
            [(joined.filter(F.col("__action").isin(job.inserts)), job.inserts)],
            [],
            per_action,
            scan_ms,
            rows=inserted,
        )
    if writes_source_rows(job) is not None:
        return _merge_source_rows(job, candidates, started)
    if upsert_clause(job) is not None:
        return _merge_upsert(job, candidates, started)
    return _merge_two_phase(job, candidates, started)


@dataclass(frozen=True)
class JoinInputs:
    """What every phase of a join reads, fixed before the first (:func:`join_inputs`): the session,
    snapshot and plan, the source rows (``__s<i>`` and ``__sp``) and their count (None: unknown), the
    clause indices by role, and the table's settings that shape the rows written."""

    spark: Any
    snapshot: Any
    plan: Any
    #: the source (as :func:`.merge.source_key_values` returned it) with ``__sp`` (for an anti join,
    #: which never builds its left side)
    rows: Any
    source_rows: int | None
    #: Spark's broadcast threshold (bytes)
    threshold: int
    #: no target row can match two source rows (the source's keys were checked unique)
    unique_matches: bool
    #: rows a clause changes are marked in their files' deletion vectors, the files stay
    deletion_vectors: bool
    change_data: bool
    #: row tracking: the rows written from a target row keep its stable id (and, copied, its commit version)
    row_tracking: Any
    #: how the joined DataFrame names a bound column (:func:`.merge.speller`)
    spell: Callable
    clauses: list
    codes: dict  # clause indices per kind
    changing: list
    updates: list
    inserts: list


def join_inputs(spark, snapshot, plan, src, source_rows: int | None, *, unique_matches: bool) -> JoinInputs:
    """The inputs of a join of ``src`` (``source_rows`` rows, None: unknown) with ``snapshot``'s files."""
    from pyspark.sql import functions as F

    from ..features import writes_change_data, writes_deletion_vectors
    from ..row_tracking import for_rewrite
    from .merge import speller
    from .session import conf_value, memory_bytes

    clauses = plan.clauses
    changing = [i for i, c in enumerate(clauses) if c.clause.action in ("update", "delete")]
    return JoinInputs(
        spark=spark,
        snapshot=snapshot,
        plan=plan,
        rows=src.withColumn("__sp", F.lit(True)),
        source_rows=source_rows,
        threshold=memory_bytes(conf_value(spark, "spark.sql.autoBroadcastJoinThreshold", "10m"), plain=""),
        unique_matches=unique_matches,
        deletion_vectors=writes_deletion_vectors(snapshot.protocol, snapshot.metadata),
        change_data=writes_change_data(snapshot.metadata),
        row_tracking=for_rewrite(snapshot),
        spell=speller(plan),
        clauses=clauses,
        codes=plan.codes(),
        changing=changing,
        updates=[i for i in changing if clauses[i].clause.action == "update"],
        inserts=[i for i, c in enumerate(clauses) if c.clause.action == "insert"],
    )


def source_side(ji: JoinInputs, columns: set[int] | None = None, *, narrow: bool = False):
    """``(source rows, broadcast)``: the source's ``columns`` (indices; default all) and ``__sp``,
    broadcast to the join when its rows (estimated from the schema) fit Spark's broadcast
    threshold, else the join shuffles both sides (Spark sizes the target's rows by the file list
    they are read from, a few rows, and would broadcast the whole table: its own choice is not
    safe here). ``narrow``: a few key columns joined INNER, broadcast up to
    :func:`.merge.narrow_limit` (the driver builds it)."""
    from ..merge import row_width
    from ..schema import StructType

    fields = ji.plan.source_schema.fields
    keep = range(len(fields)) if columns is None else sorted(columns)
    df = ji.rows.select(*[f"__s{i}" for i in keep], "__sp")
    width = row_width(StructType(tuple(fields[i] for i in keep)))
    limit = ji.threshold
    if narrow:
        from .merge import narrow_limit

        limit = max(limit, narrow_limit(ji.spark))
    broadcast = ji.source_rows is not None and ji.source_rows * width <= limit
    return (df.hint("broadcast") if broadcast else df), broadcast


def column_refs(ji: JoinInputs, trees, relation: str) -> set[int]:
    """Indices of the top-level columns (of the target's or the source's schema) that ``trees``
    read from ``relation``."""
    plan = ji.plan
    schema = plan.target_schema if relation == plan.target_alias else plan.source_schema
    index = {f.name: i for i, f in enumerate(schema.fields)}
    return {index[c.path[0]] for t in trees if t is not None for c in t.column_nodes() if c.relation == relation}


def needed_columns(ji: JoinInputs, *, writes: bool) -> tuple[set[int], set[int]]:
    """``(target, source)`` column indices a join must carry: what the ON condition and the
    clauses' conditions read; with ``writes`` (rows are written from the join) also the whole
    source, what the assignments read, the target columns an update leaves as they are, and all
    the target's when the change feed records the rows before the change."""
    plan = ji.plan
    trees = [plan.on, *(c.condition for c in plan.clauses)]
    if writes:
        trees += [v for c in plan.clauses for v in c.values.values()]
    target, source = column_refs(ji, trees, plan.target_alias), column_refs(ji, trees, plan.source_alias)
    if writes:
        names = [f.name for f in plan.target_schema.fields]
        source = set(range(len(plan.source_schema.fields)))
        for c in plan.clauses:
            if c.clause.action == "update":
                target |= {j for j, name in enumerate(names) if name not in c.values}
        if ji.change_data:
            target = set(range(len(names)))
    return target, source


def join_rows(ji: JoinInputs, src, target, how: str | None = None):
    """``src`` joined with ``target`` ON the merge condition, each row tagged (``__action``) with
    its first firing clause (-1: none, a copy; -2: a source row dropped). The join keeps the
    source's lone rows only with NOT MATCHED clauses, the target's only with NOT MATCHED BY
    SOURCE clauses, unless ``how`` says otherwise."""
    from pyspark.sql import functions as F

    codes = ji.codes
    if how is None:
        nmbs, inserts = bool(codes["not_matched_by_source"]), bool(codes["not_matched"])
        how = "full_outer" if nmbs and inserts else "right_outer" if nmbs else "left_outer" if inserts else "inner"
    action = _first(
        [
            (F.col("__sp").isNotNull() & F.col("__tp").isNotNull(), first_clause(ji, "matched", -1)),
            (F.col("__tp").isNotNull(), first_clause(ji, "not_matched_by_source", -1)),
        ],
        first_clause(ji, "not_matched", -2),
    )
    return src.join(target, on_column(ji), how).withColumn("__action", action)


def first_clause(ji: JoinInputs, kind: str, otherwise: int):
    """The first clause of ``kind`` whose condition holds, as its index; else ``otherwise``
    (:func:`..merge.first_firing`, as a Column)."""
    from ..merge import first_firing

    conditions = [(i, ji.clauses[i].condition) for i in ji.codes[kind]]
    return to_column(first_firing(conditions, otherwise), ji.spell)


def on_column(ji: JoinInputs):
    return to_column(ji.plan.on, ji.spell)


def target_rows(
    ji: JoinInputs,
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
    from pyspark.sql import functions as F

    from .scan import FILE_COLUMN, ROW_COLUMN, scan_files

    plan, snapshot = ji.plan, ji.snapshot
    fields = plan.target_schema.fields
    keep = range(len(fields)) if columns is None else sorted(columns)
    present = [j for j in keep if j < len(snapshot.schema.fields)]
    names = [fields[j].name for j in present]
    from ..row_tracking import for_rewrite

    tracking = for_rewrite(snapshot, files) if ids and ji.row_tracking is not None else None
    df = scan_files(
        ji.spark,
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


def multi_matched(ji: JoinInputs, pairs) -> bool:
    """Whether a target row matched more than one source row (a shuffle of the matched pairs only,
    aggregated to one row: never a row per target row on the driver); Delta's error when one such
    row would be changed twice."""
    from pyspark.sql import functions as F

    changing_matched = [i for i in ji.codes["matched"] if i in ji.changing]
    per_row = (
        pairs.groupBy("__rid")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("__action").isin(changing_matched).cast("int")).alias("ch"))
        .filter("n > 1")
    )
    found = per_row.agg(F.count(F.lit(1)).alias("rows"), F.max("ch").alias("ch")).collect()[0]
    first = ji.clauses[ji.codes["matched"][0]] if len(ji.codes["matched"]) == 1 else None
    lone_delete = first is not None and first.clause.action == "delete" and first.condition is None
    if changing_matched and not lone_delete and (found["ch"] or 0) > 1:
        raise duplicate_match_error()
    return found["rows"] > 0


def tally_rows(ji: JoinInputs, rows, *, multi: bool) -> dict:
    """Per clause: joined rows, and the target rows they concern (distinct only where a target
    row can appear more than once)."""
    from pyspark.sql import functions as F

    rows_of = F.lit(0) if ji.plan.insert_only else F.countDistinct("__rid") if multi else F.count(F.lit(1))
    agg = rows.groupBy("__action").agg(F.count(F.lit(1)).alias("n"), rows_of.alias("rows")).collect()
    return {r["__action"]: (r["n"], r["rows"]) for r in agg}


def tally_and_touched(ji: JoinInputs, rows, *, multi: bool, touch_matched: bool = False) -> tuple[dict, list[str]]:
    """:func:`tally_rows` and the touched files: those a changing clause fired in (and, with
    ``touch_matched``, those holding a matched row). Without multiple matches both come from one
    aggregation by clause and file (a pass over the joined rows, not two)."""
    from pyspark.sql import functions as F

    touch = F.col("__action").isin(ji.changing)
    if touch_matched:
        touch = touch | (F.col("__sp").isNotNull() & F.col("__tp").isNotNull())
    if multi:
        found = rows.filter(touch).select("__file").distinct().collect()
        return tally_rows(ji, rows, multi=multi), sorted(r["__file"] for r in found if r["__file"] is not None)
    per_action: dict = {}
    touched = set()
    grouped = rows.groupBy("__action", "__file", touch.alias("__touch")).agg(F.count(F.lit(1)).alias("n"))
    for r in grouped.collect():
        n = per_action.get(r["__action"], (0, 0))[0] + r["n"]
        per_action[r["__action"]] = (n, n)
        if r["__touch"] and r["__file"] is not None:
            touched.add(r["__file"])
    return per_action, sorted(touched)


def observed_inserts(ji: JoinInputs, rows):
    """``(rows, observation)``: ``rows`` counting, as an action reads them, the lone source rows an
    insert clause takes (``observation.get["n"]`` after the write): the exact inserted count when
    phase 1 saw only the matched pairs, where a source row matching two target rows pairs twice."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    lone = F.col("__tp").isNull() & F.col("__action").isin(ji.inserts)
    observation = Observation("merge_inserts")
    return rows.observe(observation, F.count(F.when(lone, 1)).alias("n")), observation


def rewritten_rows(ji: JoinInputs, rows, multi: bool):
    """The target rows written back: updated rows and, copying on write (``rows`` are the
    touched files' rows), the unchanged ones (one per target row)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if multi:  # one output row per target row: the clause that fires (at most one), else a copy
        best = F.max("__action").over(Window.partitionBy("__rid"))
        rows = rows.withColumn("__best", best).filter("__action = __best").drop("__best")
        rows = rows.dropDuplicates(["__rid"])
    return rows.filter(kept_rows(ji))


def upsert_clause(ji: JoinInputs) -> int | None:
    """The insert clause's index when this MERGE is an upsert whose written rows are the source's
    own: no target row can match twice (the source's keys were checked unique), the row count of
    the source known, no change feed and no row tracking (the rows would need the target's), and
    the clauses exactly one unconditional WHEN MATCHED update and one unconditional WHEN NOT
    MATCHED insert of the same values (``plan.upsert_shaped``; an insert sets every column, so the
    update does too). Then a matched target row's new values are its source row's, whichever
    clause fires."""
    if not ji.unique_matches or ji.change_data or ji.row_tracking is not None:
        return None
    if ji.source_rows is None or not ji.plan.upsert_shaped:
        return None
    return 1


def upsert_tallies(ji: JoinInputs, updated: int, touched: list[str]) -> dict:
    """The per-clause tallies of an upsert (:func:`upsert_clause`) that updated ``updated`` target rows
    in the ``touched`` files (the rest of the source is inserted), reported to the task log."""
    inserted = (ji.source_rows or 0) - updated
    report("MERGE", "upsert", deletion_vectors=int(ji.deletion_vectors))
    report("MERGE", "joined", touched=len(touched), multiple_matches=0)
    return {0: (updated, updated), upsert_clause(ji): (inserted, inserted)}


def writes_source_rows(ji: JoinInputs) -> int | None:
    """:func:`upsert_clause` on a table that writes deletion vectors: the source rows are written as they
    are and only the marks need the target (:func:`_merge_source_rows`)."""
    return upsert_clause(ji) if ji.deletion_vectors else None


def pairs_tally(ji: JoinInputs, pairs, keys: list[str], candidates) -> tuple[dict, list[str]] | None:
    """:func:`tally_and_touched` of an inner join's matched pairs, ``None`` when a source row
    matched two target rows (the target holds its key twice): one job, grouping each source row's
    pairs (by ``keys``, the source's ON columns, which hold its unique key) to their count and a
    file, then by clause and file. A file travels as the 64-bit hash of its path (the first
    grouping moves a row per matched source row), named again from the ``candidates``' paths."""
    from pyspark.sql import functions as F

    names = hashed_paths(ji, candidates)
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


def hashed_paths(ji: JoinInputs, candidates) -> dict | None:
    """``{xxhash64(path): path}`` of the candidates' paths as Spark hashes them (one small job),
    or None when two collide (then the paths themselves are grouped)."""
    from pyspark.sql import functions as F

    paths = candidates.column("path").to_pylist()
    df = ji.spark.createDataFrame([(p,) for p in paths], "__file string")
    names = {r["h"]: r["__file"] for r in df.select("__file", F.xxhash64("__file").alias("h")).collect()}
    return names if len(names) == len(set(paths)) else None


def kept_rows(ji: JoinInputs):
    """Which target rows (of touched files) are written: updated ones and, copying on write, the
    unchanged ones too."""
    from pyspark.sql import functions as F

    keep = F.col("__action").isin(ji.updates)
    if not ji.deletion_vectors:  # the touched files are rewritten: their unchanged rows copied
        keep = keep | (F.col("__action") == -1)
    return keep


def mark_rows(
    ji: JoinInputs, changed, touched: list[str] | None, candidates, *, counts: dict | None = None, once_by=None
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
    from pyspark.sql import functions as F

    from ..storage import normalize_table_uri

    files = candidates
    if touched is not None:
        files = candidates.filter(pc.is_in(candidates.column("path"), value_set=pa.array(touched, pa.string())))
    has_dv = "deletion_vector" in files.column_names
    olds = files.column("deletion_vector").to_pylist() if has_dv else [None] * files.num_rows
    old = {p: json.dumps(d) for p, d in zip(files.column("path").to_pylist(), olds) if d}
    root = normalize_table_uri(ji.snapshot.table_root)
    names = hashed_paths(ji, candidates) if once_by else None
    rows = changed.select("__file", "__row")
    if once_by:
        file = F.xxhash64("__file") if names is not None else F.col("__file")
        rows = changed.groupBy(*once_by).agg(
            F.count(F.lit(1)).alias("__n"), F.first(file).alias("__file"), F.first("__row").alias("__row")
        )

    def fn(table):  # one argument, as applyInArrow requires: the rest is in its closure
        from airflow_delta_provider_apps.engine.spark.merge_join import mark_file
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


def project_rows(ji: JoinInputs, rows, fired: list):
    """``rows`` in the table's columns: each takes the values of the clause (of ``fired``) that
    fired on it, else the target row's own (NULL for source rows alone)."""
    from pyspark.sql import functions as F

    plan, clauses = ji.plan, ji.clauses
    has_target = "__tp" in rows.columns
    cols = []
    for j, f in enumerate(plan.target_schema.fields):
        branches = [
            (F.col("__action") == i, to_column(clauses[i].values[f.name], ji.spell))
            for i in fired
            if f.name in clauses[i].values
        ]
        # (a target column the join does not carry is one every firing clause assigns)
        otherwise = F.col(quote(f"__t{j}")) if has_target and f"__t{j}" in rows.columns else F.lit(None)
        cols.append(_first(branches, otherwise).alias(f.name))
    rt = ji.row_tracking
    if rt is not None:  # a row from a target row keeps its id; only a copy keeps its commit version
        carried = "__rowid" in rows.columns
        none = F.lit(None).cast("long")
        cols.append((F.col("__rowid") if carried else none).alias(rt.row_id_column))
        copied = F.when(F.col("__action") == -1, F.col("__rowcv")) if carried else none
        cols.append(copied.alias(rt.commit_version_column))
    return rows.select(*cols)


def change_rows(ji: JoinInputs, changed, inserted, multi: bool):
    """The change feed's rows (table columns, then ``_change_type``) of the target rows a clause
    changed (``changed``: joined rows whose clause updates or deletes) and of the ``inserted``
    rows (or None), conformed to the table's types."""
    from pyspark.sql import functions as F

    from ..cdf import CHANGE_TYPE, DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
    from .write import conform_dataframe

    fields = ji.plan.target_schema.fields
    schema_json = ji.plan.target_schema.to_json()
    if multi:  # a target row a lone DELETE clause matched more than once changed once
        changed = changed.dropDuplicates(["__rid"])
    deletes = [i for i in ji.changing if i not in ji.updates]
    updated = changed.filter(F.col("__action").isin(ji.updates))
    before = [F.col(quote(f"__t{j}")).alias(f.name) for j, f in enumerate(fields)]
    parts = [
        (updated.select(*before), UPDATE_PREIMAGE),
        (project_rows(ji, updated, ji.updates), UPDATE_POSTIMAGE),
        (changed.filter(F.col("__action").isin(deletes)).select(*before), DELETE),
    ]
    if inserted is not None:
        from ..identity import identities

        if identities(ji.plan.target_schema):
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(
                "Cannot MERGE as a Spark join into a table with identity columns that records the change data feed",
                "the inserted rows' identity values are assigned in the writing tasks, and the change "
                "rows would be computed apart from them",
                "merge a smaller source (under the memory cap: the file-by-file MERGE records them), or "
                "insert the new rows with a write first",
            )
        parts.append((project_rows(ji, inserted, ji.inserts), INSERT))
    out = None
    for rows, kind in parts:
        rows = conform_dataframe(rows, schema_json).withColumn(CHANGE_TYPE, F.lit(kind))
        out = rows if out is None else out.unionByName(rows)
    return out


def write_outputs(
    ji: JoinInputs,
    outputs: list,
    touched: list[str],
    per_action: dict,
    scan_ms: int,
    changes=None,
    marked=None,
    *,
    rows: int,
) -> MergeOutcome:
    """The output rows in the table's columns, written through the core writer. ``outputs``:
    ``(rows, clauses)`` pairs: each row takes the values of the clause (of ``clauses``) that
    fired on it, else the target row's own (NULL for source rows alone). ``changes``: the
    change feed's rows (:func:`change_rows`), written as change data files. ``marked``: the target rows
    to mark in their files' deletion vectors (:func:`mark_rows`), on a table that writes them."""
    from ..writer import table_write_spec
    from .write import conform_dataframe, native_write_applies, write_data_files, write_native

    started = time.monotonic()
    plan = ji.plan
    adds, written, cdc = [], 0, []
    rt = ji.row_tracking
    tracked = (rt.row_id_column, rt.commit_version_column) if rt is not None else ()
    spec = table_write_spec(ji.snapshot, schema_json=plan.target_schema.to_json_string(), row_tracking=tracked or None)
    if outputs:
        projected = [project_rows(ji, o, fired) for o, fired in outputs]
        out = projected[0]
        for o in projected[1:]:
            out = out.unionByName(o)
        out = conform_dataframe(out, plan.target_schema.to_json(), keep=tracked)
        out = out.coalesce(write_tasks(ji, rows, spec.target_file_size))
        # Spark's own writer where it writes the table's files exactly (stats from the footers)
        native = native_write_applies(ji.spark, spec) is None
        result = write_native(out, spec) if native else write_data_files(out, spec)
        adds, written = list(result.adds), result.num_output_rows
        report("MERGE", "written", files=len(adds), rows=written, native=int(native))
    vectors = {}
    try:
        if changes is not None:
            cdc = list(write_data_files(changes, spec, change_data=True).adds)
        if marked is not None and touched:
            vectors = mark_rows(ji, *marked)
    except BaseException:  # the files written above are never committed: deleted
        from ..rewrite import FileOutcome, discard
        from ..storage import storage_for

        discard(storage_for(spec.table_uri), spec.table_uri, [FileOutcome("", written=as_written(adds + cdc))])
        raise
    rewrite_ms = int((time.monotonic() - started) * 1000)
    return MergeOutcome(touched, adds, written, per_action, scan_ms, rewrite_ms, vectors, changes=cdc)


def write_tasks(ji: JoinInputs, rows: int, target_file_size: int) -> int:
    """At most this many tasks write the output (a task writes at least one file): as many as
    ``rows`` (the rows to write, estimated) need files of the target size, rounded up to a multiple
    of the cluster's parallelism. A join's output otherwise has a partition per shuffle partition and a
    small MERGE would write that many small files."""
    from ..merge import row_width
    from .scan import default_parallelism

    needed = -(-rows * row_width(ji.plan.target_schema) // max(1, target_file_size))
    cores = max(1, default_parallelism(ji.spark))
    return -(-max(1, needed) // cores) * cores  # whole rounds: 3 tasks on 2 cores leave one idle half the time


def changed_any(ji: JoinInputs, per_action: dict) -> bool:
    """Whether a clause updated or deleted a row (then the commit's changes go to change files)."""
    return any(per_action.get(i, (0, 0))[0] for i in ji.changing)


def _merge_two_phase(job: JoinInputs, candidates, started: float) -> MergeOutcome:
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
    take (:func:`needed_columns`): the updated and inserted rows are written from it, the
    changed rows marked in their files' vectors, and no file is read twice."""
    matches = _match_phase(job, candidates)
    try:
        scan_ms = int((time.monotonic() - started) * 1000)
        return _write_phase(job, candidates, matches, scan_ms)
    finally:
        if matches.persisted:
            matches.joined.unpersist()


@dataclass
class Matches:
    """Phase 1's output: the joined rows (``persisted``: kept for phase 2, unpersisted after it),
    whether a target row matched twice, the per-clause tallies (inserts estimated when ``pairs_only``:
    the join held the matched pairs alone) and the touched files."""

    joined: Any
    persisted: bool
    pairs_only: bool
    multi: bool
    per_action: dict
    touched: list[str]


def _match_phase(job: JoinInputs, candidates) -> Matches:
    """Phase 1 of :func:`_merge_two_phase`: the narrow join, the duplicate-match check, the tallies
    and the touched files."""
    from pyspark.sql import functions as F

    codes = job.codes
    dv = job.deletion_vectors
    inserts = bool(codes["not_matched"])
    t_cols, s_cols = needed_columns(job, writes=dv)
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
    src, broadcast = source_side(job, None if dv else s_cols, narrow=pairs_only)
    target = target_rows(job, candidates, columns=t_cols, shuffle=not broadcast, rid=not job.unique_matches, ids=dv)
    joined = join_rows(job, src, target, "inner" if pairs_only else None)
    # read more than once (checks, tallies, writes, marks) unless the tallies are all that is needed
    persisted = dv or not job.unique_matches
    if persisted:
        from .merge import spill_level

        joined = joined.persist(spill_level())
    try:
        matched = F.col("__sp").isNotNull() & F.col("__tp").isNotNull()
        multi = False if job.unique_matches else multi_matched(job, joined.filter(matched))
        per_action, touched = tally_and_touched(job, joined, multi=multi, touch_matched=inserts and not dv)
    except BaseException:
        if persisted:
            joined.unpersist()
        raise
    if pairs_only and inserts:  # an estimate until the write counts them: a source row may pair twice
        left = max(0, (job.source_rows or 0) - sum(n for n, _rows in per_action.values()))
        per_action[codes["not_matched"][0]] = (left, left)
    report("MERGE", "joined", touched=len(touched), multiple_matches=int(multi))
    return Matches(joined, persisted, pairs_only, multi, per_action, touched)


def _write_phase(job: JoinInputs, candidates, matches: Matches, scan_ms: int) -> MergeOutcome:
    """Phase 2 of :func:`_merge_two_phase`: the touched files joined whole and written back (copy on
    write), or phase 1's rows written and marked (deletion vectors), the inserts beside them."""
    from pyspark.sql import functions as F

    codes, dv = job.codes, job.deletion_vectors
    inserts = bool(codes["not_matched"])
    joined, multi, per_action, touched = matches.joined, matches.multi, matches.per_action, matches.touched
    inserted_count = None
    outputs, inserted, changes, marked = [], None, None, None
    if dv:
        rows, written = joined, sum(per_action.get(i, (0, 0))[1] for i in job.updates)
    elif touched:
        src, broadcast = source_side(job)
        files = _only(candidates, touched)
        target = target_rows(job, files, shuffle=not broadcast, locate=False, rid=multi, ids=True)
        rows = join_rows(job, src, target, "full_outer" if inserts else "right_outer")
        written = _rows_estimate(files)
        if matches.pairs_only and inserts:  # the lone source rows, counted by the write as it writes them
            rows, inserted_count = observed_inserts(job, rows)
    else:  # nothing to rewrite: the inserts alone (no source row matched a candidate row)
        rows, written = job.rows.withColumn("__action", first_clause(job, "not_matched", -2)), 0
    target_side = "__tp" in rows.columns
    lone = F.col("__tp").isNull() if target_side else F.lit(True)
    if inserts:
        inserted = rows.filter(lone & F.col("__action").isin(job.inserts))
        written += sum(per_action.get(i, (0, 0))[0] for i in job.inserts)
    if touched and target_side and multi:  # a target row matched twice: written once (a window)
        outputs.append((rewritten_rows(job, rows.filter(F.col("__tp").isNotNull()), multi), job.updates))
        if inserts:
            outputs.append((inserted, job.inserts))
    elif touched and target_side or inserts:  # one pass over the join: kept rows, each clause's values
        keep, fired = lone & F.col("__action").isin(job.inserts), list(job.inserts)
        if touched and target_side:
            keep, fired = keep | (F.col("__tp").isNotNull() & kept_rows(job)), [*job.updates, *job.inserts]
        outputs.append((rows.filter(keep), fired))
    changed = rows.filter(F.col("__tp").isNotNull() & F.col("__action").isin(job.changing)) if target_side else None
    # change files hold all of a commit's changes: needed when a clause changed a row, and when
    # files are rewritten at all (a file holding only matched rows that no clause changed is
    # rewritten too, and its copies must not read as inserted rows)
    rewrites = bool(touched) and not dv
    if job.change_data and (changed_any(job, per_action) or rewrites):
        changes = change_rows(job, changed, inserted, multi)
    if dv and touched:
        marked = (changed, touched, candidates)
    outcome = write_outputs(job, outputs, touched, per_action, scan_ms, changes, marked, rows=written)
    if inserted_count is not None:
        try:
            n = _observed(inserted_count, "n")
        except BaseException:  # the files written are never committed: deleted
            _discard(job, [*outcome.adds, *outcome.changes])
            raise
        per_action[codes["not_matched"][0]] = (n, n)
    return outcome


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


def _discard(job: JoinInputs, actions: list) -> None:
    """Delete files this MERGE wrote and will not commit."""
    from ..rewrite import FileOutcome, discard
    from ..storage import storage_for

    uri = job.snapshot.table_root
    discard(storage_for(uri), uri, [FileOutcome("", written=as_written(actions))])


def _merge_source_rows(job: JoinInputs, candidates, started: float) -> MergeOutcome:
    """An upsert into a deletion-vector table (:func:`writes_source_rows`): the source's
    ON columns joined with the candidates' (with file and row index) give the matched pairs, marked
    per file in one job whose output also counts them (the updated rows; the rest of the source is
    inserted); then the source itself is written, each row as the clauses give it. The target is
    read once, its ON columns only; nothing is persisted.

    Writing each source row once is right only when no source row matched two target rows (the
    target may hold a key twice, and Delta updates each such row): the marking job counts each
    source row's pairs first, and if one had two, the MERGE runs in two phases instead."""
    from pyspark.sql import functions as F

    t_cols, s_cols = needed_columns(job, writes=False)
    src, broadcast = source_side(job, s_cols, narrow=True)
    pairs = src.join(
        target_rows(job, candidates, columns=t_cols, shuffle=not broadcast, rid=False), on_column(job), "inner"
    )
    counts: dict = {}
    vectors = mark_rows(job, pairs, None, candidates, counts=counts, once_by=[f"__s{i}" for i in sorted(s_cols)])
    if vectors is None:  # a source row matched two target rows: each is updated, by the two phases
        return _merge_two_phase(job, candidates, started)
    touched = sorted(counts)
    insert = writes_source_rows(job)
    scan_ms = int((time.monotonic() - started) * 1000)
    per_action = upsert_tallies(job, sum(counts.values()), touched)
    rows = job.rows.withColumn("__action", F.lit(insert))
    outcome = write_outputs(job, [(rows, [insert])], touched, per_action, scan_ms, rows=job.source_rows or 0)
    outcome.deletion_vectors = vectors
    return outcome


def _merge_upsert(job: JoinInputs, candidates, started: float) -> MergeOutcome:
    """A copy-on-write upsert (:func:`upsert_clause`). Phase 1: the source's ON columns joined
    (inner; broadcast up to :func:`.merge.narrow_limit`) with the candidates' ON columns and file give the
    matched pairs, counted per source row in one job (:func:`pairs_tally`): the touched
    files and the updated rows. Phase 2 writes the touched files' rows that no source row matches (a
    left anti join with the source's ON columns, broadcast the same way) beside the source rows
    themselves, each an update or an insert of the same values: the whole rows of the target and the
    source are never joined. A source row that matched two target rows (the target holds its key
    twice, and each is updated) sends the MERGE to :func:`_merge_two_phase`."""
    from pyspark.sql import functions as F

    t_cols, s_cols = needed_columns(job, writes=False)
    keys, broadcast = source_side(job, s_cols, narrow=True)
    target = target_rows(job, candidates, columns=t_cols, shuffle=not broadcast, rid=False)
    tally = pairs_tally(job, join_rows(job, keys, target, "inner"), [f"__s{i}" for i in sorted(s_cols)], candidates)
    if tally is None:
        return _merge_two_phase(job, candidates, started)
    counted, touched = tally
    insert = upsert_clause(job)
    updated = sum(n for n, _rows in counted.values())
    scan_ms = int((time.monotonic() - started) * 1000)
    per_action = upsert_tallies(job, updated, touched)
    outputs = [(job.rows.withColumn("__action", F.lit(insert)), [insert])]
    written = job.source_rows or 0
    if touched:
        files = _only(candidates, touched)
        whole = target_rows(job, files, shuffle=not broadcast, locate=False, rid=False)
        copies = whole.join(keys, on_column(job), "left_anti").withColumn("__action", F.lit(-1))
        outputs.insert(0, (copies, []))
        written += max(0, _rows_estimate(files) - updated)
    return write_outputs(job, outputs, touched, per_action, scan_ms, rows=written)


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
    """Executor side of :func:`mark_rows`: one file's changed rows (``__file``, ``__row``) ->
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


def _bytewise(col, field):
    """``col`` (the target's ``field``) compared by its bytes: Spark 4 compares a string with a collation
    (``__COLLATIONS``) by that collation, and refuses to compare it with a plain one; the engine compares
    strings as bytes everywhere (the file-by-file MERGE, DELETE, UPDATE), so the join does too. The
    values are unchanged."""
    from pyspark.sql import functions as F

    from ..schema.collations import non_binary_collation

    # (pyspark before 4 has no collations: its strings compare by bytes already)
    return F.collate(col, "UTF8_BINARY") if non_binary_collation(field) and hasattr(F, "collate") else col
