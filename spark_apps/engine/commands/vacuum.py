"""VACUUM: delete the files under the table root that no version inside the retention needs.

A file is deleted only when all of these hold:

1. it is not needed: no live file of the snapshot, no tombstone not yet expired (removed less than
   the retention ago: every version inside the retention still reads it) and no deletion vector of
   either names it;
2. it is older than the retention by modification time: a concurrent writer's not yet committed
   file, and every file a commit newer than this snapshot added, is young, so it is never deleted;
3. it is under the table root and not hidden as delta-spark defines it (``_delta_log``, names
   starting with ``_`` or ``.``, except partition directories ``col=v``, ``_change_data`` and
   ``_delta_index``; see :func:`..storage.hidden_mask`).

``mode="full"`` lists the root (the storage's recursive listing, one Arrow table) and so also finds
files no commit ever named (failed writes). ``mode="lite"`` (Delta 3.3's VACUUM LITE) takes its
candidates from the removes of the log's JSON commits instead, which needs every commit since the
last VACUUM (or since version 0): when log cleanup took some, it refuses, naming the versions.

``keep_versions=[...]`` (deltalake's name and meaning): every file those versions read (their live
files and deletion vectors) is kept whatever its age, so time travel to them works after VACUUM.
Each must be a version of the table up to the snapshot's.

``inventory`` (delta-spark's ``VACUUM ... USING INVENTORY``): the path of a Delta table, or of a
parquet file or directory, with delta-spark's columns ``path`` (string, the full location),
``length`` (long), ``isDir`` (boolean), ``modificationTime`` (long, ms), e.g. an S3 Inventory
report reshaped to them; it replaces full mode's listing. As in delta-spark, rows whose path is not
under the table root, directories and hidden paths are ignored, and a path listed twice counts with
its newest modification time. It is read in batches (gathered to the needed files' count); each
one's set difference against the needed files is one Arrow ``is_in``, so memory holds the needed
files and the candidates, never the inventory.

The retention defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter one is refused
unless ``enforce_retention_duration=False``. A run commits ``VACUUM START`` and ``VACUUM END``
(commitInfo only, Delta's operationParameters and metrics) around the deletes, which run in
parallel; empty directories left behind are removed. ``dry_run=True`` only reports.

``vacuumProtocolCheck``: the writer gate (:func:`..features.check_write_supported`) runs on every
table before anything is planned, and again on the ``VACUUM START`` version when another commit
landed in between (a protocol change there may protect files we would delete).

**Against RESTORE and other writers** (Delta's own VACUUM is not transactional; this one is): no
interleaving deletes a file that a committed version references, at any retention the check allows.

* A running VACUUM holds a lease, ``<table>/_delta_vacuum/<id>.json``, written before it plans and
  renewed every minute while it works; it deletes a file only while its lease is fresh (renewed less
  than ``LEASE_TTL_MS - LEASE_MARGIN_MS`` ago: a stalled process stops deleting before others may
  think it dead). RESTORE refuses, retryably, while a fresh lease exists (:func:`vacuums_in_flight`).
* A RESTORE that read the table before the lease existed and commits after ``VACUUM START`` conflicts
  on that commit (``conflicts.check_vacuum``).
* What committed between the plan's snapshot and ``VACUUM START`` (a RESTORE, an OPTIMIZE, any
  writer) is re-read before deleting: the plan drops every file the ``VACUUM START`` version needs.

With the retention check off at retention 0, files of transactions still in flight (written, not yet
committed when ``VACUUM START`` lands) may be deleted, as Delta documents.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from ..commit_identity import TxnIdentity
from ..errors import ConcurrentVacuumError, InvalidArgumentError
from ..paths import new_file_location
from ..threads import ThreadPool
from ..values import parse_retention_hours, parse_version
from .base import Command, command_result
from .result import CommandResult, Stopwatch, VacuumMetrics

__all__ = ["vacuum", "check_time_travel", "vacuums_in_flight", "MODES"]

MODES = ("full", "lite")
#: directories VACUUM cleans although their names start with "_" (delta-spark's rule)
NOT_HIDDEN = ("_change_data", "_delta_index")
_DELETE_THREADS = 16
#: a running VACUUM's lease (see the module docstring): where, how long it counts, how often renewed
LEASE_DIR = "_delta_vacuum"
LEASE_TTL_MS = 10 * 60_000
LEASE_RENEW_MS = 60_000
#: a VACUUM stops deleting this long before its lease would expire (a stall, clocks apart)
LEASE_MARGIN_MS = 3 * 60_000


class Lease:
    """This VACUUM's lease file, renewed by a daemon thread until :meth:`release`."""

    def __init__(self, storage, root: str, clock=None):
        self.storage = storage
        self.path = new_file_location(root, f"{LEASE_DIR}/{uuid.uuid4().hex}.json")
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.renewed_ms = 0
        self._stop = threading.Event()
        self.renew()
        self._thread = threading.Thread(target=self._loop, name="delta-vacuum-lease", daemon=True)
        self._thread.start()

    def renew(self) -> None:
        now = self.clock()  # taken before the write: the lease counts from no later than this
        body = {"renewed_ms": now, "ttl_ms": LEASE_TTL_MS, "host": socket.gethostname(), "pid": os.getpid()}
        self.storage.write_bytes(self.path, json.dumps(body).encode(), overwrite=True)
        self.renewed_ms = now

    def _loop(self) -> None:
        while not self._stop.wait(LEASE_RENEW_MS / 1000):
            try:
                self.renew()
            except Exception:  # a failed renewal only makes deletes stop sooner (fresh() turns false)
                pass

    def fresh(self) -> bool:
        return self.clock() < self.renewed_ms + LEASE_TTL_MS - LEASE_MARGIN_MS

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.storage.delete(self.path, missing_ok=True)
        except Exception:  # left behind, it stops counting after LEASE_TTL_MS
            pass


