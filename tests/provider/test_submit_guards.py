"""What spark-submit is given so that a dying driver JVM fails the task instead of hanging it."""

from __future__ import annotations

import json

from airflow_delta_provider.hooks.delta import DeltaHook


def _built(monkeypatch, **env):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GUARD", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    hook = DeltaHook("spark_guard")
    sub, application, _ = hook.submitter.build_submit_hook("checkpoint", "/data/t", {})
    sub._build_spark_submit_command(application)
    return sub._env or {}


def test_the_driver_jvm_exits_on_out_of_memory(monkeypatch):
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert _built(monkeypatch)["SPARK_SUBMIT_OPTS"] == "-XX:+ExitOnOutOfMemoryError"
    env = _built(monkeypatch, SPARK_SUBMIT_OPTS="-Dx=1")
    assert env["SPARK_SUBMIT_OPTS"] == "-Dx=1 -XX:+ExitOnOutOfMemoryError"  # the user's options kept


def test_a_users_own_out_of_memory_policy_is_left_alone(monkeypatch):
    env = _built(monkeypatch, SPARK_SUBMIT_OPTS="-XX:OnOutOfMemoryError='kill -9 %p'")
    assert "SPARK_SUBMIT_OPTS" not in env
