"""What an operation can fail on without Spark fails before any submit, in the user's words."""

from __future__ import annotations

import pytest
from txn_helpers import append, create_table

from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, InvalidPredicateError, TableNotFoundError
from airflow_delta_provider_apps.preflight import preflight


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1])
    return root


def test_missing_table_and_bad_predicates(tmp_path, table):
    with pytest.raises(TableNotFoundError, match="No Delta table"):
        preflight("delete", {"table_uri": str(tmp_path / "nope"), "predicate": "id = 1"})
    with pytest.raises(InvalidPredicateError, match="predicate=: Unknown column 'nope'"):
        preflight("delete", {"table_uri": table, "predicate": "nope = 1"})
    with pytest.raises(InvalidPredicateError, match="updates=: Cannot update unknown column 'zz'"):
        preflight("update", {"table_uri": table, "updates": {"zz": "1"}})
    with pytest.raises(InvalidPredicateError, match="replace_where=:"):
        preflight("write", {"table_uri": table, "replace_where": "id >", "source": None})
    preflight("delete", {"table_uri": table, "predicate": "id = 1 AND p = 'a'"})  # fine


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_empty_predicates_are_refused_like_the_engine_refuses_them(table, blank):
    for operation, name in (("delete", "predicate"), ("update", "predicate"), ("write", "replace_where")):
        params = {"table_uri": table, name: blank, "updates": {"id": "1"} if operation == "update" else None}
        with pytest.raises(
            InvalidPredicateError, match=f"{name}=: The {'predicate' if name == 'predicate' else 'predicate'}"
        ):
            preflight(operation, params)


def test_create_table_checks(tmp_path, table):
    from airflow_delta_provider_apps.engine.errors import InvalidSchemaError, TableAlreadyExistsError

    with pytest.raises(TableAlreadyExistsError):
        preflight("create-table", {"table_uri": table, "schema": "id BIGINT"})
    preflight("create-table", {"table_uri": table, "schema": "id BIGINT", "if_not_exists": True})
    new = str(tmp_path / "new")
    with pytest.raises(InvalidSchemaError):
        preflight("create-table", {"table_uri": new, "schema": "id BIGINTT"})
    with pytest.raises(InvalidArgumentError, match="Partition column\\(s\\) dt are not in the schema"):
        preflight("create-table", {"table_uri": new, "schema": "id BIGINT", "partition_by": ["dt"]})
    with pytest.raises(InvalidArgumentError, match="Source '/no/such/file.parquet' not found"):
        preflight("create-table", {"table_uri": new, "source": "/no/such/file.parquet"})


def test_operator_fails_before_submitting(tmp_path):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator

    op = DeltaDeleteOperator(task_id="d", table_uri=str(tmp_path / "missing"), predicate="id = 1")
    with pytest.raises(DeltaPermanentError, match="TableNotFoundError"):
        op.execute({})
    assert "hook" not in op.__dict__  # no spark-submit was prepared


def test_a_predicate_template_rendering_empty_fails_the_task_before_submitting(table):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator

    op = DeltaDeleteOperator(task_id="d", table_uri=table, predicate="{{ params.cond }}")
    op.predicate = ""  # what rendering "{{ params.cond }}" with cond="" leaves
    with pytest.raises(DeltaPermanentError, match="predicate is empty"):
        op.execute({})
    assert "hook" not in op.__dict__
