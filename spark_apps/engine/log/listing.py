"""Listing of ``_delta_log/`` and selection of the log segment for a version.

Rules (PROTOCOL.md, "Delta Log Entries" / "Checkpoints"):

* Files are recognised by EXACT name patterns only; anything else in ``_delta_log/`` (``.crc``,
  compacted ``<x>.<y>.compacted.json``, ``_last_checkpoint``, temp files such as
  ``.00000.json.tmp``, sub-directories like ``.tmp/``, ``_autostats/``, ``_sidecars/``) is ignored:

  ======================  =============================================================
  commit                  ``<v:020d>.json``
  classic checkpoint      ``<v:020d>.checkpoint.parquet`` (V1 content, or V2 content)
  multi-part checkpoint   ``<v:020d>.checkpoint.<part:010d>.<parts:010d>.parquet``
  UUID (V2) checkpoint    ``<v:020d>.checkpoint.<uuid>.json|parquet`` (sidecars live in
                          ``_delta_log/_sidecars/`` and are found through the checkpoint)
  ======================  =============================================================

* A multi-part checkpoint counts only when every part ``1..parts`` of one ``(version, parts)``
  set is present; incomplete sets (a crashed writer) are ignored.
* Segment for version ``v``: the newest complete checkpoint with version ``<= v`` plus the JSON
  commits ``checkpoint+1 .. v`` (``0 .. v`` without a checkpoint). The commits must be contiguous:
  a hole between available commits is a :class:`LogCorruptedError` naming the missing version.
  When the commits needed are missing at the *start* of the range (log cleanup removed them and no
  checkpoint covers the version), an explicitly requested version raises
  :class:`VersionNotFoundError`; the latest version raises :class:`LogCorruptedError`.
* No ``_delta_log`` or neither commits nor checkpoints -> :class:`TableNotFoundError`.
* When several complete checkpoints exist for one version, the one named by ``_last_checkpoint``
  is preferred, then a classic single file, then a UUID-named one, then a multi-part set.

The latest version is ``max(newest commit, newest complete checkpoint)``: a table whose commits
were cleaned up is still readable at its checkpoint version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LogCorruptedError, TableNotFoundError, VersionNotFoundError
from ..storage import FileInfo, Storage

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
CLASSIC_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
MULTIPART_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
COMPACTED_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
UUID_CHECKPOINT_RE = re.compile(
    r"^(\d{20})\.checkpoint\."
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.(json|parquet)$"
)

LOG_DIR_NAME = "_delta_log"
SIDECAR_DIR_NAME = "_sidecars"


def log_dir_of(storage: Storage, table_root: str) -> str:
    """``<table_root>/_delta_log``."""
    return storage.join(table_root, LOG_DIR_NAME)


def commit_file_name(version: int) -> str:
    """``00000000000000000007.json`` for version 7."""
    return f"{version:020d}.json"


def commit_path(storage: Storage, table_root: str, version: int) -> str:
    """The location of commit ``version`` of the table at ``table_root``."""
    return storage.join(log_dir_of(storage, table_root), commit_file_name(version))


def classic_checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def multipart_checkpoint_name(version: int, part: int, parts: int) -> str:
    return f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet"


@dataclass(frozen=True)
class LogFile(FileInfo):
    """One file of the log: a listed file (full path, size, mtime in ms) plus the version it holds."""

    version: int

    @classmethod
    def of(cls, version: int, f: FileInfo) -> LogFile:
        return cls(f.path, f.size, f.mtime_ms, version)


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint of a version.

    :ivar kind: ``"classic"`` (single ``.checkpoint.parquet``), ``"multipart"`` or ``"uuid"``.
    :ivar format: ``"parquet"`` or ``"json"`` (only UUID-named V2 checkpoints may be JSON).
    :ivar files: the part files, in part order (one file unless multi-part).
    """

    version: int
    kind: str
    format: str
    files: tuple[LogFile, ...]

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


@dataclass(frozen=True)
class Compaction:
    """A log compaction file ``<start>.<end>.compacted.json``: the reconciled actions of commits
    ``start..end`` (no commitInfo). ``file.version`` is ``end``: a replay reads it in their place."""

    start: int
    end: int
    file: LogFile


