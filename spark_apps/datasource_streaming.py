"""Structured Streaming through the Delta data source (:mod:`.datasource`): ``readStream`` of a table
and ``writeStream`` into one, as delta-spark's source and sink behave.

Read (:class:`DeltaStreamReader`)::

    spark.readStream.format("delta").load(path)            # the table now, then each new commit's appends
    spark.readStream.format("delta").option("startingVersion", 5).load(path)   # or "latest", startingTimestamp
    spark.readStream.format("delta").option("readChangeFeed", "true").load(path)

An offset is a position in the table's stream of files: ``{"version": v, "index": i, "initial": b}`` is
"the next file to read is number ``i`` of version ``v``": of the snapshot at ``v`` (sorted by path)
when ``initial``, else of commit ``v``'s data-change adds (in commit order). A query without a
starting option begins with the snapshot of the latest version (resolved by the first batch and kept
in its end offset, so a replayed first batch reads the same snapshot), then reads each later commit's
appended files (``dataChange=true``). A commit that only rearranges files (OPTIMIZE: no data change)
adds nothing; one that removes data (DELETE, UPDATE, MERGE, overwrite) fails the query with
delta-spark's message unless ``skipChangeCommits`` (skip such commits whole) or, for deletes only,
``ignoreDeletes`` is set; a schema change fails it (a restart reads with the new schema).
``maxFilesPerTrigger`` (default 1000) caps the files of a batch (a commit may be split);
``Trigger.AvailableNow`` stops at the version that was latest when the query started. Files are
read by the batch read's executor code (deletion vectors applied, column mapping, type widening).

With ``readChangeFeed`` the batches are the change data feed (``_change_type``, ``_commit_version``,
``_commit_timestamp``): the starting snapshot as inserts, then whole commits' changes (a commit is
never split; ``maxFilesPerTrigger`` admits commits while their files fit, at least one).

Write (:class:`DeltaStreamWriter`): each micro-batch's tasks write files through the batch writer's
task code; the driver commits once per batch with the SetTransaction ``(appId, batchId)``. ``appId``
is the query's id (read from the checkpoint's ``metadata`` file, which Spark keeps across restarts),
or the ``txnAppId`` option. A batch replayed after a crash between our commit and Spark's checkpoint
finds its transaction in the log and commits nothing (its files are deleted). ``outputMode("complete")``
overwrites the table with each batch, as delta-spark's sink does.
"""

from __future__ import annotations

import dataclasses
import json

from pyspark.sql import datasource as _ds
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .engine.errors import InvalidArgumentError

__all__ = ["FLAGS", "DeltaStreamReader", "DeltaStreamWriter", "batch_options", "changes_schema_at_latest"]

#: the read's boolean options (delta-spark's names), parsed by the source (:mod:`.datasource` imports
#: this module, never the other way)
FLAGS = ("readChangeFeed", "skipChangeCommits", "ignoreDeletes")

#: delta-spark's default of ``maxFilesPerTrigger``
DEFAULT_MAX_FILES = 1000
#: the columns of a file listing the executors read (as :func:`.engine.spark.scan.files_table` takes)
_LISTING = ["path", "partition_values", "size", "deletion_vector"]
#: the start of a query without a starting option: the snapshot of a version the first batch picks
_FIRST = {"version": -1, "index": 0, "initial": True}

try:  # pyspark 4.2+: Trigger.AvailableNow and read limits
    from pyspark.sql.streaming.datasource import ReadMaxFiles, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.0/4.1

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

    ReadMaxFiles = None


def _storage(root: str):
    from .engine.storage import storage_for

    return storage_for(root)


def _latest(root: str) -> int:
    from .engine.errors import TableNotFoundError
    from .engine.log.listing import latest_version

    version = latest_version(_storage(root), root)
    if version is None:
        raise TableNotFoundError(f"No Delta table at '{root}' to stream from")
    return version


def changes_schema_at_latest(root: str):
    """The pyspark schema of the change feed of ``root`` (the latest snapshot's columns and the three
    change columns): a change-feed stream may start without ``startingVersion``."""
    from .engine.cdf import ChangeReader
    from .engine.spark.scan import changes_spark_schema

    return changes_spark_schema(ChangeReader(_snapshot_plan(root, None, [])))


