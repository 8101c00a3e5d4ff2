"""One operation over Spark Connect, run in this process (the Airflow task), the Spark work on the server.

The engine runs here as a Connect client: it reads the log, plans, commits, exactly as under
spark-submit; every Spark job (scans, the per-file rewrite and merge tasks, writes) runs on the
server, whose Python workers import the engine from this package's zip, shipped to the session as
an artifact (``addArtifacts(..., pyfile=True)``): nothing is installed on the server by hand.

Life of a run (:class:`ConnectRun`): one session per run, created with the run's Spark conf, the
zip added, the operation's runner called with the session, the session released at the end, also
on failure and on :meth:`ConnectRun.interrupt` (the task's ``on_kill``: every running operation of
the session is interrupted first).

Bounded waits: pyspark's default retry policy waits out an unreachable server for ~10 minutes per
call; a run uses :data:`~airflow_delta_provider_apps.engine.spark.session.CONNECT_RETRY` instead (a few seconds of backoff, enough for a blip, not for a
restart: a restarted server has lost the session anyway), so a lost server fails the task in
seconds, as a retryable :class:`~airflow_delta_provider_apps.failures.SparkInfrastructureError`.
"""

from __future__ import annotations

import threading

from .engine.errors import DeltaError

__all__ = ["ConnectRun"]


class ConnectRun:
    """Run operations over one Spark Connect session (see the module docstring).

    :param url: ``sc://host:port/;token=...`` (secrets stay in it: never log it)
    :param conf: Spark properties for the session (runtime SQL properties; static ones are the server's)
    :param pyfiles: zips/files added to the server's Python path for this session (the apps' zip)
    :param app_name: the session's name in the server's UI
    """

    def __init__(self, url: str, *, conf: dict | None = None, pyfiles: tuple[str, ...] = (), app_name: str = "delta"):
        self.url = url
        self.conf = dict(conf or {})
        self.pyfiles = tuple(pyfiles)
        self.app_name = app_name
        self._session = None
        self._interrupted = threading.Event()

    def session(self):
        """The run's session: created (bounded retries, conf, artifacts) on first use."""
        if self._session is None:
            from .engine.spark.session import connect_session

            self._session = connect_session(self.url, conf=self.conf, pyfiles=self.pyfiles, app_name=self.app_name)
            if self._interrupted.is_set():  # killed while the session was being created
                self.close()
                raise DeltaError("The task was killed", "on_kill interrupted the Spark Connect session", None)
        return self._session

    def run(self, operation: str, table_uri: str, params: dict) -> dict:
        """The operation's result dict; raises :class:`DeltaError` (a Spark or server failure
        classified as the CLI classifies it)."""
        from .cli import as_delta_error, run_checked
        from .engine.spark.session import connect_mode

        with connect_mode():
            try:
                return run_checked(operation, table_uri, params, spark_factory=self.session)
            except Exception as e:
                raise as_delta_error(e) from e
            finally:
                self.close()

    def interrupt(self) -> None:
        """Interrupt the session's running operations and release it (from another thread or a signal
        handler: the task's ``on_kill``)."""
        self._interrupted.set()
        session = self._session
        if session is None:
            return
        try:
            session.interruptAll()
        except Exception:  # the server may be gone: closing below is all that is left
            pass
        self.close()

    def close(self) -> None:
        """Release the server's session and close the channel (idempotent)."""
        session, self._session = self._session, None
        if session is None:
            return
        _wait_for_releases(session)
        try:
            session.stop()
        except Exception:  # a lost server: the channel is closed either way
            pass


def _wait_for_releases(session, timeout: float = 10.0) -> None:
    """Wait for the client's pending ReleaseExecute calls (sent in the background after each
    operation) before the session is released: a session released with an execution still held
    makes the server log that execution whole at INFO, its plan included, and a plan holds the task
    closures with the storage credentials."""
    import concurrent.futures

    futures = list(getattr(getattr(session, "client", None), "_release_futures", None) or ())
    if futures:
        concurrent.futures.wait(futures, timeout=timeout)
