"""OptimisticTransaction: read tracking, commit validation, commitInfo, put-if-absent and the retry loop.

Algorithm of :meth:`OptimisticTransaction.commit` (after delta-spark's OptimisticTransactionImpl):

1. **Idempotence**: with ``(app_id, app_version)`` and a snapshot already holding a txn version
   ``>= app_version`` for ``app_id`` (and not expired by ``delta.setTransactionRetentionDuration``),
   nothing is written: the result says ``skipped=True``.
2. **Prepare / validate** (nothing written on failure, :class:`InvalidCommitError`): at most one
   metaData and one protocol (``update_metadata``/``update_protocol`` or in ``actions``), version 0
   has both; no two adds or two removes of one path, no add and remove of the same (path, dvId);
   one txn per appId; every add/cdc has a value for exactly the partition columns; protocol never
   downgraded; ``delta.appendOnly``: no data-changing remove; the writer feature gate.
3. **Isolation level** (:func:`~.isolation.choose_isolation_level`) and ``isBlindAppend`` (read
   nothing, only adds). **commitInfo** first: timestamp, [inCommitTimestamp], operation,
   operationParameters, readVersion, isolationLevel, isBlindAppend, operationMetrics, engineInfo,
   txnId, userMetadata, airflow (the task instance: :func:`commit_provenance`). With in-commit
   timestamps active (protocol feature ``inCommitTimestamp`` and
   ``delta.enableInCommitTimestamps``): ``inCommitTimestamp`` = max(clock, previous commit's
   timestamp + 1), and the commit enabling them on an existing table records its version and ICT in
   ``delta.inCommitTimestampEnablementVersion/Timestamp`` (both redone when step 4 rebases). On a
   row-tracking table the adds get ``baseRowId``/``defaultRowCommitVersion`` and the high water mark
   moves (:func:`..row_tracking.assign`), redone on every attempt above the winners' marks.
4. **Write** the true next version with put-if-absent. Before each attempt one listing gives the
   log's latest version L (commits and checkpoints); it lists only the files from the last version
   known on (the storage's listing from a start key, :func:`..log.listing.latest_version`'s ``since``),
   not the whole log again, and a log without that version any more is a conflict (the table was
   replaced). Every commit from our attempt's version up to L
   is read and checked (:mod:`.conflicts`, raises the typed conflict) and the attempt moves to L+1.
   Why this cannot lose a commit behind log cleanup: cleanup deletes only commits older than a
   checkpoint, and a checkpoint at V needs commit V to exist first; so once the listing shows L as
   the newest version, commit L+1 cannot have existed and been cleaned up, and a put-if-absent of
   L+1 that succeeds is the true next version. A commit we must check that cleanup already removed
   is a retryable :class:`CommitConflictError` (the task's retry re-reads the table). A lost race
   (``FileExistsError``) simply loops: the next listing finds the winner. At most ``max_retries`` retries, then
   :class:`CommitRetriesExhaustedError`. A winner carrying our own ``(app_id, version >= ours)``
   (a concurrent run of the same idempotent write) makes the result ``skipped`` instead.
5. **Post-commit** (only after the commit file exists; failures here never fail the commit):
   checkpoint when ``version % delta.checkpointInterval == 0`` then expired-log cleanup when
   ``delta.enableExpiredLogCleanup``.

The outcome is a value (:class:`CommitResult`); exceptions are raised for invalid commits, for
conflicts (a retry of the whole operation may help: ``err.retryable``) and for I/O errors.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import row_tracking
from ..actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    parse_commit_bytes,
    serialize_actions,
)
from ..commit_identity import TxnIdentity
from ..config import (
    IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP,
    IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION,
    TableProperties,
)
from ..errors import (
    AppendOnlyViolationError,
    CommitConflictError,
    CommitRetriesExhaustedError,
    DeltaError,
    InvalidArgumentError,
    InvalidCommitError,
    LogCorruptedError,
)
from ..features import in_commit_timestamps_active
from ..isolation import IsolationLevel, choose_isolation_level
from ..log.file_actions import dv_unique_ids, partition_keys_of
from ..log.listing import commit_path, latest_version, log_dir_of
from ..partitions import require_data_column
from .conflicts import (
    CurrentTransaction,
    ReadPredicate,
    WholeTable,
    WinningCommit,
    check_winning_commit,
    to_read_predicate,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 50
ENGINE_INFO = "airflow-delta-provider"


#: the orchestrator's task instance that commits (``commitInfo.airflow``): set by the app for the run
#: (:func:`commit_provenance`), a context variable so that concurrent runs in one process keep theirs
_PROVENANCE: ContextVar[Mapping[str, Any] | None] = ContextVar("delta_commit_provenance", default=None)


@contextmanager
def commit_provenance(task: Mapping[str, Any] | None) -> Iterator[None]:
    """Every commit made inside records ``task`` (the Airflow task instance: ``dag_id``, ``task_id``,
    ``run_id``, ``map_index``, ``try_number``) as ``commitInfo.airflow``: the UI view links each
    version to the task instance that wrote it. None or empty: nothing recorded."""
    task = {k: _whole(v) if k in ("map_index", "try_number") else v for k, v in (task or {}).items()}
    token = _PROVENANCE.set(task or None)
    try:
        yield
    finally:
        _PROVENANCE.reset(token)


def _whole(value: Any) -> Any:
    """A number passed as text (the command line's KEY=VALUE) as the number it is."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


@functools.cache
def _engine_info() -> str:
    """``commitInfo.engineInfo`` (looked up once per process: the package metadata read costs ms)."""
    try:
        from importlib.metadata import version

        return f"{ENGINE_INFO}/{version('airflow-delta-provider')}"
    except Exception:  # not installed as a distribution (the apps' zip on a cluster)
        return ENGINE_INFO


@dataclass
class CommitResult:
    """Outcome of :meth:`OptimisticTransaction.commit`.

    :ivar version: the version written (skipped: the snapshot's version, or the concurrent commit's
        version that carried our ``(app_id, app_version)``)
    :ivar attempts: put-if-absent attempts (1 = landed on the first write; 0 = skipped, nothing written)
    :ivar skipped: the (app_id, app_version) had already been committed: nothing written
    :ivar commit_info: the commitInfo written (empty when skipped)
    :ivar checkpoint: the post-commit checkpoint metrics, or ``None``
    :ivar cleanup: the post-commit log-cleanup metrics, or ``None``
    :ivar conflicts_checked: versions of winning commits checked (and found compatible)
    :ivar post_commit_error: message of a failed checkpoint/cleanup (the commit itself succeeded)
    """

    version: int
    attempts: int
    skipped: bool
    commit_info: dict
    checkpoint: dict | None = None
    cleanup: dict | None = None
    conflicts_checked: list = field(default_factory=list)
    isolation_level: str | None = None
    post_commit_error: str | None = None

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "attempts": self.attempts,
            "skipped": self.skipped,
            "commit_info": self.commit_info,
            "checkpoint": self.checkpoint,
            "cleanup": self.cleanup,
            "conflicts_checked": list(self.conflicts_checked),
            "isolation_level": self.isolation_level,
            "post_commit_error": self.post_commit_error,
        }


