"""Operations that need no Spark never start it (issue 44 item 6): with the default
``execution="auto"`` they run in the worker on every connection type, here a ``spark`` connection
whose spark-submit (a stand-in on ``SPARK_HOME``) records each call and fails, and a Spark Connect
connection where nothing listens. A DELETE by partition values runs there too; one with a data
condition, and ``execution="spark"``, reach Spark (the stand-in's record proves it). Rows are
checked against deltalake's reading and a plain-Python model."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from airflow_delta_provider.exceptions import DeltaTaskError
from airflow_delta_provider.operators import delta as ops
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow

deltalake = pytest.importorskip("deltalake")

ROWS = [(1, "a"), (2, "a"), (3, "b"), (4, "c")]


@pytest.fixture
def spark_submit_calls(tmp_path, monkeypatch):
    """A ``spark`` connection (``local[1]``) whose spark-submit appends its arguments to a file and
    fails; returns a function reading the calls so far."""
    home = tmp_path / "spark_home"
    (home / "bin").mkdir(parents=True)
    calls = tmp_path / "spark-submit-calls"
    binary = home / "bin" / "spark-submit"
    binary.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho "no Spark here" >&2\nexit 1\n')
    binary.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("AIRFLOW_CONN_NO_SPARK", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return lambda: calls.read_text().splitlines() if calls.exists() else []


def _table(root: str, **kw) -> None:
    create_table(root, schema="id BIGINT, dt STRING", **kw)
    append_arrow(root, pa.table({"id": pa.array([r[0] for r in ROWS], pa.int64()), "dt": [r[1] for r in ROWS]}))


def _rows(root: str) -> list[tuple]:
    return sorted((r["id"], r["dt"]) for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist())


@pytest.mark.parametrize(
    "conn",
    [None, {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 9}],  # None: the stand-in spark-submit
    ids=["spark-submit", "spark_connect"],
)
def test_log_only_operations_run_in_the_worker_by_default(tmp_path, monkeypatch, spark_submit_calls, conn):
    conn_id = "no_spark"
    if conn is not None:
        monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", json.dumps(conn))
        conn_id = "nowhere"
    common = {"conn_id": conn_id}
    parted, flat = str(tmp_path / "parted"), str(tmp_path / "flat")

    def run(cls, **kw) -> dict:
        op = cls(task_id=cls.__name__, **{**common, **kw})
        assert op.execution in ("auto", "local")  # the operator's default
        result = op.execute({})
        assert result["transport"] == "local" and "run_seconds" in result and "submit_seconds" not in result
        return result

    created = run(ops.DeltaCreateTableOperator, table_uri=parted, schema="id BIGINT, dt STRING", partition_by="dt")
    assert (created["operation"], created["version"], created["committed"]) == ("CREATE TABLE", 0, True)
    append_arrow(parted, pa.table({"id": pa.array([r[0] for r in ROWS], pa.int64()), "dt": [r[1] for r in ROWS]}))

    deleted = run(ops.DeltaDeleteOperator, table_uri=parted, predicate="dt IN ('a', 'c')")
    assert deleted["metrics"]["numRemovedFiles"] == 2 and deleted["metrics"]["numDeletedRows"] == 3
    assert deleted["metrics"].get("numAddedFiles", 0) == 0  # whole files left the log, nothing rewritten
    assert _rows(parted) == [r for r in ROWS if r[1] not in ("a", "c")]

    restored = run(ops.DeltaRestoreOperator, table_uri=parted, version=1)
    assert restored["metrics"]["numRestoredFiles"] == 2 and _rows(parted) == ROWS

    props = run(ops.DeltaSetPropertiesOperator, table_uri=parted, properties={"delta.columnMapping.mode": "name"})
    assert deltalake.DeltaTable(parted).metadata().configuration["delta.columnMapping.mode"] == "name"
    assert props["version"] == 4
    run(ops.DeltaRenameColumnOperator, table_uri=parted, column="id", new_name="key")
    run(ops.DeltaChangeColumnTypeOperator, table_uri=parted, column="key", new_type="BIGINT")  # already: no commit
    fields = [(f.name, f.type.type) for f in deltalake.DeltaTable(parted).schema().fields]
    assert fields == [("key", "long"), ("dt", "string")]

    checkpoint = run(ops.DeltaCheckpointOperator, table_uri=parted, cleanup=True)
    assert checkpoint["version"] == 5
    assert os.path.exists(os.path.join(parted, "_delta_log", f"{5:020d}.checkpoint.parquet"))

    # an empty table: a constraint is added (and dropped) without a row to check, then a column dropped
    run(ops.DeltaCreateTableOperator, table_uri=flat, schema="id BIGINT, v INT, w STRING")
    run(ops.DeltaAddConstraintOperator, table_uri=flat, name="positive", expression="v > 0")
    assert deltalake.DeltaTable(flat).metadata().configuration["delta.constraints.positive"] == "v > 0"
    run(ops.DeltaDropConstraintOperator, table_uri=flat, name="positive")
    run(ops.DeltaClusterByOperator, table_uri=flat, columns=["id"])
    run(ops.DeltaSetPropertiesOperator, table_uri=flat, properties={"delta.columnMapping.mode": "name"})
    run(ops.DeltaDropColumnOperator, table_uri=flat, column="w")
    assert [f.name for f in deltalake.DeltaTable(flat).schema().fields] == ["id", "v"]
    assert deltalake.DeltaTable(flat).version() == 5
    assert spark_submit_calls() == []


def test_a_delete_with_a_data_condition_and_execution_spark_reach_spark(tmp_path, spark_submit_calls):
    root = str(tmp_path / "t")
    _table(root, partition_by=["dt"])
    # a condition on a data column reads rows: Spark (the stand-in fails the task)
    with pytest.raises(DeltaTaskError):
        ops.DeltaDeleteOperator(
            task_id="d", table_uri=root, predicate="dt = 'a' AND id = 1", conn_id="no_spark"
        ).execute({})
    assert len(spark_submit_calls()) == 1 and " delete " in f" {spark_submit_calls()[0]} "
    # execution="spark" forces Spark for work the worker could do
    with pytest.raises(DeltaTaskError):
        ops.DeltaCheckpointOperator(task_id="k", table_uri=root, conn_id="no_spark", execution="spark").execute({})
    with pytest.raises(DeltaTaskError):
        ops.DeltaCreateTableOperator(
            task_id="c", table_uri=str(tmp_path / "u"), schema="id BIGINT", conn_id="no_spark", execution="spark"
        ).execute({})
    calls = spark_submit_calls()
    assert len(calls) == 3 and " checkpoint " in f" {calls[1]} " and " create-table " in f" {calls[2]} "
    assert _rows(root) == ROWS  # nothing was deleted


def test_the_registry_decides_by_the_tables_partition_columns(tmp_path):
    from airflow_delta_provider_apps import operations as registry

    root = str(tmp_path / "t")
    _table(root, partition_by=["dt"])
    delete = registry.get("delete")
    for predicate, spark in (
        (None, False),
        ("dt = 'a'", False),
        ("DT IN ('a', 'b') OR dt IS NULL", False),  # names resolve as the engine binds them
        ("id = 1", True),
        ("dt = 'a' AND id = 1", True),
        ("no_such_column = 1", True),  # the app (or the preflight) names the error
    ):
        assert delete.spark_required({"table_uri": root, "predicate": predicate}) is spark, predicate
    assert delete.spark_required({"table_uri": str(tmp_path / "none"), "predicate": "dt = 'a'"})
    create = registry.get("create-table")
    assert not create.spark_required({"table_uri": str(tmp_path / "new"), "schema": "id BIGINT"})
    assert create.spark_required({"table_uri": str(tmp_path / "new"), "source": "/s.parquet"})


def test_a_table_on_s3_runs_in_the_worker_with_the_drivers_credentials(s3_server, monkeypatch, spark_submit_calls):
    """Credentials given to the Spark app's driver (``spark_conf``'s ``spark.kubernetes.driverEnv.*``)
    reach the worker's run; a worker that cannot reach the store leaves the run to Spark."""
    from object_store_servers import S3Env

    from airflow_delta_provider_apps.protocol import storage_settings

    s3 = S3Env(s3_server, s3_server.new_bucket())
    for name in s3.env:
        monkeypatch.delenv(name, raising=False)
    root = s3.uri("events")
    with storage_settings(s3.env):
        _table(root)
    driver = {f"spark.kubernetes.driverEnv.{k}": v for k, v in s3.env.items()}
    result = ops.DeltaCheckpointOperator(task_id="k", table_uri=root, conn_id="no_spark", spark_conf=driver).execute({})
    assert (result["transport"], result["version"]) == ("local", 1) and spark_submit_calls() == []
    assert "events/_delta_log/00000000000000000001.checkpoint.parquet" in s3.keys("events/_delta_log/")
    assert not any(name in os.environ for name in s3.env)

    nowhere = {**driver, "spark.kubernetes.driverEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # nothing listens
    with pytest.raises(DeltaTaskError):  # on Spark: the stand-in spark-submit fails the task
        ops.DeltaCheckpointOperator(task_id="k", table_uri=root, conn_id="no_spark", spark_conf=nowhere).execute({})
    assert len(spark_submit_calls()) == 1 and " checkpoint " in f" {spark_submit_calls()[0]} "
