"""Expired log cleanup (metadata cleanup), after delta-spark's ``MetadataCleanup``.

Algorithm (:func:`cleanup_expired_logs`):

1. ``threshold`` = ``now - delta.logRetentionDuration`` (default 30 days) truncated to midnight UTC.
2. Commit timestamps are the commit files' modification times made strictly increasing in version
   order (``ts[v] = max(mtime[v], ts[v-1] + 1)``), as delta-spark does, so a clock step back on
   one writer cannot expire a newer commit before an older one.
3. ``cutoff_version`` = newest commit with timestamp ``<= threshold``. The *protected checkpoint*
   is the newest complete checkpoint with version ``<= cutoff_version``. No such checkpoint ->
   nothing is deleted (the table must stay reconstructable).
4. Delete, oldest first: commits, ``.crc`` files and checkpoint files (any kind, incomplete
   multi-part sets included) with version ``<`` the protected checkpoint; compactions
   ``<x>.<y>.compacted.json`` with ``y <=`` it. The protected checkpoint, its commit and everything
   newer stay.
5. Sidecars (``_delta_log/_sidecars/``, V2 checkpoints) are deleted after the checkpoints, only
   when no remaining checkpoint references them and they are older than ``threshold`` and a day
   (:data:`SIDECAR_MIN_AGE_MS`: a checkpoint writer may be between its sidecars and its top-level
   file). If a remaining checkpoint's references cannot be read, no sidecar is deleted.
6. Orphan temp files (``.<name>.<uuid>.tmp``: the put-if-absent temp file of a commit or checkpoint
   whose writer was killed) older than the threshold are deleted whether or not step 3 found a
   checkpoint: nothing reads them, and a young table never has an old checkpoint. A young one is
   never deleted (see :data:`TEMP_FILE_MIN_AGE_MS`): its writer may be publishing it right now.

Deleting oldest first keeps the table readable at every step: a crash midway leaves a checkpoint
plus every later commit. Time travel to versions before the protected checkpoint is no longer
possible afterwards (that is the point of the retention setting).
"""

from __future__ import annotations

import re
import time

from ..config import MS_PER_DAY, TableProperties
from .listing import COMMIT_RE, SIDECAR_DIR_NAME, list_log, log_dir_of

_CRC_RE = re.compile(r"^(\d{20})\.crc$")
_CHECKPOINT_ANY_RE = re.compile(r"^(\d{20})\.checkpoint(\..+)?\.(parquet|json)$")
_COMPACTED_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_TEMP_RE = re.compile(r"^\..*\.tmp$")


