"""csv and json sources are checked before anything is submitted, by their column names read here:
a wrong merge ON column or key, or a headerless csv read as if it had a header, fails in the worker."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider.exceptions import DeltaPermanentError
from airflow_delta_provider.operators.delta import DeltaMergeOperator
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.protocol import preflight


@pytest.fixture
def table(tmp_path):
    uri = str(tmp_path / "t")
    DeltaTable.create(None, uri, schema="id BIGINT, amount DOUBLE, note STRING")
    return uri


def _csv(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_a_headerless_csv_is_refused_before_submit(table, tmp_path):
    headerless = _csv(tmp_path / "day.csv", "905,1.5,a\n906,2.5,b\n")
    with pytest.raises(DeltaError, match="905"):  # its first row would become column names
        preflight("write", {"table_uri": table, "source": headerless, "source_format": "csv", "mode": "append"})
    with pytest.raises(DeltaError, match="_c0"):  # header=false: Spark names the columns _c0, _c1, ...
        preflight(
            "write",
            {"table_uri": table, "source": headerless, "source_format": "csv", "source_options": {"header": "false"}},
        )
    with_header = _csv(tmp_path / "ok.csv", "id,amount,note\n1,2.0,x\n")
    preflight("write", {"table_uri": table, "source": with_header, "source_format": "csv"})


def test_merge_on_and_keys_bind_against_a_json_source(table, tmp_path):
    src = tmp_path / "changes.json"
    src.write_text("\n".join(json.dumps(r) for r in [{"id": 1, "amount": 2.0}, {"id": 2, "note": "late key"}]))
    base = {"table_uri": table, "source": str(src), "source_format": "json"}
    preflight("merge", {**base, "key_columns": ["id"]})
    with pytest.raises(DeltaError, match="customer_id"):
        preflight("merge", {**base, "key_columns": ["customer_id"]})
    clauses = [{"when": "matched", "then": "update", "set": {"amount": "source.amount * 2"}}]
    preflight("merge", {**base, "predicate": "target.id = source.id", "clauses": clauses})
    with pytest.raises(DeltaError, match="ident"):
        preflight("merge", {**base, "predicate": "target.id = source.ident", "clauses": clauses})
    multi = tmp_path / "multi.json"
    multi.write_text(json.dumps([{"id": 1, "amount": 1.0}]))
    with pytest.raises(DeltaError, match="note"):  # multiLine: the keys of the array's objects
        preflight(
            "merge",
            {**base, "source": str(multi), "source_options": {"multiLine": "true"}, "predicate": "target.id = source.id",
             "clauses": [{"when": "matched", "then": "update", "set": {"note": "source.note"}}]},
        )  # fmt: skip


def test_the_operator_fails_a_wrong_key_without_spark(table, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PRE", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    src = _csv(tmp_path / "u.csv", "id,amount,note\n1,2.0,x\n")
    op = DeltaMergeOperator(
        task_id="m", table_uri=table, source=src, source_format="csv", key_columns=["uid"], conn_id="spark_pre"
    )
    with pytest.raises(DeltaPermanentError, match="uid"):
        op.execute({})
    assert "hook" not in op.__dict__  # no hook was built: nothing was submitted


def test_a_folder_of_json_files_is_read_as_spark_reads_it(table, tmp_path):
    folder = tmp_path / "landing"
    (folder / "_temporary").mkdir(parents=True)
    (folder / "a.json").write_text(json.dumps({"id": 1}))
    (folder / "b.json").write_text(json.dumps({"id": 2, "amount": 1.0}))
    (folder / "_SUCCESS").write_text("")
    (folder / "_temporary" / "c.json").write_text("not json")  # skipped, as Spark skips it
    base = {"table_uri": table, "source": str(folder), "source_format": "json", "predicate": "target.id = source.id"}
    preflight("merge", {**base, "clauses": [{"when": "matched", "then": "update", "set": {"amount": "source.amount"}}]})
    with pytest.raises(DeltaError, match="note"):
        preflight("merge", {**base, "clauses": [{"when": "matched", "then": "update", "set": {"note": "source.note"}}]})
