"""Table properties Delta refuses (issue 31.5: a boolean with a space, statistics columns the table does
not have) are refused the same way through the app's command line (exit 1, one DELTA_ERROR line) and
through the Airflow operators (at DAG parse time where the properties alone are wrong, else a permanent task
error), nothing committed."""

from __future__ import annotations

import json
import os

import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable

BAD = [
    ({"delta.enableChangeDataFeed": "TRUE "}, "delta.enableChangeDataFeed='TRUE ' is not a boolean"),
    ({"delta.dataSkippingStatsColumns": "nope,name"}, "names column 'nope', which the table does not have"),
]


def _log(root: str) -> dict[str, bytes]:
    log = os.path.join(root, "_delta_log")
    return {n: open(os.path.join(log, n), "rb").read() for n in sorted(os.listdir(log))}


def _cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main(list(argv))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, lines[-1]


@pytest.mark.parametrize(("properties", "words"), BAD)
def test_the_command_line_refuses_them(tmp_path, capsys, properties, words):
    root = str(tmp_path / "t")
    code, last = _cli(
        capsys,
        "create-table",
        "--table-uri",
        root,
        "--spec-json",
        json.dumps({"schema": "id BIGINT, name STRING", "properties": properties}),
    )
    assert code == 1 and last.startswith("DELTA_ERROR InvalidArgumentError: ") and words in last
    assert " Cause: " in last and " Fix: " in last
    assert not os.path.exists(os.path.join(root, "_delta_log"))
    DeltaTable.create(None, root, schema="id BIGINT, name STRING")
    before = _log(root)
    spec = json.dumps({"properties": properties})
    code, last = _cli(capsys, "set_properties", "--table-uri", root, "--spec-json", spec)
    assert code == 1 and words in last and " Fix: " in last
    assert _log(root) == before


@pytest.mark.parametrize(("properties", "words"), BAD)
def test_the_operators_refuse_them(tmp_path, properties, words):
    """At DAG parse time when the properties alone are wrong (a boolean with a space); when it takes the
    table to know (statistics columns it does not have), when the task runs, as a permanent error."""
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaCreateTableOperator, DeltaSetPropertiesOperator

    def refused(make):
        try:
            op = make()
        except ValueError as e:  # DAG parse time
            assert words in str(e) and "Cause: " in str(e) and "Fix: " in str(e)
            return
        with pytest.raises(DeltaPermanentError, match=words.replace("(", r"\(")) as e:
            op.execute({})
        assert "Cause: " in str(e.value) and "Fix: " in str(e.value)

    root = str(tmp_path / "t")
    refused(
        lambda: DeltaCreateTableOperator(
            task_id="c", table_uri=root, schema="id BIGINT, name STRING", properties=properties, execution="local"
        )
    )
    assert not os.path.exists(os.path.join(root, "_delta_log"))
    DeltaTable.create(None, root, schema="id BIGINT, name STRING")
    before = _log(root)
    refused(lambda: DeltaSetPropertiesOperator(task_id="s", table_uri=root, properties=properties))
    assert _log(root) == before