def _snapshot_plan(root: str, snapshot, files):
    from .engine.cdf import ChangePlan
    from .engine.log.snapshot import load_snapshot

    snapshot = snapshot or load_snapshot(_storage(root), root)
    return ChangePlan(
        table_root=snapshot.table_root,
        start=snapshot.version,
        end=snapshot.version,
        schema=snapshot.schema,
        partition_columns=list(snapshot.metadata.partition_columns or []),
        column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
        files=files,
    )


def _positive(options, key: str, default: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidArgumentError(
            f"{key} must be a whole number from 1 up, got {value!r}", None, f"pass e.g. .option('{key}', 100)"
        )
    return int(text)


# --------------------------------------------------------------------------------------------------
# read


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream of a table's files (see the module docstring). Spark keeps one instance in a planning
    worker for the life of the query: the commits it read and the snapshot it started with are
    cached here, dropped as Spark commits offsets."""

    def __init__(self, root: str, options, flags: dict, schema, parallelism: int):
        from .engine.log.snapshot import load_snapshot
        from .engine.spark.scan import check_read_supported
        from .engine.values import parse_timestamp_ms, parse_version

        self.root = root
        self.schema = schema
        self.parallelism = max(1, int(parallelism))
        self.changes = flags["readChangeFeed"]
        self.skip_changes = flags["skipChangeCommits"]
        self.ignore_deletes = flags["ignoreDeletes"]
        self.max_files = _positive(options, "maxFilesPerTrigger", DEFAULT_MAX_FILES)
        start, timestamp = options.get("startingVersion"), options.get("startingTimestamp")
        if start is not None and timestamp is not None:
            raise InvalidArgumentError(
                "Both startingVersion and startingTimestamp were given", None, "pass only one of them"
            )
        self.starting_latest = start is not None and str(start).strip().lower() == "latest"
        self.starting_version = (
            parse_version(start, "startingVersion") if start is not None and not self.starting_latest else None
        )
        self.starting_ms = parse_timestamp_ms(timestamp) if timestamp is not None else None
        # the table as the query found it: the schema and layout every file is read in
        self.snapshot = load_snapshot(_storage(self.root), self.root)
        check_read_supported(self.snapshot)
        if self.starting_version is not None and self.starting_version > self.snapshot.version:
            raise InvalidArgumentError(
                f"startingVersion {self.starting_version} of '{self.root}' is past its latest version "
                f"{self.snapshot.version}",
                "a stream starts at a version the table has",
                f"pass a startingVersion up to {self.snapshot.version}, or 'latest'",
            )
        self._commits: dict[int, object] = {}  # version -> its data-change adds (a pyarrow Table)
        self._files: dict[int, object] = {}  # version -> the snapshot's files, sorted by path
        self._target: int | None = None  # Trigger.AvailableNow: the last version to read
        self._last: dict | None = None  # the last offset returned (pyspark 4.0/4.1 pass no start)

    def __getstate__(self):
        return {**self.__dict__, "snapshot": None, "_commits": {}, "_files": {}}

    # -- offsets
    def initialOffset(self) -> dict:
        if self.starting_version is not None:
            return {"version": self.starting_version, "index": 0, "initial": False}
        if self.starting_ms is not None:
            from .engine.cdf import resolve_range

            start, _, _ = resolve_range(_storage(self.root), self.root, start_timestamp=self.starting_ms)
            return {"version": start, "index": 0, "initial": False}
        if self.starting_latest:  # as delta-spark: the commits after the version latest at the start
            return {"version": _latest(self.root) + 1, "index": 0, "initial": False}
        return dict(_FIRST)

    def getDefaultReadLimit(self):
        return ReadMaxFiles(self.max_files) if ReadMaxFiles is not None else super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _latest(self.root)

    def latestOffset(self, start=None, limit=None) -> dict:
        if start is None:  # pyspark 4.0/4.1: no start, no limit
            start = self._last or self.initialOffset()
        budget = limit.max_files if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles) else None
        end = self._advance(start, budget)
        self._last = end
        return end

    def _advance(self, start: dict, budget: int | None) -> dict:
        latest = self._target if self._target is not None else _latest(self.root)
        budget = float("inf") if budget is None else budget
        if start["version"] < 0:  # the first batch: the snapshot, and only it (its end names the version)
            files = self._snapshot_files(latest).num_rows
            return {"version": latest, "index": files if self.changes else min(files, budget), "initial": True}
        pos = self._normal(start)
        version, index = pos["version"], pos["index"]
        if pos["initial"]:
            n = self._snapshot_files(version).num_rows
            take = n - index if self.changes else min(n - index, budget)
            index, budget = index + take, budget - take
            if index < n:
                return {"version": version, "index": index, "initial": True}
            version, index = version + 1, 0
        while version <= latest and budget > 0:
            n = self._adds(version).num_rows
            if self.changes:  # whole commits: while they fit, and at least one
                if n > budget and (version, index) != (pos["version"], pos["index"]):
                    break
                version, index, budget = version + 1, 0, budget - n
                continue
            take = min(n - index, budget)
            index, budget = index + take, budget - take
            if index < n:
                break
            version, index = version + 1, 0
        end = {"version": version, "index": index, "initial": False}
        return start if end == self._normal(start) else end

    def _normal(self, pos: dict) -> dict:
        """``pos`` with the end of a snapshot's files written as the start of the next commit."""
        if pos["initial"] and pos["index"] >= self._snapshot_files(pos["version"]).num_rows:
            return {"version": pos["version"] + 1, "index": 0, "initial": False}
        return pos

    def commit(self, end: dict) -> None:
        done = self._normal(end)["version"]
        for cache in (self._commits, self._files):
            for v in [v for v in cache if v < done]:
                del cache[v]

    # -- the files of a range
    def _snapshot_files(self, version: int):
        if version not in self._files:
            from .engine.log.snapshot import load_snapshot

            snapshot = load_snapshot(_storage(self.root), self.root, version=version)
            self._check_schema(snapshot.metadata, version)
            files = snapshot.files.select(_LISTING)
            self._files[version] = files.sort_by("path")
        return self._files[version]

    def _check_schema(self, metadata, version: int) -> None:
        here = self._snapshot_state().metadata
        if (metadata.schema_string, metadata.partition_columns) != (here.schema_string, here.partition_columns):
            raise InvalidArgumentError(
                f"The schema of the Delta table at '{self.root}' changed at version {version}, during the stream",
                "a streaming query reads in the schema it started with (as delta-spark's source)",
                "restart the query: it continues from its checkpoint in the new schema",
            )

    def _snapshot_state(self):
        if self.snapshot is None:
            from .engine.log.snapshot import load_snapshot

            self.snapshot = load_snapshot(_storage(self.root), self.root)
        return self.snapshot

    def _adds(self, version: int):
        """Commit ``version``'s data-change adds (its whole change count with ``readChangeFeed``);
        an empty table for a commit to skip; the error of a commit a stream of appends cannot take."""
        if version in self._commits:
            return self._commits[version]
        import pyarrow.compute as pc

        from .engine.actions import CommitInfo, Metadata
        from .engine.log.commit_read import read_commit
        from .engine.log.file_actions import partition_keys_of
        from .engine.log.listing import commit_path

        storage = _storage(self.root)
        here = self._snapshot_state().metadata
        try:
            data = storage.read_bytes(commit_path(storage, self.root, version))
        except FileNotFoundError:
            from .engine.errors import VersionNotFoundError

            raise VersionNotFoundError(
                f"Version {version} of the Delta table at '{self.root}' is no longer in its log",
                "the stream fell behind the log's retention (delta.logRetentionDuration) and the commit was cleaned up",
                "restart the query with a fresh checkpoint (and startingVersion, if needed)",
            ) from None
        commit = read_commit(version, data, partition_keys=partition_keys_of(here))
        adds = commit.adds.filter(pc.fill_null(commit.adds.column("data_change"), True)).select(_LISTING)
        removed = commit.removes.filter(pc.fill_null(commit.removes.column("data_change"), True)).num_rows
        if self.changes:  # the change feed counts every changed file; its plan checks the rest
            self._commits[version] = _Count(adds.num_rows + removed)
            return self._commits[version]
        for meta in (a for a in commit.actions if isinstance(a, Metadata)):
            self._check_schema(meta, version)
        if removed:
            info = next((a for a in commit.actions if isinstance(a, CommitInfo)), None)
            operation = (info.operation if info is not None else None) or "an unknown operation"
            if self.skip_changes or (self.ignore_deletes and not adds.num_rows):
                adds = adds.slice(0, 0)
            elif not adds.num_rows:
                raise InvalidArgumentError(
                    f"Detected deleted data (for example {operation}) from streaming source at version "
                    f"{version}. This is currently not supported. The source table can be found at path {self.root}",
                    "a stream of a Delta table reads appends; this commit removed rows",
                    "set .option('ignoreDeletes', 'true') (or 'skipChangeCommits') to skip such commits, "
                    "or read the change feed with .option('readChangeFeed', 'true')",
                )
            else:
                raise InvalidArgumentError(
                    f"Detected a data update (for example {operation}) in the source table at version {version}. "
                    "This is currently not supported. If this is going to happen regularly and you are okay "
                    "to skip changes, set the option 'skipChangeCommits' to 'true'. The source table can be "
                    f"found at path {self.root}",
                    "a stream of a Delta table reads appends; this commit rewrote or removed rows",
                    "set .option('skipChangeCommits', 'true'), or read the change feed with "
                    ".option('readChangeFeed', 'true'), or restart with a fresh checkpoint",
                )
        self._commits[version] = adds
        return adds

    def partitions(self, start: dict, end: dict):
        if self.changes:
            return self._change_partitions(start, end)
        import pyarrow as pa

        from .engine.spark.scan import TASK_COLUMN, arrow_schema_of, files_table

        pieces = []
        if start["version"] < 0:  # the first batch: files of the snapshot its end names
            start = {"version": end["version"], "index": 0, "initial": True}
        if start["initial"]:
            files = self._snapshot_files(start["version"])
            stop = end["index"] if end["initial"] and end["version"] == start["version"] else files.num_rows
            pieces.append(files.slice(start["index"], stop - start["index"]))
            start = {"version": start["version"] + 1, "index": 0, "initial": False}
        if not end["initial"]:
            for v in range(start["version"], end["version"] + 1):
                lo = start["index"] if v == start["version"] else 0
                if v == end["version"] and not end["index"] - lo > 0:
                    break
                adds = self._adds(v)
                hi = end["index"] if v == end["version"] else adds.num_rows
                pieces.append(adds.slice(lo, hi - lo))
        files = pa.concat_tables(pieces) if pieces else None
        if files is None or files.num_rows == 0:
            return []
        snapshot = self._snapshot_state()
        plan = {
            "root": snapshot.table_root,
            "schema_json": snapshot.metadata.schema_string,
            "partition_columns": list(snapshot.metadata.partition_columns or []),
            "mode": snapshot.properties.column_mapping_mode_for(snapshot.schema),
            "arrow": arrow_schema_of(self.schema),
            "columns": [f.name for f in self.schema.fields],
        }
        n_tasks = min(files.num_rows, self.parallelism)
        listing = files_table(files, n_tasks)
        tasks = listing.column(TASK_COLUMN).to_numpy()
        listing = listing.drop_columns([TASK_COLUMN])
        return [InputPartition(("files", plan, listing.take((tasks == i).nonzero()[0]))) for i in range(n_tasks)]

    def _change_partitions(self, start: dict, end: dict):
        from .engine.cdf import INSERT, ChangeFile, ChangeReader, plan_changes
        from .engine.log.snapshot import load_snapshot
        from .engine.spark.scan import arrow_schema_of

        storage = _storage(self.root)
        if start["version"] < 0:
            start = {"version": end["version"], "index": 0, "initial": True}
        files = []
        if start["initial"]:  # the starting snapshot's rows, as inserts at its version
            snapshot = load_snapshot(storage, self.root, version=start["version"])
            ts = snapshot.timestamp or 0
            for r in self._snapshot_files(start["version"]).to_pylist():
                dv = r["deletion_vector"] if r["deletion_vector"] and r["deletion_vector"].get("storageType") else None
                files.append(ChangeFile(snapshot.version, ts, r["path"], dict(r["partition_values"] or []), INSERT, dv))
            plan = _snapshot_plan(self.root, snapshot, files)
            start = {"version": start["version"] + 1, "index": 0, "initial": False}
        last = end["version"] - 1 if not end["initial"] else -1
        if last >= start["version"]:
            changes = plan_changes(storage, self.root, start["version"], last)
            files.extend(changes.files)
            plan = changes
        if not files:
            return []
        plan.files = []
        reader = (ChangeReader(plan, [f.name for f in self.schema.fields[:-3]]), arrow_schema_of(self.schema))
        texts = [json.dumps(dataclasses.asdict(f)) for f in files]
        n_tasks = max(1, min(len(texts), self.parallelism))
        return [InputPartition(("changes", reader, texts[i::n_tasks])) for i in range(n_tasks)]

    def read(self, partition):
        from .engine.spark.session import guard_executor

        kind, *value = partition.value
        if kind == "changes":
            import pyarrow as pa

            from .engine.spark.scan import read_change_files

            (reader, arrow), texts = value
            batches = [pa.record_batch({"file": pa.array(texts, pa.string())})]
            return guard_executor(read_change_files(reader, batches, arrow))
        from .engine.spark.scan import read_planned_files

        p, listing = value
        return guard_executor(read_planned_files(p, listing))


class _Count:
    """A change-feed commit's number of changed files (what ``maxFilesPerTrigger`` counts)."""

    def __init__(self, n: int):
        self.num_rows = n


# --------------------------------------------------------------------------------------------------
# write

_STREAM_WRITER_BASE = getattr(_ds, "DataSourceStreamArrowWriter", _ds.DataSourceStreamWriter)


def _query_id(options) -> str | None:
    """The streaming query's id, from the ``metadata`` file Spark writes in the checkpoint when the
    query is first started (and keeps across restarts)."""
    location = options.get("checkpointLocation")
    if not location:
        return None
    from .engine.storage import normalize_table_uri

    root = normalize_table_uri(location)
    storage = _storage(root)
    try:
        return json.loads(storage.read_bytes(storage.join(root, "metadata"))).get("id")
    except (FileNotFoundError, ValueError):
        return None


def batch_options(options):
    """``options`` for the batch writer that writes each micro-batch: without the transaction
    options (the stream's commit supplies its own)."""
    kept = {k: v for k, v in options.items() if k.lower() not in ("txnappid", "txnversion")}
    return _ds.CaseInsensitiveDict(kept)


class DeltaStreamWriter(_STREAM_WRITER_BASE):
    """A streaming write: ``batch``, the batch writer (:class:`.datasource.DeltaWriter` of
    :func:`batch_options`), per micro-batch, its commit made idempotent by the SetTransaction
    ``(appId, batchId)`` (see the module docstring)."""

    def __init__(self, options, batch):
        app_id = options.get("txnAppId") or _query_id(options)
        if options.get("txnVersion") is not None:
            raise InvalidArgumentError(
                "txnVersion has no place in a streaming write",
                "each micro-batch commits with its own batch id as the transaction version",
                "drop txnVersion (txnAppId alone names the stream, if the query id should not)",
            )
        if not app_id:
            raise InvalidArgumentError(
                "Cannot tell which streaming query writes to the Delta table",
                "no checkpointLocation option holding the query's metadata and no txnAppId option; "
                "exactly-once commits need an id that survives restarts",
                "pass .option('checkpointLocation', '/chk/this-query') to writeStream (or "
                ".option('txnAppId', '<a name unique to this stream>'))",
            )
        self.app_id = str(app_id)
        self.batch = batch

    def write(self, iterator):
        return self.batch.write(iterator)

    def commit(self, messages, batchId: int) -> None:
        self.batch.app_id, self.batch.app_version = self.app_id, int(batchId)
        self.batch.commit(messages)

    def abort(self, messages, batchId: int) -> None:
        self.batch.abort(messages)
