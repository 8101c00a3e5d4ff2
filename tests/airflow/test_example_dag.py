"""The example DAG end to end: real spark-submit (local[2]) for create, append, update, delete and checkpoint; the
metrics come back through XCom (read from the Airflow DB); delta-rs reads the table we wrote.
"""

from __future__ import annotations

import pytest
from conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

ROWS_PER_DAY = 24


def test_quickstart_creates_appends_and_checkpoints(airflow_home, tmp_path):
    airflow_home.add_dag(REPO / "example_dags" / "delta_quickstart.py")
    root = tmp_path / "quickstart"
    table = root / "tables" / "events"
    summary = airflow_home.run(
        "delta_quickstart",
        date="2026-01-02",
        env={"DELTA_QUICKSTART_ROOT": str(root), "DELTA_QUICKSTART_TABLE": str(table)},
    )
    tasks = summary["tasks"]
    assert summary["state"] == "success", summary
    assert {t: v["state"] for t, v in tasks.items()} == {
        "generate_day": "success",
        "create_table": "success",
        "append_day": "success",
        "flag_large": "success",
        "drop_small": "success",
        "generate_changes": "success",
        "upsert_changes": "success",
        "checkpoint": "success",
    }

    created = tasks["create_table"]["xcom"]
    assert (created["status"], created["operation"], created["version"], created["skipped"]) == (
        "ok",
        "CREATE TABLE",
        0,
        False,
    )
    appended = tasks["append_day"]["xcom"]
    assert (appended["operation"], appended["version"], appended["skipped"]) == ("WRITE", 1, False)
    assert appended["metrics"]["numOutputRows"] == ROWS_PER_DAY
    assert appended["metrics"]["numFiles"] >= 1
    assert appended["table_uri"] == str(table)
    updated = tasks["flag_large"]["xcom"]
    assert (updated["operation"], updated["version"]) == ("UPDATE", 2)
    assert updated["metrics"]["numUpdatedRows"] == 3  # amounts 31.5, 33.0, 34.5
    assert updated["metrics"]["numCopiedRows"] == ROWS_PER_DAY - 3
    deleted = tasks["drop_small"]["xcom"]
    assert (deleted["operation"], deleted["version"]) == ("DELETE", 3)
    assert deleted["metrics"]["numDeletedRows"] == 2  # amounts 0.0 and 1.5
    assert deleted["metrics"]["numRemovedFiles"] == deleted["metrics"]["numAddedFiles"] == 1
    assert {"numCopiedRows", "scanTimeMs", "rewriteTimeMs", "executionTimeMs"} <= set(deleted["metrics"])
    merged = tasks["upsert_changes"]["xcom"]
    assert (merged["operation"], merged["version"]) == ("MERGE", 4)
    m = merged["metrics"]
    assert (m["numSourceRows"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (2, 1, 1)  # deduped
    assert m["numTargetRowsCopied"] == ROWS_PER_DAY - 2 - 1 and m["numTargetFilesRemoved"] == 1
    checkpoint = tasks["checkpoint"]["xcom"]  # execution="local": in the worker, no spark-submit
    assert checkpoint["version"] == 4 and checkpoint["metrics"]["numAddFiles"] >= 1
    assert "run_seconds" in checkpoint and "submit_seconds" not in checkpoint
    local = ("generate_day", "generate_changes", "create_table", "checkpoint")  # no Spark needed: the worker
    assert all(t["xcom"]["submit_seconds"] > 0 for k, t in tasks.items() if k not in local)

    log_dir = table / "_delta_log"
    assert (log_dir / f"{4:020d}.checkpoint.parquet").exists()
    assert (log_dir / "_last_checkpoint").exists()

    # the append emitted an Asset event for the table, carrying the new version
    import json
    import sqlite3

    con = sqlite3.connect(f"file:{airflow_home.db}?mode=ro", uri=True)
    try:
        events = con.execute(
            "SELECT e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.uri = ? AND e.source_run_id = ?",
            (f"file://{table}", summary["run_id"]),
        ).fetchall()
    finally:
        con.close()
    extras = {task: json.loads(extra) for task, extra in events}
    appended = extras["append_day"]
    assert (appended["version"], appended["operation"], appended["skipped"], appended["committed"]) == (
        1,
        "WRITE",
        False,
        True,
    )
    assert appended["metrics"]["numOutputRows"] == ROWS_PER_DAY
    # every writing task declares the table as its outlet by default, each event carrying its commit
    assert {t: e["version"] for t, e in extras.items()} == {
        "create_table": 0,
        "append_day": 1,
        "flag_large": 2,
        "drop_small": 3,
        "upsert_changes": 4,
    }

    # an independent Delta implementation reads what we wrote
    deltalake = pytest.importorskip("deltalake")
    dt = deltalake.DeltaTable(str(table))
    assert dt.version() == 4
    assert dt.metadata().partition_columns == ["dt"]
    rows = dt.to_pyarrow_table().sort_by("id").to_pylist()
    assert len(rows) == ROWS_PER_DAY - 2 + 1
    by_id = {r["id"]: r for r in rows}
    assert by_id[20260102 * 100 + 5] == {
        "id": 20260102 * 100 + 5,
        "name": "event-05-fixed-again",
        "amount": 7.25,
        "dt": "2026-01-02",
    }
    assert by_id[20260102 * 100 + 30]["name"] == "event-30"
    rows = [r for r in rows if r["id"] != 20260102 * 100 + 30]
    assert rows[0] == {"id": 20260102 * 100 + 2, "name": "event-02", "amount": 3.0, "dt": "2026-01-02"}
    assert rows[-1] == {"id": 20260102 * 100 + ROWS_PER_DAY - 1, "name": "EVENT-23", "amount": 34.5, "dt": "2026-01-02"}
    assert {r["dt"] for r in rows} == {"2026-01-02"}
    assert (table / "dt=2026-01-02").is_dir()

    # the append carried the SetTransaction identity: a re-run of the day would be skipped
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for

    snap = load_snapshot(storage_for(str(table)), str(table))
    assert snap.set_transactions["delta_quickstart.events"].version == 20260102
    history = {h["version"]: h for h in dt.history()}
    assert history[1]["userMetadata"] == "delta_quickstart 2026-01-02"
