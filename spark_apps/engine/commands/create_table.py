"""CREATE TABLE [IF NOT EXISTS] [AS SELECT] at a path.

Algorithm:

1. Parse the schema (DDL string, Delta/Spark schema JSON string or dict, a pyspark ``StructType``
   (via its ``.json()``), or a :class:`~airflow_delta_provider_apps.engine.schema.StructType`), and validate:
   partition columns exist (matched case-insensitively, stored with the schema's spelling), are
   top-level primitive columns, appear once, and are not all of the columns; clustering columns
   (``cluster_by``, not with ``partition_by``) exist, have min/max statistics and are listed in the
   ``delta.clustering`` domain of version 0 (with the ``clustering`` feature); table properties
   (:func:`validate_properties`): ``delta.*`` keys must be ones Delta defines and their values must
   parse (booleans, intervals, positive integers); other keys are kept verbatim.
2. If the table exists (a readable latest version): with IF NOT EXISTS return its state with
   ``skipped=True``; otherwise raise :class:`TableAlreadyExistsError`. Nothing is written.
3. Protocol from :func:`airflow_delta_provider_apps.engine.features.protocol_for_new_table` (lowest versions
   that cover the schema and properties), then the writer gate. Protocol-only properties
   (``delta.feature.*``, ``delta.minReaderVersion``/``delta.minWriterVersion``) are consumed and
   not stored in ``metaData.configuration`` (delta-spark does the same).
4. With a source DataFrame (create-as-select): write its data files first (Spark data plane,
   nothing committed; the source's schema must fit the declared one), then commit.
5. Version 0 = commitInfo + protocol + metaData [+ adds] [+ txn], written with put-if-absent by
   :class:`~airflow_delta_provider_apps.engine.txn.OptimisticTransaction`. Losing the race to another creator is
   handled like step 2 (IF NOT EXISTS -> skipped; else TableAlreadyExistsError); the data files a
   losing create-as-select wrote stay as orphans for VACUUM.

commitInfo: operation ``CREATE TABLE`` (``CREATE TABLE AS SELECT`` with a source),
operationParameters ``isManaged``, ``description``, ``partitionBy``, ``properties`` (``clusterBy``) as delta-spark
writes them; CTAS metrics ``numFiles``, ``numOutputRows``, ``numOutputBytes``.
"""

from __future__ import annotations

import time

from .. import config
from ..actions import Metadata
from ..commit_identity import TxnIdentity
from ..defaults import check_defaults
from ..errors import (
    CommitConflictError,
    DeltaError,
    InvalidArgumentError,
    InvalidSchemaError,
    TableAlreadyExistsError,
)
from ..partitions import require_data_column
from ..storage import storage_for, table_location
from .base import Command, command_result
from .result import CommandResult, WriteMetrics

OPERATION_CREATE = "CREATE TABLE"
OPERATION_CTAS = "CREATE TABLE AS SELECT"

KNOWN_DELTA_PROPERTIES = config.KNOWN_DELTA_PROPERTIES


def validate_properties(properties: dict | None) -> dict:
    """Table properties as a ``dict[str, str]``, with ``delta.*`` keys and values checked.

    Keys are matched case-insensitively and stored with Delta's spelling
    (``delta.appendonly`` -> ``delta.appendOnly``); boolean values are normalised to ``true``/``false``.

    :raises InvalidArgumentError: unknown ``delta.*`` key, one the engine alone sets
        (:data:`..config.SYSTEM_PROPERTIES`), or a value that does not parse
    """
    if properties is None:
        return {}
    if not isinstance(properties, dict):
        raise InvalidArgumentError(
            f"Table properties must be a mapping, got {type(properties).__name__}",
            None,
            "pass properties as a dict such as {'delta.appendOnly': 'true'}",
        )
    canonical = {k.lower(): k for k in KNOWN_DELTA_PROPERTIES}
    out: dict[str, str] = {}
    for key, value in properties.items():
        key = str(key).strip()
        if not key:
            raise InvalidArgumentError("A table property has an empty name", None, "remove it")
        if value is None:
            raise InvalidArgumentError(f"Table property '{key}' has no value", None, "give it a string value")
        sval = ("true" if value else "false") if isinstance(value, bool) else str(value)
        low = key.lower()
        if low.startswith("delta."):
            if low in canonical:
                key = canonical[low]
            elif not any(low.startswith(p) for p in config.PREFIX_PROPERTIES):
                raise InvalidArgumentError(
                    f"Unknown Delta table property '{key}'",
                    "properties starting with 'delta.' are reserved for the ones Delta defines",
                    "check the spelling (e.g. delta.appendOnly, delta.checkpointInterval, "
                    "delta.logRetentionDuration) or use a name without the 'delta.' prefix",
                )
            if key in config.SYSTEM_PROPERTIES:
                raise InvalidArgumentError(
                    f"Cannot set table property {key}: the engine alone sets it",
                    f"{config.SYSTEM_PROPERTIES[key]} (delta-spark refuses it too)",
                    f"remove {key} from the properties; the engine sets it when the table needs it",
                )
            if key in (config.IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION, config.IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP):
                raise InvalidArgumentError(
                    f"Cannot set table property {key}",
                    "the engine records it in the commit that enables in-commit timestamps; another value "
                    "would make time travel by timestamp pick the wrong versions",
                    f"remove {key}; set delta.enableInCommitTimestamps=true instead",
                )
            if key in config.BOOL_PROPERTIES:
                sval = "true" if config.parse_bool_property(key, sval) else "false"
            elif key in config.INTERVAL_PROPERTIES:
                config.parse_interval_ms(sval, name=key)
            elif key in config.POSITIVE_INT_PROPERTIES or key in config.INT_PROPERTIES:
                try:
                    n = int(sval)
                except ValueError:
                    n = None
                positive = key in config.POSITIVE_INT_PROPERTIES
                if n is None or (positive and n <= 0) or (not positive and n < -1):
                    raise InvalidArgumentError(
                        f"Table property {key}='{sval}' is not a valid integer",
                        "it must be a positive integer" if positive else None,
                        f"set {key} to an integer such as 10",
                    )
        out[key] = sval
    # the properties the engine acts on, parsed as the table will read them (e.g. delta.isolationLevel,
    # delta.columnMapping.mode, delta.targetFileSize, delta.dataSkippingStatsColumns)
    config.TableProperties(out).validate()
    return out


