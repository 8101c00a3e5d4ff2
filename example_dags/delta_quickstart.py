"""Delta quickstart: create a table partitioned by ``dt``, append one day of data, update and delete
some of that day's rows, write a checkpoint.

Each Delta task that reads or writes rows is one spark-submit of the bundled apps
(``airflow_delta_provider_apps``) through the ``spark`` connection; the app's result (version and Delta's
``operationMetrics``) is the task's XCom. Creating the table from a schema and the checkpoint only
touch the log: they run in the worker itself (the default ``execution="auto"``; ``"spark"`` forces Spark).

Runs as is on one machine (``make demo`` runs it in a throw-away Airflow home). Settings, all optional:

* ``AIRFLOW_CONN_SPARK_LOCAL`` - the Spark connection (default: ``{"conn_type": "spark", "host": "local[2]"}``;
  point it at ``yarn``, ``spark://host:7077`` or ``k8s://...`` to run on a cluster).
* ``DELTA_QUICKSTART_ROOT`` - local folder for the landing files and the table
  (default: ``<tmp>/delta_quickstart``).
* ``DELTA_QUICKSTART_TABLE`` - the table's URI (default: ``<root>/tables/events``); an object store
  works too (``s3://bucket/events``, ``gs://...``, ``abfss://...``).
* ``DELTA_QUICKSTART_STORAGE_CONN`` - the Airflow connection holding the object store's credentials
  (``storage_conn_id`` of every Delta task; type ``aws``, ``google_cloud_platform``, ``wasb``);
  default: none, the environment's default credentials.

The append is idempotent per day: it commits with ``app_id="delta_quickstart.events"`` and
``app_version=<YYYYMMDD>``, so re-running a date reports ``skipped`` instead of appending twice.
The update and the delete name the day in their (templated) predicates, so they only ever touch the
day's partition: the delete rewrites only the day's file, and a re-run finds nothing left to change.
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
    DeltaUpdateOperator,
    DeltaWriteOperator,
    delta_asset,
)

# For this example only: a local Spark connection when none is configured.
os.environ.setdefault("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')

ROOT = os.environ.get("DELTA_QUICKSTART_ROOT", os.path.join(tempfile.gettempdir(), "delta_quickstart"))
TABLE_URI = os.environ.get("DELTA_QUICKSTART_TABLE", os.path.join(ROOT, "tables", "events"))
LANDING = os.path.join(ROOT, "landing")
CONN_ID = "spark_local"
STORAGE_CONN_ID = os.environ.get("DELTA_QUICKSTART_STORAGE_CONN") or None
SCHEMA = "id BIGINT, name STRING, amount DOUBLE, dt STRING"
ROWS_PER_DAY = 24

with DAG(
    dag_id="delta_quickstart",
    description="Create a partitioned Delta table, append a day, update and delete rows, checkpoint",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # Every Delta task reads the store's credentials from this connection (None: the environment's).
    default_args={"storage_conn_id": STORAGE_CONN_ID},
    tags=["delta", "example"],
    doc_md=__doc__,
):

    @task
    def generate_day(ds: str | None = None) -> str:
        """Write the day's landing file (one row per hour) and return its path."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        day = int(ds.replace("-", ""))
        table = pa.table(
            {
                "id": pa.array([day * 100 + h for h in range(ROWS_PER_DAY)], pa.int64()),
                "name": pa.array([f"event-{h:02d}" for h in range(ROWS_PER_DAY)], pa.string()),
                "amount": pa.array([round(h * 1.5, 2) for h in range(ROWS_PER_DAY)], pa.float64()),
                "dt": pa.array([ds] * ROWS_PER_DAY, pa.string()),
            }
        )
        folder = os.path.join(LANDING, f"dt={ds}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "events.parquet")
        pq.write_table(table, path)
        return path

    @task
    def generate_changes(ds: str | None = None) -> str:
        """Write the day's late corrections: hour 5 corrected twice (the later ``seq`` wins), a new hour 30."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        day = int(ds.replace("-", ""))
        table = pa.table(
            {
                "id": pa.array([day * 100 + 5, day * 100 + 5, day * 100 + 30], pa.int64()),
                "name": pa.array(["event-05-fixed", "event-05-fixed-again", "event-30"], pa.string()),
                "amount": pa.array([7.0, 7.25, 45.0], pa.float64()),
                "dt": pa.array([ds] * 3, pa.string()),
                "seq": pa.array([1, 2, 1], pa.int64()),
            }
        )
        folder = os.path.join(LANDING, "changes", f"dt={ds}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "changes.parquet")
        pq.write_table(table, path)
        return path

    create_table = DeltaCreateTableOperator(
        task_id="create_table",
        conn_id=CONN_ID,
        table_uri=TABLE_URI,
        schema=SCHEMA,
        partition_by=["dt"],
        description="Quickstart events, one partition per day",
        if_not_exists=True,
    )

    append_day = DeltaWriteOperator(
        task_id="append_day",
        conn_id=CONN_ID,
        table_uri=TABLE_URI,
        source="{{ ti.xcom_pull(task_ids='generate_day') }}",
        source_format="parquet",
        mode="append",
        app_id="delta_quickstart.events",
        app_version="{{ logical_date.strftime('%Y%m%d') }}",
        user_metadata="delta_quickstart {{ ds }}",
        outlets=[delta_asset(TABLE_URI)],
    )

    flag_large = DeltaUpdateOperator(
        task_id="flag_large",
        conn_id=CONN_ID,
        table_uri=TABLE_URI,
        updates={"name": "upper(name)"},
        predicate="dt = '{{ ds }}' AND amount > 30 AND name = lower(name)",
    )

    drop_small = DeltaDeleteOperator(
        task_id="drop_small",
        conn_id=CONN_ID,
        table_uri=TABLE_URI,
        predicate="dt = '{{ ds }}' AND amount < 3",
    )

    # upsert by key: matched rows updated, new ones inserted; duplicate keys resolved by the greatest seq
    upsert_changes = DeltaMergeOperator(
        task_id="upsert_changes",
        conn_id=CONN_ID,
        table_uri=TABLE_URI,
        source="{{ ti.xcom_pull(task_ids='generate_changes') }}",
        key_columns=["id"],
        dedupe_by="seq",
    )

    # a checkpoint only reads and writes the log: run it in the worker, without a Spark application
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=TABLE_URI)  # in the worker

    [generate_day(), create_table] >> append_day >> flag_large >> drop_small
    [drop_small, generate_changes()] >> upsert_changes >> checkpoint
