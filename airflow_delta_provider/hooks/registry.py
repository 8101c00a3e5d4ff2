"""The transports there are, and which one a connection selects: the one place that knows.

``TRANSPORTS`` maps a transport's name to its class (:class:`~.transport.Transport`); a connection
selects the one whose :meth:`~.transport.Transport.serves` claims it, and a run in the worker's own
process (an operator's ``execution="local"``) takes the one that says it runs there
(:attr:`~.transport.Transport.in_worker`). A new way to reach Spark is a
module with a ``Transport`` subclass and one line here (a test adds one the same way:
``TRANSPORTS["name"] = TheTransport``). The hook and the operators never ask which one they have.
"""

from __future__ import annotations

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.connect import ConnectTransport
from airflow_delta_provider.hooks.local import LocalTransport
from airflow_delta_provider.hooks.submit import SubmitTransport
from airflow_delta_provider.hooks.transport import Transport

__all__ = ["TRANSPORTS", "transport_for", "transport_in_worker"]

TRANSPORTS: dict[str, type[Transport]] = {
    SubmitTransport.name: SubmitTransport,  # spark / delta_spark connections (not sc://)
    ConnectTransport.name: ConnectTransport,  # spark_connect, or a master sc://...
    LocalTransport.name: LocalTransport,  # in the worker's process: execution="local", never a connection
}


def transport_for(conn) -> type[Transport]:
    """The transport class of runs over the Airflow connection ``conn``: the one that serves it."""
    serving = [cls for cls in TRANSPORTS.values() if cls.serves(conn)]
    if len(serving) == 1:
        return serving[0]
    if not serving:
        types = sorted({t for cls in TRANSPORTS.values() for t in getattr(cls, "conn_types", ())})
        raise DeltaConfigurationError(
            f"Connection '{conn.conn_id}' of type '{conn.conn_type}' reaches no Delta transport",
            f"the transports there are ({', '.join(TRANSPORTS)}) serve connections of type {', '.join(types)}",
            "use a connection of one of these types",
        )
    raise DeltaConfigurationError(
        f"Connection '{conn.conn_id}' is served by several Delta transports ({', '.join(c.name for c in serving)})",
        "each connection must select exactly one way to reach Spark",
        "fix the transports' serves() rules",
    )


def transport_in_worker() -> type[Transport]:
    """The transport of a run in the worker's own process, no Spark (an operator's
    ``execution="local"``): the one that says it runs there (:attr:`~.transport.Transport.in_worker`)."""
    in_worker = [cls for cls in TRANSPORTS.values() if cls.in_worker]
    if len(in_worker) != 1:
        raise DeltaConfigurationError(
            f"{len(in_worker)} Delta transports run in the worker's process ({', '.join(c.name for c in in_worker)})",
            "a run in the worker (execution='local') needs exactly one",
            "keep in_worker = True on one transport of TRANSPORTS",
        )
    return in_worker[0]
