"""Which commit carries an application's SetTransaction (``txn``), and what it wrote.

An idempotent writer commits ``txn {appId, version}`` with its data. Later, three things need that
commit back from the log, not just the txn version a snapshot keeps:

* a retried Airflow task reports the earlier commit (its version and operationMetrics) instead of
  applying twice, without submitting anything;
* when a spark-submit's result is lost (cluster deploy mode, a killed client after the commit), the
  hook recovers the result from the commit;
* an append re-run after a clear replaces what the same task instance appended before: the adds of
  its earlier commit, if they are still live as written.

Commits are scanned from the newest version down: a cheap byte search for the application id first,
then one commit parse where it appears; the scan stops at the first commit holding the txn, at the
oldest commit still in the log, or (when the txn's ``lastUpdated`` is known) at commits written an hour
before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

__all__ = ["AppCommit", "find_app_commit", "first_removal"]

#: commits older than the txn's lastUpdated by more than this are not searched (clock slack)
_SLACK_MS = 3_600_000


@dataclass(frozen=True)
class AppCommit:
    """The commit at ``version`` carrying ``txn(app_id, txn_version)``: its commitInfo (wire form, or
    None) and its adds (``FILE_SCHEMA`` rows)."""

    version: int
    app_id: str
    txn_version: int
    commit_info: dict | None
    adds: pa.Table

    @property
    def operation(self) -> str | None:
        return (self.commit_info or {}).get("operation")

    @property
    def operation_metrics(self) -> dict:
        """The commit's operationMetrics as numbers where they are numbers (Delta writes strings)."""
        out = {}
        for k, v in ((self.commit_info or {}).get("operationMetrics") or {}).items():
            try:
                out[k] = int(v)
            except (TypeError, ValueError):
                out[k] = v
        return out


def _mentions(data: bytes, app_id: str) -> bool:
    plain = app_id.encode("utf-8")
    escaped = json.dumps(app_id)[1:-1].encode("utf-8")
    return plain in data or escaped in data


def find_app_commit(
    storage,
    table_root: str,
    app_id: str,
    *,
    newest_version: int,
    app_version: int | None = None,
    last_updated: int | None = None,
    partition_keys: list[str] | None = None,
) -> AppCommit | None:
    """The newest commit at or below ``newest_version`` carrying a txn for ``app_id`` (with exactly
    ``app_version`` when given), or None when the log (as far as it still goes back) has none."""
    from ..actions import CommitInfo, SetTransaction
    from .commit_read import read_commit
    from .listing import commit_file_name, log_dir_of

    log_dir = log_dir_of(storage, table_root)
    for version in range(newest_version, -1, -1):
        try:
            data = storage.read_bytes(storage.join(log_dir, commit_file_name(version)))
        except FileNotFoundError:
            return None  # older commits were cleaned up (or never existed)
        if not _mentions(data, app_id):
            if last_updated is not None and _written_before(data, last_updated - _SLACK_MS):
                return None
            continue
        c = read_commit(version, data, partition_keys=partition_keys)
        for a in c.actions:
            if isinstance(a, SetTransaction) and a.app_id == app_id:
                if app_version is not None and a.version != app_version:
                    break
                info = next((x for x in c.actions if isinstance(x, CommitInfo)), None)
                return AppCommit(version, app_id, a.version, info.to_json() if info else None, c.adds)
    return None


def _written_before(data: bytes, ms: int) -> bool:
    """Whether the commit's commitInfo timestamp (first line, by convention) is before ``ms``."""
    first = data.split(b"\n", 1)[0]
    try:
        info = json.loads(first).get("commitInfo")
        ts = int(info.get("inCommitTimestamp") or info.get("timestamp"))
    except (ValueError, AttributeError, TypeError):
        return False
    return ts < ms


def first_removal(storage, table_root: str, paths: pa.Array, *, after: int, newest_version: int) -> int | None:
    """The first version after ``after`` (up to ``newest_version``) whose commit removes one of
    ``paths`` (as written in the log), or None."""
    import pyarrow.compute as pc

    from .commit_read import read_commit
    from .listing import commit_file_name, log_dir_of

    log_dir = log_dir_of(storage, table_root)
    for version in range(after + 1, newest_version + 1):
        try:
            data = storage.read_bytes(storage.join(log_dir, commit_file_name(version)))
        except FileNotFoundError:
            continue
        if b'"remove"' not in data:
            continue
        removes = read_commit(version, data).removes
        if removes.num_rows and pc.any(pc.is_in(removes.column("path"), value_set=paths)).as_py():
            return version
    return None
