"""Where a catalog sync runs (issue 41 item 2): a Hive metastore's in the Spark app that made the
commit, in its own session (the run's ``catalog`` parameter, one registry-declared value); Glue's and
every sync without such a session in the worker. No Spark here: the app's side is proven end to end
by tests/spark/test_hive_catalog.py; these are the rules, the parameter and the operator's handling of
the app's result."""

from __future__ import annotations

import json
import os

import pytest

from airflow_delta_provider.exceptions import DeltaConfigurationError, DeltaRetryableError
from airflow_delta_provider.hooks.catalog import DeltaCatalogHook
from airflow_delta_provider.operators.delta import DeltaCreateTableOperator, DeltaDeleteOperator
from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.cli import parse_args, run_in_process
from airflow_delta_provider_apps.engine import DeltaTable, InvalidArgumentError
from airflow_delta_provider_apps.engine.catalog import session_conf, sync_in_session

METASTORE = {"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:;databaseName=/tmp/ms;create=true"}


@pytest.fixture
def conns(monkeypatch):
    def define(conn_id: str, conn: dict) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))

    define("hive_ms", {"conn_type": "delta_hive_metastore", "extra": {"spark_conf": METASTORE}})
    define("hive_thrift", {"conn_type": "delta_hive_metastore", "host": "metastore", "port": 9083})
    define(
        "hive_pg",
        {
            "conn_type": "delta_hive_metastore",
            "extra": {"spark_conf": {**METASTORE, "spark.hadoop.javax.jdo.option.ConnectionPassword": "s3cret"}},
        },
    )
    define("lake_glue", {"conn_type": "delta_glue", "extra": {"region_name": "eu-west-1"}})
    return define


def test_the_catalog_travels_as_one_registry_value(conns):
    spec = DeltaCatalogHook("hive_ms").session_spec("Silver.Orders", always=True)
    assert spec == {
        "kind": "hive_metastore",
        "table": "Silver.Orders",
        "options": {"spark_conf": METASTORE},
        "always": True,
    }
    thrift = DeltaCatalogHook("hive_thrift").session_spec("silver.orders", always=False)
    assert thrift["options"] == {"spark_conf": {"spark.hadoop.hive.metastore.uris": "thrift://metastore:9083"}}
    # Glue syncs in the worker (boto3); a secret never goes on a Spark app's command line
    assert DeltaCatalogHook("lake_glue").session_spec("silver.orders", always=True) is None
    assert DeltaCatalogHook("hive_pg").session_spec("silver.orders", always=True) is None

    # one common argument of the registry, carried whole by the app's --spec-json
    assert "catalog" in [a.name for a in ops.COMMON_ARGS]
    params = parse_args(
        ["create-table", "--spec-json", json.dumps({"table_uri": "/t", "schema": "id INT", "catalog": spec})]
    )
    assert params["catalog"] == spec
    # the app's session: Hive support and the metastore's settings
    assert session_conf(spec) == {**METASTORE, "spark.sql.catalogImplementation": "hive"}
    assert session_conf(None) == {}
    assert session_conf({**spec, "kind": "glue", "options": {"region_name": "eu-west-1"}}) == {}


def test_a_bad_catalog_parameter_fails_before_anything_is_written(tmp_path):
    root = str(tmp_path / "t")
    for bad, problem in (
        ({"kind": "hive_metastore"}, "The catalog parameter is not a catalog spec"),
        ({"kind": "unity", "table": "a.b"}, "Unknown catalog kind 'unity'"),
        ({"kind": "glue", "table": "a.b.c"}, "Catalog table name 'a.b.c' is not 'database.table'"),
    ):
        with pytest.raises(InvalidArgumentError) as e:
            run_in_process("create-table", root, {"schema": "id INT", "catalog": bad})
        assert e.value.problem == problem
        assert not os.path.exists(root)


def test_without_a_session_the_app_leaves_the_sync_to_the_worker(tmp_path):
    spec = {"kind": "hive_metastore", "table": "silver.t", "options": {"spark_conf": METASTORE}, "always": True}
    result = run_in_process("create-table", str(tmp_path / "t"), {"schema": "id INT", "catalog": spec})
    assert result["version"] == 0 and "catalog" not in result  # no session here: the worker syncs
    # nothing to sync: not "always", and the commit changed no column
    landed = {"version": 3, "committed": True}
    assert sync_in_session({**spec, "always": False}, str(tmp_path / "t"), landed, spark=object()) is landed


def test_where_a_run_with_a_hive_catalog_goes(conns, monkeypatch, tmp_path):
    root = str(tmp_path / "orders")

    def create(catalog_conn_id: str) -> DeltaCreateTableOperator:
        return DeltaCreateTableOperator(
            task_id="create",
            table_uri=root,
            schema="id INT",
            catalog_table="silver.orders",
            catalog_conn_id=catalog_conn_id,
            conn_id="spark_x",
        )

    # no Spark connection: the worker runs it and syncs in a local session
    op = create("hive_ms")
    assert op.runs_in_worker(op.operation_params({})) is True
    # with one: CREATE TABLE from a schema needs no Spark, its Hive sync does: it goes to Spark
    conns("spark_x", {"conn_type": "spark", "host": "local[1]"})
    op = create("hive_ms")
    assert op.runs_in_worker(op.operation_params({})) is False
    assert op._catalog_spec()["always"] is True
    # Glue, or a metastore whose settings hold a secret: the worker
    for conn_id in ("lake_glue", "hive_pg"):
        op = create(conn_id)
        assert op.runs_in_worker(op.operation_params({})) is True
    # a DELETE by partition never changes the schema: it stays in the worker, nothing to sync
    DeltaTable.create(None, root, schema="id INT, day STRING", partition_by=["day"])
    delete = DeltaDeleteOperator(
        task_id="d",
        table_uri=root,
        predicate="day = 'x'",
        catalog_table="silver.orders",
        catalog_conn_id="hive_ms",
        conn_id="spark_x",
    )
    assert delete.runs_in_worker(delete.operation_params({})) is True
    # a missing catalog connection fails before anything runs
    op = create("nowhere")
    with pytest.raises(DeltaConfigurationError, match="Catalog connection 'nowhere' does not exist"):
        op.runs_in_worker(op.operation_params({}))


def test_the_operator_takes_the_apps_sync_and_fails_retryably_on_its_error(conns, tmp_path):
    root = str(tmp_path / "orders")
    DeltaTable.create(None, root, schema="id INT")
    op = DeltaCreateTableOperator(
        task_id="create", table_uri=root, schema="id INT", catalog_table="silver.orders", catalog_conn_id="hive_ms"
    )
    synced = {"catalog": "hive_metastore", "table": "silver.orders", "action": "created", "version": 0}
    result = {"status": "ok", "table_uri": root, "version": 0, "committed": True, "catalog": synced}
    assert op._report({}, result)["catalog"] == synced  # taken as it is: no sync (no Spark) here

    error = "Catalog table silver.orders (hive_metastore) already exists and is another table. Cause: x. Fix: y."
    failed = {
        **result,
        "catalog": {"catalog": "hive_metastore", "table": "silver.orders", "error": error, "retryable": True},
    }
    with pytest.raises(DeltaRetryableError) as e:
        op._report({}, failed)
    assert e.value.retryable and e.value.result["version"] == 0
    assert e.value.message == (
        "The table's commit (version 0) landed, but syncing catalog table silver.orders (hive_ms) failed: "
        f"{error[:-1]}. Fix: see the cause; the retry syncs the catalog only, it commits nothing again."
    )
