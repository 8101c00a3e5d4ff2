"""The generic runner: one registry entry's engine command run on a table, its result shaped as the
app protocol says (docs/design.md).

Every entry (:class:`~airflow_delta_provider_apps.operations.Operation`) runs here, whoever starts it
(the command line under spark-submit, the worker's process, a Spark Connect client):
:func:`run_checked` checks the parameters as the registry says (once), :func:`run` records the
committing task and syncs a catalog, and :func:`command_result` runs the command. The parameters
are built as the entry's typed parameters dataclass (coerced and checked); an entry with a
``source`` has it read (:mod:`.sources`, from the source's own parameters: a DataFrame, or Arrow
data in this process) and handed to the command as ``source``, unless the table's log settles the
run without it (CREATE TABLE IF NOT EXISTS of a kept table); the command is run with each argument
by name and the run's transaction ``identity``, on the table's latest snapshot, or on the table's
location when its first parameter is ``table_uri`` (a command that opens no snapshot: CREATE TABLE,
DESCRIBE HISTORY), with the data plane when it takes one. The command's
:class:`~airflow_delta_provider_apps.engine.commands.result.CommandResult` is returned as the result
dict, with the source's read (``source_read``) and a change feed's range (``changes``). Nothing here
is per operation.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect

from . import operations as ops
from .engine.errors import DeltaError, InvalidArgumentError
from .results import from_command

__all__ = [
    "run_command",
    "command_result",
    "load",
    "load_runner",
    "run",
    "run_checked",
    "run_in_process",
    "as_delta_error",
]


def load(target: str):
    """The function a ``"module:function"`` string names."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def command_result(op, params: dict, spark=None, *, read: dict | None = None, checked: bool = False):
    """Run ``op``'s command with ``params`` on the table; returns the command's ``CommandResult``.
    ``checked``: ``params`` are what :func:`~airflow_delta_provider_apps.operations.check_params`
    returned (the CLI's), so they are not coerced and checked again; ``read``, when given, receives
    the result fields of the source read."""
    from .engine.table import DeltaTable, plane_for

    if checked:
        typed = op.parameters.checked(params)
    else:
        typed = op.parameters(**{a.name: a.default if params.get(a.name) is None else params[a.name] for a in op.args})
    arguments = {f.name: getattr(typed, f.name) for f in dataclasses.fields(typed)}
    if op.source:
        arguments = {k: v for k, v in arguments.items() if k not in ops.SOURCE_SPEC}
        arguments["source"], fields, watermark = _source(op, params, spark)
        if watermark is not None:  # a change feed's range: the target's commit records it
            arguments["watermark"] = watermark
        if read is not None:
            read.update(fields)
    if op.commits:
        arguments["identity"] = op.identity(params)
    command = load(op.command)
    takes = inspect.signature(command).parameters
    uri = params["table_uri"]
    if next(iter(takes)) == "table_uri":  # opens no snapshot
        if "plane" in takes:
            arguments["plane"] = plane_for(spark)
        return command(uri, **arguments)
    table = DeltaTable.for_path(spark, uri)
    if "plane" in takes:
        arguments["plane"] = table.plane
    return command(table.snapshot(), **arguments)


def _source(op, params: dict, spark) -> tuple:
    """``(data, result fields, watermark)`` of ``op``'s source: None when the log settles the run
    without it; the fields say how it was read (``source_read``) and a change feed's range
    (``changes``), whose ``watermark`` the command records."""
    from .sources import read_source_spec

    if not (params.get("source") or params.get("source_query")) or op.settled(params):
        return None, {}, None  # none given, or e.g. CREATE TABLE IF NOT EXISTS of a kept table: not read
    spec = {k: params.get(k) for k in (*ops.SOURCE_SPEC, "table_uri")}  # the source's own (and its target's)
    src = read_source_spec(spark, spec, arrow_if_small=op.small_source_as_arrow)
    fields = {"source_read": src.read, **({"changes": src.feed} if src.feed is not None else {})}
    return src.df, fields, src.watermark


def load_runner(op):
    """``(params, spark) -> result dict`` of the registry entry ``op``: :func:`run_command` bound to it."""
    return functools.partial(run_command, op)


def run_command(op, params: dict, spark=None, *, checked: bool = False) -> dict:
    """The runner of every registry entry (``(params, spark) -> result dict`` once bound to it:
    :func:`load_runner`); ``checked`` as for :func:`command_result`."""
    read: dict = {}
    result = command_result(op, params, spark, read=read, checked=checked)
    return from_command(result.to_dict(), params["table_uri"], **read)


def run(params: dict, spark=None) -> dict:
    """Run one operation (its registry entry, ``params`` as :func:`ops.check_params` returned them:
    not checked again); returns the result dict (without printing). A
    ``catalog`` parameter is synced after the commit in ``spark`` when it reaches that catalog."""
    from .engine.catalog import catalog_spec, sync_in_session
    from .engine.storage import table_location
    from .engine.txn.transaction import commit_provenance

    op = ops.get(params["operation"])
    catalog_spec(params.get("catalog"))  # a bad one fails before anything is written
    params = dict(params, table_uri=table_location(params["table_uri"]))
    with commit_provenance(params.get("airflow_task")):  # commitInfo.airflow of its commits
        result = run_command(op, params, spark, checked=True)  # params: check_params's, checked once
    return sync_in_session(params.get("catalog"), params["table_uri"], result, spark)


def run_checked(operation: str, table_uri: str, params: dict, *, spark_factory=None) -> dict:
    """Run one operation in THIS process with the same parameter checks as the command line: without
    Spark (``spark_factory`` None: operations that need none), or with the session ``spark_factory()``
    returns, created only when these parameters need Spark (a Spark Connect session: the task is
    the client). Returns the result dict; raises :class:`DeltaError` (an
    :class:`InvalidArgumentError` when these parameters need Spark and there is none)."""
    op = ops.get(operation)
    given = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        full = ops.check_params(op, {**op.defaults(), **given, "operation": op.name, "table_uri": table_uri})
    except ValueError as e:
        raise InvalidArgumentError(f"Bad parameters for {op.name}", str(e), "fix the argument") from None
    needs_spark = op.spark_required(full)
    if needs_spark and spark_factory is None and not op.runs_in_process(full):
        raise InvalidArgumentError(
            f"'{op.name}' cannot run in the worker process with these arguments",
            "it reads or writes data, which needs Spark",
            "use execution='spark' (the default: the connection's Spark)",
        )
    spark = spark_factory() if needs_spark and spark_factory is not None else None
    try:
        return run(full, spark)
    except Exception as e:  # the same classification the app applies under spark-submit
        raise as_delta_error(e) from e


def run_in_process(operation: str, table_uri: str, params: dict) -> dict:
    """Run an operation that needs no Spark in THIS process (:func:`run_checked` without a session)."""
    return run_checked(operation, table_uri, params)


def as_delta_error(e: BaseException) -> DeltaError:
    """``e`` as the DeltaError the app reports: the engine's classification
    (:func:`airflow_delta_provider_apps.engine.foreign.as_delta_error`: itself, a Spark task's error,
    an I/O error, a Spark or Spark Connect infrastructure failure), with a Spark analysis error of
    the source read here named as bad input of the source."""
    if isinstance(e, DeltaError):
        return e
    from .engine.foreign import as_delta_error as engine_error
    from .engine.foreign import decoded

    if type(e).__name__ in ("AnalysisException", "ParseException") and decoded(e) is None:
        from .sources import spark_error

        return spark_error(e, "Spark refused the operation")
    return engine_error(e)
