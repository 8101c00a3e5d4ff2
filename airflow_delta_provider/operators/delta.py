"""Delta operators: thin wrappers that make ONE :meth:`DeltaHook.run` call in ``execute()``.

Rules (after Airflow's SparkSubmitOperator):

* Keyword-only ``__init__``; templated parameters listed in ``template_fields``; validation that does
  not depend on templates happens at DAG parse time (a clear error in the DAG import report).
* The hook is built lazily (never at parse time) and ``on_kill`` is delegated to it.
* ``execute()`` returns the app's result dict, which becomes the task's XCom ``return_value``:
  ``{"status": "ok", "operation", "table_uri", "version", "skipped", "metrics": {...}, ...}``.
* Each operator names its operation in the registry (:mod:`airflow_delta_provider_apps.operations`); its own
  arguments, their defaults, which are templated and their checks come from there: a subclass is a
  docstring and ``operation = "<name>"``. Checks run at DAG parse time for values without templates
  and again on the rendered values in ``execute()``, before anything is submitted.
* Spark settings are not repeated per operator: ``spark_conf`` (a dict of Spark properties) and
  ``submit_options`` (:class:`~airflow_delta_provider.hooks.delta.SparkSubmitOptions` or a dict).
* Idempotent retries: ``app_id`` + ``app_version`` become the commit's SetTransaction (a commit with an
  (app_id, version) the table has already seen is skipped). They are explicit for now;
  :meth:`DeltaBaseOperator.identity` is the one place where deriving them from the task
  context (dag, task, logical date) will be added.
* Asset events: when an outlet is the table's Asset (:func:`delta_asset`), its event carries
  ``{"version", "operation", ...}`` as extra, and ``schema_changes`` / ``reader_warnings`` when the commit
  changed columns or turned on a feature other readers refuse. A run that changed nothing emits none, nor does an
  outlet a Delta watcher of the table watches (the watcher announces every commit once).
* An argument the operator does not take fails the DAG import with the closest accepted name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import Asset, BaseOperator, BaseOperatorLink

from airflow_delta_provider.exceptions import DeltaConfigurationError, app_error
from airflow_delta_provider.hooks.delta import DeltaHook, SparkSubmitOptions
from airflow_delta_provider.hooks.registry import check_options, driver_env, option_names
from airflow_delta_provider.hooks.transport import Started
from airflow_delta_provider.operators.arguments import refuse_unknown_arguments
from airflow_delta_provider.triggers.delta import DeltaTableVersionTrigger

try:
    from airflow.sdk.configuration import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf
from airflow_delta_provider_apps import operations as ops

SOURCE_FORMATS = ops.SOURCE_FORMATS
#: "auto": in the worker's process when the operation's parameters need no Spark, else on the
#: connection's Spark; "spark": on the connection's Spark (spark-submit, or Spark Connect for a
#: spark_connect connection or an sc:// master); "spark-submit" is its earlier name; "local": in the
#: worker's process, no Spark
EXECUTIONS = ("auto", "spark", "spark-submit", "local")
RERUNS = ("replace", "apply", "skip")
_BASE_TEMPLATE_FIELDS = (
    "table_uri",
    "spark_conf",
    "submit_options",
    "app_id",
    "app_version",
    "user_metadata",
    "catalog_table",
)


def delta_asset(table_uri: str, **kwargs: Any) -> Asset:
    """The Airflow Asset of a Delta table (local paths become ``file://`` URIs).

    Every writing operator with a literal ``table_uri`` declares ``delta_asset(table_uri)`` as its
    outlet by default (pass ``outlets=`` to choose others, ``outlets=[]`` for none; a templated
    ``table_uri`` is only known when the task runs, so name its asset yourself). The operator attaches
    the commit's version, operation and main metrics to the asset event, and asset-scheduled DAGs run
    on each commit made through Airflow. For a table that is also watched (``watchers=[``
    :func:`~airflow_delta_provider.triggers.delta.delta_table_watcher` ``]``), use the one watched
    asset as the operators' outlet: they leave its events to the watcher.
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


def _watched_by_delta_trigger(asset: Asset, table_uri: str) -> bool:
    """``asset`` has an ``AssetWatcher`` running a watching DeltaTableVersionTrigger on ``table_uri``."""
    for watcher in getattr(asset, "watchers", None) or ():
        trigger = getattr(watcher, "trigger", None)
        if (
            isinstance(trigger, DeltaTableVersionTrigger)
            and trigger.watch
            and _same_table(delta_asset(trigger.table_uri).uri, table_uri)
        ):
            return True
    return False


def _coerce_version(value: Any, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:  # the engine's one rule for versions (operations.coerce -> engine.values.parse_version)
        return ops.coerce(ops.Arg(name, "version"), value)
    except ValueError:
        raise DeltaConfigurationError(
            f"{name} {value!r} is not a whole number from 0 up",
            None,
            f"pass an int (or a template rendering to one) as {name}",
        ) from None


def task_instance_identity(context, retries: int | None) -> tuple[str, int] | None:
    """``(app_id, app_version)`` of the running task instance: the application is the task instance
    (``airflow:<dag>/<task>[<map index>]@<logical date or run id>``, so backfills of different dates
    never shadow each other), its version the first try number of the task instance's current run
    (``max_tries - retries + 1``, as Airflow computes it): retries share it, each clear (or
    reprocessing backfill) raises it. None outside a task instance."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is None:
        return None
    logical = context.get("logical_date")
    key = logical.isoformat() if logical is not None else context.get("run_id") or getattr(ti, "run_id", None)
    if key is None:
        return None
    map_index = getattr(ti, "map_index", -1)
    mapped = f"[{map_index}]" if map_index is not None and map_index >= 0 else ""
    app_id = f"airflow:{ti.dag_id}/{ti.task_id}{mapped}@{key}"
    max_tries = getattr(ti, "max_tries", None)
    if not isinstance(max_tries, int):
        return app_id, 1
    return app_id, max(1, max_tries - int(retries or 0) + 1)


def airflow_task(context) -> dict[str, Any] | None:
    """The running task instance as its commits record it (``commitInfo.airflow``): ``dag_id``,
    ``task_id``, ``run_id``, ``map_index``, ``try_number``; None outside a task instance."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is None or not getattr(ti, "dag_id", None):
        return None
    run_id = context.get("run_id") or getattr(ti, "run_id", None)
    out = {"dag_id": str(ti.dag_id), "task_id": str(ti.task_id), "run_id": None if run_id is None else str(run_id)}
    for name in ("map_index", "try_number"):
        value = getattr(ti, name, None)
        if isinstance(value, int):
            out[name] = value
    return out


def readable_rows(operation: str | None, metrics: dict) -> dict[str, int]:
    """``rows_written`` / ``rows_updated`` / ``rows_deleted`` of a commit's metrics (those it has)."""
    from airflow_delta_provider_apps.protocol import rows_changed

    return {f"rows_{k}": v for k, v in rows_changed(operation, metrics).items()}


def committer(context) -> dict[str, Any]:
    """``dag_id``, ``task_id``, ``run_id`` of the task instance that committed (an asset event's extra)."""
    task = airflow_task(context) or {}
    return {k: task[k] for k in ("dag_id", "task_id", "run_id") if task.get(k) is not None}


def _check_table_uri(table_uri: Any, error: type[Exception]) -> None:
    """A relative table location is refused (it would resolve differently on each worker)."""
    from airflow_delta_provider_apps.protocol import DeltaError, table_location

    try:
        table_location(table_uri)
    except DeltaError as e:
        raise error(f"table_uri={table_uri!r}: {e.one_line()}") from None


def _check_catalog(operator: str, catalog_table, catalog_conn_id, error: type[Exception] = ValueError) -> None:
    """``catalog_table`` and ``catalog_conn_id`` come together; a literal name is checked now."""
    if bool(catalog_table) != bool(catalog_conn_id):
        given, missing = ("catalog_table", "catalog_conn_id") if catalog_table else ("catalog_conn_id", "catalog_table")
        raise error(
            f"{operator}: {given} given without {missing}. Cause: the table's name is kept in a catalog, "
            f"which needs both the name and the connection. Fix: pass {missing} too, or neither"
        )
    if catalog_table and not ops.is_template(catalog_table):
        from airflow_delta_provider_apps.protocol import DeltaError, parse_table_name

        try:
            parse_table_name(catalog_table)
        except DeltaError as e:
            raise error(f"{operator}: {e.one_line()}") from None


def _check_literal_partitioning(operator: str, values: dict) -> None:
    """A literal ``schema`` and its ``partition_by`` / ``cluster_by`` of CREATE TABLE must agree:
    checked at DAG parse time with the engine's own rules (the schema parser is imported only when
    they are literal)."""
    schema, partition_by, cluster_by = values.get("schema"), values.get("partition_by"), values.get("cluster_by")
    properties = values.get("properties")
    if schema is None or not (partition_by or cluster_by):
        return
    if any(ops.is_template(v) or ops.holds_template(v) for v in (schema, partition_by, cluster_by, properties)):
        return
    from airflow_delta_provider_apps.protocol import DeltaError, check_partitioning

    as_list = ops.Arg("partition_by", "list")
    try:
        check_partitioning(
            schema,
            ops.coerce(as_list, partition_by),
            ops.coerce(as_list, cluster_by),
            ops.coerce(ops.Arg("properties", "dict"), properties),
        )
    except DeltaError as e:
        raise ValueError(f"{operator}: {e.one_line()}") from None


class SparkApplicationLink(BaseOperatorLink):
    """The task's "Spark application" button: the application's web page when spark-submit printed one
    (YARN's tracking URL, the driver's Spark UI in client mode); empty (no button) otherwise, e.g. for
    local masters, which run without a UI, and for ``execution="local"``."""

    name = "Spark application"

    def get_link(self, operator, *, ti_key) -> str:
        hook = operator.__dict__.get("hook")  # the hook of this run, if it was built
        return (getattr(hook, "application_url", None) if hook is not None else None) or ""


class DeltaTableLink(BaseOperatorLink):
    """The task's "Delta table" button: the Delta view's page of the table at the version this task
    instance committed (:mod:`airflow_delta_provider.plugins.delta_view`); empty when it committed
    nothing or the view is turned off. Airflow 3 computes it in the worker when the task ends."""

    name = "Delta table"

    def get_link(self, operator, *, ti_key) -> str:
        return _view_url(operator.__dict__.get("_last_result") or {})


def _view_url(result: dict) -> str:
    """The Delta view's page of the table at the version ``result`` names; "" without one or with
    the view off (the "Delta table" link, and the asset event's ``delta_view``)."""
    from airflow_delta_provider.plugins.settings import view_url

    if not isinstance(result.get("version"), int) or not result.get("table_uri"):
        return ""
    return view_url(result["table_uri"], result["version"])


class DeltaBaseOperator(BaseOperator):
    """Common arguments of every Delta operator.

    :param table_uri: the table's path or URI (templated).
    :param conn_id: Airflow connection of type ``spark`` or ``delta_spark`` (master, deploy mode, ...: a
        spark-submit per task), or ``spark_connect`` (host, port, token: the task is a Spark Connect client).
    :param spark_conf: Spark properties for this run (templated).
    :param submit_options: other spark-submit settings
        (:class:`~airflow_delta_provider.hooks.delta.SparkSubmitOptions` or a dict of its fields).
    :param result_dir: where the app writes its result file (needed for cluster deploy mode; default:
        the connection extra ``delta_result_dir``).
    :param kwargs: BaseOperator's arguments, and any transport's own settings
        (``Transport.options``, e.g. spark-submit's ``spark_binary`` and ``bundle_dir``): with
        ``submit_options`` and ``result_dir`` they reach the hook as one mapping; each transport takes
        and checks its own (a literal bad value fails the DAG import), a run over another ignores them.
    :param app_id: application id of the commit's SetTransaction (templated). Without it, every
        writing operator derives one from the task instance (DAG, task, map index, logical date or run
        id) and its version from the task instance's clears (Airflow's first try number of the current
        run of the task): a retry after a commit that landed reports that commit (``skipped``) without
        submitting anything; a re-run after a clear or a reprocessing backfill applies ``on_rerun``.
    :param app_version: that application's version for this commit (templated); a commit whose
        (app_id, app_version) the table already has is skipped.
    :param on_rerun: what a re-run of a task instance that committed before does (derived identity):
        ``"replace"`` (default): an append removes the files its earlier commit appended, in the same
        commit (one copy of the latest load); other operations apply again (DELETE, MERGE, overwrite
        are idempotent in data; UPDATE applies its expressions again). ``"apply"``: apply again, an
        append included. ``"skip"``: keep the earlier commit and report it.
    :param user_metadata: free text stored as ``commitInfo.userMetadata`` (templated).
    :param storage_conn_id: an Airflow connection (type ``aws``, ``google_cloud_platform``, ``wasb``
        or ``adls``) with the object store's credentials; without it the environment's default chain
        applies (see :mod:`airflow_delta_provider.storage_connections`). They reach the app through
        the spark-submit process's environment (client mode) or a file only this user can read
        (cluster mode), never the command line, the task log or XCom.
    :param execution: ``"auto"`` (default): in the worker process when these parameters need no
        Spark (the registry's ``spark_required``: CREATE TABLE from a schema, checkpoint and log
        cleanup, table properties, clustering columns, column renames, drops and type changes,
        constraints, RESTORE, a DELETE whose predicate names partition columns only or no predicate,
        CREATE TABLE IF NOT EXISTS where a table is; also when the worker can reach the table's
        store), else as ``"spark"``, on every connection type;
        ``"spark"`` (``"spark-submit"`` is its earlier name): run the bundled app
        on the connection's Spark: a Spark application by spark-submit on a ``spark``/``delta_spark``
        connection, or over Spark Connect (this task is the client, the work runs on the server) on a
        ``spark_connect`` connection or a ``delta_spark`` master ``sc://host:port``, whatever the
        parameters (Spark forced);
        ``"local"``: run it in the worker process, no Spark application, no cluster wait: for
        operations that only touch the table's log (create without data, checkpoint, log cleanup, a
        DELETE by partition, describe, history), for DELETE, UPDATE and OPTIMIZE on tables the worker
        can rewrite itself (files rewritten by a thread pool, no Spark), and for a MERGE of a parquet
        or Delta source the worker can hold, with a key equality in ON (merged file by file). WRITE
        refuses it at DAG parse time; what else needs Spark fails before anything is written.
    :param catalog_table: ``"database.table"``: the table's name in the catalog of ``catalog_conn_id``
        (templated). After the commit has landed, the task creates or updates that entry when the
        commit changed the schema (``schema_changes``: ``merge_schema``, type widening, renames,
        drops), and always on :class:`DeltaCreateTableOperator` and :class:`DeltaRegisterTableOperator`.
        A Hive metastore's entry is written by the Spark app, in its own session, when the run goes
        to Spark (a run the worker could make alone goes to Spark for it when ``conn_id`` exists);
        Glue's, and any other, by the worker (:mod:`airflow_delta_provider.hooks.catalog`).
        A failed sync fails the task retryably; the retry finds the landed commit and only syncs.
        The XCom and the table's asset event carry ``catalog`` (``{"catalog", "table", "action"}``);
        the asset stays the table's location (one asset whatever it is named).
    :param catalog_conn_id: an Airflow connection of type ``delta_glue`` or ``delta_hive_metastore``
        (:mod:`airflow_delta_provider.hooks.catalog`); given with ``catalog_table``.
    :param deferrable: free the worker slot while the Spark application runs (default: Airflow's
        ``[operators] default_deferrable``): the connection's transport starts the run, the task defers
        to its trigger (:class:`~airflow_delta_provider.triggers.delta.DeltaRunTrigger`) on the
        triggerer, and resumes to read the result. Over spark-submit in cluster deploy mode the trigger
        follows the driver (standalone master's REST server, YARN's ResourceManager, the driver pod).
        In client mode, over Spark Connect and for work done in the worker's process the task cannot
        leave the worker: it logs why and runs attached.
    """

    operation: ClassVar[str] = ""
    #: syncs ``catalog_table`` after every run (create, register), not only after a schema change
    syncs_catalog: ClassVar[bool] = False
    #: where it runs unless ``execution=`` says otherwise
    default_execution: ClassVar[str] = "auto"
    template_fields: Sequence[str] = _BASE_TEMPLATE_FIELDS
    template_fields_renderers: ClassVar[dict[str, str]] = {"spark_conf": "json"}
    ui_color = "#00add4"
    operator_extra_links = (SparkApplicationLink(), DeltaTableLink())

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
        execution: str | None = None,
        on_rerun: str = "replace",
        storage_conn_id: str | None = None,
        catalog_table: str | None = None,
        catalog_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        op = ops.get(self.operation)
        if on_rerun not in RERUNS:
            raise ValueError(f"{type(self).__name__}: on_rerun={on_rerun!r}: use one of {', '.join(RERUNS)}")
        self.on_rerun = on_rerun
        execution = execution or self.default_execution
        if execution not in EXECUTIONS:
            raise ValueError(f"{type(self).__name__}: execution={execution!r}: use one of {', '.join(EXECUTIONS)}")
        if execution == "local" and op.needs_spark is True and not op.in_process:
            raise ValueError(
                f"{type(self).__name__}: execution='local' is not available: '{op.name}' reads or writes "
                "data, which needs Spark; use execution='auto' (the default) or 'spark'"
            )
        self.execution = execution
        values = {arg.name: kwargs.pop(arg.name, arg.default) for arg in op.operator_args}
        # other transports' own settings (Transport.options, e.g. spark_binary), passed through with
        # submit_options and result_dir as one mapping (transport_settings): each transport reads its own
        self.more_transport_settings = {name: kwargs.pop(name) for name in sorted(option_names()) if name in kwargs}
        own = [a.name for a in op.operator_args]
        takes = f"its operation's arguments ({', '.join(own) or 'none'}), the common Delta arguments (table_uri, "
        refuse_unknown_arguments(type(self), kwargs, own=own, takes=takes + "conn_id, spark_conf, ...)")
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        try:  # what is knowable now fails the DAG import, in the user's words
            ops.check_params(op, values, skip_templates=True)
        except ValueError as e:
            raise ValueError(f"{type(self).__name__}: {e}") from None
        _check_literal_partitioning(type(self).__name__, values)
        if not op.commits:  # an operation that commits nothing cannot carry a commit's identity
            given = [
                n
                for n, v in (("app_id", app_id), ("app_version", app_version), ("user_metadata", user_metadata))
                if v is not None
            ]
            if given:
                raise ValueError(
                    f"{type(self).__name__}: {', '.join(given)} given, but '{op.name}' commits nothing. Cause: "
                    "the idempotent-write identity and user metadata are stored in a commit. "
                    f"Fix: remove {', '.join(given)}"
                )
        if not ops.is_template(table_uri):
            _check_table_uri(table_uri, ValueError)
            # a writing operator's table is its outlet unless outlets= is given (outlets=[]: none)
            if op.commits and kwargs.get("outlets") is None and not self.outlets:
                self.outlets = [delta_asset(table_uri)]
        self.table_uri = table_uri
        self.conn_id = conn_id
        self.spark_conf = spark_conf
        self.submit_options = submit_options  # templated: checked again when the hook is built
        self.result_dir = result_dir
        literal = {
            k: v for k, v in self.transport_settings().items() if not (ops.is_template(v) or ops.holds_template(v))
        }
        check_options(literal)  # a bad setting (e.g. an unknown spark-submit option) fails the DAG import
        self.app_id = app_id
        self.app_version = app_version
        self.user_metadata = user_metadata
        self.storage_conn_id = storage_conn_id
        _check_catalog(type(self).__name__, catalog_table, catalog_conn_id)
        self.catalog_table = catalog_table
        self.catalog_conn_id = catalog_conn_id
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> DeltaHook:
        """The DeltaHook, built on first use (never at DAG parse time)."""
        return DeltaHook(
            self.conn_id, spark_conf=self.spark_conf, storage_conn_id=self.storage_conn_id, **self.transport_settings()
        )

    def transport_settings(self) -> dict[str, Any]:
        """The user's settings of the transports (rendered, once the task runs), as one mapping: the
        hook passes it through and each transport takes its own (``Transport.options``)."""
        return {"submit_options": self.submit_options, "result_dir": self.result_dir, **self.more_transport_settings}

    def identity(self, context) -> ops.TxnIdentity:
        """The commit's transaction identity, one value: the explicit ``app_id``/``app_version``,
        else one derived from the task instance (see ``app_id`` in the class docstring;
        :func:`task_instance_identity`), with ``user_metadata``; empty for an operation that
        commits nothing."""
        from airflow_delta_provider_apps.protocol import DeltaError

        try:  # the identity's own rule (both parts or neither), in the operator's words
            explicit = ops.TxnIdentity(
                self.app_id, _coerce_version(self.app_version, "app_version"), self.user_metadata
            )
        except DeltaError as e:
            raise DeltaConfigurationError(
                "app_id and app_version must be given together",
                e.cause,
                "pass both (an application id and this run's version number) or neither",
            ) from None
        if not ops.get(self.operation).commits:
            return ops.TxnIdentity()
        if explicit.app_id is None:
            derived = task_instance_identity(context, self.retries)
            if derived is not None:
                app_id, app_version = derived
                if self.on_rerun == "skip":
                    app_version = 1  # every run of this task instance is the first: any commit of it counts
                return ops.TxnIdentity(app_id, app_version, self.user_metadata)
        return explicit

    def transaction_identity(self, context, identity: ops.TxnIdentity | None = None) -> dict[str, Any]:
        """The run's :meth:`identity` (``identity`` when already made) as the app's spec keys: the one
        place it becomes a dict, what goes on the wire; with the task instance its commits record
        (``airflow_task``: commitInfo.airflow, which the UI view links the version to)."""
        wire = (identity if identity is not None else self.identity(context)).options()
        task = airflow_task(context) if ops.get(self.operation).commits else None
        return {**wire, "airflow_task": task} if task else wire

    def landed(self, identity: ops.TxnIdentity) -> dict | None:
        """The earlier commit of this identity already in the table's log (read here, no Spark), as a
        result; None when there is none or the log cannot be read from this worker (then the app
        checks the same before it writes)."""
        if identity.app_id is None or identity.app_version is None:
            return None
        from airflow_delta_provider_apps.protocol import landed_result

        try:
            return landed_result(self.table_uri, identity.app_id, identity.app_version)
        except Exception as e:  # e.g. a store this worker has no credentials for
            self.log.warning("Cannot read the table's log to find an earlier commit of this task (%s)", e)
            return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.operation and "template_fields" not in cls.__dict__:
            own = ops.get(cls.operation).operator_args
            cls.template_fields = (*_BASE_TEMPLATE_FIELDS, *(a.name for a in own if a.templated))

    def operation_params(self, context) -> dict[str, Any]:
        """The operation's own parameters, rendered, coerced and checked (registry)."""
        op = ops.get(self.operation)
        values = {arg.name: getattr(self, arg.name) for arg in op.operator_args}
        try:
            checked = ops.check_params(op, values)
        except ValueError as e:
            raise DeltaConfigurationError(
                f"{type(self).__name__} got a bad argument", str(e), "fix the argument (after templating)"
            ) from None
        return {k: checked[k] for k in values}

    def execute(self, context) -> dict:
        _check_table_uri(self.table_uri, DeltaConfigurationError)
        if not self.storage_conn_id and not driver_env(self.spark_conf, self.transport_settings()):
            return self._execute(context)
        # the worker's own log reads and runs use storage_conn_id's credentials (else the driver's)
        with self.hook.storage_context():
            return self._execute(context)

    def _execute(self, context) -> dict:
        params = self.operation_params(context)
        identity = self.identity(context)
        landed = self.landed(identity)
        if landed is not None:  # a retry (or on_rerun="skip") after the commit landed: report it
            self.log.info(
                "Delta %s on %s: already committed by an earlier try of this task instance (version %s, "
                "app_id %s); reporting that commit, nothing submitted",
                self.operation,
                self.table_uri,
                landed.get("version"),
                identity.app_id,
            )
            return self._report(context, landed)  # the catalog is synced again: it may be what failed
        in_worker = self.runs_in_worker(params)
        if not in_worker:  # a missing (misspelt) conn_id fails now: before the source or Spark
            DeltaHook.spark_connection(self.conn_id)
            if self._catalog_spec() is not None:  # the app syncs it in its session, after its commit
                params["catalog"] = self._catalog_spec()
        if not in_worker:  # a run in this worker checks the same itself before it writes anything
            self.preflight(params)
        if self.operation == "write" and params.get("mode") == "append" and self.app_id is None:
            params["rerun"] = "replace" if self.on_rerun == "replace" else "apply"  # the derived identity
        params.update(self.transaction_identity(context, identity))  # the identity on the wire
        if in_worker:
            result = self.hook.run_in_process(self.operation, self.table_uri, **params)
        elif self.deferrable and self._can_defer():
            result = self.hook.start(self.operation, self.table_uri, **params)
            if isinstance(result, Started):  # else an earlier try's commit: nothing started
                self.defer(trigger=result.trigger, method_name="execute_complete")
        else:
            result = self.hook.run(self.operation, self.table_uri, **params)
        return self._report(context, result, app_syncs_catalog="catalog" in params)

    def runs_in_worker(self, params: dict) -> bool:
        """Whether this run goes to the worker's process (no Spark): ``execution="local"`` always,
        ``"spark"`` never; ``"auto"`` when the registry says these parameters need no Spark
        (:meth:`~airflow_delta_provider_apps.operations.Operation.spark_required`, the rule the CLI
        follows too: log-only work, a DELETE of whole files by partition values, CREATE TABLE IF NOT
        EXISTS where a table is) and this worker can read the table's store."""
        if self.execution not in ("auto", "local"):
            return False
        if self.execution == "auto" and (
            ops.get(self.operation).spark_required({**params, "table_uri": self.table_uri})
            or not self._worker_reaches_table()
            or self._catalog_goes_to_spark()
        ):
            return False
        self.log.info(
            "Delta %s on %s runs in this worker, without Spark (execution=%r; execution='spark' forces Spark)",
            self.operation,
            self.table_uri,
            self.execution,
        )
        return True

    def _catalog_spec(self) -> dict | None:
        """The run's ``catalog`` parameter when its catalog syncs in a Spark app's own session (a Hive
        metastore: :meth:`~airflow_delta_provider.hooks.catalog.DeltaCatalogHook.session_spec`), read
        once per run; None without ``catalog_table`` or for a catalog the worker syncs (Glue)."""
        if "_catalog_spec_value" not in self.__dict__:
            spec = None
            if self.catalog_table:
                from airflow_delta_provider.hooks.catalog import DeltaCatalogHook

                _check_catalog(type(self).__name__, self.catalog_table, self.catalog_conn_id, DeltaConfigurationError)
                spec = DeltaCatalogHook(self.catalog_conn_id).session_spec(
                    self.catalog_table, always=self.syncs_catalog
                )
            self.__dict__["_catalog_spec_value"] = spec
        return self.__dict__["_catalog_spec_value"]

    def _catalog_goes_to_spark(self) -> bool:
        """The rule for a run the worker could make alone (``execution="auto"``) whose catalog syncs in
        a Spark session (a Hive metastore) and that syncs it (create, register, or a commit that may
        change the schema): it goes to the connection's Spark, whose app syncs in its own session,
        when there is a Spark connection ``conn_id``; without one it stays here, and the worker syncs
        in a local Spark session. Either choice is logged."""
        if self._catalog_spec() is None or not (self.syncs_catalog or ops.get(self.operation).changes_schema):
            return False
        try:
            DeltaHook.spark_connection(self.conn_id)
        except Exception:
            self.log.info(
                "Delta %s on %s: no Spark connection '%s', so the catalog sync of %s runs in this worker "
                "(a local Spark session with Hive support)",
                self.operation,
                self.table_uri,
                self.conn_id,
                self.catalog_table,
            )
            return False
        self.log.info(
            "Delta %s on %s runs on the Spark of connection '%s' (not in this worker), so that the Spark app "
            "syncs %s in the Hive metastore from its own session, after its commit",
            self.operation,
            self.table_uri,
            self.conn_id,
            self.catalog_table,
        )
        return True

    def _worker_reaches_table(self) -> bool:
        """A table on a local path, or one whose log this worker can list (an object store with
        credentials here); else the run goes to Spark, whose driver may hold the credentials."""
        from airflow_delta_provider_apps.protocol import (
            latest_version,
            normalize_table_uri,
            storage_for,
            table_location,
        )

        root = table_location(self.table_uri)
        if "://" not in normalize_table_uri(root):  # a local path (the engine's is_local)
            return True
        try:
            latest_version(storage_for(root), root)
        except Exception as e:  # e.g. no credentials for this store in the worker
            self.log.info("Delta %s on %s runs on Spark: this worker cannot read its log (%s)", self.operation, root, e)
            return False
        return True

    def _report(self, context, result: dict, *, app_syncs_catalog: bool = False) -> dict:
        """The run's ``result`` as the task reports it (catalog synced, asset events annotated);
        ``app_syncs_catalog``: this run asked the Spark app to sync the catalog in its own session."""
        self._sync_catalog(result, app_syncs_catalog)
        self._annotate_asset_events(context, result)
        self._last_result = result
        return result

    def _sync_catalog(self, result: dict, app_syncs_catalog: bool = False) -> None:
        """After the commit landed: create or update ``catalog_table`` (see the class docstring).
        Any failure is retryable: the retry reports the landed commit and syncs again, nothing more.
        ``app_syncs_catalog``: the Spark app was asked to sync it in its session (:meth:`_catalog_spec`)."""
        if not self.catalog_table or not (self.syncs_catalog or result.get("schema_changes")):
            return
        from airflow_delta_provider.hooks.catalog import DeltaCatalogHook

        _check_catalog(type(self).__name__, self.catalog_table, self.catalog_conn_id, DeltaConfigurationError)
        synced = result.get("catalog") if isinstance(result.get("catalog"), dict) else {}
        if synced.get("action"):  # synced by the Spark app, in its own session, after its commit
            self.log.info(
                "Catalog %s: %s %s (version %s) in the Spark app's session",
                synced.get("catalog"),
                synced["action"],
                synced.get("table"),
                synced.get("version"),
            )
            return
        if synced.get("error"):  # the Spark app committed, then its sync failed
            raise self._catalog_sync_failed(result, synced["error"])
        if app_syncs_catalog:  # asked, yet not synced there: the worker syncs it
            self.log.info(
                "The Spark run did not sync %s in its session (a Spark Connect session, or an earlier try's "
                "commit): this worker syncs it, from a local Spark session",
                self.catalog_table,
            )
        try:
            result["catalog"] = DeltaCatalogHook(self.catalog_conn_id).sync(self.catalog_table, self.table_uri)
        except DeltaConfigurationError:
            raise
        except Exception as e:
            detail = e.one_line() if hasattr(e, "one_line") else f"{type(e).__name__}: {e}"
            raise self._catalog_sync_failed(result, detail) from e

    def _catalog_sync_failed(self, result: dict, detail: str) -> Exception:
        from airflow_delta_provider.exceptions import DeltaRetryableError

        return DeltaRetryableError(
            "CatalogSyncError",
            f"The table's commit (version {result.get('version')}) landed, but syncing catalog table "
            f"{self.catalog_table} ({self.catalog_conn_id}) failed: {detail.rstrip('.')}. "
            "Fix: see the cause; the retry syncs the catalog only, it commits nothing again.",
            retryable=True,
            result=result,
        )

    def _can_defer(self) -> bool:
        blocker = self.hook.deferral_blocker()
        if blocker:
            self.log.info("deferrable=True, but this run keeps its worker slot: %s", blocker)
        return blocker is None

    def execute_complete(self, context, event: dict) -> dict:
        """Resume after the deferred run ended: its result (or the error it ended with). The event
        names the run; the parameters and identity are the task instance's again."""
        params = {**self.operation_params(context), **self.transaction_identity(context)}
        return self._report(context, self.hook.complete(self.operation, self.table_uri, event or {}, **params))

    def get_openlineage_facets_on_complete(self, task_instance):
        """OpenLineage (with the openlineage provider installed): the source read, the table written,
        its schema, the committed version and the run's row and byte counts
        (:mod:`airflow_delta_provider.lineage`)."""
        from airflow_delta_provider.lineage import operator_lineage

        source = getattr(self, "source", None)
        inputs = [str(source)] if source else []
        if self.operation in ("delete", "update", "optimize", "restore") or (
            self.operation == "merge"
        ):  # the table is read too
            inputs.append(str(self.table_uri))
        return operator_lineage(str(self.table_uri), getattr(self, "_last_result", None), inputs)

    def preflight(self, params: dict) -> None:
        """Fail now, without a spark-submit, on what the table's log and local paths already tell
        (missing table, bad predicate or DDL, missing local source); see :mod:`airflow_delta_provider_apps.preflight`."""
        from airflow_delta_provider_apps.protocol import DeltaError, preflight

        try:
            preflight(self.operation, {**params, "table_uri": self.table_uri})
        except DeltaError as e:
            raise app_error(type(e).__name__, e.one_line(), retryable=e.retryable) from None

    def _annotate_asset_events(self, context, result: dict) -> None:
        """The table's asset event carries the commit. Airflow emits an event for each outlet the task
        has when it succeeds, so the table's asset is taken out of ``outlets`` for this run when the run
        changed nothing (``committed`` and ``skipped`` false: e.g. an OPTIMIZE with nothing to compact;
        or a CREATE TABLE IF NOT EXISTS that kept the table: skipped, ``created`` false, not an
        earlier try's commit read back from the log) and when a Delta watcher of this table watches it (the watcher announces every commit, this
        one included: one event per commit). The asset naming ``catalog_table`` (``hive://``,
        ``glue://``: :mod:`airflow_delta_provider.lineage`) is the table's too: same rules, same
        extra, with ``table_uri``."""
        declared = self.__dict__.setdefault("_declared_outlets", list(self.outlets or []))
        kept = result.get("created") is False and not result.get("from_log")
        unchanged = kept or (not result.get("committed") and not result.get("skipped"))
        catalog_uri = self._catalog_asset_uri(declared)

        def names_table(o) -> bool:
            return isinstance(o, Asset) and (_same_table(o.uri, self.table_uri) or o.uri == catalog_uri)

        silent = [o for o in declared if names_table(o) and (unchanged or _watched_by_delta_trigger(o, self.table_uri))]
        self.outlets = [o for o in declared if not any(o is s for s in silent)]
        if silent:
            self.log.info(
                "No asset event for %s: %s",
                self.table_uri,
                "this run changed nothing" if unchanged else "its watcher announces the commit",
            )
        if not self.outlets:
            return
        try:
            events = context["outlet_events"]
        except (KeyError, TypeError):
            return
        keys = None
        for outlet in self.outlets:
            if names_table(outlet):
                metrics = result.get("metrics") or {}
                # this task instance's commit, or an earlier try's (a retry after it landed reports it)
                ours = bool(result.get("committed") or result.get("skipped") or result.get("from_log"))
                main = {k: metrics[k] for k in ops.get(self.operation).metrics if k in metrics}
                events[outlet].extra = {
                    # what a person scans for first: the version, the operation, the rows, who wrote it
                    "version": result.get("version"),
                    "operation": result.get("operation"),
                    **readable_rows(result.get("operation"), metrics),
                    **(committer(context) if ours else {}),
                    # the Delta view at this version: the asset page shows the extra as JSON, whose
                    # URLs it makes links (ctrl/cmd + click); Airflow has no asset-page plugin view
                    **({"delta_view": url} if (url := _view_url(result)) else {}),
                    "skipped": bool(result.get("skipped")),
                    "committed": bool(result.get("committed", not result.get("skipped"))),
                    "metrics": main,
                    # the columns the commit added or changed, the features it turned on that other
                    # readers refuse: only when there are some
                    **{k: result[k] for k in ("schema_changes", "reader_warnings", "catalog") if result.get(k)},
                    # the catalog name's asset says where the table is
                    **({"table_uri": delta_asset(self.table_uri).uri} if outlet.uri == catalog_uri else {}),
                }
                if hasattr(events[outlet], "add_partitions"):  # Airflow 3.2+: asset partitions
                    keys = self._partition_keys(result) if keys is None else keys
                    if keys:
                        try:
                            events[outlet].add_partitions(keys)
                        except (TypeError, ValueError) as e:  # the event goes out without them
                            self.log.warning("Asset event without partition keys: %s", e)

    def _catalog_asset_uri(self, outlets: list) -> str | None:
        """The asset URI of ``catalog_table`` in its catalog, when an outlet is of a catalog's scheme
        (the connection is read only then); an outlet of that scheme naming the same table
        differently (another host, region, port) is logged with the URI that would match."""
        from airflow_delta_provider.lineage import CATALOG_SCHEMES

        schemes = tuple(f"{s}://" for s in CATALOG_SCHEMES.values())
        named = [o for o in outlets if isinstance(o, Asset) and str(o.uri).startswith(schemes)]
        if not self.catalog_table or not named:
            return None
        from airflow_delta_provider.hooks.catalog import DeltaCatalogHook

        try:
            uri = DeltaCatalogHook(self.catalog_conn_id).asset_uri(self.catalog_table)
        except Exception as e:  # the asset events go out without it
            self.log.warning("Cannot name catalog table %s as an asset: %s", self.catalog_table, e)
            return None
        tail = uri.split("?")[0].rsplit("/", 2)[-2:]
        for o in named:
            if o.uri != uri and o.uri.split("?")[0].rsplit("/", 2)[-2:] == tail:
                self.log.warning(
                    "Outlet %s names catalog table %s but not as catalog connection %s does (%s): its event "
                    "carries no commit",
                    o.uri,
                    self.catalog_table,
                    self.catalog_conn_id,
                    uri,
                )
        return uri

    def _partition_keys(self, result: dict) -> list[str]:
        """The partitions this task's commit changed, as Airflow partition keys (one Asset event
        each); none for a result that is not this task's commit or a table read that fails."""
        from airflow_delta_provider_apps.protocol import commit_partition_keys

        ours = result.get("committed") or result.get("from_log")
        if not ours or not isinstance(result.get("version"), int):
            return []
        try:
            return commit_partition_keys(self.table_uri, result["version"]) or []
        except Exception as e:  # the event goes out without partition keys
            self.log.warning("Cannot read the partitions of commit %s: %s", result["version"], e)
            return []

    def on_kill(self) -> None:
        if "hook" in self.__dict__:  # only when execute() built it
            self.hook.on_kill()


class DeltaCreateTableOperator(DeltaBaseOperator):
    """Create a Delta table (``CREATE TABLE [IF NOT EXISTS] [AS SELECT]``).

    :param table_uri: where the table lives (templated).
    :param schema: a DDL string (``"id BIGINT, name STRING"``) or a Delta schema JSON (string or dict);
        optional with ``source`` (then the source's schema is used) (templated).
    :param partition_by: partition column names (a list or ``"a, b"``) (templated).
    :param cluster_by: clustering columns (liquid clustering; a list or ``"a, b"``; not with
        ``partition_by``) (templated): :class:`DeltaOptimizeOperator` then clusters the table by
        them, incrementally; :class:`DeltaClusterByOperator` changes them.
    :param properties: table properties, e.g. ``{"delta.appendOnly": "true"}`` (templated).
    :param description: table description (templated).
    :param name: table name stored in the metadata (templated).
    :param if_not_exists: succeed without a commit when a table is already there: the XCom then says
        ``created: false`` and ``version`` is the existing table's latest version, which is the
        baseline a downstream :class:`DeltaTableVersionSensor` should wait beyond.
    :param source: create-as-select: a file/folder/table URI whose rows become version 0 (templated).
    :param source_format: ``parquet`` (default), ``csv``, ``json`` or ``delta`` (templated).
    :param source_options: reader options for the source, e.g. ``{"header": "true"}`` (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        create = DeltaCreateTableOperator(
            task_id="create_events",
            table_uri="/lake/events",
            schema="id BIGINT, name STRING, amount DOUBLE, dt STRING",
            partition_by=["dt"],  # or cluster_by=["id"]: a clustered table (OPTIMIZE clusters it)
            properties={"delta.checkpointInterval": "10"},
            if_not_exists=True,
            conn_id="spark_local",
        )
    """

    operation = "create-table"
    syncs_catalog = True


class DeltaWriteOperator(DeltaBaseOperator):
    """Append or overwrite the rows of a source (files or a Delta table) into a Delta table.

    :param table_uri: the target table (templated).
    :param source: file, folder or table URI to read (templated), e.g. ``"/landing/{{ ds }}/"``.
    :param source_format: ``parquet`` (default), ``csv``, ``json`` or ``delta`` (templated).
    :param source_options: reader options, e.g. ``{"header": "true"}`` for CSV (templated).
    :param mode: ``"append"`` (default) or ``"overwrite"`` (templated).
    :param replace_where: with ``mode="overwrite"``: replace only the rows matching this Spark SQL
        condition; every written row must match it (templated), e.g. ``"dt = '{{ ds }}'"``.
    :param partition_overwrite_mode: ``"static"`` (default) or ``"dynamic"``: with ``mode="overwrite"``,
        replace only the partitions the source writes to.
    :param overwrite_schema: with ``mode="overwrite"``: take the source's schema as the new schema.
    :param merge_schema: add the source's new columns (nullable) and widen types safely.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        append = DeltaWriteOperator(
            task_id="append_day",
            table_uri="/lake/events",
            source="/landing/events/{{ ds }}.parquet",  # the day's rows, dt column included
            app_id="events-loader",
            app_version="{{ logical_date.strftime('%Y%m%d') }}",
            conn_id="spark_local",
        )
        restate_day = DeltaWriteOperator(
            task_id="restate_day",
            table_uri="/lake/events",
            source="/landing/events/{{ ds }}.parquet",
            mode="overwrite",
            replace_where="dt = '{{ ds }}'",
            conn_id="spark_local",
        )
    """

    operation = "write"


class DeltaDeleteOperator(DeltaBaseOperator):
    """Delete the rows matching a predicate (``DELETE FROM t WHERE ...``).

    A predicate on partition columns only removes whole files from the log without reading data;
    otherwise only the files that may hold matching rows (partition values, min/max stats) are
    read, and only those that do are rewritten. Nothing matching: no commit. The XCom carries
    Delta's metrics (``numDeletedRows``, ``numRemovedFiles``, ``numAddedFiles``, ``numCopiedRows``, ...).

    :param table_uri: the table (templated).
    :param predicate: a Spark SQL condition (templated), e.g. ``"dt = '{{ ds }}'"``; ``None`` deletes
        every row. A bad predicate fails the task once, without retry, naming the wrong column or token.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        drop_day = DeltaDeleteOperator(
            task_id="drop_day", table_uri="/lake/events", predicate="dt = '{{ ds }}'", conn_id="spark_local"
        )
    """

    operation = "delete"


class DeltaUpdateOperator(DeltaBaseOperator):
    """Set columns to Spark SQL expressions on the rows matching a predicate (``UPDATE t SET ... WHERE ...``).

    Values are cast to the column types as Spark's UPDATE does; NOT NULL columns stay enforced;
    updating a partition column moves the rows to their partition. Nothing matching: no commit.

    :param table_uri: the table (templated).
    :param updates: ``{column: expression}``, e.g. ``{"status": "'late'", "amount": "amount * 100"}``
        (templated).
    :param predicate: a Spark SQL condition (templated); ``None`` updates every row.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        flag_late = DeltaUpdateOperator(
            task_id="flag_late",
            table_uri="/lake/events",
            updates={"status": "'late'"},
            predicate="dt = '{{ ds }}' AND amount IS NULL",
            conn_id="spark_local",
        )
    """

    operation = "update"


class DeltaMergeOperator(DeltaBaseOperator):
    """Merge rows from a source into the table (``MERGE INTO t USING source ON ... WHEN ...``), or upsert
    them by key columns.

    The source is a path read as ``source_format`` (parquet, csv, json, or a Delta table, optionally
    at ``source_options={"versionAsOf": "3"}``), optionally shaped by ``source_query`` (Spark SQL over
    the temporary view ``source``). Only the target files that can hold a matched row are read
    (partition values and min/max stats, narrowed by the source's own key values), and only those
    where a row changes are rewritten. ON, the clauses and the key columns are checked against the
    table's (and a local source's) schema before anything is submitted. A target row matched by several source rows that a clause
    would change fails the task once, without retry, and writes nothing. The XCom carries Delta's
    MERGE metrics (``numTargetRowsInserted``, ``numTargetRowsUpdated``, ``numTargetRowsDeleted``,
    ``numTargetRowsCopied``, ``numTargetFilesRemoved``, ...).

    :param table_uri: the table (templated).
    :param source: the source's location (templated); ``source_format`` its format.
    :param source_query: Spark SQL over ``source`` (templated), e.g. ``"SELECT * FROM source WHERE op != 'noop'"``.
    :param predicate: the merge condition over ``target`` and ``source`` (templated), with ``clauses``:
        a list of ``{"when": "matched" | "not_matched" | "not_matched_by_source", "then": "update" |
        "update_all" | "delete" | "insert" | "insert_all", "condition": "...", "set": {...}, "values": {...}}``
        in the order Delta evaluates them (only the last of a kind may omit its condition).
    :param key_columns: instead of ``predicate``/``clauses``: upsert by these columns (update all matched,
        insert all new); ``dedupe_by`` keeps the source row with the greatest value of that column per key,
        otherwise duplicate keys fail the task.
    :param source_alias: / ``target_alias``: the aliases used in conditions (``source`` / ``target``).
    :param merge_schema: add the source's columns the table lacks (nullable) in the same commit.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        upsert_day = DeltaMergeOperator(
            task_id="upsert_day",
            table_uri="/lake/silver/customers",
            source="/lake/bronze/customers/dt={{ ds }}",
            key_columns=["customer_id"],
            dedupe_by="updated_at",
            conn_id="spark_local",
        )
        apply_changes = DeltaMergeOperator(
            task_id="apply_changes",
            table_uri="/lake/silver/customers",
            source="/lake/cdc/customers/dt={{ ds }}",
            predicate="target.customer_id = source.customer_id",
            clauses=[
                {"when": "matched", "then": "delete", "condition": "source.op = 'D'"},
                {"when": "matched", "then": "update_all"},
                {"when": "not_matched", "then": "insert_all", "condition": "source.op != 'D'"},
            ],
            conn_id="spark_local",
        )
    """

    operation = "merge"


class DeltaVacuumOperator(DeltaBaseOperator):
    """Delete the files that no version of the table inside the retention needs (``VACUUM``).

    Never deletes a live file, a file an unexpired tombstone names (every version inside the
    retention stays readable), a deletion vector of either, anything younger than the retention (a
    concurrent writer's uncommitted files), anything hidden (``_delta_log``, ``_``/``.`` names) or
    outside the table. Runs in the worker by default (``execution="local"``: listing, planning and
    deleting need no Spark); the XCom holds ``numFilesToDelete``, ``sizeOfDataToDelete``,
    ``numDeletedFiles``, ``numVacuumedDirectories``.

    :param table_uri: the table (templated).
    :param retention_hours: keep what the versions of the last N hours need (templated; default the
        table's ``delta.deletedFileRetentionDuration``, 7 days); shorter than that is refused unless
        ``enforce_retention_duration=False``.
    :param dry_run: report the files (``files``) and their size, delete nothing.
    :param mode: ``"full"`` (list the table's files; also finds files no commit named) or ``"lite"``
        (the removes of the log: cheaper on huge tables; refused when log cleanup took commits it needs).
    :param keep_versions: versions whose files are kept whatever their age (deltalake's
        ``keep_versions``): time travel to them keeps working (templated).
    :param inventory: the path of a Delta table or parquet files listing the table's files, with
        delta-spark's inventory columns ``path`` (full location), ``length``, ``isDir``,
        ``modificationTime`` (ms), e.g. an S3 Inventory report reshaped to them: read instead of listing the table
        (delta-spark's ``VACUUM ... USING INVENTORY``; templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri="/lake/silver/customers", retention_hours=168)
    """

    operation = "vacuum"
    default_execution = "local"


class DeltaOptimizeOperator(DeltaBaseOperator):
    """Compact the table's small files into files of about the target size, or Z-order them
    (``OPTIMIZE``); no row changes (``dataChange=false``), so streaming readers skip the commit.

    On a clustered table (``cluster_by``) it clusters instead, incrementally: only the files not yet
    clustered for the current clustering columns are rewritten, ordered by them (plus small earlier
    cubes, size-tiered), so a run after a small append rewrites about that append; ``z_order_by`` is
    refused there. The XCom then also holds ``clustering_columns`` and
    ``num_files_already_clustered``.

    A concurrent append is unaffected; a concurrent DELETE/UPDATE/MERGE of a file it rewrote fails it
    retryably (deleted rows never come back). The XCom holds ``numAddedFiles``, ``numRemovedFiles``,
    bytes, file-size percentiles, ``numBatches``, ``partitionsOptimized``.

    :param table_uri: the table (templated).
    :param partition_filter: only the partitions matching this condition on partition columns
        (templated), e.g. ``"dt = '{{ ds }}'"``.
    :param target_size: bytes per file written (default ``delta.targetFileSize`` or 128 MiB).
    :param min_file_size: files smaller than this are compacted (default: the target size).
    :param z_order_by: data columns to cluster the rows by (min/max skipping then works on each).
    :param purge_deletion_vectors: rewrite only the files that carry deletion vectors, without their
        deleted rows (Delta's ``REORG TABLE ... APPLY (PURGE)``). Without it, files whose vectors
        remove more than 5% of their rows are rewritten along with the small files.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments (``execution="local"``
        compacts in the worker's threads).

    Example::

        compact = DeltaOptimizeOperator(
            task_id="compact_day",
            table_uri="/lake/silver/events",
            partition_filter="dt = '{{ ds }}'",
            z_order_by=["customer_id"],
            conn_id="spark_local",
        )
    """

    operation = "optimize"


class DeltaSetPropertiesOperator(DeltaBaseOperator):
    """Set table properties in one commit (``SET TBLPROPERTIES``), upgrading the table's protocol to
    the features they enable: e.g. ``delta.enableDeletionVectors=true`` on an existing table, after
    which DELETE, UPDATE and MERGE mark rows instead of rewriting files. Unknown ``delta.*`` keys,
    bad values and features this engine cannot write are refused before anything is committed. Runs
    in the worker by default (the log only).

    :param table_uri: the table (templated).
    :param properties: ``{name: value}`` to set (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        enable_dvs = DeltaSetPropertiesOperator(
            task_id="enable_deletion_vectors",
            table_uri="/lake/silver/events",
            properties={"delta.enableDeletionVectors": "true"},
            conn_id="spark_local",
        )
    """

    operation = "set_properties"
    default_execution = "local"


class DeltaAddConstraintOperator(DeltaBaseOperator):
    """Add a CHECK constraint (``ALTER TABLE ... ADD CONSTRAINT``) after checking every row the table
    holds: a row where the condition is not TRUE (FALSE or NULL, as in Delta) fails the task, naming
    how many and one of them, and nothing is committed. From then on every write (append, overwrite,
    UPDATE, MERGE) checks it and fails with the constraint's name and a row when one breaks it. Runs
    in the worker by default (it reads the condition's columns, file by file).

    :param table_uri: the table (templated).
    :param name: the constraint's name (templated).
    :param expression: the Spark SQL condition (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        positive = DeltaAddConstraintOperator(
            task_id="amount_is_positive", table_uri="/lake/silver/orders", name="positive_amount", expression="amount > 0"
        )
    """

    operation = "add_constraint"
    default_execution = "local"


class DeltaDropConstraintOperator(DeltaBaseOperator):
    """Drop a CHECK constraint (``ALTER TABLE ... DROP CONSTRAINT [IF EXISTS]``), metadata only.

    :param table_uri: the table (templated).
    :param name: the constraint's name (templated).
    :param if_exists: no error when the table has no such constraint.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.
    """

    operation = "drop_constraint"
    default_execution = "local"


class DeltaRenameColumnOperator(DeltaBaseOperator):
    """Rename a column of a table with column mapping (``ALTER TABLE ... RENAME COLUMN``): metadata
    only, in the worker; the files keep the column's physical name. A table without column mapping
    gets it first with ``DeltaSetPropertiesOperator(properties={"delta.columnMapping.mode": "name"})``.

    :param table_uri: the table (templated).
    :param column: the column's current name (templated).
    :param new_name: its new name (templated).
    """

    operation = "rename_column"
    default_execution = "local"


class DeltaDropColumnOperator(DeltaBaseOperator):
    """Drop a column of a table with column mapping (``ALTER TABLE ... DROP COLUMN``): metadata only,
    in the worker; the data stays in the files until they are rewritten and vacuumed.

    :param table_uri: the table (templated).
    :param column: the column to drop (templated).
    """

    operation = "drop_column"
    default_execution = "local"


class DeltaChangeColumnTypeOperator(DeltaBaseOperator):
    """Widen a column's type (``ALTER TABLE ... ALTER COLUMN ... TYPE``) as the Delta protocol
    allows: metadata only, in the worker; enables type widening (``delta.typeChanges``, the
    ``typeWidening`` feature), old files are read in the new type.

    :param table_uri: the table (templated).
    :param column: the column to widen, or a struct field by its dotted path ``s.x`` (templated).
    :param new_type: its wider type, e.g. ``BIGINT`` (templated; checked at parse time).
    """

    operation = "change_column_type"
    default_execution = "local"


class DeltaClusterByOperator(DeltaBaseOperator):
    """Set a table's clustering columns (``ALTER TABLE ... CLUSTER BY``), or remove them with
    ``columns=[]`` (``CLUSTER BY NONE``): metadata only, in the worker. An unpartitioned table that
    is not clustered becomes clustered; the next :class:`DeltaOptimizeOperator` clusters the files
    not yet clustered for the new columns.

    :param table_uri: the table (templated).
    :param columns: the clustering columns, e.g. ``["customer_id", "ts"]`` (templated).

    Example::

        recluster = DeltaClusterByOperator(task_id="cluster_events", table_uri="/lake/events", columns=["id"])
    """

    operation = "cluster_by"
    default_execution = "local"


class DeltaRestoreOperator(DeltaBaseOperator):
    """Make the table's live files those of an older version (``RESTORE``), in one commit.

    Refuses before committing when VACUUM deleted a file that version needs. Runs in the worker by
    default (``execution="local"``: the log only, no data is read). The XCom holds
    ``numRestoredFiles``, ``numRemovedFiles``, ``numOfFilesAfterRestore``, ``tableSizeAfterRestore``, ...

    :param table_uri: the table (templated).
    :param version: the version to restore (templated), or ``timestamp``: the version as of then.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        undo = DeltaRestoreOperator(task_id="undo_bad_day", table_uri="/lake/silver/customers", version=41)
    """

    operation = "restore"
    default_execution = "local"


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


class DeltaDescribeOperator(DeltaBaseOperator):
    """The table's current state (``DESCRIBE DETAIL``), read from its log in the worker: no Spark
    (``execution="local"`` is its default, on every connection type), no commit, nothing written.
    The XCom's ``detail`` holds ``version``, ``num_files``, ``size_in_bytes``, ``partition_columns``,
    ``schema`` (Delta's schema JSON), ``protocol``, ``configuration``, ``id``, ``name``,
    ``description``, ``created_time`` and ``checksum`` (whether the version's checksum file agrees
    with the replayed state; None without one).

    :param table_uri: the table (templated).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments (no ``app_id``,
        ``app_version`` or ``user_metadata``: nothing is committed).

    Example::

        describe = DeltaDescribeOperator(task_id="describe_silver", table_uri="/lake/silver/customers")
    """

    operation = "describe"
    default_execution = "local"


class DeltaRegisterTableOperator(DeltaBaseOperator):
    """Give an existing Delta table a name in a catalog (``catalog_table`` in ``catalog_conn_id``'s
    catalog): the entry is created, or brought up to the table's latest version; nothing is committed.
    The table's log is read in the worker (a Hive metastore's entry is then written from a local Spark
    session), or on the connection's Spark when the worker cannot read it, or for a Hive metastore when
    there is a Spark connection ``conn_id`` (its app syncs in its own session); the XCom is the table's
    ``detail`` (as :class:`DeltaDescribeOperator`'s) and ``catalog`` (``{"catalog", "table", "action"}``).
    A name that already holds another table (another location, not Delta) is refused, unchanged.

    :param table_uri: the table (templated).
    :param catalog_table: ``"database.table"`` (templated).
    :param catalog_conn_id: a ``delta_glue`` or ``delta_hive_metastore`` connection.
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments.

    Example::

        register = DeltaRegisterTableOperator(
            task_id="register_orders",
            table_uri="s3://lake/silver/orders",
            catalog_table="silver.orders",
            catalog_conn_id="glue_default",
        )
    """

    operation = "describe"
    syncs_catalog = True

    def __init__(self, *, catalog_table: str, catalog_conn_id: str, **kwargs: Any) -> None:
        super().__init__(catalog_table=catalog_table, catalog_conn_id=catalog_conn_id, **kwargs)


#: the newest commits a DeltaHistoryOperator puts in its XCom unless ``limit=`` says otherwise: the
#: XCom lives in Airflow's metadata database, and a table's log may hold thousands of commits
HISTORY_LIMIT = 100


class DeltaHistoryOperator(DeltaBaseOperator):
    """The table's commits, newest first (``DESCRIBE HISTORY``), read from its log in the worker: no
    Spark (``execution="local"`` is its default, on every connection type), no commit, nothing
    written. The XCom's ``history`` is a list of each commit's ``commitInfo`` (``operation``,
    ``operationParameters``, ``operationMetrics``, ``userMetadata``, ``txnId``, ...) plus its
    ``version`` and ``timestamp`` (the one time travel uses, in ms); ``version`` is the newest.

    :param table_uri: the table (templated).
    :param limit: the newest N commits (templated; default 100, ``None`` for every commit the log
        still holds).
    :param kwargs: :class:`DeltaBaseOperator` and BaseOperator arguments (no ``app_id``,
        ``app_version`` or ``user_metadata``: nothing is committed).

    Example::

        history = DeltaHistoryOperator(task_id="silver_history", table_uri="/lake/silver/customers", limit=10)
    """

    operation = "history"
    default_execution = "local"

    def __init__(self, *, limit: int | str | None = HISTORY_LIMIT, **kwargs: Any) -> None:
        super().__init__(limit=limit, **kwargs)
