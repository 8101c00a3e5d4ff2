"""The operations that run in the worker by default (issue 44 item 6) give the result the Spark path
gives: the app as spark-submit runs it (``cli.main`` with a session and ``--spec-json``) against the
worker's run (``DeltaHook.run_in_process``), each on its own copy of the same table, the same
identity. Equal modulo timings, the table's location and the transport; the two logs' commits agree
too (operation, parameters, metrics)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow

pytestmark = pytest.mark.spark

# what differs between two runs of the same operation on two copies of a table: timings, and the size of
# a checkpoint file (it holds each copy's own random file names and times, compressed)
TIMINGS = {"run_seconds", "submit_seconds", "executionTimeMs", "checkpointDurationMs", "durationMs", "sizeInBytes"}
IDENTITY = {"app_id": "parity", "app_version": 7}

CASES = [  # (operation, params, table setup)
    ("create-table", {"schema": "id BIGINT, dt STRING", "partition_by": ["dt"]}, None),
    ("checkpoint", {"cleanup": True}, "parted"),
    ("delete", {"predicate": "dt IN ('a', 'c')"}, "parted"),
    ("delete", {}, "parted"),
    ("restore", {"version": 0}, "parted"),
    ("set_properties", {"properties": {"delta.columnMapping.mode": "name"}}, "parted"),
    ("cluster_by", {"columns": ["id"]}, "flat"),
    ("change_column_type", {"column": "v", "new_type": "BIGINT"}, "flat"),
    ("add_constraint", {"name": "positive", "expression": "v > 0"}, "empty"),
]


def _setup(root: str, kind: str | None) -> None:
    if kind == "parted":
        create_table(root, schema="id BIGINT, dt STRING", partition_by=["dt"])
        append_arrow(root, pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "dt": ["a", "a", "b", "c"]}))
    elif kind == "flat":
        create_table(root, schema="id BIGINT, v INT")
        append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([5, 6], pa.int32())}))
    elif kind == "empty":
        create_table(root, schema="id BIGINT, v INT")


def _same(result: dict, root: str) -> dict:
    out = {k: v for k, v in result.items() if k not in TIMINGS | {"transport", "table_uri"}}
    out["metrics"] = {k: v for k, v in (result.get("metrics") or {}).items() if k not in TIMINGS}
    return json.loads(json.dumps(out).replace(root, "<table>"))


def _commits(root: str) -> list[tuple]:
    return [
        (
            c["version"],
            c["operation"],
            c.get("operationParameters"),
            {k: v for k, v in (c.get("operationMetrics") or {}).items() if k not in TIMINGS},
            c.get("txnId") is not None,
        )
        for c in DeltaTable(None, root).history()
    ]


@pytest.mark.parametrize("operation,params,kind", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_worker_gives_the_spark_paths_result(spark, tmp_path, capsys, operation, params, kind):
    on_spark, in_worker = str(tmp_path / "spark" / "t"), str(tmp_path / "worker" / "t")
    for root in (on_spark, in_worker):
        _setup(root, kind)
    identity = IDENTITY if operation != "checkpoint" else {}
    code = cli.main(
        [operation, "--table-uri", on_spark, "--spec-json", json.dumps({**params, **identity})], spark=spark
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0, last
    theirs = json.loads(last)
    ours = DeltaHook("unused").run_in_process(operation, in_worker, **params, **identity)
    assert ours["transport"] == "local"
    assert _same(ours, in_worker) == _same(theirs, on_spark)
    assert _commits(in_worker) == _commits(on_spark)
