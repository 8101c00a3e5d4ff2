"""The transports there are, and which one a connection selects: the one place that knows.

``TRANSPORTS`` maps a transport's name to its class (:class:`~.transport.Transport`); a connection
selects the one whose :meth:`~.transport.Transport.serves` claims it, and a run in the worker's own
process (an operator's ``execution="local"``) takes the one that says it runs there
(:attr:`~.transport.Transport.in_worker`). A new way to reach Spark is a
module with a ``Transport`` subclass and one line here (a test adds one the same way:
``TRANSPORTS["name"] = TheTransport``). The hook and the operators never ask which one they have.

Each transport declares its own settings among the user's arguments (``Transport.options``); the hook
and the operators hold them all as one mapping, checked here (:func:`check_options`), and every
transport reads its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.connect import ConnectTransport
from airflow_delta_provider.hooks.local import LocalTransport
from airflow_delta_provider.hooks.submit import SubmitTransport
from airflow_delta_provider.hooks.transport import Transport

__all__ = ["TRANSPORTS", "check_options", "driver_env", "option_names", "transport_for", "transport_in_worker"]

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


def option_names() -> set[str]:
    """The user's arguments some transport takes as its own settings (``Transport.options``)."""
    return {name for cls in TRANSPORTS.values() for name in cls.options}


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (the user's transport settings, one mapping) as a dict, each checked by the
    transports that take it (``Transport.check_options``); a name no transport takes is refused."""
    unknown = sorted(set(options) - option_names())
    if unknown:
        raise DeltaConfigurationError(
            f"Unknown Delta transport setting(s) {unknown}",
            f"the transports there are ({', '.join(TRANSPORTS)}) take {sorted(option_names())}",
            "fix the name, or pass Spark properties through spark_conf",
        )
    for cls in TRANSPORTS.values():
        cls.check_options({k: v for k, v in options.items() if k in cls.options})
    return dict(options)


def driver_env(spark_conf: Mapping[str, Any] | None, options: Mapping[str, Any]) -> dict[str, str]:
    """The environment the user's settings give the Spark app's driver, whichever transport runs it
    (``Transport.driver_env``): the worker's own reads of the table take it too."""
    env: dict[str, str] = {}
    for cls in TRANSPORTS.values():
        env.update(cls.driver_env(spark_conf or {}, {k: v for k, v in options.items() if k in cls.options}))
    return env
