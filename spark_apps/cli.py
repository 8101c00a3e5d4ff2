"""The apps' command line: ``python -m spark_apps <operation> --table-uri URI [options]``.

This is also what spark-submit runs (``spark_apps/__main__.py``). Contract (docs/design.md, "CLI flags";
the Airflow hook builds exactly these):

* operations: ``describe``, ``history [--limit N]``, ``read --output PATH.parquet [--version N |
  --timestamp TS]``, ``create-table --schema ... [--partition-by COL ...] [--property K=V ...]
  [--description T] [--name N] [--if-not-exists] [--source URI --source-format F]``,
  ``write --mode append --source URI --source-format parquet|csv|json|delta [--source-option K=V ...]``,
  ``checkpoint [--cleanup]``, ``cleanup-metadata``; common: ``--table-uri``, ``--result-uri``,
  ``--spec-json``, ``--master``, ``--app-id``/``--app-version``, ``--user-metadata``.
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
  source) never start Spark when run as ``python -m spark_apps``. Under spark-submit a session is
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
import traceback

from spark_apps.engine.errors import DeltaError, InvalidArgumentError, StorageError

OPERATIONS = ("describe", "history", "read", "create-table", "write", "checkpoint", "cleanup-metadata")
SPARK_OPERATIONS = ("read", "write")
SOURCE_FORMATS = ("parquet", "csv", "json", "delta")
DEFAULTS = {
    "master": "local[*]",
    "mode": "append",
    "partition_by": None,
    "properties": None,
    "source_options": None,
    "if_not_exists": False,
    "cleanup": False,
}
_INT_KEYS = ("app_version", "limit", "version", "target_file_size")
_BOOL_KEYS = ("if_not_exists", "cleanup")


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (its exit code 2 would read as 'retryable')."""

    def error(self, message):
        hint = "python -m spark_apps --help" if self.prog.endswith("spark_apps") else f"{self.prog} --help"
        raise InvalidArgumentError(f"Bad command line: {message}", None, f"run '{hint}'")


class _KeyValue(argparse.Action):
    """``--property K=V`` (repeatable) -> dict."""

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


def build_parser() -> argparse.ArgumentParser:
    S = argparse.SUPPRESS
    common = _Parser(add_help=False, argument_default=S)
    common.add_argument("--table-uri", dest="table_uri", help="the Delta table's location")
    common.add_argument("--result-uri", dest="result_uri", help="also write the result JSON to this location")
    common.add_argument("--spec-json", dest="spec_json", help="all parameters as one JSON object (dest names)")
    common.add_argument("--master", dest="master", help="Spark master outside spark-submit (default local[*])")
    common.add_argument("--app-id", dest="app_id", help="idempotent-write application id")
    common.add_argument("--app-version", dest="app_version", type=int, help="idempotent-write version")
    common.add_argument("--user-metadata", dest="user_metadata", help="commitInfo.userMetadata")

    parser = _Parser(prog="python -m spark_apps", description="Delta Lake operations as PySpark apps.")
    sub = parser.add_subparsers(dest="operation", metavar="OPERATION", parser_class=_Parser)
    sub.add_parser("describe", parents=[common], help="table detail (log only)", argument_default=S)
    p = sub.add_parser("history", parents=[common], help="commit history (log only)", argument_default=S)
    p.add_argument("--limit", type=int, dest="limit")
    p = sub.add_parser("read", parents=[common], help="rows to one parquet file (small tables)", argument_default=S)
    p.add_argument("--output", dest="output", help="PATH.parquet to write")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", type=int, dest="version")
    g.add_argument("--timestamp", dest="timestamp")
    for name, hlp in (("create-table", "CREATE TABLE [AS SELECT]"), ("write", "append rows from a source")):
        p = sub.add_parser(name, parents=[common], help=hlp, argument_default=S)
        if name == "create-table":
            p.add_argument("--schema", dest="schema", help="DDL string or Delta/Spark schema JSON")
            p.add_argument("--partition-by", dest="partition_by", nargs="+", action="extend")
            p.add_argument("--property", dest="properties", nargs="+", action=_KeyValue, metavar="KEY=VALUE")
            p.add_argument("--description", dest="description")
            p.add_argument("--name", dest="name")
            p.add_argument("--if-not-exists", dest="if_not_exists", action="store_true")
        else:
            p.add_argument("--mode", dest="mode", help="append")
        p.add_argument("--source", dest="source", help="source location")
        p.add_argument("--source-format", dest="source_format", help="|".join(SOURCE_FORMATS))
        p.add_argument("--source-option", dest="source_options", nargs="+", action=_KeyValue, metavar="KEY=VALUE")
        p.add_argument("--target-file-size", dest="target_file_size", type=int, help="bytes per data file")
    p = sub.add_parser("checkpoint", parents=[common], help="write a checkpoint (log only)", argument_default=S)
    p.add_argument("--cleanup", dest="cleanup", action="store_true", help="then delete expired log files")
    sub.add_parser("cleanup-metadata", parents=[common], help="delete expired log files (log only)", argument_default=S)
    return parser


