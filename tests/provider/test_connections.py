"""How a connection reaches Spark: transport and Spark Connect URL, by connection type."""

from __future__ import annotations

import json
import os

import pytest

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.connections import connect_url, is_connect, redacted_url
from airflow_delta_provider.hooks.delta import DeltaHook


@pytest.mark.parametrize(
    "body, connect, url",
    [
        ({"conn_type": "spark", "host": "local[2]"}, False, None),
        ({"conn_type": "spark", "host": "yarn"}, False, None),
        ({"conn_type": "delta_spark", "host": "spark://m", "port": 7077}, False, None),
        ({"conn_type": "delta_spark", "host": "sc://h", "port": 15002}, True, "sc://h:15002"),
        ({"conn_type": "delta_spark", "host": "sc://h:1234/;token=t"}, True, "sc://h:1234/;token=t"),
        ({"conn_type": "delta_spark", "host": "sc://h/;token=t", "port": 15002}, True, "sc://h:15002/;token=t"),
        (
            {"conn_type": "spark_connect", "host": "h", "port": 15002, "login": "me", "password": "s3cr t"},
            True,
            "sc://h:15002/;user_id=me;token=s3cr%20t",
        ),
        ({"conn_type": "spark_connect", "host": "h", "extra": {"use_ssl": True}}, True, "sc://h/;use_ssl=True"),
    ],
)
def test_the_transport_and_url_follow_the_connection(monkeypatch, body, connect, url):
    monkeypatch.setenv("AIRFLOW_CONN_THE_CONN", json.dumps(body))
    hook = DeltaHook("the_conn")
    conn = hook.get_conn()
    assert is_connect(conn) is connect
    assert hook.transport_for_connection().name == ("connect" if connect else "spark-submit")
    if connect:
        assert connect_url(conn) == url
        assert "token" not in redacted_url(url) and redacted_url(url).startswith("sc://h")


# ------------------------------------------------------------------------------------------------
# a conn_id Airflow does not know: a permanent error at once, naming the connection meant


def _define(monkeypatch, **bodies) -> None:
    """Real env-var connections (Airflow's AIRFLOW_CONN_<ID>), and none other of that prefix."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_"):
            monkeypatch.delenv(name)
    for conn_id, body in bodies.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))


CONNECT = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002}
LOCAL = {"conn_type": "spark", "host": "local[2]"}


def test_a_misspelt_conn_id_fails_first_with_did_you_mean(monkeypatch, tmp_path):
    """The operator resolves its connection before anything else: the error names the connection
    meant, and it comes before the source is read (a missing one), the table's log is read, a transport
    is chosen or a Spark session or application is started; it is permanent (Airflow does not retry)."""
    from airflow_delta_provider.exceptions import AirflowFailException
    from airflow_delta_provider.operators.delta import DeltaWriteOperator

    _define(monkeypatch, spark_connect=CONNECT, spark_local=LOCAL)
    op = DeltaWriteOperator(
        task_id="w", table_uri=str(tmp_path / "t"), source=str(tmp_path / "missing.parquet"), conn_id="spark_conect"
    )
    with pytest.raises(DeltaConfigurationError) as e:
        op.execute({})
    assert isinstance(e.value, AirflowFailException)
    message = str(e.value)
    assert "Spark connection 'spark_conect' does not exist" in message
    assert "did you mean 'spark_connect'?" in message and "spark_local" not in message
    assert "hook" not in op.__dict__  # nothing was prepared: no spark-submit, no Connect session, no in-process run
    assert not (tmp_path / "t").exists()


def test_without_a_close_one_the_connections_there_are_are_listed(monkeypatch):
    _define(monkeypatch, spark_local=LOCAL, lake_s3={"conn_type": "aws"})
    with pytest.raises(DeltaConfigurationError) as e:
        DeltaHook("warehouse").get_conn()
    assert "there are: 'lake_s3', 'spark_local'; or define it, e.g. AIRFLOW_CONN_WAREHOUSE=" in str(e.value)
    _define(monkeypatch)
    with pytest.raises(DeltaConfigurationError, match="no connection was found to suggest"):
        DeltaHook("warehouse").get_conn()


def test_connections_of_the_metadata_database_are_suggested_outside_a_task(monkeypatch, tmp_path):
    """A connection kept in the metadata database (here a real SQLite one as Airflow's engine) is
    suggested where this process may read the database; in a task (Airflow 3 keeps it off the
    database) only the variables are, and the error says so."""
    import sqlalchemy
    from airflow import settings
    from airflow.models.connection import Connection
    from airflow.sdk.execution_time import task_runner

    from airflow_delta_provider.hooks.connections import connection_ids, missing_connection

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    Connection.__table__.create(engine)
    with engine.begin() as db:
        db.execute(Connection.__table__.insert().values(conn_id="spark_cluster", conn_type="spark"))
    monkeypatch.setattr(settings, "engine", engine, raising=False)
    _define(monkeypatch, spark_local=LOCAL)
    assert connection_ids() == ["spark_cluster", "spark_local"]
    error = missing_connection("spark_clustr", "Spark connection 'spark_clustr' does not exist", "c", "define it")
    assert error.message.endswith("Fix: did you mean 'spark_cluster'? Correct the conn_id, or define it.")
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)  # this process runs a task
    assert connection_ids() == ["spark_local"]
    error = missing_connection("spark_clustr", "Spark connection 'spark_clustr' does not exist", "c", "define it")
    assert "a task lists only AIRFLOW_CONN_* variables; `airflow connections list` shows all): 'spark_local'" in (
        error.message
    )


def test_a_misspelt_storage_conn_id_names_the_connection_meant(monkeypatch):
    _define(monkeypatch, spark_local=LOCAL, lake_s3={"conn_type": "aws"})
    with pytest.raises(DeltaConfigurationError) as e:
        DeltaHook("spark_local", storage_conn_id="lake_s4").storage_env()
    assert "Storage connection 'lake_s4' does not exist" in str(e.value)
    assert "did you mean 'lake_s3'?" in str(e.value)
