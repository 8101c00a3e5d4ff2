"""A literal CREATE schema's DEFAULTs are checked against their columns' types when the DAG is parsed
(the operator's constructor), with the engine's own error; a good one constructs; an operator's
upsert in the worker that leaves a column out writes its default."""

from __future__ import annotations

import pytest

from airflow_delta_provider.operators.delta import DeltaCreateTableOperator


@pytest.mark.parametrize(
    "schema",
    [
        "id BIGINT, qty INT DEFAULT 'many'",
        {
            "type": "struct",
            "fields": [{"name": "d", "type": "date", "nullable": True, "metadata": {"CURRENT_DEFAULT": "rand()"}}],
        },
    ],
)
def test_a_default_that_does_not_fit_fails_the_dag_import(schema):
    with pytest.raises(ValueError, match="DeltaCreateTableOperator: schema: Column '(qty|d)' .* has a DEFAULT"):
        DeltaCreateTableOperator(task_id="c", table_uri="/t", schema=schema)


def test_a_good_default_constructs():
    DeltaCreateTableOperator(
        task_id="c",
        table_uri="/t",
        schema="id BIGINT, qty INT DEFAULT 1, day DATE DEFAULT DATE'2026-01-01'",
        properties={"delta.feature.allowColumnDefaults": "supported"},
    )


def test_an_operators_upsert_that_leaves_a_column_out_writes_its_default(tmp_path):
    """DeltaMergeOperator in the worker (execution='local'): the source's parquet has no ``status``; the
    upserted new row gets the column's default, the updated one keeps its value (plain-Python model)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_provider.operators.delta import DeltaMergeOperator
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    root = str(tmp_path / "t")
    create_table(
        root,
        schema="id BIGINT, v INT, status STRING NOT NULL DEFAULT 'new'",
        properties={"delta.feature.allowColumnDefaults": "supported"},
    )
    append_arrow(root, pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([1], pa.int32()), "status": ["paid"]}))
    (tmp_path / "src").mkdir()
    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([10, 20], pa.int32())}),
        tmp_path / "src" / "p.parquet",
    )
    done = DeltaMergeOperator(
        task_id="m",
        table_uri=root,
        source=str(tmp_path / "src"),
        key_columns=["id"],
        merge_schema=True,
        execution="local",
    ).execute({})
    assert (done["metrics"]["numTargetRowsUpdated"], done["metrics"]["numTargetRowsInserted"]) == (1, 1)
    rows = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted((r["id"], r["v"], r["status"]) for r in rows) == [(1, 10, "paid"), (2, 20, "new")]
