"""DeltaHook: run one operation of the bundled Delta apps over a connection and bring its result back.

The hook resolves the connection, the object-store credentials (``storage_conn_id``) and the run's
Spark settings, picks how the task reaches Spark (:mod:`airflow_delta_provider.hooks.transport`:
spark-submit, Spark Connect, or in this process) and returns the app's result dict; a run whose own
result was lost after its commit landed is recovered from the table's log by its SetTransaction
identity, whatever the transport. It never asks which transport it has: what differs is the
transport's (:class:`~airflow_delta_provider.hooks.transport.Transport`).

Modules of the package, one concern each: :mod:`.connections` (connection types, master, Connect
URL), :mod:`.bundle` (the apps' zip), :mod:`.outcome` (result and failure mapping, pure),
:mod:`.transport` (the contract), :mod:`.registry` (the transports, and which one a connection
selects), :mod:`.submit` and :mod:`.driver` (spark-submit), :mod:`.connect` (Spark Connect),
:mod:`.local` (in this process). The Airflow layer never imports pyspark.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_delta_provider.exceptions import (
    AirflowNotFoundException,
    DeltaConfigurationError,
    DeltaRetryableError,
    DeltaTaskError,
)
from airflow_delta_provider.hooks.bundle import AppBundle, build_app_bundle, clear_bundle_cache
from airflow_delta_provider.hooks.connections import DELTA_SPARK_CONN_TYPE, missing_connection
from airflow_delta_provider.hooks.outcome import (
    AppOutput,
    engine_error_retryable,
    metrics_summary,
    reader_warning_text,
    resolve_outcome,
    schema_change_text,
)
from airflow_delta_provider.hooks.registry import check_options, driver_env, transport_for, transport_in_worker
from airflow_delta_provider.hooks.submit import (
    CapturingSparkSubmitHook,
    SparkSubmitOptions,
    SubmitSettings,
    check_master_reachable,
    find_spark_submit,
)
from airflow_delta_provider.hooks.transport import Started, Transport
from airflow_delta_provider_apps.operations import OPERATIONS, TxnIdentity


class DeltaHook(BaseHook):
    """Run the bundled Delta apps over any Airflow Spark connection: spark-submit or Spark Connect.

    :param conn_id: a connection of type ``spark`` or ``delta_spark`` (host ``local[*]``, ``yarn``,
        ``spark://h:7077``, ``k8s://https://h:6443``; extras ``deploy-mode``, ``queue``, ``namespace``,
        ``spark-binary`` as in the apache-spark provider, plus ``delta_result_dir``): spark-submit; or
        ``spark_connect`` (host, port, token, user id, SSL), or a ``delta_spark`` master ``sc://h:15002``:
        Spark Connect, the task is the client; or any connection a transport of
        :data:`~airflow_delta_provider.hooks.registry.TRANSPORTS` serves.
    :param spark_conf: Spark properties (``--conf``).
    :param storage_conn_id: the object store's credentials (see
        :mod:`airflow_delta_provider.storage_connections`).
    :param options: the transports' own settings, passed through as one mapping (:attr:`options`);
        each transport takes and checks its own (``Transport.options``), a name none takes is refused.
        spark-submit's: ``spark_binary`` (spark-submit to run, name on PATH or absolute path; overrides
        the connection's ``spark-binary``; default: see :func:`find_spark_submit`), ``result_dir``
        (folder, local path or URI, for the result files; required for cluster deploy mode; default:
        the connection extra ``delta_result_dir``), ``submit_options`` (:class:`SparkSubmitOptions` or
        a dict of its fields); spark-submit's and Spark Connect's: ``bundle_dir`` (cache folder for the
        apps zip, default ``<tmp>/airflow-delta-provider/bundles``).

    Example::

        hook = DeltaHook("spark_local", spark_conf={"spark.sql.shuffle.partitions": "4"})
        result = hook.run("checkpoint", "/data/tables/events")
        result["version"], result["metrics"]
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Delta Lake (spark-submit)"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        *,
        spark_conf: dict[str, Any] | None = None,
        storage_conn_id: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.storage_conn_id = storage_conn_id
        self._storage_env: dict[str, str] | None = None
        self.spark_conf = dict(spark_conf or {})
        self.options = check_options(options)  # every transport's settings: each reads its own
        self._connection_transport: Transport | None = None
        self.transport: Transport | None = None  # the transport of the current (or last) run

    # -- connection -------------------------------------------------------------------------

    def get_conn(self):
        """The Airflow connection (raises a clear error when it does not exist)."""
        return self.spark_connection(self.conn_id)

    @classmethod
    def spark_connection(cls, conn_id: str):
        """The Airflow connection ``conn_id``: one lookup, no hook needed (an operator checks it before
        anything else). A missing one raises a permanent error suggesting the closest ids there are."""
        try:
            return cls.get_connection(conn_id)
        except AirflowNotFoundException:
            raise missing_connection(
                conn_id,
                f"Spark connection '{conn_id}' does not exist",
                "DeltaHook needs a connection (type 'spark', 'delta_spark' or 'spark_connect') to know how to reach "
                "Spark, and Airflow has none of this id",
                f'define it, e.g. AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[*]"}}\'',
            ) from None

    def storage_env(self) -> dict[str, str]:
        """The object store's credentials from ``storage_conn_id`` as the standard variables (``{}``
        without one: the environment's default chain applies); resolved once per hook."""
        if self._storage_env is None:
            from airflow_delta_provider.storage_connections import storage_env

            self._storage_env = storage_env(self, self.storage_conn_id)
        return self._storage_env

    def storage_context(self):
        """A context manager in which this worker reaches the object store with ``storage_conn_id``'s
        credentials (log reads, in-process runs), else those the hook gives the driver
        (:meth:`driver_env`), leaving the process environment as it is."""
        from airflow_delta_provider_apps.protocol import storage_settings

        return storage_settings({**self.driver_env(), **self.storage_env()})

    def driver_env(self) -> dict[str, str]:
        """The environment the hook's settings give the Spark app's driver besides ``storage_conn_id``'s
        (each transport's own, e.g. spark-submit's ``submit_options.env_vars``), so that work done in
        the worker (log reads, in-process runs) reaches the object store as the app would."""
        return driver_env(self.spark_conf, self.options)

    # -- building ---------------------------------------------------------------------------

    # -- running ----------------------------------------------------------------------------

    def transport_for_connection(self) -> Transport:
        """The transport the connection selects (:func:`~airflow_delta_provider.hooks.registry.transport_for`),
        built once per hook."""
        if self._connection_transport is None:
            self._connection_transport = transport_for(self.get_conn())(self)
        return self._connection_transport

    def run(self, operation: str, table_uri: str, **params: Any) -> dict:
        """Run one Delta app operation over the connection and return its result dict.

        :param operation: a registry operation (``create-table``, ``write``, ``checkpoint``, ...).
        :param table_uri: the table's path or URI.
        :param params: the operation's parameters, named as the CLI's spec keys (``mode``,
            ``source``, ``source_format``, ``partition_by``, ``app_id``, ...).
        :return: the app's result ``{"status": "ok", "operation", "table_uri", "version", "skipped",
            "committed", "metrics", ...}`` plus ``submit_seconds`` (spark-submit) or ``run_seconds``.
        :raises DeltaRetryableError: a retry may help (conflict, I/O, Spark failure).
        :raises DeltaPermanentError: a retry cannot help (bad input, missing table, ...).
        """
        self._check_target(operation, table_uri)
        return self._run_on(self.transport_for_connection(), operation, table_uri, params)

    def run_in_process(self, operation: str, table_uri: str, **params: Any) -> dict:
        """Run an operation in this worker process without Spark (create without data, checkpoint,
        log cleanup, describe, history; DELETE/UPDATE/OPTIMIZE rewritten by a thread pool): no
        spark-submit, no connection needed. Same parameters, result and errors as :meth:`run`, plus
        ``run_seconds``. The registry names its transport
        (:func:`~airflow_delta_provider.hooks.registry.transport_in_worker`)."""
        return self._run_on(transport_in_worker()(self), operation, table_uri, params)

    def _run_on(self, transport: Transport, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        self.transport = transport
        identity = OPERATIONS[operation].identity(params)
        with self.storage_context():
            earlier = transport.recover(table_uri, identity)
            if earlier is not None:
                return {**earlier, "transport": transport.name}
            result = self._or_from_log(lambda: transport.run(operation, table_uri, params), table_uri, identity)
        result = {**result, "transport": transport.name}
        self._log_result(operation, table_uri, result, transport.run_label)
        return result

    def _or_from_log(self, call, table_uri: str, identity: TxnIdentity) -> dict:
        """``call()``'s result; when it fails but the run's commit is in the table's log (its own
        result was lost), that commit's result."""
        try:
            return call()
        except DeltaTaskError as e:
            result = self.result_from_log(table_uri, identity)
            if result is None:
                raise
            self.log.warning(
                "The Delta app's own result was lost (%s); its commit is in the table's log: version %s",
                e,
                result.get("version"),
            )
            return result

    # -- deferred runs ------------------------------------------------------------------------

    def deferral_blocker(self) -> str | None:
        """Why this connection's runs cannot free the worker slot while Spark works (the reason a
        ``deferrable`` operator logs before it runs attached), or None (e.g. cluster deploy mode)."""
        return self.transport_for_connection().deferral_blocker()

    def start(self, operation: str, table_uri: str, **params: Any) -> dict | Started:
        """Start a run over the connection without waiting for it: the :class:`Started` run, whose
        trigger follows it (:class:`~airflow_delta_provider.triggers.delta.DeltaRunTrigger`), then
        :meth:`complete`. Returns a result instead when an earlier try of the task instance made the
        commit (or is still making it: then it waits, as :meth:`run` does). Same parameters as
        :meth:`run`; a transport that cannot defer refuses (:meth:`deferral_blocker`)."""
        self._check_target(operation, table_uri)
        transport = self.transport = self.transport_for_connection()
        with self.storage_context():
            earlier = transport.recover(table_uri, OPERATIONS[operation].identity(params))
            if earlier is not None:
                return {**earlier, "transport": transport.name}
            handle = transport.start(operation, table_uri, params)
        return Started(handle, transport.trigger(handle))

    def complete(self, operation: str, table_uri: str, event: dict, **params: Any) -> dict:
        """The result of a run started by :meth:`start`, from its trigger's ``event`` (same result and
        errors as :meth:`run`; a lost result is recovered from the table's log). A run that never got
        resources is stopped; the trigger's other failures are retryable."""
        from airflow_delta_provider.triggers.delta import run_of

        cls, handle = run_of(event)
        current = self.transport_for_connection()  # the connection's, else one built for this hook
        transport = self.transport = current if type(current) is cls else cls(self)
        try:
            status = event.get("status")
            if status == "not_started":
                problem = transport.stop(handle)
                raise DeltaRetryableError(
                    "SparkDriverNotStarted",
                    f"{event['message']}; {'stopped it' if problem is None else f'could not stop it ({problem})'}. "
                    "Fix: give the cluster room (or a longer wait); the task is retried.",
                    retryable=True,
                )
            if status != "ended":
                raise DeltaRetryableError(
                    "SparkInfrastructureError",
                    f"{event.get('message') or f'unexpected event {event!r}'}. Fix: check the cluster manager; "
                    "the retry waits for the run if it still runs (its run lease) instead of starting it again.",
                    retryable=True,
                )
            with self.storage_context():
                result = self._or_from_log(
                    lambda: transport.finish(handle, event["state"], bool(event["succeeded"])),
                    table_uri,
                    OPERATIONS[operation].identity(params),
                )
        finally:
            transport.release(handle)
        result = {**result, "transport": transport.name}
        self._log_result(operation, table_uri, result, f" ({transport.describe(handle)})")
        return result

    @staticmethod
    def _check_target(operation: str, table_uri: str) -> None:
        if operation not in OPERATIONS:
            raise DeltaConfigurationError(
                f"Unknown Delta operation '{operation}'", None, f"use one of {sorted(OPERATIONS)}"
            )
        if not table_uri or not str(table_uri).strip():
            raise DeltaConfigurationError("No table_uri given", None, "pass the table's path or URI")

    def _log_result(self, operation: str, table_uri: str, result: dict, how: str = "") -> None:
        skipped = " (skipped: an earlier commit of this identity)" if result.get("skipped") else ""
        commits = operation in OPERATIONS and OPERATIONS[operation].commits
        unchanged = (
            " (nothing to change)" if commits and result.get("committed") is False and not result.get("skipped") else ""
        )
        self.log.info(
            "Delta %s on %s%s: version %s%s%s%s",
            operation,
            table_uri,
            how,
            result.get("version"),
            skipped,
            unchanged,
            metrics_summary(operation, result.get("metrics") or {}),
        )
        # what the commit did to the schema, and the features it turned on that other readers refuse
        for change in result.get("schema_changes") or []:
            self.log.info("Delta %s on %s: schema change: %s", operation, table_uri, schema_change_text(change))
        for warning in result.get("reader_warnings") or []:
            self.log.warning("Delta %s on %s: other readers: %s", operation, table_uri, reader_warning_text(warning))

    def result_from_log(self, table_uri: str, identity: TxnIdentity) -> dict | None:
        """The result of this run's commit, found in the table's log by its SetTransaction
        ``identity`` (``app_id``, ``app_version``): what a run reports when its result file and
        stdout are lost (cluster deploy mode, a client killed after the commit). None without an
        identity, or when the commit is not there (the run did not commit)."""
        if not identity.app_id:
            return None
        from airflow_delta_provider_apps.protocol import landed_result

        try:
            landed = landed_result(table_uri, str(identity.app_id), identity.app_version)
        except Exception as e:  # the log is not readable from here: nothing to recover
            self.log.warning("Cannot read the table's log to recover the result: %s", e)
            return None
        return None if landed is None else {**landed, "skipped": False, "committed": True}

    @property
    def application_url(self) -> str | None:
        """The running (or last) Spark application's web page, when there is one."""
        return self.transport.application_url if self.transport is not None else None

    def on_kill(self) -> None:
        """Stop the running work: the spark-submit application (local process, YARN app, k8s pod), or
        the Spark Connect session's operations."""
        if self.transport is not None:
            self.transport.kill()


# re-exported: where these names lived before the hooks became a package
__all__ = [
    "AppBundle",
    "AppOutput",
    "DeltaHook",
    "DeltaSparkHook",
    "SparkSubmitOptions",
    "SubmitSettings",
    "CapturingSparkSubmitHook",
    "build_app_bundle",
    "check_master_reachable",
    "clear_bundle_cache",
    "engine_error_retryable",
    "find_spark_submit",
    "resolve_outcome",
]


class DeltaSparkHook(DeltaHook):
    """:class:`DeltaHook` registered for the provider's ``delta_spark`` connection type, whose form in
    Airflow's UI holds the Spark fields (master, deploy mode, spark binary, YARN queue, Kubernetes
    namespace) and the Delta ones (the result folder cluster mode needs). Any Delta operator takes
    such a connection as ``conn_id``, as it takes a plain ``spark`` one."""

    default_conn_name = "delta_spark_default"
    conn_type = DELTA_SPARK_CONN_TYPE
    hook_name = "Delta Lake (Spark)"

    # Airflow 3.2+ builds the connection form from the provider info ("conn-fields" and
    # "ui-field-behaviour") without importing this class; Airflow 3.1 asks the hook, so the two methods
    # below build the same form from that one declaration (with Flask AppBuilder, as the UI has it).
    @classmethod
    def _connection_type_info(cls) -> dict[str, Any]:
        from airflow_delta_provider.get_provider_info import get_provider_info

        types = get_provider_info()["connection-types"]
        return next(t for t in types if t["connection-type"] == cls.conn_type)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        behaviour = cls._connection_type_info()["ui-field-behaviour"]
        return {key.replace("-", "_"): value for key, value in behaviour.items()}

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from wtforms import StringField
        from wtforms.validators import Optional

        return {
            name: StringField(
                field["label"],
                widget=BS3TextFieldWidget(),
                description=field.get("description", ""),
                validators=[Optional()],
                default=field["schema"].get("default"),
            )
            for name, field in cls._connection_type_info()["conn-fields"].items()
        }