def parse_args(argv: list[str]) -> dict:
    """Merged parameters: defaults < ``--spec-json`` keys < explicit flags."""
    ns = build_parser().parse_args(argv)
    given = {k: v for k, v in vars(ns).items()}
    if not given.get("operation"):
        raise InvalidArgumentError(
            "No operation given",
            f"expected one of {', '.join(OPERATIONS)}",
            "run 'python -m spark_apps <operation> --table-uri URI ...'",
        )
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
    params = {**DEFAULTS, **spec, **given}
    params.pop("spec_json", None)
    for k in _INT_KEYS:
        if params.get(k) is not None:
            try:
                params[k] = int(params[k])
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"Parameter {k}={params[k]!r} is not an integer", None, f"pass {k} as a whole number"
                ) from None
    for k in _BOOL_KEYS:
        v = params.get(k)
        if isinstance(v, str):
            params[k] = v.strip().lower() in ("1", "true", "yes", "y")
    if isinstance(params.get("partition_by"), str):
        params["partition_by"] = [c.strip() for c in params["partition_by"].split(",") if c.strip()]
    for k in ("properties", "source_options"):
        v = params.get(k)
        if v is not None and not isinstance(v, dict):
            raise InvalidArgumentError(
                f"Parameter {k} must be a JSON object of strings",
                f"got {type(v).__name__}",
                f'pass {k} as {{"key": "value"}}',
            )
    if not params.get("table_uri"):
        raise InvalidArgumentError(
            "No table location given", "--table-uri is missing", "pass --table-uri URI (or table_uri in --spec-json)"
        )
    return params


# --------------------------------------------------------------------------------------------------
# Spark


def under_spark_submit() -> bool:
    """True when this process was started by spark-submit (PythonRunner sets the gateway variables)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _session(params: dict):
    from spark_apps.engine.spark.session import build_session

    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        return build_session(app_name=f"delta-{params['operation']}", master=params.get("master") or "local[*]")
    return build_session(app_name=f"delta-{params['operation']}")


def read_source(spark, params: dict):
    """The source DataFrame of write / create-as-select."""
    from spark_apps.engine.storage import is_local, normalize_table_uri

    source = params.get("source")
    fmt = (params.get("source_format") or "").strip().lower()
    if not source:
        raise InvalidArgumentError("No source given", "--source is missing", "pass --source URI --source-format F")
    if fmt not in SOURCE_FORMATS:
        raise InvalidArgumentError(
            f"Unknown source format '{params.get('source_format')}'",
            f"supported: {', '.join(SOURCE_FORMATS)}",
            "pass --source-format parquet|csv|json|delta",
        )
    options = {str(k): str(v) for k, v in (params.get("source_options") or {}).items()}
    if is_local(source) and not os.path.exists(normalize_table_uri(source)):
        raise InvalidArgumentError(
            f"Source '{source}' not found", "no file or directory at that path", "check --source"
        )
    if fmt == "delta":
        from spark_apps.engine import DeltaTable

        version = options.pop("versionAsOf", None)
        ts = options.pop("timestampAsOf", None)
        return DeltaTable.for_path(spark, source).to_df(
            version=int(version) if version is not None else None, timestamp=ts
        )
    if fmt == "csv":
        options = {"header": "true", "inferSchema": "true", **options}
    try:
        return spark.read.format(fmt).options(**options).load(source)
    except Exception as e:
        raise _spark_error(e, f"Cannot read source '{source}' as {fmt}") from None


def _spark_error(e: Exception, what: str) -> DeltaError:
    """A clear DeltaError for a Spark exception (AnalysisException etc.)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cond = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    try:
        cond = cond() if callable(cond) else None
    except Exception:
        cond = None
    if cond == "PATH_NOT_FOUND" or "PATH_NOT_FOUND" in msg or "Path does not exist" in msg:
        return InvalidArgumentError(f"{what}: not found", msg[:500], "check the source location")
    if type(e).__name__ in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        return InvalidArgumentError(what, msg[:500], "check the source location, format and options")
    return DeltaError(what, msg[:500], "see the Spark log for details")


# --------------------------------------------------------------------------------------------------
# operations


def _ok(
    operation: str, table_uri: str, version, *, skipped: bool = False, metrics: dict | None = None, **extra
) -> dict:
    out = {
        "status": "ok",
        "operation": operation,
        "table_uri": table_uri,
        "version": version,
        "skipped": bool(skipped),
        "metrics": _numbers(metrics or {}),
    }
    out.update(extra)
    return out


