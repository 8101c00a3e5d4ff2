"""How a connection reaches Spark: transport and Spark Connect URL, by connection type."""

from __future__ import annotations

import json

import pytest

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
