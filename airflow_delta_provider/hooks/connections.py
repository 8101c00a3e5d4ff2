"""Airflow connections as the Delta hooks read them: the master, the extras, the transport.

Three connection types reach Spark: ``spark`` (the apache-spark provider's: spark-submit), the
provider's own ``delta_spark`` (the same, with the Delta fields in its form; a master ``sc://...``
means Spark Connect) and ``spark_connect`` (the apache-spark provider's Spark Connect type: host,
port, token as password, user id as login, ``use_ssl`` extra).
"""

from __future__ import annotations

import copy
from urllib.parse import urlparse

__all__ = [
    "CONNECT_CONN_TYPE",
    "DELTA_SPARK_CONN_TYPE",
    "RESULT_DIR_EXTRA",
    "as_spark_connection",
    "connect_url",
    "connection_extra",
    "is_connect",
    "master_from_connection",
    "redacted_url",
]

RESULT_DIR_EXTRA = "delta_result_dir"
CONNECT_CONN_TYPE = "spark_connect"
# The provider's own connection type: a ``spark`` connection whose form also has the Delta fields
# (the result folder). Both types work everywhere; SparkSubmitHook sees it as ``spark``.
DELTA_SPARK_CONN_TYPE = "delta_spark"


def as_spark_connection(conn):
    """``conn`` as SparkSubmitHook expects it: a ``delta_spark`` connection is read as ``spark``."""
    if getattr(conn, "conn_type", None) != DELTA_SPARK_CONN_TYPE:
        return conn
    spark = copy.copy(conn)
    spark.conn_type = "spark"
    return spark


def connection_extra(extra: dict, name: str):
    """An extra field's value, stored by name or with the UI form's ``extra__<type>__`` prefix."""
    return extra.get(name) or extra.get(f"extra__{DELTA_SPARK_CONN_TYPE}__{name}")


def master_from_connection(conn) -> str:
    """The Spark master URL, exactly as SparkSubmitHook derives it from a connection."""
    conn = as_spark_connection(conn)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def is_connect(conn) -> bool:
    """Whether tasks on ``conn`` reach Spark over Spark Connect: a ``spark_connect`` connection, or
    a ``spark``/``delta_spark`` one whose master is ``sc://...``."""
    if getattr(conn, "conn_type", None) == CONNECT_CONN_TYPE:
        return True
    return master_from_connection(conn).startswith("sc://")


def connect_url(conn) -> str:
    """The ``sc://`` URL of a Spark Connect connection, by the apache-spark provider's rules
    (``SparkConnectHook.get_connection_url``: host, port, ``user_id`` from the login, ``token`` from
    the password, ``use_ssl`` extra); a ``delta_spark``/``spark`` master ``sc://...`` is used as given.
    It may hold a token: log :func:`redacted_url` instead."""
    if getattr(conn, "conn_type", None) != CONNECT_CONN_TYPE:
        # the master as given; a separate port goes into the address, before a ";token=..." part
        parsed = urlparse(conn.host or "")
        if conn.port and parsed.port is None and parsed.netloc:
            return parsed._replace(netloc=f"{parsed.netloc}:{conn.port}").geturl()
        return conn.host if parsed.port is not None else master_from_connection(conn)
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    class _Given(SparkConnectHook):
        """The provider's URL rules applied to ``conn`` as given (no second lookup), its host
        written ``sc://host``: apache-spark provider 5.0 drops a bare host when a port is set."""

        def get_connection(self, conn_id):
            return given

    given = copy.copy(conn)
    if given.host and "://" not in given.host:
        given.host = f"sc://{given.host}"
    return _Given(conn.conn_id).get_connection_url()


def redacted_url(url: str) -> str:
    """``sc://host:port`` of a Connect URL: what a log line or an error may show (no token)."""
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"