def _numbers(metrics: dict) -> dict:
    """Metric values as numbers (ints where integral)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                try:
                    v = float(v)
                except ValueError:
                    pass
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        out[k] = v
    return out


def run(params: dict, spark=None) -> dict:
    """Run one operation; returns the result dict (without printing)."""
    from spark_apps.engine import DeltaTable
    from spark_apps.engine.storage import normalize_table_uri

    op = params["operation"]
    uri = normalize_table_uri(params["table_uri"])
    if op == "describe":
        detail = DeltaTable.for_path(None, uri).detail()
        return _ok("DESCRIBE DETAIL", uri, detail["version"], detail=detail)
    if op == "history":
        t = DeltaTable.for_path(None, uri)
        hist = t.history(limit=params.get("limit"))
        version = hist[0]["version"] if hist else t.version()
        return _ok("DESCRIBE HISTORY", uri, version, history=hist)
    if op == "checkpoint":
        t = DeltaTable.for_path(None, uri)
        res = t.checkpoint()
        extra = {}
        if params.get("cleanup"):
            extra["cleanup"] = _numbers(t.cleanup_metadata()["metrics"])
        return _ok(res["operation"], uri, res["version"], metrics=res["metrics"], **extra)
    if op == "cleanup-metadata":
        res = DeltaTable.for_path(None, uri).cleanup_metadata()
        return _ok(res["operation"], uri, res["version"], metrics=res["metrics"])
    if op == "create-table":
        source_df = read_source(spark, params) if params.get("source") else None
        t = DeltaTable.create(
            spark,
            uri,
            schema=params.get("schema"),
            partition_by=params.get("partition_by"),
            properties=params.get("properties"),
            description=params.get("description"),
            name=params.get("name"),
            if_not_exists=bool(params.get("if_not_exists")),
            source_df=source_df,
            app_id=params.get("app_id"),
            app_version=params.get("app_version"),
            user_metadata=params.get("user_metadata"),
            target_file_size=params.get("target_file_size"),
        )
        r = t.last_result
        return _ok(r["operation"], uri, r["version"], skipped=r["skipped"], metrics=r["metrics"])
    if op == "write":
        mode = (params.get("mode") or "append").strip().lower()
        if mode != "append":
            raise InvalidArgumentError(
                f"Write mode '{params.get('mode')}' is not supported yet",
                "only --mode append is implemented",
                "use --mode append",
            )
        t = DeltaTable.for_path(spark, uri)
        df = read_source(spark, params)
        r = t.append(
            df,
            app_id=params.get("app_id"),
            app_version=params.get("app_version"),
            user_metadata=params.get("user_metadata"),
            target_file_size=params.get("target_file_size"),
        )
        return _ok(r["operation"], uri, r["version"], skipped=r["skipped"], metrics=r["metrics"])
    if op == "read":
        output = params.get("output")
        if not output:
            raise InvalidArgumentError(
                "read needs an output location", "--output is missing", "pass --output PATH.parquet"
            )
        t = DeltaTable.for_path(spark, uri)
        snap = t.snapshot(version=params.get("version"), timestamp=params.get("timestamp"))
        from spark_apps.engine.spark.scan import to_dataframe

        rows = _write_output(to_dataframe(spark, snap), output)
        return _ok(
            "READ",
            uri,
            snap.version,
            metrics={"numOutputRows": rows, "numFiles": int(snap.num_files)},
            output=normalize_table_uri(output),
        )
    raise InvalidArgumentError(f"Unknown operation '{op}'", f"expected one of {', '.join(OPERATIONS)}", None)


def _write_output(df, output: str) -> int:
    import pyarrow.parquet as pq

    from spark_apps.engine.storage import normalize_table_uri, storage_for

    path = normalize_table_uri(output)
    storage = storage_for(path)
    table = df.toArrow()
    parent = storage.fs_path(path).rsplit("/", 1)[0]
    if parent and storage.filesystem.type_name == "local":
        storage.filesystem.create_dir(parent, recursive=True)
    with storage.filesystem.open_output_stream(storage.fs_path(path)) as sink:
        pq.write_table(table, sink, compression="snappy")
    return table.num_rows


# --------------------------------------------------------------------------------------------------
# entry point


def _error_result(err: DeltaError) -> dict:
    return {"status": "error", **err.to_dict()}


def _as_delta_error(e: BaseException) -> DeltaError:
    if isinstance(e, DeltaError):
        return e
    if "DELTA_EXECUTOR_ERROR" in str(e):
        from spark_apps.engine.spark.session import delta_error_from

        err = delta_error_from(e)
        if err is not None:
            return err
    if type(e).__name__ in ("AnalysisException", "ParseException"):
        return _spark_error(e, "Spark refused the operation")
    if isinstance(e, OSError):
        return StorageError("An I/O operation failed", f"{type(e).__name__}: {e}", "check the storage and retry")
    msg = str(e).strip().splitlines()[0][:500] if str(e).strip() else ""
    err = DeltaError(f"Unexpected {type(e).__name__}", msg or None, "see the log above for the traceback")
    return err


def _write_result_file(result_uri: str | None, result: dict) -> None:
    if not result_uri:
        return
    from spark_apps.engine.storage import normalize_table_uri, storage_for

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
    try:
        params = parse_args(argv)
        result_uri = params.get("result_uri") or result_uri
        needs_spark = params["operation"] in SPARK_OPERATIONS or (
            params["operation"] == "create-table" and params.get("source")
        )
        if spark is None and (needs_spark or under_spark_submit()):
            spark = _session(params)
        result = run(params, spark)
    except Exception as e:
        err = _as_delta_error(e)
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
