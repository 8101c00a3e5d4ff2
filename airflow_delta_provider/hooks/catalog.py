"""Catalog connections: which catalog records a table's name, and the one sync call after a commit.

Two connection types, one per catalog (the catalogs themselves are the engine's,
:mod:`airflow_delta_provider_apps.engine.catalog`):

* ``delta_glue`` (AWS Glue Data Catalog, boto3 in the worker): region in the ``region_name`` extra,
  ``endpoint_url`` (extra or host) for a Glue-compatible endpoint, ``catalog_id`` extra for another
  account's catalog; the access key as login and secret as password, else boto3's default chain.
* ``delta_hive_metastore`` (Spark's own Hive client in a local session of the worker): host and port
  of the metastore's thrift server (``thrift://host:9083``); or no host and a ``spark_conf`` extra with
  the session's Hive settings (``spark.hadoop.javax.jdo.option.ConnectionURL`` of the metastore's
  database and its driver). A ``spark_conf`` extra is applied in both cases.

Where the sync runs: Glue's in the worker (boto3, no Spark). A Hive metastore's in the Spark app that
made the commit, in the app's own session, when the run goes to Spark: the operator passes
:meth:`DeltaCatalogHook.session_spec` as the run's ``catalog`` parameter, the app builds its session with
Hive support and the connection's ``spark_conf`` and syncs after its commit, and its result carries
``catalog``. Otherwise (a run in the worker, a Spark Connect session, which has no Hive client here, a
``spark_conf`` holding a secret, which never goes on a Spark app's command line) the worker syncs here,
in a local Spark session (:meth:`DeltaCatalogHook.sync`).
"""

from __future__ import annotations

import re
from typing import Any

from airflow.sdk import BaseHook

from airflow_delta_provider.exceptions import AirflowNotFoundException, DeltaConfigurationError

__all__ = ["GLUE_CONN_TYPE", "HIVE_METASTORE_CONN_TYPE", "DeltaCatalogHook", "DeltaGlueHook", "DeltaHiveMetastoreHook"]

GLUE_CONN_TYPE = "delta_glue"
HIVE_METASTORE_CONN_TYPE = "delta_hive_metastore"
#: connection type -> the engine's catalog kind
KINDS = {GLUE_CONN_TYPE: "glue", HIVE_METASTORE_CONN_TYPE: "hive_metastore"}
#: a setting that holds a secret (a metastore database's password): such a catalog is synced in the
#: worker, since a Spark app's parameters travel on its command line
_SECRET = re.compile(r"password|secret|token|credential", re.IGNORECASE)


class DeltaCatalogHook(BaseHook):
    """The catalog of connection ``catalog_conn_id`` (type ``delta_glue`` or ``delta_hive_metastore``)."""

    conn_name_attr = "catalog_conn_id"
    hook_name = "Delta Lake catalog"

    def __init__(self, catalog_conn_id: str) -> None:
        super().__init__()
        self.catalog_conn_id = catalog_conn_id

    def catalog_options(self) -> tuple[str, dict[str, Any]]:
        """The engine's catalog kind and its options, from the connection."""
        from airflow_delta_provider.hooks.connections import missing_connection

        try:
            conn = self.get_connection(self.catalog_conn_id)
        except AirflowNotFoundException:
            raise missing_connection(
                self.catalog_conn_id,
                f"Catalog connection '{self.catalog_conn_id}' does not exist",
                f"catalog_conn_id names the catalog that records the table ({' or '.join(KINDS)})",
                f'define it, e.g. AIRFLOW_CONN_{self.catalog_conn_id.upper()}=\'{{"conn_type": "{GLUE_CONN_TYPE}", '
                '"extra": {"region_name": "eu-west-1"}}\'',
            ) from None
        kind = KINDS.get(conn.conn_type)
        if kind is None:
            raise DeltaConfigurationError(
                f"Connection '{self.catalog_conn_id}' is not a catalog connection",
                f"its type is {conn.conn_type!r}",
                f"use a connection of type {' or '.join(KINDS)}",
            )
        extra = conn.extra_dejson or {}
        if kind == "glue":
            options = {
                "region_name": extra.get("region_name"),
                "endpoint_url": extra.get("endpoint_url") or (conn.host or None),
                "catalog_id": extra.get("catalog_id"),
            }
            if conn.login:
                options.update(aws_access_key_id=conn.login, aws_secret_access_key=conn.password)
            return kind, options
        spark_conf = dict(extra.get("spark_conf") or {})
        if conn.host:
            spark_conf["spark.hadoop.hive.metastore.uris"] = f"thrift://{conn.host}:{conn.port or 9083}"
        return kind, {"spark_conf": spark_conf}

    def asset_uri(self, catalog_table: str) -> str:
        """The asset URI naming ``catalog_table`` in this catalog (``hive://<metastore>/<db>/<table>``,
        ``glue://<region>/<db>/<table>``: :func:`airflow_delta_provider.lineage.catalog_asset_uri`)."""
        from airflow_delta_provider.lineage import catalog_asset_uri

        kind, options = self.catalog_options()
        return catalog_asset_uri(kind, options, catalog_table)

    def session_spec(self, catalog_table: str, *, always: bool) -> dict | None:
        """The run's ``catalog`` parameter (a Spark app syncs it in its own session after its commit:
        ``{"kind", "table", "options", "always"}``), or None when this worker syncs: a catalog that
        needs no Spark (Glue), or settings holding a secret."""
        from airflow_delta_provider_apps.protocol import syncs_in_session

        kind, options = self.catalog_options()
        if not syncs_in_session(kind, options):
            return None
        secret = sorted(k for k in options.get("spark_conf") or {} if _SECRET.search(str(k)))
        if secret:
            self.log.info(
                "Catalog connection %s: the sync of %s runs in this worker, not in the Spark app: its spark_conf "
                "holds a secret (%s), and a Spark app's parameters travel on its command line",
                self.catalog_conn_id,
                catalog_table,
                ", ".join(secret),
            )
            return None
        return {"kind": kind, "table": catalog_table, "options": options, "always": bool(always)}

    def sync(self, catalog_table: str, table_uri: str) -> dict:
        """Create or update ``catalog_table``'s entry to the table's latest committed version:
        ``{"catalog", "table", "action", "version"}``."""
        from airflow_delta_provider_apps.protocol import sync_catalog

        kind, options = self.catalog_options()
        result = sync_catalog(kind, options, catalog_table, table_uri)
        self.log.info(
            "Catalog %s: %s %s (version %s)", result["catalog"], result["action"], result["table"], result["version"]
        )
        return result


class _RegisteredCatalogHook(DeltaCatalogHook):
    """A connection type of get_provider_info: Airflow 3.1 asks the hook for the form's behaviour."""

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_delta_provider.get_provider_info import get_provider_info

        info = next(t for t in get_provider_info()["connection-types"] if t["connection-type"] == cls.conn_type)
        return {key.replace("-", "_"): value for key, value in info["ui-field-behaviour"].items()}


class DeltaGlueHook(_RegisteredCatalogHook):
    """:class:`DeltaCatalogHook` registered for the ``delta_glue`` connection type."""

    default_conn_name = "delta_glue_default"
    conn_type = GLUE_CONN_TYPE
    hook_name = "Delta Lake catalog (AWS Glue)"


class DeltaHiveMetastoreHook(_RegisteredCatalogHook):
    """:class:`DeltaCatalogHook` registered for the ``delta_hive_metastore`` connection type."""

    default_conn_name = "delta_hive_metastore_default"
    conn_type = HIVE_METASTORE_CONN_TYPE
    hook_name = "Delta Lake catalog (Hive metastore)"
