"""The one skeleton every table-changing command runs through (after delta-rs's operations: check,
open the transaction, plan and register what is read, commit or skip, report).

A :class:`Command` is one run of an operation over a snapshot:

1. **The gate**, before anything is read or written: the writer feature gate
   (:func:`..features.check_write_supported`) on the table's protocol and metadata, and, for a
   command that removes rows, ``delta.appendOnly`` (refused with the command's own words; the
   transaction checks the same rule again on the actions it commits).
2. **The transaction** (:class:`..txn.OptimisticTransaction`) opened on that snapshot, with Delta's
   operation name, its ``operationParameters`` and the run's transaction identity
   (:class:`..commit_identity.TxnIdentity`: ``app_id``, ``app_version``, ``user_metadata``). :attr:`duplicate` says the identity already landed: the
   command stops there with :meth:`skipped`.
3. **What the command reads** registered for conflict detection: :meth:`read_rows` (a bound predicate
   of the predicate model, or every row) and :meth:`read_files` (the files whose rows it used).
4. **The end**: :meth:`commit` of the actions with the metrics (a concurrent retry of the same
   identity that landed first makes it a skip), or :meth:`unchanged` when there is nothing to commit.
   Every end is a :class:`~.result.CommandResult` whose metrics carry the command's execution time.

The ways a command changes rows (rewriting files, and the table features that ride on those
changes) plug into the commands on top of this; the skeleton itself knows only the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .result import CommandResult, Stopwatch

__all__ = ["Command", "command_result", "gate"]


def gate(protocol, metadata, table_root: str, *, removes_rows: str | None = None, append_only_fix: str | None = None):
    """Refuse, before anything is read or written, a table this engine must not write, and with
    ``removes_rows`` (what the command does, e.g. ``"DELETE rows of"``) an append-only table."""
    from .. import features
    from ..config import TableProperties
    from ..errors import AppendOnlyViolationError

    features.check_write_supported(protocol, metadata)
    if removes_rows and metadata is not None and TableProperties.of(metadata).append_only:
        raise AppendOnlyViolationError(
            f"Cannot {removes_rows} table '{table_root}'",
            "it has delta.appendOnly=true, which allows only appends",
            append_only_fix or "only append to it, or set delta.appendOnly=false first",
        )


def command_result(
    operation: str,
    table_root: str,
    version: int,
    metrics=None,
    *,
    skipped: bool = False,
    commit_info: dict | None = None,
    fields: Mapping[str, Any] | None = None,
) -> CommandResult:
    """The one place a :class:`~.result.CommandResult` is made: every :class:`Command` end, and the
    commands that end outside one transaction (a checkpoint and log cleanup commit nothing, CREATE
    TABLE IF NOT EXISTS keeps a table, VACUUM spans two commits). ``fields`` without ``committed``:
    the result says it committed when it carries a commit's ``commit_info``."""
    return CommandResult(operation, table_root, version, skipped, metrics, commit_info, dict(fields or {}))


