"""A literal CREATE schema's DEFAULTs are checked against their columns' types when the DAG is parsed
(the operator's constructor), with the engine's own error; a good one constructs."""

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