def truncate_to_day(ms: int) -> int:
    """Midnight UTC at or before ``ms``."""
    return (ms // MS_PER_DAY) * MS_PER_DAY


# A temp file may belong to a commit being written right now: whatever the retention, it is only
# removed once it is older than this (a writer publishes its temp file within seconds).
TEMP_FILE_MIN_AGE_MS = 60 * 60 * 1000

#: an unreferenced sidecar younger than this may belong to a checkpoint being written: kept
SIDECAR_MIN_AGE_MS = MS_PER_DAY


def _sidecar_refs(storage, path: str) -> set[str] | None:
    """Names of the sidecars one checkpoint file references (``None`` when it cannot be read)."""
    import json
    from urllib.parse import unquote

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.endswith(".json"):
            refs = []
            for line in storage.read_bytes(path).decode("utf-8").splitlines():
                obj = json.loads(line) if line.strip() else {}
                if isinstance(obj, dict) and isinstance(obj.get("sidecar"), dict):
                    refs.append(obj["sidecar"].get("path"))
        else:
            with storage.open_input_file(path) as fh:
                pf = pq.ParquetFile(fh)
                if pf.schema_arrow.get_field_index("sidecar") < 0:
                    return set()
                refs = pf.read(columns=["sidecar.path"]).column("sidecar").to_pylist()
                refs = [r.get("path") for r in refs if r]
    except (OSError, ValueError, pa.ArrowException):
        return None
    return {unquote(str(r)).rsplit("/", 1)[-1] for r in refs if r}


def cleanup_expired_logs(
    storage,
    table_root: str,
    snapshot=None,
    *,
    now_ms: int | None = None,
    retention_ms: int | None = None,
    dry_run: bool = False,
) -> dict:
    """Delete log files older than the log retention that no snapshot at or after the protected
    checkpoint needs (see module doc).

    :param storage: table storage
    :param table_root: table location
    :param snapshot: a snapshot of the table (its metadata gives ``delta.logRetentionDuration``)
    :param now_ms: "now" (default: the clock)
    :param retention_ms: override the table's log retention
    :param dry_run: only report what would be deleted
    :returns: metrics: ``threshold_ms``, ``cutoff_version``, ``checkpoint_version``,
        ``num_deleted_commits``, ``num_deleted_checkpoint_files``, ``num_deleted_checksums``,
        ``num_deleted_compactions``, ``num_deleted_temp_files``, ``num_deleted_sidecars``,
        ``num_deleted_files``, ``deleted``
    """
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    if retention_ms is None:
        retention = TableProperties.of(getattr(snapshot, "metadata", None)).log_retention_ms
    else:
        retention = int(retention_ms)
    threshold = truncate_to_day(now_ms - retention)
    metrics = {
        "threshold_ms": threshold,
        "cutoff_version": None,
        "checkpoint_version": None,
        "num_deleted_commits": 0,
        "num_deleted_checkpoint_files": 0,
        "num_deleted_checksums": 0,
        "num_deleted_compactions": 0,
        "num_deleted_temp_files": 0,
        "num_deleted_sidecars": 0,
        "num_deleted_files": 0,
        "deleted": [],
        "dry_run": dry_run,
    }
    listing = list_log(storage, table_root, read_hint=False)
    ts_prev = None
    cutoff_version = None
    for c in listing.commits:
        ts = c.mtime_ms if ts_prev is None else max(c.mtime_ms, ts_prev + 1)
        ts_prev = ts
        if ts <= threshold:
            cutoff_version = c.version
        else:
            break
    metrics["cutoff_version"] = cutoff_version
    protected = listing.checkpoint_at_or_before(cutoff_version) if cutoff_version is not None else None
    # without a protected checkpoint no log file may go (the table must stay reconstructable), but
    # orphan temp files still do (step 5)
    keep_from = protected.version if protected is not None else None
    metrics["checkpoint_version"] = keep_from
    temp_cutoff = min(threshold, now_ms - TEMP_FILE_MIN_AGE_MS)

    doomed: list[tuple[int, int, str, str]] = []  # (version, kind order, path, metric)
    log_dir = log_dir_of(storage, table_root)
    kept_checkpoints: list[str] = []
    for f in storage.list_dir(log_dir):
        name = f.name
        if _TEMP_RE.match(name):
            if f.mtime_ms <= temp_cutoff:
                doomed.append((-1, 4, f.path, "num_deleted_temp_files"))
            continue
        m = _CHECKPOINT_ANY_RE.match(name)
        if m and (keep_from is None or int(m.group(1)) >= keep_from):
            kept_checkpoints.append(f.path)
            continue
        if keep_from is None:
            continue
        m = COMMIT_RE.match(name)
        if m:
            v = int(m.group(1))
            if v < keep_from:
                doomed.append((v, 0, f.path, "num_deleted_commits"))
            continue
        m = _CRC_RE.match(name)
        if m:
            v = int(m.group(1))
            if v < keep_from:
                doomed.append((v, 1, f.path, "num_deleted_checksums"))
            continue
        m = _CHECKPOINT_ANY_RE.match(name)
        if m:
            v = int(m.group(1))
            if v < keep_from:
                doomed.append((v, 2, f.path, "num_deleted_checkpoint_files"))
            continue
        m = _COMPACTED_RE.match(name)
        if m:
            end = int(m.group(2))
            if end <= keep_from:
                doomed.append((end, 3, f.path, "num_deleted_compactions"))
    doomed.sort()
    doomed += _unreferenced_sidecars(storage, log_dir, kept_checkpoints, min(threshold, now_ms - SIDECAR_MIN_AGE_MS))
    for _, _, path, key in doomed:
        if not dry_run:
            storage.delete(path)
        metrics[key] += 1
        metrics["num_deleted_files"] += 1
        metrics["deleted"].append(path)
    return metrics


def _unreferenced_sidecars(storage, log_dir: str, kept_checkpoints: list[str], older_than: int) -> list:
    """Sidecars no kept checkpoint references, modified at or before ``older_than`` (none at all if
    a kept checkpoint's references cannot be read)."""
    sidecars = [f for f in storage.list_dir(storage.join(log_dir, SIDECAR_DIR_NAME)) if f.mtime_ms <= older_than]
    if not sidecars:
        return []
    referenced: set[str] = set()
    for path in kept_checkpoints:
        refs = _sidecar_refs(storage, path)
        if refs is None:
            return []
        referenced |= refs
    return [(-1, 5, f.path, "num_deleted_sidecars") for f in sidecars if f.name not in referenced]
