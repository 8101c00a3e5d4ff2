"""Airflow connections as the Delta hooks read them: the master, the extras, the transport.

Three connection types reach Spark: ``spark`` (the apache-spark provider's: spark-submit), the
provider's own ``delta_spark`` (the same, with the Delta fields in its form; a master ``sc://...``
means Spark Connect) and ``spark_connect`` (the apache-spark provider's Spark Connect type: host,
port, token as password, user id as login, ``use_ssl`` extra).
"""

from __future__ import annotations

import copy
import difflib
import os
import sys
from urllib.parse import urlparse

from airflow_delta_provider.exceptions import DeltaConfigurationError

__all__ = [
    "CONNECT_CONN_TYPE",
    "DELTA_SPARK_CONN_TYPE",
    "RESULT_DIR_EXTRA",
    "as_spark_connection",
    "connect_url",
    "connection_extra",
    "connection_ids",
    "is_connect",
    "master_from_connection",
    "missing_connection",
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


def connection_ids() -> list[str]:
    """The ids of the connections this process can list, sorted: the ``AIRFLOW_CONN_*`` variables
    (Airflow's prefix) and, outside a task, the metadata database's. A task cannot list more: Airflow
    3 keeps it off the database (it asks the API server for one id at a time), and secrets backends
    have no listing."""
    from airflow.secrets.environment_variables import CONN_ENV_PREFIX

    ids = set()
    for name in os.environ:
        if name.startswith(CONN_ENV_PREFIX):  # AIRFLOW_CONN_<ID>, or AIRFLOW_CONN__<TEAM>___<ID>
            ids.add(name[len(CONN_ENV_PREFIX) :].rpartition("___")[2].lower())
    if not _in_task():
        ids.update(_database_connection_ids())
    return sorted(i for i in ids if i)


def _in_task() -> bool:
    """Whether this process runs a task (its supervisor's channel is set), where the database is off limits."""
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(runner, "SUPERVISOR_COMMS", None) is not None


def _database_connection_ids() -> list[str]:
    """The metadata database's connection ids: one query of its table on Airflow's engine (the ORM's
    set-up of every model would cost about a second)."""
    try:
        from airflow import settings
        from airflow.models.connection import Connection
        from sqlalchemy import select

        with settings.engine.connect() as db:
            return list(db.execute(select(Connection.__table__.c.conn_id)).scalars())
    except Exception:  # no database here (or not set up): the variables are what can be listed
        return []


def missing_connection(conn_id: str, problem: str, cause: str, define: str) -> DeltaConfigurationError:
    """The error for a connection id Airflow does not know (permanent: a retry finds no more):
    ``problem`` and ``cause`` as given; the fix suggests the closest ids there are ("did you mean"),
    else lists them, else says how to ``define`` it."""
    known = connection_ids()
    close = difflib.get_close_matches(conn_id.lower(), known, n=3, cutoff=0.75)
    scope = (
        "" if not _in_task() else " (a task lists only AIRFLOW_CONN_* variables; `airflow connections list` shows all)"
    )
    if close:
        fix = f"did you mean {' or '.join(repr(c) for c in close)}? Correct the conn_id, or {define}"
    elif known:
        shown = ", ".join(repr(c) for c in known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        fix = f"use one of the connections there are{scope}: {shown}; or {define}"
    else:
        fix = f"{define}; no connection was found to suggest{scope}"
    return DeltaConfigurationError(problem, cause, fix)
