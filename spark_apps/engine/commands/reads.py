"""Commands that read a snapshot's data files (DELETE, UPDATE, MERGE, OPTIMIZE): when one of those
files is gone because a later commit removed it and VACUUM deleted it meanwhile, the command fails with
the retryable conflict Delta reports for a concurrent removal of a file it read, not with a permanent
"file missing" error (a retry reads the new version and succeeds)."""

from __future__ import annotations

import functools

from ..errors import DataFileMissingError
from ..foreign import as_delta_error

__all__ = ["reads_snapshot_files"]


def reads_snapshot_files(operation: str):
    """Decorate a command whose first argument is the snapshot it reads."""

    def decorate(command):
        @functools.wraps(command)
        def run(snapshot, *args, **kwargs):
            try:
                return command(snapshot, *args, **kwargs)
            except Exception as e:
                # a Spark task's error arrives as text in Spark's exception, whichever job raised it
                err = as_delta_error(e)
                if isinstance(err, DataFileMissingError):
                    from ..txn.conflicts import vanished_file_conflict

                    err = _in_log_terms(err, snapshot.table_root)
                    conflict = vanished_file_conflict(snapshot, err, operation)
                    if conflict is not None:
                        raise conflict from e
                if err is e:
                    raise
                raise err from e

        return run

    return decorate


def _in_log_terms(err: DataFileMissingError, table_root: str) -> DataFileMissingError:
    """``err`` naming the file as the log does (relative to the table root), when Spark's reader named
    it by its full location (``file:///root/part-1.parquet``)."""
    from ..reader import missing_data_file, missing_file_path

    path = missing_file_path(err)
    root = table_root.rstrip("/") + "/"
    bare = path.split("://", 1)[-1].lstrip("/") if path else ""
    if not path or not bare.startswith(root.split("://", 1)[-1].lstrip("/")):
        return err
    return missing_data_file(bare[len(root.split("://", 1)[-1].lstrip("/")) :], path)
