"""A running application's lease in the table's storage, so that a retry never starts a second writer.

A task instance's commit carries its identity (``app_id``, ``app_version``: retries share it). When
the app runs as its own driver (spark-submit: the driver can outlive the Airflow worker that started
it, in cluster deploy mode or as an orphaned client), it keeps a lease at
``<table>/_airflow_runs/<digest of app_id>-<app_version>.json`` while it works: who runs it (host,
pid, Spark application id when known), when it started and a heartbeat renewed every
:data:`HEARTBEAT_SECONDS`. It deletes the lease when it ends, whatever the outcome.

Before submitting, the hook reads the lease (:func:`wait_for_earlier_run`): a lease whose heartbeat
is younger than :data:`STALE_AFTER_SECONDS` means an earlier try of this task instance is still at
work, so the retry waits for it (polling the lease and the table's log) instead of starting a second
application beside it: its commit, once in the log, is the retry's result; if it ends without one
(its lease deleted, or gone stale because its driver died), the retry submits as usual. The wait
ends in bounded time once the earlier driver is gone: a dead driver renews nothing.

The folder starts with ``_``: Delta readers and VACUUM leave hidden folders alone, and no reader
takes it for data. A lease left by a killed driver is stale at once for the next reader and is
replaced (or deleted) by the next run of the same identity.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .engine.paths import new_file_location

__all__ = ["RunLease", "read_lease", "wait_for_earlier_run", "HEARTBEAT_SECONDS", "STALE_AFTER_SECONDS"]

#: how often a running app renews its lease
HEARTBEAT_SECONDS = 10.0
#: a lease not renewed for this long belongs to a driver that is gone
STALE_AFTER_SECONDS = 3 * HEARTBEAT_SECONDS
#: the lease folder under the table root (hidden from Delta readers and VACUUM)
LEASE_DIR = "_airflow_runs"


def lease_path(table_root: str, app_id: str, app_version: int) -> str:
    digest = hashlib.sha256(app_id.encode("utf-8")).hexdigest()[:32]
    return new_file_location(table_root, f"{LEASE_DIR}/{digest}-{int(app_version)}.json")


@dataclass(frozen=True)
class Lease:
    """What a lease file says (``heartbeat_ms``: the last renewal, by the writer's clock)."""

    app_id: str
    app_version: int
    host: str
    pid: int
    started_ms: int
    heartbeat_ms: int
    spark_app_id: str | None = None

    def age_seconds(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.heartbeat_ms / 1000

    def live(self, now: float | None = None) -> bool:
        return self.age_seconds(now) < STALE_AFTER_SECONDS

    def describe(self) -> str:
        app = f", Spark application {self.spark_app_id}" if self.spark_app_id else ""
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_ms / 1000))
        return f"pid {self.pid} on {self.host}{app}, started {started}"


def read_lease(storage, table_root: str, app_id: str, app_version: int) -> Lease | None:
    """The lease of this identity, or None (none, or unreadable: a torn write is no lease)."""
    try:
        data = json.loads(storage.read_bytes(lease_path(table_root, app_id, app_version)))
        return Lease(**{k: data[k] for k in Lease.__dataclass_fields__ if k in data})
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return None


class RunLease:
    """The running app's side: ``start()`` writes the lease and renews it from a daemon thread,
    ``end()`` stops renewing and deletes it. Storage errors while renewing are not the run's
    failure: a lease that could not be renewed only goes stale (a retry then submits as before)."""

    def __init__(
        self, storage, table_root: str, app_id: str, app_version: int, *, heartbeat: float = HEARTBEAT_SECONDS
    ):
        self.storage, self.path = storage, lease_path(table_root, app_id, app_version)
        self.app_id, self.app_version, self.heartbeat = app_id, int(app_version), heartbeat
        self.spark_app_id: str | None = None
        self._started_ms = int(time.time() * 1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        body = {
            "app_id": self.app_id,
            "app_version": self.app_version,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_ms": self._started_ms,
            "heartbeat_ms": int(time.time() * 1000),
            "spark_app_id": self.spark_app_id,
        }
        self.storage.write_bytes(self.path, json.dumps(body).encode("utf-8"), overwrite=True)

    def start(self) -> RunLease:
        self._write()

        def renew():
            while not self._stop.wait(self.heartbeat):
                try:
                    self._write()
                except Exception:  # not the run's failure: the lease goes stale, a retry submits
                    pass

        self._thread = threading.Thread(target=renew, name="delta-run-lease", daemon=True)
        self._thread.start()
        return self

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.storage.delete(self.path)
        except Exception:  # stale soon enough
            pass


def wait_for_earlier_run(
    storage,
    table_root: str,
    app_id: str,
    app_version: int,
    landed: Callable[[], dict | None],
    *,
    log: Callable[[str], None] = print,
    poll: float = 5.0,
    sleep: Callable[[float], None] | None = None,
    now: Callable[[], float] | None = None,
) -> dict | None:
    """Wait while an earlier try of this identity still runs (see the module docstring); the result
    of its commit when it made one (``landed()``), else None: submit as usual. A stale lease found on
    the way is deleted."""
    sleep, now = sleep or time.sleep, now or time.time
    lease = read_lease(storage, table_root, app_id, app_version)
    told = False
    while lease is not None and lease.live(now()):
        if not told:
            log(
                f"An earlier try of this task instance is still running ({lease.describe()}): waiting for it "
                "instead of starting a second application"
            )
            told = True
        result = landed()
        if result is not None:
            return result
        sleep(poll)
        lease = read_lease(storage, table_root, app_id, app_version)
    if lease is not None:  # stale: its driver is gone
        try:
            storage.delete(lease_path(table_root, app_id, app_version))
        except Exception:
            pass
    return landed() if told else None
