"""The Delta view's settings, read by the plugin and by the operators' "Delta table" link (which must
not import the plugin's app)."""

from __future__ import annotations

#: where the api-server mounts the view's app
URL_PREFIX = "/delta-view"


def ui_enabled() -> bool:
    """``[delta] ui_enabled`` (default True; ``AIRFLOW__DELTA__UI_ENABLED=false`` turns the view off)."""
    from airflow.configuration import conf

    return conf.getboolean("delta", "ui_enabled", fallback=True)


def ui_storage_conn_id() -> str | None:
    """``[delta] ui_storage_conn_id``: the storage connection the view reads object-store tables with."""
    from airflow.configuration import conf

    return conf.get("delta", "ui_storage_conn_id", fallback=None) or None
