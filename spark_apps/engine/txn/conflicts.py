"""Conflict detection between this transaction and one winning commit (after delta-spark's ConflictChecker).

When our put-if-absent of version ``v`` fails, every commit written since our read version
("winning commit") is checked, oldest first, by :class:`ConflictChecker`. The checks run in this
order, each raising ONE typed error (all subclasses of ``CommitConflictError``):

1. ``check_protocol``        winner changed the protocol                -> ProtocolChangedError
2. ``check_metadata``        winner changed the metadata                -> MetadataChangedError
3. ``check_app_txns``        winner wrote a txn for an appId we read    -> ConcurrentTransactionError
                              (the transaction first turns a winner holding OUR appId with a
                              version >= ours into a *skipped* result: the same write landed)
4. ``check_added_files_read`` winner added (dataChange) files matching our read predicates
                              -> ConcurrentAppendError. Which adds count depends on the isolation
                              level: Serializable all; WriteSerializable all but the winner's blind
                              appends (unless we change metadata); SnapshotIsolation none.
5. ``check_deleted_read``    winner removed a file we read (or any file when we read the whole
                              table)                                      -> ConcurrentDeleteReadError
6. ``check_deleted_deleted`` winner removed a file we also remove      -> ConcurrentDeleteDeleteError
7. ``check_domain_metadata`` winner touched a metadata domain we touch  -> ConcurrentTransactionError
                              (not ``delta.rowTracking``: our row ids move above the winner's mark)
8. ``check_vacuum``          we bring back files a version no longer had (RESTORE) and the winner
                              is a VACUUM START: its deletes may run after our existence check
                              -> ConcurrentVacuumError (a VACUUM already running when we read is
                              refused by RESTORE itself, from VACUUM's lease; see commands/vacuum.py)

A transaction that read nothing (a blind append) therefore only conflicts on protocol/metadata.

A :class:`WinningCommit` is read with the log's vectorised commit reader
(:func:`airflow_delta_provider_apps.engine.log.commit_read.read_commit`): its adds and removes are
Arrow tables of the snapshot's schemas (``FILE_SCHEMA`` / ``REMOVE_SCHEMA``: ``path``,
``partition_values`` map<string,string>, ``size``, ``data_change``, ``stats``, ...), its other
actions objects. So a winner with 100k adds costs one ``pyarrow.json`` pass, not 100k objects.

Read predicates (:class:`ReadPredicate`) are evaluated vectorised on the winner's adds table:
:class:`PartitionFilter` (dict or DNF tuples over partition values), :class:`ExpressionPredicate`
(the predicate model, over typed partition values and stats) and :class:`CallablePredicate` (any
``fn(adds) -> boolean mask``). Removed paths are matched with ``pc.is_in``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions import (
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    serialize_actions,
)
from ..errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    InvalidArgumentError,
    MetadataChangedError,
    ProtocolChangedError,
)
from ..isolation import IsolationLevel
from ..log.commit_read import read_commit
from ..paths import confine_file_table

# --------------------------------------------------------------------------------------------
# read predicates
# --------------------------------------------------------------------------------------------


class ReadPredicate:
    """What a transaction read, as a filter over files. Subclasses implement :meth:`matches`.

    ``matches(adds)`` returns a boolean array (one per row of ``adds``); null counts as "may
    match" (a conflict), because a predicate that cannot rule a file out must assume it read it.
    """

    def matches(self, adds: pa.Table) -> pa.Array:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__

    def any_match(self, adds: pa.Table) -> int | None:
        """Row index of the first add that (may) match, or ``None``."""
        if adds.num_rows == 0:
            return None
        mask = self.matches(adds)
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        if not isinstance(mask, pa.Array):
            mask = pa.array(mask, pa.bool_())
        mask = pc.fill_null(mask, True)
        idx = pc.index(mask, True).as_py()
        return None if idx is None or idx < 0 else idx


class WholeTable(ReadPredicate):
    """Matches every file."""

    def matches(self, adds: pa.Table) -> pa.Array:
        return pa.array([True] * adds.num_rows, pa.bool_())

    def describe(self) -> str:
        return "the whole table"


def _partition_string(value: Any) -> str | None:
    """Python value -> Delta partition value string (``None`` = null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_OPS = ("=", "==", "!=", "<>", "in", "not in", "is null", "is not null")


class PartitionFilter(ReadPredicate):
    """A filter on partition values.

    Accepts ``{"col": value}`` / ``{"col": [v1, v2]}`` (AND of equalities / IN lists; ``None`` is
    the null partition) or deltalake-style DNF: a list of ``(col, op, value)`` tuples (AND) or a
    list of such lists (OR of ANDs); ops ``= != in not in is null is not null`` with SQL null
    semantics (``p != 'a'`` and ``p not in (...)`` do not match a null partition; ``= None`` means
    ``is null``). Values are compared as Delta partition strings (``1`` -> ``"1"``, ``True`` ->
    ``"true"``); the empty string in a log counts as null.
    """

    def __init__(self, spec: Mapping[str, Any] | list):
        if isinstance(spec, Mapping):
            conj = []
            for col, v in spec.items():
                if isinstance(v, (list, tuple, set, frozenset)):
                    conj.append((col, "in", list(v)))
                else:
                    conj.append((col, "=", v))
            self.dnf: list[list[tuple]] = [conj]
        elif isinstance(spec, list) and spec and all(isinstance(t, tuple) for t in spec):
            self.dnf = [list(spec)]
        elif isinstance(spec, list) and all(isinstance(c, list) for c in spec):
            self.dnf = [list(c) for c in spec]
        else:
            raise InvalidArgumentError(
                "Cannot use this partition filter as a read predicate",
                f"got {type(spec).__name__}: {spec!r}",
                "pass a dict {column: value} or a list of (column, op, value) tuples",
            )
        for conj in self.dnf:
            for t in conj:
                if len(t) not in (2, 3) or str(t[1]).lower() not in _OPS:
                    raise InvalidArgumentError(
                        f"Bad partition filter term {t!r}",
                        f"ops allowed: {', '.join(_OPS)}",
                        "write terms as (column, op, value)",
                    )

    def _term(self, pv: pa.Array, col: str, op: str, value: Any) -> pa.Array:
        got = pc.map_lookup(pv, pa.scalar(col, pa.string()), "first")
        got = pc.if_else(pc.equal(got, ""), pa.scalar(None, pa.string()), got)
        op = op.lower()
        if op in ("=", "==") and value is None or op == "is null":
            return pc.is_null(got)
        if op in ("!=", "<>") and value is None or op == "is not null":
            return pc.is_valid(got)
        if op in ("=", "=="):
            return pc.fill_null(pc.equal(got, _partition_string(value)), False)
        if op in ("!=", "<>"):  # SQL: null != x is not true
            return pc.fill_null(pc.not_equal(got, _partition_string(value)), False)
        values = [_partition_string(v) for v in value]
        has_null = any(v is None for v in values)
        inside = pc.fill_null(
            pc.is_in(got, value_set=pa.array([v for v in values if v is not None], pa.string())), False
        )
        if op == "in":
            return pc.or_(inside, pc.is_null(got)) if has_null else inside
        # SQL: a null partition value is never "not in" a list
        return pc.and_(pc.invert(inside), pc.is_valid(got))

    def matches(self, adds: pa.Table) -> pa.Array:
        pv = adds.column("partition_values").combine_chunks()
        out = None
        for conj in self.dnf:
            acc = None
            for t in conj:
                col, op, value = (t[0], t[1], t[2] if len(t) == 3 else None)
                m = self._term(pv, col, op, value)
                acc = m if acc is None else pc.and_(acc, m)
            if acc is None:
                acc = pa.array([True] * adds.num_rows, pa.bool_())
            out = acc if out is None else pc.or_(out, acc)
        return out

    def describe(self) -> str:
        return " OR ".join(
            "(" + " AND ".join(f"{t[0]} {t[1]} {t[2] if len(t) == 3 else ''}".strip() for t in c) + ")"
            for c in self.dnf
        )


class CallablePredicate(ReadPredicate):
    """Wraps ``fn(adds: pa.Table) -> boolean array-like`` (one value per add; null = may match)."""

    def __init__(self, fn: Callable[[pa.Table], Any], description: str | None = None):
        self.fn = fn
        self.description = description or getattr(fn, "__name__", "predicate")

    def matches(self, adds: pa.Table) -> pa.Array:
        out = self.fn(adds)
        if isinstance(out, (pa.Array, pa.ChunkedArray)):
            return out
        return pa.array(list(out), pa.bool_())

    def describe(self) -> str:
        return self.description


class ExpressionPredicate(ReadPredicate):
    """A read predicate of the predicate model (:mod:`airflow_delta_provider_apps.engine.expr`): a winning commit's add
    conflicts when it may hold a matching row, judged exactly on its typed partition values and
    conservatively on its stats (as delta-rs's ``predicate_matches``); an add without stats may match."""

    def __init__(self, predicate, schema, partition_columns):
        self.predicate = predicate
        self.schema = schema
        self.partition_columns = list(partition_columns)

    def matches(self, adds: pa.Table) -> pa.Array:
        from ..expr.skipping import may_match

        if "stats" not in adds.column_names:
            adds = adds.append_column("stats", pa.nulls(adds.num_rows, pa.string()))
        return may_match(adds, self.schema, self.partition_columns, self.predicate)

    def describe(self) -> str:
        from ..expr import to_sql

        return to_sql(self.predicate)


def to_read_predicate(obj: Any) -> ReadPredicate:
    """Normalise what ``txn.read_predicate(...)`` was given into a :class:`ReadPredicate`."""
    if obj is None or obj is True:
        return WholeTable()
    if isinstance(obj, ReadPredicate):
        return obj
    if hasattr(obj, "matches") and callable(obj.matches):
        return CallablePredicate(obj.matches, getattr(obj, "describe", lambda: None)() or type(obj).__name__)
    if isinstance(obj, (Mapping, list)):
        return PartitionFilter(obj)
    if callable(obj):
        return CallablePredicate(obj)
    raise InvalidArgumentError(
        "Cannot use this object as a read predicate",
        f"got {type(obj).__name__}",
        "pass a partition filter dict, a list of (column, op, value) tuples, or fn(adds_table) -> mask",
    )


# --------------------------------------------------------------------------------------------
# the two sides of a conflict check
# --------------------------------------------------------------------------------------------


@dataclass
class CurrentTransaction:
    """What the conflict checker needs to know about the transaction trying to commit."""

    read_version: int
    isolation_level: IsolationLevel
    actions: list = field(default_factory=list)
    read_whole_table: bool = False
    read_files: Any = None  # pa.Array of paths (or any iterable of str)
    read_predicates: list = field(default_factory=list)
    read_app_ids: frozenset = frozenset()
    metadata_changed: bool = False
    # the adds bring back files a newer version removed (RESTORE): a concurrent VACUUM may delete them
    readds_files: bool = False
    # the protocol and metadata this transaction read (a winner's protocol change is judged against them)
    read_protocol: Protocol | None = None
    read_metadata: Metadata | None = None

    @cached_property
    def removed_paths(self) -> pa.Array:
        """Paths this transaction removes (a string array, for ``pc.is_in``)."""
        return pa.array([a.path for a in self.actions if isinstance(a, RemoveFile)], pa.string())

    @cached_property
    def domains(self) -> set:
        return {a.domain for a in self.actions if isinstance(a, DomainMetadata)}


@dataclass
class WinningCommit:
    """A commit that got in between our read version and our attempt.

    ``adds`` / ``removes`` are Arrow tables (``FILE_SCHEMA`` / ``REMOVE_SCHEMA``, partition values
    keyed like the snapshot's files); ``actions`` holds the other actions as objects (commitInfo,
    protocol, metaData, txn, domainMetadata). Build one with :meth:`from_bytes` (a commit file) or
    :meth:`from_actions` (action objects, read back through the same reader).
    """

    version: int
    actions: list
    adds: pa.Table
    removes: pa.Table

    @classmethod
    def from_bytes(
        cls, version: int, data: bytes, *, partition_keys: list[str] | None = None, table_root: str | None = None
    ) -> WinningCommit:
        """Read commit file ``version`` (see :func:`..log.commit_read.read_commit`; a torn or malformed
        commit is a ``LogCorruptedError`` naming it). ``partition_keys``: those of the metadata read.
        ``table_root``: the paths of its adds and removes are confined to it (a commit naming a file
        outside the table is a ``LogCorruptedError``), as a snapshot's are."""
        c = read_commit(version, data, partition_keys=partition_keys)
        if table_root is not None:
            confine_file_table(table_root, c.adds)
            confine_file_table(table_root, c.removes, kind="removed file")
        return cls(version, c.actions, c.adds, c.removes)

    @classmethod
    def from_actions(
        cls, version: int, actions: list, *, partition_keys: list[str] | None = None, table_root: str | None = None
    ) -> WinningCommit:
        """A winning commit made of action objects, serialised and read like a commit file."""
        return cls.from_bytes(version, serialize_actions(actions), partition_keys=partition_keys, table_root=table_root)

    @cached_property
    def commit_info(self) -> dict:
        for a in self.actions:
            if isinstance(a, CommitInfo):
                return a.values
        return {}

    @property
    def operation(self) -> str | None:
        return self.commit_info.get("operation")

    @property
    def is_blind_append(self) -> bool:
        return self.commit_info.get("isBlindAppend") is True

    @cached_property
    def protocol(self) -> Protocol | None:
        return next((a for a in self.actions if isinstance(a, Protocol)), None)

    @cached_property
    def metadata(self) -> Metadata | None:
        return next((a for a in self.actions if isinstance(a, Metadata)), None)

    @cached_property
    def changed_data_adds(self) -> pa.Table:
        """The adds with ``dataChange`` true (a missing flag counts as true: it may have changed data)."""
        flag = self.adds.column("data_change")
        if flag.null_count:
            flag = pc.or_kleene(flag, pc.is_null(flag))
        if pc.all(flag).as_py():  # the usual case (an append): every add, no copy
            return self.adds
        return self.adds.filter(flag)

    @cached_property
    def txns(self) -> list[SetTransaction]:
        return [a for a in self.actions if isinstance(a, SetTransaction)]

    @cached_property
    def domains(self) -> list[DomainMetadata]:
        return [a for a in self.actions if isinstance(a, DomainMetadata)]


def _first_in(paths: pa.ChunkedArray | pa.Array, value_set: pa.Array) -> str | None:
    """The first of ``paths`` that is in ``value_set`` (vectorised membership test), or ``None``."""
    if len(paths) == 0 or len(value_set) == 0:
        return None
    idx = pc.index(pc.is_in(paths, value_set=value_set), True).as_py()
    return None if idx is None or idx < 0 else paths[idx].as_py()


# --------------------------------------------------------------------------------------------
# the checker
# --------------------------------------------------------------------------------------------


def _params(ci: dict) -> str:
    p = ci.get("operationParameters")
    return "" if not p else " " + json.dumps(p, sort_keys=True, separators=(",", ":"))


class ConflictChecker:
    """Checks one winning commit against the current transaction; :meth:`check` raises or returns."""

    CHECKS = (
        "check_protocol",
        "check_metadata",
        "check_app_txns",
        "check_added_files_read",
        "check_deleted_read",
        "check_deleted_deleted",
        "check_domain_metadata",
        "check_vacuum",
    )

    def __init__(self, current: CurrentTransaction, winner: WinningCommit):
        self.current = current
        self.winner = winner

    def check(self) -> None:
        for name in self.CHECKS:
            getattr(self, name)()

    # -- helpers --------------------------------------------------------------------------
    def _who(self) -> str:
        w = self.winner
        op = w.operation or "an unknown operation"
        return f"version {w.version} ({op}{_params(w.commit_info)}) was committed after this transaction read version {self.current.read_version}"

    def _kw(self) -> dict:
        return {"winning_version": self.winner.version, "winning_operation": self.winner.operation}

    # -- checks -------------------------------------------------------------------------
    def check_protocol(self) -> None:
        w = self.winner
        if w.protocol is None:
            return
        if self.current.read_version < 0:
            raise ProtocolChangedError(
                "The table was created by another writer at the same time",
                f"{self._who()}; both writers tried to create version 0",
                "re-read the table and retry (CREATE TABLE IF NOT EXISTS will then find it)",
                **self._kw(),
            )
        # As Delta and delta-rs do, a protocol change alone is a conflict only when it is incompatible:
        # this transaction changes the protocol too, the winner dropped a feature (a downgrade), or
        # the new protocol asks for a feature this engine cannot write with, or it adds row tracking
        # (this transaction's files were prepared without row ids).
        new = w.protocol
        if any(isinstance(a, Protocol) for a in self.current.actions):
            why = "this transaction changes the protocol too"
        elif self.current.read_protocol is not None and _is_downgrade(self.current.read_protocol, new):
            why = "it removed protocol features this transaction was based on"
        elif "rowTracking" in (new.writer_features or ()) and "rowTracking" not in (
            self.current.read_protocol.writer_features or () if self.current.read_protocol is not None else ()
        ):
            why = "it added row tracking, and this transaction's files were prepared without row ids"
        else:
            from ..errors import UnsupportedFeatureError
            from ..features import check_write_supported

            try:
                check_write_supported(new, w.metadata or self.current.read_metadata)
                return
            except UnsupportedFeatureError as e:
                why = e.problem[0].lower() + e.problem[1:]
        raise ProtocolChangedError(
            "The table protocol was changed by a concurrent commit",
            f"{self._who()} and changed the protocol to reader {new.min_reader_version} / writer "
            f"{new.min_writer_version}; {why}",
            "re-read the table and retry the operation",
            **self._kw(),
        )

    def check_metadata(self) -> None:
        if self.winner.metadata is None:
            return
        raise MetadataChangedError(
            "The table metadata (schema, partitioning or properties) was changed by a concurrent commit",
            self._who(),
            "re-read the table and retry the operation against the new metadata",
            **self._kw(),
        )

    def check_app_txns(self) -> None:
        read = self.current.read_app_ids
        if not read:
            return
        for t in self.winner.txns:
            if t.app_id in read:
                raise ConcurrentTransactionError(
                    f"A concurrent commit recorded a transaction for application id '{t.app_id}'",
                    f"{self._who()} with txn version {t.version}; two runs of the same idempotent write raced",
                    "retry: the retry re-reads the table and skips the write if it already landed",
                    **self._kw(),
                )

    def _adds_to_check(self) -> pa.Table | None:
        cur, w = self.current, self.winner
        level = cur.isolation_level
        if level == IsolationLevel.SNAPSHOT_ISOLATION:
            return None
        if level == IsolationLevel.WRITE_SERIALIZABLE and not cur.metadata_changed and w.is_blind_append:
            return None
        return w.changed_data_adds

    def check_added_files_read(self) -> None:
        cur = self.current
        if not cur.read_whole_table and not cur.read_predicates:
            return
        adds = self._adds_to_check()
        if adds is None or adds.num_rows == 0:
            return
        paths = adds.column("path")
        hit_path = None
        reason = None
        if cur.read_whole_table:
            hit_path, reason = paths[0].as_py(), "this transaction read the whole table"
        else:
            for pred in cur.read_predicates:
                idx = pred.any_match(adds)
                if idx is not None:
                    hit_path, reason = (
                        paths[idx].as_py(),
                        f"it matches this transaction's read predicate {pred.describe()}",
                    )
                    break
        if hit_path is None:
            return
        raise ConcurrentAppendError(
            "Files were added to data this transaction read, by a concurrent commit",
            f"{self._who()} and added '{hit_path}'; {reason} (isolation level {cur.isolation_level.value})",
            "retry the operation; to avoid this, make concurrent writers touch disjoint partitions and "
            "put the partition filter in the condition, or use delta.isolationLevel=WriteSerializable "
            "so blind appends do not conflict",
            **self._kw(),
        )

    def check_deleted_read(self) -> None:
        cur, w = self.current, self.winner
        removed = w.removes.column("path")
        if len(removed) == 0:
            return
        if cur.read_whole_table:
            hit = removed[0].as_py()
            why = "this transaction read the whole table"
        else:
            hit = self._first_read(removed)
            why = "this transaction read that file"
            if hit is None:
                return
        raise ConcurrentDeleteReadError(
            "A file this transaction read was removed by a concurrent commit",
            f"{self._who()} and removed '{hit}'; {why}",
            "retry the operation; concurrent UPDATE/DELETE/MERGE should touch disjoint partitions with the "
            "partition filter in their condition",
            **self._kw(),
        )

    def _first_read(self, removed: pa.ChunkedArray) -> str | None:
        """First removed path that this transaction read."""
        read = self.current.read_files
        if read is None or len(read) == 0:
            return None
        if not isinstance(read, (pa.Array, pa.ChunkedArray)):
            read = pa.array(list(read), pa.string())
        return _first_in(removed, read)

    def check_deleted_deleted(self) -> None:
        mine = self.current.removed_paths
        if len(mine) == 0:
            return
        hit = _first_in(self.winner.removes.column("path"), mine)
        if hit is None:
            return
        raise ConcurrentDeleteDeleteError(
            "A file this transaction removes was already removed by a concurrent commit",
            f"{self._who()} and removed '{hit}' too",
            "retry the operation; it will re-read the table and no longer see that file",
            **self._kw(),
        )

    def check_domain_metadata(self) -> None:
        mine = self.current.domains
        if not mine:
            return
        # the row tracking mark is merged, not conflicting: the transaction assigns ids above the winner's
        hit = next(
            (d.domain for d in self.winner.domains if d.domain in mine and d.domain != "delta.rowTracking"), None
        )
        if hit is None:
            return
        raise ConcurrentTransactionError(
            f"The metadata domain '{hit}' was changed by a concurrent commit",
            f"{self._who()} and wrote domain '{hit}', which this transaction writes too",
            "retry the operation so it is based on the domain's new value",
            **self._kw(),
        )

    def check_vacuum(self) -> None:
        if not self.current.readds_files or self.winner.operation != "VACUUM START":
            return
        raise ConcurrentVacuumError(
            "A VACUUM started while this transaction was bringing back removed files",
            f"{self._who()}; the files this transaction re-adds were checked before that VACUUM planned "
            "its deletes, so it may delete some of them after this commit",
            "retry once the VACUUM has ended (the retry re-reads the table and checks the files again)",
            **self._kw(),
        )


def _features_of(protocol: Protocol) -> tuple[set, set]:
    """(reader, writer) features of a protocol: the explicit lists from version 3 / 7 on, else the
    ones a legacy version implies."""
    from ..features import legacy_writer_features

    if protocol.min_writer_version >= 7:
        writer = set(protocol.writer_features or [])
    else:
        writer = set(legacy_writer_features(protocol.min_writer_version))
    if protocol.min_reader_version >= 3:
        reader = set(protocol.reader_features or [])
    else:
        reader = {"columnMapping"} if protocol.min_reader_version == 2 else set()
    return reader, writer


def _is_downgrade(old: Protocol, new: Protocol) -> bool:
    """True when ``new`` lacks a feature (explicit or implied by a legacy version) that ``old`` had."""
    old_reader, old_writer = _features_of(old)
    new_reader, new_writer = _features_of(new)
    return not (old_reader <= new_reader and old_writer <= new_writer)


def check_winning_commit(current: CurrentTransaction, winner: WinningCommit) -> None:
    """Run every check of :class:`ConflictChecker`; raises the first conflict found."""
    ConflictChecker(current, winner).check()


def vanished_file_conflict(snapshot, error, operation: str) -> ConcurrentDeleteReadError | None:
    """A data file ``operation`` read from ``snapshot`` is gone (``error``, a DataFileMissingError).
    When a later commit removed it (and VACUUM then deleted it: its retention was shorter than this
    operation took), that is a concurrent change: a retryable ConcurrentDeleteReadError naming the
    commit, as the commit's own conflict check would have said. ``None`` when no later commit removed
    it (a file deleted outside Delta stays a DataFileMissingError)."""
    from ..log.file_actions import partition_keys_of
    from ..log.listing import commit_path, latest_version
    from ..reader import missing_file_path

    path = missing_file_path(error)
    storage, root = snapshot.storage, snapshot.table_root
    latest = latest_version(storage, root) if path is not None else None
    if latest is None or latest <= snapshot.version:
        return None
    keys = partition_keys_of(snapshot.metadata)
    for version in range(snapshot.version + 1, latest + 1):
        try:
            raw = storage.read_bytes(commit_path(storage, root, version))
        except FileNotFoundError:  # cleaned up behind a checkpoint: it cannot say
            continue
        winner = WinningCommit.from_bytes(version, raw, partition_keys=keys, table_root=root)
        if _first_in(winner.removes.column("path"), pa.array([path], pa.string())) is not None:
            return ConcurrentDeleteReadError(
                f"{operation} lost a file it read to a concurrent commit",
                f"it read version {snapshot.version}; commit {version} ({winner.operation}) removed '{path}' "
                "and VACUUM has since deleted it (VACUUM's retention was shorter than this operation took)",
                "retry the operation (it re-reads the table at its latest version); keep VACUUM's retention "
                "longer than the longest operation on the table",
                winning_version=version,
                winning_operation=winner.operation,
            )
    return None
