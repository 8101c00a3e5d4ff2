"""Asset URIs that name a catalog table (issue 41 item 2): ``hive://<metastore>/<db>/<table>`` and
``glue://<region>/<db>/<table>``, registered by the provider (``asset-uris``), normalised by Airflow's
Asset with our handler; an operator with ``catalog_table`` puts its commit on that asset's event as on
the table's, and leaves it to a Delta watcher that watches it. Operators run in the worker on the
real engine; no Spark, no catalog reached (a DELETE changes no column: nothing to sync)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.sdk import Asset
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_delta_provider.lineage import catalog_asset_to_openlineage, catalog_asset_uri
from airflow_delta_provider.operators.delta import DeltaDeleteOperator, delta_asset
from airflow_delta_provider.triggers.delta import delta_table_watcher
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow


@pytest.fixture
def conns(monkeypatch):
    for conn_id, conn in {
        "lake_glue": {"conn_type": "delta_glue", "extra": {"region_name": "eu-west-1"}},
        "metastore": {"conn_type": "delta_hive_metastore", "host": "MS.internal"},
    }.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_catalog_asset_uris_are_normalised_and_checked():
    # Airflow's Asset runs the provider's handler for its schemes
    assert Asset("hive://MS.internal:9083/Silver/Orders/").uri == "hive://ms.internal:9083/silver/orders"
    assert Asset("glue://EU-WEST-1/silver/orders?catalog_id=123").uri == "glue://eu-west-1/silver/orders?catalog_id=123"
    for bad in (
        "hive://ms:9083/silver",
        "hive:///silver/orders",
        "glue://eu-west-1/silver/orders/x",
        "hive://ms/a-b/c",
    ):
        with pytest.raises(ValueError, match="names a catalog table as"):
            Asset(bad)
    with pytest.raises(ValueError, match=r"takes only \?catalog_id"):
        Asset("glue://eu-west-1/silver/orders?account=1")


def test_the_uri_a_catalog_connection_gives():
    name = "Silver.Orders"
    assert catalog_asset_uri("glue", {"region_name": "eu-west-1"}, name) == "glue://eu-west-1/silver/orders"
    assert (
        catalog_asset_uri("glue", {"region_name": "eu-west-1", "catalog_id": "123"}, name)
        == "glue://eu-west-1/silver/orders?catalog_id=123"
    )
    thrift = {"spark_conf": {"spark.hadoop.hive.metastore.uris": "thrift://MS:9084,thrift://ms2:9083"}}
    assert catalog_asset_uri("hive_metastore", thrift, name) == "hive://ms:9084/silver/orders"
    pg = {"spark_conf": {"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:postgresql://pg:5432/metastore"}}
    assert catalog_asset_uri("hive_metastore", pg, name) == "hive://pg:5432/silver/orders"
    derby = {"spark_conf": {"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:;databaseName=/m;create=true"}}
    assert catalog_asset_uri("hive_metastore", derby, name) == "hive://localhost/silver/orders"
    # OpenLineage's naming of the same tables
    hive = catalog_asset_to_openlineage(Asset("hive://ms:9084/silver/orders"))
    glue = catalog_asset_to_openlineage(Asset("glue://eu-west-1/silver/orders?catalog_id=123"))
    assert (hive.namespace, hive.name) == ("hive://ms:9084", "silver.orders")
    assert (glue.namespace, glue.name) == ("arn:aws:glue:eu-west-1:123", "table/silver/orders")


def _table(tmp_path) -> str:
    root = str(tmp_path / "orders")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": list(range(10))}))
    return root


def _context(events):
    ti = SimpleNamespace(dag_id="lake", task_id="purge", run_id="r1", map_index=-1, try_number=1, max_tries=0)
    return {"outlet_events": events, "ti": ti, "run_id": "r1", "logical_date": None}


def test_the_commit_lands_on_the_catalog_named_asset_too(tmp_path, conns, capsys):
    root = _table(tmp_path)
    named, elsewhere = Asset("glue://eu-west-1/Silver/Orders"), Asset("glue://us-east-1/silver/orders")
    op = DeltaDeleteOperator(
        task_id="purge",
        table_uri=root,
        predicate="id < 4",
        execution="local",
        catalog_table="silver.orders",
        catalog_conn_id="lake_glue",
        outlets=[delta_asset(root), named, elsewhere],
    )
    events = OutletEventAccessors()
    result = op.execute(_context(events))
    table_extra, named_extra = events[delta_asset(root)].extra, events[named].extra
    assert result["version"] == 2 and table_extra["version"] == 2 and table_extra["rows_deleted"] == 4
    assert named_extra == {**table_extra, "table_uri": "file://" + root}
    # the same table named for another catalog: its event carries no commit, and the log says why
    assert events[elsewhere].extra == {}
    assert "glue://us-east-1/silver/orders names catalog table silver.orders but not as" in capsys.readouterr().out


def test_a_watched_catalog_asset_is_left_to_its_watcher(tmp_path, conns):
    root = _table(tmp_path)
    watched = Asset("hive://ms.internal:9083/silver/orders", watchers=[delta_table_watcher(root)])
    op = DeltaDeleteOperator(
        task_id="purge",
        table_uri=root,
        predicate="id < 4",
        execution="local",
        catalog_table="silver.orders",
        catalog_conn_id="metastore",
        outlets=[delta_asset(root), watched],
    )
    op.execute(_context(OutletEventAccessors()))
    assert [o.uri for o in op.outlets] == ["file://" + root]  # the watcher announces the commit on it
