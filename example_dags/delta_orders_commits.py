"""One table written by an Airflow pipeline AND by outside writers, and a consumer DAG that runs on
every commit of it: each commit announced exactly once, in version order, whoever made it.

The setup (README, *Commit-driven scheduling*):

* the table's Asset is declared ONCE, with its watcher (``ORDERS`` below), and that same object is
  used wherever the asset appears: as the consumer's ``schedule`` and as the ``outlets`` of every
  operator writing the table (declare it in one module that every DAG file imports when the DAGs
  live in several files). Two different declarations of one asset URI (one with the watcher, one
  without, e.g. an operator's default outlet) make each DAG's parse undo the other's watcher;
* the watcher (``delta_table_watcher``, on the triggerer) is the one announcer: an operator whose
  outlet is watched for its table emits no asset event of its own, so a commit made by the pipeline
  is announced by the watcher like a commit made by a notebook or another engine;
* its position (the last version announced) is kept in the asset's state store, so triggerer
  restarts and DAG parses neither skip nor repeat a commit.

``delta_orders_pipeline`` loads each day with ``mode="overwrite", replace_where="dt = '{{ ds }}'"``:
the daily load that reruns cleanly after a clear or a reprocessing backfill, even after later DML
of the same day (an append's ``on_rerun="replace"`` cannot take back rows a later DELETE rewrote).

Settings: ``DELTA_PIPELINE_ROOT`` (local folder for the landing files and the table),
``DELTA_WATCH_POLL_SECONDS`` (the watcher's poll interval), ``AIRFLOW_CONN_SPARK_LOCAL``.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators.delta import (
    DeltaCreateTableOperator,
    DeltaDeleteOperator,
    DeltaOptimizeOperator,
    DeltaWriteOperator,
    delta_asset,
)
from airflow_delta_provider.triggers.delta import delta_table_watcher

os.environ.setdefault("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
ROOT = os.environ.get("DELTA_PIPELINE_ROOT", os.path.join(tempfile.gettempdir(), "delta_orders"))
ORDERS_URI = os.path.join(ROOT, "tables", "orders")
# the one declaration of the table's asset: the consumer's schedule and the writers' outlet
ORDERS = delta_asset(
    ORDERS_URI,
    watchers=[
        delta_table_watcher(
            ORDERS_URI,
            # one event per poll, with every new commit (per_commit=True: one event per commit, in
            # bursts: Airflow hands an event that arrives while the consumer's run is being created
            # to the run after that)
            poll_interval=float(os.environ.get("DELTA_WATCH_POLL_SECONDS", "30")),
            start_version=0,  # the first triggerer announces every commit after the table's creation
        )
    ],
)

with DAG(
    dag_id="delta_orders_pipeline",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example"],
):

    @task
    def land_orders(ds=None) -> str:
        """The day's orders as a parquet file (some of them cancelled)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        day = int(ds.replace("-", ""))
        folder = os.path.join(ROOT, "landing")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"orders_{ds}.parquet")
        rows = {
            "order_id": [day * 100 + n for n in range(10)],
            "status": ["cancelled" if n % 4 == 0 else "placed" for n in range(10)],
            "amount": [float(n) * 2.5 for n in range(10)],
            "dt": [ds] * 10,
        }
        pq.write_table(pa.table(rows), path)
        return path

    create = DeltaCreateTableOperator(
        task_id="create_orders",
        table_uri=ORDERS_URI,
        schema="order_id BIGINT, status STRING, amount DOUBLE, dt STRING",
        partition_by=["dt"],
        if_not_exists=True,
        outlets=[ORDERS],
    )
    load_day = DeltaWriteOperator(  # the daily load that reruns cleanly: the day's rows replaced
        task_id="load_day",
        table_uri=ORDERS_URI,
        source="{{ ti.xcom_pull(task_ids='land_orders') }}",
        mode="overwrite",
        replace_where="dt = '{{ ds }}'",
        conn_id="spark_local",
        outlets=[ORDERS],
    )
    drop_cancelled = DeltaDeleteOperator(
        task_id="drop_cancelled",
        table_uri=ORDERS_URI,
        predicate="dt = '{{ ds }}' AND status = 'cancelled'",
        execution="local",
        outlets=[ORDERS],
    )
    compact = DeltaOptimizeOperator(
        task_id="compact",
        table_uri=ORDERS_URI,
        partition_filter="dt = '{{ ds }}'",
        execution="local",
        outlets=[ORDERS],
    )
    land_orders() >> create >> load_day >> drop_cancelled >> compact


with DAG(dag_id="delta_orders_consumer", schedule=[ORDERS], start_date=datetime(2026, 1, 1), catchup=False):

    @task
    def new_commits(triggering_asset_events=None) -> list[int]:
        """The versions that started this run: each event names the commits one poll found, and the
        scheduler may put several events into one run. Put the work on the changed data here, e.g. a
        merge whose source is the table's change data feed."""
        commits = [c for e in triggering_asset_events[ORDERS] for c in e.extra["payload"]["commits"]]
        for c in commits:
            print(f"orders v{c['version']}: {c['operation']} {c['metrics']} partitions {c['partition_keys']}")
        return [c["version"] for c in commits]

    new_commits()
