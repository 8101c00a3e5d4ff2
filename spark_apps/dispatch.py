"""The generic runner: one registry entry's engine command run on a table, its result shaped as the
app protocol says (docs/design.md).

An entry that names its ``command`` (:class:`~airflow_delta_provider_apps.operations.Operation`) runs
here: the parameters are built as the entry's typed parameters dataclass (coerced and checked), the
table opened, its snapshot read, the command called with each argument by name (and the data plane
when it takes one) and the run's transaction identity, and the command's
:class:`~airflow_delta_provider_apps.engine.commands.result.CommandResult` returned as the result
dict. Nothing here is per operation.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from .results import from_command

__all__ = ["run_command", "command_result", "load"]


def load(target: str):
    """The function a ``"module:function"`` string names."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def command_result(op, params: dict, spark=None):
    """Run ``op``'s command with ``params`` (coerced or not); returns its ``CommandResult``."""
    from .engine import DeltaTable

    command = load(op.command)
    given = {a.name: a.default if params.get(a.name) is None else params[a.name] for a in op.args}
    values = {f.name: getattr(op.parameters(**given), f.name) for f in dataclasses.fields(op.parameters)}
    takes_plane = "plane" in inspect.signature(command).parameters
    table = DeltaTable.for_path(spark if takes_plane else None, params["table_uri"])
    if takes_plane:
        values["plane"] = table.plane
    return command(table.snapshot(), **values, **op.identity(params).options())


def run_command(op, params: dict, spark=None) -> dict:
    """The runner of every entry that names a ``command`` (``(params, spark) -> result dict`` once
    bound to its entry: :func:`~airflow_delta_provider_apps.operations.load_runner`)."""
    return from_command(command_result(op, params, spark).to_dict(), params["table_uri"])
