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
6. **Checkpoint protection** (the ``checkpointProtection`` writer feature, Delta's RFC and
   delta-spark's ``MetadataCleanup.metadataCleanupAllowed``): with
   ``delta.requireCheckpointProtectionBeforeVersion`` = P, a cleanup whose protected checkpoint is
   before P (it would truncate history only partly before P) runs only when this engine supports
   (reads and writes) the protocol of every version it removes and of the checkpoint it keeps;
   otherwise no commit or checkpoint is deleted (``protection_skipped`` says why). A cleanup up to
   P or past it runs in one go. Within one version the commit goes before its checkpoint (rule d).
7. Orphan temp files (``.<name>.<uuid>.tmp``: the put-if-absent temp file of a commit or checkpoint
   whose writer was killed) older than the threshold are deleted whether or not step 3 found a
   checkpoint: nothing reads them, and a young table never has an old checkpoint. A young one is
   never deleted (see :data:`TEMP_FILE_MIN_AGE_MS`): its writer may be publishing it right now.

Before anything is deleted the table's own protocol must be one this engine writes
(:func:`..features.check_write_supported`: cleanup is a writer operation, the
``vacuumProtocolCheck`` rule applied to every path that deletes files).

Deleting oldest first keeps the table readable at every step: a crash midway leaves a checkpoint
plus every later commit. Time travel to versions before the protected checkpoint is no longer
possible afterwards (that is the point of the retention setting).
"""

from __future__ import annotations

import re
import time

from ..config import MS_PER_DAY, TableProperties
from .listing import COMMIT_RE, SIDECAR_DIR_NAME, classify_log, commit_file_name, log_dir_of

#: the table property of the ``checkpointProtection`` feature (Delta's name)
PROTECTION_PROPERTY = "delta.requireCheckpointProtectionBeforeVersion"

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


def checkpoint_protection_version(protocol, metadata) -> int:
    """``delta.requireCheckpointProtectionBeforeVersion`` when the protocol has ``checkpointProtection``
    (0: nothing protected), as delta-spark's ``getCheckpointProtectionVersion``."""
    if protocol is None or "checkpointProtection" not in (protocol.writer_features or ()):
        return 0
    raw = ((getattr(metadata, "configuration", None) or {}).get(PROTECTION_PROPERTY) or "0").strip()
    try:
        return max(0, int(raw))
    except ValueError:
        from ..errors import LogCorruptedError

        raise LogCorruptedError(
            f"The table's {PROTECTION_PROPERTY} is '{raw}', not a version",
            "checkpointProtection needs it to know which checkpoints it protects",
            f"set {PROTECTION_PROPERTY} to a version number with the engine that dropped the feature",
        ) from None


def _protocols_supported(storage, table_root: str, first: int, last: int) -> str | None:
    """None when this engine writes the protocol (with its metadata) of every version from
    ``first`` to ``last``; else why not. Commits that carry neither protocol nor metaData are
    skipped unparsed."""
    from .. import features
    from ..actions import Metadata, Protocol
    from ..errors import DeltaError
    from .commit_read import read_commit
    from .snapshot import load_table_metadata

    try:
        state = load_table_metadata(storage, table_root, first)
        protocol, metadata = state.protocol, state.metadata
        features.check_write_supported(protocol, metadata)
        log_dir = log_dir_of(storage, table_root)
        for v in range(first + 1, last + 1):
            data = storage.read_bytes(storage.join(log_dir, commit_file_name(v)))
            if b'"metaData"' not in data and b'"protocol"' not in data:
                continue
            for a in read_commit(v, data).actions:
                if isinstance(a, Protocol):
                    protocol = a
                elif isinstance(a, Metadata):
                    metadata = a
            features.check_write_supported(protocol, metadata)
    except (DeltaError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


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
        ``num_deleted_files``, ``deleted``, ``protection_skipped`` (why checkpoint protection kept
        the commits and checkpoints, or None)
    """
    from .. import features

    if snapshot is None:
        from .snapshot import load_table_metadata

        snapshot = load_table_metadata(storage, table_root)
    # a writer operation: the table's protocol must be one this engine writes (vacuumProtocolCheck)
    features.check_write_supported(snapshot.protocol, snapshot.metadata)
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
        "protection_skipped": None,
    }
    log_dir = log_dir_of(storage, table_root)
    files = storage.list_dir(log_dir)  # one listing: what to keep, then what goes
    listing = classify_log(table_root, log_dir, files)
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
    protect_before = checkpoint_protection_version(snapshot.protocol, snapshot.metadata)
    if keep_from is not None and keep_from < protect_before and listing.commits:
        # a partial truncation before the protected version: only over protocols we support
        first = min(listing.commits[0].version, keep_from)
        why = _protocols_supported(storage, table_root, first, keep_from)
        if why is not None:
            metrics["protection_skipped"] = (
                f"checkpointProtection: {PROTECTION_PROPERTY} is {protect_before} and this cleanup would "
                f"truncate only up to version {keep_from}, over versions whose protocol this engine does "
                f"not support ({why})"
            )
            keep_from = None
    metrics["checkpoint_version"] = keep_from
    temp_cutoff = min(threshold, now_ms - TEMP_FILE_MIN_AGE_MS)

    doomed: list[tuple[int, int, str, str]] = []  # (version, kind order, path, metric)
    kept_checkpoints: list[str] = []
    for f in files:
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
