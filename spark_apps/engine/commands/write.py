"""WRITE: append a DataFrame to a Delta table, or overwrite the table (or part of it) with it.

Algorithm (delta-spark's WriteIntoDelta, append mode):

1. Load the latest snapshot; the writer feature gate must accept the table.
2. Open an :class:`~airflow_delta_provider_apps.engine.txn.OptimisticTransaction` (operation ``WRITE``,
   operationParameters ``{"mode": "Append", "partitionBy": "[...]"}``). With ``(app_id, app_version)``
   already committed (SetTransaction), stop here: nothing is written, the result says ``skipped``.
3. Schema enforcement BEFORE any file is written (:func:`prepare_dataframe`):
   :func:`~airflow_delta_provider_apps.engine.schema.check_write_compatible` (names case-insensitive, safe upcasts
   only, no extra columns, missing columns only when nullable) raises :class:`SchemaMismatchError`;
   then the DataFrame is conformed to the table schema (table column order, casts, nulls for the
   missing nullable columns). NOT NULL columns are checked on the data while writing.
4. Write data files through the command's data plane (:mod:`..plane`; Spark's: :mod:`..spark.write`): no commit
   yet, a failure leaves only orphan files.
5. Commit the AddFile actions (blind append: the transaction read nothing, ``isBlindAppend`` true,
   so only protocol/metadata changes or a concurrent commit of the same app id conflict).
   operationMetrics: ``numFiles``, ``numOutputRows``, ``numOutputBytes`` (strings in the commit as
   delta-spark writes them, numbers in the returned dict).

``merge_schema`` adds the data's new columns to the schema in the same commit. :func:`overwrite` adds
the RemoveFile actions planned from the snapshot (all files, ``replace_where``'s matching files or
rows, or the partitions written with dynamic partition overwrite) and registers what it replaced as
read on the transaction. :func:`append_arrow` appends Arrow data in-process, without Spark.
"""

from __future__ import annotations

import json

from ..actions import AddCDCFile
from ..commit_identity import TxnIdentity, takes_identity
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..foreign import translated
from ..plane import in_process_plane
from ..progress import report
from ..storage import normalize_table_uri, storage_for
from ..writer import resolve_target_file_size
from .base import Command
from .result import CommandResult, OverwriteMetrics, WriteMetrics

OPERATION_WRITE = "WRITE"
KNOWN_MODES = ("append", "overwrite")


def prepare_dataframe(plane, df, table_schema, *, merge_schema: bool = False):
    """Schema enforcement then conformance: ``df`` with exactly the table's columns, order and types.

    :param plane: the data plane (:mod:`..plane`) whose data ``df`` is
    :param df: the rows to write (a pyspark DataFrame on Spark's plane)
    :param table_schema: the table's :class:`~airflow_delta_provider_apps.engine.schema.StructType`
    :param merge_schema: new data columns extend the schema (the caller commits the new metadata)
    :raises SchemaMismatchError: the data does not fit the table schema (nothing written)
    """
    from ..schema import check_write_compatible

    target = check_write_compatible(table_schema, plane.schema_of(df), merge_schema=merge_schema)
    return plane.conform(df, target)


def _write_into(cmd: Command, plane, rows, table_schema, *, target_file_size=None, row_constraint=None):
    """``rows`` (conformed to ``table_schema``) written as data files on ``plane`` into the table
    ``cmd`` writes, partitioned and configured as its snapshot (an append's and an overwrite's
    data); returns a :class:`~airflow_delta_provider_apps.engine.writer.WriteResult` (AddFile
    actions, not committed).

    :param row_constraint: bound condition every row must satisfy (checked in the writing tasks)
    """
    metadata = cmd.snapshot.metadata
    spec = write_spec(
        cmd.table_root,
        table_schema,
        list(metadata.partition_columns or []),
        metadata.configuration,
        target_file_size=target_file_size,
        row_constraint=row_constraint,
    )
    return plane.write(rows, spec)


def write_spec(
    table_root: str,
    table_schema,
    partition_columns,
    configuration,
    *,
    target_file_size: int | None = None,
    row_constraint=None,
):
    """The :class:`~airflow_delta_provider_apps.engine.writer.WriteSpec` a data plane writes a
    table's data files with (``plane.write(rows, spec)``; also what a caller whose tasks write before
    the command runs plans with: the data source)."""
    from ..writer import WriteSpec

    return WriteSpec(
        table_uri=table_root,
        schema_json=table_schema.to_json_string(),
        partition_columns=tuple(partition_columns or ()),
        configuration=dict(configuration or {}),
        target_file_size=resolve_target_file_size(configuration, target_file_size),
        row_constraint=row_constraint,
    )


