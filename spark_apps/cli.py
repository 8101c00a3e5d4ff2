"""The apps' command line: ``python -m airflow_delta_provider_apps <operation> --table-uri URI [options]``.

This is also what spark-submit runs (``spark_apps/__main__.py``). Contract (docs/design.md, "CLI flags";
the Airflow hook builds exactly these):

* operations and their flags come from the registry (:mod:`airflow_delta_provider_apps.operations`): ``describe``,
  ``history``, ``read``, ``create-table``, ``write``, ``delete``, ``update``, ``checkpoint``,
  ``cleanup-metadata`` (``python -m airflow_delta_provider_apps <operation> --help`` lists each one's flags); common:
  ``--table-uri``, ``--result-uri``, ``--spec-json``, ``--master``, and for committing operations
  ``--app-id``/``--app-version``, ``--user-metadata``. Each runs its registry entry: its command
  through the generic runner (:mod:`airflow_delta_provider_apps.dispatch`).
* ``--spec-json`` carries the same parameters as a JSON object keyed by argparse ``dest`` names;
  flags given explicitly win over its keys.
* stdout's LAST line is one JSON object: ``{"status": "ok", "operation", "table_uri", "version",
  "skipped", "metrics": {...numbers...}, ...op-specific keys}``. On failure the last line is
  ``DELTA_ERROR <ErrorClass>: <problem. Cause: ... Fix: ...>`` and the exit code is 1 (bad input, will
  not pass on retry) or 2 (retryable: conflicts, I/O). With ``--result-uri`` the same result (or
  ``{"status": "error", "error_class", "message", "retryable", "problem", "cause", "fix"}``) is also
  written to that location (any storage ``storage_for`` knows), which is how the hook gets it back
  when stdout is lost (cluster deploy mode).
* Log-only operations (describe, history, checkpoint, cleanup-metadata, and create-table without a
  source) never start Spark when run as ``python -m airflow_delta_provider_apps``. Under spark-submit a session is
  always created (cluster managers expect the application to start one); ``--master`` (default
  ``local[*]``) only applies outside spark-submit.
* ``read --output`` collects the rows to the driver and writes ONE parquet file: meant for small
  tables and tests, not for exporting big tables.
* Source formats: parquet, csv (``header=true``, ``inferSchema=true`` unless overridden by
  ``--source-option``), json, delta (read by this engine; ``--source-option versionAsOf=N`` or
  ``timestampAsOf=TS`` for time travel).

No business logic here: parse, build a session, one engine call, one result out, exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback

from airflow_delta_provider_apps import operations as ops

# the generic runner's entry points, also the CLI's names (callers and tests import them from here)
from airflow_delta_provider_apps.dispatch import as_delta_error, run, run_checked, run_in_process  # noqa: F401
from airflow_delta_provider_apps.engine.errors import DeltaError, InvalidArgumentError, StorageError
from airflow_delta_provider_apps.failures import SparkInfrastructureError


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (its exit code 2 would read as 'retryable')."""

    def error(self, message):
        hint = (
            "python -m airflow_delta_provider_apps --help"
            if self.prog.endswith("airflow_delta_provider_apps")
            else f"{self.prog} --help"
        )
        raise InvalidArgumentError(f"Bad command line: {message}", None, f"run '{hint}'")


