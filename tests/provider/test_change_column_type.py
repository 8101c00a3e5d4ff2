"""DeltaChangeColumnTypeOperator as the README's section describes it: a widening in the worker,
metadata only (the files keep their type and are read in the new one), the protocol's
``typeWidening`` feature as deltalake sees it, refusals that commit nothing, and what a rerun does."""

from __future__ import annotations

import datetime
import os
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider.exceptions import DeltaPermanentError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.operators.delta import DeltaChangeColumnTypeOperator
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

deltalake = pytest.importorskip("deltalake")


def _context(clears: int) -> dict:
    """What a task instance's context holds for the derived identity, after ``clears`` clears."""
    ti = types.SimpleNamespace(dag_id="dg", task_id="widen", map_index=-1, max_tries=clears, run_id="r")
    return {"ti": ti, "logical_date": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)}


def test_a_column_is_widened_in_the_worker_without_touching_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("Spark was reached"))
    root = str(tmp_path / "t")
    create_table(root, schema="id INT, s STRUCT<x: SMALLINT>, dt STRING", partition_by=["dt"])
    rows = {"id": pa.array([1, 2], pa.int32()), "s": pa.array([{"x": 3}, {"x": 4}]), "dt": ["a", "b"]}
    append_arrow(
        root,
        pa.table(
            rows, schema=pa.schema([("id", pa.int32()), ("s", pa.struct([("x", pa.int16())])), ("dt", pa.string())])
        ),
    )
    files = sorted(str(p) for p in (tmp_path / "t").rglob("*.parquet"))

    with pytest.raises(ValueError, match="new_type='BIGGINT': Cannot parse the type"):
        DeltaChangeColumnTypeOperator(task_id="w", table_uri=root, column="id", new_type="BIGGINT")
    op = DeltaChangeColumnTypeOperator(task_id="w", table_uri=root, column="id", new_type="BIGINT")
    assert op.execution == "local" and {"column", "new_type"} <= set(op.template_fields)
    out = op.execute({})
    assert (out["operation"], out["committed"], out["version"], out["transport"]) == ("CHANGE COLUMN", True, 2, "local")
    assert (out["column"], out["from_type"], out["to_type"]) == ("id", "integer", "long")
    nested = DeltaChangeColumnTypeOperator(task_id="w", table_uri=root, column="s.x", new_type="INT").execute({})
    assert (nested["column"], nested["from_type"], nested["to_type"]) == ("s.x", "short", "integer")

    # no file was written or rewritten; the files keep their types, the table reads them in the new ones
    assert sorted(str(p) for p in (tmp_path / "t").rglob("*.parquet")) == files
    assert all(pq.read_schema(f).field("id").type == pa.int32() for f in files)
    table = read_snapshot_table(load_snapshot(storage_for(root), root))
    assert table.schema.field("id").type == pa.int64() and table.schema.field("s").type.field("x").type == pa.int32()
    assert sorted(zip(table.column("id").to_pylist(), table.column("dt").to_pylist())) == [(1, "a"), (2, "b")]
    theirs = deltalake.DeltaTable(root)
    assert "typeWidening" in (theirs.protocol().reader_features or [])
    assert theirs.metadata().configuration["delta.enableTypeWidening"] == "true"

    # refused without a commit: a partition column, a narrowing, another kind of type
    for column, new_type, message in (
        ("dt", "STRING", "Cannot change the type of partition column 'dt'"),
        ("id", "INT", "Cannot change column 'id' from long to integer"),
        ("id", "STRING", "Cannot change column 'id' from long to string"),
    ):
        with pytest.raises(DeltaPermanentError, match=message):
            DeltaChangeColumnTypeOperator(task_id="w", table_uri=root, column=column, new_type=new_type).execute({})
    assert sorted(os.listdir(tmp_path / "t" / "_delta_log"))[-1] == "00000000000000000003.json"


def test_a_rerun_of_a_widening_commits_nothing(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id INT")

    def widen(**kwargs):
        return DeltaChangeColumnTypeOperator(task_id="widen", table_uri=root, column="id", new_type="BIGINT", **kwargs)

    assert widen().execute(_context(clears=0))["version"] == 1
    retry = widen().execute(_context(clears=0))  # a retry of the same run: its commit landed
    assert (retry["version"], retry["skipped"]) == (1, True)
    kept = widen(on_rerun="skip").execute(_context(clears=1))  # a clear, on_rerun="skip"
    assert (kept["version"], kept["skipped"], kept["committed"]) == (1, True, False)
    again = widen().execute(_context(clears=1))  # a clear applies again: the column is long already, no commit
    assert (again["version"], again["committed"], again["from_type"], again["to_type"]) == (1, False, "long", "long")
    assert load_snapshot(storage_for(root), root).version == 1
