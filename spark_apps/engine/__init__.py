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


def __getattr__(name: str):
    # DeltaTable pulls pyarrow and the storage layer: loaded when first used, so the engine's light
    # modules (errors, the MERGE clause rules) import without them (the registry reads those at DAG
    # parse time)
    if name == "DeltaTable":
        from .table import DeltaTable

        return DeltaTable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
