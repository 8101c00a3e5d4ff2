"""The Hive metastore catalog end to end in a process of its own (a session with Hive support is a
JVM of its own: the shared test session has none). Run by tests/spark/test_hive_catalog.py:

    python hive_catalog_child.py WORK_DIR SPARK_CONF_JSON

As a DAG would: DeltaCreateTableOperator with ``catalog_table`` and a ``delta_hive_metastore``
connection whose ``spark_conf`` names the metastore's database; then, as a user would, our data source
registered and ``spark.table`` / ``SELECT`` of the name; a ``merge_schema`` append through the engine and
the sync the operators make after it, and the name read again; then a name already taken. Prints one
JSON line of what the session's catalog and the reads then show.
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
    from airflow_delta_provider.hooks.catalog import DeltaCatalogHook
    from airflow_delta_provider.operators.delta import DeltaCreateTableOperator
    from airflow_delta_provider_apps.datasource import register
    from airflow_delta_provider_apps.engine import DeltaTable, InvalidArgumentError
    from airflow_delta_provider_apps.engine.spark.catalog import HiveMetastoreCatalog

    root = os.path.join(work, "orders")
    ti = SimpleNamespace(dag_id="lake", task_id="create", map_index=-1, try_number=1, max_tries=1, run_id="r1")
    create = DeltaCreateTableOperator(
        task_id="create",
        table_uri=root,
        schema="id BIGINT, name STRING, day DATE",
        partition_by=["day"],
        catalog_table="silver.orders",
        catalog_conn_id="metastore",
    )
    out: dict = {"create": create.execute({"ti": ti, "logical_date": datetime(2026, 3, 1, tzinfo=UTC)})["catalog"]}
    catalog = HiveMetastoreCatalog.from_conf(spark_conf)  # the session the sync built (getOrCreate)
    spark = catalog.spark
    out["entry"] = catalog.describe("silver", "orders")
    out["tables"] = sorted(r.tableName for r in spark.sql("SHOW TABLES IN silver").collect())

    # a user's session: our source is the `delta` there, and the name reads through it
    out["registered"] = register(spark)
    table = DeltaTable.for_path(spark, root)
    table.append(spark.createDataFrame([(1, "a", datetime(2026, 3, 1).date())], "id BIGINT, name STRING, day DATE"))
    out["read_before"] = _read(spark)

    # a merge_schema write, and the sync the operators make after it: the entry takes the new column
    wider = spark.createDataFrame(
        [(2, "b", datetime(2026, 3, 2).date(), "web")], "id BIGINT, name STRING, day DATE, channel STRING"
    )
    result = table.append(wider, merge_schema=True)
    out["schema_changes"] = result.get("schema_changes")
    out["resync"] = DeltaCatalogHook("metastore").sync("silver.orders", root)
    out["entry_after"] = catalog.describe("silver", "orders")
    out["read_after"] = _read(spark)
    out["resync_again"] = DeltaCatalogHook("metastore").sync("silver.orders", root)["action"]

    other = os.path.join(work, "other")
    DeltaTable.create(None, other, schema="x INT")
    try:
        DeltaCatalogHook("metastore").sync("silver.orders", other)
    except InvalidArgumentError as e:
        out["taken"] = e.problem
    out["entry_final"] = catalog.describe("silver", "orders")
    return out


def _read(spark) -> dict:
    """The catalog name read as a user reads it: ``spark.table`` and SQL, and the scan Spark planned."""
    by_name = spark.table("silver.orders")
    return {
        "columns": by_name.columns,
        "rows": sorted(tuple(str(v) for v in r) for r in by_name.collect()),
        "sql": sorted(tuple(str(v) for v in r) for r in spark.sql("SELECT * FROM silver.orders").collect()),
        "plan": by_name._jdf.queryExecution().executedPlan().toString(),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], json.loads(sys.argv[2])), default=str), flush=True)
