"""A new log-only operation is its command plus one registry entry (issue 43 item 1's measure).

Here the command is a few lines in this module (SET COMMENT: the table's description), registered
for the test's duration as one :class:`~airflow_delta_provider_apps.operations.Operation`. Nothing
else names it, and it runs through the generic runner, the CLI (``python -m
airflow_delta_provider_apps``'s ``main``, in this process: the registration lives here),
``DeltaTable.run``, and an
operator class that says only ``operation = "set_comment"``, with its typed parameters, parse-time
check and idempotent-write identity. What landed is read back by deltalake and from the log's JSON.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.dispatch import load_runner
from airflow_delta_provider_apps.engine.commands.base import Command
from airflow_delta_provider_apps.engine.commands.create_table import create_table

deltalake = pytest.importorskip("deltalake")


# ---------------------------------------------------------------------------- the command module
def set_comment(snapshot, comment: str, *, identity=None):
    """SET COMMENT: the table's description becomes ``comment`` (metadata only)."""
    cmd = Command(snapshot, "SET COMMENT", {"comment": comment}, identity=identity)
    if cmd.duplicate:
        return cmd.skipped(None, fields={"comment": comment})
    cmd.update_metadata(dataclasses.replace(snapshot.metadata, description=comment))
    return cmd.commit([], None, fields={"comment": comment})


def _comment_given(p) -> None:
    if not str(p.get("comment") or "").strip():
        raise ValueError("comment is required: the table's new description")


# ---------------------------------------------------------------------------- the registry entry
SET_COMMENT = ops.Operation(
    "set_comment",
    "SET COMMENT",
    "set the table's comment (log only)",
    command=f"{__name__}:set_comment",
    args=(ops.Arg("comment", help="the table's new description"),),
    checks=(_comment_given,),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(ops.OPERATIONS, SET_COMMENT.name, SET_COMMENT)
    return SET_COMMENT


@pytest.fixture
def table(tmp_path) -> str:
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    return root


def _description(root: str) -> str | None:
    return deltalake.DeltaTable(root).metadata().description


def _commit_info(root: str, version: int) -> dict:
    with open(f"{root}/_delta_log/{version:020d}.json") as f:
        return next(a["commitInfo"] for a in map(json.loads, f) if "commitInfo" in a)


def test_the_entry_gives_typed_checked_documented_parameters(registered):
    params = registered.parameters
    assert [f.name for f in dataclasses.fields(params)] == ["comment"]
    assert ":param comment: the table's new description" in params.__doc__
    assert params(comment="sales").comment == "sales"
    with pytest.raises(ValueError, match="comment is required"):
        params(comment="  ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        params(comment="x").comment = "y"


def test_the_generic_runner_runs_it_with_the_identity(registered, table):
    run = load_runner(registered)
    result = run({"table_uri": table, "comment": "first", "app_id": "job", "app_version": 1}, None)
    assert (result["status"], result["operation"], result["version"], result["skipped"]) == (
        "ok",
        "SET COMMENT",
        1,
        False,
    )
    assert result["committed"] is True and result["comment"] == "first"
    assert _description(table) == "first"
    info = _commit_info(table, 1)
    assert info["operation"] == "SET COMMENT" and info["operationParameters"] == {"comment": "first"}
    # the same identity again: nothing written, the table keeps its version
    again = run({"table_uri": table, "comment": "other", "app_id": "job", "app_version": 1}, None)
    assert again["skipped"] is True and again["committed"] is False and again["version"] == 1
    assert _description(table) == "first" and deltalake.DeltaTable(table).version() == 1


def test_delta_table_runs_the_same_command(table):
    from airflow_delta_provider_apps.engine import DeltaTable

    result = DeltaTable.for_path(None, table).run(set_comment, "via DeltaTable", user_metadata="by hand")
    assert (result.operation, result.version, result.skipped) == ("SET COMMENT", 1, False)
    assert _description(table) == "via DeltaTable" and _commit_info(table, 1)["userMetadata"] == "by hand"


def test_the_cli_reads_the_same_entry(registered, table, tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["set_comment", "--table-uri", table, "--comment", "from the CLI", "--user-metadata", "nightly"]
    assert cli.main([*argv, "--result-uri", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["operation"], result["version"], result["committed"]) == ("SET COMMENT", 1, True)
    assert _description(table) == "from the CLI" and _commit_info(table, 1)["userMetadata"] == "nightly"
    # its parse-time check, in the CLI's words; nothing written
    assert cli.main(["set_comment", "--table-uri", table, "--comment", " "]) == 1
    assert "comment is required" in capsys.readouterr().out
    assert deltalake.DeltaTable(table).version() == 1


def test_the_clis_refusals_name_it_among_the_operations(registered, capsys):
    """The operations a refusal lists are read from the registry when the message is made."""
    for argv in ([], ["no_such_operation"]):
        assert cli.main(argv) == 1
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert last.startswith("DELTA_ERROR InvalidArgumentError") and "set_comment" in last, argv


def test_an_operator_class_naming_it_is_all_the_provider_needs(registered, table):
    from airflow_delta_provider.exceptions import DeltaConfigurationError
    from airflow_delta_provider.operators.delta import DeltaBaseOperator

    class SetCommentOperator(DeltaBaseOperator):
        operation = "set_comment"

    assert "comment" in SetCommentOperator.template_fields  # from the entry's argument
    with pytest.raises((DeltaConfigurationError, ValueError), match="comment is required"):
        SetCommentOperator(task_id="blank", table_uri=table, comment="")  # at DAG parse time
    task = SetCommentOperator(task_id="c", table_uri=table, comment="by Airflow", execution="local")
    result = task.execute({})
    assert (result["operation"], result["version"], result["committed"]) == ("SET COMMENT", 1, True)
    assert _description(table) == "by Airflow"
