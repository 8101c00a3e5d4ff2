"""Test DAG: a small daily pipeline whose week of runs the Delta view shows (issue 42,
tests/airflow/test_delta_view.py). No Spark: every Delta task runs in the worker.

Each day: ``land`` writes the day's rows to ``$DELTA_TEST_ROOT/landing/<ds>.parquet`` (Wednesday's
carries a 2 MiB payload: a file in the histogram's second bin), ``create`` makes the table on the first
run (``if_not_exists``: no commit afterwards), ``load`` upserts the day by ``id``; on Sundays
``compact`` runs OPTIMIZE (``weekly`` skips it on the other days).
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators import delta as ops

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_view_week"))
TABLE = os.path.join(ROOT, "orders")
LANDING = os.path.join(ROOT, "landing")
CONN = {"conn_id": "spark_local", "table_uri": TABLE, "execution": "local"}


@task
def land(ds=None, logical_date=None) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    day = logical_date.isoweekday()  # 1 Monday .. 7 Sunday
    rows = 3 + day
    payload = [os.urandom(2 << 20) if day == 3 and i == 0 else b"" for i in range(rows)]
    os.makedirs(LANDING, exist_ok=True)
    path = os.path.join(LANDING, f"{ds}.parquet")
    pq.write_table(
        pa.table(
            {"id": pa.array([day * 100 + i for i in range(rows)], pa.int64()), "day": [ds] * rows, "payload": payload}
        ),
        path,
    )
    return path


@task.short_circuit
def weekly(logical_date=None) -> bool:
    return logical_date.isoweekday() == 7


with DAG(dag_id="delta_test_view_week", schedule="@daily", start_date=datetime(2026, 11, 16), catchup=False):
    create = ops.DeltaCreateTableOperator(
        task_id="create", schema="id BIGINT, day STRING, payload BINARY", if_not_exists=True, name="orders", **CONN
    )
    load = ops.DeltaMergeOperator(
        task_id="load",
        source=LANDING + "/{{ ds }}.parquet",
        source_format="parquet",
        key_columns=["id"],
        **CONN,
    )
    compact = ops.DeltaOptimizeOperator(task_id="compact", **CONN)
    [land(), create] >> load >> weekly() >> compact
