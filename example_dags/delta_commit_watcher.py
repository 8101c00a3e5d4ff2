"""Event-driven scheduling on a Delta table's commits (Airflow 3): this DAG runs once for each new
data commit to bronze, whoever made it (a DAG, a notebook, another engine), with no sensor and no
polling task. ``delta_table_watcher`` puts the table's trigger on the triggerer as the Asset's
``AssetWatcher``; each event carries the commit's version, operation, metrics and the partitions it
changed. OPTIMIZE and VACUUM commits start nothing (they change no rows); ``operations=`` narrows
the kinds further. The watermark lives in the asset state store (Airflow 3.3+), so a restarted
triggerer announces every commit once.

Put the work on the changed data here: e.g. a ``DeltaMergeOperator`` whose source is the table's
change data feed (``source_options={"readChangeFeed": "true"}``), which takes exactly the versions
not yet merged, however the runs were batched."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators.delta import delta_asset
from airflow_delta_provider.triggers.delta import delta_table_watcher

ROOT = os.environ.get("DELTA_PIPELINE_ROOT", os.path.join(tempfile.gettempdir(), "delta_lakehouse"))
BRONZE_URI = os.path.join(ROOT, "tables", "bronze_customers")
BRONZE = delta_asset(
    BRONZE_URI,
    watchers=[
        delta_table_watcher(
            BRONZE_URI,
            operations=["WRITE", "MERGE", "DELETE", "UPDATE"],
            poll_interval=float(os.environ.get("DELTA_WATCH_POLL_SECONDS", "30")),
            start_version=0,  # the first triggerer announces every commit after the table's creation
        )
    ],
)

with DAG(dag_id="delta_bronze_commits", schedule=[BRONZE], start_date=datetime(2026, 1, 1), catchup=False):

    @task
    def changed_partitions(triggering_asset_events=None) -> dict:
        """The commits that started this run (the scheduler may batch events that queue up) and the
        partitions they changed."""
        events = triggering_asset_events[BRONZE]
        # only the watcher's events carry "payload"; for a table DAGs write too, declare its asset once
        # and use it as those operators' outlets: they then leave the announcing to the watcher
        # (example_dags/delta_orders_commits.py)
        commits = [c for e in events if "payload" in (e.extra or {}) for c in e.extra["payload"]["commits"]]
        for c in commits:
            print(f"bronze v{c['version']}: {c['operation']} {c['metrics']} partitions {c['partition_keys']}")
        return {
            "versions": [c["version"] for c in commits],
            "partitions": sorted({k for c in commits for k in c["partition_keys"]}),
        }

    changed_partitions()
