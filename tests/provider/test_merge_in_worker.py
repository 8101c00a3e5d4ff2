"""``execution="local"`` where it reads a source (the README's *Operators* and *DeltaMergeOperator*
say the same): MERGE runs in the worker (tests/provider/test_operators.py merges a parquet and a
Delta source there); what needs Spark fails the task before anything is written: a CSV source or an
ON without a key equality for MERGE, a source for CREATE TABLE (when the task starts), any WRITE (at
DAG parse time)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider.exceptions import DeltaPermanentError
from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.operators.delta import DeltaCreateTableOperator, DeltaMergeOperator, DeltaWriteOperator
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow


def test_what_needs_spark_fails_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("Spark was reached"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, v STRING")
    append_arrow(root, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"id": [2], "v": ["B"]}), tmp_path / "src" / "part-0.parquet")
    (tmp_path / "src.csv").write_text("id,v\n2,B\n")
    log = sorted(os.listdir(tmp_path / "t" / "_delta_log"))
    data = sorted(p for p in os.listdir(tmp_path / "t") if p.endswith(".parquet"))

    with pytest.raises(DeltaPermanentError, match="Cannot read a csv source without Spark"):
        DeltaMergeOperator(
            task_id="m",
            table_uri=root,
            source=str(tmp_path / "src.csv"),
            source_format="csv",
            key_columns=["id"],
            execution="local",
        ).execute({})
    with pytest.raises(DeltaPermanentError, match="A MERGE without Spark needs ON to equate"):
        DeltaMergeOperator(
            task_id="m",
            table_uri=root,
            source=str(tmp_path / "src"),
            predicate="target.id < source.id",
            clauses=[{"when": "matched", "then": "delete"}],
            execution="local",
        ).execute({})
    assert sorted(os.listdir(tmp_path / "t" / "_delta_log")) == log
    assert sorted(p for p in os.listdir(tmp_path / "t") if p.endswith(".parquet")) == data

    ctas = DeltaCreateTableOperator(
        task_id="c", table_uri=str(tmp_path / "new"), source=str(tmp_path / "src"), execution="local"
    )
    with pytest.raises(DeltaPermanentError, match="cannot run in the worker process with these arguments"):
        ctas.execute({})
    assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match="execution='local' is not available: 'write'"):
        DeltaWriteOperator(task_id="w", table_uri=root, source=str(tmp_path / "src"), execution="local")

    # the same MERGE with a key equality runs in the worker
    done = DeltaMergeOperator(
        task_id="m", table_uri=root, source=str(tmp_path / "src"), key_columns=["id"], execution="local"
    ).execute({})
    assert (done["transport"], done["version"], done["metrics"]["numTargetRowsUpdated"]) == ("local", 2, 1)


def test_a_partitioned_parquet_folder_is_refused_in_the_worker(tmp_path, monkeypatch):
    """A parquet source in ``k=v`` subfolders (Spark's partition columns) is refused without Spark
    before anything is written, instead of being read without its partition columns."""
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("Spark was reached"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, v STRING, day STRING")
    append_arrow(root, pa.table({"id": [1, 2], "v": ["a", "b"], "day": ["d1", "d1"]}))
    (tmp_path / "src" / "day=d2").mkdir(parents=True)
    pq.write_table(pa.table({"id": [2], "v": ["B"]}), tmp_path / "src" / "day=d2" / "part-0.parquet")
    log = sorted(os.listdir(tmp_path / "t" / "_delta_log"))

    with pytest.raises(DeltaPermanentError, match="Cannot read the parquet folder .* without Spark") as e:
        DeltaMergeOperator(
            task_id="m", table_uri=root, source=str(tmp_path / "src"), key_columns=["id"], execution="local"
        ).execute({})
    assert "partition columns" in str(e.value) and "execution='spark'" in str(e.value)
    assert sorted(os.listdir(tmp_path / "t" / "_delta_log")) == log
