"""Snapshot: the state of a Delta table at one version.

``load_snapshot(storage, table_root, version=None, timestamp_ms=None)``:

1. list ``_delta_log`` once (:func:`listing.list_log`; ``_last_checkpoint`` is only a hint);
2. resolve the version: latest, the given one, or for a timestamp the latest commit whose
   timestamp is ``<= timestamp_ms`` (see below);
3. select the segment (newest complete checkpoint ``<=`` version + contiguous later commits);
4. replay it vectorised (:mod:`.replay`). If the checkpoint turns out to be unreadable or
   incomplete (a missing sidecar/part, corrupt parquet), fall back to the next older checkpoint or
   to the JSON commits when they still cover the version; otherwise report the broken checkpoint.

Commit timestamps (time travel by timestamp, history): the ``inCommitTimestamp`` of the commit when
in-commit timestamps are enabled for that version (``delta.enableInCommitTimestamps=true`` in the
latest metadata, from ``delta.inCommitTimestampEnablementVersion`` on), otherwise the commit file's
modification time, made strictly increasing like Delta's ``DeltaHistoryManager`` does (a commit
whose mtime is not after its predecessor's gets predecessor + 1 ms). Time travel to a time before
``delta.inCommitTimestampEnablementTimestamp`` looks only at the versions before the enablement
version, a later time only at those from it on (PROTOCOL.md). A timestamp before the first
reconstructable commit raises :class:`VersionNotFoundError`, and so does one after the latest
commit's timestamp (delta-spark's rule: the version "as of" a time that has not been committed yet
would change when the next commit lands; its ``canReturnLastCommit`` mode, used by streaming, is not
offered here).

Errors: :class:`TableNotFoundError` (no ``_delta_log`` / no commits), :class:`VersionNotFoundError`
(version or timestamp cannot be reconstructed), :class:`LogCorruptedError` (gap in versions,
missing protocol/metaData, unreadable files).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from ..actions import (
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from ..config import TableProperties
from ..errors import DeltaError, InvalidArgumentError, LogCorruptedError, VersionNotFoundError
from ..features import in_commit_timestamps_active
from ..paths import confine_file_table
from ..storage import Storage, normalize_table_uri
from .checkpoint_read import CheckpointReadError
from .commit_read import commit_info_from_bytes
from .file_actions import FILE_SCHEMA, REMOVE_SCHEMA
from .listing import LogListing, LogSegment, commit_path, list_log, select_segment
from .replay import ReplayResult, replay

__all__ = [
    "Snapshot",
    "load_snapshot",
    "FILE_SCHEMA",
    "REMOVE_SCHEMA",
    "read_commit_infos",
    "commit_timestamps",
    "history",
    "load_table_metadata",
]


@dataclass(eq=False)
class Snapshot:
    """The reconstructed state of a table at :attr:`version` (see module docstring)."""

    storage: Storage
    table_root: str
    version: int
    log_segment: LogSegment
    protocol: Protocol
    metadata: Metadata
    files: pa.Table
    tombstones: pa.Table
    set_transactions: dict[str, SetTransaction] = field(default_factory=dict)
    domain_metadata: dict[str, DomainMetadata] = field(default_factory=dict)
    listing: LogListing | None = None
    _commit_info: CommitInfo | None = None
    _commit_info_loaded: bool = False
    _schema = None

    # ------------------------------------------------------------------ metadata views
    @property
    def schema_json(self) -> dict:
        """The table schema as the Delta JSON dict (``metaData.schemaString`` parsed)."""
        try:
            return json.loads(self.metadata.schema_string)
        except (TypeError, ValueError) as e:
            raise LogCorruptedError(
                f"The table's schema in its log (metaData.schemaString) is not valid JSON at version {self.version}",
                f"{type(e).__name__}: {e}; it starts with {str(self.metadata.schema_string)[:80]!r}",
                "repair the metaData action of the log (or RESTORE a version written before the damage)",
            ) from None

    @property
    def schema(self):
        """The table schema as ``schema.StructType`` (imported lazily)."""
        if self._schema is None:
            from ..schema import StructType

            self._schema = StructType.from_json(self.schema_json)
        return self._schema

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns or [])

    @property
    def configuration(self) -> dict:
        return dict(self.metadata.configuration or {})

    @cached_property
    def properties(self) -> TableProperties:
        """The table properties, typed (each parsed on first use; see :mod:`..config`)."""
        return TableProperties.of(self.metadata)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @property
    def size_in_bytes(self) -> int:
        if self.files.num_rows == 0:
            return 0
        return int(pc.sum(self.files.column("size")).as_py() or 0)

    @property
    def log_dir(self) -> str:
        return self.log_segment.log_dir

    # ------------------------------------------------------------------ commit info / time
    @property
    def commit_info(self) -> CommitInfo | None:
        """The ``commitInfo`` of this version's own commit (``None`` if it has none or is gone)."""
        if not self._commit_info_loaded:
            self._commit_info = read_commit_infos(self.storage, self.table_root, [self.version]).get(self.version)
            self._commit_info_loaded = True
        return self._commit_info

    @property
    def in_commit_timestamp(self) -> int | None:
        """This version's ``inCommitTimestamp`` (from its commitInfo) when in-commit timestamps are
        active at this version (protocol feature and ``delta.enableInCommitTimestamps``), else ``None``."""
        if not in_commit_timestamps_active(self.protocol, self.metadata):
            return None
        ci = self.commit_info
        ict = ci.in_commit_timestamp if ci is not None else None
        return int(ict) if ict is not None else None

    @property
    def timestamp(self) -> int | None:
        """This version's commit timestamp: :attr:`in_commit_timestamp` when there is one, else the
        commit file's modification time (``None`` when the commit file is gone)."""
        ict = self.in_commit_timestamp
        if ict is not None:
            return ict
        commits = self.log_segment.commits
        f = commits[-1] if commits and commits[-1].version == self.version else None
        if f is None and self.listing is not None:
            f = self.listing.commit(self.version)
        if f is not None:
            return f.mtime_ms
        try:
            return self.storage.file_info(commit_path(self.storage, self.table_root, self.version)).mtime_ms
        except FileNotFoundError:
            return None

    def commit_timestamps(self) -> list[tuple[int, int]]:
        """``[(version, timestamp_ms)]`` of every commit still in the log up to this version."""
        listing = self.listing or list_log(self.storage, self.table_root)
        return [(v, ts) for v, ts in commit_timestamps(self.storage, listing, self.metadata) if v <= self.version]

    # ------------------------------------------------------------------ slow paths
    def add_files(self) -> list[AddFile]:
        """Live files as :class:`AddFile` objects (one Python object per file: small uses only)."""
        return [add_from_row(r) for r in self.files.to_pylist(maps_as_pydicts="lossy")]

    def remove_files(self) -> list[RemoveFile]:
        """Tombstones as :class:`RemoveFile` objects (small uses only)."""
        return [_remove_from_row(r) for r in self.tombstones.to_pylist(maps_as_pydicts="lossy")]

    def file_paths(self) -> list[str]:
        return self.files.column("path").to_pylist()

    def __repr__(self) -> str:
        return (
            f"Snapshot(table_root={self.table_root!r}, version={self.version}, num_files={self.num_files}, "
            f"protocol=({self.protocol.min_reader_version},{self.protocol.min_writer_version}))"
        )


