"""Event-driven scheduling on a Delta table's commits under a REAL Airflow deployment (scheduler,
dag-processor, triggerer, API server; tests/airflow/deployment.py) running the example DAG
example_dags/delta_commit_watcher.py: a consumer scheduled on the table's Asset with
``delta_table_watcher`` runs for each new data commit made outside Airflow (here by the engine in this
process) with the commit's version in its Asset event; a triggerer restart in between loses none and
repeats none (the watermark in the asset state store); an OPTIMIZE starts no run."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from conftest import REPO
from deployment import Deployment

from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.table import DeltaTable

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]

DAG_ID = "delta_bronze_commits"


def _append(root: str, ids, dt: str) -> int:
    return append_arrow(root, pa.table({"id": pa.array(ids, pa.int64()), "dt": [dt] * len(ids)})).to_dict()["version"]


def test_three_commits_start_their_runs_once_across_a_triggerer_restart(tmp_path):
    root = tmp_path / "lake"
    table = str(root / "tables" / "bronze_customers")
    DeltaTable.create(None, table, schema="id BIGINT, dt STRING", partition_by=["dt"])
    d = Deployment(
        tmp_path / "airflow",
        root,
        DAG_ID,
        (REPO / "example_dags" / "delta_commit_watcher.py").read_text(),
        triggerer=True,
        DELTA_PIPELINE_ROOT=str(root),
        DELTA_WATCH_POLL_SECONDS="1",
        # asset-triggered runs are created by the scheduler's DAG-run pass, which this switch gates
        AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="True",
    )

    def runs(*states):
        marks = ",".join("?" * len(states))
        return d.query(f"SELECT count(*) FROM dag_run WHERE dag_id = ? AND state IN ({marks})", DAG_ID, *states)[0][0]

    def payloads():
        rows = d.query("SELECT extra FROM asset_event ORDER BY id")
        return [json.loads(extra)["payload"] for (extra,) in rows if "payload" in json.loads(extra)]

    def consumed():
        rows = d.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'changed_partitions' AND key = 'return_value'",
            DAG_ID,
        )
        return [json.loads(v) for (v,) in rows]

    d.start()
    try:
        assert _append(table, [1], "2026-01-01") == 1
        d.wait(lambda: runs("success") == 1, "the first commit's run")
        d.restart("triggerer")  # a new triggerer takes the watermark from the asset state store
        assert _append(table, [2], "2026-01-01") == 2
        d.wait(lambda: runs("success") == 2, "the second commit's run")
        compacted = DeltaTable(None, table).optimize()  # version 3: no rows changed, no run
        assert (compacted["operation"], compacted["version"], compacted["metrics"]["numRemovedFiles"]) == (
            "OPTIMIZE",
            3,
            2,
        )
        time.sleep(3)  # several polls
        assert _append(table, [3], "2026-01-02") == 4
        d.wait(lambda: runs("success") == 3, "the third data commit's run")
        time.sleep(3)  # several more polls: nothing is announced twice
        assert [c["version"] for p in payloads() for c in p["commits"]] == [1, 2, 4]
        assert [c["versions"] for c in consumed()] == [[1], [2], [4]]
        assert [c["partitions"] for c in consumed()] == [["2026-01-01"], ["2026-01-01"], ["2026-01-02"]]
        assert runs("failed", "queued", "running") == 0 and runs("success") == 3
    finally:
        d.stop()
