"""A misspelt conn_id fails a real task at once (issue 40): no retry though the task has retries, the
error names the connection meant, nothing is written and no Spark starts (execute to failure: ~30 ms)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import HERE

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def test_a_misspelt_conn_id_fails_at_once_with_did_you_mean(airflow_home, tmp_path):
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.log.listing import latest_version
    from airflow_delta_provider_apps.engine.storage import storage_for

    table = tmp_path / "table"
    create_table(str(table), schema="id BIGINT")
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), tmp_path / "day.parquet")
    failure_file = tmp_path / "failure.json"

    airflow_home.add_dag(HERE / "dags" / "delta_test_conn_id.py")
    summary = airflow_home.run(
        "delta_test_conn_id", env={"DELTA_TEST_ROOT": str(tmp_path), "DELTA_TEST_FAILURE_FILE": str(failure_file)}
    )
    ti = summary["tasks"]["append_misspelt_conn"]
    assert summary["state"] == "failed"
    assert ti["state"] == "failed" and ti["try_number"] == 1  # retries=2, yet no retry: it cannot help
    seen = json.loads(failure_file.read_text())
    assert seen["type"] == "DeltaConfigurationError" and "AirflowFailException" in seen["mro"]
    assert "Spark connection 'spark_locl' does not exist" in seen["message"]
    assert "did you mean 'spark_local'?" in seen["message"]
    assert latest_version(storage_for(str(table)), str(table)) == 0  # nothing committed
    print(f"execute to failure: {seen['seconds']:.3f} s")
