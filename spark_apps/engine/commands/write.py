"""WRITE: append a DataFrame to a Delta table (blind append with schema enforcement).

Algorithm (delta-spark's WriteIntoDelta, append mode):

1. Load the latest snapshot; the writer feature gate must accept the table.
2. Open an :class:`~spark_apps.engine.txn.OptimisticTransaction` (operation ``WRITE``,
   operationParameters ``{"mode": "Append", "partitionBy": "[...]"}``). With ``(app_id, app_version)``
   already committed (SetTransaction), stop here: nothing is written, the result says ``skipped``.
3. Schema enforcement BEFORE any file is written (:func:`prepare_dataframe`):
   :func:`~spark_apps.engine.schema.check_write_compatible` (names case-insensitive, safe upcasts
   only, no extra columns, missing columns only when nullable) raises :class:`SchemaMismatchError`;
   then the DataFrame is conformed to the table schema (table column order, casts, nulls for the
   missing nullable columns). NOT NULL columns are checked on the data while writing.
4. Write data files through the Spark data plane (:mod:`spark_apps.engine.spark.write`): no commit
   yet, a failure leaves only orphan files.
5. Commit the AddFile actions (blind append: the transaction read nothing, ``isBlindAppend`` true,
   so only protocol/metadata changes or a concurrent commit of the same app id conflict).
   operationMetrics: ``numFiles``, ``numOutputRows``, ``numOutputBytes`` (strings in the commit as
   delta-spark writes them, numbers in the returned dict).

Shaped for what comes next (roadmap): ``mode`` is validated here and ``overwrite`` (full, with
``replace_where``, dynamic partition overwrite) will add a step between 3 and 5 that plans the
RemoveFile actions from the snapshot and registers its reads on the transaction; DELETE/UPDATE/MERGE
reuse :func:`prepare_dataframe` and :func:`write_files` for their rewritten files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidArgumentError
from ..storage import normalize_table_uri, storage_for

OPERATION_WRITE = "WRITE"
SUPPORTED_MODES = ("append",)
KNOWN_MODES = ("append", "overwrite")
TARGET_FILE_SIZE_PROPERTY = "delta.targetFileSize"


@dataclass
class WriteCommandResult:
    """Outcome of a write: operation, version committed (or the snapshot's when skipped), metrics."""

    operation: str
    table_uri: str
    version: int
    skipped: bool
    metrics: dict = field(default_factory=dict)
    commit_info: dict | None = None

    def to_dict(self) -> dict:
        """The returned dict: result keys, ``metrics`` and the metrics again at top level."""
        out = {
            "operation": self.operation,
            "table_uri": self.table_uri,
            "version": self.version,
            "skipped": self.skipped,
            "metrics": dict(self.metrics),
        }
        for k, v in self.metrics.items():
            out.setdefault(k, v)
        return out


def dataframe_schema(df):
    """The engine StructType of a pyspark DataFrame's schema."""
    from ..schema import parse_schema

    return parse_schema(df.schema.jsonValue())


def prepare_dataframe(df, table_schema, *, merge_schema: bool = False):
    """Schema enforcement then conformance: ``df`` with exactly the table's columns, order and types.

    :param df: the pyspark DataFrame to write
    :param table_schema: the table's :class:`~spark_apps.engine.schema.StructType`
    :param merge_schema: reserved for the overwrite/mergeSchema work (not used by append yet)
    :raises SchemaMismatchError: the data does not fit the table schema (nothing written)
    """
    from ..schema import check_write_compatible
    from ..spark.write import conform_dataframe

    check_write_compatible(table_schema, dataframe_schema(df), merge_schema=merge_schema)
    return conform_dataframe(df, table_schema.to_json())


def resolve_target_file_size(configuration: dict | None, target_file_size: int | None) -> int:
    """Explicit value, else the table's ``delta.targetFileSize``, else 128 MiB."""
    from ..writer import DEFAULT_TARGET_FILE_SIZE

    value = target_file_size
    if value is None:
        raw = (configuration or {}).get(TARGET_FILE_SIZE_PROPERTY)
        if raw is not None:
            value = _parse_size(raw)
    if value is None:
        return DEFAULT_TARGET_FILE_SIZE
    try:
        value = int(value)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise InvalidArgumentError(
            f"Target file size {target_file_size!r} is not a positive number of bytes",
            None,
            "pass a positive integer such as 134217728 (128 MiB)",
        )
    return value


def _parse_size(text) -> int | None:
    s = str(text).strip().lower().replace(" ", "")
    units = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}
    for unit in sorted(units, key=len, reverse=True):
        if s.endswith(unit) and s[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(s[: -len(unit)]) * units[unit])
    return int(s) if s.isdigit() else None


def write_files(
    df, table_root: str, table_schema, partition_columns, configuration, *, target_file_size: int | None = None
):
    """Write an already conformed DataFrame as data files; returns a
    :class:`~spark_apps.engine.spark.write.WriteResult` (AddFile actions, not committed)."""
    from ..spark.write import WriteSpec, write_data_files

    spec = WriteSpec(
        table_uri=table_root,
        schema_json=table_schema.to_json_string(),
        partition_columns=tuple(partition_columns or ()),
        configuration=dict(configuration or {}),
        target_file_size=resolve_target_file_size(configuration, target_file_size),
    )
    return write_data_files(df, spec)


