"""The Spark Connect transport: the task is a Spark Connect client, its Spark work runs on the server.

Data flow (one :meth:`ConnectTransport.run`)::

    connection (``spark_connect``: host, port, token, user id, use_ssl; or a master ``sc://...``)
      -> the sc:// URL (the apache-spark provider's rules)                  connections.connect_url()
      -> a TCP probe of host:port: an unreachable server fails the task in seconds (retryable)
      -> the apps' zip (the same one spark-submit ships)                     build_app_bundle()
      -> one session: the run's Spark conf, the zip as an artifact           apps: ConnectRun
      -> the operation's runner in this process, Spark jobs on the server, the commit from here
      -> the result dict, the session released (also on failure and on_kill)

No spark-submit, no JVM and no Spark distribution on the worker: ``pyspark-client`` is enough. The
server's Python workers need pyarrow (as executors do under spark-submit). Object-store credentials
of ``storage_conn_id`` stay in this process for the log and the commit, and reach the server's
Python workers inside the tasks' serialized functions (as under spark-submit), never in a Spark
property, a plan string or a log line.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from airflow_delta_provider.exceptions import DeltaRetryableError
from airflow_delta_provider.hooks.bundle import build_app_bundle
from airflow_delta_provider.hooks.connections import CONNECT_CONN_TYPE, connect_url, is_connect, redacted_url
from airflow_delta_provider.hooks.transport import Transport, app_run
from airflow_delta_provider_apps.operations import OPERATIONS

__all__ = ["ConnectSettings", "ConnectTransport", "check_server_reachable"]

DEFAULT_PORT = 15002  # Spark Connect's


def check_server_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail in seconds, retryable, when nothing accepts a TCP connection at the URL's host and port
    (the gRPC client would otherwise back off through its retries first)."""
    parsed = urlparse(url)
    host, port = parsed.hostname, parsed.port or DEFAULT_PORT
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        raise DeltaRetryableError(
            "SparkInfrastructureError",
            f"Spark failed: cannot reach the Spark Connect server '{redacted_url(url)}'. Cause: {e.strerror or e}. "
            "Fix: check that the server is running and the connection's host and port; the task is retried.",
            retryable=True,
        ) from None


@dataclass(frozen=True)
class ConnectSettings:
    """What a Spark Connect connection means: the server's ``sc://`` URL (it may hold a token: log
    :func:`~airflow_delta_provider.hooks.connections.redacted_url` of it)."""

    url: str


class ConnectTransport(Transport):
    """How a task reaches Spark over Spark Connect (see the module docstring)."""

    name = "connect"
    conn_types = (CONNECT_CONN_TYPE,)
    #: bundle_dir: the apps zip's cache folder (the zip goes to the session as an artifact)
    options = ("bundle_dir",)

    def __init__(self, hook) -> None:
        super().__init__(hook)
        self._run = None
        self._settings: ConnectSettings | None = None

    @classmethod
    def serves(cls, conn) -> bool:
        return is_connect(conn)

    def settings(self) -> ConnectSettings:
        if self._settings is None:
            self._settings = ConnectSettings(connect_url(self.hook.get_conn()))
        return self._settings

    def deferral_blocker(self) -> str | None:
        return (
            "over Spark Connect the Delta engine runs in this task's process (the Connect client) and "
            "drives the server's Spark from there"
        )

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        from airflow_delta_provider_apps.protocol import ConnectRun

        url = self.settings().url
        if not OPERATIONS[operation].spark_needed(params):  # log only: no session, no server needed
            return app_run(lambda: ConnectRun(url).run(operation, table_uri, params), self.log)
        foreign = self.foreign_options()
        if foreign:
            self.log.warning(
                "%s: over Spark Connect they do not apply (the server's resources are its own; spark_conf "
                "sets the session's runtime properties)",
                " and ".join(foreign),
            )
        check_server_reachable(url)
        bundle = build_app_bundle(self.option("bundle_dir"))
        self._run = ConnectRun(
            url,
            conf={str(k): str(v) for k, v in self.hook.spark_conf.items()},
            pyfiles=(bundle.zip_path,),
            app_name=f"delta-{operation}",
        )
        self.log.info("Delta %s over Spark Connect at %s", operation, redacted_url(url))
        return app_run(lambda: self._run.run(operation, table_uri, params), self.log)

    def kill(self) -> None:
        """Interrupt the session's running operations and release it."""
        if self._run is not None:
            self._run.interrupt()