def _dv(d: dict | None) -> DeletionVectorDescriptor | None:
    return None if d is None else DeletionVectorDescriptor.from_json(d)


def add_from_row(r: dict) -> AddFile:
    """A FILE_SCHEMA row (snake_case columns = AddFile fields) as an AddFile."""
    from ..stats import STATS_PARSED

    r = {k: v for k, v in r.items() if k != STATS_PARSED}  # typed copy of ``stats``: not an AddFile field
    tags = r.get("tags")
    return AddFile(
        **{
            **r,
            # maps as dicts whichever way the row was made (``to_pylist()`` gives a list of pairs)
            "partition_values": dict(r["partition_values"] or {}),
            "tags": dict(tags) if tags else None,
            "deletion_vector": _dv(r["deletion_vector"]),
        }
    )


def _remove_from_row(r: dict) -> RemoveFile:
    """A REMOVE_SCHEMA row (snake_case columns = RemoveFile fields) as a RemoveFile."""
    return RemoveFile(
        **{
            **r,
            "partition_values": None if r.get("partition_values") is None else dict(r["partition_values"]),
            "tags": dict(r["tags"]) if r.get("tags") else None,
            "data_change": True if r["data_change"] is None else r["data_change"],
            "deletion_vector": _dv(r["deletion_vector"]),
        }
    )