def write(
    table_uri: str,
    df,
    *,
    mode: str = "append",
    app_id: str | None = None,
    app_version: int | None = None,
    user_metadata: str | None = None,
    target_file_size: int | None = None,
) -> WriteCommandResult:
    """Write ``df`` to the table; only ``mode="append"`` exists so far (see module docstring).

    :param table_uri: the table location
    :param df: a pyspark DataFrame
    :param mode: ``append``
    :param app_id: SetTransaction application id for an idempotent write (with ``app_version``)
    :param app_version: SetTransaction version; a version already committed for ``app_id`` is skipped
    :param user_metadata: commitInfo.userMetadata
    :param target_file_size: roll data files at about this many bytes
    """
    m = (mode or "append").strip().lower()
    if m not in KNOWN_MODES:
        raise InvalidArgumentError(
            f"Unknown write mode '{mode}'", f"known modes: {', '.join(KNOWN_MODES)}", "use mode 'append'"
        )
    if m not in SUPPORTED_MODES:
        raise InvalidArgumentError(
            f"Write mode '{mode}' is not supported yet", "only appends are implemented", "use mode 'append'"
        )
    return append(
        table_uri,
        df,
        app_id=app_id,
        app_version=app_version,
        user_metadata=user_metadata,
        target_file_size=target_file_size,
    )


def append(
    table_uri: str,
    df,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
    user_metadata: str | None = None,
    target_file_size: int | None = None,
) -> WriteCommandResult:
    """Blind append of ``df`` (see module docstring). Returns the commit's result and metrics."""
    from .. import features
    from ..log.snapshot import load_snapshot
    from ..txn import OptimisticTransaction

    table_root = normalize_table_uri(table_uri)
    storage = storage_for(table_root)
    snapshot = load_snapshot(storage, table_root)
    features.check_write_supported(snapshot.protocol, snapshot.metadata)
    partition_columns = list(snapshot.metadata.partition_columns or [])
    txn = OptimisticTransaction(
        storage,
        table_root,
        snapshot,
        operation=OPERATION_WRITE,
        operation_parameters={"mode": "Append", "partitionBy": partition_columns},
        app_id=app_id,
        app_version=app_version,
        user_metadata=user_metadata,
    )
    if txn.is_duplicate():
        return WriteCommandResult(
            OPERATION_WRITE,
            table_root,
            snapshot.version,
            True,
            {"numFiles": 0, "numOutputRows": 0, "numOutputBytes": 0},
        )
    table_schema = snapshot.schema
    prepared = prepare_dataframe(df, table_schema)
    result = write_files(
        prepared,
        table_root,
        table_schema,
        partition_columns,
        snapshot.metadata.configuration,
        target_file_size=target_file_size,
    )
    metrics = {
        "numFiles": result.num_files,
        "numOutputRows": result.num_output_rows,
        "numOutputBytes": result.num_output_bytes,
    }
    commit = txn.commit(result.adds, operation_metrics=metrics)
    if commit.skipped:  # a concurrent retry of the same (app_id, app_version) landed first
        return WriteCommandResult(
            OPERATION_WRITE, table_root, commit.version, True, {"numFiles": 0, "numOutputRows": 0, "numOutputBytes": 0}
        )
    return WriteCommandResult(OPERATION_WRITE, table_root, commit.version, False, metrics, commit.commit_info)


def append_arrow(
    table_uri: str,
    data,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
    user_metadata: str | None = None,
    target_file_size: int | None = None,
) -> WriteCommandResult:
    """Blind append of Arrow data (a ``pa.Table`` or record batches with exactly the table's columns
    and types) in this process, without Spark: the core writer and one commit."""
    import pyarrow as pa

    from .. import features
    from ..log.snapshot import load_snapshot
    from ..txn import OptimisticTransaction
    from ..writer import WriteSpec, write_batches

    table_root = normalize_table_uri(table_uri)
    storage = storage_for(table_root)
    snapshot = load_snapshot(storage, table_root)
    features.check_write_supported(snapshot.protocol, snapshot.metadata)
    partition_columns = list(snapshot.metadata.partition_columns or [])
    txn = OptimisticTransaction(
        storage,
        table_root,
        snapshot,
        operation=OPERATION_WRITE,
        operation_parameters={"mode": "Append", "partitionBy": partition_columns},
        app_id=app_id,
        app_version=app_version,
        user_metadata=user_metadata,
    )
    empty = {"numFiles": 0, "numOutputRows": 0, "numOutputBytes": 0}
    if txn.is_duplicate():
        return WriteCommandResult(OPERATION_WRITE, table_root, snapshot.version, True, empty)
    target = snapshot.schema.to_arrow_schema()
    batches = data.to_batches() if isinstance(data, pa.Table) else list(data)
    batches = [b.select(target.names).cast(target) for b in batches]
    spec = WriteSpec(
        table_uri=table_root,
        schema_json=snapshot.schema.to_json_string(),
        partition_columns=tuple(partition_columns),
        configuration=dict(snapshot.metadata.configuration or {}),
        target_file_size=resolve_target_file_size(snapshot.metadata.configuration, target_file_size),
    )
    written = list(write_batches(spec, batches))
    metrics = {
        "numFiles": len(written),
        "numOutputRows": sum(w.num_rows for w in written),
        "numOutputBytes": sum(w.add.size for w in written),
    }
    commit = txn.commit([w.add for w in written], operation_metrics=metrics)
    if commit.skipped:
        return WriteCommandResult(OPERATION_WRITE, table_root, commit.version, True, empty)
    return WriteCommandResult(OPERATION_WRITE, table_root, commit.version, False, metrics, commit.commit_info)


__all__ = [
    "write",
    "append",
    "append_arrow",
    "prepare_dataframe",
    "write_files",
    "WriteCommandResult",
    "resolve_target_file_size",
]
