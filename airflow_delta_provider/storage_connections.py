"""Object-store credentials from an Airflow connection, as the standard environment variables that
the engine (pyarrow.fs for data, obstore for commits) reads: ``storage_conn_id`` on every operator,
the hook and the sensor.

The connection type says which store (the conventions of Airflow's Amazon, Google and Microsoft
providers, whose packages are optional):

* ``aws``: with the Amazon provider installed, its ``AwsBaseHook`` resolves the credentials (assumed
  roles, profiles, web identity: short-lived keys); without it, login = access key id, password =
  secret key, extra ``aws_session_token``. Extra ``region_name``; ``endpoint_url`` (or
  ``service_config.s3.endpoint_url``) for an S3-compatible server.
* ``google_cloud_platform``: extra ``key_path`` (a service-account key file on the worker) or
  ``keyfile_dict`` (the key itself, written to a file readable only by this user).
* ``wasb`` / ``adls``: login = storage account name, password = account key; or extra
  ``connection_string``; or extra ``sas_token``.

Every secret is registered with Airflow's secrets masker, so it is redacted if anything logs it.
How the values reach the app (never on the spark-submit command line): see ``DeltaHook``.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from airflow.exceptions import AirflowNotFoundException

from .exceptions import DeltaConfigurationError
from .hooks.connections import missing_connection

SECRET_NAMES = {
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
}


def storage_env(hook, conn_id: str | None) -> dict[str, str]:
    """The environment variables for connection ``conn_id`` (read through ``hook.get_connection``);
    ``{}`` without one."""
    if not conn_id:
        return {}
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise missing_connection(
            conn_id,
            f"Storage connection '{conn_id}' does not exist",
            "storage_conn_id names the connection holding the object store's credentials",
            "define it (type aws, google_cloud_platform, wasb or adls) or leave storage_conn_id unset to use "
            "the environment's default credentials",
        ) from None
    from airflow_delta_provider_apps.protocol import store_for_connection_type

    store = store_for_connection_type(conn.conn_type or "")
    if store is None or store.kind not in _FROM_CONNECTION:
        raise DeltaConfigurationError(
            f"Storage connection '{conn_id}' has type '{conn.conn_type}'",
            "only aws, google_cloud_platform, wasb and adls connections describe an object store",
            "point storage_conn_id at a connection of one of those types",
        )
    env = _FROM_CONNECTION[store.kind](conn_id, conn, conn.extra_dejson or {})
    env = {k: str(v) for k, v in env.items() if v not in (None, "")}
    _mask(env)
    return env


def _extra(extra: dict, name: str, prefix: str) -> Any:
    # Older connections store extras as extra__<type>__<name>.
    return extra.get(name) or extra.get(f"extra__{prefix}__{name}")


def _aws(conn_id: str, conn, extra: dict) -> dict[str, Any]:
    env: dict[str, Any] = {}
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        AwsBaseHook = None
    if AwsBaseHook is not None:
        creds = AwsBaseHook(aws_conn_id=conn_id, client_type="s3").get_credentials()
        env.update(AWS_ACCESS_KEY_ID=creds.access_key, AWS_SECRET_ACCESS_KEY=creds.secret_key)
        env["AWS_SESSION_TOKEN"] = creds.token
    else:
        env.update(
            AWS_ACCESS_KEY_ID=conn.login,
            AWS_SECRET_ACCESS_KEY=conn.password,
            AWS_SESSION_TOKEN=extra.get("aws_session_token"),
        )
    env["AWS_REGION"] = extra.get("region_name")
    s3_config = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = s3_config.get("endpoint_url") or extra.get("endpoint_url") or extra.get("host")
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
        if str(endpoint).startswith("http://"):
            env["AWS_ALLOW_HTTP"] = "true"
    return env


def _gcp(conn_id: str, conn, extra: dict) -> dict[str, Any]:
    key_path = _extra(extra, "key_path", "google_cloud_platform")
    keyfile = _extra(extra, "keyfile_dict", "google_cloud_platform")
    if keyfile and not key_path:
        data = keyfile if isinstance(keyfile, str) else json.dumps(keyfile)
        fd, key_path = tempfile.mkstemp(prefix="delta-gcp-key-", suffix=".json")  # mode 0600
        with os.fdopen(fd, "w") as f:
            f.write(data)
    if not key_path:
        return {}  # the environment's chain (workload identity, GOOGLE_APPLICATION_CREDENTIALS)
    return {"GOOGLE_APPLICATION_CREDENTIALS": key_path}


def _azure(conn_id: str, conn, extra: dict) -> dict[str, Any]:
    connection_string = _extra(extra, "connection_string", "wasb")
    if connection_string:
        return {"AZURE_STORAGE_CONNECTION_STRING": connection_string}
    return {
        "AZURE_STORAGE_ACCOUNT_NAME": conn.login,
        "AZURE_STORAGE_ACCOUNT_KEY": conn.password or _extra(extra, "shared_access_key", "wasb"),
        "AZURE_STORAGE_SAS_TOKEN": _extra(extra, "sas_token", "wasb"),
    }


# store kind (engine/object_stores.py's records) -> the standard variables from a connection of it
_FROM_CONNECTION = {"s3": _aws, "gcs": _gcp, "azure": _azure}


def _mask(env: dict[str, str]) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - Airflow 3.1+ has it
        return
    for name, value in env.items():
        if name in SECRET_NAMES:
            mask_secret(value, name)
