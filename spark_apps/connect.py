"""One operation over Spark Connect, run in this process (the Airflow task), the Spark work on the server.

The engine runs here as a Connect client: it reads the log, plans, commits, exactly as under
spark-submit; every Spark job (scans, the per-file rewrite and merge tasks, writes) runs on the
server, whose Python workers import the engine from this package's zip, shipped to the session as
an artifact (``addArtifacts(..., pyfile=True)``): nothing is installed on the server by hand.

**Shared sessions.** A Spark Connect server keeps, for every session that ran a Python UDF, that
session's Python worker factory and its workers until the server stops (SPARK-54055: a session's
artifacts make its Python environment its own): one session per task grew a server by ~200 MiB and
two processes per task. So runs share server-side sessions: the session id is chosen by the client
(``sc://...;session_id=<uuid>``), derived from what makes a session's state (:func:`shared_session_key`):
the server URL (its user and token), the bundle's content (two provider versions never share) and
the session's Spark conf. Every run of that key attaches to the same session (the first uploads the
zip, the others find it there), and its UDFs run on the session's warm Python workers; so a server holds
one session per (provider version, conf) in use, and stays flat over any number of tasks.

* Runs never release a shared session (only their channel closes) and keep nothing in it: no
  temporary view (``source_query`` binds the source as a parameter), no conf beyond the key's.
* Concurrent runs on one session are isolated by an operation tag per run: the task's ``on_kill``
  interrupts only its own operations (``interruptTag``), never a neighbour's.
* A session the server closed (idle timeout: ``spark.connect.session.manager.defaultSessionTimeout``,
  60 minutes by default; a release) cannot be attached again (``INVALID_HANDLE.SESSION_CLOSED``):
  the key's next *generation* (a new id) is used, and remembered on this machine. A restarted
  server simply creates the session again under the same id.
* ``shared=False`` keeps the old life: a session per run, released at the end.

Bounded waits: pyspark's default retry policy waits out an unreachable server for ~10 minutes per
call; a run uses :data:`~airflow_delta_provider_apps.engine.spark.session.CONNECT_RETRY` instead (a few seconds of backoff, enough for a blip, not for a
restart: a restarted server has lost the session anyway), so a lost server fails the task in
seconds, as a retryable :class:`~airflow_delta_provider_apps.failures.SparkInfrastructureError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import uuid

from .engine.errors import DeltaError

__all__ = ["ConnectRun", "shared_session_key"]

#: how many closed generations of a key a run skips before it gives up (each costs one RPC)
MAX_GENERATIONS = 64
_NAMESPACE = uuid.UUID("5b0c9a57-4f0e-4c39-9a39-3f1f7c0e7d21")


def shared_session_key(url: str, conf: dict, pyfiles: tuple[str, ...]) -> str:
    """A digest of what a shared session's state depends on: the server URL (its user and token),
    the session's Spark conf, and the shipped files' contents."""
    h = hashlib.sha256()
    h.update(url.encode())
    h.update(json.dumps(sorted((str(k), str(v)) for k, v in conf.items())).encode())
    for path in pyfiles:
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _session_id(key: str, generation: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{key}/{generation}"))


def _generation_file(key: str) -> str:
    return os.path.join(tempfile.gettempdir(), "airflow-delta-provider", "connect-sessions", key[:32])


def _known_generation(key: str) -> int:
    try:
        with open(_generation_file(key)) as f:
            return max(0, int(f.read().strip() or 0))
    except (OSError, ValueError):
        return 0


def _remember_generation(key: str, generation: int) -> None:
    path = _generation_file(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as f:
            f.write(str(generation))
        os.replace(tmp, path)  # atomic: a concurrent run reads the old or the new number
    except OSError:  # only a cache: the next run finds the generation again
        pass


def _closed(error: BaseException) -> bool:
    text = str(error)
    return "INVALID_HANDLE.SESSION_CLOSED" in text or "INVALID_HANDLE.SESSION_NOT_FOUND" in text


class ConnectRun:
    """Run operations over a Spark Connect session (see the module docstring).

    :param url: ``sc://host:port/;token=...`` (secrets stay in it: never log it)
    :param conf: Spark properties for the session (runtime SQL properties; static ones are the server's)
    :param pyfiles: zips/files added to the server's Python path for this session (the apps' zip)
    :param app_name: the session's name in the server's UI
    :param shared: attach to the shared session of this (server, bundle, conf) and leave it open
        (the default); False: a session of its own, released at the end
    """

    def __init__(
        self,
        url: str,
        *,
        conf: dict | None = None,
        pyfiles: tuple[str, ...] = (),
        app_name: str = "delta",
        shared: bool = True,
    ):
        self.url = url
        self.conf = dict(conf or {})
        self.pyfiles = tuple(pyfiles)
        self.app_name = app_name
        self.shared = shared
        self.tag = f"delta-run-{uuid.uuid4().hex}"  # this run's operations, for on_kill
        self.session_id: str | None = None
        self._session = None
        self._interrupted = threading.Event()

    def session(self):
        """The run's session: created or attached (bounded retries, conf, artifacts) on first use."""
        if self._session is None:
            self._session = self._attach() if self.shared else self._connect(None)
            self._session.addTag(self.tag)
            if self._interrupted.is_set():  # killed while the session was being created
                self.close()
                raise DeltaError("The task was killed", "on_kill interrupted the Spark Connect session", None)
        return self._session

    def _connect(self, session_id: str | None, key: str | None = None):
        from .engine.spark.session import connect_session

        self.session_id = session_id
        return connect_session(
            self.url,
            conf=self.conf,
            pyfiles=self.pyfiles,
            app_name=self.app_name,
            session_id=session_id,
            release_on_failure=session_id is None,
            # the bundle is uploaded once per shared session, not once per run
            bundle_marker=f"airflow-delta-provider bundle {key}".encode() if key else None,
        )

    def _attach(self):
        """The key's shared session: the remembered generation, or the next one the server has not
        closed."""
        key = shared_session_key(self.url, self.conf, self.pyfiles)
        first = _known_generation(key)
        for generation in range(first, first + MAX_GENERATIONS):
            try:
                session = self._connect(_session_id(key, generation), key)
            except Exception as e:
                if not _closed(e):
                    raise
                continue
            if generation != first:
                _remember_generation(key, generation)
            return session
        from .failures import SparkInfrastructureError

        raise SparkInfrastructureError(
            "No Spark Connect session could be attached",
            f"the server closed the {MAX_GENERATIONS} sessions this run tried (generations {first} and later)",
            f"the task is retried; if it persists, remove {_generation_file(key)}",
        )

    def run(self, operation: str, table_uri: str, params: dict) -> dict:
        """The operation's result dict; raises :class:`DeltaError` (a Spark or server failure
        classified as the CLI classifies it)."""
        from .dispatch import as_delta_error, run_checked
        from .engine.spark.session import connect_mode

        with connect_mode():
            try:
                return run_checked(operation, table_uri, params, spark_factory=self.session)
            except Exception as e:
                raise as_delta_error(e) from e
            finally:
                self.close()

    def interrupt(self) -> None:
        """Interrupt this run's operations (only its own on a shared session) and close it (from
        another thread or a signal handler: the task's ``on_kill``)."""
        self._interrupted.set()
        session = self._session
        if session is None:
            return
        try:
            if self.shared:
                session.interruptTag(self.tag)
            else:
                session.interruptAll()
        except Exception:  # the server may be gone: closing below is all that is left
            pass
        self.close()

    def close(self) -> None:
        """Close the channel; a session of its own is released on the server too (idempotent)."""
        session, self._session = self._session, None
        if session is None:
            return
        _wait_for_releases(session)
        try:
            if self.shared:
                session.client.close()  # the server keeps the session for the next run
            else:
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