def to_delta_schema(schema):
    """A :class:`~airflow_delta_provider_apps.engine.schema.StructType` from any accepted schema form."""
    from .. import schema as schema_mod

    if schema is None:
        raise InvalidSchemaError(
            "No schema given", None, "pass a DDL string, a Spark StructType or a Delta JSON schema"
        )
    if not isinstance(schema, (str, bytes, dict, schema_mod.StructType)) and hasattr(schema, "jsonValue"):
        schema = schema.jsonValue()  # a pyspark StructType (never imported here)
    return schema_mod.parse_schema(schema)


def validate_partition_columns(schema, partition_by) -> list[str]:
    """Partition columns, spelled as in the schema; each a top-level primitive column, once."""
    from .. import schema as schema_mod

    if partition_by is None:
        return []
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if not isinstance(partition_by, (list, tuple)) or not all(isinstance(c, str) for c in partition_by):
        raise InvalidArgumentError(
            f"partition_by must be column names, got {partition_by!r}",
            None,
            "pass a column name or a list of them, e.g. ['dt']",
        )
    by_lower = {f.name.lower(): f for f in schema.fields}
    out: list[str] = []
    for col in partition_by:
        f = by_lower.get(str(col).lower())
        if f is None:
            raise InvalidArgumentError(
                f"Partition column '{col}' is not in the schema",
                f"the schema has columns {[x.name for x in schema.fields]}",
                "partition by existing top-level columns",
            )
        if isinstance(f.type, (schema_mod.StructType, schema_mod.ArrayType, schema_mod.MapType)):
            raise InvalidArgumentError(
                f"Cannot partition by column '{f.name}' of type {f.type.simple_string()}",
                "partition columns must have a primitive type",
                "partition by a primitive column",
            )
        if getattr(f.type, "name", None) in ("void", "variant"):
            raise InvalidArgumentError(
                f"Cannot partition by column '{f.name}' of type {f.type.simple_string()}",
                None,
                "partition by a column of another type",
            )
        if f.name in out:
            raise InvalidArgumentError(f"Partition column '{f.name}' is listed twice", None, "list it once")
        out.append(f.name)
    require_data_column([f.name for f in schema.fields], out, "Partitioning by all columns")
    return out


def _existing_version(storage, table_root: str) -> int | None:
    from ..log.listing import latest_version

    return latest_version(storage, table_root)


