"""Test DAG: an append whose task fails AFTER its commit landed (the worker "dies" in post_execute on
the first try), then is retried by Airflow. Exactly once: the retry reports the earlier commit
(skipped, its version and metrics) and submits nothing; the table holds one copy of the rows."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_provider.operators.delta import DeltaWriteOperator

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_exactly_once"))


class AppendThenDie(DeltaWriteOperator):
    """The commit lands, then the first try fails as a lost worker or a failed XCom push would."""

    def post_execute(self, context, result=None):
        if context["ti"].try_number == 1:
            raise RuntimeError("the worker died after the commit landed")


with DAG(dag_id="delta_test_exactly_once", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AppendThenDie(
        task_id="append_day",
        conn_id="spark_local",
        table_uri=os.path.join(ROOT, "table"),
        source=os.path.join(ROOT, "day.parquet"),
        source_format="parquet",
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
