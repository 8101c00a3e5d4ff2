"""The committing task instance reaches the commit through the app's command line (what spark-submit
runs, issue 42): ``--airflow-task KEY=VALUE`` and the job spec's ``airflow_task`` become
``commitInfo.airflow``, read back by deltalake (an independent reader)."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider_apps import cli

deltalake = pytest.importorskip("deltalake")


def test_the_command_line_records_the_task_instance(tmp_path, capsys):
    root = str(tmp_path / "t")
    argv = ["create-table", "--table-uri", root, "--schema", "id BIGINT"]
    argv += ["--airflow-task", "dag_id=orders", "task_id=create", "run_id=manual__1", "map_index=-1", "try_number=2"]
    assert cli.main(argv) == 0
    info = deltalake.DeltaTable(root).history(1)[0]
    assert info["airflow"] == {
        "dag_id": "orders",
        "task_id": "create",
        "run_id": "manual__1",
        "map_index": -1,
        "try_number": 2,
    }

    spec = {"properties": {"team": "lake"}, "airflow_task": {"dag_id": "orders", "task_id": "props", "run_id": "r2"}}
    assert cli.main(["set_properties", "--table-uri", root, "--spec-json", json.dumps(spec)]) == 0
    assert deltalake.DeltaTable(root).history(1)[0]["airflow"] == {
        "dag_id": "orders",
        "task_id": "props",
        "run_id": "r2",
    }
    # without it nothing is recorded
    assert cli.main(["set_properties", "--table-uri", root, "--properties", "team=ops"]) == 0
    assert "airflow" not in deltalake.DeltaTable(root).history(1)[0]