def create_table(
    table_uri: str,
    *,
    schema,
    partition_by=None,
    properties=None,
    description=None,
    name=None,
    if_not_exists: bool = False,
    source=None,
    identity: TxnIdentity | None = None,
    target_file_size: int | None = None,
    cluster_by=None,
    plane=None,
) -> CommandResult:
    """Create a Delta table (version 0) at ``table_uri``; see the module docstring.

    :param table_uri: table location (local path or URI)
    :param schema: DDL string, Delta/Spark schema JSON (str or dict), pyspark or engine StructType;
        None with ``source``: the source's
    :param partition_by: partition column names
    :param properties: table properties (``delta.*`` validated)
    :param description: ``metaData.description``
    :param name: ``metaData.name``
    :param if_not_exists: return the existing table (skipped) instead of failing
    :param source: rows that become the table's first data (create-as-select), in ``plane``'s form
    :param plane: the data plane (:mod:`..plane`) that writes ``source`` (a SparkSession's for a
        DataFrame); None: this process
    :param identity: the run's transaction identity (SetTransaction, commitInfo.userMetadata)
    :param target_file_size: data file size target for the source rows (bytes)
    :param cluster_by: clustering columns (liquid clustering: :mod:`..clustering`); not with
        ``partition_by``
    :raises TableAlreadyExistsError: the table exists and ``if_not_exists`` is false
    """
    from .. import features

    table_root = table_location(table_uri)
    storage = storage_for(table_root)
    operation = OPERATION_CTAS if source is not None else OPERATION_CREATE

    existing = _existing_version(storage, table_root) if if_not_exists else None
    if existing is not None and schema is None:  # kept, and no schema of ours to check: nothing to read
        return _already_exists(table_root, existing, if_not_exists, operation)
    if source is not None:
        from ..plane import in_process_plane

        plane = plane or in_process_plane()
        source = plane.held(source)  # (a one-shot reader is read once, here)
        if schema is None:  # the source's own
            schema = plane.schema_of(source)
    delta_schema = to_delta_schema(schema)
    partition_columns = validate_partition_columns(delta_schema, partition_by)
    configuration = validate_properties(properties)
    config.check_stats_columns(configuration, delta_schema)
    check_defaults(delta_schema)  # every DEFAULT usable and of its column's type
    _clustering(delta_schema, cluster_by, partition_columns, configuration)  # refused before anything is read

    existing = existing if if_not_exists else _existing_version(storage, table_root)
    if existing is not None:
        return _already_exists(table_root, existing, if_not_exists, operation)

    from ..column_mapping import assign
    from ..row_tracking import with_column_names

    delta_schema, configuration = assign(delta_schema, configuration)  # column mapping: ids, physical names
    configuration = with_column_names(configuration)  # row tracking's materialized columns
    protocol = features.protocol_for_new_table(delta_schema.to_json(), configuration)
    clustering = _clustering(delta_schema, cluster_by, partition_columns, configuration)
    if clustering is not None:
        protocol = features.upgraded_protocol(protocol, ["domainMetadata", "clustering"])
    configuration = stored_configuration(configuration, protocol)
    metadata = Metadata(
        id=Metadata.new_id(),
        schema_string=delta_schema.to_json_string(),
        partition_columns=partition_columns,
        configuration=configuration,
        name=name,
        description=description,
        created_time=int(time.time() * 1000),
    )
    params = {
        "isManaged": "false",
        "description": description,
        "partitionBy": list(partition_columns),
        "properties": dict(configuration),
    }
    if clustering is not None:
        params["clusterBy"] = [c for c, _ in clustering]
    cmd = Command(
        None,
        operation,
        params,
        identity=identity,
        table_root=table_root,
        storage=storage,
        protocol=protocol,
        metadata=metadata,
    )

    adds: list = []
    if clustering is not None:
        from ..clustering import domain_action

        adds.append(domain_action(clustering))
    metrics = None  # a create without data has no write metrics
    if source is not None:
        from .write import prepare_dataframe, write_spec

        df = prepare_dataframe(plane, source, delta_schema)
        spec = write_spec(table_root, delta_schema, partition_columns, configuration, target_file_size=target_file_size)
        result = plane.write(df, spec)
        adds += result.adds
        metrics = WriteMetrics(result.num_files, result.num_output_rows, result.num_output_bytes)
    try:
        return cmd.commit(adds, metrics, fields={"created": True})
    except CommitConflictError:
        # another creator won version 0
        existing = _existing_version(storage, table_root)
        if existing is None:
            raise
        return _already_exists(table_root, existing, if_not_exists, operation)


def _clustering(schema, cluster_by, partition_columns, configuration) -> list | None:
    """The checked clustering columns (``(logical, physical path)``), None without ``cluster_by``."""
    if cluster_by is None:
        return None
    from ..clustering import resolve_columns

    return resolve_columns(schema, cluster_by, partition_columns=partition_columns, configuration=configuration)


def stored_configuration(configuration: dict, protocol) -> dict:
    """The configuration kept in metaData: protocol-only properties are consumed, as delta-spark does.

    ``delta.feature.<name>`` only asks for a feature in the protocol; ``delta.minReaderVersion`` /
    ``delta.minWriterVersion`` may not ask for more than the schema and properties need (higher
    legacy versions would promise features this engine does not enforce).
    """
    out = {}
    for key, value in configuration.items():
        if key.startswith(config.FEATURE_PREFIX):
            continue
        if key in ("delta.minReaderVersion", "delta.minWriterVersion"):
            have = protocol.min_reader_version if key == "delta.minReaderVersion" else protocol.min_writer_version
            if int(value) > have:
                raise InvalidArgumentError(
                    f"Cannot create the table with {key}={value}",
                    f"this table needs protocol version {have}; a higher version would require features "
                    "this engine does not implement",
                    f"remove {key} (the engine picks the lowest protocol the table needs)",
                )
            continue
        out[key] = value
    return out


def _already_exists(table_root: str, version: int, if_not_exists: bool, operation: str) -> CommandResult:
    if not if_not_exists:
        raise TableAlreadyExistsError(
            f"Cannot create the table at '{table_root}': a Delta table is already there",
            f"its transaction log is at version {version}",
            "use if_not_exists (--if-not-exists) to keep the existing table, pick another location, "
            "or write to the existing table",
        )
    return command_result(operation, table_root, version, skipped=True, fields={"created": False})


__all__ = [
    "create_table",
    "validate_properties",
    "validate_partition_columns",
    "to_delta_schema",
    "KNOWN_DELTA_PROPERTIES",
    "DeltaError",
]
