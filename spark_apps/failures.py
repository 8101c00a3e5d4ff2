"""Spark infrastructure failures, told apart from bad input by their text (the one classifier).

A task that fails because the cluster is unreachable, out of resources, or lost its driver or JVM is
worth a retry; a task that fails on bad input is not. Both the app (when Spark raises while it runs)
and the Airflow hook (when spark-submit dies before the app reports) classify failures here, so a
user sees one line saying what happened and Airflow retries exactly the retryable ones.
"""

from __future__ import annotations

import re
import sys

from .engine.errors import DeltaError

__all__ = ["SparkInfrastructureError", "infrastructure_cause", "grpc_text"]


class SparkInfrastructureError(DeltaError):
    """Spark itself failed (master unreachable, no resources, driver or JVM lost): retry may help."""

    retryable = True


_PATTERNS = [
    # Spark Connect: tasks starting together on a fresh session raced to upload the same bundle (the
    # server checks that the file is absent, then moves its copy into place); a retry finds it there
    (
        re.compile(r"FileAlreadyExistsException\W+\S*/artifacts-|Duplicate Artifact: pyfiles/"),
        "another task uploaded the same code bundle to the Spark Connect session at the same moment",
    ),
    # Spark Connect (gRPC): the server is gone, or came back without this run's session
    (
        re.compile(r"(INVALID_HANDLE\.SESSION_|SESSION_CHANGED|INVALID_HANDLE\.OPERATION_ABANDONED)"),
        "the Spark Connect server restarted or lost this task's session",
    ),
    (
        re.compile(r"(StatusCode\.UNAVAILABLE|failed to connect to all addresses|RETRIES_EXCEEDED)"),
        "cannot reach the Spark Connect server{master}",
    ),
    (
        re.compile(
            r"(All masters are unresponsive|Failed to connect to master|Could not connect to|"
            r"Connection refused|UnknownHostException|Cannot connect to the cluster|"
            r"Failed to connect to .*:\d+|NoRouteToHostException)",
            re.I,
        ),
        "cannot reach the Spark master{master}",
    ),
    (
        re.compile(r"(Initial job has not accepted any resources|No resources available|insufficient resources)", re.I),
        "the cluster has no resources for this application",
    ),
    (
        re.compile(
            r"(Driver .* killed|was killed|SIGKILL|exit code 137|Container killed|ExecutorLostFailure|"
            r"Executor .* lost|Python worker exited unexpectedly|SparkContext (was|has been) shut down)",
            re.I,
        ),
        "the Spark driver or its executors were lost",
    ),
    (
        re.compile(r"(java\.lang\.OutOfMemoryError|JVM (crashed|died)|Java gateway process exited)", re.I),
        "the Spark JVM died",
    ),
    (
        # what the app itself sees when the cluster manager gave up on it (e.g. no master answered)
        re.compile(r"(Cannot call methods on a stopped SparkContext|SparkContext was shut down)", re.I),
        "Spark stopped the application before it could run (its master or cluster manager gave up on it)",
    ),
]


def infrastructure_cause(text: str, master: str | None = None) -> str | None:
    """A one-line cause when ``text`` (an exception message or output lines) shows a Spark
    infrastructure failure; ``None`` when it does not."""
    for pattern, cause in _PATTERNS:
        if pattern.search(text or ""):
            return cause.format(master=f" '{master}'" if master else "")
    return None


_GRPC_CALL_TEXT = re.compile(r'status = StatusCode\.(\w+)\s*details = "(.*)"')


def grpc_text(e: BaseException) -> str | None:
    """``gRPC status UNAVAILABLE: Socket closed`` for a failed gRPC call: a ``grpc.RpcError``, or an
    error holding its text (pyspark's Connect client raises one with ``str(rpc_error)``, whose first
    line is only ``<_MultiThreadedRendezvous of RPC that terminated with:``); ``None`` otherwise."""
    grpc = sys.modules.get("grpc")  # not imported: not a gRPC error
    if grpc is not None and isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
        try:
            return f"gRPC status {e.code().name}: {e.details()}"[:500]
        except Exception:
            pass
    m = _GRPC_CALL_TEXT.search(str(e))
    return f"gRPC status {m.group(1)}: {m.group(2)}"[:500] if m else None
