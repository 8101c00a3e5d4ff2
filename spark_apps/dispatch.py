"""The generic runner: one registry entry's engine command run on a table, its result shaped as the
app protocol says (docs/design.md).

An entry that names its ``command`` (:class:`~airflow_delta_provider_apps.operations.Operation`) runs
here: the parameters are built as the entry's typed parameters dataclass (coerced and checked), the
table opened, and the command run on it (:meth:`DeltaTable.run`: the latest snapshot, the data plane
when the command takes one) with each argument by name and the run's transaction identity; the command's
:class:`~airflow_delta_provider_apps.engine.commands.result.CommandResult` returned as the result
dict. Nothing here is per operation.
"""

from __future__ import annotations

import dataclasses
import importlib

from .results import from_command

__all__ = ["run_command", "command_result", "load"]


def load(target: str):
    """The function a ``"module:function"`` string names."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def command_result(op, params: dict, spark=None):
    """Run ``op``'s command with ``params`` (coerced or not) on the table
    (:meth:`~airflow_delta_provider_apps.engine.DeltaTable.run`: its latest snapshot, its plane);
    returns the command's ``CommandResult``."""
    from .engine import DeltaTable

    given = {a.name: a.default if params.get(a.name) is None else params[a.name] for a in op.args}
    typed = op.parameters(**given)
    values = {f.name: getattr(typed, f.name) for f in dataclasses.fields(typed)}
    table = DeltaTable.for_path(spark, params["table_uri"])
    return table.run(load(op.command), **values, **op.identity(params).options())


def run_command(op, params: dict, spark=None) -> dict:
    """The runner of every entry that names a ``command`` (``(params, spark) -> result dict`` once
    bound to its entry: :func:`~airflow_delta_provider_apps.operations.load_runner`)."""
    return from_command(command_result(op, params, spark).to_dict(), params["table_uri"])
