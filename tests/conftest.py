"""Shared fixtures.

* ``conformance_root`` / ``conformance_manifest``: the 40 third-party tables of the Delta conformance corpus
  (tests/conformance_location.py says where it is looked for),
  used in place (never copied into the repo).
* ``spark``: ONE session-scoped local[2] SparkSession for every test that asks for it (start-up costs
  ~7-10 s here); tests that do not ask for it never start a JVM.
* ``connect_server``: ONE Spark Connect server (local[2], loopback) for every test that asks for it,
  started from the installed pyspark on first use (~15 s).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

# Importing Airflow creates $AIRFLOW_HOME/logs (and may read its config): keep tests out of ~/airflow.
# Set before any test module imports Airflow; tests/airflow builds its own migrated home.
os.environ.setdefault("AIRFLOW_HOME", os.path.join(tempfile.gettempdir(), "airflow-delta-provider-unit-home"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance_location import CONFORMANCE, HOW_TO_GET_IT  # noqa: E402


@pytest.fixture(scope="session")
def conformance_root() -> Path:
    if CONFORMANCE is None:
        pytest.skip(HOW_TO_GET_IT)
    return CONFORMANCE


@pytest.fixture(scope="session")
def conformance_manifest(conformance_root) -> dict:
    return json.loads((conformance_root / "manifest.json").read_text())


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from airflow_delta_provider_apps.engine.spark.session import build_session

    session = build_session(app_name="airflow-delta-provider-tests", master="local[2]")
    yield session
    session.stop()
    # py4j logs "Closing down clientserver connection" from __del__ after pytest closed its streams
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def file_tasks(spark):
    """DELETE, UPDATE, OPTIMIZE and file-by-file MERGE do their per-file work in Spark tasks whatever
    its size (on this local master they would use the driver's threads)."""
    from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF

    spark.conf.set(FILE_WORK_CONF, "tasks")
    yield
    spark.conf.unset(FILE_WORK_CONF)


@pytest.fixture(scope="session")
def connect_server():
    from airflow_delta_provider_apps.connect_server import ConnectServer

    server = ConnectServer(event_log=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on loopback for the whole run (started on first use, ~1 s)."""
    pytest.importorskip("moto", reason="moto's S3 server is part of the test extra")
    from object_store_servers import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    from object_store_servers import S3Env

    env = S3Env(s3_server, s3_server.new_bucket())
    for k, v in env.env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture(scope="session")
def azurite_server():
    """Azurite (Azure's Blob emulator, from npm) on loopback for the whole run."""
    from object_store_servers import AzuriteServer, azurite_binary

    binary = azurite_binary()
    if binary is None:
        pytest.skip(
            "Azurite is not installed (make azurite, run by make test, puts it in .tools/azurite when npm is present)"
        )
    server = AzuriteServer(binary)
    yield server
    server.stop()


@pytest.fixture
def azure(azurite_server, monkeypatch):
    from object_store_servers import AzureEnv

    env = AzureEnv(azurite_server, azurite_server.new_container())
    for k, v in env.env.items():
        monkeypatch.setenv(k, v)
    return env
