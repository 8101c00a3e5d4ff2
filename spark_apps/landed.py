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

__all__ = ["commit_changes", "landed_result"]


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
    from .results import numbers, ok

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
        **commit_changes(table_uri, commit.version),
    )


def commit_changes(table_uri: str, version: int) -> dict:
    """``schema_changes`` and ``reader_warnings`` of commit ``version``, as the commit's own result has
    them (:func:`.engine.log.commit_changes.commit_changes`): for a result recovered from the log and
    the Delta watcher's events."""
    from .engine.log.commit_changes import commit_changes as of_commit
    from .engine.storage import storage_for, table_location

    root = table_location(table_uri)
    return of_commit(storage_for(root), root, version)


#: a commit that changed more partitions than this gets one Asset event without a partition key
MAX_PARTITION_KEYS = 100

#: the longest partition key Airflow stores
MAX_PARTITION_KEY_LENGTH = 250

#: how a NULL partition value is named in a partition key (the folder name Delta and Hive give it)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def commit_partition_keys(table_uri: str, version: int) -> list[str] | None:
    """Airflow partition keys of the partitions commit ``version`` changed data in: the value itself
    for a table partitioned by one column (``2026-01-02``), ``col=value`` joined by ``/`` for several
    (``dt=2026-01-02/region=eu``). None when the table is not partitioned, the commit changed more than
    :data:`MAX_PARTITION_KEYS` partitions or none (e.g. OPTIMIZE), a key Airflow cannot store (blank,
    over 250 characters) or when they are not known (see :func:`.engine.log.commit_partitions.commit_partitions`)."""
    from .engine.log.commit_partitions import commit_partitions
    from .engine.storage import storage_for, table_location

    root = table_location(table_uri)
    found = commit_partitions(storage_for(root), root, version)
    if not found or not found[1] or len(found[1]) > MAX_PARTITION_KEYS:
        return None
    columns, partitions = found

    def text(v):
        return NULL_PARTITION if v is None else v

    if len(columns) == 1:
        keys = [text(p[columns[0]]) for p in partitions]
    else:
        keys = ["/".join(f"{c}={text(p[c])}" for c in columns) for p in partitions]
    # Airflow takes a key of 1 to 250 characters, not blank: a commit with another gets no keys
    return keys if all(k.strip() and len(k) <= MAX_PARTITION_KEY_LENGTH for k in keys) else None
