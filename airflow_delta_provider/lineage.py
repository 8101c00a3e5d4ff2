"""OpenLineage for the Delta operators: what a task read and wrote, with the table's schema, the
version it committed and its row and byte counts.

Used by :meth:`DeltaBaseOperator.get_openlineage_facets_on_complete
<airflow_delta_provider.operators.delta.DeltaBaseOperator.get_openlineage_facets_on_complete>`; the
openlineage provider is an optional extra (``pip install airflow-delta-provider[openlineage]``), so
everything here imports it lazily and returns None without it. The schema is read from the table's log
on the worker (no Spark). Dataset names follow OpenLineage's naming: a local path is namespace
``file``, name the absolute path; ``s3://bucket/key`` is namespace ``s3://bucket``, name ``key``.

**Asset URIs that name a catalog table** (``catalog_table``): a table's asset is its location
(:func:`~airflow_delta_provider.operators.delta.delta_asset`); its catalog name is an asset too, of the
schemes this provider registers (``asset-uris`` in its provider info, with :func:`sanitize_catalog_uri`
and :func:`catalog_asset_to_openlineage`):

* ``hive://<metastore host>:<port>/<database>/<table>``: the metastore's thrift server (port 9083
  unless the connection says otherwise); for a metastore reached through its database (no host in
  the connection), the host and port of that database's JDBC URL, or ``localhost`` (embedded Derby);
* ``glue://<region>/<database>/<table>``, with ``?catalog_id=<account>`` for another account's catalog.

Database and table are lower case, as both catalogs store them. An operator with ``catalog_table``
whose outlets include that URI (:func:`catalog_asset_uri` says which, from the catalog connection)
attaches its commit to that asset's event as it does to the table's, with ``table_uri`` added.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

__all__ = [
    "CATALOG_SCHEMES",
    "catalog_asset_to_openlineage",
    "catalog_asset_uri",
    "dataset_name",
    "operator_lineage",
    "sanitize_catalog_uri",
]

#: the engine's catalog kind -> the scheme of its tables' asset URIs
CATALOG_SCHEMES = {"hive_metastore": "hive", "glue": "glue"}
HIVE_METASTORE_PORT = 9083
_NAME = re.compile(r"^[a-z0-9_]{1,255}$")

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


def catalog_asset_uri(kind: str, options: dict, catalog_table: str) -> str:
    """The asset URI of ``catalog_table`` (``"db.table"``) in the catalog of ``kind`` built from
    ``options`` (a catalog connection's: :meth:`~airflow_delta_provider.hooks.catalog.DeltaCatalogHook.catalog_options`)."""
    from airflow_delta_provider_apps.protocol import parse_table_name

    database, table = parse_table_name(catalog_table)
    if kind == "glue":
        region = options.get("region_name")
        if not region:  # boto3's own default (environment, profile), as the sync resolves it
            import boto3

            region = boto3.session.Session().region_name or "us-east-1"
        query = f"?catalog_id={options['catalog_id']}" if options.get("catalog_id") else ""
        return f"glue://{region.lower()}/{database}/{table}{query}"
    conf = options.get("spark_conf") or {}
    thrift = str(conf.get("spark.hadoop.hive.metastore.uris") or "").split(",")[0].strip()
    if thrift:
        where = urlsplit(thrift)
        authority = f"{where.hostname}:{where.port or HIVE_METASTORE_PORT}"
    else:  # the metastore's database: jdbc:postgresql://host:port/db, or an embedded Derby
        jdbc = str(conf.get("spark.hadoop.javax.jdo.option.ConnectionURL") or "")
        found = re.search(r"//([^/;?]+)", jdbc)
        authority = found.group(1) if found else "localhost"
    return f"{CATALOG_SCHEMES[kind]}://{authority.lower()}/{database}/{table}"


def sanitize_catalog_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler of the ``hive`` and ``glue`` schemes: ``<scheme>://<authority>/<database>/<table>``,
    host, database and table in lower case; anything else is refused (a ValueError in the DAG import)."""
    parts = [p for p in uri.path.split("/") if p]
    if not uri.netloc or len(parts) != 2 or not all(_NAME.match(p.lower()) for p in parts):
        where, example = (
            ("metastore host:port", "hive://metastore:9083/silver/orders")
            if uri.scheme == "hive"
            else ("region", "glue://eu-west-1/silver/orders")
        )
        raise ValueError(
            f"A {uri.scheme}:// asset URI names a catalog table as {uri.scheme}://<{where}>/<database>/<table> "
            f"(letters, digits, underscores), e.g. {example}; got {uri.geturl()!r}"
        )
    if uri.scheme == "glue" and {k for k, _ in parse_qsl(uri.query)} - {"catalog_id"}:
        raise ValueError(f"A glue:// asset URI takes only ?catalog_id=<account>; got {uri.geturl()!r}")
    return uri._replace(netloc=uri.netloc.lower(), path="/" + "/".join(p.lower() for p in parts))


def catalog_asset_to_openlineage(asset, lineage_context=None):
    """The OpenLineage dataset of a catalog table's asset, per OpenLineage's naming: Hive is namespace
    ``hive://host:port``, name ``database.table``; Glue is namespace ``arn:aws:glue:<region>:<account>``,
    name ``table/<database>/<table>`` (the account from ``catalog_id``; without one the namespace is
    ``glue://<region>``, the account not being in the URI)."""
    from openlineage.client.event_v2 import Dataset

    uri = urlsplit(asset.uri)
    database, table = [p for p in uri.path.split("/") if p]
    if uri.scheme == "glue":
        account = dict(parse_qsl(uri.query)).get("catalog_id")
        namespace = f"arn:aws:glue:{uri.netloc}:{account}" if account else f"glue://{uri.netloc}"
        return Dataset(namespace=namespace, name=f"table/{database}/{table}")
    return Dataset(namespace=f"hive://{uri.netloc}", name=f"{database}.{table}")
