"""The Delta view's settings, read by the plugin and by the operators' "Delta table" link (which must
not import the plugin's app)."""

from __future__ import annotations

#: where the api-server mounts the view's app
URL_PREFIX = "/delta-view"


def ui_enabled() -> bool:
    """``[delta] ui_enabled`` (default True; ``AIRFLOW__DELTA__UI_ENABLED=false`` turns the view off)."""
    from airflow.configuration import conf

    return conf.getboolean("delta", "ui_enabled", fallback=True)


def view_url(table_uri: str, version: int | None = None) -> str:
    """The view's page of ``table_uri`` (``version`` marked in its history), under ``[api] base_url``
    (absolute when that is set); "" when the view is off. The tasks' "Delta table" link and the table's
    asset events (``delta_view``: a link in the asset page's event JSON) carry it."""
    from urllib.parse import urlencode

    from airflow.configuration import conf

    if not ui_enabled():
        return ""
    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    query = {"table": table_uri} if version is None else {"table": table_uri, "version": version}
    return f"{base}{URL_PREFIX}/?{urlencode(query)}"


def ui_storage_conn_id() -> str | None:
    """``[delta] ui_storage_conn_id``: the storage connection the view reads object-store tables with."""
    from airflow.configuration import conf

    return conf.get("delta", "ui_storage_conn_id", fallback=None) or None


#: ``[delta] ui_deadline_seconds``' default
DEFAULT_DEADLINE_SECONDS = 10.0


def ui_deadline_seconds() -> float:
    """``[delta] ui_deadline_seconds`` (default 10): how long one table's view may take. By then the
    page shows what was read (the history cut short, with a note), or an error naming the slow store
    when even the table's snapshot was not read; a request never hangs on a slow object store."""
    from airflow.configuration import conf

    seconds = conf.getfloat("delta", "ui_deadline_seconds", fallback=DEFAULT_DEADLINE_SECONDS)
    if not seconds > 0:
        raise ValueError(f"[delta] ui_deadline_seconds = {seconds!r}: it must be a positive number of seconds")
    return seconds
