"""The spark-submit transport: one Delta app run as one Spark application.

Data flow (one :meth:`SubmitTransport.run`)::

    connection (type "spark"/"delta_spark": local[*], yarn, spark://, k8s://) + hook config
      -> spark-submit settings (master, deploy mode, binary, conf)          submit_settings()
      -> the bundled apps: airflow_delta_provider_apps-<hash>.zip (--py-files), launcher  build_app_bundle()
      -> application args: <operation> --table-uri U --result-uri R --spec-json J
      -> SparkSubmitHook.submit()  (its own Popen, log streaming, on_kill, yarn/k8s/standalone handling)
      -> result: the --result-uri file first, else the last result line captured from stdout
      -> dict, or DeltaRetryableError (AirflowException) / DeltaPermanentError (AirflowFailException)

Rules:

* The pyspark-bundled ``bin/spark-submit`` is found with ``importlib.util.find_spec`` (no import).
  Order: the hook's ``spark_binary`` argument, the connection's ``spark-binary`` extra (looked up on
  PATH, as the apache-spark provider does), ``$SPARK_HOME/bin/spark-submit``, the installed
  pyspark's ``bin/spark-submit``, ``spark-submit``.
* The job spec always travels as ONE ``--spec-json`` argument (keys are the CLI's argparse ``dest``
  names, ``None`` values dropped): no quoting issues on any cluster manager.
* Result channel: ``--result-uri``. Client deploy mode: a local temporary file (the driver runs in
  the spark-submit process on this machine), unless a result folder is configured. Cluster deploy
  mode: a file under ``result_dir`` (hook argument or connection extra ``delta_result_dir``) on storage
  both sides reach (hdfs://, s3://, a shared mount); without one, cluster mode is refused unless the
  run has a SetTransaction identity (its result is then read back from the log). Fallback: the last
  ``{"status": ...}`` JSON line (or the last ``DELTA_ERROR`` line) captured from spark-submit's output.
* Cluster deploy mode ships the zip and the launcher as local files: YARN uploads them to its
  staging dir; on Kubernetes set ``spark.kubernetes.file.upload.path`` in ``spark_conf`` (or the
  image must already contain the package). A standalone master refuses Python applications in cluster
  mode: there the app is submitted as a JVM application (an empty jar) whose main class is Spark's
  PythonRunner, given the launcher and the zip; the driver's node must see them at the same path.
* Detached runs (:meth:`SubmitTransport.start`, deferrable operators): cluster deploy mode with
  spark-submit told not to wait for the driver; :mod:`.driver` follows it, :meth:`SubmitTransport.finish`
  reads its result.
* Local masters get ``spark.pyspark.python``/``spark.pyspark.driver.python`` = this interpreter (unless
  set in ``spark_conf`` or the environment), so the app runs with the engine's dependencies.
* SparkSubmitHook's public surface (``submit``, ``on_kill``, ``_build_spark_submit_command`` as its
  subclasses override it) is used where it has one; the private members this module still reads
  (``_submit_sp``, ``_should_track_driver_status``, ``_start_driver_status_tracking``, ``_driver_status``,
  ``_driver_id``, ``_env``, ``_process_spark_submit_log``) are those of the provider versions
  pyproject.toml admits, and ``tests/provider/test_hook.py`` runs them against a real spark-submit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import ALLOWED_SPARK_BINARIES, SparkSubmitHook

from airflow_delta_provider.exceptions import (
    AirflowException,
    DeltaConfigurationError,
    DeltaRetryableError,
)
from airflow_delta_provider.hooks.bundle import build_app_bundle
from airflow_delta_provider.hooks.connections import (
    DELTA_SPARK_CONN_TYPE,
    RESULT_DIR_EXTRA,
    as_spark_connection,
    connection_extra,
    is_connect,
    master_from_connection,
)
from airflow_delta_provider.hooks.driver import (
    SubmittedDriver,
    discard_secret_file,
    driver_state,
    is_active,
    is_succeeded,
    is_waiting,
    kill_driver,
)
from airflow_delta_provider.hooks.outcome import AppOutput, progress_text, resolve_outcome
from airflow_delta_provider.hooks.transport import RunState, Transport
from airflow_delta_provider_apps.operations import OPERATIONS, TxnIdentity

__all__ = [
    "SparkSubmitOptions",
    "SubmitSettings",
    "SubmitTransport",
    "check_master_reachable",
    "check_master_usable",
    "find_spark_submit",
]

# The spec key naming the object-store settings file shipped with --files in cluster deploy mode.
STORAGE_ENV_FILE_KEY = "storage_env_file"


@dataclass(frozen=True)
class SparkSubmitOptions:
    """spark-submit settings passed through to :class:`SparkSubmitHook` (all optional).

    One small object instead of thirty operator parameters; operators take it as ``submit_options``
    (a dict with the same keys works too). Connection extras (``deploy-mode``, ``queue``, ``namespace``,
    ``principal``, ``keytab``) still apply; a value set here wins, as in SparkSubmitHook.

    :param deploy_mode: ``client`` or ``cluster``.
    :param driver_memory: e.g. ``"2g"``.
    :param executor_memory: e.g. ``"4g"``.
    :param executor_cores: cores per executor.
    :param num_executors: number of executors (YARN, Kubernetes).
    :param total_executor_cores: total cores (standalone).
    :param yarn_queue: YARN queue.
    :param proxy_user: user to impersonate.
    :param principal: Kerberos principal.
    :param keytab: Kerberos keytab path.
    :param properties_file: spark-defaults style properties file.
    :param jars: comma-separated jars.
    :param packages: comma-separated Maven coordinates.
    :param files: comma-separated files for the executors' working directory.
    :param archives: comma-separated archives.
    :param extra_py_files: more ``--py-files`` after the bundled apps zip.
    :param env_vars: environment variables for the driver (client mode: the spark-submit process).
    :param name: Spark application name (default ``delta-<operation>``).
    :param verbose: pass ``--verbose`` to spark-submit.
    :param status_poll_interval: seconds between driver status polls (standalone cluster mode).
    """

    deploy_mode: str | None = None
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    num_executors: int | None = None
    total_executor_cores: int | None = None
    yarn_queue: str | None = None
    proxy_user: str | None = None
    principal: str | None = None
    keytab: str | None = None
    properties_file: str | None = None
    jars: str | None = None
    packages: str | None = None
    files: str | None = None
    archives: str | None = None
    extra_py_files: tuple[str, ...] = ()
    env_vars: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    verbose: bool = False
    status_poll_interval: int = 1

    @classmethod
    def coerce(cls, value: SparkSubmitOptions | dict | None) -> SparkSubmitOptions:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise DeltaConfigurationError(
                    f"Unknown spark-submit option(s) {sorted(unknown)}",
                    f"SparkSubmitOptions knows {sorted(cls.__dataclass_fields__)}",
                    "fix the key, or pass Spark properties through spark_conf",
                )
            value = dict(value)
            if "extra_py_files" in value and isinstance(value["extra_py_files"], str):
                value["extra_py_files"] = tuple(p for p in value["extra_py_files"].split(",") if p)
            return cls(**value)
        raise TypeError(f"submit_options must be SparkSubmitOptions or dict, not {type(value).__name__}")

    def hook_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for SparkSubmitHook (everything but what DeltaHook sets itself)."""
        d = asdict(self)
        for own in ("extra_py_files", "name", "env_vars"):
            d.pop(own)
        d["env_vars"] = dict(self.env_vars) or None
        return {k: v for k, v in d.items() if v is not None}


