"""Optimistic transactions: commit with put-if-absent, conflict detection, isolation levels.

Public API::

    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction, CommitResult, IsolationLevel
    txn = OptimisticTransaction(storage, table_root, snapshot, operation="WRITE", ...)
    if txn.is_duplicate(): ...             # (app_id, app_version) already committed
    txn.read_predicate({"date": "2024-01-01"})
    result = txn.commit(actions, operation_metrics={...})
"""

from ..isolation import IsolationLevel, choose_isolation_level
from .conflicts import (
    CallablePredicate,
    ConflictChecker,
    CurrentTransaction,
    PartitionFilter,
    ReadPredicate,
    WholeTable,
    WinningCommit,
    check_winning_commit,
    to_read_predicate,
)
from .transaction import CommitResult, OptimisticTransaction

__all__ = [
    "OptimisticTransaction",
    "CommitResult",
    "IsolationLevel",
    "choose_isolation_level",
    "ConflictChecker",
    "CurrentTransaction",
    "WinningCommit",
    "check_winning_commit",
    "ReadPredicate",
    "PartitionFilter",
    "CallablePredicate",
    "WholeTable",
    "to_read_predicate",
]
