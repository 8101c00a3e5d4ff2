"""DeltaTable: the public Python facade over the engine (fixed names; other code and checks use them).

::

    from airflow_delta_provider_apps.engine import DeltaTable
    t = DeltaTable.create(spark, "/data/events", schema="id BIGINT, day DATE", partition_by=["day"])
    t = DeltaTable.for_path(spark, "/data/events")    # spark may be None for log-only calls
    t.version(); t.detail(); t.history(limit=10)      # log only: no Spark
    t.checkpoint(); t.cleanup_metadata()              # log only: no Spark
    t.to_df(version=3)                                # Spark
    t.append(df, app_id="dag.task", app_version=7)    # Spark
    t.delete("dt = '2026-01-01' AND id <= 4")        # Spark, or in-process when spark is None
    t.update({"v": "v * 2"}, "id = 7")               # Spark, or in-process when spark is None

Rules: this module holds no protocol logic; each method is one call into a command or the log layer
(a method that only runs a command is its typed signature and docstring under :func:`runs`),
and raises only :class:`~.errors.DeltaError` (:func:`.foreign.translated_methods`: a Spark task's
error as itself, an I/O error as a retryable StorageError, anything else named as ours).
Every method that commits takes the commit's transaction identity as ``identity=TxnIdentity(...)``,
or as the keywords ``app_id``, ``app_version``, ``user_metadata`` (folded into that one value by
:func:`.commit_identity.takes_identity`).
It never imports pyspark at module level (``import airflow_delta_provider_apps.engine`` must not load pyspark); the
methods that need Spark take the session given to :meth:`for_path`/:meth:`create` and fail with a
clear error when it is ``None``.

Returned dicts: ``append`` returns ``{"operation", "table_uri", "version", "skipped", "metrics": {...}}``
with the metrics (Delta's names, ints) repeated at top level, so ``t.append(df)["numOutputRows"]``
works too. ``detail()`` keys: version, num_files, size_in_bytes, partition_columns, schema (Delta
schema JSON object), protocol {min_reader_version, min_writer_version, reader_features,
writer_features}, configuration, id, name, description, created_time (plus table_uri, format).
``history()`` returns the commitInfo objects, newest first, each with its ``version`` (and
``timestamp``) set, as delta-spark's ``DESCRIBE HISTORY`` shows them.
"""

from __future__ import annotations

import functools
import importlib
import inspect

from .commit_identity import TxnIdentity, takes_identity
from .errors import InvalidArgumentError, TableNotFoundError
from .foreign import translated_iter, translated_methods
from .storage import storage_for, table_location
from .values import parse_timestamp_ms, parse_version


def runs(target: str, *, spark: str | None = None):
    """A :class:`DeltaTable` method that runs the engine command ``target`` (``"module:function"``
    of :mod:`.commands`) on the table (:meth:`DeltaTable.run`) and returns its result dict. The method
    is its typed signature and docstring only; its arguments go to the command by name. A method
    with an ``identity`` also takes ``app_id``, ``app_version``, ``user_metadata``
    (:func:`.commit_identity.takes_identity`); ``spark``: what the command does, when it needs a
    SparkSession (refused clearly without one). The command is imported on the first call; the
    method's ``command`` attribute names it (tests hold the signature to the command's and the
    registry's)."""
    module, _, name = target.partition(":")

    def decorate(front):
        signature = inspect.signature(front)

        @functools.wraps(front)
        def method(self, *args, **kwargs):
            arguments = signature.bind(self, *args, **kwargs)
            arguments.apply_defaults()
            if spark is not None:
                self._need_spark(spark)
            command = getattr(importlib.import_module(f"{__package__}.commands.{module}"), name)
            return self.run(command, **dict(list(arguments.arguments.items())[1:])).to_dict()

        method.command = f"{__package__}.commands.{module}:{name}"
        return takes_identity(method) if "identity" in signature.parameters else method

    return decorate


def plane_for(spark):
    """The data plane (:mod:`.plane`) of a SparkSession (classic or Connect), or of this process (None)."""
    if spark is None:
        from .plane import in_process_plane

        return in_process_plane()
    from .spark.plane import SparkPlane

    return SparkPlane(spark)