# ---------------------------------------------------------------------------------------------
# loading


def snapshot_from_segment(storage: Storage, segment: LogSegment, listing: LogListing | None = None) -> Snapshot:
    """Replay ``segment`` into a :class:`Snapshot`.

    Every path the file table and the tombstones name is confined to the table root here, once
    (:func:`..paths.confine_file_table`), so no consumer of a snapshot can be handed a file outside it.
    """
    res: ReplayResult = replay(storage, segment.log_dir, segment.checkpoint, segment.commits)
    confine_file_table(segment.table_root, res.files)
    confine_file_table(segment.table_root, res.tombstones, kind="removed file")
    snap = Snapshot(
        storage=storage,
        table_root=segment.table_root,
        version=segment.version,
        log_segment=segment,
        protocol=res.protocol,
        metadata=res.metadata,
        files=res.files,
        tombstones=res.tombstones,
        set_transactions=res.set_transactions,
        domain_metadata=res.domain_metadata,
        listing=listing,
    )
    if segment.commits and segment.commits[-1].version == segment.version:
        snap._commit_info = res.commit_info
        snap._commit_info_loaded = True
    return snap


def load_snapshot(
    storage: Storage,
    table_root: str,
    version: int | None = None,
    timestamp_ms: int | None = None,
    *,
    listing: LogListing | None = None,
) -> Snapshot:
    """Load the snapshot of the table at ``table_root``.

    :param version: time travel to this version (default: latest).
    :param timestamp_ms: time travel to the latest commit at or before this time (ms since epoch);
        a time after the latest commit's is refused.
    :param listing: the log's listing the caller already holds (a committer's: the one its snapshot
        was loaded from plus its own commit, :meth:`.LogListing.with_commit`), instead of a new one.
    :raises TableNotFoundError: no Delta table there.
    :raises VersionNotFoundError: the version/timestamp cannot be reconstructed.
    :raises LogCorruptedError: the log breaks the protocol.
    """
    if version is not None and timestamp_ms is not None:
        raise InvalidArgumentError(
            "Cannot time travel by version and timestamp at once",
            f"both version={version} and timestamp_ms={timestamp_ms} were given",
            "pass only one of them",
        )
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise InvalidArgumentError(
            f"Invalid version {version!r}", "a table version is a non-negative integer", "pass an int"
        )
    if "://" not in table_root:
        table_root = normalize_table_uri(table_root)
    else:
        table_root = table_root.rstrip("/")
    if listing is None:
        listing = list_log(storage, table_root)
    if timestamp_ms is not None:
        version = version_at_timestamp(storage, listing, int(timestamp_ms))
    segment = select_segment(listing, version)
    try:
        return snapshot_from_segment(storage, segment, listing)
    except CheckpointReadError as first:
        # a broken/incomplete checkpoint: fall back to older checkpoints or the commits if possible
        remaining = [c for c in listing.checkpoints if c is not segment.checkpoint]
        while True:
            fallback = LogListing(
                listing.table_root, listing.log_dir, listing.commits, remaining, None, listing.compactions
            )
            try:
                seg = select_segment(fallback, segment.version)
            except DeltaError:
                raise first from None
            try:
                return snapshot_from_segment(storage, seg, listing)
            except CheckpointReadError:
                remaining = [c for c in remaining if c is not seg.checkpoint]


def load_table_metadata(storage: Storage, table_root: str, version: int | None = None) -> ReplayResult:
    """Protocol, metaData, txns, domain metadata (and the version's commitInfo) WITHOUT the file list.

    Same segment selection and errors as :func:`load_snapshot`, but file actions are skipped
    (no parsing of adds/removes, no sidecars): cheap for sensors, history and conflict checks.
    The result's ``files``/``tombstones`` are empty.
    """
    if "://" not in table_root:
        table_root = normalize_table_uri(table_root)
    listing = list_log(storage, table_root)
    seg = select_segment(listing, version)
    return replay(storage, seg.log_dir, seg.checkpoint, seg.commits, include_files=False)