class Command:
    """One run of ``operation`` over ``snapshot`` (see the module docstring).

    :param snapshot: the version the command reads; the transaction opens on it (None: a new table,
        then ``table_root``, ``storage``, ``protocol`` and ``metadata`` describe it)
    :param operation: Delta's operation name (``DELETE``, ``MERGE``, ``WRITE``...)
    :param parameters: Delta's ``operationParameters``
    :param removes_rows: the command removes rows: its words for the append-only refusal
    :param append_only_fix: how to get past that refusal, when the generic advice does not fit
    :param identity: the run's :class:`~..commit_identity.TxnIdentity` (None: none)
    :param txn_options: the transaction's own options (e.g. ``readds_files``)
    :param watermark: ``(app id, version, consumed before)`` of a source this command
        consumed up to ``version`` (a change feed's range), having found ``consumed before`` as that
        application's ``txn`` version: committed as its new version beside the command's own, and
        read from the snapshot so that a consumer that committed in between, or concurrently,
        conflicts instead of applying the same range twice
    """

    def __init__(
        self,
        snapshot,
        operation: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        removes_rows: str | None = None,
        append_only_fix: str | None = None,
        identity=None,
        txn_options: Mapping[str, Any] | None = None,
        watermark: tuple | None = None,
        table_root: str | None = None,
        storage=None,
        protocol=None,
        metadata=None,
    ):
        from ..storage import storage_for
        from ..txn import OptimisticTransaction

        self.watch = Stopwatch()
        self.snapshot = snapshot
        self.operation = operation
        self.table_root = table_root or snapshot.table_root
        self.storage = storage or getattr(snapshot, "storage", None) or storage_for(self.table_root)
        self.watermark = watermark
        if snapshot is not None:
            protocol, metadata = snapshot.protocol, snapshot.metadata
        gate(protocol, metadata, self.table_root, removes_rows=removes_rows, append_only_fix=append_only_fix)
        self.txn = OptimisticTransaction(
            self.storage,
            self.table_root,
            snapshot,
            operation=operation,
            operation_parameters=dict(parameters or {}),
            identity=identity,
            **{k: v for k, v in (txn_options or {}).items() if v is not None},
        )
        if snapshot is None:  # a new table: its protocol and metadata are this commit's
            self.txn.update_protocol(protocol)
            self.txn.update_metadata(metadata)
        if self.watermark is not None:
            self._check_watermark()

    # ------------------------------------------------------------------ identity
    @property
    def read_version(self) -> int:
        return self.snapshot.version if self.snapshot is not None else -1

    @property
    def identity(self):
        """The run's transaction identity (:class:`..commit_identity.TxnIdentity`; empty: none)."""
        return self.txn.identity

    @property
    def duplicate(self) -> bool:
        """The idempotent-write identity already committed: the command does nothing."""
        return self.txn.is_duplicate()

    # ------------------------------------------------------------------ what the commit carries
    def set_parameters(self, **parameters) -> None:
        """Add to (or replace in) the commit's ``operationParameters``, once the plan knows them."""
        self.txn.operation_parameters = {**self.txn.operation_parameters, **parameters}

    def update_metadata(self, metadata) -> None:
        """The commit changes the table's metadata (schema, properties) to ``metadata``."""
        self.txn.update_metadata(metadata)

    def update_protocol(self, protocol) -> None:
        """The commit upgrades the table's protocol to ``protocol``."""
        self.txn.update_protocol(protocol)

    @property
    def metadata(self):
        """The metadata the commit writes (the snapshot's, or the one :meth:`update_metadata` set)."""
        return self.txn.metadata

    def app_version(self, app_id: str) -> int | None:
        """The latest committed ``txn`` version of ``app_id`` (registered as read: a concurrent commit
        of that application conflicts)."""
        return self.txn.txn_version(app_id)

    # ------------------------------------------------------------------ reads
    def read_rows(self, predicate=None) -> None:
        """The command's outcome depends on the rows matching ``predicate`` (a bound expression of
        :mod:`..expr`, a ``{partition column: value}`` dict), or on every row when None."""
        if predicate is None:
            self.txn.read_whole_table()
        elif isinstance(predicate, Mapping):
            self.txn.read_predicate(dict(predicate))
        else:
            from ..txn.conflicts import ExpressionPredicate

            s = self.snapshot
            self.txn.read_predicate(ExpressionPredicate(predicate, s.schema, s.metadata.partition_columns or []))

    def read_files(self, files) -> None:
        """The command used the rows of these files (a table with a ``path`` column, or paths): a
        concurrent commit removing one of them conflicts."""
        self.txn.read_files(files)

    # ------------------------------------------------------------------ ends
    def _result(self, metrics, version: int, *, commit=None, skipped: bool = False, fields=None) -> CommandResult:
        if metrics is not None and hasattr(metrics, "execution_time_ms"):
            metrics.execution_time_ms = self.watch.elapsed_ms()
        return command_result(
            self.operation,
            self.table_root,
            version,
            metrics,
            skipped=skipped,
            commit_info=commit.commit_info if commit is not None else None,
            fields={**dict(fields or {}), "committed": commit is not None and not skipped},
        )

    def skipped(self, metrics, *, fields=None) -> CommandResult:
        """The identity already landed (:attr:`duplicate`): nothing done."""
        return self._result(metrics, self.read_version, skipped=True, fields=fields)

    def unchanged(self, metrics, *, fields=None) -> CommandResult:
        """Nothing to commit (nothing matched, nothing to compact): the snapshot's version, no commit."""
        return self._result(metrics, self.read_version, fields=fields)

    def _check_watermark(self) -> None:
        """The snapshot still holds the watermark the source's range was read after (see the class
        docstring); registers the read for the commit's conflict check."""
        from ..errors import ConcurrentTransactionError

        app, _version, before = self.watermark
        self.txn.txn_version(app)
        held = getattr(self.snapshot, "set_transactions", {}).get(app) if self.snapshot is not None else None
        held = held.version if held is not None else None
        if held != before:
            raise ConcurrentTransactionError(
                f"Another run consumed changes of the source (application '{app}') into '{self.table_root}'",
                f"this run read the changes after version {before}, the table now records {held}",
                "run again: the retry reads the changes after the version now recorded",
            )

    def _advance_identities(self, actions: list) -> None:
        """Identity columns: the values the added files hold move the high water marks, in this
        commit's metadata (:func:`..identity.advanced`)."""
        from ..actions import AddFile
        from ..identity import HIGH_WATER_MARK, STEP, advanced

        metadata = self.txn.metadata
        if (
            metadata is None
            or STEP not in (metadata.schema_string or "")
            and HIGH_WATER_MARK not in (metadata.schema_string or "")
        ):
            return
        moved = advanced(metadata, [a for a in actions if isinstance(a, AddFile) and a.data_change])
        if moved is not None:
            self.txn.update_metadata(moved)

    def commit(self, actions, metrics, *, fields=None) -> CommandResult:
        """Commit ``actions`` with ``metrics`` as the commit's ``operationMetrics``. A concurrent
        commit of the same identity that landed first turns this into a skip (empty metrics)."""
        if metrics is not None and hasattr(metrics, "execution_time_ms"):
            metrics.execution_time_ms = self.watch.elapsed_ms()  # what commitInfo records, too
        operation_metrics = metrics.to_operation_metrics() if metrics is not None else {}
        actions = list(actions)
        self._advance_identities(actions)
        if self.watermark is not None:
            from ..actions import SetTransaction

            app, version, _before = self.watermark
            actions.append(SetTransaction(app_id=app, version=int(version), last_updated=self.txn.clock()))
        done = self.txn.commit(actions, operation_metrics=operation_metrics)
        if done.skipped:
            empty = type(metrics)() if metrics is not None else None
            return self._result(empty, done.version, skipped=True, fields=fields)
        return self._result(metrics, done.version, commit=done, fields={**dict(fields or {}), **self._changes()})

    def _changes(self) -> dict:
        """What this commit changed that people and other readers must hear of, computed here once for
        every command (:func:`..log.commit_changes.changes_between`): ``schema_changes`` (the columns
        added, widened, retyped, renamed, dropped) and ``reader_warnings`` (features it turned on that a
        common reader refuses); each only when not empty."""
        from ..log.commit_changes import changes_between

        before = self.snapshot
        return changes_between(
            before.metadata if before is not None else None,
            before.protocol if before is not None else None,
            self.txn.new_metadata,
            self.txn.new_protocol,
        )