def vacuums_in_flight(storage, root: str, now_ms: int | None = None) -> list[dict]:
    """The leases of VACUUMs that may be deleting now (renewed less than their TTL ago); an
    unreadable lease (being written) counts by its file's modification time."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out = []
    for info in storage.list_dir(new_file_location(root, LEASE_DIR)):
        try:
            body = json.loads(storage.read_bytes(info.path))
            renewed, ttl = int(body["renewed_ms"]), int(body.get("ttl_ms", LEASE_TTL_MS))
        except FileNotFoundError:
            continue
        except Exception:
            body, renewed, ttl = {}, info.mtime_ms, LEASE_TTL_MS
        if now_ms < renewed + ttl:
            out.append({**body, "path": info.path, "renewed_ms": renewed, "ttl_ms": ttl})
    return out


def refuse_while_vacuum_runs(snapshot, operation: str, now_ms: int | None = None) -> None:
    """Before ``operation`` brings back files the latest version no longer has: refuse (retryably)
    while a VACUUM may be deleting them."""
    live = vacuums_in_flight(snapshot.storage, snapshot.table_root, now_ms)
    if not live:
        return
    lease = live[0]
    raise ConcurrentVacuumError(
        f"{operation} would bring back removed files while a VACUUM is running on this table",
        f"VACUUM on {lease.get('host', '?')} (pid {lease.get('pid', '?')}) holds {lease['path']}, renewed "
        f"{max(0, (int(time.time() * 1000) if now_ms is None else now_ms) - lease['renewed_ms']) // 1000} s ago; "
        "it may delete files this operation needs",
        f"retry after the VACUUM ends (a VACUUM whose process died stops counting {LEASE_TTL_MS // 60_000} "
        "minutes after its last renewal)",
    )


def _retention_ms(snapshot, retention_hours, enforce: bool) -> int:
    default = snapshot.properties.deleted_file_retention_ms
    if retention_hours is None:
        return default
    ms = int(parse_retention_hours(retention_hours) * 3_600_000)  # finite, 0 to 100 years
    if enforce and ms < default:
        raise InvalidArgumentError(
            f"VACUUM with a retention of {retention_hours} hours is refused: the table's "
            f"delta.deletedFileRetentionDuration is {default / 3_600_000:g} hours",
            "a shorter retention can delete files that a running reader, a time travel or a concurrent "
            "writer's snapshot still needs",
            "keep the default, or pass enforce_retention_duration=False if no reader or writer can be "
            "working on an older version",
        )
    return ms


def _needed(snapshot, cutoff_ms: int, kept: pa.Array | None = None) -> pa.Array:
    """Full locations (unique, Arrow) of every file a version inside the retention reads: live files,
    unexpired tombstones, and the deletion vectors of both; plus ``kept`` (the keep_versions' files)."""
    from ..dv import dv_file_path
    from ..paths import file_locations

    files, tomb = snapshot.files, snapshot.tombstones
    if tomb.num_rows:
        ts = pc.fill_null(tomb.column("deletion_timestamp"), 0)
        tomb = tomb.filter(pc.greater(ts, cutoff_ms))
    needed = file_locations(snapshot.table_root, files.column("path"))
    needed += file_locations(snapshot.table_root, tomb.column("path"))
    for t in (files, tomb):
        if "deletion_vector" in t.column_names and t.column("deletion_vector").null_count < t.num_rows:
            for dv in t.column("deletion_vector").to_pylist():
                if dv and dv.get("storageType") in ("u", "p"):
                    needed.append(dv_file_path(snapshot.table_root, dv))
    arrays = [pa.array(needed, pa.string())] + ([kept] if kept is not None else [])
    return pc.unique(pa.concat_arrays(arrays))


def _as_list(values) -> list:
    """One value or several: a list (a string is one value, ``"3"``, or several, ``"3,7"``)."""
    if isinstance(values, str):
        return [v for v in values.split(",") if v.strip()]
    return list(values) if hasattr(values, "__iter__") else [values]


def _kept_files(snapshot, keep_versions) -> pa.Array | None:
    """The files (and deletion vectors) the ``keep_versions`` read, as full locations; each version
    checked first (an int, at most the snapshot's version, still in the log)."""
    from ..errors import DeltaError
    from ..log.snapshot import load_snapshot

    if keep_versions is None:
        return None
    keep_versions = _as_list(keep_versions)
    versions = [parse_version(v, "keep_versions") for v in keep_versions]
    out = []
    for v in sorted(set(versions)):
        if v < 0 or v > snapshot.version:
            raise InvalidArgumentError(
                f"keep_versions names version {v}, which the table does not have",
                f"the table's versions end at {snapshot.version}",
                f"keep versions from 0 to {snapshot.version} that the log still holds",
            )
        try:
            old = load_snapshot(snapshot.storage, snapshot.table_root, version=v)
        except DeltaError as e:
            raise InvalidArgumentError(
                f"keep_versions names version {v}, which can no longer be read",
                str(e),
                "keep only versions that time travel can still read (log cleanup removed older ones)",
            ) from e
        # its live files and their deletion vectors: the tombstone cutoff is never reached at 2**62
        out.append(_needed(old, 2**62))
    return pc.unique(pa.concat_arrays(out)) if out else pa.array([], pa.string())


def _listed(storage, root: str) -> pa.Table:
    """``path`` (full location), ``size``, ``mtime_ms`` of every file VACUUM may judge (full mode)."""
    t = storage.list_files(root, skip_hidden=True, not_hidden=NOT_HIDDEN)
    if not t.num_rows:
        return t
    prefix = root.rstrip("/") + "/"
    return t.set_column(0, "path", pc.binary_join_element_wise(prefix, t.column("path"), ""))


def _lite_candidates(snapshot, cutoff_ms: int) -> pa.Table:
    """Full mode's listing for lite mode: the files the log's JSON commits removed (and their DVs),
    which still exist. Refused when the log no longer holds every commit since the last VACUUM."""
    from ..dv import dv_file_path
    from ..log.commit_read import read_commit
    from ..log.listing import commit_file_name, list_log, log_dir_of
    from ..paths import file_locations

    storage, root = snapshot.storage, snapshot.table_root
    log_dir = log_dir_of(storage, root)
    versions = sorted(c.version for c in list_log(storage, root).commits if c.version <= snapshot.version)
    last_vacuum = None
    removed: list[str] = []
    for v in versions:
        data = storage.read_bytes(storage.join(log_dir, commit_file_name(v)))
        c = read_commit(v, data)
        info = next((a for a in c.actions if type(a).__name__ == "CommitInfo"), None)
        if info is not None and info.operation == "VACUUM END":
            last_vacuum = v
        if c.removes.num_rows:
            removed.extend(file_locations(root, c.removes.column("path")))
            for dv in c.removes.column("deletion_vector").to_pylist():
                if dv and dv.get("storageType") in ("u", "p"):
                    removed.append(dv_file_path(root, dv))
    needed_from = (last_vacuum + 1) if last_vacuum is not None else 0
    earliest = versions[0] if versions else None
    if earliest is None or (earliest > needed_from and (last_vacuum is None or last_vacuum < earliest)):
        since = "the table's first commit" if last_vacuum is None else f"the last VACUUM (version {last_vacuum})"
        raise InvalidArgumentError(
            "VACUUM LITE cannot find every removed file in the log",
            f"it needs the commits since {since}, version {needed_from}, but the oldest commit left is "
            f"version {earliest} (log cleanup removed the others)",
            "run VACUUM with mode='full' once (it lists the table's files instead); later lite runs work again",
        )
    paths, sizes, mtimes = [], [], []
    for p in sorted(set(removed)):
        try:
            info = storage.file_info(p)
        except FileNotFoundError:
            continue
        paths.append(p)
        sizes.append(info.size)
        mtimes.append(info.mtime_ms)
    return pa.table(
        {
            "path": pa.array(paths, pa.string()),
            "size": pa.array(sizes, pa.int64()),
            "mtime_ms": pa.array(mtimes, pa.int64()),
        }
    )


def _empty_dirs(storage, root: str, deleted: list[str]) -> int:
    """Remove the directories (under the root, never the root or ``_delta_log``) that the deletes
    left empty, deepest first; how many were removed."""
    root = root.rstrip("/")
    dirs = set()
    for p in deleted:
        d = p.rsplit("/", 1)[0]
        while d.startswith(root + "/") and d != root:
            dirs.add(d)
            d = d.rsplit("/", 1)[0]
    removed = 0
    for d in sorted(dirs, key=lambda x: -x.count("/")):
        if "/_delta_log" in d[len(root) :]:
            continue
        if storage.remove_empty_dir(d):
            removed += 1
    return removed


class _Metrics(dict):
    """operationMetrics of VACUUM START / END, rendered as given (Delta's names)."""

    def to_operation_metrics(self) -> dict:
        return dict(self)


INVENTORY_COLUMNS = {"path": pa.string(), "length": pa.int64(), "isDir": pa.bool_(), "modificationTime": pa.int64()}


def _inventory_batches(location: str, storage_options: dict | None = None):
    """A function that yields the inventory's batches (only its four columns, in their types),
    after checking, before anything is written, that it exists and has delta-spark's columns."""
    import pyarrow.parquet as pq

    from .. import features
    from ..log.listing import latest_version
    from ..log.snapshot import load_snapshot
    from ..reader import read_files_batches
    from ..storage import storage_for, table_location

    loc = table_location(location)
    st = storage_for(loc, **(storage_options or {}))
    names = list(INVENTORY_COLUMNS)
    if latest_version(st, loc) is not None:  # a Delta table: its live rows
        snap = load_snapshot(st, loc)
        features.check_read_supported(snap.protocol, snap.metadata)
        have = {f.name: f.type.to_arrow() for f in snap.schema.fields}

        def batches():
            mode = snap.properties.column_mapping_mode_for(snap.schema)
            yield from read_files_batches(
                st, loc, snap.files, snap.schema, snap.metadata.partition_columns, names, column_mapping_mode=mode
            )
    else:
        try:
            files = [st.file_info(loc).path]  # one parquet file
        except (FileNotFoundError, IsADirectoryError):  # a directory (a prefix) of them
            files = [f"{loc.rstrip('/')}/{p}" for p in st.list_files(loc, skip_hidden=True).column("path").to_pylist()]
        files = [f for f in files if not f.endswith(".crc")]
        if not files:
            raise InvalidArgumentError(
                f"VACUUM inventory '{location}' holds nothing",
                "it is neither a Delta table nor a parquet file or a directory of them",
                "pass the path of the inventory's Delta table or parquet files",
            )
        with st.open_input_file(files[0]) as fh:
            have = {f.name: f.type for f in pq.ParquetFile(fh).schema_arrow}

        def batches():
            for f in files:
                with st.open_input_file(f) as fh:
                    for b in pq.ParquetFile(fh).iter_batches(batch_size=65_536, columns=names):
                        yield pa.Table.from_batches([b])

    kinds = {
        "path": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        "length": pa.types.is_integer,
        "isDir": pa.types.is_boolean,
    }
    kinds["modificationTime"] = pa.types.is_integer
    bad = [n for n, ok in kinds.items() if n not in have or not ok(have[n])]
    if bad:
        raise InvalidArgumentError(
            f"VACUUM inventory '{location}' does not have the inventory's columns",
            f"{', '.join(bad)} missing or of another type (it has {', '.join(f'{n} {t}' for n, t in have.items())})",
            "give a table with path STRING (the full location), length LONG, isDir BOOLEAN, "
            "modificationTime LONG (milliseconds), as delta-spark's VACUUM ... USING INVENTORY",
        )

    def typed():
        for t in batches():
            yield t.select(names).cast(pa.schema(list(INVENTORY_COLUMNS.items())))

    return typed


def _inventory_candidates(batches, root: str, needed: pa.Array) -> pa.Table:
    """Full mode's listing taken from an inventory (delta-spark's ``getFilesFromInventory``): its
    files under the root, not hidden, not needed; a path listed twice with its newest time."""
    from ..storage import hidden_mask, is_local

    prefixes = [root.rstrip("/") + "/"]
    if is_local(root):  # a local inventory may name files as Spark does, file:/ or file:///
        prefixes += ["file:" + prefixes[0], "file://" + prefixes[0]]
    # is_in hashes its value set on every call: batches are gathered to at least the needed files'
    # count, so the inventory costs about two hash passes over its rows whatever the batch size
    chunk = max(65_536, len(needed))
    parts, pending, rows = [], [], 0

    def flush():
        t = pa.concat_tables(pending)
        pending.clear()
        parts.append(t.filter(pc.invert(pc.is_in(t.column("path"), value_set=needed))))

    for t in batches():
        t = t.filter(pc.invert(pc.fill_null(t.column("isDir"), False)))
        for prefix in prefixes:
            under = t.filter(pc.fill_null(pc.starts_with(t.column("path"), prefix), False))
            if not under.num_rows:
                continue
            rel = pc.utf8_slice_codeunits(under.column("path"), len(prefix))
            full = pc.binary_join_element_wise(prefixes[0], rel, "")
            files = pa.table(
                {"path": full, "size": under.column("length"), "mtime_ms": under.column("modificationTime")}
            )
            files = files.filter(pc.invert(hidden_mask(rel, not_hidden=NOT_HIDDEN)))
            pending.append(files)
            rows += files.num_rows
            if rows >= chunk:
                flush()
                rows = 0
    if pending:
        flush()
    schema = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime_ms", pa.int64())])
    if not parts:
        return schema.empty_table()
    cands = pa.concat_tables(parts).cast(schema)
    agg = cands.group_by("path").aggregate([("size", "max"), ("mtime_ms", "max")])
    out = pa.table({"path": agg["path"], "size": agg["size_max"], "mtime_ms": agg["mtime_ms_max"]})
    return out.sort_by("path")


def _plan(snapshot, mode: str, cutoff: int, kept: pa.Array | None = None, inventory=None) -> pa.Table:
    """``path``, ``size``, ``mtime_ms`` of the files this snapshot's VACUUM may delete."""
    storage, root = snapshot.storage, snapshot.table_root
    needed = None
    if inventory is not None:
        needed = _needed(snapshot, cutoff, kept)  # built once: the inventory's filter and the plan's
        candidates = _inventory_candidates(inventory, root, needed)
    elif mode == "full":
        candidates = _listed(storage, root)
    else:
        candidates = _lite_candidates(snapshot, cutoff)
    return _unneeded(candidates, snapshot, cutoff, kept, old_only=True, needed=needed)


def _unneeded(
    candidates: pa.Table, snapshot, cutoff: int, kept=None, *, old_only: bool = False, needed: pa.Array | None = None
) -> pa.Table:
    if not candidates.num_rows:
        return candidates
    if needed is None:
        needed = _needed(snapshot, cutoff, kept)
    keep = pc.invert(pc.is_in(candidates.column("path"), value_set=needed))
    if old_only:
        keep = pc.and_(keep, pc.less(candidates.column("mtime_ms"), cutoff))
    return candidates.filter(keep)


def vacuum(
    snapshot,
    retention_hours=None,
    *,
    dry_run: bool = False,
    enforce_retention_duration: bool = True,
    mode: str = "full",
    keep_versions=None,
    inventory: str | None = None,
    inventory_options: dict | None = None,
    now_ms: int | None = None,
    identity: TxnIdentity | None = None,
) -> CommandResult:
    """VACUUM the snapshot's table (see the module docstring). ``identity``: its ``app_id`` and
    ``app_version`` are committed with ``VACUUM END`` (a retry after it landed does nothing), its
    ``user_metadata`` with both commits. ``inventory_options``: storage options for the inventory's
    location when it is not the table's (e.g. another bucket)."""
    from .. import features
    from ..log.snapshot import load_snapshot

    watch = Stopwatch()
    if mode not in MODES:
        raise InvalidArgumentError(
            f"Unknown VACUUM mode '{mode}'", f"known: {', '.join(MODES)}", "use 'full' or 'lite'"
        )
    retention = _retention_ms(snapshot, retention_hours, enforce_retention_duration)
    params = {
        "retentionCheckEnabled": enforce_retention_duration,
        "defaultRetentionMillis": snapshot.properties.deleted_file_retention_ms,
        "specifiedRetentionMillis": retention,
        "vacuumType": mode.upper(),
    }
    # the identity goes into VACUUM END only (it marks a finished run); userMetadata into both
    start = Command(
        snapshot,
        "VACUUM START",
        params,
        identity=TxnIdentity(user_metadata=identity.user_metadata if identity else None),
    )
    # vacuumProtocolCheck: the writer gate on every table, not only those with the feature (the
    # Command above ran it too; stated here so VACUUM never depends on it)
    features.check_write_supported(snapshot.protocol, snapshot.metadata)
    if inventory is not None and mode != "full":
        raise InvalidArgumentError(
            "VACUUM with an inventory and mode='lite' is refused",
            "the inventory replaces full mode's listing; lite mode reads its candidates from the log",
            "drop mode='lite' (or the inventory)",
        )
    kept = _kept_files(snapshot, keep_versions)
    batches = _inventory_batches(inventory, inventory_options) if inventory is not None else None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - retention
    storage, root = snapshot.storage, snapshot.table_root
    fields = {"mode": mode, "dry_run": dry_run, "retention_hours": retention / 3_600_000, "cutoff_ms": cutoff}
    if keep_versions is not None:
        fields["keep_versions"] = sorted({parse_version(v) for v in _as_list(keep_versions)})
    if inventory is not None:
        fields["inventory"] = inventory
    probe = Command(snapshot, "VACUUM END", identity=identity)
    if probe.duplicate:
        return probe.skipped(VacuumMetrics(), fields=fields)
    lease = None if dry_run else Lease(storage, root)
    try:
        candidates = _plan(snapshot, mode, cutoff, kept, batches)
        paths = candidates.column("path").to_pylist()
        size = int(pc.sum(candidates.column("size")).as_py() or 0) if candidates.num_rows else 0
        metrics = VacuumMetrics(num_files_to_delete=len(paths), size_of_data_to_delete=size)
        if dry_run:
            metrics.execution_time_ms = watch.elapsed_ms()
            return command_result("VACUUM", root, snapshot.version, metrics, fields={**fields, "files": paths})
        started = start.commit([], _Metrics(numFilesToDelete=len(paths), sizeOfDataToDelete=size))
        if started.version > snapshot.version + 1 and paths:  # something landed before VACUUM START
            # what landed between the plan and VACUUM START (a RESTORE re-adding a file, a writer):
            # nothing the START version needs is deleted, and its protocol passes the gate again
            at_start = load_snapshot(storage, root, version=started.version)
            features.check_write_supported(at_start.protocol, at_start.metadata)
            paths = _unneeded(candidates, at_start, cutoff, kept).column("path").to_pylist()

        def delete(chunk: list[str]) -> list[str]:
            done = []
            for p in chunk:
                if not lease.fresh():  # a stalled VACUUM must not delete once others may think it dead
                    break
                try:
                    storage.delete(p, missing_ok=True)
                    done.append(p)
                except Exception:  # a file that cannot be deleted now is tried again by the next VACUUM
                    pass
            return done

        # in chunks: one task per few hundred files, not one per file
        step = max(1, min(1000, -(-len(paths) // (_DELETE_THREADS * 4))))
        chunks = [paths[i : i + step] for i in range(0, len(paths), step)]
        with ThreadPool(max_workers=_DELETE_THREADS, thread_name_prefix="delta-vacuum") as pool:
            done = [p for part in pool.map(delete, chunks) for p in part]
        metrics.num_deleted_files = len(done)
        metrics.num_vacuumed_directories = _empty_dirs(storage, root, done)
        latest = load_snapshot(storage, root)
        status = "COMPLETED" if len(done) == len(paths) else "FAILED"
        end = Command(latest, "VACUUM END", {"status": status}, identity=identity)
        ended = end.commit(
            [],
            _Metrics(numDeletedFiles=len(done), numVacuumedDirectories=metrics.num_vacuumed_directories),
        )
    finally:
        if lease is not None:
            lease.release()
    metrics.execution_time_ms = watch.elapsed_ms()
    return command_result("VACUUM", root, ended.version, metrics, commit_info=ended.commit_info, fields=fields)


def check_time_travel(old) -> None:
    """Before reading an older version: the files it needs that the latest version no longer has
    (the only ones VACUUM may have deleted) must exist; otherwise a clear error naming the version
    and the VACUUM that deleted them, instead of a missing-file failure in a Spark task."""
    from ..errors import DataFileMissingError, DeltaError
    from ..log.listing import latest_version
    from ..log.snapshot import load_snapshot
    from ..paths import file_locations

    storage, root = old.storage, old.table_root
    newest = latest_version(storage, root)
    if newest is None or newest == old.version:
        return
    try:
        latest = load_snapshot(storage, root, version=newest)
    except DeltaError:  # a later version that cannot be read (e.g. refused paths) must not block this one
        return
    gone = old.files.filter(pc.invert(pc.is_in(old.files.column("path"), value_set=latest.files.column("path"))))
    if not gone.num_rows:
        return
    locations = file_locations(root, gone.column("path"))
    with ThreadPool(max_workers=_DELETE_THREADS, thread_name_prefix="delta-timetravel") as pool:
        missing = [loc for loc, ok in zip(locations, pool.map(storage.exists, locations)) if not ok]
    if not missing:
        return
    removed_in, removed_at = _removal(storage, root, old.version, newest, gone.column("path")[0].as_py())
    starts = [h for h in reversed(_history(latest)) if h.get("operation") == "VACUUM START"]  # oldest first
    after = [h for h in starts if removed_in is None or h["version"] > removed_in]

    def cutoff_passed(h) -> bool:  # its cutoff (its time minus its retention) passed the file's removal
        retention = int((h.get("operationParameters") or {}).get("specifiedRetentionMillis", 0) or 0)
        return removed_at is not None and int(h.get("timestamp") or 0) - retention >= removed_at

    # the first VACUUM after the removal that could delete the file, else the first after it
    v = next((h for h in after if cutoff_passed(h)), after[0] if after else (starts[-1] if starts else None))
    by = ""
    if v is not None:
        retention = int((v.get("operationParameters") or {}).get("specifiedRetentionMillis", 0) or 0)
        by = f"; VACUUM at version {v['version']} (retention {retention / 3_600_000:g} hours) deleted them"
    raise DataFileMissingError(
        f"Cannot read version {old.version}: {len(missing)} of its data files no longer exist",
        f"e.g. {missing[0]}{by}",
        "read a version inside the retention (a newer one), or restore the files from a backup",
    )


def _removal(storage, root: str, after: int, newest: int, path: str) -> tuple[int | None, int | None]:
    """``(version, deletionTimestamp)`` of the commit after version ``after`` that removed ``path``
    (None, None: not found, e.g. its commit was cleaned up)."""
    from ..log.commit_read import read_commit
    from ..log.listing import commit_path

    for version in range(after + 1, newest + 1):
        try:
            c = read_commit(version, storage.read_bytes(commit_path(storage, root, version)))
        except FileNotFoundError:
            continue
        hit = c.removes.filter(pc.equal(c.removes.column("path"), path))
        if hit.num_rows:
            ts = hit.column("deletion_timestamp")[0].as_py()
            return version, int(ts) if ts is not None else None
    return None, None


def _history(snapshot) -> list[dict]:
    from ..log.snapshot import read_commit_infos

    infos = read_commit_infos(snapshot.storage, snapshot.table_root, range(snapshot.version, -1, -1))
    out = []
    for v in sorted(infos, reverse=True):
        d = dict(infos[v].to_json())
        d["version"] = v
        out.append(d)
    return out
