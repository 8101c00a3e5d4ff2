"""How a task reaches Spark: one small interface, one implementation per way.

:class:`Transport` runs one operation of the bundled apps and returns its result dict (the app
protocol's ``{"status": "ok", "operation", "table_uri", "version", "skipped", "committed",
"metrics", ...}``), or raises :class:`~airflow_delta_provider.exceptions.DeltaRetryableError` /
:class:`~airflow_delta_provider.exceptions.DeltaPermanentError`. The hook picks one per run:

* :class:`~airflow_delta_provider.hooks.submit.SubmitTransport`: a Spark application per task
  (spark-submit over a ``spark``/``delta_spark`` connection);
* :class:`~airflow_delta_provider.hooks.connect.ConnectTransport`: the task is a Spark Connect
  client, its Spark work runs on the server (a ``spark_connect`` connection, or a master ``sc://``);
* :class:`LocalTransport`: in the worker's process, no Spark (``execution="local"``: log-only work and
  DELETE/UPDATE/OPTIMIZE rewritten by a thread pool).
"""

from __future__ import annotations

import time
from typing import Any

from airflow_delta_provider.exceptions import app_error

__all__ = ["LocalTransport", "Transport", "app_run"]


class Transport:
    """One way for a task to reach Spark (see the module docstring)."""

    #: the transport's name in the task log and the result's ``transport``
    name = ""

    def __init__(self, hook) -> None:  # the DeltaHook whose connection and settings it uses
        self.hook = hook
        self.log = hook.log

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        raise NotImplementedError

    @property
    def application_url(self) -> str | None:
        """The running application's web page, when there is one (the operators' extra link)."""
        return None

    def on_kill(self) -> None:
        """Stop the running work (the task's ``on_kill``)."""


def app_run(call, log):
    """``call()`` (an app run in this process), its DeltaError raised as the task error Airflow
    acts on (retryable or permanent), its progress events in the task log, ``run_seconds`` added."""
    from airflow_delta_provider.hooks.outcome import progress_text
    from airflow_delta_provider_apps.protocol import DeltaError, progress_to

    started = time.monotonic()
    try:
        with progress_to(lambda event: log.info("%s", progress_text(event))):
            result = call()
    except DeltaError as e:
        cause = e.__cause__
        if cause is not None and not isinstance(cause, DeltaError):  # unexpected: its trace helps
            log.error("The Delta app failed with %s", type(cause).__name__, exc_info=cause)
        raise app_error(type(e).__name__, e.one_line(), retryable=e.retryable) from None
    return {**result, "run_seconds": round(time.monotonic() - started, 3)}


class LocalTransport(Transport):
    """In the worker's process with the bundled engine, no Spark: no spark-submit, no connection."""

    name = "local"

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        from airflow_delta_provider_apps.protocol import run_in_process

        return app_run(lambda: run_in_process(operation, table_uri, params), self.log)
