"""The Spark data plane (:class:`~..plane.DataPlane` over a SparkSession, classic or Connect).

The per-file work (DELETE/UPDATE rewrites, OPTIMIZE's bins, MERGE file by file) runs as the
in-process plane does, in this process's threads when the files are small
(:data:`..rewrite.common.IN_PROCESS_BYTES`) or Spark's executors are this machine's cores (a local
master, or a Connect server on loopback running one: :func:`.session.on_this_machine`;
:meth:`SparkPlane.in_driver`; ``spark.airflowDelta.fileWork=tasks`` overrides both), else in Spark
tasks over the same pure-pyarrow code (:mod:`.rewrite`, :mod:`.optimize`, :mod:`.merge`). Data handed in is a DataFrame: written by the core writer in tasks or by Spark's own
writer (:mod:`.write`), and a MERGE whose source is over the cap of a source held here
(:func:`.merge.source_cap`: on a local master a share of this machine's memory, elsewhere what may
be shipped to every task) runs on Spark's own scan, joins and writer (:func:`.merge_join.execute_merge`).
A MERGE source may also be Arrow data read in this process (a small file source,
:mod:`airflow_delta_provider_apps.sources`; on a local master a DataFrame that is a plain scan of
parquet files, :func:`.merge.scanned_files_as_arrow`): no Spark job to read it. Held here, it is
merged file by file, or by one hash join in this process's threads when large
(:meth:`SparkPlane._merge_held`). The result's ``strategy`` says which (``file_by_file``,
``hash_join``, ``join``), and the task log why.
"""

from __future__ import annotations

import logging

from ..plane import InProcessPlane

__all__ = ["SparkPlane"]

log = logging.getLogger(__name__)