class _KeyValue(argparse.Action):
    """``--property K=V`` / ``--set col=EXPR`` (repeatable) -> dict."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = dict(getattr(namespace, self.dest, None) or {})
        for item in values:
            if "=" not in item:
                raise InvalidArgumentError(
                    f"Bad {option_string} value '{item}'",
                    "expected KEY=VALUE",
                    f"write it as {option_string} key=value",
                )
            k, v = item.split("=", 1)
            current[k.strip()] = v
        setattr(namespace, self.dest, current)


def _add(p: argparse.ArgumentParser, arg: ops.Arg) -> None:
    kw: dict = {"dest": arg.name, "help": arg.help or None}
    if arg.kind == "int":
        kw["type"] = int
    elif arg.kind == "float":
        kw["type"] = float
    elif arg.kind == "bool":  # --flag / --no-flag when it defaults to true
        kw["action"] = argparse.BooleanOptionalAction if arg.default else "store_true"
    elif arg.kind == "list":
        kw.update(nargs="+", action="extend")
    elif arg.kind in ("dict", "updates"):
        kw.update(nargs="+", action=_KeyValue, metavar="KEY=VALUE")
    p.add_argument(arg.cli_flag, **kw)


def build_parser() -> argparse.ArgumentParser:
    """The command line, derived from the operations registry (:mod:`airflow_delta_provider_apps.operations`)."""
    S = argparse.SUPPRESS
    common = _Parser(add_help=False, argument_default=S)
    for arg in ops.COMMON_ARGS:
        _add(common, arg)
    common.add_argument("--spec-json", dest="spec_json", help="all parameters as one JSON object (their names)")
    parser = _Parser(prog="python -m airflow_delta_provider_apps", description="Delta Lake operations as PySpark apps.")
    sub = parser.add_subparsers(dest="operation", metavar="OPERATION", parser_class=_Parser)
    for op in ops.OPERATIONS.values():
        p = sub.add_parser(op.name, parents=[common], help=op.help, argument_default=S)
        for arg in op.all_args:
            _add(p, arg)
    return parser


def parse_args(argv: list[str]) -> dict:
    """Merged parameters: registry defaults < ``--spec-json`` keys < explicit flags, coerced and checked."""
    ns = build_parser().parse_args(argv)
    given = dict(vars(ns))
    if not given.get("operation"):
        raise InvalidArgumentError(
            "No operation given",
            f"expected one of {', '.join(ops.OPERATIONS)}",  # read now: an operation registered since counts
            "run 'python -m airflow_delta_provider_apps <operation> --table-uri URI ...'",
        )
    op = ops.get(given["operation"])
    spec: dict = {}
    if given.get("spec_json"):
        try:
            spec = json.loads(given["spec_json"])
        except ValueError as e:
            raise InvalidArgumentError("--spec-json is not valid JSON", str(e), "pass one JSON object") from None
        if not isinstance(spec, dict):
            raise InvalidArgumentError(
                "--spec-json must be a JSON object",
                f"got {type(spec).__name__}",
                "pass an object keyed by parameter names",
            )
        spec = {str(k).replace("-", "_"): v for k, v in spec.items() if v is not None}
        spec.pop("operation", None)
    params = {"master": "local[*]", **op.defaults(), **spec, **given}
    params.pop("spec_json", None)
    if not params.get("table_uri"):
        raise InvalidArgumentError(
            "No table location given", "--table-uri is missing", "pass --table-uri URI (or table_uri in --spec-json)"
        )
    try:
        return ops.check_params(op, params)
    except ValueError as e:
        raise InvalidArgumentError(
            f"Bad parameters for {op.name}: {e}", None, f"run 'python -m airflow_delta_provider_apps {op.name} --help'"
        ) from None


# --------------------------------------------------------------------------------------------------
# Spark


def under_spark_submit() -> bool:
    """True when this process was started by spark-submit (PythonRunner sets the gateway variables)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _session(params: dict):
    from airflow_delta_provider_apps.engine.catalog import session_conf
    from airflow_delta_provider_apps.engine.spark.session import build_session

    conf = session_conf(params.get("catalog"))  # a catalog this app syncs itself (Hive support)
    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        return build_session(
            app_name=f"delta-{params['operation']}", master=params.get("master") or "local[*]", conf=conf
        )
    return build_session(app_name=f"delta-{params['operation']}", conf=conf)


# --------------------------------------------------------------------------------------------------
# entry point


def _error_result(err: DeltaError) -> dict:
    return {"status": "error", **err.to_dict()}


def _write_result_file(result_uri: str | None, result: dict) -> None:
    if not result_uri:
        return
    from airflow_delta_provider_apps.engine.storage import normalize_table_uri, storage_for

    path = normalize_table_uri(result_uri)
    storage_for(path).write_bytes(path, (json.dumps(result, default=str) + "\n").encode("utf-8"), overwrite=True)


def main(argv: list[str] | None = None, *, spark=None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 bad input, 2 retryable).

    :param argv: arguments (default ``sys.argv[1:]``)
    :param spark: an existing SparkSession to use (embedding, tests); it is not stopped
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    result_uri = _peek_result_uri(argv)
    given_spark = spark
    from airflow_delta_provider_apps.engine import progress

    if under_spark_submit() and spark is None:
        watch_driver_jvm()
    # phases as DELTA_PROGRESS lines: the provider's hook shows them in the task log
    progress.set_sink(lambda event: print("DELTA_PROGRESS " + json.dumps(event, separators=(",", ":")), flush=True))
    try:
        params = parse_args(argv)
        result_uri = params.get("result_uri") or result_uri
        op = ops.get(params["operation"])
        needs_spark = op.spark_required(params)
        if spark is None and (needs_spark or under_spark_submit()):
            spark = _session(params)
        load_storage_env(params.pop("storage_env_file", None))
        lease = driver_lease(params, spark) if under_spark_submit() and given_spark is None else None
        try:
            result = run(params, spark)
        finally:
            if lease is not None:
                lease.end()
    except Exception as e:
        err = as_delta_error(e)
        if not isinstance(e, DeltaError):
            traceback.print_exc(file=sys.stderr)
        try:
            _write_result_file(result_uri, _error_result(err))
        except Exception as we:  # the error line below still tells what happened
            print(f"could not write the result file {result_uri}: {we}", file=sys.stderr)
        _stop(spark, given_spark)
        sys.stdout.flush()
        print(f"DELTA_ERROR {type(err).__name__}: {err.one_line()}", flush=True)
        return 2 if err.retryable else 1
    try:
        _write_result_file(result_uri, result)
    except Exception as we:
        err = StorageError(f"Cannot write the result file '{result_uri}'", str(we), "check --result-uri")
        _stop(spark, given_spark)
        print(f"DELTA_ERROR {type(err).__name__}: {err.one_line()}", flush=True)
        return 2
    _stop(spark, given_spark)
    print(json.dumps(result, default=str, separators=(",", ":")), flush=True)
    return 0