_PYSPARK_CHECKED: dict[str, str | None] = {}


def check_pyspark_install(binary: str) -> None:
    """When spark-submit comes from the installed pyspark, its Python code and jars must agree: a
    mixed pyspark / pyspark-client install fails here, at the first task, with the one-line fix,
    not deep in a Java trace at spark-submit time. Checked once per process."""
    if os.environ.get("SPARK_HOME") or binary == "spark-submit":
        return
    if binary not in _PYSPARK_CHECKED:
        try:
            from airflow_delta_provider_apps.protocol import install_problem

            _PYSPARK_CHECKED[binary] = install_problem()
        except Exception:  # pyspark not importable here: spark-submit reports it
            _PYSPARK_CHECKED[binary] = None
    problem = _PYSPARK_CHECKED[binary]
    if problem:
        problem_text, _, fix = problem.partition(" Fix: ")
        raise DeltaConfigurationError(problem_text, None, fix or None)


def find_spark_submit() -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the installed pyspark's, else ``spark-submit`` (PATH)."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        cand = os.path.join(spark_home, "bin", "spark-submit")
        if os.access(cand, os.X_OK):
            return cand
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.submodule_search_locations:
        cand = os.path.join(list(spec.submodule_search_locations)[0], "bin", "spark-submit")
        if os.access(cand, os.X_OK):
            return cand
    return "spark-submit"


_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\s*\d+)?\])?|local-cluster\[.+\]|yarn|spark://.+|k8s://.+)$")


def check_master_usable(master: str | None, environ=None) -> None:
    """What spark-submit would refuse about the master only after a JVM start, and then as a command
    line and Java frames marked retryable, refused here in one line, permanent: an unknown master
    URL, and YARN without ``HADOOP_CONF_DIR`` or ``YARN_CONF_DIR`` in the worker's environment."""
    environ = os.environ if environ is None else environ
    if not master:
        return
    if not _MASTER.match(master.strip()):
        raise DeltaConfigurationError(
            f"Unknown Spark master '{master}'",
            "spark-submit takes local[N], yarn, spark://host:port or k8s://https://host:port "
            "(sc://host:port is Spark Connect)",
            "fix the connection's host (the master URL)",
        )
    if master.strip() == "yarn" and not (environ.get("HADOOP_CONF_DIR") or environ.get("YARN_CONF_DIR")):
        raise DeltaConfigurationError(
            "A yarn master needs the cluster's Hadoop configuration on this worker",
            "neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set in the worker's environment",
            "set HADOOP_CONF_DIR (the folder holding core-site.xml and yarn-site.xml) for the Airflow worker",
        )


