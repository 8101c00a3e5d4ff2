"""Delta operators: thin wrappers that make ONE :meth:`DeltaHook.run` call in ``execute()``.

Rules (after Airflow's SparkSubmitOperator):

* Keyword-only ``__init__``; templated parameters listed in ``template_fields``; validation that does
  not depend on templates happens at DAG parse time (a clear error in the DAG import report).
* The hook is built lazily (never at parse time) and ``on_kill`` is delegated to it.
* ``execute()`` returns the app's result dict, which becomes the task's XCom ``return_value``:
  ``{"status": "ok", "operation", "table_uri", "version", "skipped", "metrics": {...}, ...}``.
* Spark settings are not repeated per operator: ``spark_conf`` (a dict of Spark properties) and
  ``submit_options`` (:class:`~airflow_delta_provider.hooks.delta.SparkSubmitOptions` or a dict).
* Idempotent retries: ``app_id`` + ``app_version`` become the commit's SetTransaction (a commit with an
  (app_id, version) the table has already seen is skipped). They are explicit for now;
  :meth:`DeltaBaseOperator.transaction_identity` is the one place where deriving them from the task
  context (dag, task, logical date) will be added.
* Asset events: when an outlet is the table's Asset (:func:`delta_asset`), its event carries
  ``{"version", "operation"}`` as extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import Asset, BaseOperator

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.delta import DeltaHook, SparkSubmitOptions

SOURCE_FORMATS = ("parquet", "csv", "json", "delta")
WRITE_MODES_SUPPORTED = ("append",)
WRITE_MODES_LATER = ("overwrite",)


def delta_asset(table_uri: str, **kwargs: Any) -> Asset:
    """The Airflow Asset of a Delta table (local paths become ``file://`` URIs).

    Use it in ``outlets=[delta_asset(uri)]``: the writing operator then attaches the new table version
    to the asset event, and asset-scheduled DAGs run on each commit made through Airflow.
    """
    uri = str(table_uri).rstrip("/")
    if "://" not in uri:
        uri = "file://" + os.path.abspath(os.path.expanduser(uri))
    return Asset(uri=uri, **kwargs)


def _same_table(asset_uri: str, table_uri: str) -> bool:
    try:
        return delta_asset(table_uri).uri == str(asset_uri).rstrip("/")
    except Exception:
        return False


def _coerce_version(value: Any, name: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise DeltaConfigurationError(f"{name} must be an integer, not {value!r}")
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise DeltaConfigurationError(
            f"{name} {value!r} is not an integer", None, f"pass an int (or a template rendering to one) as {name}"
        ) from None


class DeltaBaseOperator(BaseOperator):
    """Common arguments of every Delta operator.

    :param table_uri: the table's path or URI (templated).
    :param conn_id: Airflow connection of type ``spark`` (master, deploy mode, ...).
    :param spark_conf: Spark properties for this run (templated).
    :param submit_options: other spark-submit settings
        (:class:`~airflow_delta_provider.hooks.delta.SparkSubmitOptions` or a dict of its fields).
    :param result_dir: where the app writes its result file (needed for cluster deploy mode; default:
        the connection extra ``delta_result_dir``).
    :param app_id: application id of the commit's SetTransaction, for idempotent retries (templated).
    :param app_version: that application's version for this commit (templated); a commit whose
        (app_id, app_version) the table already has is skipped.
    :param user_metadata: free text stored as ``commitInfo.userMetadata`` (templated).
    """

    operation: ClassVar[str] = ""
    template_fields: Sequence[str] = ("table_uri", "spark_conf", "app_id", "app_version", "user_metadata")
    template_fields_renderers: ClassVar[dict[str, str]] = {"spark_conf": "json"}
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        conn_id: str = DeltaHook.default_conn_name,
        spark_conf: dict[str, Any] | None = None,
        submit_options: SparkSubmitOptions | dict | None = None,
        result_dir: str | None = None,
        app_id: str | None = None,
        app_version: int | str | None = None,
        user_metadata: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.conn_id = conn_id
        self.spark_conf = spark_conf
        self.submit_options = SparkSubmitOptions.coerce(submit_options)
        self.result_dir = result_dir
        self.app_id = app_id
        self.app_version = app_version
        self.user_metadata = user_metadata

    @cached_property
    def hook(self) -> DeltaHook:
        """The DeltaHook, built on first use (never at DAG parse time)."""
        return DeltaHook(
            self.conn_id,
            spark_conf=self.spark_conf,
            result_dir=self.result_dir,
            submit_options=self.submit_options,
        )

    def transaction_identity(self, context) -> dict[str, Any]:
        """The commit's SetTransaction identity and user metadata, as spec keys.

        Today: the explicit ``app_id``/``app_version``/``user_metadata`` arguments. This is the single
        extension point for deriving an identity from ``context`` (dag id, task id, logical date) so
        retries and backfill re-runs commit exactly once.
        """
        app_version = _coerce_version(self.app_version, "app_version")
        if (self.app_id is None) != (app_version is None):
            raise DeltaConfigurationError(
                "app_id and app_version must be given together",
                f"got app_id={self.app_id!r}, app_version={self.app_version!r}",
                "pass both (an application id and this run's version number) or neither",
            )
        return {"app_id": self.app_id, "app_version": app_version, "user_metadata": self.user_metadata}

    def operation_params(self, context) -> dict[str, Any]:
        """The operation's own spec keys (subclasses)."""
        return {}

    def execute(self, context) -> dict:
        result = self.hook.run(
            self.operation, self.table_uri, **self.operation_params(context), **self.transaction_identity(context)
        )
        self._annotate_asset_events(context, result)
        return result

    def _annotate_asset_events(self, context, result: dict) -> None:
        if not self.outlets:
            return
        try:
            events = context["outlet_events"]
        except (KeyError, TypeError):
            return
        for outlet in self.outlets:
            if isinstance(outlet, Asset) and _same_table(outlet.uri, self.table_uri):
                events[outlet].extra = {
                    "version": result.get("version"),
                    "operation": result.get("operation"),
                    "skipped": bool(result.get("skipped")),
                }

    def on_kill(self) -> None:
        if "hook" in self.__dict__:  # only when execute() built it
            self.hook.on_kill()


class DeltaCreateTableOperator(DeltaBaseOperator):
    """Create a Delta table (``CREATE TABLE [IF NOT EXISTS] [AS SELECT]``).

    :param table_uri: where the table lives (templated).
    :param schema: the schema: a DDL string (``"id BIGINT, name STRING"``) or a Delta schema JSON
        (string or dict); optional with ``source`` (then the source's schema is used) (templated).
    :param partition_by: partition column names (templated).
    :param properties: table properties, e.g. ``{"delta.appendOnly": "true"}`` (templated).
    :param description: table description (templated).
    :param name: table name stored in the metadata (templated).
    :param if_not_exists: succeed without a commit when a table is already there (result ``skipped``).
    :param source: create-as-select: a file/folder/table URI whose rows become version 0 (templated).
    :param source_format: ``parquet``, ``csv``, ``json`` or ``delta``.
    :param source_options: reader options for the source, e.g. ``{"header": "true"}`` (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        create = DeltaCreateTableOperator(
            task_id="create_events",
            table_uri="/lake/events",
            schema="id BIGINT, name STRING, amount DOUBLE, dt STRING",
            partition_by=["dt"],
            properties={"delta.checkpointInterval": "10"},
            if_not_exists=True,
            conn_id="spark_local",
        )
    """

    operation = "create-table"
    template_fields: Sequence[str] = (
        *DeltaBaseOperator.template_fields,
        "schema",
        "partition_by",
        "properties",
        "description",
        "name",
        "source",
        "source_options",
    )

    def __init__(
        self,
        *,
        schema: str | dict | None = None,
        partition_by: Sequence[str] | None = None,
        properties: dict[str, str] | None = None,
        description: str | None = None,
        name: str | None = None,
        if_not_exists: bool = False,
        source: str | None = None,
        source_format: str | None = None,
        source_options: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if schema is None and source is None:
            raise ValueError(f"{type(self).__name__}: give a schema, or a source to create the table from")
        if source is not None and source_format is None:
            source_format = "parquet"
        if source_format is not None and source_format not in SOURCE_FORMATS:
            raise ValueError(f"source_format must be one of {SOURCE_FORMATS}, not {source_format!r}")
        self.schema = schema
        self.partition_by = list(partition_by) if isinstance(partition_by, (list, tuple)) else partition_by
        self.properties = properties
        self.description = description
        self.name = name
        self.if_not_exists = if_not_exists
        self.source = source
        self.source_format = source_format
        self.source_options = source_options

    def operation_params(self, context) -> dict[str, Any]:
        import json

        schema = self.schema
        if isinstance(schema, dict):
            schema = json.dumps(schema)
        partition_by = self.partition_by
        if isinstance(partition_by, str):
            partition_by = [c.strip() for c in partition_by.split(",") if c.strip()]
        return {
            "schema": schema,
            "partition_by": partition_by or None,
            "properties": {str(k): str(v) for k, v in (self.properties or {}).items()} or None,
            "description": self.description,
            "name": self.name,
            "if_not_exists": bool(self.if_not_exists),
            "source": self.source,
            "source_format": self.source_format if self.source else None,
            "source_options": self.source_options or None,
        }


class DeltaWriteOperator(DeltaBaseOperator):
    """Append the rows of a source (files or a Delta table) to a Delta table.

    :param table_uri: the target table (templated).
    :param source: file, folder or table URI to read (templated), e.g. ``"/landing/{{ ds }}/"``.
    :param source_format: ``parquet``, ``csv``, ``json`` or ``delta``.
    :param mode: ``"append"``. (``"overwrite"`` is not available yet and is refused at parse time.)
    :param source_options: reader options, e.g. ``{"header": "true"}`` for CSV (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        append = DeltaWriteOperator(
            task_id="append_day",
            table_uri="/lake/events",
            source="/landing/events/{{ ds }}.parquet",  # the day's rows, dt column included
            source_format="parquet",
            app_id="events-loader",
            app_version="{{ logical_date.strftime('%Y%m%d') }}",
            conn_id="spark_local",
        )
    """

    operation = "write"
    template_fields: Sequence[str] = (*DeltaBaseOperator.template_fields, "source", "source_options")

    def __init__(
        self,
        *,
        source: str,
        source_format: str = "parquet",
        mode: str = "append",
        source_options: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mode in WRITE_MODES_LATER:
            raise ValueError(
                f"{type(self).__name__}: mode={mode!r} is not supported yet (only 'append'). "
                "Overwrite (full and replace_where) comes with the next release; until then, append only."
            )
        if mode not in WRITE_MODES_SUPPORTED:
            raise ValueError(f"{type(self).__name__}: mode must be 'append', not {mode!r}")
        if source_format not in SOURCE_FORMATS:
            raise ValueError(f"source_format must be one of {SOURCE_FORMATS}, not {source_format!r}")
        self.source = source
        self.source_format = source_format
        self.mode = mode
        self.source_options = source_options

    def operation_params(self, context) -> dict[str, Any]:
        if not self.source or not str(self.source).strip():
            raise DeltaConfigurationError(
                "No source to write", "source rendered empty", "pass a file, folder or table URI"
            )
        return {
            "mode": self.mode,
            "source": self.source,
            "source_format": self.source_format,
            "source_options": {str(k): str(v) for k, v in (self.source_options or {}).items()} or None,
        }


class DeltaCheckpointOperator(DeltaBaseOperator):
    """Write a checkpoint of the table's latest version (and optionally clean up expired log files).

    The XCom holds the checkpoint's metrics (version, number of actions, bytes, duration).

    :param table_uri: the table (templated).
    :param cleanup: also delete log files older than ``delta.logRetentionDuration``.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri="/lake/events", conn_id="spark_local")
    """

    operation = "checkpoint"

    def __init__(self, *, cleanup: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cleanup = cleanup

    def operation_params(self, context) -> dict[str, Any]:
        return {"cleanup": bool(self.cleanup)}

    def transaction_identity(self, context) -> dict[str, Any]:
        # A checkpoint makes no commit, so there is no SetTransaction to carry.
        return {}


__all__ = [
    "DeltaBaseOperator",
    "DeltaCheckpointOperator",
    "DeltaCreateTableOperator",
    "DeltaWriteOperator",
    "delta_asset",
]
