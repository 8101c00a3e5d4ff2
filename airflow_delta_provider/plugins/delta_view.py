"""The Delta view in Airflow's UI (Airflow 3.1+ plugin interfaces): a FastAPI app served by the
api-server under ``/delta-view`` and an external view in the navigation that frames its page.

* ``GET /delta-view/``: the page (plain HTML and JavaScript, no build step: :mod:`.page`);
* ``GET /delta-view/api/tables``: the Delta tables the deployment's assets point to (Airflow's asset
  table, through the api-server's own session);
* ``GET /delta-view/api/table?uri=...``: one table's history, files, health and advice, read from its
  log only (:func:`airflow_delta_provider_apps.protocol.table_view`: no Spark), within
  ``[delta] ui_deadline_seconds`` (default 10): by then it answers with what it read (the history cut
  short, with a note), or 504 when not even the table's snapshot was read; a bad URI is a 400, a
  location without a table a 404;
* ``GET /delta-view/api/events?uri=...``: the asset's newest events, each with the version it
  announced (the page links each to that version) and whether its run committed.

Every endpoint asks Airflow's auth manager for read access to assets (the user's own session). The
object store's credentials come from ``[delta] ui_storage_conn_id`` (a storage connection, see
:mod:`airflow_delta_provider.storage_connections`), else the api-server's environment.

Turned off with ``[delta] ui_enabled = False`` (``AIRFLOW__DELTA__UI_ENABLED=false``): no app, no
view, nothing mounted. The app is built on first use, once per process: only the api-server asks
for it (the scheduler, workers and dag-processor load the plugin without building it).
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from .settings import URL_PREFIX, ui_deadline_seconds, ui_enabled, ui_storage_conn_id

#: the view's part of the deadline that the log reading gets (the rest: answering in time)
_READ_SHARE = 0.8

#: asset URI schemes a Delta table can live under (what the engine's storage reads)
TABLE_SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "hdfs")


def table_uri_of(asset_uri: str) -> str | None:
    """The table location an asset URI names (``file:///p`` -> ``/p``); None for other schemes."""
    scheme = asset_uri.split("://", 1)[0].lower() if "://" in asset_uri else ""
    if scheme not in TABLE_SCHEMES:
        return None
    return asset_uri[len("file://") :] if scheme == "file" else asset_uri


def _asset_uri(table_uri: str) -> str:
    from airflow_delta_provider.operators.delta import delta_asset

    return delta_asset(table_uri).uri


def build_app():
    """The FastAPI app (imported by the api-server only through the plugin)."""
    import contextvars
    import time
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    from airflow.api_fastapi.core_api.security import requires_access_asset
    from fastapi import Depends, FastAPI, HTTPException, Query
    from fastapi.responses import HTMLResponse
    from sqlalchemy import select

    from .page import PAGE

    app = FastAPI(title="Delta view", dependencies=[Depends(requires_access_asset("GET"))])

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE

    @app.get("/api/tables")
    def tables() -> dict[str, Any]:
        from airflow.models.asset import AssetActive, AssetModel
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.execute(
                select(AssetModel.id, AssetModel.name, AssetModel.uri)
                .join(AssetActive, (AssetActive.name == AssetModel.name) & (AssetActive.uri == AssetModel.uri))
                .order_by(AssetModel.uri)
            ).all()
        out = []
        for asset_id, name, uri in rows:
            table = table_uri_of(uri)
            if table is not None:
                out.append({"asset_id": asset_id, "name": name, "asset_uri": uri, "table_uri": table})
        return {"tables": out}

    # reads run here, not in the request's thread: a read stuck on a slow object store is left
    # behind at the deadline (Python cannot stop a thread) and the request answers
    readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delta-view")

    @app.get("/api/table")
    def table(uri: str = Query(..., min_length=1), history: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
        from airflow_delta_provider_apps.protocol import DeltaError, storage_settings, table_view

        from ..hooks.delta import DeltaHook
        from ..storage_connections import storage_env

        seconds = ui_deadline_seconds()
        deadline = time.monotonic() + seconds * _READ_SHARE
        try:
            env = storage_env(DeltaHook, ui_storage_conn_id())
            with storage_settings(env):  # the reader thread runs in this context (the store's settings)
                read = readers.submit(
                    contextvars.copy_context().run, table_view, uri, history=history, deadline=deadline
                )
            return read.result(timeout=seconds)
        except FutureTimeout:
            raise HTTPException(
                status_code=504,
                detail=f"The log of {uri} was not read within {seconds:g} s. Cause: the object store answers "
                "slowly or not at all. Fix: check that the store is reachable from the api-server (and "
                "[delta] ui_storage_conn_id), or raise [delta] ui_deadline_seconds.",
            ) from None
        except DeltaError as e:
            status = 404 if type(e).__name__ == "TableNotFoundError" else 400
            raise HTTPException(status_code=status, detail=e.one_line()) from None

    @app.get("/api/events")
    def events(uri: str = Query(..., min_length=1), limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
        from airflow.models.asset import AssetEvent, AssetModel
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.execute(
                select(AssetEvent)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .where(AssetModel.uri == _asset_uri(uri))
                .order_by(AssetEvent.timestamp.desc())
                .limit(limit)
            ).scalars()
            out = [
                {
                    "id": e.id,
                    "timestamp": e.timestamp.isoformat() if e.timestamp else None,
                    "version": (e.extra or {}).get("version"),
                    "operation": (e.extra or {}).get("operation"),
                    # False when the run changed nothing (e.g. CREATE TABLE IF NOT EXISTS that kept it)
                    "committed": (e.extra or {}).get("committed"),
                    "dag_id": e.source_dag_id,
                    "task_id": e.source_task_id,
                    "run_id": e.source_run_id,
                    "map_index": e.source_map_index,
                }
                for e in rows
            ]
        return {"events": out}

    return app


@functools.cache
def _fastapi_apps() -> list[dict]:
    """The plugin's ``fastapi_apps``, built once per process, on first read."""
    if not ui_enabled():
        return []
    return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "Delta view"}]


def _external_views() -> list[dict]:
    if not ui_enabled():
        return []
    return [
        {
            "name": "Delta tables",
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": "delta-tables",
            "destination": "nav",
            "category": "browse",
        }
    ]


class _OnRead:
    """A plugin attribute computed when read (Airflow reads provider plugins' attributes on the class,
    so a property would not do): every process imports the plugin, only the api-server reads its apps."""

    def __init__(self, compute):
        self.compute = compute

    def __get__(self, instance, owner):
        return self.compute()


class DeltaViewPlugin(AirflowPlugin):
    """Declared in the provider info (``plugins``) and as an ``airflow.plugins`` entry point."""

    name = "delta_view"
    fastapi_apps = _OnRead(_fastapi_apps)
    external_views = _OnRead(_external_views)
