"""The generic runner: one registry entry's engine command run on a table, its result shaped as the
app protocol says (docs/design.md).

Every entry (:class:`~airflow_delta_provider_apps.operations.Operation`) runs here: the parameters
are built as the entry's typed parameters dataclass (coerced and checked); an entry with a ``source``
has it read (:mod:`.sources`: a DataFrame, or Arrow data in this process) and handed to the command as
``source``, unless the table's log settles the run without it (CREATE TABLE IF NOT EXISTS of a kept
table); the command is run with each argument by name and the run's transaction identity: on the
table (:meth:`DeltaTable.run`: the latest snapshot, the data plane when the command takes one), or
on the table's location when its first parameter is ``table_uri`` (a command that opens no snapshot:
CREATE TABLE, DESCRIBE HISTORY). The command's
:class:`~airflow_delta_provider_apps.engine.commands.result.CommandResult` is returned as the result
dict, with the source's read (``source_read``) and a change feed's range (``changes``). Nothing here
is per operation.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect

from .results import from_command

__all__ = ["run_command", "command_result", "load", "load_runner"]


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
    from .operations import SOURCE_SPEC

    if checked:
        typed = op.parameters.checked(params)
    else:
        typed = op.parameters(**{a.name: a.default if params.get(a.name) is None else params[a.name] for a in op.args})
    values = {f.name: getattr(typed, f.name) for f in dataclasses.fields(typed)}
    if op.source:
        values = {k: v for k, v in values.items() if k not in SOURCE_SPEC}
        values["source"], fields, watermark = _source(op, params, spark)
        if watermark is not None:  # a change feed's range: the target's commit records it
            values["watermark"] = watermark
        if read is not None:
            read.update(fields)
    command = load(op.command)
    arguments = {**values, "identity": op.identity(params)} if op.commits else values
    uri = params["table_uri"]
    if next(iter(inspect.signature(command).parameters)) == "table_uri":  # opens no snapshot
        if "plane" in inspect.signature(command).parameters:
            arguments["plane"] = plane_for(spark)
        return command(uri, **arguments)
    return DeltaTable.for_path(spark, uri).run(command, **arguments)


def _source(op, params: dict, spark) -> tuple:
    """``(data, result fields, watermark)`` of ``op``'s source: None when the log settles the run
    without it; the fields say how it was read (``source_read``) and a change feed's range
    (``changes``), whose ``watermark`` the command records."""
    from .sources import read_source_spec

    if not (params.get("source") or params.get("source_query")) or op.settled(params):
        return None, {}, None  # none given, or e.g. CREATE TABLE IF NOT EXISTS of a kept table: not read
    src = read_source_spec(spark, params, arrow_if_small=op.small_source_as_arrow)
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