# ---------------------------------------------------------------------------------------------
# commit infos, timestamps, history


def read_commit_infos(storage: Storage, table_root: str, versions) -> dict[int, CommitInfo]:
    """``{version: CommitInfo}`` for the given versions whose commit file exists and has one."""
    from .listing import commit_file_name, log_dir_of

    log_dir = log_dir_of(storage, table_root)
    out: dict[int, CommitInfo] = {}
    for v in versions:
        try:
            data = storage.read_bytes(storage.join(log_dir, commit_file_name(v)))
        except FileNotFoundError:
            continue
        ci = commit_info_from_bytes(data)
        if ci is not None:
            out[v] = ci
    return out


def _ict_metadata(storage: Storage, listing: LogListing) -> Metadata | None:
    """The latest metadata when the latest commit carries an ``inCommitTimestamp`` (a metadata-only
    replay), else ``None``: a table whose commits carry none needs no replay to time its commits."""
    commits = listing.commits
    if not commits:
        return None
    last = read_commit_infos(storage, listing.table_root, [commits[-1].version]).get(commits[-1].version)
    if last is None or last.in_commit_timestamp is None:
        return None
    seg = select_segment(listing, None)
    return replay(storage, seg.log_dir, seg.checkpoint, seg.commits, include_files=False).metadata


def _file_times(commits) -> dict[int, int]:
    """``{version: ms}``: commit file modification times made strictly increasing (as Delta's
    ``DeltaHistoryManager`` does: a time not after its predecessor's becomes predecessor + 1 ms)."""
    out: dict[int, int] = {}
    prev: int | None = None
    for c in commits:
        ts = c.mtime_ms if prev is None or c.mtime_ms > prev else prev + 1
        out[c.version] = ts
        prev = ts
    return out


def _ict_start(metadata: Metadata | None) -> int | None:
    """The first version timed by its ``inCommitTimestamp`` (0 when enabled at creation), or ``None``
    when the latest metadata does not enable in-commit timestamps."""
    props = TableProperties.of(metadata)
    if not props.enable_in_commit_timestamps:
        return None
    return props.in_commit_timestamp_enablement_version or 0


def commit_timestamps(
    storage: Storage, listing: LogListing, metadata: Metadata | None = None, versions=None
) -> list[tuple[int, int]]:
    """``[(version, timestamp_ms)]`` for the commit files in ``listing`` (see module docstring).

    :param metadata: the latest metadata (decides whether in-commit timestamps are enabled); when
        ``None`` the latest commit's ``commitInfo`` is inspected and, if it carries an
        ``inCommitTimestamp``, the latest metadata is loaded (metadata-only replay).
    :param versions: restrict the result (and the commit files read for ICT) to these versions.
    """
    commits = listing.commits
    if not commits:
        return []
    if metadata is None:
        metadata = _ict_metadata(storage, listing)
    start = _ict_start(metadata)
    wanted = None if versions is None else set(versions)
    mtimes = _file_times(commits)  # free: they come with the listing
    icts = {}
    if start is not None:
        ict_versions = [c.version for c in commits if c.version >= start and (wanted is None or c.version in wanted)]
        icts = read_commit_infos(storage, listing.table_root, ict_versions)
    out: list[tuple[int, int]] = []
    for c in commits:
        if wanted is not None and c.version not in wanted:
            continue
        ci = icts.get(c.version)
        ict = ci.in_commit_timestamp if ci is not None else None
        out.append((c.version, int(ict) if ict is not None else mtimes[c.version]))
    return out


def _when(ms: int) -> str:
    """``2026-01-01 12:00:00.000 UTC (1767268800000)``: a time in messages, readable and exact."""
    try:
        text = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, ValueError, OSError):  # beyond datetime's years: the number alone
        return f"{ms} ms since the epoch"
    return f"{text} UTC ({ms})"


