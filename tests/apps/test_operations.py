"""The operations registry drives the CLI: flags, defaults, coercion and checks come from one declaration."""

from __future__ import annotations

import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.dispatch import load_runner
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError


def test_every_operation_has_a_runner_and_cli_flags():
    parser = cli.build_parser()
    for op in ops.OPERATIONS.values():
        assert callable(load_runner(op)), op.name
        help_text = parser._subparsers._group_actions[0].choices[op.name].format_help()
        for arg in op.all_args:
            assert arg.cli_flag in help_text, (op.name, arg.cli_flag)


def test_cli_parses_delete_update_and_overwrite():
    p = cli.parse_args(["delete", "--table-uri", "/t", "--predicate", "dt = '2026-01-01'"])
    assert p["operation"] == "delete" and p["predicate"] == "dt = '2026-01-01'"
    p = cli.parse_args(["update", "--table-uri", "/t", "--set", "v=v * 2", "s='x'", "--predicate", "id = 1"])
    assert p["updates"] == {"v": "v * 2", "s": "'x'"}
    p = cli.parse_args(
        ["write", "--table-uri", "/t", "--source", "/s", "--mode", "overwrite", "--replace-where", "p = 1"]
    )
    assert (p["mode"], p["replace_where"], p["source_format"]) == ("overwrite", "p = 1", "parquet")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["write", "--table-uri", "/t", "--source", "/s", "--mode", "upsert"], "mode must be one of append, overwrite"),
        (
            ["write", "--table-uri", "/t", "--source", "/s", "--replace-where", "p = 1"],
            "replace_where= needs mode='overwrite'",
        ),
        (["update", "--table-uri", "/t"], "updates= must name at least one column"),
        (["create-table", "--table-uri", "/t"], "give a schema, or a source"),
        (["history", "--table-uri", "/t", "--spec-json", '{"limit": "ten"}'], "limit='ten' is not an integer"),
    ],
)
def test_bad_parameters_fail_before_anything_runs(argv, message):
    with pytest.raises(InvalidArgumentError, match=message):
        cli.parse_args(argv)


def test_spec_json_and_flags_merge_with_registry_defaults():
    p = cli.parse_args(["write", "--table-uri", "/t", "--spec-json", '{"source": "/s", "merge_schema": "true"}'])
    assert p["merge_schema"] is True and p["mode"] == "append" and p["partition_overwrite_mode"] == "static"


def test_registry_import_is_light():
    import subprocess
    import sys

    # the registry reads the engine's pure MERGE clause rules only: no pyspark, no pyarrow, no table layer
    code = (
        "import sys, airflow_delta_provider_apps.operations; "
        "assert not {'pyspark', 'pyarrow', 'airflow_delta_provider_apps.engine.table'} & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_merge_clauses_are_checked_before_any_spark_application():
    from airflow_delta_provider_apps import operations as ops

    op = ops.get("merge")
    base = {**op.defaults(), "table_uri": "/t", "source": "/s", "predicate": "target.id = source.id"}
    good = [
        {"when": "matched", "then": "delete", "condition": "source.op = 'D'"},
        {"when": "matched", "then": "update_all"},
    ]
    assert len(ops.check_params(op, {**base, "clauses": good})["clauses"]) == 2
    for clauses, match in (
        ([{"when": "matched", "then": "delete"}, {"when": "matched", "then": "update_all"}], "only the last"),
        ([{"when": "matched", "then": "insert_all"}], "is not a MERGE clause"),
        ([{"when": "matched", "then": "update"}], "needs set="),
        ("[not json", "not valid JSON"),
    ):
        with pytest.raises(ValueError, match=match):
            ops.check_params(op, {**base, "clauses": clauses})
    with pytest.raises(ValueError, match="upsert"):
        ops.check_params(op, {**base, "key_columns": ["id"], "clauses": good})


def test_every_committing_maintenance_operation_carries_the_identity_and_user_metadata(tmp_path):
    """issue 31.4: OPTIMIZE, VACUUM and RESTORE commit with userMetadata and the SetTransaction; a
    retry of the same identity does nothing. Run as the apps run them (the registry's runner)."""
    import json
    import os

    import pyarrow as pa

    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    for i in range(3):
        append_arrow(root, pa.table({"id": pa.array([i], pa.int64())}))

    def run(name, **params):
        op = ops.OPERATIONS[name]
        spec = {**op.defaults(), "table_uri": root, **params}
        return load_runner(op)(spec, None)

    def last_commit(operation):
        logs = sorted(f for f in os.listdir(os.path.join(root, "_delta_log")) if f.endswith(".json"))
        for name in reversed(logs):
            actions = [json.loads(x) for x in open(os.path.join(root, "_delta_log", name))]
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            if info["operation"] == operation:
                return info, [a["txn"] for a in actions if "txn" in a]
        raise AssertionError(operation)

    for name, operation, params in (
        ("optimize", "OPTIMIZE", {}),
        ("restore", "RESTORE", {"version": 2}),
        ("vacuum", "VACUUM END", {"retention_hours": 0, "enforce_retention_duration": False}),
    ):
        ident = {"app_id": f"dag/{name}", "app_version": 3, "user_metadata": f"run of {name}"}
        first = run(name, **params, **ident)
        assert first["committed"] is True, first
        info, txns = last_commit(operation)
        assert info["userMetadata"] == f"run of {name}"
        assert [(t["appId"], t["version"]) for t in txns] == [(f"dag/{name}", 3)]
        again = run(name, **params, **ident)  # the task's retry after its commit landed
        assert again["skipped"] is True and again["committed"] is False, again
    start, txns = last_commit("VACUUM START")
    assert start["userMetadata"] == "run of vacuum" and txns == []  # the identity rides on VACUUM END only
