"""Results of commits that already landed, read back from the table's log (no Spark).

A task instance commits with a SetTransaction identity (``app_id``, ``app_version``). Before it
submits anything, the operator asks :func:`landed_result` whether that identity (or, for
``on_rerun="skip"``, any version of it) is already in the log: then the task reports that commit
(``skipped: true``, its version, its operationMetrics) instead of applying twice. The hook asks the
same when a submission's own result was lost (cluster deploy mode without a shared result
location, a client killed after the commit): then the commit is the result (``skipped: false``,
``from_log: true``).
"""

from __future__ import annotations

__all__ = ["landed_result"]


def landed_result(table_uri: str, app_id: str, app_version: int, *, any_version: bool = False) -> dict | None:
    """The result of the commit carrying ``txn(app_id, version >= app_version)`` (any version when
    ``any_version``), shaped as the app's result; None when the table holds none (or does not
    exist yet). Txns expired by ``delta.setTransactionRetentionDuration`` do not count."""
    import time

    from .engine.config import TableProperties
    from .engine.log.app_commits import find_app_commit
    from .engine.log.listing import latest_version
    from .engine.log.snapshot import load_table_metadata
    from .engine.storage import storage_for, table_location
    from .runners import numbers, ok

    root = table_location(table_uri)
    storage = storage_for(root)
    newest = latest_version(storage, root)
    if newest is None:
        return None
    state = load_table_metadata(storage, root, newest)
    txn = state.set_transactions.get(app_id)
    if txn is None:
        return None
    retention = TableProperties.of(state.metadata).set_transaction_retention_ms if state.metadata else None
    if retention is not None and txn.last_updated is not None and txn.last_updated < time.time() * 1000 - retention:
        return None
    if not any_version and txn.version < app_version:
        return None
    commit = find_app_commit(
        storage, root, app_id, newest_version=newest, app_version=txn.version, last_updated=txn.last_updated
    )
    # committed=False: this run wrote nothing (an earlier one did); the hook's read-back of its own
    # lost result sets it True
    if commit is None:  # the txn is in a checkpoint, its commit cleaned up: the version is not known
        return ok(
            "UNKNOWN",
            table_uri,
            None,
            skipped=True,
            app_id=app_id,
            app_version=txn.version,
            from_log=True,
            committed=False,
        )
    return ok(
        commit.operation or "UNKNOWN",
        table_uri,
        commit.version,
        skipped=True,
        metrics=numbers(commit.operation_metrics),
        app_id=app_id,
        app_version=txn.version,
        from_log=True,
        committed=False,
    )