class SparkPlane:
    """The data plane of one SparkSession."""

    def __init__(self, spark):
        self.spark = spark
        self._local_master: bool | None = None
        self._this_machine: str | None | bool = False  # (False: not asked yet)
        self._here: InProcessPlane | None = None

    @property
    def _local(self) -> InProcessPlane:
        """This process's plane: on a local master as many threads as it has cores (``local[N]``: N),
        else one per core of this machine."""
        if self._here is None:
            from .scan import default_parallelism

            self._here = InProcessPlane(default_parallelism(self.spark) if self._is_local() else None)
        return self._here

    def _is_local(self) -> bool:
        from .session import local_master

        if self._local_master is None:
            self._local_master = local_master(self.spark)
        return self._local_master

    def _on_this_machine(self) -> str | None:
        """:func:`.session.on_this_machine`, asked once per plane; logged when it holds."""
        if self._this_machine is False:
            from .session import on_this_machine

            self._this_machine = on_this_machine(self.spark)
            if self._this_machine:
                log.info(
                    "Per-file work in this process's threads at any size: Spark's executors are %s", self._this_machine
                )
        return self._this_machine

    def in_driver(self, size: int) -> bool:
        """Whether per-file work over ``size`` bytes of files runs in this process's threads, not in
        Spark tasks: when they are small (a job, and the Python workers it starts, cost more than the
        work), or at any size when Spark's executors are this machine's cores
        (:func:`.session.on_this_machine`: a local master, whose core count the threads take, or a
        Connect server on loopback running one; a job adds its scheduling and the shipping of its
        inputs), unless :data:`.session.FILE_WORK_CONF` is ``tasks``."""
        from ..rewrite.common import IN_PROCESS_BYTES
        from .session import FILE_WORK_CONF, conf_value

        if conf_value(self.spark, FILE_WORK_CONF, "auto").strip().lower() == "tasks":
            return False
        return size <= IN_PROCESS_BYTES or self._on_this_machine() is not None

    def __repr__(self) -> str:
        return f"SparkPlane({self.spark!r})"

    def held(self, data):
        return data if _is_dataframe(data) else self._local.held(data)

    def schema_of(self, data):
        from ..schema import parse_schema

        if not _is_dataframe(data):  # Arrow data read in this process (a MERGE's small file source)
            return self._local.schema_of(data)
        return parse_schema(data.schema.jsonValue())

    def conform(self, data, schema, *, keep: tuple = ()):
        from .write import conform_dataframe

        return conform_dataframe(data, schema.to_json(), keep=keep)

    def write(self, data, spec, *, change_data: bool = False):
        from .write import write_data_files

        return write_data_files(data, spec, change_data=change_data)

    def inserted_changes(self, snapshot, adds: list) -> list:
        from .write import inserted_changes

        return inserted_changes(self.spark, snapshot, adds)

    def read_snapshot(self, snapshot):
        from .scan import to_dataframe

        return to_dataframe(self.spark, snapshot).toArrow()

    def rewrite_files(self, spec, files):
        from ..rewrite.common import files_bytes

        if self.in_driver(files_bytes(files)):
            return self._local.rewrite_files(spec, files)
        from .rewrite import rewrite_files

        return rewrite_files(self.spark, spec, files)

    def compact_bins(self, spec, files, bins):
        from ..rewrite import files_bytes

        if self.in_driver(files_bytes(files.take(sorted(i for b in bins for i in b)))):
            return self._local.compact_bins(spec, files, bins)
        import functools

        from ..rewrite import Compactor
        from ..rewrite.common import FileOutcome
        from .rewrite import run_file_tasks

        return run_file_tasks(self.spark, files, None, functools.partial(Compactor, spec), FileOutcome, units=bins)

    def merge(self, job):
        from ..merge import merge_by_join, source_row_limit
        from .merge import deduplicated, scanned_files_as_arrow, small_source, source_key_values
        from .merge_join import execute_merge

        source, plan = job.source, job.plan
        if _is_dataframe(source) and job.keys:  # a plain scan of parquet files, on a local master: read here
            held = scanned_files_as_arrow(source)
            source = source if held is None else held
        if not _is_dataframe(source):
            if job.keys:  # Arrow data read in this process: merged here, as the in-process plane does
                return self._merge_held(job, _arrow_source(source, job))
            from ..arrays import arrow_table

            source = self.spark.createDataFrame(arrow_table(source))  # no key to look up: joined in Spark
        if job.dedupe:
            source = deduplicated(source, *job.dedupe)
        # a source with keys to look up, small enough, is collected once into Arrow and merged file by file
        local = small_source(source, plan, source_row_limit(plan.source_schema)) if job.keys else None
        if local is not None:
            return self._merge_held(job, local)

        def key_values(max_values: int, *, unique, refuse):
            return source_key_values(self.spark, source, plan, list(job.keys), max_values, unique=unique, refuse=refuse)

        def join(materialised, candidates, num_source_rows: int, unique_matches: bool):
            return execute_merge(
                self.spark, job.snapshot, plan, materialised, candidates, num_source_rows, unique_matches=unique_matches
            )

        return merge_by_join(job, key_values, join)

    def _merge_held(self, job, local):
        """MERGE with the source held here as Arrow (``local``): when the table's file work runs in
        this process (:meth:`in_driver`: small files, or any on a local master, whose cores are this
        machine's) and the source is large (:func:`..merge.joins_by_hash`), by one hash join in this
        process's threads; else file by file (:meth:`_merge_files`). A source over the cap
        (:func:`.merge.source_cap`) is never held here: Spark joins it (its memory spills; a hash
        join here would hold it)."""
        from ..merge import joins_by_hash, merge_by_file, merge_by_hash
        from ..rewrite.common import files_bytes

        if self.in_driver(files_bytes(job.snapshot.files)) and joins_by_hash(job, local.num_rows):
            return merge_by_hash(job, local, max_workers=self._local.threads)
        return merge_by_file(job, local, self._merge_files)

    def _merge_files(self, prepared, candidates):
        """MERGE file by file: in this process's threads when the candidates are small, else in tasks."""
        from ..merge import execute_by_file
        from ..rewrite.common import files_bytes

        if self.in_driver(files_bytes(candidates)):
            return execute_by_file(prepared, candidates, max_workers=self._local.threads)
        from .merge import execute_merge_by_file

        return execute_merge_by_file(self.spark, prepared, candidates)


def _is_dataframe(data) -> bool:
    """Whether ``data`` is a Spark DataFrame (classic or Connect), not Arrow data."""
    return type(data).__name__ == "DataFrame" and type(data).__module__.startswith("pyspark.")


def _arrow_source(source, job):
    """An Arrow MERGE source in the form the file-by-file merge reads (one row per key first when
    ``job.dedupe`` asks; columns ``__s<i>``)."""
    from ..arrays import arrow_table
    from ..merge import deduplicated_arrow, prefixed

    source = arrow_table(source)
    if job.dedupe:
        source = deduplicated_arrow(source, *job.dedupe)
    return prefixed(source, job.plan.source_schema)
