"""Checks that need no Spark, run before an operation is submitted (a spark-submit costs 10-15 s).

:func:`preflight` takes an operation's rendered parameters and raises the same
:class:`~airflow_delta_provider_apps.engine.errors.DeltaError` the app would raise, in the user's words, for what is
knowable from the table's log and the local file system:

* the table exists (every operation but ``create-table``), or, for ``create-table`` without
  ``if_not_exists``, does not;
* the DDL parses and the partition columns are in it (``create-table`` with a schema);
* predicates (``predicate``, ``replace_where``) and UPDATE's ``updates`` bind to the table schema;
* a local source exists.

Remote tables and sources are checked by the app itself (reading them here would need their
credentials on the Airflow worker). The Airflow operators call this through :mod:`airflow_delta_provider_apps.protocol`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .engine.errors import InvalidArgumentError, TableAlreadyExistsError, TableNotFoundError

__all__ = ["preflight"]


def _local(uri: str) -> bool:
    from .engine.storage import is_local

    return is_local(uri)


def preflight(operation: str, params: Mapping) -> None:
    """Raise the error the app would raise, for what can be known without Spark (see module rules)."""
    from .engine.log.listing import latest_version
    from .engine.storage import normalize_table_uri, storage_for, table_location

    table = table_location(params.get("table_uri"))
    source = params.get("source")
    if source and _local(str(source)) and not os.path.exists(normalize_table_uri(str(source))):
        raise InvalidArgumentError(
            f"Source '{source}' not found",
            "no file or directory at that path on this machine",
            "check source= (for a path only the cluster sees, use a URI such as hdfs:// or s3://)",
        )
    if not _local(table):
        return
    version = latest_version(storage_for(table), table)
    if operation == "create-table":
        if version is not None and not params.get("if_not_exists"):
            raise TableAlreadyExistsError(
                f"Cannot create the table at '{table}': a Delta table is already there",
                f"its transaction log is at version {version}",
                "pass if_not_exists=True to keep it, or pick another table_uri",
            )
        schema = params.get("schema")
        if schema is not None and version is None:
            from .engine.schema import parse_schema

            parsed = parse_schema(schema)
            missing = [c for c in params.get("partition_by") or [] if parsed.find(c) is None]
            if missing:
                raise InvalidArgumentError(
                    f"Partition column(s) {', '.join(missing)} are not in the schema",
                    f"the schema has columns {', '.join(parsed.names)}",
                    "name columns of the schema in partition_by=",
                )
        return
    if version is None:
        raise TableNotFoundError(
            f"No Delta table at '{table}'",
            "there is no _delta_log directory with a commit or checkpoint file",
            "check table_uri, or create the table first (DeltaCreateTableOperator)",
        )
    conditions = {k: params.get(k) for k in ("predicate", "replace_where") if params.get(k) is not None}
    if not conditions and not params.get("updates"):
        return
    from .engine.expr import bind_assignments, parse_predicate
    from .engine.log.snapshot import load_snapshot

    schema = load_snapshot(storage_for(table), table).schema
    for name, text in conditions.items():
        try:
            parse_predicate(str(text), schema)
        except InvalidArgumentError as e:
            raise type(e)(f"{name}=: {e.problem}", e.cause, e.fix) from None
    if params.get("updates"):
        try:
            bind_assignments(dict(params["updates"]), schema)
        except InvalidArgumentError as e:
            raise type(e)(f"updates=: {e.problem}", e.cause, e.fix) from None