def version_at_timestamp(
    storage: Storage, listing: LogListing, timestamp_ms: int, metadata: Metadata | None = None
) -> int:
    """The latest reconstructable version whose commit timestamp is ``<= timestamp_ms``; a time after
    the latest commit's timestamp raises :class:`VersionNotFoundError` (see the module docstring).

    With in-commit timestamps enabled after version 0 (PROTOCOL.md "Recommendations for Readers of
    Tables with In-Commit Timestamps"): a time at or after ``delta.inCommitTimestampEnablementTimestamp``
    considers only versions from ``delta.inCommitTimestampEnablementVersion`` on (by their
    ``inCommitTimestamp``, monotonic, so found by binary search: a few commit files read); an earlier
    time only the versions before it (by file modification time).
    """
    earliest = listing.earliest_reconstructable_version
    if metadata is None:
        metadata = _ict_metadata(storage, listing)
    mtimes = _file_times(listing.commits)
    start = _ict_start(metadata)
    icts: dict[int, int] = {}

    def stamp(version: int) -> int:
        if start is None or version < start:
            return mtimes[version]
        if version not in icts:
            ci = read_commit_infos(storage, listing.table_root, [version]).get(version)
            ict = ci.in_commit_timestamp if ci is not None else None
            icts[version] = int(ict) if ict is not None else mtimes[version]
        return icts[version]

    versions = [c.version for c in listing.commits if earliest is None or c.version >= earliest]
    if start is not None and start > 0:
        enabled_at = TableProperties.of(metadata).in_commit_timestamp_enablement_timestamp
        if enabled_at is None and start in mtimes:
            enabled_at = stamp(start)
        if enabled_at is not None and timestamp_ms < enabled_at:
            versions = [v for v in versions if v < start]
        else:
            versions = [v for v in versions if v >= start]
    if versions and versions[-1] == listing.commits[-1].version and timestamp_ms > stamp(versions[-1]):
        latest_version, latest_ts = versions[-1], stamp(versions[-1])
        raise VersionNotFoundError(
            f"The provided timestamp ({_when(timestamp_ms)}) is after the latest version available to "
            f"table '{listing.table_root}' (version {latest_version}, committed at {_when(latest_ts)})",
            "time travel by timestamp reads the commit at or before that time, and a time later than the "
            "latest commit's has no version yet: the answer would change when the next commit lands "
            "(Delta refuses it too)",
            f"use a timestamp at or before {_when(latest_ts)}, or read the latest version without a timestamp",
        )
    # the last version stamped at or before the time (stamps increase with the version)
    lo, hi = 0, len(versions)
    while lo < hi:
        mid = (lo + hi) // 2
        if stamp(versions[mid]) <= timestamp_ms:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        if versions:
            cause = f"the earliest available commit (version {versions[0]}) is at {_when(stamp(versions[0]))}"
        elif start:
            cause = (
                f"that is before in-commit timestamps were enabled (version {start}), and the log no longer "
                "holds a commit from before then"
            )
        else:
            cause = "the log has no commit files"
        raise VersionNotFoundError(
            f"No version of table '{listing.table_root}' exists at timestamp {_when(timestamp_ms)}",
            cause,
            "time travel to a later timestamp",
        )
    return versions[lo - 1]


def history(storage: Storage, table_root: str, limit: int | None = None) -> list[dict]:
    """Commit history, newest first: each ``commitInfo`` dict plus ``version`` and ``timestamp``.

    ``timestamp`` is the commit timestamp used for time travel (see module docstring); the
    writer's own ``commitInfo.timestamp`` stays available as ``commitInfoTimestamp`` when it differs.
    """
    if "://" not in table_root:
        table_root = normalize_table_uri(table_root)
    listing = list_log(storage, table_root)
    wanted = [c.version for c in reversed(listing.commits)]
    if limit is not None:
        wanted = wanted[: max(0, int(limit))]
    stamps = sorted(commit_timestamps(storage, listing, versions=wanted), reverse=True) if wanted else []
    infos = read_commit_infos(storage, table_root, [v for v, _ in stamps])
    out = []
    for v, ts in stamps:
        ci = infos.get(v)
        d = dict(ci.values) if ci else {}
        if "timestamp" in d and d["timestamp"] != ts:
            d["commitInfoTimestamp"] = d["timestamp"]
        d["version"] = v
        d["timestamp"] = ts
        out.append(d)
    return out
