"""OpenLineage from the operators, through the openlineage provider's own types and serializer: after a
real in-worker run, the output dataset is the table (namespace/name per OpenLineage naming) with its
schema read from the log, the committed version and the run's row and byte counts; inputs name the
source (and the table itself for operations that read it)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

pytest.importorskip("airflow.providers.openlineage")


def _facets(lineage):
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(lineage.outputs[0])), [json.loads(Serde.to_json(i)) for i in lineage.inputs]


def test_a_delete_reports_the_table_its_schema_version_and_counts(tmp_path):
    from airflow_delta_provider.lineage import dataset_name
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaWriteOperator
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, name STRING")
    append_arrow(root, pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    op = DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id = 2", execution="local")
    op.execute({})
    out, inputs = _facets(op.get_openlineage_facets_on_complete(None))
    assert (out["namespace"], out["name"]) == ("file", root)
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("id", "bigint"), ("name", "string")]
    assert out["facets"]["version"]["datasetVersion"] == "2"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 1  # the rows it deleted
    assert [(i["namespace"], i["name"]) for i in inputs] == [("file", root)]  # a DELETE reads the table
    # a write's input is its source; before a run there is no version to report
    w = DeltaWriteOperator(task_id="w", table_uri=root, source=str(tmp_path / "in.parquet"))
    out, inputs = _facets(w.get_openlineage_facets_on_complete(None))
    assert "version" not in out["facets"]
    assert [(i["namespace"], i["name"]) for i in inputs] == [("file", str(tmp_path / "in.parquet"))]
    assert dataset_name("s3://bucket/lake/events") == ("s3://bucket", "lake/events")