def _evolve(cmd, snapshot, data_schema, merge_schema: bool):
    """The schema the data is written in: the table's, or with ``merge_schema`` the merged one, whose
    new metadata then goes into the same commit. Raises SchemaMismatchError before anything is written."""
    merged, md = evolved_schema(snapshot, data_schema, merge_schema)
    if md is not None:
        cmd.update_metadata(md)
    return merged


def evolved_schema(snapshot, data_schema, merge_schema: bool):
    """``(schema, new metadata or None)``: the schema data of ``data_schema`` is written in on
    ``snapshot`` (see :func:`_evolve`); raises SchemaMismatchError. Nothing is committed."""
    import dataclasses

    from ..column_mapping import assign
    from ..schema import check_write_compatible
    from ..schema.widening import widenable

    md = snapshot.metadata
    widen = widenable(snapshot.schema, snapshot.properties.enable_type_widening, md.partition_columns, merge_schema)
    merged = check_write_compatible(snapshot.schema, data_schema, merge_schema=merge_schema, widen=widen)
    if merged is not snapshot.schema and merged != snapshot.schema:
        merged, conf = assign(merged, dict(snapshot.metadata.configuration or {}))  # new columns' ids
        return merged, dataclasses.replace(snapshot.metadata, schema_string=merged.to_json_string(), configuration=conf)
    return merged, None


def write(
    snapshot,
    source,
    *,
    mode: str = "append",
    replace_where: str | None = None,
    partition_overwrite_mode: str = "static",
    overwrite_schema: bool = False,
    merge_schema: bool = False,
    rerun: str = "apply",
    target_file_size: int | None = None,
    watermark: tuple[str, int] | None = None,
    plane=None,
    identity: TxnIdentity | None = None,
) -> CommandResult:
    """WRITE ``source`` (the operations registry's entry): :func:`append` (``rerun``: its
    ``on_rerun``) or, with ``mode="overwrite"``, :func:`overwrite` (``replace_where``,
    ``partition_overwrite_mode``, ``overwrite_schema``); ``source`` is a DataFrame on Spark's plane,
    Arrow data on the in-process one; ``watermark``: the change feed range it consumes (see
    :class:`~.base.Command`)."""
    m = (mode or "append").strip().lower()
    if m not in KNOWN_MODES:
        raise InvalidArgumentError(
            f"Unknown write mode '{mode}'", f"known modes: {', '.join(KNOWN_MODES)}", "use mode 'append' or 'overwrite'"
        )
    if m == "overwrite":
        return overwrite(
            snapshot,
            source,
            plane=plane,
            replace_where=replace_where,
            overwrite_schema=overwrite_schema,
            partition_overwrite_mode=partition_overwrite_mode,
            merge_schema=merge_schema,
            target_file_size=target_file_size,
            watermark=watermark,
            identity=identity,
        )
    return append(
        snapshot,
        source,
        plane=plane,
        merge_schema=merge_schema,
        on_rerun=rerun or "apply",
        target_file_size=target_file_size,
        watermark=watermark,
        identity=identity,
    )


def open_append(table, identity: TxnIdentity | None, watermark=None) -> Command:
    """The append's command on the skeleton, on the given snapshot or the latest of a table URI."""
    from ..log.snapshot import load_snapshot

    if isinstance(table, str):
        table_root = normalize_table_uri(table)
        snapshot = load_snapshot(storage_for(table_root), table_root)
    else:
        snapshot = table
    params = {"mode": "Append", "partitionBy": list(snapshot.metadata.partition_columns or [])}
    return Command(snapshot, OPERATION_WRITE, params, identity=identity, watermark=watermark)


RERUN_MODES = ("apply", "replace")