def check_master_reachable(master: str | None, timeout: float = 5.0) -> None:
    """For a standalone master (``spark://h1:7077[,h2:7077]``), fail in seconds when none of its
    addresses accepts a TCP connection: spark-submit would retry for over a minute before it gives up.
    Retryable (the master may be restarting). Other masters (local, yarn, k8s) are not probed."""
    if not master or not master.startswith("spark://"):
        return
    import socket

    addresses = [a.strip() for a in master[len("spark://") :].split(",") if a.strip()]
    problems = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            return  # let spark-submit judge a master URL it may understand better
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return
        except OSError as e:
            problems.append(f"{address}: {e.strerror or e}")
    raise DeltaRetryableError(
        "SparkInfrastructureError",
        f"Spark failed: cannot reach the Spark master '{master}'. Cause: {'; '.join(problems)}. "
        "Fix: check that the master is running and the connection's host and port; the task is retried.",
        retryable=True,
    )


_TRACE_LINE = re.compile(
    r"^\s+at [\w$.<>]+\(|^\s*\.\.\. \d+ (more|common frames omitted)|^Caused by: |"
    r"^\s+File \".*\", line \d+|^Traceback \(most recent call last\)"
)


# a Spark log line ("yy/MM/dd HH:mm:ss LEVEL ...") or one of the app's own lines: a hidden trace ends
_LOG_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} |^DELTA_ERROR |^\{")
# where an exception's text starts: a trace follows until the next log line
_EXCEPTION_START = re.compile(
    r"^[\w.$]+(Exception|Error)\b.*:|Traceback \(most recent call last\)|<<DELTA_EXECUTOR_ERROR>>"
)
# an exception embedded in a log line ("Lost task ...: org.apache...PythonException: ...")
_EMBEDDED_EXCEPTION = re.compile(r":\s+(org\.apache\.spark\.api\.python\.PythonException|[\w.$]+Exception):")


# Spark's start-up chatter and WARN lines: out of the task log unless verbose
_SPARK_NOISE = re.compile(
    r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} WARN |^Using Spark's default log4j profile|"
    r"^Setting default log level|^To adjust logging level|^WARNING: Using incubator modules"
)


# YARN's "tracking URL: http://rm:8088/proxy/application_..." and the driver's "SparkUI ... started at
# http://host:4040" (client mode; local masters run without a UI).
_APPLICATION_URL = re.compile(r"(?:tracking URL:|SparkUI\b.*\bstarted at)\s*(https?://\S+)")


