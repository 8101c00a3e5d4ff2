"""One result type for every command, and per-operation metrics that render Delta's ``operationMetrics``.

A command returns :class:`CommandResult`: the Delta operation name, the table, the version it committed
(or the snapshot's version when nothing was committed), whether it was skipped, its metrics and any
operation-specific fields. Metrics are a dataclass per operation whose fields are the snake_case
spelling of Delta's metric names (``num_removed_files`` <-> ``numRemovedFiles``); :meth:`OperationMetrics.
to_operation_metrics` renders them with Delta's names, which is what lands in ``commitInfo`` and what the
returned dict (and so Airflow's XCom) carries. Fields that are not Delta metrics (a checkpoint's file
paths, cleanup's cutoff) are result fields, never metrics.

The returned dict keeps one shape for every operation::

    {"operation", "table_uri", "version", "skipped", "metrics": {<Delta names>}, <metrics again>, <fields>}
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from ..actions import camel_case

__all__ = [
    "CommandResult",
    "OperationMetrics",
    "WriteMetrics",
    "DeleteMetrics",
    "UpdateMetrics",
    "VacuumMetrics",
    "OptimizeMetrics",
    "RestoreMetrics",
    "CheckpointMetrics",
    "MergeMetrics",
    "CleanupMetrics",
    "Stopwatch",
    "camel_case",
]


@dataclass
class OperationMetrics:
    """Base of the per-operation metrics. Each field is one Delta metric (an int)."""

    def to_operation_metrics(self) -> dict[str, int]:
        """The metrics under Delta's names, in declaration order (a metric that is unknown, None, is
        left out, as Delta leaves out what it did not measure)."""
        return {
            camel_case(f.name): int(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass
class WriteMetrics(OperationMetrics):
    """WRITE / CREATE TABLE AS SELECT (delta-spark's names). Overwrites also remove files."""

    num_files: int = 0
    num_output_rows: int = 0
    num_output_bytes: int = 0


@dataclass
class OverwriteMetrics(WriteMetrics):
    """WRITE with mode overwrite: what was written and what was replaced."""

    num_removed_files: int = 0
    num_removed_bytes: int = 0
    num_deleted_rows: int = 0
    num_copied_rows: int = 0
    execution_time_ms: int = 0


@dataclass
class MergeMetrics(OperationMetrics):
    """MERGE (delta-spark's MergeIntoCommand names)."""

    num_source_rows: int = 0
    num_target_rows_inserted: int = 0
    num_target_rows_updated: int = 0
    num_target_rows_matched_updated: int = 0
    num_target_rows_not_matched_by_source_updated: int = 0
    num_target_rows_deleted: int = 0
    num_target_rows_matched_deleted: int = 0
    num_target_rows_not_matched_by_source_deleted: int = 0
    num_target_rows_copied: int = 0
    num_output_rows: int = 0
    num_target_files_before_skipping: int = 0
    num_target_files_after_skipping: int = 0
    num_target_files_removed: int = 0
    num_target_files_added: int = 0
    num_target_change_files_added: int = 0
    num_target_bytes_added: int = 0
    num_target_bytes_removed: int = 0
    # deletion vectors (None: the merge wrote none)
    num_target_deletion_vectors_added: int | None = None
    num_target_deletion_vectors_updated: int | None = None
    num_target_deletion_vectors_removed: int | None = None
    execution_time_ms: int = 0
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0


@dataclass
class _RewriteMetrics(OperationMetrics):
    """What DELETE and UPDATE share: the files and bytes they replaced, and where the time went."""

    num_removed_files: int = 0
    num_added_files: int = 0
    num_copied_rows: int = 0
    num_added_bytes: int = 0
    num_removed_bytes: int = 0
    num_added_change_files: int = 0
    execution_time_ms: int = 0
    scan_time_ms: int = 0
    rewrite_time_ms: int = 0
    # deletion vectors (None: the table writes none): new on a file, replacing one, dropped with their file
    num_deletion_vectors_added: int | None = None
    num_deletion_vectors_updated: int | None = None
    num_deletion_vectors_removed: int | None = None
    # data skipping: the live files (and bytes) before and after partition and stats pruning
    num_files_before_skipping: int = 0
    num_bytes_before_skipping: int = 0
    num_files_after_skipping: int = 0
    num_bytes_after_skipping: int = 0


@dataclass
class DeleteMetrics(_RewriteMetrics):
    num_deleted_rows: int | None = 0  # None: a metadata-only delete of files without stats


@dataclass
class UpdateMetrics(_RewriteMetrics):
    num_updated_rows: int = 0


@dataclass
class VacuumMetrics(OperationMetrics):
    """VACUUM (delta-spark's names; START carries the first two, END the next two)."""

    num_files_to_delete: int = 0
    size_of_data_to_delete: int = 0
    num_deleted_files: int = 0
    num_vacuumed_directories: int = 0
    execution_time_ms: int = 0


@dataclass
class RestoreMetrics(OperationMetrics):
    """RESTORE (delta-spark's names)."""

    table_size_after_restore: int = 0
    num_of_files_after_restore: int = 0
    num_removed_files: int = 0
    num_restored_files: int = 0
    removed_files_size: int = 0
    restored_files_size: int = 0


@dataclass
class OptimizeMetrics(OperationMetrics):
    """OPTIMIZE (delta-spark's commitInfo names; file-size percentiles of the files added)."""

    num_added_files: int = 0
    num_removed_files: int = 0
    num_added_bytes: int = 0
    num_removed_bytes: int = 0
    min_file_size: int | None = None
    p25_file_size: int | None = None
    p50_file_size: int | None = None
    p75_file_size: int | None = None
    max_file_size: int | None = None
    num_batches: int = 0
    total_considered_files: int = 0
    total_files_skipped: int = 0
    partitions_optimized: int = 0
    execution_time_ms: int = 0


@dataclass
class CheckpointMetrics(OperationMetrics):
    """CHECKPOINT (not a commit: Delta writes no operationMetrics for it; the names follow Delta's style)."""

    num_actions: int = 0
    num_add_files: int = 0
    num_remove_files: int = 0
    num_parts: int = 0
    size_in_bytes: int = 0
    execution_time_ms: int = 0


@dataclass
class CleanupMetrics(OperationMetrics):
    num_deleted_files: int = 0
    num_deleted_commits: int = 0
    num_deleted_checkpoint_files: int = 0
    execution_time_ms: int = 0


@dataclass
class CommandResult:
    """Outcome of a command (see the module docstring)."""

    operation: str
    table_uri: str
    version: int
    skipped: bool = False
    metrics: OperationMetrics | None = None
    commit_info: dict | None = None
    fields: dict = field(default_factory=dict)

    @property
    def operation_metrics(self) -> dict[str, int]:
        return self.metrics.to_operation_metrics() if self.metrics is not None else {}

    def to_dict(self) -> dict:
        metrics = self.operation_metrics
        out = {
            "operation": self.operation,
            "table_uri": self.table_uri,
            "version": self.version,
            "skipped": self.skipped,
            "metrics": dict(metrics),
        }
        for key, value in metrics.items():
            out.setdefault(key, value)
        for key, value in self.fields.items():
            out.setdefault(key, value)
        # the one field that says whether this run changed the table (False: nothing to do, or skipped)
        out["committed"] = bool(self.fields.get("committed", self.commit_info is not None and not self.skipped))
        return out


class Stopwatch:
    """Milliseconds since creation, and named laps (``scanTimeMs``, ``rewriteTimeMs``)."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._start) * 1000)