@dataclass
class LogListing:
    """Everything recognised in ``_delta_log/``.

    :ivar commits: commit files sorted by version (at most one per version).
    :ivar checkpoints: complete checkpoints sorted by version (several per version possible).
    :ivar last_checkpoint: the parsed ``_last_checkpoint`` hint, or ``None`` (missing/corrupt).
    """

    table_root: str
    log_dir: str
    commits: list[LogFile] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    last_checkpoint: dict | None = None
    compactions: list[Compaction] = field(default_factory=list)

    @property
    def commit_versions(self) -> list[int]:
        return [c.version for c in self.commits]

    @property
    def latest_version(self) -> int | None:
        best = self.commits[-1].version if self.commits else None
        if self.checkpoints:
            cp = self.checkpoints[-1].version
            best = cp if best is None else max(best, cp)
        return best

    @property
    def earliest_reconstructable_version(self) -> int | None:
        """The smallest version a snapshot can be built for (0, or the oldest checkpoint)."""
        if self.commits and self.commits[0].version == 0:
            return 0
        if self.checkpoints:
            return self.checkpoints[0].version
        return None

    def commit(self, version: int) -> LogFile | None:
        """The commit file of ``version`` or ``None``."""
        hit = self._commit_index().get(version)
        return hit[0] if hit else None

    def _commit_index(self) -> dict[int, tuple[LogFile]]:
        idx = getattr(self, "_idx", None)
        if idx is None or len(idx) != len(self.commits):
            idx = {c.version: (c,) for c in self.commits}
            self._idx = idx
        return idx

    def with_commit(self, version: int, info: FileInfo) -> LogListing | None:
        """This listing plus the next commit ``version`` (a committer's own, ``info`` from one
        ``file_info``): the log after that commit without listing it again; ``None`` when
        ``version`` is not the next one."""
        if self.latest_version != version - 1:
            return None
        commits = [*self.commits, LogFile.of(version, info)]
        return LogListing(
            self.table_root, self.log_dir, commits, self.checkpoints, self.last_checkpoint, self.compactions
        )

    def checkpoint_at_or_before(self, version: int) -> Checkpoint | None:
        """The preferred complete checkpoint with the highest version ``<= version``."""
        cands = [c for c in self.checkpoints if c.version <= version]
        if not cands:
            return None
        top = cands[-1].version
        same = [c for c in cands if c.version == top]
        return min(same, key=self._preference)

    def _preference(self, cp: Checkpoint) -> tuple:
        hinted = 1
        lc = self.last_checkpoint or {}
        if lc.get("version") == cp.version:
            v2 = lc.get("v2Checkpoint") or {}
            if v2.get("path") and cp.files[0].name == str(v2.get("path")).rsplit("/", 1)[-1]:
                hinted = 0
            elif lc.get("parts") and cp.kind == "multipart" and len(cp.files) == lc.get("parts"):
                hinted = 0
        kind_rank = {"classic": 0, "uuid": 1, "multipart": 2}[cp.kind]
        return (hinted, kind_rank, cp.files[0].name)


@dataclass(frozen=True)
class LogSegment:
    """The files needed to build the snapshot of ``version``.

    :ivar checkpoint: the checkpoint to start from, or ``None`` (replay from commit 0).
    :ivar commits: the JSON commits after the checkpoint, contiguous, ending at ``version``.
    """

    table_root: str
    log_dir: str
    version: int
    checkpoint: Checkpoint | None
    commits: tuple[LogFile, ...]

    @property
    def checkpoint_version(self) -> int | None:
        return self.checkpoint.version if self.checkpoint else None


def _classify(files: list[FileInfo]) -> tuple[list[LogFile], list[Checkpoint], list[Compaction]]:
    commits: dict[int, LogFile] = {}
    checkpoints: list[Checkpoint] = []
    compactions: list[Compaction] = []
    multipart: dict[tuple[int, int], dict[int, LogFile]] = {}
    for f in files:
        name = f.name
        if not name[:1].isdigit() or not name.endswith((".json", ".parquet")):  # .crc, temp files: no regex
            continue
        m = COMMIT_RE.match(name)
        if m:
            v = int(m.group(1))
            commits[v] = LogFile.of(v, f)
            continue
        m = CLASSIC_CHECKPOINT_RE.match(name)
        if m:
            v = int(m.group(1))
            checkpoints.append(Checkpoint(v, "classic", "parquet", (LogFile.of(v, f),)))
            continue
        m = MULTIPART_CHECKPOINT_RE.match(name)
        if m:
            v, part, parts = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if 1 <= part <= parts:
                multipart.setdefault((v, parts), {})[part] = LogFile.of(v, f)
            continue
        m = UUID_CHECKPOINT_RE.match(name)
        if m:
            v = int(m.group(1))
            checkpoints.append(Checkpoint(v, "uuid", m.group(3), (LogFile.of(v, f),)))
            continue
        m = COMPACTED_RE.match(name)
        if m and int(m.group(1)) < int(m.group(2)):
            start, end = int(m.group(1)), int(m.group(2))
            compactions.append(Compaction(start, end, LogFile.of(end, f)))
    for (v, parts), got in multipart.items():
        if len(got) == parts:  # complete set only
            checkpoints.append(Checkpoint(v, "multipart", "parquet", tuple(got[i] for i in range(1, parts + 1))))
    checkpoints.sort(key=lambda c: (c.version, c.kind, c.files[0].name))
    compactions.sort(key=lambda c: (c.start, c.end))
    return [commits[v] for v in sorted(commits)], checkpoints, compactions


def list_log(storage: Storage, table_root: str, *, read_hint: bool = True) -> LogListing:
    """List and classify ``<table_root>/_delta_log`` (one directory listing).

    :param read_hint: also read ``_last_checkpoint`` (a hint; missing/corrupt is fine).
    :raises TableNotFoundError: no ``_delta_log`` directory or nothing recognised in it.
    """
    log_dir = log_dir_of(storage, table_root)
    files = storage.list_dir(log_dir)
    listing = classify_log(table_root, log_dir, files)
    if read_hint and any(f.name == "_last_checkpoint" for f in files):
        from .last_checkpoint import read_last_checkpoint

        listing.last_checkpoint = read_last_checkpoint(storage, log_dir)
    return listing


