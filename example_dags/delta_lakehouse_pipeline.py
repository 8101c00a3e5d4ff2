"""A daily lakehouse pipeline: landing files -> bronze (append) -> silver (upsert by key), with an
erasure list, compaction, checkpoints and a weekly VACUUM. Exactly once across retries, clears and
backfills (every writing task commits with its task instance's identity).

Per logical date ``ds``:

1. ``land_files``: the day's change records arrive as a parquet file (realistic trouble included:
   records updated twice that day, late records of earlier days, and a few erasure requests);
2. ``load_bronze``: the file is loaded into bronze (raw, as received) with ``mode="overwrite",
   replace_where="dt = '{{ ds }}'"``: the daily load that reruns cleanly (a clear or a reprocessing
   backfill replaces the day's rows, whatever later commits did to them; an append's default
   ``on_rerun="replace"`` fails, naming the later versions, once a DELETE or MERGE rewrote its files);
3. ``wait_for_bronze``: a deferrable version sensor on bronze (in production another DAG or a
   stream feeds bronze; here it passes once the day's append is in);
4. ``upsert_silver``: the day's bronze rows are upserted into silver by ``customer_id``, keeping the
   latest record per key (``dedupe_by="updated_at"``);
5. ``erase``: the customers named in the day's erasure list are deleted from silver;
6. ``compact``: OPTIMIZE silver's partitions the day touched;
7. ``checkpoint`` (in the worker) and, on Sundays, ``vacuum`` (in the worker).

``make demo`` runs it for a few days after the quickstart and prints silver's history. Settings:
``AIRFLOW_CONN_SPARK_LOCAL`` (the Spark connection), ``DELTA_PIPELINE_ROOT`` (local folder for the
landing files and both tables).
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_delta_provider.operators.delta import (
    DeltaCheckpointOperator,
    DeltaCreateTableOperator,
    DeltaDeleteOperator,
    DeltaMergeOperator,
    DeltaOptimizeOperator,
    DeltaVacuumOperator,
    DeltaWriteOperator,
)
from airflow_delta_provider.sensors.delta import DeltaTableVersionSensor

os.environ.setdefault("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
ROOT = os.environ.get("DELTA_PIPELINE_ROOT", os.path.join(tempfile.gettempdir(), "delta_lakehouse"))
BRONZE = os.path.join(ROOT, "tables", "bronze_customers")
SILVER = os.path.join(ROOT, "tables", "silver_customers")
SPARK = {"conn_id": "spark_local"}
SCHEMA = "customer_id BIGINT, name STRING, tier STRING, updated_at TIMESTAMP, region STRING, dt STRING"

with DAG(
    dag_id="delta_lakehouse_pipeline",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example"],
) as dag:

    @task
    def land_files(ds=None) -> dict:
        """The day's change records as a parquet file, and the day's erasure list."""
        import datetime as dt
        import zlib

        import pyarrow as pa
        import pyarrow.parquet as pq

        day = dt.date.fromisoformat(ds)
        seed = zlib.crc32(ds.encode())
        ids = [(seed >> k) % 40 for k in range(12)] + [day.day % 40]  # some keys twice: updated twice
        rows = []
        for n, cid in enumerate(ids):
            late = n % 5 == 4  # a late record: it belongs to an earlier day
            when = dt.datetime(day.year, day.month, day.day, 8 + n % 10, n % 60, tzinfo=dt.UTC)
            rows.append(
                {
                    "customer_id": cid,
                    "name": f"customer-{cid}",
                    "tier": ["bronze", "silver", "gold"][(seed + n) % 3],
                    "updated_at": when - dt.timedelta(days=1) if late else when,
                    "region": ["eu", "us", "apac"][cid % 3],
                    "dt": ds,
                }
            )
        folder = os.path.join(ROOT, "landing")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"customers_{ds}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        erase = sorted({(seed >> 3) % 40, (seed >> 7) % 40})
        return {"path": path, "rows": len(rows), "erase": f"customer_id IN ({', '.join(map(str, erase))})"}

    @task.short_circuit
    def is_sunday(logical_date=None) -> bool:
        return logical_date.weekday() == 6

    landed = land_files()
    create_bronze = DeltaCreateTableOperator(
        task_id="create_bronze",
        table_uri=BRONZE,
        schema=SCHEMA,
        partition_by=["dt"],
        if_not_exists=True,
    )
    create_silver = DeltaCreateTableOperator(
        task_id="create_silver",
        table_uri=SILVER,
        schema=SCHEMA,
        partition_by=["region"],
        if_not_exists=True,
        properties={"delta.setTransactionRetentionDuration": "interval 30 days"},
    )
    load_bronze = DeltaWriteOperator(  # the day's rows replaced: reruns cleanly
        task_id="load_bronze",
        table_uri=BRONZE,
        source="{{ ti.xcom_pull(task_ids='land_files')['path'] }}",
        source_format="parquet",
        mode="overwrite",
        replace_where="dt = '{{ ds }}'",
        **SPARK,
    )
    wait_for_bronze = DeltaTableVersionSensor(
        task_id="wait_for_bronze",
        table_uri=BRONZE,
        baseline_version="{{ ti.xcom_pull(task_ids='load_bronze')['version'] - 1 }}",
        deferrable=True,
        poke_interval=5,
        timeout=600,
    )
    upsert_silver = DeltaMergeOperator(
        task_id="upsert_silver",
        table_uri=SILVER,
        source=BRONZE,
        source_format="delta",
        source_query="SELECT * FROM source WHERE dt = '{{ ds }}'",
        key_columns=["customer_id"],
        dedupe_by="updated_at",
        **SPARK,
    )
    erase = DeltaDeleteOperator(
        task_id="erase",
        table_uri=SILVER,
        predicate="{{ ti.xcom_pull(task_ids='land_files')['erase'] }}",
        **SPARK,
    )
    compact = DeltaOptimizeOperator(task_id="compact", table_uri=SILVER, **SPARK)
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=SILVER)  # log only: in the worker
    vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=SILVER, retention_hours=168)

    landed >> create_bronze >> create_silver >> load_bronze >> wait_for_bronze >> upsert_silver
    upsert_silver >> erase >> compact >> checkpoint >> is_sunday() >> vacuum
