"""DeltaHook: run one bundled Delta app through spark-submit and bring its result back.

Data flow (one :meth:`DeltaHook.run` call)::

    connection (type "spark": local[*], yarn, spark://, k8s://) + hook config
      -> spark-submit settings (master, deploy mode, binary, conf)        _submit_settings()
      -> the bundled apps: airflow_delta_provider_apps.zip (--py-files) + launcher .py      build_app_bundle()
      -> application args: <operation> --table-uri U --result-uri R --spec-json J
      -> SparkSubmitHook.submit()  (its own Popen, log streaming, on_kill, yarn/k8s/standalone handling)
      -> result: the --result-uri file first, else the last result line captured from stdout
      -> dict, or DeltaRetryableError (AirflowException) / DeltaPermanentError (AirflowFailException)
         carrying the app's one-line error

Rules:

* The Airflow layer never imports pyspark. The pyspark-bundled ``bin/spark-submit`` is found with
  ``importlib.util.find_spec`` (no import). Order: the hook's ``spark_binary`` argument, the
  connection's ``spark-binary`` extra (looked up on PATH, as the apache-spark provider does),
  ``$SPARK_HOME/bin/spark-submit``, the installed pyspark's ``bin/spark-submit``, ``spark-submit``.
* The apps ship as a zip of the installed ``airflow_delta_provider_apps`` package, built once per package version and
  content hash into a cache folder (deterministic bytes, written atomically), with a two-line launcher
  next to it that runs ``python -m airflow_delta_provider_apps`` from that zip (``runpy``), so driver and executors run
  exactly the zipped code.
* The job spec always travels as ONE ``--spec-json`` argument (keys are the CLI's argparse ``dest``
  names, ``None`` values dropped): no quoting issues on any cluster manager.
* Result channel: ``--result-uri``. Client deploy mode: a local temporary file (the driver runs in
  the spark-submit process on this machine), unless a result folder is configured. Cluster deploy
  mode: a file under ``result_dir`` (hook argument or connection extra ``delta_result_dir``) on storage
  both sides reach (hdfs://, s3://, a shared mount); without one, cluster mode is refused, because
  the driver's stdout never comes back. Fallback: the last ``{"status": ...}`` JSON line (or the last
  ``DELTA_ERROR`` line) captured from spark-submit's output.
* Failure mapping lives in :func:`resolve_outcome` (pure, unit-tested): the app's ``retryable`` flag,
  else its exit code (2 = retryable) or the engine error class's ``retryable``.
* Cluster deploy mode ships the zip and the launcher as local files: YARN uploads them to its
  staging dir; on Kubernetes set ``spark.kubernetes.file.upload.path`` in ``spark_conf`` (or the
  image must already contain the package). Standalone clusters do not run Python apps in cluster mode.
* Local masters get ``spark.pyspark.python``/``spark.pyspark.driver.python`` = this interpreter (unless
  set in ``spark_conf`` or the environment), so the app runs with the engine's dependencies.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
import zipfile
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import ALLOWED_SPARK_BINARIES, SparkSubmitHook
from airflow.sdk import BaseHook

from airflow_delta_provider.exceptions import (
    AirflowException,
    AirflowNotFoundException,
    DeltaConfigurationError,
    DeltaPermanentError,
    DeltaRetryableError,
    DeltaTaskError,
    app_error,
)
from airflow_delta_provider_apps.operations import OPERATIONS  # the registry: the one list of operations

RESULT_DIR_EXTRA = "delta_result_dir"
# The spec key naming the object-store settings file shipped with --files in cluster deploy mode.
STORAGE_ENV_FILE_KEY = "storage_env_file"
APP_PACKAGE = "airflow_delta_provider_apps"
LAUNCHER_NAME = "delta_spark_app.py"
LAUNCHER_SOURCE = (
    '"""spark-submit entry of airflow-delta-provider: runs `python -m airflow_delta_provider_apps` from the --py-files zip."""\n'
    "import runpy\n"
    'runpy.run_module("airflow_delta_provider_apps", run_name="__main__", alter_sys=True)\n'
)
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


# ----------------------------------------------------------------------------------------------
# Configuration object
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# The bundled apps
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppBundle:
    """The shipped apps: ``zip_path`` for ``--py-files``, ``launcher_path`` as the application file."""

    zip_path: str
    launcher_path: str
    version: str
    digest: str


def _package_dir(package: str = APP_PACKAGE) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DeltaConfigurationError(
            f"The '{package}' package is not installed",
            "the Delta apps ship from the installed airflow-delta-provider distribution",
            "pip install airflow-delta-provider into the Airflow environment",
        )
    return list(spec.submodule_search_locations)[0]


def _package_files(pkg_dir: str, package: str = APP_PACKAGE) -> list[tuple[str, str]]:
    """(archive name, absolute path) of every .py file of the package, sorted. Archive names start
    with the import name (the source folder may be named otherwise, as in a source checkout)."""
    out = []
    for root, dirs, files in os.walk(pkg_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                out.append((f"{package}/" + os.path.relpath(path, pkg_dir).replace(os.sep, "/"), path))
    out.sort()
    return out


def _dist_version() -> str:
    try:
        from importlib.metadata import version

        return version("airflow-delta-provider")
    except Exception:
        return "0+unknown"


def default_bundle_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "airflow-delta-provider", "bundles")


def build_app_bundle(cache_dir: str | None = None) -> AppBundle:
    """Zip the installed ``airflow_delta_provider_apps`` package once per (version, content hash); return the paths.

    The zip's bytes depend only on the files' names and contents (sorted, fixed timestamps), so
    two workers build identical files; each write goes to a temporary name and is renamed into place.
    """
    pkg_dir = _package_dir()
    files = _package_files(pkg_dir)
    h = hashlib.sha256()
    contents = []
    for arcname, path in files:
        with open(path, "rb") as f:
            data = f.read()
        contents.append((arcname, data))
        h.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
    h.update(LAUNCHER_SOURCE.encode())
    digest = h.hexdigest()[:16]
    version = _dist_version()
    target = os.path.join(cache_dir or default_bundle_dir(), f"{version}-{digest}")
    zip_path = os.path.join(target, f"{APP_PACKAGE}.zip")
    launcher_path = os.path.join(target, LAUNCHER_NAME)
    if not (os.path.isfile(zip_path) and os.path.isfile(launcher_path)):
        os.makedirs(target, exist_ok=True)
        tmp_zip = f"{zip_path}.{uuid.uuid4().hex}.tmp"
        with zipfile.ZipFile(tmp_zip, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for arcname, data in contents:
                info = zipfile.ZipInfo(arcname, date_time=_ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        os.replace(tmp_zip, zip_path)
        tmp_launcher = f"{launcher_path}.{uuid.uuid4().hex}.tmp"
        with open(tmp_launcher, "w") as f:
            f.write(LAUNCHER_SOURCE)
        os.replace(tmp_launcher, launcher_path)
    return AppBundle(zip_path=zip_path, launcher_path=launcher_path, version=version, digest=digest)


def clear_bundle_cache(cache_dir: str | None = None) -> None:
    """Delete every cached apps bundle (rebuilt on the next run)."""
    shutil.rmtree(cache_dir or default_bundle_dir(), ignore_errors=True)


_PYSPARK_CHECKED: dict[str, str | None] = {}


def _check_pyspark_install(binary: str) -> None:
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


# ----------------------------------------------------------------------------------------------
# Output capture and outcome (pure)
# ----------------------------------------------------------------------------------------------

# The app's failure line; design.md names it "DELTA_ERROR <Class>: msg" (and, in one place,
# "DeltaError[<Class>]: msg"): both are accepted.
_ERROR_LINE_RE = re.compile(
    r"^(?:DELTA_ERROR\s+(?P<c1>[A-Za-z_][\w.]*)|DeltaError\[(?P<c2>[A-Za-z_][\w.]*)\])\s*:\s*(?P<msg>.*)$"
)


@dataclass
class AppOutput:
    """What spark-submit's merged stdout/stderr told us: the last result line, the last error line."""

    result: dict | None = None
    error_class: str | None = None
    error_message: str | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=20))
    # lines that show a Spark infrastructure failure (master unreachable, no resources, lost driver):
    # Spark logs them long before the app's own error, which only sees a stopped SparkContext
    infrastructure_lines: deque = field(default_factory=lambda: deque(maxlen=10))

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        self.tail.append(line)
        if _infrastructure_cause(line):
            self.infrastructure_lines.append(line)
        if line.startswith("{") and line.endswith("}") and '"status"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                return
            if isinstance(obj, dict) and obj.get("status") in ("ok", "error"):
                self.result = obj
            return
        m = _ERROR_LINE_RE.match(line)
        if m:
            self.error_class = m.group("c1") or m.group("c2")
            self.error_message = m.group("msg").strip()

    @classmethod
    def parse(cls, lines) -> AppOutput:
        out = cls()
        for line in lines:
            out.feed(line)
        return out


