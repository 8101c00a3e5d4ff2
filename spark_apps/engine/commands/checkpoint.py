"""CHECKPOINT and log cleanup as commands: each takes a snapshot and returns a :class:`CommandResult`.

The log layer (:mod:`..log.checkpoint`, :mod:`..log.cleanup`) does the work and reports everything it
did; here that report is split as every command's result is: Delta-style metric names in ``metrics``
(what an Airflow XCom or a dashboard reads), and the rest (which files were written, the cutoff)
as result fields.
"""

from __future__ import annotations

from .base import command_result
from .result import CheckpointMetrics, CleanupMetrics, CommandResult, Stopwatch

OPERATION_CHECKPOINT = "CHECKPOINT"
OPERATION_CLEANUP = "CLEANUP METADATA"

__all__ = ["checkpoint", "cleanup_metadata", "OPERATION_CHECKPOINT", "OPERATION_CLEANUP"]


def checkpoint(snapshot, *, cleanup: bool = False) -> CommandResult:
    """Write a checkpoint of ``snapshot``'s version (and ``_last_checkpoint`` when it is the newest);
    with ``cleanup``, then delete the expired log files (:func:`cleanup_metadata` of the table's
    latest version, which now has this checkpoint): its result is the ``cleanup`` field."""
    from ..log.checkpoint import write_checkpoint

    clock = Stopwatch()
    done = write_checkpoint(snapshot.storage, snapshot.table_root, snapshot)
    metrics = CheckpointMetrics(
        num_actions=done["num_actions"],
        num_add_files=done.get("num_add_files", 0),
        num_remove_files=done.get("num_remove_files", 0),
        num_parts=done["num_parts"],
        size_in_bytes=done["size_in_bytes"],
        execution_time_ms=clock.elapsed_ms(),
    )
    fields = {
        "checkpoint_files": list(done.get("paths", [])),
        "last_checkpoint_updated": bool(done.get("last_checkpoint_updated")),
    }
    if cleanup:
        from ..log.snapshot import load_snapshot

        latest = load_snapshot(snapshot.storage, snapshot.table_root)
        fields["cleanup"] = cleanup_metadata(latest).to_dict()
    return command_result(OPERATION_CHECKPOINT, snapshot.table_root, snapshot.version, metrics, fields=fields)


def cleanup_metadata(snapshot, *, now_ms: int | None = None) -> CommandResult:
    """Delete log files older than ``delta.logRetentionDuration`` that no retained version needs."""
    from ..log.cleanup import cleanup_expired_logs

    clock = Stopwatch()
    done = cleanup_expired_logs(snapshot.storage, snapshot.table_root, snapshot, now_ms=now_ms)
    metrics = CleanupMetrics(
        num_deleted_files=done.get("num_deleted_files", len(done.get("deleted", []))),
        num_deleted_commits=done.get("num_deleted_commits", 0),
        num_deleted_checkpoint_files=done.get("num_deleted_checkpoint_files", 0),
        execution_time_ms=clock.elapsed_ms(),
    )
    fields = {
        "cutoff_version": done.get("cutoff_version"),
        "protected_checkpoint_version": done.get("checkpoint_version"),
        "retention_threshold_ms": done.get("threshold_ms"),
    }
    return command_result(OPERATION_CLEANUP, snapshot.table_root, snapshot.version, metrics, fields=fields)
