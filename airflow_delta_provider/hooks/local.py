"""The in-process transport: the operation runs in the worker's process with the bundled engine.

No Spark, no spark-submit, no connection: log-only work, DELETE/UPDATE/OPTIMIZE rewritten by a
thread pool, a MERGE of a source the worker can hold. An operator picks it with ``execution="local"``
(or ``"auto"`` when the parameters need no Spark), whatever its connection; no connection selects it
(:func:`~airflow_delta_provider.hooks.registry.transport_in_worker` does).
"""

from __future__ import annotations

from typing import Any

from airflow_delta_provider.hooks.transport import Transport, app_run

__all__ = ["LocalTransport"]


class LocalTransport(Transport):
    """In the worker's process with the bundled engine, no Spark: no spark-submit, no connection."""

    name = "local"
    in_worker = True

    def deferral_blocker(self) -> str | None:
        return "the work runs in this task's own process"

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        from airflow_delta_provider_apps.protocol import run_in_process

        return app_run(lambda: run_in_process(operation, table_uri, params), self.log)
