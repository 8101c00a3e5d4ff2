"""Test DAG for a real backfill: each logical date generates that day's 5 rows and appends them (no
app_id: the task instance's identity). On the first try of the dates named in
``$DELTA_TEST_FLAKY_DATES`` the task fails after its commit landed (as a lost worker would), so Airflow
retries it."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_delta_provider.operators.delta import DeltaWriteOperator

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_backfill"))
FLAKY = set(filter(None, os.environ.get("DELTA_TEST_FLAKY_DATES", "").split(",")))


class AppendThenDieOnce(DeltaWriteOperator):
    def post_execute(self, context, result=None):
        if context["ds"] in FLAKY and context["ti"].try_number == 1:
            raise RuntimeError("the worker died after the commit landed")


with DAG(
    dag_id="delta_test_backfill",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    end_date=datetime(2026, 1, 3),
    catchup=False,
    max_active_runs=3,
):

    @task
    def generate(ds=None):
        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(os.path.join(ROOT, "in"), exist_ok=True)
        path = os.path.join(ROOT, "in", f"{ds}.parquet")
        pq.write_table(pa.table({"day": [ds] * 5, "n": list(range(5))}), path)
        return path

    generate() >> AppendThenDieOnce(
        task_id="append_day",
        conn_id="spark_local",
        table_uri=os.path.join(ROOT, "table"),
        source=os.path.join(ROOT, "in", "{{ ds }}.parquet"),
        source_format="parquet",
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
