"""The Hive metastore synced inside the Spark app that made the commit, in the app's own session (issue
41 item 2), in a process of its own (the app's session holds the embedded Derby metastore). Run by
tests/spark/test_hive_catalog.py:

    python hive_catalog_app_child.py WORK_DIR SPARK_CONF_JSON

A DAG's task as the worker runs it: DeltaCreateTableOperator with ``catalog_table``, a
``delta_hive_metastore`` connection and a ``spark`` connection. CREATE TABLE from a schema needs no
Spark, but its catalog sync does: it goes to spark-submit, whose app builds its session with Hive support
and the connection's ``spark_conf``, commits, syncs, and returns ``catalog``; this process starts no
Spark. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from types import SimpleNamespace


def main(work: str, spark_conf: dict) -> dict:
    os.environ["AIRFLOW_CONN_METASTORE"] = json.dumps(
        {"conn_type": "delta_hive_metastore", "extra": {"spark_conf": spark_conf}}
    )
    os.environ["AIRFLOW_CONN_SPARK_LOCAL"] = json.dumps({"conn_type": "spark", "host": "local[1]"})
    from airflow_delta_provider.operators.delta import DeltaCreateTableOperator

    ti = SimpleNamespace(dag_id="lake", task_id="create", map_index=-1, try_number=1, max_tries=1, run_id="r1")
    op = DeltaCreateTableOperator(
        task_id="create",
        table_uri=os.path.join(work, "orders"),
        schema="id BIGINT, name STRING, day DATE",
        catalog_table="silver.orders",
        catalog_conn_id="metastore",
        conn_id="spark_local",
    )
    first = op.execute({"ti": ti, "logical_date": datetime(2026, 3, 1, tzinfo=UTC)})
    out: dict = {"transport": first["transport"], "catalog": first["catalog"]}
    from pyspark import SparkContext

    out["worker_spark"] = SparkContext._active_spark_context is not None  # this process started none
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], json.loads(sys.argv[2])), default=str), flush=True)
