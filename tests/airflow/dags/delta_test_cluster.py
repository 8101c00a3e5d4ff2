"""Test DAG: the operators against a real Spark standalone cluster (``spark://``): executors in their
own JVM and Python workers on a worker process, the bundled zip shipped to them. Create, append,
upsert, delete (and optimize / vacuum where the provider has them) through connection
``spark_cluster`` (from ``$AIRFLOW_CONN_SPARK_CLUSTER``)."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG

from airflow_delta_provider.operators import delta as ops

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_cluster"))
TABLE = os.path.join(ROOT, "table")
CONN = {"conn_id": "spark_cluster"}

with DAG(dag_id="delta_test_cluster", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    create = ops.DeltaCreateTableOperator(
        task_id="create", table_uri=TABLE, schema="id BIGINT, v STRING, dt STRING", partition_by=["dt"], **CONN
    )
    append = ops.DeltaWriteOperator(
        task_id="append", table_uri=TABLE, source=os.path.join(ROOT, "day.parquet"), source_format="parquet", **CONN
    )
    upsert = ops.DeltaMergeOperator(
        task_id="upsert",
        table_uri=TABLE,
        source=os.path.join(ROOT, "changes.parquet"),
        source_format="parquet",
        key_columns=["id"],
        **CONN,
    )
    delete = ops.DeltaDeleteOperator(task_id="delete", table_uri=TABLE, predicate="id % 10 = 0", **CONN)
    chain = [create, append, upsert, delete]
    if hasattr(ops, "DeltaOptimizeOperator"):
        # deferred in cluster deploy mode when the test gives that connection (else it runs attached)
        cluster_mode = "spark_cluster_mode" if os.environ.get("AIRFLOW_CONN_SPARK_CLUSTER_MODE") else "spark_cluster"
        chain.append(
            ops.DeltaOptimizeOperator(task_id="optimize", table_uri=TABLE, conn_id=cluster_mode, deferrable=True)
        )
    if hasattr(ops, "DeltaVacuumOperator"):
        chain.append(
            ops.DeltaVacuumOperator(
                task_id="vacuum", table_uri=TABLE, retention_hours=0, enforce_retention_duration=False, **CONN
            )
        )
    for a, b in zip(chain, chain[1:]):
        a >> b