def replaced_output(cmd: Command, app_id: str) -> tuple[list, int | None]:
    """``on_rerun="replace"``: the removes of what ``app_id``'s earlier commit appended (its newest
    txn version below ours), so that a re-run's append takes the place of the earlier one in the same
    commit; ``([], None)`` when the application never committed. Those files are registered as read:
    a concurrent commit removing one of them fails this one. Refused, before anything is written,
    when the earlier commit is no longer in the log or its files are no longer live as written."""
    import pyarrow.compute as pc

    from ..log.app_commits import find_app_commit, first_removal
    from .dml import removes_for

    snapshot = cmd.snapshot
    prior = cmd.app_version(app_id)
    if prior is None:
        return [], None
    storage = snapshot.storage
    earlier = find_app_commit(
        storage,
        snapshot.table_root,
        app_id,
        newest_version=snapshot.version,
        app_version=prior,
        partition_keys=list(snapshot.metadata.partition_columns or []),
    )
    ways_out = (
        "pass on_rerun='apply' to append again next to it, or on_rerun='skip' to keep it; or restore the "
        "table to the version before it and run again"
    )
    if earlier is None:
        raise InvalidArgumentError(
            f"Cannot replace the earlier output of '{app_id}'",
            f"its commit (txn version {prior}) is no longer in the log (log cleanup), so its files are not known",
            ways_out,
        )
    paths = earlier.adds.column("path")
    live = snapshot.files.filter(pc.is_in(snapshot.files.column("path"), value_set=paths))
    if live.num_rows != earlier.adds.num_rows:
        later = first_removal(
            storage, snapshot.table_root, paths, after=earlier.version, newest_version=snapshot.version
        )
        by = f"version {later} removed or rewrote some of them" if later is not None else "some are gone"
        raise InvalidArgumentError(
            f"Cannot replace the earlier output of '{app_id}': version {earlier.version} appended "
            f"{earlier.adds.num_rows} file(s) that are no longer live as written",
            f"{by} (later DML or OPTIMIZE changed that data), so removing them would lose or keep the wrong rows",
            ways_out,
        )
    cmd.read_files(live)
    return removes_for(live), earlier.version


def append(
    table,
    df,
    *,
    identity: TxnIdentity | None = None,
    target_file_size: int | None = None,
    merge_schema: bool = False,
    on_rerun: str = "apply",
    watermark: tuple[str, int] | None = None,
    plane=None,
) -> CommandResult:
    """Append of ``df`` (see module docstring) on the data plane whose data it is (:mod:`..plane`;
    None: this process, Arrow data). Returns the commit's result and metrics.

    :param table: a table URI (its latest snapshot is read), or the snapshot to append on: its
        version is the transaction's read version

    :param merge_schema: add the data's new columns to the table schema (as nullable columns, also
        inside structs) in the same commit
    :param identity: the run's transaction identity
    :param on_rerun: with an ``app_id``, when the application committed an older version before:
        ``"apply"`` appends next to that output, ``"replace"`` removes the files that commit appended
        in the same commit (:func:`replaced_output`): a re-run of a task holds one copy of its rows
    """
    cmd = open_append(table, identity, watermark)
    snapshot = cmd.snapshot
    if cmd.duplicate:
        return cmd.skipped(WriteMetrics())
    removes, replaced = [], None
    if on_rerun not in RERUN_MODES:
        raise InvalidArgumentError(
            f"Unknown on_rerun '{on_rerun}'", f"known: {', '.join(RERUN_MODES)}", "use 'apply' or 'replace'"
        )
    if on_rerun == "replace" and cmd.identity.app_id is not None:
        removes, replaced = replaced_output(cmd, cmd.identity.app_id)
        if replaced is not None:
            cmd.set_parameters(replacesVersion=replaced)
    plane = plane or in_process_plane()
    df = plane.held(df)  # read more than once below (a reader or batches: held as one table)
    table_schema = _evolve(cmd, snapshot, plane.schema_of(df), merge_schema)
    prepared = prepare_dataframe(plane, df, table_schema, merge_schema=merge_schema)
    result = _write_into(cmd, plane, prepared, table_schema, target_file_size=target_file_size)
    metrics = WriteMetrics(result.num_files, result.num_output_rows, result.num_output_bytes)
    report("WRITE", "written", files=result.num_files, rows=result.num_output_rows)
    if removes:
        metrics = OverwriteMetrics(
            result.num_files,
            result.num_output_rows,
            result.num_output_bytes,
            num_removed_files=len(removes),
            num_removed_bytes=sum(r.size or 0 for r in removes),
        )
    fields = {"replaced_version": replaced} if replaced is not None else {}
    return cmd.commit([*removes, *result.adds], metrics, fields=fields)


