"""The data plane: the data work a command hands off, behind one interface (docs/design.md "The data
plane").

A command plans (reads the log, binds predicates, skips files, chooses what to rewrite) and commits;
the rows themselves are read, joined and written by a :class:`DataPlane`:

* :class:`InProcessPlane` (here) - this process: pyarrow and a thread pool; data is Arrow (a table,
  record batches). No JVM.
* ``SparkPlane`` (:mod:`.spark.plane`) - a SparkSession: the per-file work of the in-process plane in
  Spark tasks when the files are not small, and Spark's own data plane (its Parquet scan, joins and
  writer) for a MERGE whose source is over the collection cap; data is a DataFrame.

Each plane does every method: a MERGE is one (:meth:`DataPlane.merge`), its strategy the plane's.

Commands receive a plane and never import :mod:`.spark`; :class:`~.table.DeltaTable` chooses one
(its SparkSession, or none). Every method leaves nothing committed: the files it writes are the
command's to commit or discard.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from .merge import MergeJob, MergeOutcome
    from .rewrite import CompactSpec, FileOutcome, RewriteSpec
    from .schema import StructType
    from .writer import WriteResult, WriteSpec

__all__ = ["DataPlane", "InProcessPlane", "in_process_plane"]


class DataPlane(Protocol):
    """The data work of the commands (the names of delta-spark's and delta-rs's steps in brackets)."""

    # -- data handed in by the caller (a DataFrame, Arrow data)
    def held(self, data):
        """``data`` in a form the plane may read more than once (Arrow batches or a reader as one
        table; a DataFrame as it is)."""

    def schema_of(self, data) -> StructType:
        """The engine schema of ``data``."""

    def conform(self, data, schema: StructType, *, keep: tuple = ()):
        """``data`` with exactly ``schema``'s columns, order and types (``keep``: extra columns kept)."""

    def write(self, data, spec: WriteSpec, *, change_data: bool = False) -> WriteResult:
        """Write conformed ``data`` as new data files (or change data files): their AddFile actions
        with stats, not committed."""

    def inserted_changes(self, snapshot, adds: list) -> list:
        """The change feed's files of the rows the data files ``adds`` hold (as inserts)."""

    # -- the table's files
    def read_snapshot(self, snapshot) -> pa.Table:
        """Every live row of ``snapshot`` as one Arrow table (READ of a small table)."""

    def rewrite_files(self, spec: RewriteSpec, files: pa.Table) -> list[FileOutcome]:
        """Probe ``files`` and rewrite the touched ones (DELETE, UPDATE, ``replace_where``): one
        :class:`~.rewrite.FileOutcome` per file."""

    def compact_bins(self, spec: CompactSpec, files: pa.Table, bins: list[list[int]]) -> list[FileOutcome]:
        """OPTIMIZE: each bin's files (row indices of ``files``) read and written again (sorted by the
        Z-order key when asked), a unit of the per-file loop DELETE and UPDATE run on; one
        :class:`~.rewrite.FileOutcome` per bin."""

    # -- MERGE
    def merge(self, job: MergeJob) -> MergeOutcome:
        """MERGE's data work: the source (one row per key first when ``job.dedupe`` asks), its key
        values for ``job.select`` to choose the candidate files, then the merge of the candidates
        (file by file beside a small source: :func:`.merge.merge_by_file`; else by join:
        :func:`.merge.merge_by_join`). Nothing committed."""


class InProcessPlane:
    """This process: pyarrow, with a thread pool over files. Data is Arrow (a table, record batches,
    a reader); a MERGE's source is held here whole, and merged file by file when small, else by
    one hash join with the candidate files' keys (:func:`.merge.joins_by_hash` states the rule)."""

    def __init__(self, threads: int | None = None):
        #: files worked on at once (None: one per core of this machine)
        self.threads = threads

    def held(self, data):
        from .arrays import arrow_table

        return arrow_table(data)

    def schema_of(self, data) -> StructType:
        from .arrays import arrow_table
        from .schema import StructType

        return StructType.from_arrow(arrow_table(data).schema)

    def conform(self, data, schema: StructType, *, keep: tuple = ()):
        import pyarrow as pa

        from .conform import conform_arrow

        batches = conform_arrow(schema, data)
        return pa.Table.from_batches(batches, schema=batches[0].schema if batches else schema.to_arrow_schema())

    def write(self, data, spec: WriteSpec, *, change_data: bool = False) -> WriteResult:
        from .arrays import arrow_table
        from .writer import WriteResult, write_batches

        started = time.monotonic()
        written = list(write_batches(spec, arrow_table(data).to_batches(), change_data=change_data))
        return WriteResult.of(written, started)

    def inserted_changes(self, snapshot, adds: list) -> list:
        from .cdf import INSERT, change_rows
        from .reader import read_files_batches
        from .writer import adds_table, table_write_spec, write_batches

        tables = read_files_batches(
            snapshot.storage,
            snapshot.table_root,
            adds_table(adds),
            snapshot.schema,
            list(snapshot.metadata.partition_columns or []),
            column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
        )
        batches = (b for t in tables for b in change_rows(t, INSERT).to_batches())
        return [w.add for w in write_batches(table_write_spec(snapshot), batches, change_data=True)]

    def read_snapshot(self, snapshot) -> pa.Table:
        from .reader import read_snapshot_table

        return read_snapshot_table(snapshot)

    def rewrite_files(self, spec: RewriteSpec, files: pa.Table) -> list[FileOutcome]:
        from .rewrite import rewrite_files

        return rewrite_files(spec, files, max_workers=self.threads)

    def compact_bins(self, spec: CompactSpec, files: pa.Table, bins: list[list[int]]) -> list[FileOutcome]:
        from .rewrite import compact_files

        return compact_files(spec, files, bins, max_workers=self.threads)

    def merge(self, job: MergeJob) -> MergeOutcome:
        from .arrays import arrow_table
        from .merge import deduplicated_arrow, execute_by_file, joins_by_hash, merge_by_file, merge_by_hash, prefixed

        source = arrow_table(job.source)  # held here whatever its size
        if job.dedupe:
            source = deduplicated_arrow(source, *job.dedupe)
        local = prefixed(source, job.plan.source_schema)
        if joins_by_hash(job, local.num_rows):  # a large source: one hash join with the target's keys
            return merge_by_hash(job, local, max_workers=self.threads)
        return merge_by_file(
            job, local, lambda prepared, files: execute_by_file(prepared, files, max_workers=self.threads)
        )


_IN_PROCESS = InProcessPlane()


def in_process_plane() -> InProcessPlane:
    """The in-process plane (no state but its thread count: one instance serves every command)."""
    return _IN_PROCESS
