"""The AWS Glue Data Catalog (issue 41 item 2), against moto's Glue server on loopback: the entry
Athena reads as a native Delta table, kept in sync by the tasks that change the table; a sync that
fails after a landed commit is retried without committing again. No Spark: the operators run in
the worker (log-only operations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import boto3
import pytest
from object_store_servers import S3Server, free_port

from airflow_delta_provider.exceptions import DeltaRetryableError
from airflow_delta_provider.operators.delta import (
    DeltaChangeColumnTypeOperator,
    DeltaCreateTableOperator,
    DeltaRegisterTableOperator,
    DeltaRenameColumnOperator,
)
from airflow_delta_provider_apps.engine import DeltaTable, InvalidArgumentError
from airflow_delta_provider_apps.engine.catalog import entry_for
from airflow_delta_provider_apps.engine.catalog.glue import GlueCatalog

SCHEMA = "id INT, amount DECIMAL(12,2), seen TIMESTAMP_NTZ, tags ARRAY<STRING>, addr STRUCT<city: STRING>, day DATE"


@pytest.fixture(scope="module")
def moto_server():
    server = S3Server()  # moto's standalone server answers every service it mocks, Glue included
    yield server
    server.stop()


@pytest.fixture
def glue(moto_server):
    return boto3.client(
        "glue",
        endpoint_url=moto_server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def glue_conn(moto_server, monkeypatch):
    """An Airflow connection of type delta_glue (an environment variable, as a deployment defines it)."""

    def define(endpoint: str) -> None:
        conn = {
            "conn_type": "delta_glue",
            "host": endpoint,
            "login": "testing",
            "password": "testing",
            "extra": {"region_name": "us-east-1"},
        }
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_GLUE", json.dumps(conn))

    define(moto_server.endpoint)
    return define


def _context(task_id: str, try_number=1):
    ti = SimpleNamespace(dag_id="lake", task_id=task_id, map_index=-1, try_number=try_number, max_tries=2, run_id="r1")
    return {"ti": ti, "logical_date": datetime(2026, 3, 1, tzinfo=UTC), "run_id": "r1"}


def _columns(table: dict) -> list[tuple[str, str]]:
    return [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]


def test_glue_entry_is_athenas_native_delta_table_and_follows_the_log(tmp_path, glue):
    root = str(tmp_path / "orders")
    t = DeltaTable.create(None, root, schema=SCHEMA, partition_by=["day"], description="orders by day")
    catalog = GlueCatalog(client=glue)
    assert catalog.sync(entry_for("Sales.Orders", root, t.snapshot()))["action"] == "created"

    got = glue.get_table(DatabaseName="sales", Name="orders")["Table"]  # Glue lower-cases names
    assert got["TableType"] == "EXTERNAL_TABLE"
    assert got["Parameters"]["table_type"] == "DELTA"
    assert got["Parameters"]["spark.sql.sources.provider"] == "delta"
    assert got["StorageDescriptor"]["Location"] == "file:" + root
    assert got["StorageDescriptor"]["SerdeInfo"]["Parameters"] == {"path": "file:" + root}
    assert got["Description"] == "orders by day"
    # the Delta schema as Hive types (written out by hand: Spark's names for the metastore)
    assert _columns(got) == [
        ("id", "int"),
        ("amount", "decimal(12,2)"),
        ("seen", "timestamp"),
        ("tags", "array<string>"),
        ("addr", "struct<city:string>"),
    ]
    assert [(c["Name"], c["Type"]) for c in got["PartitionKeys"]] == [("day", "date")]

    assert catalog.sync(entry_for("sales.orders", root, t.snapshot()))["action"] == "unchanged"
    t.change_column_type("id", "bigint")
    assert catalog.sync(entry_for("sales.orders", root, t.snapshot()))["action"] == "updated"
    assert _columns(glue.get_table(DatabaseName="sales", Name="orders")["Table"])[0] == ("id", "bigint")

    # the name holds this table: another table under it is refused, the entry left as it is
    other = str(tmp_path / "other")
    o = DeltaTable.create(None, other, schema="x INT")
    with pytest.raises(InvalidArgumentError, match="already exists and is another table"):
        catalog.sync(entry_for("sales.orders", other, o.snapshot()))
    assert (
        glue.get_table(DatabaseName="sales", Name="orders")["Table"]["StorageDescriptor"]["Location"] == "file:" + root
    )


def test_operators_keep_the_glue_entry_in_sync_and_a_failed_sync_is_retried_without_a_commit(tmp_path, glue, glue_conn):
    root = str(tmp_path / "customers")
    create = DeltaCreateTableOperator(
        task_id="create",
        table_uri=root,
        schema="id INT, name STRING",
        properties={"delta.columnMapping.mode": "name"},
        catalog_table="crm.customers",
        catalog_conn_id="lake_glue",
    )
    created = create.execute(_context("create"))
    assert created["catalog"] == {"catalog": "glue", "table": "crm.customers", "action": "created", "version": 0}
    assert _columns(glue.get_table(DatabaseName="crm", Name="customers")["Table"]) == [
        ("id", "int"),
        ("name", "string"),
    ]

    widen = DeltaChangeColumnTypeOperator(
        task_id="widen",
        table_uri=root,
        column="id",
        new_type="BIGINT",
        catalog_table="crm.customers",
        catalog_conn_id="lake_glue",
    )
    widened = widen.execute(_context("widen"))
    assert widened["schema_changes"] and widened["catalog"]["action"] == "updated"
    assert _columns(glue.get_table(DatabaseName="crm", Name="customers")["Table"])[0] == ("id", "bigint")

    # the catalog is down when the rename has landed: the task fails retryably, the commit stays
    glue_conn(f"http://127.0.0.1:{free_port()}")
    rename = dict(task_id="rename", table_uri=root, column="name", new_name="full_name", retries=1)
    rename.update(catalog_table="crm.customers", catalog_conn_id="lake_glue")
    with pytest.raises(DeltaRetryableError, match="landed, but syncing catalog table crm.customers"):
        DeltaRenameColumnOperator(**rename).execute(_context("rename", try_number=1))
    assert DeltaTable.for_path(None, root).version() == 2
    assert _columns(glue.get_table(DatabaseName="crm", Name="customers")["Table"])[1] == ("name", "string")
    # the retry finds the landed commit, commits nothing and syncs
    glue_conn(glue.meta.endpoint_url)
    retried = DeltaRenameColumnOperator(**rename).execute(_context("rename", try_number=2))
    assert (retried["skipped"], retried["version"], retried["catalog"]["action"]) == (True, 2, "updated")
    assert DeltaTable.for_path(None, root).version() == 2
    assert _columns(glue.get_table(DatabaseName="crm", Name="customers")["Table"])[1] == ("full_name", "string")


def test_register_an_existing_table_and_bad_catalog_arguments_fail_at_parse_time(tmp_path, glue, glue_conn):
    root = str(tmp_path / "events")
    DeltaTable.create(None, root, schema="id BIGINT, kind STRING, day DATE", partition_by=["day"])
    register = DeltaRegisterTableOperator(
        task_id="register", table_uri=root, catalog_table="raw.events", catalog_conn_id="lake_glue"
    )
    result = register.execute(_context("register"))
    assert result["catalog"]["action"] == "created" and result["detail"]["version"] == 0
    got = glue.get_table(DatabaseName="raw", Name="events")["Table"]
    assert _columns(got) == [("id", "bigint"), ("kind", "string")]
    assert register.execute(_context("register"))["catalog"]["action"] == "unchanged"

    with pytest.raises(ValueError, match="is not 'database.table'"):
        DeltaRegisterTableOperator(task_id="r", table_uri=root, catalog_table="events", catalog_conn_id="lake_glue")
    with pytest.raises(ValueError, match="catalog_table given without catalog_conn_id"):
        DeltaCreateTableOperator(task_id="c", table_uri=root, schema="id INT", catalog_table="raw.events")