@translated
@takes_identity
def append_arrow(
    table,
    data,
    *,
    identity: TxnIdentity | None = None,
    target_file_size: int | None = None,
) -> CommandResult:
    """Blind append of Arrow data (a ``pa.Table``, a record batch, a reader or record batches) in
    this process, without Spark: the core writer and one commit. ``table``: a table URI or a
    snapshot, as for :func:`append`. The data is checked against the table before any file is
    written (:func:`..conform.conform_arrow`): the table's columns (identity and generated ones may be left
    out: the writer assigns or computes them), each with values its type holds."""
    from ..conform import conform_arrow
    from ..writer import table_write_spec, write_batches

    cmd = open_append(table, identity)
    if cmd.duplicate:
        return cmd.skipped(WriteMetrics())
    snapshot = cmd.snapshot
    batches = conform_arrow(snapshot.schema, data)
    from ..identity import identities, refuse_given

    given = [
        i.column
        for i in identities(snapshot.schema)
        if any(b.column(i.column).null_count < b.num_rows for b in batches)
    ]
    refuse_given(snapshot.schema, given)  # ALWAYS: only NULLs (assigned by the writer)
    written = list(write_batches(table_write_spec(snapshot, target_file_size=target_file_size), batches))
    metrics = WriteMetrics(len(written), sum(w.num_rows for w in written), sum(w.add.size for w in written))
    return cmd.commit([w.add for w in written], metrics)


