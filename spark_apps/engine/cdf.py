"""The change data feed: what a table's commits changed, row by row (Delta's CDF).

**Written** by DELETE, UPDATE and MERGE on a table with ``delta.enableChangeDataFeed=true``: the
rows they change go to ``_change_data/[partition dirs/]cdc-<task>-<uuid>.c000.snappy.parquet``
files (the table's columns, partition columns in the path as for data files, plus
:data:`CHANGE_TYPE`), committed as ``cdc`` actions in the same commit. As Delta does, no change
file is written where the log already says it all: appends and whole-file deletes (a reader takes
their rows from ``add`` and ``remove``), and a DELETE through deletion vectors (the reader takes
the deleted rows from the difference of the file's old and new vector).

**Read** (:func:`plan_changes`, :func:`iter_changes`) between two versions, per commit:

* a commit with ``cdc`` actions: their files, and only them (rows carry their ``_change_type``);
* otherwise its ``add``/``remove`` actions with ``dataChange=true``: the live rows of an added file
  are ``insert``, those of a removed file ``delete``; a file removed and added again in the same
  commit with another deletion vector changed by the difference of the two vectors (rows the new
  one marks are ``delete``, rows only the old one marked are ``insert``).

Every row gets :data:`COMMIT_VERSION` and :data:`COMMIT_TIMESTAMP` (the in-commit timestamp when
enabled, else the commit file's time: the timestamps time travel uses). A range that includes a
version where the table did not record changes (the feed disabled) is refused, as Delta does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError, VersionNotFoundError

__all__ = [
    "CHANGE_TYPE",
    "COMMIT_VERSION",
    "COMMIT_TIMESTAMP",
    "INSERT",
    "DELETE",
    "UPDATE_PREIMAGE",
    "UPDATE_POSTIMAGE",
    "CHANGE_DATA_DIR",
    "ChangeFile",
    "ChangePlan",
    "change_rows",
    "plan_changes",
    "iter_changes",
    "ChangeReader",
    "changes_schema",
]

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
INSERT, DELETE = "insert", "delete"
UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "update_preimage", "update_postimage"
CHANGE_DATA_DIR = "_change_data"


def change_rows(batch: pa.RecordBatch | pa.Table, change_type: str) -> pa.RecordBatch | pa.Table:
    """``batch`` (rows in the table's columns) with its :data:`CHANGE_TYPE` column: what a change
    file holds."""
    return batch.append_column(CHANGE_TYPE, pa.array([change_type] * batch.num_rows, pa.string()))


# ---------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class ChangeFile:
    """One file of a commit's changes.

    :param change_type: the rows' change type; None for a ``cdc`` file (its rows carry it)
    :param deletion_vector: rows of the file that are not changes (its vector as added or removed)
    :param only: when set, the changes are only the rows this vector marks (minus ``deletion_vector``)
    """

    version: int
    timestamp_ms: int
    path: str
    partition_values: dict
    change_type: str | None
    deletion_vector: Any = None
    only: Any = None


@dataclass
class ChangePlan:
    """The files holding the changes of versions ``start`` to ``end`` (inclusive), in commit order,
    and the schema they are read in (the table's at ``end``)."""

    table_root: str
    start: int
    end: int
    schema: Any
    partition_columns: list[str]
    column_mapping_mode: str
    files: list[ChangeFile] = field(default_factory=list)


def changes_schema(schema) -> pa.Schema:
    """The Arrow schema of the changes of a table with Delta ``schema``."""
    return pa.schema(
        list(schema.to_arrow_schema())
        + [
            pa.field(CHANGE_TYPE, pa.string()),
            pa.field(COMMIT_VERSION, pa.int64()),
            pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", "UTC")),
        ]
    )


def _version_of(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 0:
        raise InvalidArgumentError(
            f"The {name} version for reading changes must be a non-negative integer, got {value!r}",
            None,
            f"pass {name}_version as an integer such as 3",
        )
    return int(value)


def resolve_range(storage, table_root: str, start=None, end=None, start_timestamp=None, end_timestamp=None):
    """(start, end, listing) of a change read: versions, or timestamps resolved as Delta does (the
    first commit at or after ``start_timestamp``, the last at or before ``end_timestamp``)."""
    from .log.listing import list_log
    from .log.snapshot import commit_timestamps
    from .values import parse_timestamp_ms

    listing = list_log(storage, table_root)
    latest = listing.latest_version
    if latest is None:
        from .errors import TableNotFoundError

        raise TableNotFoundError(f"No Delta table at '{table_root}'", None, "check the table URI")
    if start is not None and start_timestamp is not None or end is not None and end_timestamp is not None:
        raise InvalidArgumentError(
            "Both a version and a timestamp were given for one end of the change range", None, "pass only one"
        )
    stamps = None
    if start_timestamp is not None or end_timestamp is not None:
        stamps = commit_timestamps(storage, listing)
    if start_timestamp is not None:
        ms = parse_timestamp_ms(start_timestamp)
        after = [v for v, ts in stamps if ts >= ms]
        if not after:
            raise VersionNotFoundError(
                f"No commit of table '{table_root}' at or after {start_timestamp}",
                f"the latest commit is version {latest}",
                "pass an earlier starting timestamp",
            )
        start = after[0]
    if end_timestamp is not None:
        ms = parse_timestamp_ms(end_timestamp)
        before = [v for v, ts in stamps if ts <= ms]
        if not before:
            raise VersionNotFoundError(
                f"No commit of table '{table_root}' at or before {end_timestamp}",
                None,
                "pass a later ending timestamp",
            )
        end = before[-1]
    start = _version_of("starting", 0 if start is None else start)
    end = latest if end is None else _version_of("ending", end)
    if start > latest:
        raise VersionNotFoundError(
            f"Cannot read changes of table '{table_root}' from version {start}",
            f"the latest version is {latest}",
            f"pass a starting version at most {latest} (or wait for the next commit)",
        )
    if end > latest:
        raise VersionNotFoundError(
            f"Cannot read changes of table '{table_root}' up to version {end}",
            f"the latest version is {latest}",
            f"pass an ending version at most {latest}, or none for the latest",
        )
    if end < start:
        raise InvalidArgumentError(
            f"The change range of table '{table_root}' ends (version {end}) before it starts (version {start})",
            None,
            "pass an ending version at or after the starting one",
        )
    present = set(listing.commit_versions)
    missing = [v for v in range(start, end + 1) if v not in present]
    if missing:
        raise VersionNotFoundError(
            f"Cannot read changes of table '{table_root}' at version {missing[0]}",
            "its commit file is no longer in the log (log cleanup removes commits older than "
            "delta.logRetentionDuration)",
            f"read changes from version {max(missing) + 1} on",
        )
    return start, end, listing


def plan_changes(
    storage, table_root: str, start=None, end=None, *, start_timestamp=None, end_timestamp=None
) -> ChangePlan:
    """The change files of versions ``start``..``end`` (see the module docstring); errors (a bad
    range, a version without the feed) before any data file is read."""
    from .config import TableProperties
    from .log.commit_read import read_commit
    from .log.file_actions import partition_keys_of
    from .log.listing import commit_path
    from .log.snapshot import commit_timestamps, load_snapshot

    start, end, listing = resolve_range(storage, table_root, start, end, start_timestamp, end_timestamp)
    stamps = dict(commit_timestamps(storage, listing, versions=range(start, end + 1)))
    # the metadata in effect before `start`: each commit's own metaData action then takes over
    metadata = load_snapshot(storage, table_root, version=start - 1).metadata if start > 0 else None
    end_snapshot = load_snapshot(storage, table_root, version=end)
    files: list[ChangeFile] = []
    for v in range(start, end + 1):
        data = storage.read_bytes(commit_path(storage, table_root, v))
        keys = partition_keys_of(metadata) if metadata is not None else None  # physical under mapping
        commit = read_commit(v, data, partition_keys=keys)
        from .actions import Metadata

        metas = [a for a in commit.actions if isinstance(a, Metadata)]
        if metas:
            metadata = metas[-1]
        ts = stamps[v]
        cdc = [json.loads(line)["cdc"] for line in data.splitlines() if line.startswith(b'{"cdc"')]
        adds = commit.adds.filter(pc.fill_null(commit.adds.column("data_change"), True))
        removes = commit.removes.filter(pc.fill_null(commit.removes.column("data_change"), True))
        if not (cdc or adds.num_rows or removes.num_rows):
            continue  # no data changed (OPTIMIZE, metadata, a checkpoint-only version)
        if metadata is None or not TableProperties.of(metadata).enable_change_data_feed:
            raise InvalidArgumentError(
                f"Cannot read changes of table '{table_root}' at version {v}",
                "the change data feed was not enabled at that version (delta.enableChangeDataFeed), "
                "so its changes were not recorded",
                "read changes from the version that enabled the feed on",
            )
        if cdc:
            for c in cdc:
                files.append(ChangeFile(v, ts, c["path"], dict(c.get("partitionValues") or {}), None))
            continue
        files.extend(_from_file_actions(v, ts, adds, removes, partition_keys_of(metadata)))
    md = end_snapshot.metadata
    return ChangePlan(
        table_root=end_snapshot.table_root,
        start=start,
        end=end,
        schema=end_snapshot.schema,
        partition_columns=list(md.partition_columns or []),
        column_mapping_mode=end_snapshot.properties.column_mapping_mode_for(end_snapshot.schema),
        files=files,
    )


def _dv(value):
    """A deletion-vector column value as a descriptor dict (None when the file has none)."""
    return value if isinstance(value, dict) and value.get("storage_type", value.get("storageType")) else None


def _from_file_actions(version: int, ts: int, adds: pa.Table, removes: pa.Table, partition_columns) -> list[ChangeFile]:
    """A commit without change files: its inserts and deletes from its adds and removes."""
    added = {r["path"]: r for r in adds.select(["path", "partition_values", "deletion_vector"]).to_pylist()}
    out = []
    for r in removes.select(["path", "partition_values", "deletion_vector"]).to_pylist():
        pv = dict(r["partition_values"] or [])
        pv = {**{c: None for c in partition_columns if c not in pv}, **pv}  # a null value the reader left out
        old = _dv(r["deletion_vector"])
        again = added.pop(r["path"], None)
        if again is None:  # removed whole: its live rows are deleted
            out.append(ChangeFile(version, ts, r["path"], pv, DELETE, deletion_vector=old))
            continue
        new = _dv(again["deletion_vector"])
        if new is not None:  # rows the new vector marks that the old one did not
            out.append(ChangeFile(version, ts, r["path"], pv, DELETE, deletion_vector=old, only=new))
        if old is not None:  # rows the old vector marked that the new one does not (reinstated)
            out.append(ChangeFile(version, ts, r["path"], pv, INSERT, deletion_vector=new, only=old))
    for path, r in added.items():
        out.append(ChangeFile(version, ts, path, dict(r["partition_values"] or []), INSERT, _dv(r["deletion_vector"])))
    return out


def iter_changes(storage, plan: ChangePlan, columns=None) -> Iterator[pa.RecordBatch]:
    """The changes of ``plan``, one bounded batch at a time, in :func:`changes_schema` (or its
    ``columns`` and the three change columns), commit by commit."""
    reader = ChangeReader(plan, columns)
    for f in plan.files:
        yield from reader.batches(storage, f)


class ChangeReader:
    """Reads the change files of a plan in its schema (or ``columns`` of it): in this process, or one
    file at a time in Spark tasks (it is small and picklable)."""

    def __init__(self, plan: ChangePlan, columns=None):
        from .schema import PrimitiveType, StructField, StructType

        schema = plan.schema
        if columns is not None:
            wanted = {c.lower() for c in columns}
            known = {f.name.lower() for f in schema.fields}
            unknown = [c for c in columns if c.lower() not in known]
            if unknown:
                raise InvalidArgumentError(
                    f"Unknown column(s) {unknown} for the changes of '{plan.table_root}'",
                    f"the table's columns are {[f.name for f in schema.fields]}",
                    "pass column names of the table",
                )
            schema = StructType([f for f in schema.fields if f.name.lower() in wanted])
        self.table_root = plan.table_root
        self.table_schema = plan.schema
        self.with_type = StructType([*plan.schema.fields, StructField(CHANGE_TYPE, PrimitiveType("string"))])
        self.partition_columns = plan.partition_columns
        self.mode = plan.column_mapping_mode
        self.names = [f.name for f in schema.fields]
        self.schema = changes_schema(schema)

    def batches(self, storage, f: ChangeFile) -> Iterator[pa.RecordBatch]:
        """The change rows of one file of the plan."""
        from .dv import deleted_row_indexes
        from .reader import ROW_INDEX, iter_data_file_batches

        cdc = f.change_type is None
        only = None
        if f.only is not None:  # the rows one vector marks and the other does not
            unmarked = (
                deleted_row_indexes(storage, self.table_root, f.deletion_vector)
                if f.deletion_vector is not None
                else np.empty(0, np.uint64)
            )
            only = np.setdiff1d(deleted_row_indexes(storage, self.table_root, f.only), unmarked)
            if not len(only):
                return
        batches = iter_data_file_batches(
            storage,
            self.table_root,
            f.path,
            f.partition_values,
            self.with_type if cdc else self.table_schema,
            self.partition_columns,
            self.names + ([CHANGE_TYPE] if cdc else []),
            f.deletion_vector if only is None else None,
            column_mapping_mode=self.mode,
            row_index=only is not None,
        )
        for batch in batches:
            if only is not None:
                index = batch.column(ROW_INDEX).to_numpy().astype(np.uint64)
                batch = batch.drop_columns([ROW_INDEX]).filter(pa.array(np.isin(index, only)))
            if not batch.num_rows:
                continue
            rows = batch.num_rows
            change = batch.column(CHANGE_TYPE) if cdc else pa.array([f.change_type] * rows, pa.string())
            arrays = [batch.column(c) for c in self.names] + [
                change,
                pa.array(np.full(rows, f.version, np.int64)),
                pa.array(np.full(rows, f.timestamp_ms * 1000, np.int64)).cast(pa.timestamp("us", "UTC")),
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)