def driver_jvm_env() -> dict[str, str]:
    """``SPARK_SUBMIT_OPTS`` with ``-XX:+ExitOnOutOfMemoryError`` (unless it already says what to do on
    an OutOfMemoryError): in client mode the driver JVM is spark-submit's, and a JVM that ran out of
    memory in one thread lives on while the app's Python waits on it for ever; exiting lets the
    app's watchdog fail the task at once. The user's ``spark.driver.extraJavaOptions`` is left as is."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "OutOfMemoryError" in opts:
        return {}
    return {"SPARK_SUBMIT_OPTS": f"{opts} -XX:+ExitOnOutOfMemoryError".strip()}


class CapturingSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that also feeds every output line to an :class:`AppOutput`.

    Stack-trace lines (Java frames, ``Caused by``, Python tracebacks of executors) are kept out of
    the task log unless ``show_traces`` (the ``verbose`` submit option): the app's one-line error is
    what a person needs; the count of hidden lines is logged instead.
    """

    def __init__(
        self,
        *args,
        show_traces: bool = False,
        secret_env: dict[str, str] | None = None,
        detached: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.secret_env = dict(secret_env or {})
        #: spark-submit returns once the cluster has the driver (a deferred run): nothing here waits for it
        self.detached = detached
        self.app_output = AppOutput()
        #: the Spark application's web page, when spark-submit prints one (YARN's tracking URL, the
        #: driver's Spark UI in client mode): the operators' "Spark application" link
        self.application_url: str | None = None
        self.show_traces = show_traces
        self.hidden_trace_lines = 0
        self.hidden_noise_lines = 0

    def _start_driver_status_tracking(self) -> None:
        if self.detached:  # the trigger follows the driver; provider 5.x would wait for it inside submit()
            self._driver_status = "FINISHED"  # what submit() expects of a driver it no longer waits for
            return
        super()._start_driver_status_tracking()

    @classmethod
    def get_connection(cls, conn_id: str):
        return as_spark_connection(super().get_connection(conn_id))

    def _build_spark_submit_command(self, application: str) -> list[str]:
        cmd = super()._build_spark_submit_command(application)
        # The spark-submit process's environment (the driver's, in client mode), never a --conf:
        # SparkSubmitHook turns its env_vars into --conf arguments on YARN and Kubernetes.
        self._env = {**(self._env or {}), **self.secret_env, **driver_jvm_env()}
        return cmd

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def tap():
            in_trace = False  # inside an exception's text (Python traceback, Java frames, the app's marker)
            for raw in itr:
                self.app_output.feed(raw)
                if self.application_url is None:
                    m = _APPLICATION_URL.search(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))
                    if m:
                        self.application_url = m.group(1)
                if self.show_traces:
                    yield raw
                    continue
                line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                if line.startswith("DELTA_PROGRESS "):
                    try:
                        text = progress_text(json.loads(line[len("DELTA_PROGRESS ") :])) + "\n"
                    except ValueError:
                        text = line
                    yield text.encode() if isinstance(raw, bytes) else text
                    continue
                if _SPARK_NOISE.search(line):
                    self.hidden_noise_lines += 1
                    in_trace = False
                    continue
                if _LOG_LINE.search(line):
                    in_trace = False
                elif in_trace or _TRACE_LINE.search(line) or _EXCEPTION_START.search(line):
                    in_trace = True
                    self.hidden_trace_lines += 1
                    continue
                m = _EMBEDDED_EXCEPTION.search(line)
                if m:  # keep the log line's own words, hide the exception text it carries
                    in_trace = True
                    self.hidden_trace_lines += 1
                    short = line[: m.start()] + ": (exception hidden)\n"
                    yield short.encode() if isinstance(raw, bytes) else short
                    continue
                yield raw

        super()._process_spark_submit_log(tap())
        if self.detached and self._is_kubernetes and self._spark_exit_code is None:
            # spark-submit left before the driver pod ended, so it printed no exit code for submit()'s check
            self._spark_exit_code = 0
        hidden = self.hidden_trace_lines + self.hidden_noise_lines
        if hidden:
            self.log.info(
                "%d lines of Spark stack traces and WARN messages not shown (submit_options={'verbose': True} "
                "shows them)",
                hidden,
            )


@dataclass(frozen=True)
class SubmitSettings:
    """Resolved per-connection settings (what the connection + hook arguments mean)."""

    master: str
    deploy_mode: str
    spark_binary: str
    result_dir: str | None

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")

    @property
    def is_cluster_mode(self) -> bool:
        return self.deploy_mode == "cluster"

    @property
    def cluster_manager(self) -> str:
        """``local``, ``standalone``, ``yarn`` or ``k8s``."""
        if self.master.startswith("spark://"):
            return "standalone"
        if self.master.startswith("k8s://"):
            return "k8s"
        return "yarn" if self.master == "yarn" else "local"

    def deferral_blocker(self) -> str | None:
        """Why a run over these settings cannot free its worker slot while Spark works, or None."""
        if self.is_local:
            return f"a '{self.master}' master runs Spark inside this task's own spark-submit process"
        if not self.is_cluster_mode:
            return (
                "in client deploy mode the driver is this task's spark-submit process, so the task cannot "
                "leave the worker; set the connection's deploy-mode (or submit_options deploy_mode) to "
                "'cluster' to defer"
            )
        return None


# spark-submit waits for the driver to end unless told otherwise; a deferred run is told otherwise
_WAIT_APP_COMPLETION = {
    "standalone": "spark.standalone.submit.waitAppCompletion",
    "yarn": "spark.yarn.submit.waitAppCompletion",
    "k8s": "spark.kubernetes.submission.waitAppCompletion",
}
# The main class a standalone cluster-mode driver runs: the master refuses Python applications in
# cluster mode, not JVM ones, and PythonRunner is what spark-submit runs for Python in client mode.
_PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
# what Arrow's memory (through Netty) needs of a Java 17+ JVM, among Spark's default module options
_ARROW_JAVA_OPTIONS = (
    "-Dio.netty.tryReflectionSetAccessible=true --add-opens=java.base/java.nio=ALL-UNNAMED "
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED "
    "--add-opens=java.base/java.util=ALL-UNNAMED"
)