def overwrite(
    snapshot,
    df,
    *,
    plane=None,
    replace_where: str | None = None,
    overwrite_schema: bool = False,
    partition_overwrite_mode: str = "static",
    merge_schema: bool = False,
    identity: TxnIdentity | None = None,
    target_file_size: int | None = None,
    watermark: tuple[str, int] | None = None,
):
    """WRITE with mode overwrite: replace the table's rows (or part of them) with ``df``'s, in one commit.

    * full (default): every live file is removed;
    * ``replace_where``: every written row must satisfy the condition (checked in the writing tasks:
      one row that does not fails the write before any commit); the rows matching it are replaced: a
      condition on partition columns removes whole files from metadata, any other condition rewrites
      the files holding matching rows without them (DELETE's rewrite);
    * ``partition_overwrite_mode="dynamic"``: the partitions the data writes to are replaced, others kept;
    * ``overwrite_schema``: the data's schema becomes the table's (partition columns must remain);
      ``merge_schema``: new data columns are added (nullable).

    Registers what it replaced as read (the whole table, the condition, or the partitions), so a
    concurrent append into them conflicts per the isolation level. Returns a
    :class:`~.result.CommandResult` with :class:`~.result.OverwriteMetrics`.
    """
    import dataclasses

    import pyarrow as pa
    import pyarrow.compute as pc

    from ..expr import parse_predicate, to_sql
    from ..expr.skipping import is_partition_only, skip_files
    from ..partitions import partition_key, partition_keys
    from .dml import apply_outcomes, removes_for, rewrite_candidates

    mode = (partition_overwrite_mode or "static").lower()
    if mode not in ("static", "dynamic"):
        raise InvalidArgumentError(
            f"Unknown partition_overwrite_mode '{partition_overwrite_mode}'", None, "use 'static' or 'dynamic'"
        )
    if replace_where and (overwrite_schema or mode == "dynamic"):
        raise InvalidArgumentError(
            "replace_where cannot be combined with overwrite_schema or dynamic partition overwrite",
            "replace_where replaces the rows matching a condition in the existing schema",
            "drop one of the options",
        )
    partition_columns = list(snapshot.metadata.partition_columns or [])
    params = {"mode": "Overwrite", "partitionBy": partition_columns}
    cmd = Command(
        snapshot,
        OPERATION_WRITE,
        params,
        removes_rows="overwrite",
        append_only_fix="append instead, or set delta.appendOnly=false first",
        identity=identity,
        watermark=watermark,
    )
    plane = plane or in_process_plane()
    df = plane.held(df)  # read more than once below
    data_schema = plane.schema_of(df)
    if overwrite_schema:
        missing = [c for c in partition_columns if data_schema.find(c) is None]
        if missing:
            raise SchemaMismatchError(
                "overwrite_schema would drop partition column(s) " + ", ".join(missing),
                f"the data has columns {', '.join(data_schema.names)}",
                "keep the partition columns in the data",
            )
        from ..column_mapping import assign

        new_schema, mapped_conf = assign(data_schema.validate(), dict(snapshot.metadata.configuration or {}))
    predicate = parse_predicate(replace_where, snapshot.schema) if replace_where is not None else None
    if predicate is not None:
        cmd.set_parameters(predicate=json.dumps([to_sql(predicate)]))
    metrics = OverwriteMetrics()
    if cmd.duplicate:
        return cmd.skipped(metrics)
    if overwrite_schema:
        if new_schema != snapshot.schema:
            md = dataclasses.replace(
                snapshot.metadata, schema_string=new_schema.to_json_string(), configuration=mapped_conf
            )
            cmd.update_metadata(md)
        table_schema = new_schema
        prepared = plane.conform(df, table_schema)
    else:
        table_schema = _evolve(cmd, snapshot, data_schema, merge_schema)
        prepared = prepare_dataframe(plane, df, table_schema, merge_schema=merge_schema)
    written = _write_into(
        cmd, plane, prepared, table_schema, target_file_size=target_file_size, row_constraint=predicate
    )
    files = snapshot.files
    extra_adds: list = []
    changes: list = []  # the change feed's files (a data condition's rewrite on a table that records it)
    if mode == "dynamic" and partition_columns:
        # replace the partitions the data wrote to: match live files by their partition values (keyed
        # as the log spells them: physical names under column mapping)
        from ..log.file_actions import partition_keys_of

        spelled = partition_keys_of(snapshot.metadata)
        keys = {tuple(sorted((a.partition_values or {}).items())) for a in written.adds}
        written_keys = pa.array([partition_key(dict(k), spelled) for k in keys], pa.string())
        replaced = files.filter(pc.is_in(partition_keys(files, spelled), value_set=written_keys))
        cmd.read_files(replaced)
        removes = removes_for(replaced)
        for key in keys:
            cmd.read_rows(dict(key))
    elif predicate is None:
        cmd.read_rows(None)
        replaced = files
        removes = removes_for(files)
    else:
        cmd.read_rows(predicate)
        candidates = skip_files(files, snapshot.schema, partition_columns, predicate).files
        cmd.read_files(candidates)
        if is_partition_only(predicate, partition_columns):
            replaced = candidates
            removes = removes_for(candidates)
            metrics.num_deleted_rows = None
        else:
            # DELETE's rewrite: the files holding matching rows are written back without them, in
            # the schema this commit leaves (merge_schema's new columns NULL in the kept rows and in
            # the change rows, which then share one schema with the inserts, as delta-spark writes)
            evolved = dataclasses.replace(snapshot, metadata=cmd.metadata)
            outcomes = rewrite_candidates(evolved, plane, predicate, candidates)
            removes, extra_adds, deleted, copied = apply_outcomes(cmd.watch, candidates, outcomes, metrics)
            metrics.num_deleted_rows, metrics.num_copied_rows = deleted, copied
            touched = pa.array([r.path for r in removes], pa.string())
            replaced = candidates.filter(pc.is_in(candidates.column("path"), value_set=touched))
            changes = [a for a in extra_adds if isinstance(a, AddCDCFile)]
            extra_adds = [a for a in extra_adds if not isinstance(a, AddCDCFile)]
            if changes:  # the deleted rows went to change files: the commit's inserts go there too
                try:
                    changes += plane.inserted_changes(evolved, written.adds)
                except BaseException:  # nothing of this overwrite is committed: its files go
                    from ..rewrite import FileOutcome, discard
                    from ..writer import WrittenFile

                    mine = [*written.adds, *extra_adds, *changes]
                    discard(
                        snapshot.storage, cmd.table_root, [FileOutcome("", written=[WrittenFile(a, 0) for a in mine])]
                    )
                    raise
    # what this commit adds: the data written, plus the rows copied out of partly replaced files
    metrics.num_files = len(written.adds) + len(extra_adds)
    metrics.num_output_rows = written.num_output_rows + (metrics.num_copied_rows or 0)
    metrics.num_output_bytes = written.num_output_bytes + sum(a.size for a in extra_adds)
    metrics.num_removed_files = replaced.num_rows
    metrics.num_removed_bytes = int(pc.sum(replaced.column("size")).as_py() or 0) if replaced.num_rows else 0
    adds = list(written.adds) + list(extra_adds)
    return cmd.commit([*removes, *adds, *changes], metrics)


__all__ = [
    "overwrite",
    "write",
    "append",
    "append_arrow",
    "prepare_dataframe",
    "write_spec",
    "evolved_schema",
    "resolve_target_file_size",
]
