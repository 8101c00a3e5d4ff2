"""The app protocol: everything the Airflow side may use of the bundled apps, and nothing more.

The provider submits the apps and reads their result (the CLI contract in docs/design.md); besides
that it needs a few read-only things from the core, all re-exported here so that the engine's
internals can move without touching the provider (``tests/test_layering.py`` enforces it):

* :func:`error_retryable`: whether an engine error class (by name) is worth a retry;
* :func:`preflight`: the checks an operation can pass or fail without Spark, before it is submitted;
* :func:`landed_result`: the result of a commit that already carries a task instance's identity
  (a retry reports it instead of applying twice; a lost result is recovered from it);
* :func:`run_in_process`: an operation that needs no Spark (create without data, checkpoint, log
  cleanup, describe, history) run in the worker itself (``execution="local"``);
* :class:`ConnectRun`: an operation run in the worker as a Spark Connect client, its Spark work on
  the server (a ``spark_connect`` connection);
* the read-only log API the sensor and the hook use: :func:`latest_version`,
  :func:`read_commit_infos`, :func:`storage_for`, :func:`normalize_table_uri`, :class:`DeltaError`;
  what one commit changed: :func:`commit_partition_keys`, :func:`commit_changes` (its schema changes
  and reader warnings);
* :func:`table_view`: a table's history, files, health and advice from its log (the UI plugin's
  page), :func:`rows_changed`: the rows a commit wrote, updated and deleted (asset events);
* :func:`sync_catalog`: a table's name in a catalog, synced after a commit (:func:`parse_table_name`
  checks the name);
* :func:`storage_settings`: object-store credentials for a block of work in the worker or the
  triggerer (from an Airflow connection), without touching the process environment.
"""

from __future__ import annotations

from .connect import ConnectRun
from .dispatch import run_in_process
from .engine import errors as _errors
from .engine.catalog import parse_table_name, sync_catalog, syncs_in_session
from .engine.errors import DeltaError
from .engine.log.listing import latest_version
from .engine.log.snapshot import read_commit_infos
from .engine.progress import reporting_to as progress_to
from .engine.storage import (
    normalize_table_uri,
    storage_for,
    storage_settings,
    store_for_connection_type,
    table_location,
)
from .engine.table_view import rows_changed, table_view
from .failures import infrastructure_cause
from .landed import commit_changes, commit_partition_keys, landed_result
from .preflight import preflight
from .results import numbers
from .run_lease import wait_for_earlier_run
from .versions import install_problem

__all__ = [
    "ConnectRun",
    "check_partitioning",
    "parse_table_name",
    "sync_catalog",
    "syncs_in_session",
    "commit_changes",
    "commit_partition_keys",
    "DeltaError",
    "error_retryable",
    "infrastructure_cause",
    "install_problem",
    "landed_result",
    "latest_version",
    "normalize_table_uri",
    "numbers",
    "preflight",
    "progress_to",
    "read_commit_infos",
    "rows_changed",
    "run_in_process",
    "storage_for",
    "storage_settings",
    "store_for_connection_type",
    "table_location",
    "table_schema",
    "table_view",
    "wait_for_earlier_run",
]


def check_partitioning(schema, partition_by, cluster_by=None, properties=None) -> None:
    """CREATE TABLE's rule for a literal ``schema`` (DDL, JSON), its ``partition_by`` and ``cluster_by``
    (the operators check it at DAG parse time); raises the engine's InvalidArgumentError /
    InvalidSchemaError."""
    from .engine.clustering import resolve_columns
    from .engine.commands.create_table import to_delta_schema, validate_partition_columns

    delta_schema = to_delta_schema(schema)
    parts = validate_partition_columns(delta_schema, partition_by)
    if cluster_by is not None:
        resolve_columns(delta_schema, cluster_by, partition_columns=parts, configuration=properties)


def error_retryable(error_class: str | None) -> bool | None:
    """The engine's ``retryable`` for an error class name; ``None`` when it is not an engine error."""
    if not error_class:
        return None
    cls = getattr(_errors, error_class.rsplit(".", 1)[-1], None)
    if isinstance(cls, type) and issubclass(cls, DeltaError):
        return bool(cls.retryable)
    return None


def table_schema(table_uri: str) -> list[tuple[str, str]] | None:
    """``[(column, Spark type)]`` of the table's latest schema (its log only), or None without a table."""
    from .engine.log.snapshot import load_table_metadata
    from .engine.schema import parse_schema

    root = table_location(table_uri)
    storage = storage_for(root)
    if latest_version(storage, root) is None:
        return None
    schema = parse_schema(load_table_metadata(storage, root).metadata.schema_string)
    return [(f.name, f.type.simple_string()) for f in schema.fields]