class SubmitTransport(Transport):
    """How a task reaches Spark with spark-submit (see the module docstring): one application per
    :meth:`run`, its result read back from the result file or its output; in cluster deploy mode a
    run can be started detached (:meth:`start`), its driver followed on the triggerer (:meth:`poll`)."""

    name = "spark-submit"
    conn_types = ("spark", DELTA_SPARK_CONN_TYPE)
    #: spark_binary: spark-submit to run (overrides the connection's ``spark-binary``); result_dir:
    #: the result files' folder (default: the connection extra ``delta_result_dir``); submit_options:
    #: :class:`SparkSubmitOptions` or a dict of its fields; bundle_dir: the apps zip's cache folder
    options = ("spark_binary", "result_dir", "submit_options", "bundle_dir")

    def __init__(self, hook) -> None:  # the DeltaHook whose connection and settings it uses
        super().__init__(hook)
        self._submit_hook: CapturingSparkSubmitHook | None = None
        self._settings: SubmitSettings | None = None

    @classmethod
    def serves(cls, conn) -> bool:
        return getattr(conn, "conn_type", None) in cls.conn_types and not is_connect(conn)

    @classmethod
    def check_options(cls, options) -> None:
        SparkSubmitOptions.coerce(options.get("submit_options"))  # an unknown option is refused by name

    @classmethod
    def driver_env(cls, spark_conf, options) -> dict[str, str]:
        """``submit_options.env_vars`` (client mode) and ``spark_conf``'s ``spark.yarn.appMasterEnv.*``
        and ``spark.kubernetes.driverEnv.*`` (cluster mode)."""
        env = {str(k): str(v) for k, v in SparkSubmitOptions.coerce(options.get("submit_options")).env_vars.items()}
        for key, value in spark_conf.items():
            for prefix in ("spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv."):
                if str(key).startswith(prefix):
                    env[str(key)[len(prefix) :]] = str(value)
        return env

    @property
    def submit_options(self) -> SparkSubmitOptions:
        """The user's ``submit_options``, as :class:`SparkSubmitOptions`."""
        return SparkSubmitOptions.coerce(self.option("submit_options"))

    @property
    def run_label(self) -> str:
        return ""  # the task log's default transport

    def settings(self) -> SubmitSettings:
        return self.submit_settings()

    def deferral_blocker(self) -> str | None:
        return self.submit_settings().deferral_blocker()

    def recover(self, table_uri: str, identity: TxnIdentity) -> dict | None:
        """When an earlier try of this task instance still runs its Spark application (its driver
        outlived the worker that started it), wait for it instead of submitting a second one; the
        result of its commit, or None (it ended without committing: submit as usual). See
        :mod:`airflow_delta_provider_apps.run_lease`."""
        if not identity.app_id:
            return None
        from airflow_delta_provider_apps.protocol import (
            landed_result,
            storage_for,
            table_location,
            wait_for_earlier_run,
        )

        app_id, app_version = str(identity.app_id), identity.app_version

        try:
            root = table_location(table_uri)
            result = wait_for_earlier_run(
                storage_for(root),
                root,
                app_id,
                app_version,
                lambda: landed_result(table_uri, app_id, app_version),
                log=self.log.warning,
            )
        except OSError as e:  # the lease is not readable from here: submit as before (exactly once holds)
            self.log.warning("Cannot read the run lease of %s: %s", table_uri, e)
            return None
        if result is not None:
            self.log.info("The earlier try committed version %s: reporting that commit", result.get("version"))
        return result

    def submit_settings(self) -> SubmitSettings:
        if self._settings is None:
            conn = self.hook.get_conn()
            extra = conn.extra_dejson
            deploy_mode = self.submit_options.deploy_mode or extra.get("deploy-mode") or "client"
            if deploy_mode not in ("client", "cluster"):
                raise DeltaConfigurationError(f"Unknown deploy mode '{deploy_mode}'", None, "use 'client' or 'cluster'")
            binary = self.option("spark_binary")
            if not binary:
                conn_binary = extra.get("spark-binary")
                if conn_binary and conn_binary not in ALLOWED_SPARK_BINARIES:
                    raise DeltaConfigurationError(
                        f"The connection's spark-binary extra '{conn_binary}' is not allowed",
                        f"the apache-spark provider accepts only {ALLOWED_SPARK_BINARIES}",
                        "fix the extra, or pass spark_binary= to the hook/operator",
                    )
                binary = conn_binary or find_spark_submit()
                if not conn_binary:
                    check_pyspark_install(binary)
                if not conn_binary and binary == "spark-submit" and shutil.which(binary) is None:
                    raise DeltaConfigurationError(
                        f"No spark-submit on this worker for connection '{self.hook.conn_id}'",
                        f"'{binary}' is not on PATH, SPARK_HOME is not set and pyspark is not installed here",
                        "install the provider with its pyspark extra (pip install 'airflow-delta-provider[pyspark]'), "
                        "set SPARK_HOME, or reach Spark over Spark Connect (a spark_connect connection)",
                    )
            self._settings = SubmitSettings(
                master=master_from_connection(conn),
                deploy_mode=deploy_mode,
                spark_binary=binary,
                result_dir=self.option("result_dir") or connection_extra(extra, RESULT_DIR_EXTRA) or None,
            )
        return self._settings

    def effective_conf(self, settings: SubmitSettings) -> dict[str, str]:
        conf = {str(k): str(v) for k, v in self.hook.spark_conf.items()}
        if settings.is_local:
            if not (conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")):
                conf["spark.pyspark.python"] = sys.executable
            if not (
                conf.get("spark.pyspark.driver.python")
                or os.environ.get("PYSPARK_DRIVER_PYTHON")
                or os.environ.get("PYSPARK_PYTHON")
            ):
                conf["spark.pyspark.driver.python"] = conf.get("spark.pyspark.python", sys.executable)
            conf.setdefault("spark.log.level", "WARN")
        return conf

    def new_result_uri(self, settings: SubmitSettings, *, recoverable: bool = False) -> str:
        """Where the app writes its result. In cluster deploy mode without a shared result location,
        a run with a SetTransaction identity (``recoverable``) gets a driver-local path nobody reads:
        its result is read back from its commit in the table's log."""
        name = f"delta-result-{uuid.uuid4().hex}.json"
        if settings.result_dir:
            return settings.result_dir.rstrip("/") + "/" + name
        if settings.is_cluster_mode and recoverable:
            return os.path.join(tempfile.gettempdir(), name)
        if settings.is_cluster_mode:
            raise DeltaConfigurationError(
                "No result location for cluster deploy mode",
                "the driver runs on the cluster, so its stdout does not come back to Airflow",
                f"set the connection extra '{RESULT_DIR_EXTRA}' (or result_dir=) to a folder both "
                "Airflow and the cluster reach, e.g. hdfs:///tmp/delta-results or s3://bucket/results",
            )
        folder = os.path.join(tempfile.gettempdir(), "airflow-delta-provider", "results")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, name)

    @staticmethod
    def application_args(operation: str, table_uri: str, spec: dict, result_uri: str) -> list[str]:
        return [
            operation,
            "--table-uri",
            table_uri,
            "--result-uri",
            result_uri,
            "--spec-json",
            json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str),
        ]

    @staticmethod
    def job_spec(table_uri: str, params: dict[str, Any]) -> dict[str, Any]:
        spec = {k: v for k, v in params.items() if v is not None}
        spec["table_uri"] = table_uri
        return spec

    def build_submit_hook(
        self,
        operation: str,
        table_uri: str,
        params: dict[str, Any] | None = None,
        *,
        result_uri: str | None = None,
        detached: bool = False,
    ) -> tuple[CapturingSparkSubmitHook, str, str]:
        """Build the SparkSubmitHook for one app run (``detached``: spark-submit returns once the
        cluster has the driver, cluster deploy mode only).

        :return: (submit hook, application file, result URI); the command is
            ``hook._build_spark_submit_command(application)``.
        """
        if operation not in OPERATIONS:
            raise DeltaConfigurationError(
                f"Unknown Delta operation '{operation}'", None, f"use one of {sorted(OPERATIONS)}"
            )
        if not table_uri or not str(table_uri).strip():
            raise DeltaConfigurationError("No table_uri given", None, "pass the table's path or URI")
        settings = self.submit_settings()
        self._settings = settings  # run() names the master from it, without reading the connection again
        bundle = build_app_bundle(self.option("bundle_dir"))
        recoverable = bool(OPERATIONS[operation].identity(params or {}).app_id)
        result_uri = result_uri or self.new_result_uri(settings, recoverable=recoverable)
        spec = self.job_spec(table_uri, dict(params or {}))
        opts = self.submit_options
        py_files = ",".join([bundle.zip_path, *opts.extra_py_files])
        kwargs = opts.hook_kwargs()  # deploy_mode only when set here; else the connection extra applies
        conf = self.effective_conf(settings)
        if detached:
            conf[_WAIT_APP_COMPLETION[settings.cluster_manager]] = "false"
        secret_env = self.hook.storage_env()
        if secret_env and settings.is_cluster_mode:
            # The driver runs elsewhere: the credentials travel as a file only this user can read,
            # shipped by spark-submit like the apps' zip, and loaded (then deleted) by the app.
            self._secret_file = self._write_secret_file(secret_env)
            kwargs["files"] = ",".join(filter(None, [kwargs.get("files"), self._secret_file]))
            spec[STORAGE_ENV_FILE_KEY] = os.path.basename(self._secret_file)
            secret_env = {}
        application, app_args = bundle.launcher_path, self.application_args(operation, table_uri, spec, result_uri)
        if settings.is_cluster_mode and settings.cluster_manager == "standalone":
            # a JVM application running Spark's PythonRunner on <launcher> <py-files> <args>; the zip also
            # stays in --py-files (spark.submit.pyFiles: the driver puts it on its Python workers' path)
            # and goes to --files (spark.files: the executors fetch it), as spark-submit does for Python
            kwargs["java_class"] = _PYTHON_RUNNER
            application, app_args = bundle.runner_jar_path, [bundle.launcher_path, py_files, *app_args]
            kwargs["files"] = ",".join(filter(None, [kwargs.get("files"), py_files]))
            # a worker starts this driver's JVM without the module options spark-submit gives a client-mode
            # driver on Java 17+: Arrow (mapInArrow, toArrow) needs these of them
            java_opts = conf.get("spark.driver.extraJavaOptions", "")
            if "tryReflectionSetAccessible" not in java_opts:
                conf["spark.driver.extraJavaOptions"] = f"{java_opts} {_ARROW_JAVA_OPTIONS}".strip()
        try:
            sub = CapturingSparkSubmitHook(
                conf=conf,
                conn_id=self.hook.conn_id,
                py_files=py_files,
                name=opts.name or f"delta-{operation}",
                application_args=app_args,
                spark_binary=settings.spark_binary,
                show_traces=bool(opts.verbose),
                detached=detached,
                secret_env=secret_env,
                **kwargs,
            )
        except (NameError, RuntimeError) as e:
            if settings.master.startswith("k8s"):
                raise DeltaConfigurationError(
                    f"Cannot submit to Kubernetes master '{settings.master}'",
                    f"the apache-spark provider needs the cncf-kubernetes provider for k8s:// ({e})",
                    "pip install apache-airflow-providers-cncf-kubernetes",
                ) from None
            raise
        return sub, application, result_uri

    _secret_file: str | None = None

    @staticmethod
    def _write_secret_file(env: dict[str, str]) -> str:
        fd, path = tempfile.mkstemp(prefix="delta-storage-", suffix=".json")  # mode 0600
        with os.fdopen(fd, "w") as f:
            json.dump(env, f)
        return path

    def _discard_secret_file(self) -> None:
        if self._secret_file:
            try:
                os.unlink(self._secret_file)
            except FileNotFoundError:
                pass
            self._secret_file = None

    # -- running ---------------------------------------------------------------------------

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        """Submit the app, wait for it, and return its result (``submit_seconds`` added)."""
        try:
            return self._run(operation, table_uri, params)
        finally:
            self._discard_secret_file()

    def _run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        sub, application, result_uri = self.build_submit_hook(operation, table_uri, params)
        self._submit_hook = sub
        check_master_usable(self._settings.master)
        check_master_reachable(self._settings.master)
        submit_error = None
        started = time.monotonic()
        try:
            sub.submit(application)
            if sub._should_track_driver_status:  # standalone cluster mode: submit returns early
                sub._start_driver_status_tracking()
                if sub._driver_status != "FINISHED":
                    submit_error = f"Spark driver {sub._driver_id} ended in state {sub._driver_status}"
        except AirflowException as e:
            submit_error = str(e)
        returncode = sub._submit_sp.returncode if sub._submit_sp is not None else None
        if submit_error and not returncode:  # e.g. k8s driver exit code, lost standalone driver
            returncode = 1
        file_result = self.read_result(result_uri)
        result = resolve_outcome(
            returncode=returncode,
            file_result=file_result,
            output=sub.app_output,
            submit_error=submit_error,
            master=self._settings.master,
        )
        return {**result, "submit_seconds": round(time.monotonic() - started, 3)}

    # -- detached runs (deferrable operators) -----------------------------------------------

    def start(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        """Submit the app in cluster deploy mode and return as soon as the cluster has its driver
        (spark-submit does not wait for it): the driver (:meth:`SubmittedDriver.to_dict`), what a
        deferred task's trigger follows. The result is read by :meth:`finish` once the driver has ended."""
        settings = self.submit_settings()
        blocker = settings.deferral_blocker()
        if blocker:
            raise DeltaConfigurationError("This run cannot be detached from the worker", blocker, None)
        status_base = self._status_base(settings)  # a configuration error fails before anything is submitted
        try:
            sub, application, result_uri = self.build_submit_hook(operation, table_uri, params, detached=True)
            self._submit_hook = sub
            check_master_usable(settings.master)
            check_master_reachable(settings.master)
            submitted_at = time.time()
            try:
                sub.submit(application)
            except AirflowException as e:
                returncode = sub._submit_sp.returncode if sub._submit_sp is not None else None
                resolve_outcome(
                    returncode=returncode or 1,
                    file_result=None,
                    output=sub.app_output,
                    submit_error=str(e),
                    master=settings.master,
                )
            driver_id = {
                "standalone": lambda: sub._driver_id,
                "yarn": lambda: sub._yarn_application_id,
                "k8s": lambda: (
                    sub._kubernetes_driver_pod and f"{self._k8s_namespace(sub)}/{sub._kubernetes_driver_pod}"
                ),
            }[settings.cluster_manager]()
            if not driver_id:
                raise DeltaRetryableError(
                    "SparkSubmitError",
                    f"spark-submit returned without naming the {settings.cluster_manager} driver it submitted. "
                    f"Last output: {' | '.join(list(sub.app_output.tail)[-5:]) or '(none)'}. "
                    "Fix: see the task log for spark-submit's output; the task is retried.",
                    retryable=True,
                )
        except BaseException:
            self._discard_secret_file()
            raise
        secret_file = None
        if settings.cluster_manager == "standalone":  # read from this path when the driver starts: kept
            secret_file, self._secret_file = self._secret_file, None
        else:  # YARN and Kubernetes uploaded it with the submission
            self._discard_secret_file()
        driver = SubmittedDriver(
            cluster_manager=settings.cluster_manager,
            driver_id=driver_id,
            result_uri=result_uri,
            submitted_at=submitted_at,
            status_urls=tuple(f"{base}/{driver_id}" for base in status_base),
            secret_file=secret_file,
        )
        self.log.info("Submitted %s; the task waits for it on the triggerer", driver.describe())
        return driver.to_dict()

    def trigger(self, handle: dict):
        from airflow_delta_provider.triggers.delta import DeltaSparkDriverTrigger

        # a request to the cluster manager per poll: at least every 5 s
        return DeltaSparkDriverTrigger(handle, poll_interval=max(5.0, self.submit_options.status_poll_interval))

    @classmethod
    def poll(cls, handle: dict) -> RunState:
        """The driver's state, asked of its cluster manager (:func:`~.driver.driver_state`)."""
        driver = SubmittedDriver.from_dict(handle)
        state = driver_state(driver)
        return RunState(
            state,
            active=is_active(driver, state),
            waiting=is_waiting(driver, state),
            succeeded=is_succeeded(driver, state),
        )

    @classmethod
    def describe(cls, handle: dict) -> str:
        return SubmittedDriver.from_dict(handle).describe()

    def stop(self, handle: dict) -> str | None:
        return kill_driver(SubmittedDriver.from_dict(handle))

    def release(self, handle: dict) -> None:
        discard_secret_file(SubmittedDriver.from_dict(handle))

    def _status_base(self, settings: SubmitSettings) -> tuple[str, ...]:
        """Where a driver's state is asked, without its id (see :mod:`airflow_delta_provider.hooks.driver`):
        the standalone masters' REST servers (connection extras ``rest-port``, ``rest-scheme`` as in the
        apache-spark provider), YARN's ResourceManager; none for Kubernetes."""
        extra = self.hook.get_conn().extra_dejson

        def field(name: str, default):
            return connection_extra(extra, name) or connection_extra(extra, name.replace("-", "_")) or default

        if settings.cluster_manager == "standalone":
            scheme, port = field("rest-scheme", "http"), field("rest-port", 6066)
            hosts = [m.strip().rsplit(":", 1)[0] for m in settings.master[len("spark://") :].split(",") if m.strip()]
            return tuple(f"{scheme}://{h}:{port}/v1/submissions/status" for h in hosts)
        if settings.cluster_manager == "yarn":
            rm = str(extra.get("yarn_resourcemanager_webapp_address") or "").strip()
            if not rm:
                raise DeltaConfigurationError(
                    "A deferred YARN run needs the ResourceManager's web address",
                    "the trigger follows the application through the ResourceManager's REST API",
                    "set the connection extra 'yarn_resourcemanager_webapp_address' (e.g. http://rm.example.com:8088)",
                )
            rm = rm if "://" in rm else f"http://{rm}"
            return (f"{rm.rstrip('/')}/ws/v1/cluster/apps",)
        return ()

    def _k8s_namespace(self, sub) -> str:
        conf = self.hook.spark_conf or {}
        return str(conf.get("spark.kubernetes.namespace") or sub._connection.get("namespace") or "default")

    def finish(self, handle: dict, state: str, succeeded: bool) -> dict:
        """The result of a detached run whose driver ended in ``state``: its result file, else the
        app's error (a driver that ended without either is a retryable Spark failure)."""
        driver = SubmittedDriver.from_dict(handle)
        discard_secret_file(driver)
        return resolve_outcome(
            returncode=0 if succeeded else 1,
            file_result=self.read_result(driver.result_uri),
            output=AppOutput(),
            submit_error=None if succeeded else f"{driver.describe()} ended in state {state}",
            master=self.submit_settings().master,
        )

    def read_result(self, result_uri: str) -> dict | None:
        """Read and delete the ``--result-uri`` file; ``None`` when the app did not write it."""
        try:
            if "://" in result_uri:
                from airflow_delta_provider_apps.protocol import storage_for

                storage = storage_for(result_uri)
                data = storage.read_bytes(result_uri)
                storage.delete(result_uri)
            else:
                with open(result_uri, "rb") as f:
                    data = f.read()
                os.unlink(result_uri)
        except FileNotFoundError:
            return None
        except Exception as e:  # unreadable result storage: fall back to stdout
            self.log.warning("Cannot read the result file %s: %s", result_uri, e)
            return None
        try:
            obj = json.loads(data)
        except ValueError:
            self.log.warning("The result file %s is not JSON; using stdout instead", result_uri)
            return None
        return obj if isinstance(obj, dict) else None

    @property
    def application_url(self) -> str | None:
        """The last submitted Spark application's web page, when spark-submit printed one."""
        return self._submit_hook.application_url if self._submit_hook is not None else None

    def kill(self) -> None:
        """Kill the running submission (delegated to SparkSubmitHook: local process, YARN app, k8s pod)."""
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
