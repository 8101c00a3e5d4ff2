"""Object-store credentials from Airflow connections: what each connection type becomes, and how the
hook hands it to the app: the spark-submit process's environment in client mode, a file only this
user can read (shipped with --files, named in the spec) in cluster mode, never a command-line
argument; the worker's own log reads use it without touching the process environment."""

from __future__ import annotations

import json
import os
import stat

import pytest

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.storage_connections import storage_env

SECRET = "wJalr-secret-XUtnFEMI"


def _conn(monkeypatch, conn_id: str, body: dict) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))
    return conn_id


def _env(monkeypatch, body: dict) -> dict:
    return storage_env(DeltaHook, _conn(monkeypatch, "store_t", body))


def test_aws_connection_becomes_the_standard_variables(monkeypatch):
    pytest.importorskip("airflow")
    env = _env(
        monkeypatch,
        {
            "conn_type": "aws",
            "login": "AKIDTEST",
            "password": SECRET,
            "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000", "aws_session_token": "tok"},
        },
    )
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDTEST" and env["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert env["AWS_REGION"] == "eu-west-1" and env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert env["AWS_ALLOW_HTTP"] == "true"
    # the S3 service config of the Amazon provider wins over the generic endpoint
    env = _env(
        monkeypatch,
        {
            "conn_type": "aws",
            "extra": {"endpoint_url": "https://a", "service_config": {"s3": {"endpoint_url": "https://b"}}},
        },
    )
    assert env["AWS_ENDPOINT_URL"] == "https://b" and "AWS_ALLOW_HTTP" not in env


def test_azure_and_gcp_connections(monkeypatch):
    env = _env(monkeypatch, {"conn_type": "wasb", "login": "acct", "password": SECRET})
    assert env == {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": SECRET}
    cs = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={SECRET}"
    env = _env(monkeypatch, {"conn_type": "wasb", "extra": {"connection_string": cs}})
    assert env == {"AZURE_STORAGE_CONNECTION_STRING": cs}

    key = {"type": "service_account", "client_email": "x@y", "private_key": SECRET}
    env = _env(monkeypatch, {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": key}})
    path = env["GOOGLE_APPLICATION_CREDENTIALS"]
    try:
        assert json.load(open(path)) == key
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # readable by this user only
    finally:
        os.unlink(path)
    env = _env(monkeypatch, {"conn_type": "google_cloud_platform", "extra": {"key_path": "/keys/sa.json"}})
    assert env == {"GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json"}


def test_wrong_or_missing_connection_is_a_clear_error(monkeypatch):
    with pytest.raises(DeltaConfigurationError, match="has type 'postgres'.*aws, google_cloud_platform, wasb"):
        _env(monkeypatch, {"conn_type": "postgres", "host": "db"})
    with pytest.raises(DeltaConfigurationError, match="Storage connection 'nope' does not exist"):
        storage_env(DeltaHook, "nope")
    assert storage_env(DeltaHook, None) == {}


def _spark(monkeypatch, conn_id, host, **extra):
    body = {"conn_type": "spark", "host": host, **({"extra": extra} if extra else {})}
    return _conn(monkeypatch, conn_id, body)


def test_client_mode_hands_credentials_through_the_process_environment_only(monkeypatch, tmp_path):
    spark = _spark(monkeypatch, "spark_yarn_client", "yarn")
    store = _conn(monkeypatch, "lake", {"conn_type": "aws", "login": "AKID", "password": SECRET})
    hook = DeltaHook(spark, storage_conn_id=store, bundle_dir=str(tmp_path / "b"))
    sub, application, _ = hook.transport_for_connection().build_submit_hook(
        "write", "s3://bucket/t", {"source": "s3://bucket/in"}
    )
    cmd = sub._build_spark_submit_command(application)
    assert SECRET not in " ".join(cmd)  # not even as a spark.yarn.appMasterEnv --conf
    assert sub._env["AWS_SECRET_ACCESS_KEY"] == SECRET  # the spark-submit process's environment
    assert "storage_env_file" not in json.loads(cmd[-1])


def test_cluster_mode_ships_a_private_file_and_names_it(monkeypatch, tmp_path):
    spark = _spark(
        monkeypatch, "spark_yarn_cluster", "yarn", **{"deploy-mode": "cluster", "delta_result_dir": "s3://b/r"}
    )
    store = _conn(monkeypatch, "lake", {"conn_type": "aws", "login": "AKID", "password": SECRET})
    hook = DeltaHook(spark, storage_conn_id=store, bundle_dir=str(tmp_path / "b"))
    sub, application, _ = hook.transport_for_connection().build_submit_hook(
        "write", "s3://bucket/t", {"source": "s3://bucket/in"}
    )
    cmd = sub._build_spark_submit_command(application)
    assert SECRET not in " ".join(cmd)
    files = cmd[cmd.index("--files") + 1].split(",")
    secret_file = hook.transport_for_connection()._secret_file
    assert secret_file in files and stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    assert json.load(open(secret_file))["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert json.loads(cmd[-1])["storage_env_file"] == os.path.basename(secret_file)
    assert not (sub._env or {}).get("AWS_SECRET_ACCESS_KEY")
    hook.transport_for_connection()._discard_secret_file()
    assert not os.path.exists(secret_file)


def test_the_app_loads_and_deletes_the_shipped_file(tmp_path, monkeypatch):
    from airflow_delta_provider_apps.cli import load_storage_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    (tmp_path / "delta-storage-x.json").write_text(json.dumps({"AWS_SECRET_ACCESS_KEY": SECRET}))
    load_storage_env("delta-storage-x.json")
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == SECRET and not (tmp_path / "delta-storage-x.json").exists()
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    from airflow_delta_provider_apps.engine.errors import StorageError

    with pytest.raises(StorageError, match="is not here"):
        load_storage_env("delta-storage-x.json")


def test_worker_side_settings_do_not_leak_into_the_process_environment(monkeypatch):
    from airflow_delta_provider_apps.protocol import storage_settings

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    from airflow_delta_provider_apps.engine.storage import executor_env

    with storage_settings({"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": SECRET}):
        assert executor_env()["AWS_SECRET_ACCESS_KEY"] == SECRET  # what executors will get
        assert os.environ.get("AWS_ACCESS_KEY_ID") is None
    assert "AWS_ACCESS_KEY_ID" not in executor_env()
