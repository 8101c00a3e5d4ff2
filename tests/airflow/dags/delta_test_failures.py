"""Test DAG: an append whose source does not match the table schema.

The task has retries, yet must fail at once (a schema mismatch is not retryable), with the app's one
line as the exception; ``on_failure_callback`` records the exception Airflow saw into
``$DELTA_TEST_FAILURE_FILE`` so the test can check it.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_provider.operators.delta import DeltaWriteOperator

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_failures"))
FAILURE_FILE = os.environ.get("DELTA_TEST_FAILURE_FILE", os.path.join(ROOT, "failure.json"))


def record_failure(context) -> None:
    exc = context.get("exception")
    with open(FAILURE_FILE, "w") as f:
        json.dump(
            {
                "task_id": context["ti"].task_id,
                "type": type(exc).__name__,
                "mro": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc),
                "error_class": getattr(exc, "error_class", None),
                "retryable": getattr(exc, "retryable", None),
            },
            f,
        )


with DAG(dag_id="delta_test_failures", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    DeltaWriteOperator(
        task_id="append_mismatched",
        conn_id="spark_local",
        table_uri=os.path.join(ROOT, "table"),
        source=os.path.join(ROOT, "bad.parquet"),
        source_format="parquet",
        retries=2,
        retry_delay=timedelta(seconds=1),
        on_failure_callback=record_failure,
    )