@translated_methods  # every method raises only our errors (see .foreign): the one place all callers pass
class DeltaTable:
    """A Delta table at a path. Construct with :meth:`for_path` or :meth:`create`.

    :param spark: a SparkSession, or ``None`` for log-only use and Arrow data merged in this process
    :param table_uri: the table location (local path or URI)

    The commands run their data work on :attr:`plane` (:mod:`.plane`): the SparkSession's, or this
    process's without one. This class is where a plane is chosen; commands only receive it.
    """

    def __init__(self, spark, table_uri: str):
        self.spark = spark
        self.plane = plane_for(spark)
        self.table_uri = table_location(table_uri)
        self.storage = storage_for(self.table_uri)

    def __repr__(self) -> str:
        return f"DeltaTable({self.table_uri!r})"

    @takes_identity
    def run(self, command, /, *args, **arguments):
        """Run an engine command (``(snapshot, *args, **arguments) -> CommandResult``, :mod:`.commands`)
        on the table's latest snapshot, with :attr:`plane` when the command takes one. Each command
        method below is this with its own typed signature (the operations registry's generic runner
        runs an entry's command the same way); the transaction ``identity`` is one of ``arguments``
        (``app_id``, ``app_version``, ``user_metadata`` become that one value).
        Returns the command's :class:`~.commands.result.CommandResult`."""
        if "plane" in inspect.signature(command).parameters:
            arguments = {**arguments, "plane": self.plane}
        return command(self.snapshot(), *args, **arguments)

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_path(cls, spark, table_uri: str) -> DeltaTable:
        """The Delta table at ``table_uri``.

        :raises TableNotFoundError: there is no Delta table there
        """
        from .log.listing import latest_version

        t = cls(spark, table_uri)
        if latest_version(t.storage, t.table_uri) is None:
            raise TableNotFoundError(
                f"No Delta table at '{t.table_uri}'",
                "there is no _delta_log directory with a commit or checkpoint file",
                "check the table URI, or create the table first (DeltaTable.create / create-table)",
            )
        return t

    @classmethod
    @takes_identity
    def create(
        cls,
        spark,
        table_uri: str,
        *,
        schema=None,
        partition_by=None,
        properties=None,
        description=None,
        if_not_exists: bool = False,
        name=None,
        source_df=None,
        identity: TxnIdentity | None = None,
        target_file_size: int | None = None,
        cluster_by=None,
    ) -> DeltaTable:
        """CREATE TABLE [IF NOT EXISTS] [AS SELECT] (see :mod:`airflow_delta_provider_apps.engine.commands.create_table`).

        The commit result is kept in :attr:`last_result` (``skipped`` is true when IF NOT EXISTS found
        the table).

        :param schema: DDL string, Spark StructType or Delta schema JSON; with ``source_df`` it may be
            omitted (the source's schema is used)
        :param source_df: DataFrame whose rows are written into version 0 (create-as-select)
        :param cluster_by: clustering columns (liquid clustering; OPTIMIZE clusters by them)
        """
        from .commands.create_table import create_table

        result = create_table(
            table_uri,
            schema=schema,
            partition_by=partition_by,
            properties=properties,
            description=description,
            name=name,
            if_not_exists=if_not_exists,
            source=source_df,
            identity=identity,
            target_file_size=target_file_size,
            cluster_by=cluster_by,
            plane=plane_for(spark),
        )
        t = cls(spark, table_uri)
        t.last_result = result.to_dict()
        return t

    last_result: dict | None = None

    # ------------------------------------------------------------------ log-only
    def snapshot(self, version: int | None = None, timestamp=None):
        """The table's :class:`~airflow_delta_provider_apps.engine.log.snapshot.Snapshot` (latest, or time travel)."""
        from .log.snapshot import load_snapshot

        if version is not None and timestamp is not None:
            raise InvalidArgumentError(
                "Both a version and a timestamp were given for time travel", None, "pass only one of them"
            )
        if version is not None:
            version = parse_version(version)
        ts = parse_timestamp_ms(timestamp) if timestamp is not None else None
        return load_snapshot(self.storage, self.table_uri, version=version, timestamp_ms=ts)

    def exists(self) -> bool:
        """Whether a Delta table is at this location (one listing of ``_delta_log``, no file read)."""
        from .log.listing import latest_version

        return latest_version(self.storage, self.table_uri) is not None

    def version(self) -> int:
        """The latest version (one listing of ``_delta_log``, no file read)."""
        from .log.listing import latest_version

        v = latest_version(self.storage, self.table_uri)
        if v is None:
            raise TableNotFoundError(
                f"No Delta table at '{self.table_uri}'", None, "check the table URI, or create the table first"
            )
        return v

    def detail(self) -> dict:
        """The table's current state (see the module docstring for the keys); ``checksum`` says
        whether the version's checksum file agrees with the replayed state (``ok``, ``mismatch: ...``,
        or None without one: :func:`.log.checksum.verify`)."""
        from .commands.describe import detail

        return self.run(detail).fields["detail"]

    def history(self, limit: int | None = None) -> list[dict]:
        """commitInfo of each version, newest first (``limit`` newest only)."""
        from .commands.describe import history

        if limit is not None:
            try:
                limit = int(limit)
            except (TypeError, ValueError):
                limit = -1
            if limit < 0:
                raise InvalidArgumentError(
                    f"History limit {limit!r} is not a non-negative integer", None, "pass a limit such as 10"
                )
        return history(self.table_uri, limit).fields["history"]

    @runs("checkpoint:checkpoint")
    def checkpoint(self, *, cleanup: bool = False) -> dict:
        """Write a checkpoint of the latest version (and ``_last_checkpoint``); returns its result.
        ``cleanup``: then delete the expired log files, as :meth:`cleanup_metadata`."""

    @runs("checkpoint:cleanup_metadata")
    def cleanup_metadata(self) -> dict:
        """Delete expired log files (``delta.logRetentionDuration``) older than the newest checkpoint
        before the retention cutoff; returns what was deleted."""

    # ------------------------------------------------------------------ Spark
    @runs("vacuum:vacuum")
    def vacuum(
        self,
        retention_hours: float | None = None,
        *,
        dry_run: bool = False,
        enforce_retention_duration: bool = True,
        mode: str = "full",
        keep_versions=None,
        inventory: str | None = None,
        identity: TxnIdentity | None = None,
    ) -> dict:
        """Delete files no version inside the retention needs (see
        :mod:`airflow_delta_provider_apps.engine.commands.vacuum`); no Spark needed.
        ``keep_versions``: versions whose files are kept whatever their age (deltalake's name);
        ``inventory``: a Delta table or parquet path listing the table's files, used instead of
        listing (delta-spark's ``VACUUM ... USING INVENTORY``)."""

    @runs("optimize:optimize")
    def optimize(
        self,
        *,
        partition_filter: str | None = None,
        target_size: int | None = None,
        min_file_size: int | None = None,
        z_order_by=None,
        purge_deletion_vectors: bool = False,
        identity: TxnIdentity | None = None,
    ) -> dict:
        """Compact small files, or Z-order them, or purge deleted rows (see
        :mod:`airflow_delta_provider_apps.engine.commands.optimize`); in Spark tasks when this table
        has a SparkSession, else in this process."""

    @runs("properties:set_properties")
    def set_properties(self, properties: dict, *, identity: TxnIdentity | None = None) -> dict:
        """Set table properties in one commit, upgrading the protocol to the features they enable
        (see :mod:`airflow_delta_provider_apps.engine.commands.properties`); no Spark needed."""

    @runs("properties:add_constraint")
    def add_constraint(self, name: str, expression: str, *, identity: TxnIdentity | None = None) -> dict:
        """ADD CONSTRAINT ``name`` CHECK (``expression``), after checking every row the table holds;
        every later write checks it (see :mod:`airflow_delta_provider_apps.engine.constraints`)."""

    @runs("properties:rename_column")
    def rename_column(self, column: str, new_name: str, *, identity: TxnIdentity | None = None) -> dict:
        """RENAME COLUMN on a table with column mapping (metadata only; see
        :mod:`airflow_delta_provider_apps.engine.column_mapping`)."""

    @runs("properties:drop_column")
    def drop_column(self, column: str, *, identity: TxnIdentity | None = None) -> dict:
        """DROP COLUMN on a table with column mapping (metadata only)."""

    @runs("properties:change_column_type")
    def change_column_type(self, column: str, new_type, *, identity: TxnIdentity | None = None) -> dict:
        """Widen a column's type, or a struct field's by its dotted path (metadata only; the protocol's allowed widenings, see
        :mod:`airflow_delta_provider_apps.engine.schema.widening`); enables type widening."""

    @runs("properties:set_column_default")
    def set_column_default(self, column: str, default: str | None, *, identity: TxnIdentity | None = None) -> dict:
        """``ALTER COLUMN ... SET DEFAULT`` (``None``: ``DROP DEFAULT``), metadata only; the table must
        enable ``allowColumnDefaults`` (see :func:`.commands.properties.set_column_default`)."""

    @runs("properties:cluster_by")
    def cluster_by(self, columns, *, identity: TxnIdentity | None = None) -> dict:
        """Set the clustering columns (``ALTER TABLE ... CLUSTER BY``), or remove them with ``None``
        or ``[]`` (``CLUSTER BY NONE``): metadata only, the ``delta.clustering`` domain; files
        written before are clustered by the next OPTIMIZE (see :mod:`.clustering`)."""

    def clustering_columns(self) -> list[str]:
        """The table's clustering columns (empty when it is not clustered)."""
        from .clustering import clustering_columns

        return clustering_columns(self.snapshot()) or []

    @runs("properties:drop_constraint")
    def drop_constraint(self, name: str, *, if_exists: bool = False, identity: TxnIdentity | None = None) -> dict:
        """DROP CONSTRAINT [IF EXISTS] ``name`` (metadata only)."""

    @runs("restore:restore")
    def restore(self, version: int | None = None, timestamp=None, *, identity: TxnIdentity | None = None) -> dict:
        """Make the table's live files those of an older version (see
        :mod:`airflow_delta_provider_apps.engine.commands.restore`); no Spark needed."""

    def _need_spark(self, what: str):
        if self.spark is None:
            raise InvalidArgumentError(
                f"{what} needs a SparkSession",
                "this DeltaTable was opened with spark=None (log-only)",
                "open it with DeltaTable.for_path(spark, table_uri)",
            )
        return self.spark

    def to_df(self, version: int | None = None, timestamp=None, *, predicate: str | None = None, columns=None):
        """The table's rows as a pyspark DataFrame (latest, or time travel by version / timestamp).

        :param predicate: Spark SQL condition: only files that may hold matching rows are read
            (partition pruning, min/max stats), and only matching rows are returned
        :param columns: the columns to read (the others are not read from the files)
        """
        from .spark.scan import to_dataframe

        spark = self._need_spark("Reading the table")
        snap = self.snapshot(version=version, timestamp=timestamp)
        if version is not None or timestamp is not None:
            from .commands.vacuum import check_time_travel

            check_time_travel(snap)
        return to_dataframe(spark, snap, predicate=predicate, columns=list(columns) if columns else None)

    def changes(
        self,
        start=None,
        end=None,
        *,
        start_timestamp=None,
        end_timestamp=None,
        columns=None,
    ):
        """The change data feed between versions ``start`` and ``end`` (inclusive; default 0 and the
        latest), or between commit timestamps: the changed rows with ``_change_type``,
        ``_commit_version`` and ``_commit_timestamp``, as a stream of bounded batches (see
        :mod:`.cdf`), a ``pyarrow.RecordBatchReader``. A bad range, or a version without the feed, is
        refused before any file is read."""
        import pyarrow as pa

        from . import cdf

        plan = cdf.plan_changes(
            self.storage, self.table_uri, start, end, start_timestamp=start_timestamp, end_timestamp=end_timestamp
        )
        reader = cdf.ChangeReader(plan, list(columns) if columns else None)
        batches = (b for f in plan.files for b in reader.batches(self.storage, f))
        return pa.RecordBatchReader.from_batches(reader.schema, translated_iter(batches))

    def changes_df(self, start=None, end=None, *, start_timestamp=None, end_timestamp=None, columns=None):
        """:meth:`changes` as a pyspark DataFrame, read in Spark tasks."""
        from . import cdf
        from .spark.scan import changes_dataframe

        spark = self._need_spark("Reading the table's changes")
        plan = cdf.plan_changes(
            self.storage, self.table_uri, start, end, start_timestamp=start_timestamp, end_timestamp=end_timestamp
        )
        return changes_dataframe(spark, plan, list(columns) if columns else None)

    @runs("write:append", spark="Appending")
    def append(
        self,
        df,
        *,
        identity: TxnIdentity | None = None,
        target_file_size: int | None = None,
        merge_schema: bool = False,
        on_rerun: str = "apply",
        watermark: tuple[str, int] | None = None,
    ) -> dict:
        """Append of ``df`` with schema enforcement (see :mod:`airflow_delta_provider_apps.engine.commands.write`).

        :param merge_schema: add the data's new columns (nullable) to the table schema
        :param identity: the commit's :class:`TxnIdentity` (or ``app_id``, ``app_version``,
            ``user_metadata``): an already committed ``app_version`` of ``app_id`` is skipped
            (``skipped: true``, nothing written)
        :param on_rerun: ``"replace"``: a newer ``app_version`` of the same ``app_id`` removes, in the
            same commit, the files its earlier commit appended (a re-run holds one copy of its rows);
            ``"apply"`` (default) appends next to them
        :param target_file_size: roll data files at about this many bytes (default: the table's
            ``delta.targetFileSize`` or 128 MiB)
        """

    @runs("write:overwrite", spark="Overwriting")
    def overwrite(
        self,
        df,
        *,
        replace_where: str | None = None,
        overwrite_schema: bool = False,
        partition_overwrite_mode: str = "static",
        merge_schema: bool = False,
        identity: TxnIdentity | None = None,
        target_file_size: int | None = None,
        watermark: tuple[str, int] | None = None,
    ) -> dict:
        """Replace the table's rows with ``df``'s in one commit: all of them, those matching
        ``replace_where`` (every written row must match it), or with ``partition_overwrite_mode="dynamic"``
        the partitions ``df`` writes to. See :func:`airflow_delta_provider_apps.engine.commands.write.overwrite`."""

    # ------------------------------------------------------------------ DML
    @runs("dml:delete")
    def delete(self, predicate: str | None = None, *, identity: TxnIdentity | None = None) -> dict:
        """DELETE the rows where ``predicate`` (Spark SQL) is TRUE; every row when None.

        Partition-only predicates remove files from metadata alone; otherwise the files that may
        match (partition pruning + min/max stats) are probed and only the touched ones rewritten, in
        Spark tasks when this table has a session, else in this process. No match: no commit.
        See :mod:`airflow_delta_provider_apps.engine.commands.dml`.
        """

    @runs("dml:update")
    def update(self, updates: dict, predicate: str | None = None, *, identity: TxnIdentity | None = None) -> dict:
        """UPDATE SET ``updates`` (``{column: Spark SQL expression}``) WHERE ``predicate``.

        Assignments are type-checked and cast as Spark's UPDATE does; an updated partition column moves
        the rows to their new partition; nothing matching means no commit.
        """

    def merge(
        self,
        source,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
    ):
        """MERGE INTO this table USING ``source`` (a DataFrame) ON ``predicate``: returns a builder.

        Add ``when_matched_update / _update_all / _delete``, ``when_not_matched_insert / _insert_all`` and
        ``when_not_matched_by_source_update / _delete`` clauses (in order; only the last of a kind may
        omit its condition), then ``execute()``. See :mod:`airflow_delta_provider_apps.engine.commands.merge`.
        """
        from .commands.merge import MergeBuilder

        return MergeBuilder(
            self, source, predicate, source_alias=source_alias, target_alias=target_alias, merge_schema=merge_schema
        )

    @runs("merge:upsert")
    def upsert(
        self,
        source,
        key_columns,
        *,
        dedupe_by: str | None = None,
        merge_schema: bool = False,
        identity: TxnIdentity | None = None,
        target_file_size: int | None = None,
        watermark=None,
    ) -> dict:
        """Upsert ``source`` by ``key_columns``: update every column of matched rows, insert the rest.

        Duplicate keys in the source fail clearly (nothing written), unless ``dedupe_by`` names a
        column: then the row with its greatest value per key is kept. NULL keys never match.
        ``merge_schema=True`` adds the source's new columns to the table in the same commit, and lets
        the source leave out table columns: kept in updated rows, NULL in inserted ones (delta-spark's
        schema evolution; a NOT NULL column left out is refused). ``target_file_size``: roll data
        files at about this many bytes (default: the table's ``delta.targetFileSize`` or 128 MiB).
        """