def driver_lease(params: dict, spark):
    """This driver's lease on its task instance's identity (:mod:`airflow_delta_provider_apps.run_lease`),
    started; None for a run without an identity, one that commits nothing, and CREATE TABLE (whose
    folder may not exist yet: a lease would make it)."""
    op = ops.get(params["operation"])
    identity = op.identity(params)  # empty for an operation that commits nothing
    if op.name == "create-table" or not identity.app_id:
        return None
    from airflow_delta_provider_apps.engine.storage import storage_for, table_location
    from airflow_delta_provider_apps.run_lease import RunLease

    root = table_location(params["table_uri"])
    lease = RunLease(storage_for(root), root, str(identity.app_id), identity.app_version)
    try:
        lease.spark_app_id = spark.sparkContext.applicationId if spark is not None else None
    except Exception:  # no SparkContext (Connect): the host and pid say who runs it
        pass
    try:
        return lease.start()
    except Exception as e:  # no lease: a retry may start a second writer, as before (exactly once holds)
        print(f"could not write the run lease {lease.path}: {e}", file=sys.stderr)
        return None


def watch_driver_jvm(interval: float = 0.5, parent: int | None = None) -> threading.Thread:
    """The app's watchdog under spark-submit: this Python process is the child of the driver's JVM;
    when that JVM dies (killed, or out of memory: spark-submit runs it with ExitOnOutOfMemoryError),
    a Python call into it can wait on its socket for ever, and no Python timer can end that wait. A
    daemon thread sees the parent process change and ends this process at once: the error line
    first, exit code 2 (retryable), so the task fails in bounded time."""
    parent = os.getppid() if parent is None else parent

    def watch():
        while os.getppid() == parent:
            time.sleep(interval)
        err = SparkInfrastructureError(
            "Spark failed: the Spark driver JVM died while the Delta app ran",
            "this app's parent process (the driver JVM) exited, e.g. killed or out of memory",
            "see the Spark output above; raise spark.driver.memory if it ran out of memory; the task is retried",
        )
        print(f"DELTA_ERROR {type(err).__name__}: {err.one_line()}", flush=True)
        os._exit(2)

    thread = threading.Thread(target=watch, name="delta-driver-watchdog", daemon=True)
    thread.start()
    return thread


def load_storage_env(name: str | None) -> None:
    """Object-store settings the hook shipped as a file (cluster deploy mode: the driver does not run
    where the task does): into this driver's environment (executors get them from the engine), then
    the local copy is deleted. spark-submit puts --files in the driver's working directory (YARN) or
    SparkFiles' folder (Kubernetes)."""
    if not name:
        return
    candidates = [os.path.join(os.getcwd(), os.path.basename(name))]
    try:
        from pyspark import SparkFiles

        candidates.append(SparkFiles.get(os.path.basename(name)))
    except Exception:  # no SparkContext: only the working directory
        pass
    for path in candidates:
        try:
            with open(path) as f:
                env = json.load(f)
        except (FileNotFoundError, NotADirectoryError):
            continue
        os.environ.update({str(k): str(v) for k, v in env.items()})
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    raise StorageError(
        f"The object-store settings file '{name}' is not here",
        "spark-submit should have shipped it with --files to the driver's working directory",
        "check that the cluster manager localizes --files (on Kubernetes: spark.kubernetes.file.upload.path)",
    )


def _stop(spark, given=None) -> None:
    if spark is None or spark is given:
        return
    try:
        spark.stop()
    except Exception:
        pass


def _peek_result_uri(argv: list[str]) -> str | None:
    """--result-uri before parsing (so a parse error is reported there too)."""
    for i, a in enumerate(argv):
        if a == "--result-uri" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--result-uri="):
            return a.split("=", 1)[1]
    for i, a in enumerate(argv):
        if a == "--spec-json" and i + 1 < len(argv):
            try:
                return json.loads(argv[i + 1]).get("result_uri")
            except Exception:
                return None
    return None
