"""CREATE TABLE IF NOT EXISTS where a table already is: settled from the log in the worker, no Spark
and no source read, whatever the connection; a table that is not there is still created by Spark."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_provider.operators.delta import DeltaCreateTableOperator
from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.engine import DeltaTable


def test_an_existing_table_is_kept_in_the_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_KEPT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    uri = str(tmp_path / "t")
    DeltaTable.create(None, uri, schema="id BIGINT")
    src = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), src)
    op = DeltaCreateTableOperator(
        task_id="create", table_uri=uri, source=str(src), if_not_exists=True, conn_id="spark_kept"
    )
    result = op.execute({})
    assert result["transport"] == "local" and "submit_seconds" not in result
    assert (result["version"], result["skipped"], result["created"], result["committed"]) == (0, True, False, False)
    assert DeltaTable(None, uri).version() == 0


def test_the_registry_settles_only_an_existing_table(tmp_path):
    op = ops.get("create-table")
    uri = str(tmp_path / "t")
    params = {"table_uri": uri, "source": "/nowhere.parquet", "if_not_exists": True}
    assert not op.settled(params)  # no table yet: created by Spark from the source
    DeltaTable.create(None, uri, schema="id BIGINT")
    assert op.settled(params) and not op.settled({**params, "if_not_exists": False})


def test_the_cli_keeps_an_existing_table_without_a_session(tmp_path, capsys):
    uri = str(tmp_path / "t")
    DeltaTable.create(None, uri, schema="id BIGINT")
    # the source does not exist: reading it (or starting Spark for it) would fail
    code = cli.main(["create-table", "--table-uri", uri, "--source", str(tmp_path / "none.parquet"), "--if-not-exists"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0, last
    out = json.loads(last)
    assert (out["version"], out["created"], out["committed"]) == (0, False, False)
