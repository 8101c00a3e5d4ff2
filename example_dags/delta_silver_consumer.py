"""Runs whenever the lakehouse pipeline commits to silver: an Asset-scheduled DAG in place of a
version sensor. Each writing Delta operator declares its table as an outlet and attaches the
commit's version, operation and main metrics to the Asset event, which this DAG reads."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators.delta import delta_asset

ROOT = os.environ.get("DELTA_PIPELINE_ROOT", os.path.join(tempfile.gettempdir(), "delta_lakehouse"))
SILVER = delta_asset(os.path.join(ROOT, "tables", "silver_customers"))

with DAG(dag_id="delta_silver_consumer", schedule=[SILVER], start_date=datetime(2026, 1, 1), catchup=False):

    @task
    def report(triggering_asset_events=None) -> list[dict]:
        """What changed in silver: one line per commit that triggered this run."""
        seen = []
        for event in triggering_asset_events[SILVER]:
            extra = event.extra or {}
            seen.append({k: extra.get(k) for k in ("version", "operation", "committed", "metrics")})
            print(f"silver v{extra.get('version')}: {extra.get('operation')} {extra.get('metrics')}")
        return seen

    report()
