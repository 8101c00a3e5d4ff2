"""The engine's threads see the object-store settings of the block that started them."""

from __future__ import annotations

from pathlib import Path

from airflow_delta_provider_apps.engine.object_stores import credential_env
from airflow_delta_provider_apps.engine.storage import storage_settings
from airflow_delta_provider_apps.engine.threads import ThreadPool

SPARK_APPS = Path(__file__).resolve().parents[2] / "spark_apps"


def test_pool_tasks_see_the_settings_of_the_submitting_block():
    with storage_settings({"AWS_SECRET_ACCESS_KEY": "from-the-connection"}):
        with ThreadPool(max_workers=4) as pool:
            seen = list(pool.map(lambda _: credential_env().get("AWS_SECRET_ACCESS_KEY"), range(16)))
    assert seen == ["from-the-connection"] * 16
    with ThreadPool(max_workers=2) as pool:  # outside the block: the process environment only
        assert pool.submit(lambda: credential_env().get("AWS_SECRET_ACCESS_KEY")).result() != "from-the-connection"


def test_every_pool_of_the_apps_is_the_engine_pool():
    offenders = [
        str(p.relative_to(SPARK_APPS))
        for p in SPARK_APPS.rglob("*.py")
        if p.name != "threads.py" and "ThreadPoolExecutor" in p.read_text()
    ]
    assert offenders == []
