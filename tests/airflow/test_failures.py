"""A failing app fails the task with the app's ONE line (not pages of Spark log), and a non-retryable
error is not retried even though the task has retries. Real spark-submit, once.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import HERE

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def test_schema_mismatch_fails_without_retry_with_one_line(airflow_home, tmp_path):
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.log.listing import latest_version
    from airflow_delta_provider_apps.engine.storage import storage_for

    table = tmp_path / "table"
    create_table(str(table), schema="id BIGINT, name STRING")
    pq.write_table(pa.table({"id": ["not-a-number"], "other": [1.5]}), tmp_path / "bad.parquet")
    failure_file = tmp_path / "failure.json"

    airflow_home.add_dag(HERE / "dags" / "delta_test_failures.py")
    summary = airflow_home.run(
        "delta_test_failures",
        env={"DELTA_TEST_ROOT": str(tmp_path), "DELTA_TEST_FAILURE_FILE": str(failure_file)},
    )
    ti = summary["tasks"]["append_mismatched"]
    assert summary["state"] == "failed"
    assert ti["state"] == "failed" and ti["try_number"] == 1  # retries=2, yet no retry: it cannot help
    assert ti["xcom"] is None

    seen = json.loads(failure_file.read_text())
    assert seen["type"] == "DeltaPermanentError"
    assert "AirflowFailException" in seen["mro"]
    assert seen["error_class"] == "SchemaMismatchError" and seen["retryable"] is False
    message = seen["message"]
    assert message.startswith("SchemaMismatchError: ")
    assert "\n" not in message and len(message) < 1500
    assert "Cause:" in message and "Fix:" in message
    assert "org.apache.spark" not in message and "Traceback" not in message
    # nothing was committed
    assert latest_version(storage_for(str(table)), str(table)) == 0
