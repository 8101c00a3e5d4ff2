"""Test DAG: the operations that need no Spark over a spark-submit connection (issue 44 item 6).

Every Delta task runs with its default ``execution="auto"`` on ``spark_local`` (a ``spark``
connection): create from a schema, a DELETE by partition values, RESTORE, table properties, a
constraint and a checkpoint with log cleanup, each in the worker. Plain Python tasks make the folder
(the first task, which also waits for Airflow's execution API to start) and append the rows.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators import delta as ops

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_no_spark"))
TABLE = os.path.join(ROOT, "events")
CONN = {"conn_id": "spark_local", "table_uri": TABLE}


@task
def start() -> str:
    os.makedirs(ROOT, exist_ok=True)
    return ROOT


@task
def append_rows() -> int:
    import pyarrow as pa

    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    rows = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "dt": ["a", "a", "b", "c"]})
    return append_arrow(TABLE, rows).version


with DAG(dag_id="delta_test_no_spark", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    create = ops.DeltaCreateTableOperator(
        task_id="create", schema="id BIGINT, dt STRING", partition_by=["dt"], if_not_exists=True, **CONN
    )
    erase = ops.DeltaDeleteOperator(task_id="erase_day", predicate="dt = 'a'", **CONN)
    properties = ops.DeltaSetPropertiesOperator(
        task_id="set_properties", properties={"delta.logRetentionDuration": "interval 30 days"}, **CONN
    )
    constraint = ops.DeltaAddConstraintOperator(task_id="add_constraint", name="known_id", expression="id > 0", **CONN)
    restore = ops.DeltaRestoreOperator(task_id="restore", version=1, **CONN)
    checkpoint = ops.DeltaCheckpointOperator(task_id="checkpoint", cleanup=True, **CONN)
    start() >> create >> append_rows() >> erase >> restore >> properties >> constraint >> checkpoint
