"""A write whose task fails after its commit landed and is retried by Airflow applies once, and its
XCom holds the earlier commit's metrics (real spark-submit for the first try, none for the retry)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import HERE

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]


def test_a_retry_after_a_landed_commit_applies_once(airflow_home, tmp_path):
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot, read_commit_infos
    from airflow_delta_provider_apps.engine.storage import storage_for

    table = str(tmp_path / "table")
    create_table(table, schema="id BIGINT, name STRING")
    pq.write_table(pa.table({"id": list(range(10)), "name": [f"n{i}" for i in range(10)]}), tmp_path / "day.parquet")

    airflow_home.add_dag(HERE / "dags" / "delta_test_exactly_once.py")
    lineage = tmp_path / "openlineage.json"  # OpenLineage's own file transport, through its Airflow listener
    transport = json.dumps({"type": "file", "log_file_path": str(lineage), "append": True})
    summary = airflow_home.run(
        "delta_test_exactly_once",
        env={"DELTA_TEST_ROOT": str(tmp_path), "AIRFLOW__OPENLINEAGE__TRANSPORT": transport},
    )
    ti = summary["tasks"]["append_day"]
    assert summary["state"] == "success" and ti["try_number"] == 2  # the first try failed after its commit
    snap = load_snapshot(storage_for(table), table)
    assert snap.version == 1  # one WRITE commit, not two
    rows = pa.concat_tables([pq.read_table(f"{table}/{p}") for p in snap.files.column("path").to_pylist()])
    assert sorted(rows.column("id").to_pylist()) == list(range(10))  # one copy of the day's rows
    infos = read_commit_infos(storage_for(table), table, range(snap.version + 1))
    assert [infos[v].operation for v in sorted(infos)] == ["CREATE TABLE", "WRITE"]
    xcom = ti["xcom"]
    assert xcom["skipped"] is True and xcom["version"] == 1 and xcom["metrics"]["numOutputRows"] == 10
    assert xcom["app_id"].startswith("airflow:delta_test_exactly_once/append_day@")
    # the listener's COMPLETE event for the task carries our datasets: the source read, the table
    # written with its schema, version and row count
    import importlib.util

    if importlib.util.find_spec("airflow.providers.openlineage") is not None:
        events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
        done = [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"].endswith("append_day")]
        assert done, [e.get("eventType") for e in events]
        out = done[-1]["outputs"][0]
        assert (out["namespace"], out["name"]) == ("file", table)
        assert out["facets"]["version"]["datasetVersion"] == "1"
        assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["id", "name"]
        assert out["outputFacets"]["outputStatistics"]["rowCount"] == 10
        assert done[-1]["inputs"][0]["name"] == str(tmp_path / "day.parquet")
