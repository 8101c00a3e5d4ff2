"""DeltaTable's command methods say what the declarations say (issue 43: an operation declared once).

A method under ``@runs("module:function")`` is a typed signature whose arguments go to the command
by name, so it is a second spelling of the command's parameters, and of the registry entry's
arguments when an operation runs the same command. These tests hold the three together: the
method's parameter names and defaults against the command's signature and against the entry's
``args`` (read from :mod:`airflow_delta_provider_apps.operations`), with every intentional
difference listed below with its reason. Nothing runs; the signatures are read.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.engine.table import DeltaTable

EMPTY = inspect.Parameter.empty

#: command parameters a DeltaTable method does not take, and why (the snapshot or table, and the
#: plane, are given by ``DeltaTable.run`` to every command)
COMMAND_ONLY = {
    "cleanup_metadata": {"now_ms": "the clock, for tests of the retention cutoff"},
    "vacuum": {
        "now_ms": "the clock, for tests of the retention cutoff",
        "inventory_options": "the inventory store's own settings, for the engine's callers; the table's storage "
        "settings serve the apps, and the registry has no such argument either",
    },
    "restore": {"timestamp_ms": "the engine's form of ``timestamp`` (the method takes the user's)"},
}
GIVEN_BY_RUN = {"snapshot", "table", "plane"}
#: the transaction identity: one ``identity`` value on the method (its three keywords added by
#: takes_identity), the COMMIT_ARGS in the registry
IDENTITY = {"identity"}


def _command_methods() -> dict[str, tuple[inspect.Signature, str]]:
    """Each ``@runs`` method: its own signature (``self`` left out) and the command it runs."""
    found = {}
    for name, member in vars(DeltaTable).items():
        command = getattr(member, "command", None)
        if command is not None:
            signature = inspect.signature(inspect.unwrap(member))
            found[name] = (signature.replace(parameters=list(signature.parameters.values())[1:]), command)
    return found


METHODS = _command_methods()


def _command(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _command_drift(method: str, signature: inspect.Signature, target: str) -> list[str]:
    """Where a method's parameters (names, defaults) differ from its command's, beyond ``COMMAND_ONLY``."""
    command = inspect.signature(_command(target))
    parameters = [p for p in command.parameters.values() if p.kind is not p.VAR_KEYWORD]
    expected = {p.name: p.default for p in parameters[1:] if p.name not in GIVEN_BY_RUN}
    found = [f"{method}: the command requires {n}" for n in COMMAND_ONLY.get(method, {}) if expected[n] is EMPTY]
    for name in COMMAND_ONLY.get(method, {}):
        expected.pop(name)
    taken = {n: p.default for n, p in signature.parameters.items()}
    found += [f"{method}: lacks {n} (the command takes it)" for n in expected.keys() - taken.keys()]
    found += [f"{method}: takes {n}, which the command does not" for n in taken.keys() - expected.keys()]
    found += [
        f"{method}: {n} defaults to {taken[n]!r}, the command's to {expected[n]!r}"
        for n in taken.keys() & expected.keys()
        if taken[n] != expected[n]
    ]
    return sorted(found)


def _registry_drift(method: str, signature: inspect.Signature, op: ops.Operation) -> list[str]:
    """Where a method's parameters differ from its registry entry's arguments: the same names, the
    identity as one value; the same default, or none on the method where the entry's is None (a
    required argument: the entry's checks refuse it missing)."""
    taken = set(signature.parameters) - IDENTITY
    declared = {a.name: a.default for a in op.args}
    found = [f"{method}: lacks {n} (the {op.name} entry takes it)" for n in declared.keys() - taken]
    found += [f"{method}: takes {n}, which the {op.name} entry does not" for n in taken - declared.keys()]
    if ("identity" in signature.parameters) != op.commits:
        found.append(f"{method}: takes an identity {'without' if op.commits else 'with'} the entry's COMMIT_ARGS")
    for name in taken & declared.keys():
        default = signature.parameters[name].default
        if not (default == declared[name] or (default is EMPTY and declared[name] is None)):
            found.append(f"{method}: {name} defaults to {default!r}, the {op.name} entry's to {declared[name]!r}")
    return sorted(found)


#: each method run by a registry entry's command, with that entry
RUN_BY_ENTRIES = sorted(
    (method, op.name)
    for method, (_, target) in METHODS.items()
    for op in ops.OPERATIONS.values()
    if op.command == target
)


def test_the_command_methods_are_found():
    assert {"append", "overwrite", "upsert", "set_column_default", "cluster_by"} <= set(METHODS)
    # the registry's commands a DeltaTable method runs (the others' front is DeltaTable.run: CREATE
    # TABLE, WRITE's and MERGE's generic commands, the describe commands)
    assert {op for _, op in RUN_BY_ENTRIES} >= {"checkpoint", "cleanup-metadata", "vacuum", "optimize", "restore"}
    assert {op for _, op in RUN_BY_ENTRIES} >= {"delete", "update", "set_properties", "drop_constraint"}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_method_takes_its_commands_parameters_with_the_same_defaults(method):
    signature, target = METHODS[method]
    assert _command_drift(method, signature, target) == []


@pytest.mark.parametrize("method, operation", RUN_BY_ENTRIES)
def test_a_method_takes_its_registry_entrys_arguments(method, operation):
    signature, _ = METHODS[method]
    assert _registry_drift(method, signature, ops.get(operation)) == []


def _planted(front) -> inspect.Signature:
    signature = inspect.signature(front)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def test_a_planted_drift_is_found():
    """The checks' own reference: ``checkpoint`` without the ``cleanup`` its entry and command take
    (main had it so), a default of its own, a parameter nothing declares."""

    def checkpoint(self) -> dict: ...

    def vacuum(
        self,
        retention_hours=None,
        *,
        dry_run=True,
        mode="full",
        keep_versions=None,
        inventory=None,
        enforce_retention_duration=True,
        identity=None,
        verbose=False,
    ) -> dict: ...

    target = METHODS["checkpoint"][1]
    assert _command_drift("checkpoint", _planted(checkpoint), target) == [
        "checkpoint: lacks cleanup (the command takes it)"
    ]
    assert _registry_drift("checkpoint", _planted(checkpoint), ops.get("checkpoint")) == [
        "checkpoint: lacks cleanup (the checkpoint entry takes it)"
    ]
    assert _command_drift("vacuum", _planted(vacuum), METHODS["vacuum"][1]) == [
        "vacuum: dry_run defaults to True, the command's to False",
        "vacuum: takes verbose, which the command does not",
    ]
    assert _registry_drift("vacuum", _planted(vacuum), ops.get("vacuum")) == [
        "vacuum: dry_run defaults to True, the vacuum entry's to False",
        "vacuum: takes verbose, which the vacuum entry does not",
    ]
