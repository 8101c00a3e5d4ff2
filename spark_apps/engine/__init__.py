"""A pure-Python Delta Lake engine; Spark is used only as the data plane (``engine/spark``).

``import airflow_delta_provider_apps.engine`` never imports pyspark: log-only calls (version, detail, history,
checkpoint, metadata cleanup) work without Spark.

::

    from airflow_delta_provider_apps.engine import DeltaTable
    t = DeltaTable.for_path(None, "/data/events")
    t.version(), t.detail(), t.history(limit=5)
"""

from .errors import (
    AppendOnlyViolationError,
    CommitConflictError,
    CommitRetriesExhaustedError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    DataFileMissingError,
    DeltaError,
    InvalidArgumentError,
    InvalidCommitError,
    InvalidSchemaError,
    LogCorruptedError,
    MetadataChangedError,
    ProtocolChangedError,
    SchemaMismatchError,
    StorageError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from .table import DeltaTable

__all__ = [
    "DeltaTable",
    "DeltaError",
    "InvalidArgumentError",
    "TableNotFoundError",
    "TableAlreadyExistsError",
    "VersionNotFoundError",
    "LogCorruptedError",
    "UnsupportedFeatureError",
    "SchemaMismatchError",
    "InvalidSchemaError",
    "DataFileMissingError",
    "StorageError",
    "AppendOnlyViolationError",
    "InvalidCommitError",
    "CommitConflictError",
    "ConcurrentAppendError",
    "ConcurrentDeleteReadError",
    "ConcurrentDeleteDeleteError",
    "MetadataChangedError",
    "ProtocolChangedError",
    "ConcurrentTransactionError",
    "CommitRetriesExhaustedError",
]
