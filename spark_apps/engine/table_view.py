"""A table's state for people, read from the log alone (no Spark, no data file): the Airflow UI
plugin's page and its JSON endpoints (:mod:`airflow_delta_provider.plugins.delta_view`).

:func:`table_view` returns one JSON-ready dict:

* ``history``: the newest ``history`` commits (a bound: a table of any age costs the same), each with
  its operation, parameters, metrics, the Airflow task instance that made it (``commitInfo.airflow``,
  which the operators record) and its schema changes (:func:`.log.commit_changes.commit_changes`);
* ``files``: count, bytes, a size histogram and the small-file share, vectorised over the snapshot's
  Arrow file table (100k files in milliseconds);
* ``deletion_vectors``: the share of rows that vectors hide (``cardinality`` over ``numRecords``);
* ``protocol``, ``features``, the partition columns and properties;
* ``maintenance``: when the table was last checkpointed, optimized and vacuumed;
* ``size_over_time``: the table's bytes and files after each commit of the window, walked back from
  the snapshot through each commit's adds and removes (no data file read);
* ``advice``: what needs doing, each with the operator that does it (:func:`advice`);
* ``notes``: what the view left out, e.g. the commits not read by the ``deadline``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .actions import CommitInfo, Metadata, Protocol, SetTransaction
from .log.commit_read import read_commit
from .log.listing import commit_file_name

__all__ = ["table_view", "advice", "rows_changed", "SIZE_BINS", "SMALL_FILE_BYTES", "DEFAULT_HISTORY"]

MiB = 1 << 20
#: the size histogram's upper bounds (bytes); the last bin is open
SIZE_BINS = (1 * MiB, 8 * MiB, 32 * MiB, 128 * MiB, 512 * MiB)
#: a file under this (or under the table's target size when that is smaller) is small
SMALL_FILE_BYTES = 8 * MiB
#: commits read for the history, the schema changes and the size over time
DEFAULT_HISTORY = 50
#: OPTIMIZE is advised when it would take at least this many files away
MIN_COMPACTABLE = 50
#: VACUUM is advised when it has not run for this long and there are removed files
VACUUM_DAYS = 7
_DAY_MS = 86_400_000


def table_view(
    table_uri: str, *, history: int = DEFAULT_HISTORY, now_ms: int | None = None, deadline: float | None = None
) -> dict:
    """The page's data for the Delta table at ``table_uri`` (see the module docstring). The caller
    sets the object store's credentials (:func:`.object_stores.storage_settings`).

    :param history: the newest commits read (at least 1)
    :param now_ms: the clock for "days since" (default: now)
    :param deadline: a :func:`time.monotonic` time: the commits not read by then are left out of
        the history (and what derives from it), with a note; the snapshot itself is always read
    :raises InvalidArgumentError: ``history`` is not a positive whole number
    :raises TableNotFoundError: no Delta table there
    """
    from .errors import InvalidArgumentError
    from .log.snapshot import commit_timestamps, load_snapshot
    from .storage import storage_for, table_location

    if isinstance(history, bool) or not isinstance(history, int) or history < 1:
        raise InvalidArgumentError(
            f"history={history!r} is not a positive whole number",
            "it is how many of the newest commits the view reads",
            f"pass a number such as {DEFAULT_HISTORY}",
        )
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    root = table_location(table_uri)
    storage = storage_for(root)
    snap = load_snapshot(storage, root)
    listing = snap.listing
    props = snap.properties

    from .writer import resolve_target_file_size

    target = resolve_target_file_size(props, None)
    files = _files(snap.files, snap.partition_columns, min(SMALL_FILE_BYTES, target))
    dvs = _deletion_vectors(snap.files)

    versions = list(range(snap.version, max(-1, snap.version - history), -1))
    stamps = dict(commit_timestamps(storage, listing, snap.metadata, versions=versions))
    wanted = [v for v in versions if v in stamps]
    commits = _commits(storage, root, snap.log_dir, wanted, stamps, deadline)
    notes = []
    if len(commits) < len(wanted) and deadline is not None and time.monotonic() >= deadline:
        notes.append(
            f"history cut short at the deadline: {len(commits)} of the newest {len(wanted)} commits read "
            "(the object store is slow; the files, protocol and checkpoint are complete)"
        )
    _size_over_time(commits, int(files["bytes"]), int(files["count"]))

    checkpoints = listing.checkpoints if listing is not None else []
    last_cp = checkpoints[-1] if checkpoints else None
    maintenance = {
        "last_checkpoint": None
        if last_cp is None
        else {"version": last_cp.version, "timestamp": max(f.mtime_ms for f in last_cp.files)},
        "commits_since_checkpoint": snap.version - (last_cp.version if last_cp else -1),
        "checkpoint_interval": props.checkpoint_interval,
        "last_optimize": _last(commits, ("OPTIMIZE",)),
        "last_vacuum": _last(commits, ("VACUUM END", "VACUUM")),
        "removed_files": snap.tombstones.num_rows,
        "history_window": {
            "commits": len(commits),
            "oldest_version": commits[-1]["version"] if commits else None,
            "oldest_timestamp": commits[-1]["timestamp"] if commits else None,
        },
    }
    view = {
        "table_uri": root,
        "version": snap.version,
        "timestamp": stamps.get(snap.version),
        "name": snap.metadata.name,
        "description": snap.metadata.description,
        "partition_columns": list(snap.partition_columns),
        "properties": dict(snap.configuration),
        "protocol": {
            "min_reader_version": snap.protocol.min_reader_version,
            "min_writer_version": snap.protocol.min_writer_version,
        },
        "features": sorted(set(snap.protocol.reader_features or ()) | set(snap.protocol.writer_features or ())),
        "target_file_size": target,
        "files": files,
        "deletion_vectors": dvs,
        "maintenance": maintenance,
        "history": commits,
        "schema_changes": [
            {"version": c["version"], "timestamp": c["timestamp"], **change}
            for c in commits
            for change in c.get("schema_changes", ())
        ],
        "size_over_time": [
            {"version": c["version"], "timestamp": c["timestamp"], "bytes": c["bytes_after"], "files": c["files_after"]}
            for c in reversed(commits)
            if c.get("bytes_after") is not None
        ],
        "generated_at": now_ms,
        "notes": notes,
    }
    view["advice"] = advice(view, now_ms=now_ms)
    return view


def _files(files: pa.Table, partition_columns: list[str], small: int) -> dict:
    """Count, bytes, the size histogram and the small files, in a few vectorised passes."""
    sizes = files.column("size").to_numpy() if files.num_rows else np.zeros(0, dtype=np.int64)
    edges = np.asarray(SIZE_BINS, dtype=np.int64)
    bins = np.searchsorted(edges, sizes, side="right")
    counts = np.bincount(bins, minlength=len(edges) + 1)
    sums = np.bincount(bins, weights=sizes, minlength=len(edges) + 1)
    is_small = sizes < small
    n_small = int(is_small.sum())
    # OPTIMIZE bins small files per partition: each partition keeps at least one file
    partitions = _partitions_of(files.filter(pa.array(is_small)), partition_columns) if n_small else 0
    lows = (0, *SIZE_BINS)
    return {
        "count": int(files.num_rows),
        "bytes": int(sizes.sum()),
        "histogram": [
            {
                "from": int(lows[i]),
                "to": int(SIZE_BINS[i]) if i < len(SIZE_BINS) else None,
                "files": int(counts[i]),
                "bytes": int(sums[i]),
            }
            for i in range(len(lows))
        ],
        "small_file_bytes": int(small),
        "small_files": n_small,
        "small_share": n_small / files.num_rows if files.num_rows else 0.0,
        "compactable": max(0, n_small - partitions),
        "partitions_with_small_files": partitions,
    }


def _partitions_of(files: pa.Table, partition_columns: list[str]) -> int:
    """Distinct partitions among ``files`` (1 for an unpartitioned table)."""
    if not partition_columns or not files.num_rows:
        return 1 if files.num_rows else 0
    maps = files.column("partition_values").combine_chunks()
    # each file's partition values, in the log's key order, joined into one key
    values = pc.fill_null(maps.items, "\x00null")
    lists = pa.ListArray.from_arrays(maps.offsets, values)
    return int(pc.count_distinct(pc.binary_join(lists, "\x01"), mode="all").as_py())


def _deletion_vectors(files: pa.Table) -> dict:
    """Rows the vectors hide over the rows the files hold (``numRecords``: every file's stats)."""
    from .expr.skipping import stats_table

    if not files.num_rows:
        return {"files": 0, "deleted_rows": 0, "rows": 0, "share": 0.0}
    dv = files.column("deletion_vector")
    deleted = int(pc.sum(pc.struct_field(dv, "cardinality")).as_py() or 0)
    stats = stats_table(files, [])
    rows = int(pc.sum(stats.column("numRecords")).as_py() or 0) if stats is not None else 0
    return {
        "files": int(files.num_rows - dv.null_count),
        "deleted_rows": deleted,
        "rows": rows,
        "share": deleted / rows if rows else 0.0,
    }


def _commits(
    storage, root: str, log_dir: str, versions: list[int], stamps: dict[int, int], deadline: float | None = None
) -> list[dict]:
    """Each commit of ``versions`` (newest first) read once: commitInfo, the Airflow task instance,
    what it added and removed, whether it changed the schema or protocol. Stops at ``deadline``
    (the newest commits read so far)."""
    from .log.commit_changes import commit_changes

    out = []
    for v in versions:
        if deadline is not None and time.monotonic() >= deadline:
            break
        try:
            data = storage.read_bytes(storage.join(log_dir, commit_file_name(v)))
        except FileNotFoundError:  # cleaned up between the listing and now
            continue
        parsed = read_commit(v, data)
        ci = next((a for a in parsed.actions if isinstance(a, CommitInfo)), None)
        values = dict(ci.values) if ci is not None else {}
        entry: dict[str, Any] = {
            "version": v,
            "timestamp": stamps.get(v),
            "operation": values.get("operation"),
            "parameters": values.get("operationParameters") or {},
            "metrics": _numbers(values.get("operationMetrics") or {}),
            "rows": rows_changed(values.get("operation"), values.get("operationMetrics") or {}),
            "engine": values.get("engineInfo"),
            "user_metadata": values.get("userMetadata"),
            "airflow": _airflow(values, parsed.actions),
            "added_files": parsed.adds.num_rows,
            "added_bytes": int(pc.sum(parsed.adds.column("size")).as_py() or 0),
            "removed_files": parsed.removes.num_rows,
            "removed_bytes": _removed_bytes(parsed.removes),
        }
        if any(isinstance(a, (Metadata, Protocol)) for a in parsed.actions):
            entry.update(commit_changes(storage, root, v) if v > 0 else {})
        out.append(entry)
    return out


#: operationMetrics naming the rows a commit wrote, updated and deleted (Delta's names; first found wins)
_ROW_METRICS = {
    "written": ("numTargetRowsInserted", "numOutputRows"),
    "updated": ("numTargetRowsUpdated", "numUpdatedRows"),
    "deleted": ("numTargetRowsDeleted", "numDeletedRows"),
}
#: operations whose numOutputRows are rows moved, not written (compaction, rewrites)
_REWRITES = ("OPTIMIZE", "UPDATE", "DELETE", "MERGE", "RESTORE", "REORG")


def rows_changed(operation: str | None, metrics: dict) -> dict:
    """``{"written", "updated", "deleted"}``: the rows a commit wrote, updated and deleted, from its
    operationMetrics (each only when the commit says). OPTIMIZE and other rewrites move rows without
    writing new ones: their ``numOutputRows`` is not counted as written."""
    out = {}
    for kind, names in _ROW_METRICS.items():
        for name in names:
            if name == "numOutputRows" and (operation or "").upper().startswith(_REWRITES):
                continue
            if metrics.get(name) is not None:
                try:
                    out[kind] = int(metrics[name])
                except (TypeError, ValueError):
                    continue
                break
    return out


def _removed_bytes(removes: pa.Table) -> int | None:
    """The removes' bytes; None when one does not say its size (the log allows that)."""
    sizes = removes.column("size")
    if sizes.null_count:
        return None
    return int(pc.sum(sizes).as_py() or 0)


def _numbers(metrics: dict) -> dict:
    """operationMetrics as numbers where they are (Delta writes strings)."""
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = int(v)
        except (TypeError, ValueError):
            out[k] = v
    return out


def _airflow(values: dict, actions: list) -> dict | None:
    """The Airflow task instance that made the commit: ``commitInfo.airflow`` (what the operators
    record), else what the SetTransaction identity they derive names (``airflow:<dag>/<task>@<key>``:
    no run id, so no link)."""
    recorded = values.get("airflow")
    if isinstance(recorded, dict) and recorded.get("dag_id") and recorded.get("task_id"):
        return recorded
    for a in actions:
        if isinstance(a, SetTransaction) and a.app_id.startswith("airflow:") and "/" in a.app_id:
            dag, _, rest = a.app_id[len("airflow:") :].partition("/")
            task = rest.split("@", 1)[0].split("[", 1)[0]
            return {"dag_id": dag, "task_id": task, "run_id": None}
    return None


def _size_over_time(commits: list[dict], size: int, count: int) -> None:
    """``bytes_after`` / ``files_after`` of each commit (newest first), walked back from the
    snapshot's; stops at a commit whose removes do not say their size."""
    known = True
    for c in commits:
        c["bytes_after"], c["files_after"] = (size, count) if known else (None, None)
        known = known and c["removed_bytes"] is not None
        if known:
            size += c["removed_bytes"] - c["added_bytes"]
            count += c["removed_files"] - c["added_files"]


def _last(commits: list[dict], operations: tuple[str, ...]) -> dict | None:
    for c in commits:
        if c["operation"] in operations:
            return {"version": c["version"], "timestamp": c["timestamp"], "airflow": c["airflow"]}
    return None


def _mib(n: int) -> str:
    return f"{n / MiB:g} MiB" if n % MiB == 0 else f"{n / MiB:.1f} MiB"


def advice(view: dict, *, now_ms: int) -> list[dict]:
    """What the table needs, each ``{"kind", "message", "operator"}`` with the operator that acts:

    * ``optimize``: OPTIMIZE would take :data:`MIN_COMPACTABLE` files or more away (small files
      beyond one per partition);
    * ``purge``: vectors hide more than OPTIMIZE's own purge ratio of the rows;
    * ``checkpoint``: more than twice ``delta.checkpointInterval`` commits since the last checkpoint;
    * ``vacuum``: removed files, and no VACUUM in :data:`VACUUM_DAYS` days (or none in the history
      read, whose oldest commit is older than that).
    """
    from .commands.optimize import MAX_DELETED_ROWS_RATIO

    out = []
    files, dvs, m = view["files"], view["deletion_vectors"], view["maintenance"]
    if files["compactable"] >= MIN_COMPACTABLE:
        out.append(
            {
                "kind": "optimize",
                "message": f"{files['small_files']} files under {_mib(files['small_file_bytes'])}: run OPTIMIZE",
                "operator": "DeltaOptimizeOperator",
            }
        )
    if dvs["rows"] and dvs["share"] > MAX_DELETED_ROWS_RATIO:
        out.append(
            {
                "kind": "purge",
                "message": f"{dvs['share']:.0%} of rows deleted by vectors: OPTIMIZE purge",
                "operator": "DeltaOptimizeOperator(purge_deletion_vectors=True)",
            }
        )
    since = m["commits_since_checkpoint"]
    if since > 2 * m["checkpoint_interval"]:
        out.append(
            {
                "kind": "checkpoint",
                "message": f"{since} commits since the last checkpoint",
                "operator": "DeltaCheckpointOperator",
            }
        )
    if m["removed_files"]:
        last = m["last_vacuum"]
        window = m["history_window"]
        if last is not None and last["timestamp"] is not None:
            days = (now_ms - last["timestamp"]) / _DAY_MS
            message = f"VACUUM not run in {int(days)} days" if days >= VACUUM_DAYS else None
        elif window["oldest_timestamp"] is not None and window["oldest_version"] == 0:
            days = (now_ms - window["oldest_timestamp"]) / _DAY_MS
            message = f"VACUUM never run (table {int(days)} days old)" if days >= VACUUM_DAYS else None
        elif window["oldest_timestamp"] is not None:
            days = (now_ms - window["oldest_timestamp"]) / _DAY_MS
            message = (
                f"VACUUM not run in the last {window['commits']} commits ({int(days)} days)"
                if days >= VACUUM_DAYS
                else None
            )
        else:
            message = None
        if message:
            out.append(
                {
                    "kind": "vacuum",
                    "message": f"{message}; {m['removed_files']} removed files",
                    "operator": "DeltaVacuumOperator",
                }
            )
    return out
