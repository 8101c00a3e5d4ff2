"""Test DAG: a task whose ``conn_id`` is misspelt (``spark_locl``; the home defines ``spark_local``).

It has retries, yet must fail at once (a missing connection is not retryable) with "did you mean";
``pre_execute`` and ``on_failure_callback`` record when execute began and the exception Airflow saw
into ``$DELTA_TEST_FAILURE_FILE``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_provider.operators.delta import DeltaWriteOperator

ROOT = os.environ.get("DELTA_TEST_ROOT", os.path.join(tempfile.gettempdir(), "delta_test_conn_id"))
FAILURE_FILE = os.environ.get("DELTA_TEST_FAILURE_FILE", os.path.join(ROOT, "failure.json"))
_started: dict = {}


def started(context) -> None:
    _started["at"] = time.monotonic()


def record_failure(context) -> None:
    exc = context.get("exception")
    with open(FAILURE_FILE, "w") as f:
        json.dump(
            {
                "seconds": time.monotonic() - _started["at"] if "at" in _started else None,
                "type": type(exc).__name__,
                "mro": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc),
            },
            f,
        )


with DAG(dag_id="delta_test_conn_id", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    DeltaWriteOperator(
        task_id="append_misspelt_conn",
        conn_id="spark_locl",
        table_uri=os.path.join(ROOT, "table"),
        source=os.path.join(ROOT, "day.parquet"),
        retries=2,
        retry_delay=timedelta(seconds=1),
        pre_execute=started,
        on_failure_callback=record_failure,
    )
