"""Exactly once under a REAL Airflow 3 deployment: an API server, a dag-processor, a triggerer and a
scheduler with the LocalExecutor on SQLite (Airflow 3.3 has no SequentialExecutor), started here on
loopback, running the lakehouse pipeline example (example_dags/delta_lakehouse_pipeline.py).

The pipeline is backfilled over 3 dates; on the first try, its bronze load (first date) and its
silver upsert (last date) fail after their commit landed and are retried by Airflow (no new commit);
2 dates are cleared and re-run (the day's load replaces its rows, replace_where by day; the upsert applies
again); the
range is backfilled again without ``--reprocess-behavior`` and its last two dates with
``--reprocess-behavior completed``. Throughout, bronze holds
each day's records exactly once, silver equals the one-pass result computed from the landing files
without our engine, and the tables' histories hold exactly the commits described."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO
from deployment import Deployment

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

DATES = ["2026-01-01", "2026-01-02", "2026-01-03"]


# The lakehouse pipeline example as this test runs it: the same DAG file, plus (appended) a worker that
# dies after the commit landed on the first try of load_bronze on the first date and of upsert_silver
# on the last (Airflow retries both), and the erasure DELETE and OPTIMIZE in the worker (execution
# "local": they need no Spark, which keeps the test's spark-submits to the two that need it).
PIPELINE_TEST_ADDITIONS = """

# ---- added by tests/airflow/test_backfill.py
import datetime as _dt

_DIE_AFTER_COMMIT = {"load_bronze": "2026-01-01", "upsert_silver": "2026-01-03"}


def _dies_once(task_id):
    def post_execute(context, result=None):
        if context["ds"] == _DIE_AFTER_COMMIT[task_id] and context["ti"].try_number == 1:
            raise RuntimeError("the worker died after the commit landed")

    return post_execute


for _task_id in _DIE_AFTER_COMMIT:
    _task = dag.get_task(_task_id)
    _task.post_execute, _task.retries, _task.retry_delay = _dies_once(_task_id), 1, _dt.timedelta(0)
for _task_id in ("erase", "compact"):
    dag.get_task(_task_id).execution = "local"
"""
PIPELINE_ID = "delta_lakehouse_pipeline"


def _one_pass_silver(landing: Path, dates) -> list[tuple]:
    """Silver after one clean pass over ``dates``, computed from the landing files without our engine:
    per date, the latest record per customer replaces it (or is inserted), then the day's erasure list
    (the example's formula) deletes."""
    import zlib

    import pyarrow.parquet as pq

    silver: dict = {}
    for ds in dates:
        day = sorted(pq.read_table(landing / f"customers_{ds}.parquet").to_pylist(), key=lambda r: r["updated_at"])
        for r in day:  # the greatest updated_at per key wins (dedupe_by="updated_at")
            silver[r["customer_id"]] = r
        seed = zlib.crc32(ds.encode())
        for cid in {(seed >> 3) % 40, (seed >> 7) % 40}:
            silver.pop(cid, None)
    cols = ["customer_id", "name", "tier", "updated_at", "region", "dt"]
    return sorted(tuple(r[c] for c in cols) for r in silver.values())


def _pipeline_state(root: Path):
    import deltalake

    bronze = deltalake.DeltaTable(str(root / "tables" / "bronze_customers"))
    silver = deltalake.DeltaTable(str(root / "tables" / "silver_customers"))
    cols = ["customer_id", "name", "tier", "updated_at", "region", "dt"]
    silver_rows = sorted(tuple(r[c] for c in cols) for r in silver.to_pyarrow_table(columns=cols).to_pylist())
    per_day = Counter(bronze.to_pyarrow_table(columns=["dt"]).column("dt").to_pylist())
    ops = lambda t: Counter(h["operation"] for h in t.history())  # noqa: E731
    return per_day, silver_rows, ops(bronze), ops(silver)


def test_the_lakehouse_pipeline_under_backfills_retries_and_clears(tmp_path, connect_server):
    """Issue 17's backfill sequence on the pipeline example: bronze holds each day's 13 records once and
    silver equals the one-pass result after the backfill (with 2 retries after landed commits), after
    clearing 2 dates, after a no-op backfill and after reprocessing the last 2 dates; the tables' histories hold
    exactly one WRITE and one MERGE per applied day. Its ~40 Spark tasks run over the suite's Spark
    Connect server (the exactly-once identity is the operators', whatever the transport; a task that
    fails after its commit over spark-submit is tests/airflow/test_retry_after_commit.py)."""
    root = tmp_path / "lake"
    text = (REPO / "example_dags" / "delta_lakehouse_pipeline.py").read_text() + PIPELINE_TEST_ADDITIONS
    conn = json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port})
    d = Deployment(
        tmp_path / "airflow",
        root,
        PIPELINE_ID,
        text,
        triggerer=True,
        DELTA_PIPELINE_ROOT=str(root),
        AIRFLOW_CONN_SPARK_LOCAL=conn,
    )
    try:
        d.start()
        backfill = ["backfill", "create", "--dag-id", PIPELINE_ID, "--from-date", DATES[0], "--to-date", DATES[-1]]
        d.admin(*backfill, "--max-active-runs", "1")  # in date order, as the daily schedule would
        d.wait(d.all_done(DATES, "upsert_silver"), "the pipeline's backfill", timeout=900)
        assert d.tries("load_bronze")["2026-01-01"] == 2 and d.tries("upsert_silver")["2026-01-03"] == 2
        expected = _one_pass_silver(root / "landing", DATES)
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (3, 3)  # the retries committed nothing

        before = d.tries("upsert_silver")
        d.admin("tasks", "clear", PIPELINE_ID, "-s", DATES[1], "-e", DATES[2], "-y")
        d.wait(d.all_done(DATES[1:], "upsert_silver", after=before), "the cleared dates", timeout=900)
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected  # replaced and re-applied
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (5, 5)

        d.wait(d.backfills_done, "the backfill to be marked completed")
        d.admin(*backfill)
        d.wait(d.backfills_done, "the no-op backfill to be marked completed")
        assert _pipeline_state(root)[2:] == (bronze_ops, silver_ops)  # runs exist: nothing ran again

        # reprocessing the last two dates (the first date's run is not part of the range: kept as is)
        before = d.tries("upsert_silver")
        again = ["backfill", "create", "--dag-id", PIPELINE_ID, "--from-date", DATES[1], "--to-date", DATES[-1]]
        d.admin(*again, "--max-active-runs", "1", "--reprocess-behavior", "completed")
        d.wait(d.all_done(DATES[1:], "upsert_silver", after=before), "the reprocessing backfill", timeout=900)
        assert d.tries("upsert_silver")[DATES[0]] == before[DATES[0]]
        per_day, silver, bronze_ops, silver_ops = _pipeline_state(root)
        assert per_day == dict.fromkeys(DATES, 13) and silver == expected
        assert (bronze_ops["WRITE"], silver_ops["MERGE"]) == (7, 7)
    finally:
        d.stop()