@functools.cache
def _infrastructure_classifier():
    """The apps' classifier, imported once (it runs on every output line); ``None`` without the engine."""
    try:
        from airflow_delta_provider_apps.protocol import infrastructure_cause
    except Exception:  # the engine is optional on the Airflow side
        return None
    return infrastructure_cause


def _infrastructure_cause(text: str, master: str | None = None) -> str | None:
    classify = _infrastructure_classifier()
    return classify(text, master) if classify is not None else None


def engine_error_retryable(error_class: str | None) -> bool | None:
    """The engine's ``retryable`` for an error class name; ``None`` when it is not an engine error."""
    try:
        from airflow_delta_provider_apps.protocol import error_retryable
    except Exception:  # the engine is optional on the Airflow side
        return None
    return error_retryable(error_class)


def _error_from_result(result: dict) -> DeltaTaskError:
    error_class = str(result.get("error_class") or "DeltaError")
    message = (
        result.get("message")
        or " ".join(p for p in (result.get("problem"), result.get("cause"), result.get("fix")) if p)
        or "the app reported an error without a message"
    )
    retryable = result.get("retryable")
    if retryable is None:
        retryable = bool(engine_error_retryable(error_class))
    return app_error(error_class, str(message), retryable=bool(retryable), result=result)


def resolve_outcome(
    *,
    returncode: int | None,
    file_result: dict | None,
    output: AppOutput,
    submit_error: str | None = None,
    master: str | None = None,
) -> dict:
    """Decide the task's outcome from everything the submission produced.

    Precedence: the ``--result-uri`` file, then the last JSON result line on stdout, then the last
    ``DELTA_ERROR`` line, then the bare exit status. An ``ok`` result wins even over a non-zero
    spark-submit exit (the commit is in the log; failing would invite a duplicate retry).

    :return: the app's result dict (``status == "ok"``).
    :raises DeltaRetryableError: retryable app error, or spark-submit failed before the app reported.
    :raises DeltaPermanentError: non-retryable app error, or the app succeeded without a result.
    """
    infrastructure = _infrastructure_cause(
        "\n".join([*output.infrastructure_lines, *output.tail, submit_error or ""]), master
    )
    for result in (file_result, output.result):
        if result is None:
            continue
        if result.get("status") == "ok":
            return result
        if result.get("status") == "error":
            raise _refined(_error_from_result(result), infrastructure)
    if output.error_class:
        retryable = returncode == 2 or bool(engine_error_retryable(output.error_class))
        raise _refined(app_error(output.error_class, output.error_message or "", retryable=retryable), infrastructure)
    if returncode:
        tail = " | ".join(list(output.tail)[-5:])
        detail = submit_error.splitlines()[0] if submit_error else f"spark-submit exited with code {returncode}"
        cause = infrastructure
        raise DeltaRetryableError(
            "SparkSubmitError",
            f"The Spark application failed before the Delta app reported a result. Cause: {cause or detail}. "
            f"Last output: {tail or '(none)'}. Fix: see the task log for the Spark error.",
            retryable=True,
        )
    raise DeltaPermanentError(
        "MissingResultError",
        "The Delta app finished but returned no result. Cause: no --result-uri file and no JSON result "
        "line on stdout. Fix: check that the installed airflow_delta_provider_apps matches this provider version.",
        retryable=False,
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


def _refined(error: DeltaTaskError, infrastructure: str | None) -> DeltaTaskError:
    """The app's error, unless it is a bare unexpected error (or an infrastructure error) and Spark's own
    output names an infrastructure failure: then a retryable error with that one-line cause. (When the
    master cannot be reached, Spark stops the SparkContext and the app only sees "Cannot call methods on
    a stopped SparkContext"; the reason is in Spark's log lines.)"""
    generic = error.error_class == "DeltaError" or error.error_class == "SparkInfrastructureError"
    if not infrastructure or not generic:
        return error
    return DeltaRetryableError(
        "SparkInfrastructureError",
        f"Spark failed: {infrastructure}. Fix: check the cluster and the connection's master; the task is retried.",
        retryable=True,
    )


# ----------------------------------------------------------------------------------------------
# SparkSubmitHook with output capture
# ----------------------------------------------------------------------------------------------


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


def metrics_summary(operation: str, metrics: dict) -> str:
    """``"; numOutputRows=10, numFiles=1, ..."``: the operation's main metrics (the registry's list)."""
    try:
        names = OPERATIONS[operation].metrics
    except (KeyError, NameError):
        names = ()
    shown = [f"{k}={metrics[k]}" for k in names if k in metrics]
    return "; " + ", ".join(shown) if shown else ""


def progress_text(event: dict) -> str:
    """A ``DELTA_PROGRESS`` event of the app as a line a person reads."""
    op, phase = str(event.get("operation", "")), event.get("phase")
    if phase == "files":
        extra = f" ({event['source_rows']} source rows)" if "source_rows" in event else ""
        return f"{op}: {event.get('candidates')} of {event.get('table')} files to read after skipping{extra}"
    if phase == "rewritten":
        rows = ", ".join(f"{v} rows {k}" for k, v in event.items() if k in ("matched", "written"))
        return f"{op}: {event.get('files')} files rewritten" + (f", {rows}" if rows else "")
    if phase == "written":
        return f"{op}: {event.get('files')} files written, {event.get('rows')} rows"
    counts = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("operation", "phase"))
    return f"{op}: {phase} {counts}".rstrip()


