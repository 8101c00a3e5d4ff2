"""OpenLineage for the Delta operators: what a task read and wrote, with the table's schema, the
version it committed and its row and byte counts.

Used by :meth:`DeltaBaseOperator.get_openlineage_facets_on_complete
<airflow_delta_provider.operators.delta.DeltaBaseOperator.get_openlineage_facets_on_complete>`; the
openlineage provider is an optional extra (``pip install airflow-delta-provider[openlineage]``), so
everything here imports it lazily and returns None without it. The schema is read from the table's log
on the worker (no Spark). Dataset names follow OpenLineage's naming: a local path is namespace
``file``, name the absolute path; ``s3://bucket/key`` is namespace ``s3://bucket``, name ``key``.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["dataset_name", "operator_lineage"]

# metrics that count rows and bytes written, per operation result (first present wins)
_ROWS = ("numOutputRows", "numTargetRowsInserted", "numUpdatedRows", "numDeletedRows")
_BYTES = ("numOutputBytes", "numTargetBytesAdded", "numAddedBytes")


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a table or file location, per OpenLineage's dataset naming."""
    text = str(uri).rstrip("/")
    if "://" not in text or text.startswith("file://"):
        path = text[len("file://") :] if text.startswith("file://") else text
        return "file", os.path.abspath(os.path.expanduser(path))
    scheme, rest = text.split("://", 1)
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}", key


def _schema_fields(table_uri: str):
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacetFields

    from airflow_delta_provider_apps.protocol import table_schema

    columns = table_schema(table_uri)
    return None if columns is None else [SchemaDatasetFacetFields(name=n, type=t) for n, t in columns]


def operator_lineage(table_uri: str, result: dict | None, inputs: list[str]) -> Any:
    """The OperatorLineage of one run: ``inputs`` (source locations) read, the table written (with
    its schema, the committed version and the run's row and byte counts); None without the
    openlineage provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
        from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
        from openlineage.client.generated.schema_dataset import SchemaDatasetFacet
    except ImportError:
        return None
    facets: dict = {}
    try:
        fields = _schema_fields(table_uri)
    except Exception:  # lineage must never fail a task
        fields = None
    if fields:
        facets["schema"] = SchemaDatasetFacet(fields=fields)
    result = result or {}
    if result.get("version") is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(result["version"]))
    metrics = result.get("metrics") or {}
    rows = next((metrics[k] for k in _ROWS if k in metrics), None)
    size = next((metrics[k] for k in _BYTES if k in metrics), None)
    output_facets = {}
    if rows is not None:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(rowCount=int(rows), size=size)
    namespace, name = dataset_name(table_uri)
    output = OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)
    sources = [InputDataset(namespace=ns, name=n) for ns, n in (dataset_name(i) for i in inputs if i)]
    return OperatorLineage(inputs=sources, outputs=[output])
