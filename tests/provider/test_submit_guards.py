"""What spark-submit is given so that a dying driver JVM fails the task instead of hanging it."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.hooks.submit import check_master_usable


def _built(monkeypatch, **env):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GUARD", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    hook = DeltaHook("spark_guard")
    sub, application, _ = hook.transport_for_connection().build_submit_hook("checkpoint", "/data/t", {})
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


@pytest.mark.parametrize(
    "master", ["local", "local[*]", "local[2]", "local[2, 3]", "spark://h:7077", "k8s://https://h:443"]
)
def test_masters_spark_submit_takes_pass(master):
    check_master_usable(master, environ={})


@pytest.mark.parametrize("master", ["locl[2]", "yarn-cluster", "mesos://h:5050", "http://h"])
def test_an_unknown_master_fails_in_one_line_without_retry(master):
    with pytest.raises(DeltaConfigurationError, match="Unknown Spark master"):
        check_master_usable(master, environ={})


def test_yarn_without_its_configuration_fails_before_spark_submit(monkeypatch, tmp_path):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    hook = DeltaHook("spark_yarn")
    with pytest.raises(DeltaConfigurationError, match="HADOOP_CONF_DIR"):
        hook.run("update", str(tmp_path / "t"), updates={"v": "1"})
    assert (
        hook.transport_for_connection()._submit_hook is not None
        and hook.transport_for_connection()._submit_hook._submit_sp is None
    )  # never started
    check_master_usable("yarn", environ={"HADOOP_CONF_DIR": "/etc/hadoop/conf"})