# YARN's "tracking URL: http://rm:8088/proxy/application_..." and the driver's "SparkUI ... started at
# http://host:4040" (client mode; local masters run without a UI).
_APPLICATION_URL = re.compile(r"(?:tracking URL:|SparkUI\b.*\bstarted at)\s*(https?://\S+)")


class _CapturingSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that also feeds every output line to an :class:`AppOutput`.

    Stack-trace lines (Java frames, ``Caused by``, Python tracebacks of executors) are kept out of
    the task log unless ``show_traces`` (the ``verbose`` submit option): the app's one-line error is
    what a person needs; the count of hidden lines is logged instead.
    """

    def __init__(self, *args, show_traces: bool = False, secret_env: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.secret_env = dict(secret_env or {})
        self.app_output = AppOutput()
        #: the Spark application's web page, when spark-submit prints one (YARN's tracking URL, the
        #: driver's Spark UI in client mode): the operators' "Spark application" link
        self.application_url: str | None = None
        self.show_traces = show_traces
        self.hidden_trace_lines = 0
        self.hidden_noise_lines = 0

    @classmethod
    def get_connection(cls, conn_id: str):
        return as_spark_connection(super().get_connection(conn_id))

    def _build_spark_submit_command(self, application: str) -> list[str]:
        cmd = super()._build_spark_submit_command(application)
        if self.secret_env:
            # The spark-submit process's environment (the driver's, in client mode), never a --conf:
            # SparkSubmitHook turns its env_vars into --conf arguments on YARN and Kubernetes.
            self._env = {**(self._env or {}), **self.secret_env}
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
        hidden = self.hidden_trace_lines + self.hidden_noise_lines
        if hidden:
            self.log.info(
                "%d lines of Spark stack traces and WARN messages not shown (submit_options={'verbose': True} "
                "shows them)",
                hidden,
            )


# ----------------------------------------------------------------------------------------------
# The hook
# ----------------------------------------------------------------------------------------------


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


# The provider's own connection type: a ``spark`` connection whose form also has the Delta fields
# (the result folder). Both types work everywhere; SparkSubmitHook sees it as ``spark``.
DELTA_SPARK_CONN_TYPE = "delta_spark"


def as_spark_connection(conn):
    """``conn`` as SparkSubmitHook expects it: a ``delta_spark`` connection is read as ``spark``."""
    if getattr(conn, "conn_type", None) != DELTA_SPARK_CONN_TYPE:
        return conn
    import copy

    spark = copy.copy(conn)
    spark.conn_type = "spark"
    return spark


def connection_extra(extra: dict, name: str):
    """An extra field's value, stored by name or with the UI form's ``extra__<type>__`` prefix."""
    return extra.get(name) or extra.get(f"extra__{DELTA_SPARK_CONN_TYPE}__{name}")


def master_from_connection(conn) -> str:
    """The Spark master URL, exactly as SparkSubmitHook derives it from a connection."""
    conn = as_spark_connection(conn)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


class DeltaHook(BaseHook):
    """Run the bundled Delta apps with spark-submit over any Airflow ``spark`` connection.

    :param conn_id: a connection of type ``spark`` (host ``local[*]``, ``yarn``, ``spark://h:7077``,
        ``k8s://https://h:6443``; extras ``deploy-mode``, ``queue``, ``namespace``, ``spark-binary`` as in
        the apache-spark provider, plus ``delta_result_dir``).
    :param spark_conf: Spark properties (``--conf``).
    :param spark_binary: spark-submit to run (name on PATH or absolute path); overrides the
        connection's ``spark-binary``. Default: see :func:`find_spark_submit`.
    :param result_dir: folder (local path or URI) for the result files; required for cluster
        deploy mode. Default: the connection extra ``delta_result_dir``.
    :param submit_options: :class:`SparkSubmitOptions` (or a dict of its fields).
    :param bundle_dir: cache folder for the apps zip (default: ``<tmp>/airflow-delta-provider/bundles``).

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
        spark_binary: str | None = None,
        result_dir: str | None = None,
        submit_options: SparkSubmitOptions | dict | None = None,
        bundle_dir: str | None = None,
        storage_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.storage_conn_id = storage_conn_id
        self._storage_env: dict[str, str] | None = None
        self.spark_conf = dict(spark_conf or {})
        self.spark_binary = spark_binary
        self.result_dir = result_dir
        self.submit_options = SparkSubmitOptions.coerce(submit_options)
        self.bundle_dir = bundle_dir
        self._submit_hook: _CapturingSparkSubmitHook | None = None
        self._settings: SubmitSettings | None = None

    # -- connection -------------------------------------------------------------------------

    def get_conn(self):
        """The Airflow connection (raises a clear error when it does not exist)."""
        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            raise DeltaConfigurationError(
                f"Spark connection '{self.conn_id}' does not exist",
                "DeltaHook needs a connection of type 'spark' to know the master",
                f'define it, e.g. AIRFLOW_CONN_{self.conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[*]"}}\'',
            ) from None

    def submit_settings(self) -> SubmitSettings:
        if self._settings is None:
            conn = self.get_conn()
            extra = conn.extra_dejson
            deploy_mode = self.submit_options.deploy_mode or extra.get("deploy-mode") or "client"
            if deploy_mode not in ("client", "cluster"):
                raise DeltaConfigurationError(f"Unknown deploy mode '{deploy_mode}'", None, "use 'client' or 'cluster'")
            binary = self.spark_binary
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
                    _check_pyspark_install(binary)
            self._settings = SubmitSettings(
                master=master_from_connection(conn),
                deploy_mode=deploy_mode,
                spark_binary=binary,
                result_dir=self.result_dir or connection_extra(extra, RESULT_DIR_EXTRA) or None,
            )
        return self._settings

    def storage_env(self) -> dict[str, str]:
        """The object store's credentials from ``storage_conn_id`` as the standard variables (``{}``
        without one: the environment's default chain applies); resolved once per hook."""
        if self._storage_env is None:
            from airflow_delta_provider.storage_connections import storage_env

            self._storage_env = storage_env(self, self.storage_conn_id)
        return self._storage_env

    def storage_context(self):
        """A context manager in which this worker reaches the object store with ``storage_conn_id``'s
        credentials (log reads, in-process runs), leaving the process environment as it is."""
        from airflow_delta_provider_apps.protocol import storage_settings

        return storage_settings(self.storage_env())

    # -- building ---------------------------------------------------------------------------

    def effective_conf(self, settings: SubmitSettings) -> dict[str, str]:
        conf = {str(k): str(v) for k, v in self.spark_conf.items()}
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
        self, operation: str, table_uri: str, params: dict[str, Any] | None = None, *, result_uri: str | None = None
    ) -> tuple[_CapturingSparkSubmitHook, str, str]:
        """Build the SparkSubmitHook for one app run.

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
        bundle = build_app_bundle(self.bundle_dir)
        recoverable = bool((params or {}).get("app_id")) and (params or {}).get("app_version") is not None
        result_uri = result_uri or self.new_result_uri(settings, recoverable=recoverable)
        spec = self.job_spec(table_uri, dict(params or {}))
        opts = self.submit_options
        py_files = ",".join([bundle.zip_path, *opts.extra_py_files])
        kwargs = opts.hook_kwargs()  # deploy_mode only when set here; else the connection extra applies
        secret_env = self.storage_env()
        if secret_env and settings.is_cluster_mode:
            # The driver runs elsewhere: the credentials travel as a file only this user can read,
            # shipped by spark-submit like the apps' zip, and loaded (then deleted) by the app.
            self._secret_file = self._write_secret_file(secret_env)
            kwargs["files"] = ",".join(filter(None, [kwargs.get("files"), self._secret_file]))
            spec[STORAGE_ENV_FILE_KEY] = os.path.basename(self._secret_file)
            secret_env = {}
        try:
            sub = _CapturingSparkSubmitHook(
                conf=self.effective_conf(settings),
                conn_id=self.conn_id,
                py_files=py_files,
                name=opts.name or f"delta-{operation}",
                application_args=self.application_args(operation, table_uri, spec, result_uri),
                spark_binary=settings.spark_binary,
                show_traces=bool(opts.verbose),
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
        return sub, bundle.launcher_path, result_uri

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

    # -- running ----------------------------------------------------------------------------

    def run_in_process(self, operation: str, table_uri: str, **params: Any) -> dict:
        """Run an operation that needs no Spark (create without data, checkpoint, log cleanup,
        describe, history) in this worker process with the bundled engine: no spark-submit, no
        connection needed. Same parameters, result and errors as :meth:`run`, plus ``run_seconds``."""
        from airflow_delta_provider_apps.protocol import DeltaError, run_in_process

        started = time.monotonic()
        try:
            with self.storage_context():
                result = run_in_process(operation, table_uri, params)
        except DeltaError as e:
            raise app_error(type(e).__name__, e.one_line(), retryable=e.retryable) from None
        result = {**result, "run_seconds": round(time.monotonic() - started, 3)}
        self._log_result(operation, table_uri, result, " (in process)")
        return result

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

    def run(self, operation: str, table_uri: str, **params: Any) -> dict:
        """Run one Delta app operation and return its result dict.

        :param operation: a CLI operation (``create-table``, ``write``, ``checkpoint``, ...).
        :param table_uri: the table's path or URI.
        :param params: the operation's parameters, named as the CLI's spec keys (``mode``,
            ``source``, ``source_format``, ``partition_by``, ``app_id``, ...).
        :return: the app's result ``{"status": "ok", "operation", "table_uri", "version", "skipped",
            "metrics", ...}`` plus ``submit_seconds`` (wall time of the spark-submit, added here).
        :raises DeltaRetryableError: a retry may help (conflict, I/O, Spark failure).
        :raises DeltaPermanentError: a retry cannot help (bad input, missing table, ...).
        """
        with self.storage_context():
            try:
                return self._run(operation, table_uri, params)
            finally:
                self._discard_secret_file()

    def _run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        sub, application, result_uri = self.build_submit_hook(operation, table_uri, params)
        self._submit_hook = sub
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
        try:
            result = resolve_outcome(
                returncode=returncode,
                file_result=file_result,
                output=sub.app_output,
                submit_error=submit_error,
                master=self._settings.master,
            )
        except DeltaTaskError as e:
            result = self.result_from_log(table_uri, params)
            if result is None:
                raise
            self.log.warning(
                "The Delta app's own result was lost (%s); its commit is in the table's log: version %s",
                e,
                result.get("version"),
            )
        result = {**result, "submit_seconds": round(time.monotonic() - started, 3)}
        self._log_result(operation, table_uri, result)
        return result

    def result_from_log(self, table_uri: str, params: dict) -> dict | None:
        """The result of this run's commit, found in the table's log by its SetTransaction identity
        (``app_id``, ``app_version``): what a run reports when its result file and stdout are lost
        (cluster deploy mode, a client killed after the commit). None without an identity, or when
        the commit is not there (the run did not commit)."""
        app_id, app_version = params.get("app_id"), params.get("app_version")
        if not app_id or app_version is None:
            return None
        from airflow_delta_provider_apps.protocol import landed_result

        try:
            landed = landed_result(table_uri, str(app_id), int(app_version))
        except Exception as e:  # the log is not readable from here: nothing to recover
            self.log.warning("Cannot read the table's log to recover the result: %s", e)
            return None
        return None if landed is None else {**landed, "skipped": False, "committed": True}

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

    def on_kill(self) -> None:
        """Kill the running submission (delegated to SparkSubmitHook: local process, YARN app, k8s pod)."""
        if self._submit_hook is not None:
            self._submit_hook.on_kill()


__all__ = [
    "AppBundle",
    "AppOutput",
    "DeltaHook",
    "SparkSubmitOptions",
    "SubmitSettings",
    "build_app_bundle",
    "clear_bundle_cache",
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