def classify_log(table_root: str, log_dir: str, files: list[FileInfo]) -> LogListing:
    """The :class:`LogListing` of the files a listing of ``log_dir`` returned (no hint read), for a
    caller that needs the listing's other files too (cleanup): one listing serves both.

    :raises TableNotFoundError: nothing recognised in it.
    """
    commits, checkpoints, compactions = _classify(files)
    if not commits and not checkpoints:
        raise TableNotFoundError(
            f"No Delta table at '{table_root}'",
            "there is no _delta_log directory with a commit or checkpoint file"
            if not files
            else "_delta_log contains no commit (<version>.json) or checkpoint file",
            "check the table URI, or create the table first",
        )
    return LogListing(table_root, log_dir, commits, checkpoints, None, compactions)


def latest_version(storage: Storage, table_root: str, *, since: int | None = None) -> int | None:
    """The newest version of the table, or ``None`` when there is no table (yet).

    One directory listing, no file is read: cheap enough for a sensor that polls.

    :param since: list only the log's files of versions ``>= since`` (the storage's listing from
        that start key: a committer that read version ``since`` does not list the whole log again).
        The answer is the same whenever the newest version is ``>= since``; else ``None``.
    """
    if since is not None:
        # the names of versions >= since sort after "<since:020d>" (it is their prefix or smaller),
        # every older one before it; what else sorts after it (_last_checkpoint) is no log file
        files = storage.list_dir(log_dir_of(storage, table_root), start_after=f"{since:020d}")
        commits, checkpoints, _ = _classify(files)
        found = [c.version for c in commits[-1:]] + [c.version for c in checkpoints[-1:]]
        return max(found) if found else None
    try:
        return list_log(storage, table_root, read_hint=False).latest_version
    except TableNotFoundError:
        return None


def select_segment(listing: LogListing, version: int | None = None) -> LogSegment:
    """Pick the checkpoint and commits that reconstruct ``version`` (latest when ``None``).

    :raises VersionNotFoundError: the version does not exist or cannot be reconstructed any more.
    :raises LogCorruptedError: the commits needed are not contiguous.
    """
    latest = listing.latest_version
    explicit = version is not None
    if version is None:
        version = latest
    if version < 0 or version > latest:
        raise VersionNotFoundError(
            f"Version {version} of table '{listing.table_root}' does not exist",
            f"the table's versions end at {latest}",
            f"ask for a version between {listing.earliest_reconstructable_version} and {latest}",
        )
    cp = listing.checkpoint_at_or_before(version)
    start = cp.version + 1 if cp else 0
    idx = listing._commit_index()
    needed = range(start, version + 1)
    missing = [v for v in needed if v not in idx]
    if missing:
        present = [v for v in needed if v in idx]
        first_present = present[0] if present else None
        hole = [v for v in missing if first_present is not None and v > first_present]
        if hole:
            raise LogCorruptedError(
                f"Versions of table '{listing.table_root}' are not contiguous: "
                f"commit {hole[0]} ({commit_file_name(hole[0])}) is missing",
                f"the log has commits {first_present}..{version} with a gap at version {hole[0]} "
                f"(missing: {hole[:10]})",
                "restore the missing commit file from a backup; a Delta log must have every version",
            )
        earliest = listing.earliest_reconstructable_version
        if explicit:
            raise VersionNotFoundError(
                f"Version {version} of table '{listing.table_root}' cannot be reconstructed",
                f"commit {missing[0]} ({commit_file_name(missing[0])}) is gone (log cleanup) and no checkpoint "
                f"at or before version {version} exists",
                f"time travel to a version >= {earliest}" if earliest is not None else "restore the log from a backup",
            )
        raise LogCorruptedError(
            f"Table '{listing.table_root}' cannot be reconstructed at version {version}",
            f"commit {missing[0]} ({commit_file_name(missing[0])}) is missing and no checkpoint covers it",
            "restore the missing commit or checkpoint files from a backup",
        )
    return LogSegment(listing.table_root, listing.log_dir, version, cp, _with_compactions(listing, needed, idx))


def _with_compactions(listing: LogListing, needed: range, idx: dict) -> tuple[LogFile, ...]:
    """The files to replay for the commits ``needed``: each run of them that a compaction file covers
    read as that one file (the widest from each start), the rest as the commits themselves. The last
    commit is always read itself (its commitInfo is the snapshot's); every covered commit exists too
    (a compaction only stands in for a log that is whole)."""
    widest: dict[int, Compaction] = {}
    for c in listing.compactions:
        usable = needed.start <= c.start and c.end < needed.stop - 1
        if usable and (c.start not in widest or c.end > widest[c.start].end):
            widest[c.start] = c
    out: list[LogFile] = []
    v = needed.start
    while v < needed.stop:
        c = widest.get(v)
        if c is not None:
            out.append(c.file)
            v = c.end + 1
        else:
            out.append(idx[v][0])
            v += 1
    return tuple(out)
