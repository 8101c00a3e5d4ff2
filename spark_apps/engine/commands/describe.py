"""The reads of a table that commit nothing: DESCRIBE DETAIL, DESCRIBE HISTORY and READ (the rows to
one parquet file). Each ends as every command does, in a :class:`~.result.CommandResult` made by
:func:`.base.command_result` (``committed`` false), so the registry's generic runner runs them as any other
command: DESCRIBE DETAIL and READ on the latest snapshot (READ on its ``plane``), DESCRIBE HISTORY on
the table's location (its log's commits alone: no snapshot replayed)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import InvalidArgumentError, TableNotFoundError
from .base import command_result
from .result import OperationMetrics

__all__ = ["detail", "history", "read", "snapshot_detail", "ReadMetrics"]


@dataclass
class ReadMetrics(OperationMetrics):
    """READ: the rows written to the output file, and the data files they were read from."""

    num_output_rows: int = 0
    num_files: int = 0


def snapshot_detail(snap, table_uri: str) -> dict:
    """DESCRIBE DETAIL of a snapshot (the keys :meth:`~..table.DeltaTable.detail` documents)."""
    md, proto = snap.metadata, snap.protocol
    rf = proto.reader_features
    wf = proto.writer_features
    return {
        "table_uri": table_uri,
        "format": "delta",
        "version": snap.version,
        "num_files": int(snap.num_files),
        "size_in_bytes": int(snap.size_in_bytes),
        "partition_columns": list(md.partition_columns or []),
        "schema": json.loads(md.schema_string),
        "protocol": {
            "min_reader_version": proto.min_reader_version,
            "min_writer_version": proto.min_writer_version,
            "reader_features": list(rf) if rf is not None else None,
            "writer_features": list(wf) if wf is not None else None,
        },
        "configuration": dict(md.configuration or {}),
        "id": md.id,
        "name": md.name,
        "description": md.description,
        "created_time": md.created_time,
    }


def detail(snapshot):
    """DESCRIBE DETAIL: the result's ``detail`` is the snapshot's state, with ``checksum`` saying
    whether the version's checksum file agrees with it (:func:`..log.checksum.verify`)."""
    from ..log.checksum import verify

    state = {**snapshot_detail(snapshot, snapshot.table_root), "checksum": verify(snapshot)}
    return command_result("DESCRIBE DETAIL", snapshot.table_root, snapshot.version, fields={"detail": state})


def history(table_uri: str, limit: int | None = None):
    """DESCRIBE HISTORY: the result's ``history`` is the commitInfo of each version, newest first
    (``limit`` newest only), its version the latest."""
    from ..log.listing import latest_version
    from ..log.snapshot import history as commit_history
    from ..storage import storage_for, table_location

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidArgumentError(
            f"History limit {limit!r} is not a non-negative integer", None, "pass a limit such as 10"
        )
    root = table_location(table_uri)
    storage = storage_for(root)
    latest = latest_version(storage, root)
    if latest is None:
        raise TableNotFoundError(f"No Delta table at '{root}'", None, "check the table URI, or create the table first")
    commits = commit_history(storage, root, limit=limit)
    version = commits[0]["version"] if commits else latest
    return command_result("DESCRIBE HISTORY", root, version, fields={"history": commits})


def read(snapshot, output: str | None = None, version: int | None = None, timestamp=None, *, plane=None):
    """READ: the rows of the snapshot (or of ``version`` / ``timestamp``: time travel, refused with the
    VACUUM that deleted its files when it did) read by ``plane`` and written to the parquet file
    ``output``, whole (a small table's)."""
    import pyarrow.parquet as pq

    from ..log.snapshot import load_snapshot
    from ..plane import in_process_plane
    from ..storage import normalize_table_uri, storage_for
    from ..values import parse_timestamp_ms
    from .vacuum import check_time_travel

    if not output:
        raise InvalidArgumentError("read needs an output location", "--output is missing", "pass --output PATH.parquet")
    if version is not None or timestamp is not None:
        if version is not None and timestamp is not None:
            raise InvalidArgumentError(
                "Both a version and a timestamp were given for time travel", None, "pass only one of them"
            )
        ts = parse_timestamp_ms(timestamp) if timestamp is not None else None
        snapshot = load_snapshot(snapshot.storage, snapshot.table_root, version=version, timestamp_ms=ts)
        check_time_travel(snapshot)  # files VACUUM deleted: an error naming the version and that VACUUM
    rows = (plane or in_process_plane()).read_snapshot(snapshot)
    path = normalize_table_uri(output)
    with storage_for(path).open_output_stream(path) as sink:
        pq.write_table(rows, sink, compression="snappy")
    metrics = ReadMetrics(rows.num_rows, int(snapshot.num_files))
    return command_result("READ", snapshot.table_root, snapshot.version, metrics, fields={"output": path})