def _encode_params(params: dict | None) -> dict:
    """operationParameters as delta-spark writes them: strings as-is, anything else JSON-encoded."""
    out = {}
    for k, v in (params or {}).items():
        if v is None:
            continue
        out[str(k)] = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return out


def _encode_metrics(metrics: dict | None) -> dict:
    """operationMetrics as delta-spark writes them: every value a string."""
    out = {}
    for k, v in (metrics or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        out[str(k)] = v if isinstance(v, str) else str(v)
    return out


class OptimisticTransaction:
    """One optimistic transaction against a table, based on ``snapshot`` (``None``: creating version 0).

    :param storage: the table's :class:`~airflow_delta_provider_apps.engine.storage.Storage`
    :param table_root: normalised table location
    :param snapshot: the snapshot read (``.version``, ``.metadata``, ``.protocol``,
        ``.set_transactions``), or ``None`` when the commit creates the table
    :param operation: Delta operation name for commitInfo (``WRITE``, ``DELETE``, ``CREATE TABLE``...)
    :param operation_parameters: commitInfo.operationParameters (non-strings are JSON-encoded)
    :param identity: the :class:`~..commit_identity.TxnIdentity` of the commit: its ``(app_id,
        app_version)`` SetTransaction (idempotent writes) and ``commitInfo.userMetadata``
    :param isolation_level: force a level for data-changing commits (else ``delta.isolationLevel``,
        else Serializable)
    :param max_retries: how many lost races to absorb before giving up (default 50)
    :param engine_info: commitInfo.engineInfo (default ``airflow-delta-provider/<version>``)
    :param clock: ``() -> epoch ms`` (tests)
    :param post_commit: run checkpoint/cleanup after the commit (default True)
    :param readds_files: the adds bring back files the read version no longer has (RESTORE): a
        concurrent VACUUM START is a conflict
    """

    def __init__(
        self,
        storage,
        table_root: str,
        snapshot=None,
        *,
        operation: str = "WRITE",
        operation_parameters: dict | None = None,
        identity: TxnIdentity | None = None,
        isolation_level: IsolationLevel | str | None = None,
        max_retries: int | None = None,
        engine_info: str | None = None,
        clock: Callable[[], int] | None = None,
        post_commit: bool = True,
        readds_files: bool = False,
    ):
        if max_retries is not None and int(max_retries) < 0:
            raise InvalidArgumentError(f"max_retries={max_retries} is negative", None, "pass 0 or more")
        self.storage = storage
        self.table_root = table_root
        self.snapshot = snapshot
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.identity = identity or TxnIdentity()  # checked when made
        self.app_id, self.app_version = self.identity.app_id, self.identity.app_version
        self.requested_isolation = IsolationLevel.parse(isolation_level) if isolation_level is not None else None
        self.max_retries = DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries)
        self.engine_info = engine_info or _engine_info()
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.post_commit_enabled = post_commit
        self.readds_files = readds_files  # RESTORE: a concurrent VACUUM START conflicts (conflicts.check_vacuum)

        self.read_version: int = snapshot.version if snapshot is not None else -1
        self._read_metadata: Metadata | None = getattr(snapshot, "metadata", None) if snapshot is not None else None
        # the read snapshot's table properties (parsed once, on first use of each)
        self._read_properties = TableProperties.of(self._read_metadata)
        self._read_protocol: Protocol | None = getattr(snapshot, "protocol", None) if snapshot is not None else None
        self.new_metadata: Metadata | None = None
        self.new_protocol: Protocol | None = None

        self.read_whole_table_flag = False
        self._read_file_chunks: list[pa.Array] = []  # paths as arrow arrays (no Python object per file)
        self.read_predicates: list[ReadPredicate] = []
        self.read_app_ids: set[str] = set()
        self.committed: CommitResult | None = None
        if self.app_id is not None:
            self.read_app_ids.add(self.app_id)

    # ------------------------------------------------------------------ state accessors
    @property
    def metadata(self) -> Metadata | None:
        """The metadata this commit will leave (new one if updated)."""
        return self.new_metadata or self._read_metadata

    @property
    def protocol(self) -> Protocol | None:
        return self.new_protocol or self._read_protocol

    def txn_version(self, app_id: str) -> int | None:
        """The latest committed txn version for ``app_id`` in the snapshot (expired txns ignored);
        registers the read so a concurrent commit for the same app id is a conflict."""
        self.read_app_ids.add(app_id)
        if self.snapshot is None:
            return None
        txns = getattr(self.snapshot, "set_transactions", None) or {}
        t = txns.get(app_id)
        if t is None:
            return None
        retention = self._read_properties.set_transaction_retention_ms
        if retention is not None and t.last_updated is not None and t.last_updated < self.clock() - retention:
            return None
        return t.version

    def is_duplicate(self) -> bool:
        """True when this (app_id, app_version) already landed: the caller should skip its work."""
        if self.app_id is None:
            return False
        v = self.txn_version(self.app_id)
        return v is not None and v >= self.app_version

    # ------------------------------------------------------------------ read tracking
    def read_whole_table(self) -> None:
        """The operation depends on every file of the table (e.g. an unfiltered DELETE or overwrite)."""
        self.read_whole_table_flag = True

    def read_files(self, files: Iterable[str] | pa.Table | pa.Array) -> None:
        """The operation read these files (paths as in the log: a table/batch with a ``path`` column,
        an arrow string array, or any iterable of strings)."""
        if isinstance(files, (pa.Table, pa.RecordBatch)):
            col = files.column("path")
        elif isinstance(files, (pa.Array, pa.ChunkedArray)):
            col = files
        elif isinstance(files, str):
            col = pa.array([files], pa.string())
        else:
            col = pa.array(list(files), pa.string())
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if len(col):
            self._read_file_chunks.append(col.cast(pa.string()))

    @property
    def read_file_paths(self) -> pa.Array:
        """Every path registered with :meth:`read_files` (arrow string array)."""
        if not self._read_file_chunks:
            return pa.array([], pa.string())
        if len(self._read_file_chunks) > 1:
            self._read_file_chunks = [pa.concat_arrays(self._read_file_chunks)]
        return self._read_file_chunks[0]

    def read_predicate(self, predicate: Any) -> None:
        """The operation read the files matching ``predicate`` (see :func:`.conflicts.to_read_predicate`);
        a concurrent add matching it is a conflict (per isolation level)."""
        pred = to_read_predicate(predicate)
        if isinstance(pred, WholeTable):
            self.read_whole_table_flag = True
        else:
            self.read_predicates.append(pred)

    @property
    def reads_anything(self) -> bool:
        return self.read_whole_table_flag or bool(self._read_file_chunks) or bool(self.read_predicates)

    # ------------------------------------------------------------------ metadata updates
    def update_metadata(self, metadata: Metadata) -> None:
        if self.new_metadata is not None:
            raise InvalidCommitError(
                "Cannot change the table metadata twice in one transaction",
                "update_metadata was already called",
                "build one Metadata with every change and pass it once",
            )
        self.new_metadata = metadata

    def update_protocol(self, protocol: Protocol) -> None:
        if self.new_protocol is not None:
            raise InvalidCommitError(
                "Cannot change the table protocol twice in one transaction",
                "update_protocol was already called",
                "pass one Protocol with every feature needed",
            )
        self.new_protocol = protocol

    # ------------------------------------------------------------------ validation
    def _prepare(self, actions: list) -> tuple[list, dict]:
        """Validated actions (without commitInfo) and extra commitInfo values given by the caller."""
        extra_ci: dict = {}
        out: list = []
        for a in actions:
            if isinstance(a, CommitInfo):
                extra_ci.update(a.values)
            elif isinstance(a, Metadata):
                if self.new_metadata is not None and a != self.new_metadata:
                    raise InvalidCommitError(
                        "A commit may contain at most one metaData action",
                        "update_metadata() and the actions list carry different metaData",
                        "pass the metadata once",
                    )
                self.new_metadata = a
            elif isinstance(a, Protocol):
                if self.new_protocol is not None and a != self.new_protocol:
                    raise InvalidCommitError(
                        "A commit may contain at most one protocol action",
                        "update_protocol() and the actions list carry different protocols",
                        "pass the protocol once",
                    )
                self.new_protocol = a
            elif a is None:
                continue
            else:
                out.append(a)
        if self.read_version < 0:
            missing = [n for n, v in (("metaData", self.new_metadata), ("protocol", self.new_protocol)) if v is None]
            if missing:
                raise InvalidCommitError(
                    "The first commit of a table must contain a metaData and a protocol action",
                    f"missing: {', '.join(missing)}",
                    "call txn.update_metadata(...) and txn.update_protocol(...) before committing version 0",
                )
        elif self._read_metadata is None or self._read_protocol is None:
            raise InvalidCommitError(
                "The snapshot this transaction is based on has no metaData or protocol",
                f"snapshot version {self.read_version}",
                "load the snapshot with load_snapshot()",
            )
        metadata, protocol = self.metadata, self.protocol
        if self.new_metadata is not None and self.read_version >= 0:
            from ..features import protocol_for_schema

            wider = protocol_for_schema(protocol, metadata)  # a variant column added: variantType, as delta-spark
            if wider is not protocol:
                self.new_protocol = protocol = wider
        if self.new_metadata is not None:  # every schema change passes here: drop, overwrite, merge_schema
            names = [f.get("name") for f in metadata.schema_json.get("fields", [])]
            require_data_column(names, metadata.partition_columns, f"This {self.operation} commit")
            if self.snapshot is not None:
                from ..clustering import check_schema_keeps_columns

                check_schema_keeps_columns(self.snapshot, metadata, out)
        self._validate_protocol(protocol)
        self._validate_file_actions(out, metadata)
        self._validate_against_snapshot(out)
        self._validate_txns(out)
        self._validate_domains(out, protocol)
        self._check_append_only(out, metadata)
        self._check_features(protocol, metadata)

        head: list = []
        if self.new_protocol is not None:
            head.append(self.new_protocol)
        if self.new_metadata is not None:
            head.append(self.new_metadata)
        if self.app_id is not None and not any(isinstance(a, SetTransaction) and a.app_id == self.app_id for a in out):
            head.append(SetTransaction(app_id=self.app_id, version=self.app_version, last_updated=self.clock()))
        return head + out, extra_ci

    def _validate_protocol(self, protocol: Protocol) -> None:
        old = self._read_protocol
        new = self.new_protocol
        if old is None or new is None:
            return
        if new.min_reader_version < old.min_reader_version or new.min_writer_version < old.min_writer_version:
            raise InvalidCommitError(
                "A commit may not downgrade the table protocol",
                f"reader {old.min_reader_version}->{new.min_reader_version}, writer "
                f"{old.min_writer_version}->{new.min_writer_version}",
                "keep the protocol versions at least as high as the table's",
            )
        dropped = (set(old.writer_features or ()) - set(new.writer_features or ())) | (
            set(old.reader_features or ()) - set(new.reader_features or ())
        )
        if dropped and (new.writer_features is not None or new.reader_features is not None):
            raise InvalidCommitError(
                "A commit may not remove table features from the protocol",
                f"dropped: {', '.join(sorted(dropped))}",
                "keep every existing feature in the new protocol",
            )

    def _validate_file_actions(self, actions: list, metadata: Metadata) -> None:
        from ..log.file_actions import partition_keys_of

        part_cols = list(metadata.partition_columns or [])
        part_set = set(partition_keys_of(metadata))  # physical names under column mapping
        adds: dict[str, str | None] = {}  # path -> deletion vector id, of the adds and of the removes
        removes: dict[str, str | None] = {}
        for a in actions:
            seen = adds if isinstance(a, AddFile) else removes if isinstance(a, RemoveFile) else None
            if seen is None:
                continue
            if a.path in seen:
                raise InvalidCommitError(
                    f"The commit {a.ACTION_KEY}s the file '{a.path}' twice",
                    f"a commit may contain at most one {a.ACTION_KEY} per path",
                    f"deduplicate the {a.ACTION_KEY} actions",
                )
            seen[a.path] = a.dv_unique_id
        both = set(adds.items()) & set(removes.items())
        if both:
            p = sorted(both, key=str)[0]
            raise InvalidCommitError(
                f"The commit both adds and removes the file '{p[0]}' with the same deletion vector",
                "an add and a remove of one logical file (path, deletion vector) cancel out",
                "only add and remove the same path when the deletion vector changes",
            )
        for a in actions:
            if isinstance(a, (AddFile, AddCDCFile)):
                keys = set((a.partition_values or {}).keys())
                if keys != part_set:
                    missing = sorted(part_set - keys)
                    extra = sorted(keys - part_set)
                    cause = []
                    if missing:
                        cause.append(f"missing values for {missing}")
                    if extra:
                        cause.append(f"values for non-partition columns {extra}")
                    raise InvalidCommitError(
                        f"The file '{a.path}' has partition values that do not match the table's partition "
                        f"columns {part_cols}",
                        "; ".join(cause),
                        "give every added file a value (or null) for exactly the partition columns",
                    )

    def _validate_against_snapshot(self, actions: list) -> None:
        """An add of a path that is live with another deletion vector must remove that logical file
        in the same commit (spec: no two live logical files per path). Vectorised lookup of the
        added paths in ``snapshot.files``."""
        adds = {a.path: a.dv_unique_id for a in actions if isinstance(a, AddFile)}
        files = getattr(self.snapshot, "files", None) if self.snapshot is not None else None
        if not adds or files is None or files.num_rows == 0:
            return
        live = files.filter(pc.is_in(files.column("path"), value_set=pa.array(list(adds), pa.string())))
        if live.num_rows == 0:
            return
        # ``snapshot.files`` follows FILE_SCHEMA: its deletion_vector column is always there
        live_ids = dv_unique_ids(live.column("deletion_vector").combine_chunks(), live.num_rows).to_pylist()
        removed = {(a.path, a.dv_unique_id) for a in actions if isinstance(a, RemoveFile)}
        for path, live_id in zip(live.column("path").to_pylist(), live_ids):
            if live_id != adds[path] and (path, live_id) not in removed:
                raise InvalidCommitError(
                    f"The commit adds '{path}', which is already live with another deletion vector",
                    f"the live file has deletion vector {live_id!r}, the add has {adds[path]!r}, and the commit "
                    "does not remove the live one",
                    "remove the live logical file (same path and deletion vector) in the same commit",
                )

    @staticmethod
    def _validate_txns(actions: list) -> None:
        seen: set = set()
        for a in actions:
            if isinstance(a, SetTransaction):
                if a.app_id in seen:
                    raise InvalidCommitError(
                        f"The commit contains two txn actions for application id '{a.app_id}'",
                        None,
                        "keep one txn action per application id",
                    )
                seen.add(a.app_id)

    @staticmethod
    def _validate_domains(actions: list, protocol: Protocol) -> None:
        domains = [a for a in actions if isinstance(a, DomainMetadata)]
        if not domains:
            return
        if "domainMetadata" not in set(protocol.writer_features or ()):
            raise InvalidCommitError(
                "The commit writes domain metadata but the table does not support it",
                f"protocol writer version {protocol.min_writer_version} without the 'domainMetadata' writer feature",
                "upgrade the protocol to writer version 7 with the 'domainMetadata' feature first",
            )
        seen: set = set()
        for d in domains:
            if d.domain in seen:
                raise InvalidCommitError(
                    f"The commit contains two domainMetadata actions for domain '{d.domain}'",
                    None,
                    "keep one action per domain",
                )
            seen.add(d.domain)

    def _check_append_only(self, actions: list, metadata: Metadata) -> None:
        if not TableProperties.of(metadata).append_only and not self._read_properties.append_only:
            return
        bad = next((a for a in actions if isinstance(a, RemoveFile) and a.data_change), None)
        if bad is not None:
            raise AppendOnlyViolationError(
                f"Cannot {self.operation} the table: it is append-only",
                f"delta.appendOnly=true and this commit removes data (file '{bad.path}')",
                "only append to this table, or ALTER TABLE ... SET TBLPROPERTIES ('delta.appendOnly'='false') first",
            )

    @staticmethod
    def _check_features(protocol: Protocol, metadata: Metadata) -> None:
        """The feature gate: every commit writes only tables whose features this engine honours."""
        from ..features import check_write_supported

        check_write_supported(protocol, metadata)

    # ------------------------------------------------------------------ commit
    def _commit_time(self, version: int, commit_info: dict | None = None) -> int | None:
        """A commit's timestamp: its ``inCommitTimestamp``, else its file's modification time."""
        if commit_info is None:
            try:
                data = self.storage.read_bytes(commit_path(self.storage, self.table_root, version))
            except FileNotFoundError:
                return None
            commit_info = next((a.values for a in parse_commit_bytes(data) if isinstance(a, CommitInfo)), {})
        ict = commit_info.get("inCommitTimestamp")
        if ict is not None:
            return int(ict)
        try:
            return self.storage.file_info(commit_path(self.storage, self.table_root, version)).mtime_ms
        except FileNotFoundError:
            return None

    def _previous_timestamp(self) -> int | None:
        """The read version's commit timestamp (the snapshot keeps it: its ``inCommitTimestamp``, or
        the commit file's time before in-commit timestamps were enabled)."""
        if self.read_version < 0:
            return None
        ts = getattr(self.snapshot, "timestamp", None)
        return ts if isinstance(ts, int) else self._commit_time(self.read_version)

    def _ict_metadata(self, actions: list, enabling: bool, version: int, ict: int) -> list:
        """``actions`` with the metaData carrying the in-commit timestamp enablement properties:
        this commit's version and ICT when it enables them on an existing table (recomputed on every
        attempt: a rebase changes both), else the read metadata's when a new metaData dropped them."""
        md = next((a for a in actions if isinstance(a, Metadata)), None)
        if md is None:
            return actions
        if enabling:
            keep = {
                IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION: str(version),
                IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP: str(ict),
            }
        else:
            old = (self._read_metadata.configuration or {}) if self._read_metadata is not None else {}
            keep = {
                k: old[k]
                for k in (IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION, IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP)
                if k in old and k not in (md.configuration or {})
            }
        if not keep:
            return actions
        new_md = dataclasses.replace(md, configuration={**(md.configuration or {}), **keep})
        self.new_metadata = new_md
        return [new_md if a is md else a for a in actions]

    def commit(self, actions: Iterable[Any] = (), operation_metrics: dict | None = None) -> CommitResult:
        """Validate and write the commit; retry on lost races after checking for conflicts.

        :param actions: data actions (add/remove/cdc/txn/domainMetadata; metaData/protocol allowed too)
        :param operation_metrics: commitInfo.operationMetrics (values rendered as strings)
        :returns: :class:`CommitResult`
        :raises InvalidCommitError, AppendOnlyViolationError: nothing was written
        :raises CommitConflictError: a concurrent commit conflicts (subclass says which)
        """
        if self.committed is not None:
            raise InvalidCommitError(
                "This transaction has already committed",
                f"it wrote version {self.committed.version}",
                "start a new transaction for another commit",
            )
        actions = list(actions)
        if self.is_duplicate():
            self.committed = CommitResult(version=self.read_version, attempts=0, skipped=True, commit_info={})
            return self.committed

        final_actions, extra_ci = self._prepare(actions)
        level = choose_isolation_level(
            final_actions,
            TableProperties.of(self._read_metadata or self.metadata).isolation_level,
            self.requested_isolation,
        )
        file_actions = [a for a in final_actions if isinstance(a, (AddFile, RemoveFile))]
        is_blind_append = (not self.reads_anything) and all(isinstance(a, AddFile) for a in file_actions)

        now = self.clock()
        ci: dict = {"timestamp": now}
        # in-commit timestamps (PROTOCOL.md): after the previous commit's timestamp, even if the clock
        # went back; the commit enabling them on an existing table records its version and ICT
        ict_enabled = in_commit_timestamps_active(self.protocol, self.metadata)
        enabling = (
            ict_enabled
            and self.read_version >= 0
            and not in_commit_timestamps_active(self._read_protocol, self._read_metadata)
        )
        if enabling and self.new_metadata is None:  # a protocol-only enablement: the record needs a metaData
            self.new_metadata = self.metadata
            at = sum(isinstance(a, Protocol) for a in final_actions)
            final_actions = final_actions[:at] + [self.new_metadata] + final_actions[at:]
        if ict_enabled:
            prev = self._previous_timestamp()
            ci["inCommitTimestamp"] = max(now, (prev + 1) if prev is not None else now)
        ci["operation"] = self.operation
        ci["operationParameters"] = _encode_params(self.operation_parameters)
        if self.read_version >= 0:
            ci["readVersion"] = self.read_version
        ci["isolationLevel"] = level.value
        ci["isBlindAppend"] = is_blind_append
        ci["operationMetrics"] = _encode_metrics(operation_metrics)
        if self.identity.user_metadata is not None:
            ci["userMetadata"] = self.identity.user_metadata
        ci["engineInfo"] = self.engine_info
        if _PROVENANCE.get():
            ci["airflow"] = dict(_PROVENANCE.get())
        ci["txnId"] = str(uuid.uuid4())
        for k, v in extra_ci.items():
            ci.setdefault(k, v)

        current = CurrentTransaction(
            read_version=self.read_version,
            isolation_level=level,
            actions=final_actions,
            read_whole_table=self.read_whole_table_flag,
            read_files=self.read_file_paths,
            read_predicates=list(self.read_predicates),
            read_app_ids=frozenset(self.read_app_ids),
            metadata_changed=self.new_metadata is not None,
            readds_files=self.readds_files,
            read_protocol=self._read_protocol,
            read_metadata=self._read_metadata,
        )

        # row tracking: the adds get their row ids on every attempt, above the highest mark seen
        # (the read snapshot's, then each winner's: a rebase never reuses a winner's ids)
        row_ids = row_tracking.supported(self.protocol, self.metadata)
        high_water = row_tracking.high_water_mark(getattr(self.snapshot, "domain_metadata", None))
        if row_tracking.enabled(self.protocol, self.metadata):
            ci["tags"] = {**ci.get("tags", {}), row_tracking.PRESERVED_TAG: "true"}

        if self.read_version < 0:
            self.storage.mkdirs(log_dir_of(self.storage, self.table_root))
        version = self.read_version + 1
        attempts = 0
        checked: list[int] = []
        while True:
            if self.read_version >= 0:
                # Land only at the true next version: when the log already has `version` (or a
                # checkpoint at or past it), check every commit we did not read, then rebase. The
                # listing starts at version - 1 (the newest one known): what is older is not needed.
                latest = latest_version(self.storage, self.table_root, since=version - 1)
                if latest is None:
                    raise CommitConflictError(
                        "The table's log changed under this transaction",
                        f"it read version {self.read_version}, but the log no longer has version {version - 1} "
                        "or any later one (the table was removed or replaced)",
                        "retry the operation (it re-reads the table)",
                    )
                for v in range(version, latest + 1):
                    winner = self._winning_commit(v)
                    if self._landed_by(winner):
                        # a concurrent run of the same idempotent write (same app id, version >= ours)
                        # landed first: our work is a duplicate, nothing is written
                        self.committed = CommitResult(
                            version=v,
                            attempts=attempts,
                            skipped=True,
                            commit_info={},
                            conflicts_checked=checked,
                            isolation_level=level.value,
                        )
                        return self.committed
                    check_winning_commit(current, winner)
                    checked.append(v)
                    high_water = max(high_water, row_tracking.high_water_mark(winner.domains))
                    if ict_enabled:  # rebased: after the winner's timestamp
                        won_at = self._commit_time(v, winner.commit_info or {})
                        if won_at is not None:
                            ci["inCommitTimestamp"] = max(ci["inCommitTimestamp"], won_at + 1)
                version = max(version, latest + 1)
            if attempts >= self.max_retries + 1:
                raise CommitRetriesExhaustedError(
                    f"Gave up committing to the table after {attempts} attempts",
                    f"concurrent writers kept taking the next version (last tried {version}); the "
                    f"retry budget is {self.max_retries}",
                    "retry later or raise max_retries; reduce the number of concurrent writers",
                    winning_version=version - 1,
                )
            attempts += 1
            if ict_enabled and self.read_version >= 0:
                final_actions = self._ict_metadata(final_actions, enabling, version, ci["inCommitTimestamp"])
            written = final_actions
            if row_ids:
                live = getattr(self.snapshot, "files", None) if self.snapshot is not None else None
                written, _ = row_tracking.assign(final_actions, high_water=high_water, version=version, live=live)
            data = serialize_actions([CommitInfo(dict(ci))] + written)
            try:
                self.storage.write_bytes(commit_path(self.storage, self.table_root, version), data, overwrite=False)
                break
            except IsADirectoryError:
                raise LogCorruptedError(
                    f"Cannot write commit {version} of the table: a directory is in its place",
                    f"'{commit_path(self.storage, self.table_root, version)}' is a directory",
                    "remove that directory from _delta_log (it is not part of the Delta log)",
                ) from None
            except FileExistsError:
                if self.read_version < 0:  # another writer created the table: the checker names it
                    check_winning_commit(current, self._winning_commit(version))
                    raise CommitConflictError(
                        "Another writer created the table first",
                        f"version {version} already exists",
                        "retry the operation (it re-reads the table)",
                        winning_version=version,
                    ) from None
                continue  # lost the race for `version`: the listing above finds the winner

        result = CommitResult(
            version=version,
            attempts=attempts,
            skipped=False,
            commit_info=ci,
            conflicts_checked=checked,
            isolation_level=level.value,
        )
        self.committed = result
        if self.post_commit_enabled:
            if version == self.read_version + 1:  # the state is the read one plus ours: its checksum
                self._write_checksum(version, written, ci)
            self._post_commit(result)
        return result

    def _write_checksum(self, version: int, actions: list, commit_info: dict) -> None:
        """``<version>.crc`` (:mod:`..log.checksum`); best effort, never raises."""
        try:
            from ..log.checksum import next_state, write_checksum

            state = next_state(self.snapshot if self.read_version >= 0 else None, actions, commit_info)
            write_checksum(self.storage, self.table_root, version, state)
        except Exception as e:
            log.warning("the checksum of version %s was not written: %s", version, e)

    def _winning_commit(self, version: int) -> WinningCommit:
        """A commit this transaction did not read; unreadable (cleaned up) is a retryable conflict."""
        try:
            raw = self.storage.read_bytes(commit_path(self.storage, self.table_root, version))
        except FileNotFoundError:
            raise CommitConflictError(
                f"Cannot check concurrent commit {version} against this transaction",
                f"it read version {self.read_version}; commit {version} has since been removed by log cleanup "
                "behind a newer checkpoint, so its changes cannot be checked for conflicts",
                "retry the operation (it re-reads the table at its latest version)",
                winning_version=version,
            ) from None
        keys = partition_keys_of(self._read_metadata) if self._read_metadata is not None else None
        return WinningCommit.from_bytes(version, raw, partition_keys=keys, table_root=self.table_root)

    def _landed_by(self, winner: WinningCommit) -> bool:
        if self.app_id is None:
            return False
        return any(t.app_id == self.app_id and t.version >= self.app_version for t in winner.txns)

    # ------------------------------------------------------------------ post-commit
    def _listing_at(self, result: CommitResult):
        """The log's listing at our new version without listing it again: the one the read snapshot
        was loaded from plus our commit (one ``file_info``); ``None`` (the checkpoint lists the log
        itself) when others committed in between or the snapshot holds no listing."""
        read = getattr(self.snapshot, "listing", None)
        if read is None or result.version != self.read_version + 1:
            return None
        try:
            info = self.storage.file_info(commit_path(self.storage, self.table_root, result.version))
        except FileNotFoundError:
            return None
        return read.with_commit(result.version, info)

    def _post_commit(self, result: CommitResult) -> None:
        """Checkpoint every ``delta.checkpointInterval`` versions, then expired-log cleanup; on a
        table whose checkpoints are further apart, a log compaction every ``SPAN`` versions.

        Runs only after the commit file exists; an error is logged and recorded in the result,
        never raised (the commit has landed)."""
        metadata = self.metadata
        try:
            interval = TableProperties.of(metadata).checkpoint_interval
        except DeltaError as e:
            result.post_commit_error = str(e)
            return
        from ..log.compaction import SPAN, compaction_due, write_compaction

        if compaction_due(result.version, interval):  # checkpoints far apart: the span in one file
            write_compaction(self.storage, self.table_root, result.version - SPAN + 1, result.version)
        if result.version == 0 or result.version % interval != 0:
            return
        try:
            from ..log.checkpoint import checkpoint_after_commit

            result.checkpoint, result.cleanup = checkpoint_after_commit(
                self.storage, self.table_root, result.version, now_ms=self.clock(), listing=self._listing_at(result)
            )
        except Exception as e:
            log.warning("post-commit checkpoint of version %s failed: %s", result.version, e)
            result.post_commit_error = f"{type(e).__name__}: {e}"
