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
    with pytest.raises(InvalidPredicateError, match="predicate: Unknown column 'nope'"):
        preflight("delete", {"table_uri": table, "predicate": "nope = 1"})
    with pytest.raises(InvalidPredicateError, match="updates: Cannot update unknown column 'zz'"):
        preflight("update", {"table_uri": table, "updates": {"zz": "1"}})
    with pytest.raises(InvalidPredicateError, match="replace_where: "):
        preflight("write", {"table_uri": table, "replace_where": "id >", "source": None})
    preflight("delete", {"table_uri": table, "predicate": "id = 1 AND p = 'a'"})  # fine


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_empty_predicates_are_refused_like_the_engine_refuses_them(table, blank):
    for operation, name in (("delete", "predicate"), ("update", "predicate"), ("write", "replace_where")):
        params = {"table_uri": table, name: blank, "updates": {"id": "1"} if operation == "update" else None}
        with pytest.raises(
            InvalidPredicateError, match=f"{name}: The {'predicate' if name == 'predicate' else 'predicate'}"
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


def test_operator_fails_before_submitting(tmp_path, monkeypatch):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')  # resolved first
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


def _parquet_source(tmp_path, table: dict) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "changes"
    src.mkdir()
    pq.write_table(pa.table(table), src / "part-0.parquet")
    return str(src)


def test_merge_binds_on_the_clauses_and_keys_before_submitting(tmp_path, table):
    """A merge is bound as the app binds it, against the table's and the (local) source's schemas."""
    src = _parquet_source(tmp_path, {"id": [1, 2], "value": ["x", "y"], "p": ["a", "b"], "ts": [3, 4]})
    base = {"table_uri": table, "source": src, "source_format": "parquet"}
    upsert_all = [{"when": "matched", "then": "update_all"}, {"when": "not_matched", "then": "insert_all"}]
    preflight("merge", {**base, "predicate": "target.id = source.id", "clauses": upsert_all})  # fine
    preflight("merge", {**base, "key_columns": ["id"], "dedupe_by": "ts"})  # fine
    bad = [
        ({"predicate": "target.idx = source.id", "clauses": upsert_all}, "Unknown column 'target.idx'.*'target' has"),
        ({"predicate": "t.id = s.id", "clauses": upsert_all}, "Unknown column 't.id'"),
        (
            {
                "predicate": "target.id = source.id",
                "clauses": [{"when": "matched", "then": "update", "set": {"p": "source.q"}}],
            },
            "Unknown column 'source.q'.*'source' has columns id, value, p, ts",
        ),
        (
            {"predicate": "target.id = source.id", "clauses": [{"when": "matched", "then": "delete"}, upsert_all[0]]},
            "Only the last WHEN MATCHED clause may omit its condition",
        ),
        ({"key_columns": ["nope"]}, "missing: nope not in the table; nope not in the source"),
        ({"key_columns": ["id"], "dedupe_by": "seq"}, "dedupe_by column 'seq' is not in the source"),
    ]
    for params, match in bad:
        with pytest.raises(InvalidArgumentError, match=match):
            preflight("merge", {**base, **params})
    # what cannot be known here is left to the app: a query over the source, a file not readable as csv
    preflight("merge", {**base, "source_query": "SELECT id AS k FROM source", "key_columns": ["k"]})
    preflight("merge", {**base, "source_format": "csv", "key_columns": ["nope"]})


def test_an_upsert_whose_source_leaves_a_column_out_needs_merge_schema_before_submitting(tmp_path, table):
    """As the app binds it (delta-spark's rule): without merge_schema update_all / insert_all need every
    table column in the source; with it the column is left unchanged / NULL."""
    src = _parquet_source(tmp_path, {"id": [1, 2], "value": ["x", "y"]})
    base = {"table_uri": table, "source": src, "source_format": "parquet", "key_columns": ["id"]}
    with pytest.raises(InvalidArgumentError, match="WHEN MATCHED update_all: the source has no column p"):
        preflight("merge", base)
    preflight("merge", {**base, "merge_schema": True})


def test_merge_operator_with_a_merge_condition_passes_preflight_and_a_bad_one_fails_before_submitting(
    tmp_path, table, monkeypatch
):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaMergeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')  # resolved first
    src = _parquet_source(tmp_path, {"id": [1], "value": ["x"], "p": ["a"]})
    clauses = [{"when": "matched", "then": "update_all"}]
    good = DeltaMergeOperator(
        task_id="m",
        table_uri=table,
        source=src,
        source_format="parquet",
        predicate="target.id = source.id",
        clauses=clauses,
    )
    good.preflight(good.operation_params({}))  # the merge condition names both relations: no error
    bad = DeltaMergeOperator(
        task_id="m",
        table_uri=table,
        source=src,
        source_format="parquet",
        predicate="target.id = source.idd",
        clauses=clauses,
    )
    with pytest.raises(DeltaPermanentError, match="Unknown column 'source.idd'"):
        bad.execute({})
    assert "hook" not in bad.__dict__


def test_a_local_sources_schema_is_checked_before_submitting(tmp_path, table):
    """Delta's schema enforcement on a local parquet source, before any spark-submit (a mismatch
    cost 15-19 s before): extra columns name merge_schema, wrong types do not."""
    from airflow_delta_provider_apps.engine.errors import SchemaMismatchError

    good = _parquet_source(tmp_path, {"id": [1], "value": ["x"], "p": ["a"]})
    preflight("write", {"table_uri": table, "source": good, "source_format": "parquet", "mode": "append"})
    extra = tmp_path / "extra"
    extra.mkdir()
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1], "value": ["x"], "email": ["e"]}), extra / "part-0.parquet")
    with pytest.raises(SchemaMismatchError, match="extra column 'email'.*merge_schema=True"):
        preflight("write", {"table_uri": table, "source": str(extra), "source_format": "parquet"})
    preflight("write", {"table_uri": table, "source": str(extra), "source_format": "parquet", "merge_schema": True})
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    pq.write_table(pa.table({"id": ["not a number"], "value": ["x"]}), wrong / "part-0.parquet")
    with pytest.raises(SchemaMismatchError) as err:
        preflight("write", {"table_uri": table, "source": str(wrong), "source_format": "parquet"})
    assert "'id'" in err.value.cause and "merge_schema" not in err.value.fix
