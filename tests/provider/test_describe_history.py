"""DeltaDescribeOperator and DeltaHistoryOperator: the table's state and commits read from its log in
the worker (no Spark on any connection type, nothing written), compared with deltalake's reading of
the same table; a JSON XCom; bad arguments refused at DAG parse time; a table on an object store
(moto's S3 on loopback) read with the storage connection's credentials alone."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from airflow_delta_provider.exceptions import DeltaPermanentError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.operators.delta import (
    HISTORY_LIMIT,
    DeltaDeleteOperator,
    DeltaDescribeOperator,
    DeltaHistoryOperator,
)
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow

deltalake = pytest.importorskip("deltalake")


@pytest.fixture
def no_spark(monkeypatch):
    """Reaching Spark (spark-submit or Spark Connect, attached or deferred) fails the test."""
    for name in ("run", "start"):
        monkeypatch.setattr(DeltaHook, name, lambda *a, **k: pytest.fail("Spark was reached"))


def _table(root: str) -> None:
    """Four commits: ours (create, append, a DELETE with user metadata) and one by deltalake."""
    create_table(root, schema="id BIGINT, dt STRING", partition_by=["dt"], description="events by day")
    append_arrow(root, pa.table({"id": [1, 2, 3], "dt": ["a", "a", "b"]}))
    DeltaDeleteOperator(
        task_id="d", table_uri=root, predicate="id = 2", user_metadata="erase 2", execution="local"
    ).execute({})
    deltalake.write_deltalake(root, pa.table({"id": [4], "dt": ["c"]}), mode="append", partition_by=["dt"])


@pytest.mark.parametrize(
    "conn",
    [
        {"conn_type": "spark", "host": "local[1]"},
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 9},  # nothing listens there
        {"conn_type": "delta_spark", "host": "sc://127.0.0.1", "port": 9},
    ],
    ids=["spark", "spark_connect", "delta_spark_sc"],
)
def test_describe_and_history_read_the_log_in_the_worker_on_every_connection(tmp_path, monkeypatch, no_spark, conn):
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_T", json.dumps(conn))
    root = str(tmp_path / "t")
    _table(root)
    listing = sorted(os.listdir(tmp_path / "t" / "_delta_log"))
    theirs = deltalake.DeltaTable(root)

    described = DeltaDescribeOperator(task_id="describe", table_uri=root, conn_id="delta_t").execute({})
    assert json.loads(json.dumps(described)) == described  # the XCom as Airflow stores it
    assert (described["operation"], described["version"], described["transport"]) == ("DESCRIBE DETAIL", 3, "local")
    detail = described["detail"]
    assert (detail["version"], detail["num_files"]) == (theirs.version(), len(theirs.file_uris()))
    assert detail["partition_columns"] == theirs.metadata().partition_columns == ["dt"]
    assert [f["name"] for f in detail["schema"]["fields"]] == [f.name for f in theirs.schema().fields]
    assert (detail["id"], detail["description"]) == (theirs.metadata().id, "events by day")
    sizes = theirs.get_add_actions(flatten=True).column("size_bytes").to_pylist()
    assert detail["size_in_bytes"] == sum(sizes)

    history = DeltaHistoryOperator(task_id="history", table_uri=root, conn_id="delta_t").execute({})
    assert json.loads(json.dumps(history)) == history
    assert (history["operation"], history["version"], history["transport"]) == ("DESCRIBE HISTORY", 3, "local")
    ours = [(c["version"], c["operation"]) for c in history["history"]]
    assert ours == [(c["version"], c["operation"]) for c in theirs.history()]
    assert ours == [(3, "WRITE"), (2, "DELETE"), (1, "WRITE"), (0, "CREATE TABLE")]
    assert history["history"][1]["userMetadata"] == "erase 2"
    assert history["history"][1]["operationMetrics"]["numDeletedRows"] == "1"
    assert history["history"][0]["engineInfo"].startswith("delta-rs")  # another writer's commit, as it wrote it
    newest = DeltaHistoryOperator(task_id="history", table_uri=root, conn_id="delta_t", limit=2).execute({})
    assert [c["version"] for c in newest["history"]] == [3, 2] and newest["version"] == 3

    assert sorted(os.listdir(tmp_path / "t" / "_delta_log")) == listing  # nothing written, no checkpoint


def test_bad_arguments_fail_the_dag_import_and_a_missing_table_fails_without_retry(tmp_path, no_spark):
    with pytest.raises(ValueError, match=r"limit=-1: pass a number of commits from 0 up"):
        DeltaHistoryOperator(task_id="h", table_uri="/lake/t", limit=-1)
    with pytest.raises(ValueError, match="limit='ten' is not an integer"):
        DeltaHistoryOperator(task_id="h", table_uri="/lake/t", limit="ten")
    for op in (DeltaDescribeOperator, DeltaHistoryOperator):
        with pytest.raises(ValueError, match="user_metadata given, but .* commits nothing"):
            op(task_id="x", table_uri="/lake/t", user_metadata="m")
    templated = DeltaHistoryOperator(task_id="h", table_uri="/lake/t", limit="{{ params.n }}")
    assert "limit" in templated.template_fields and templated.execution == "local"
    assert DeltaHistoryOperator(task_id="h", table_uri="/lake/t").limit == HISTORY_LIMIT
    assert DeltaHistoryOperator(task_id="h", table_uri="/lake/t", limit=None).limit is None  # every commit

    missing = tmp_path / "none"
    for op in (DeltaDescribeOperator, DeltaHistoryOperator):
        with pytest.raises(DeltaPermanentError, match="TableNotFoundError"):
            op(task_id="x", table_uri=str(missing)).execute({})
    assert not missing.exists()


def test_a_table_on_s3_is_read_with_the_storage_connection_alone(s3_server, monkeypatch, no_spark):
    """The worker reaches the store with ``storage_conn_id``'s credentials; the process environment
    holds none before or after."""
    from object_store_servers import S3Env

    from airflow_delta_provider_apps.protocol import storage_settings

    s3 = S3Env(s3_server, s3_server.new_bucket())
    for name in s3.env:
        monkeypatch.delenv(name, raising=False)
    root = s3.uri("events")
    with storage_settings(s3.env):
        create_table(root, schema="id BIGINT")
        append_arrow(root, pa.table({"id": [1, 2]}))
    conn = {
        "conn_type": "aws",
        "login": s3.env["AWS_ACCESS_KEY_ID"],
        "password": s3.env["AWS_SECRET_ACCESS_KEY"],
        "extra": {"region_name": "us-east-1", "endpoint_url": s3_server.endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_H", json.dumps(conn))

    described = DeltaDescribeOperator(task_id="d", table_uri=root, storage_conn_id="lake_s3_h").execute({})
    history = DeltaHistoryOperator(task_id="h", table_uri=root, storage_conn_id="lake_s3_h").execute({})
    theirs = deltalake.DeltaTable(root, storage_options=s3.deltalake_options)
    assert (described["detail"]["version"], described["detail"]["num_files"]) == (1, len(theirs.file_uris()))
    assert [(c["version"], c["operation"]) for c in history["history"]] == [(1, "WRITE"), (0, "CREATE TABLE")]
    assert not any(name in os.environ for name in s3.env)
