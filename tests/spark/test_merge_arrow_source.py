"""A MERGE's small file source (parquet, ORC, a Delta table) read as Arrow in the app's process, no
Spark job (``source_read: "arrow"``): the same rows as Spark's read of it, the same merged table as
the Spark way (a source over the cap, lowered here), checked with deltalake against a plain-Python
model."""

from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from spark_helpers import rows

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.sources import small_source_as_arrow

pytestmark = pytest.mark.spark

CAP = "spark.airflowDelta.merge.maxSourceBytes"
TARGET = {i: (float(i), "a") for i in range(30)}


def _target(path) -> str:
    deltalake.write_deltalake(str(path), _upsert_table(TARGET))
    return str(path)


def _merge(spark, capsys, uri: str, source: str, fmt: str) -> dict:
    spec = {"table_uri": uri, "source": source, "source_format": fmt, "key_columns": ["id"]}
    code = cli.main(["merge", "--spec-json", json.dumps(spec)], spark=spark)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0, last
    return json.loads(last)


def _table_rows(uri: str) -> dict:
    return {r["id"]: (r["v"], r["s"]) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}


def _both_ways(spark, capsys, tmp_path, source: str, fmt: str, upserted: dict) -> None:
    """The source read as Arrow equals Spark's read; merged with it, and with the cap lowered (the
    Spark way), both tables hold the model's rows."""
    arrow = small_source_as_arrow(spark, source, fmt, {})
    assert arrow is not None and arrow.read == "arrow"
    spark_read = DeltaTable.for_path(spark, source).to_df() if fmt == "delta" else spark.read.format(fmt).load(source)
    assert rows(arrow.df) == rows(spark_read.toArrow())
    model = {**TARGET, **upserted}

    fast = _merge(spark, capsys, _target(tmp_path / "fast"), source, fmt)
    assert (fast["source_read"], fast["strategy"]) == ("arrow", "file_by_file"), fast
    spark.conf.set(CAP, "1")
    try:
        slow = _merge(spark, capsys, _target(tmp_path / "slow"), source, fmt)
    finally:
        spark.conf.unset(CAP)
    assert (slow["source_read"], slow["strategy"]) == ("spark", "join"), slow
    for r in (fast, slow):
        assert (r["metrics"]["numTargetRowsUpdated"], r["metrics"]["numTargetRowsInserted"]) == (
            len(upserted.keys() & TARGET.keys()),
            len(upserted.keys() - TARGET.keys()),
        )
    assert _table_rows(str(tmp_path / "fast")) == model == _table_rows(str(tmp_path / "slow"))


def _upsert_table(upserted: dict) -> pa.Table:
    ids = sorted(upserted)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [upserted[i][0] for i in ids],
            "s": [upserted[i][1] for i in ids],
        }
    )


def test_a_parquet_folder_source_is_read_as_arrow(spark, capsys, tmp_path):
    upserted = {i: (-float(i), "p") for i in range(20, 45)}
    folder = tmp_path / "src"
    folder.mkdir()
    t = _upsert_table(upserted)
    pq.write_table(t.slice(0, 10), folder / "part-0.parquet")
    pq.write_table(t.slice(10), folder / "part-1.parquet")
    (folder / "_SUCCESS").write_text("")  # hidden: Spark and the listing both leave it out
    _both_ways(spark, capsys, tmp_path, str(folder), "parquet", upserted)


def test_an_orc_file_source_is_read_as_arrow(spark, capsys, tmp_path):
    upserted = {i: (i / 2, "o") for i in range(0, 60, 3)}
    orc.write_table(_upsert_table(upserted), str(tmp_path / "src.orc"))
    _both_ways(spark, capsys, tmp_path, str(tmp_path / "src.orc"), "orc", upserted)


def test_a_delta_source_with_a_deletion_vector_is_read_as_arrow(spark, capsys, tmp_path):
    source = str(tmp_path / "src")
    written = {i: (i * 10.0, "d") for i in range(25, 40)}
    src = DeltaTable.create(
        spark, source, schema="id BIGINT, v DOUBLE, s STRING", properties={"delta.enableDeletionVectors": "true"}
    )
    src.append(spark.createDataFrame(_upsert_table(written)))
    src.delete("id % 4 = 0")  # marked in a deletion vector, the file kept
    assert any(a["deletion_vector"] for a in src.snapshot().files.to_pylist())
    _both_ways(spark, capsys, tmp_path, source, "delta", {i: r for i, r in written.items() if i % 4})


def test_a_source_over_the_limit_or_with_a_query_is_read_by_spark(spark, capsys, tmp_path, monkeypatch):
    from airflow_delta_provider_apps.engine.spark import merge

    pq.write_table(_upsert_table({1: (1.0, "x")}), tmp_path / "one.parquet")
    monkeypatch.setattr(merge, "ARROW_GROWTH", 1 << 40)  # no file is small enough
    assert small_source_as_arrow(spark, str(tmp_path / "one.parquet"), "parquet", {}) is None
    r = _merge(spark, capsys, _target(tmp_path / "t"), str(tmp_path / "one.parquet"), "parquet")
    # read by Spark, then collected as before (small enough for that) and merged file by file
    assert (r["source_read"], r["strategy"]) == ("spark", "file_by_file"), r
    assert _table_rows(str(tmp_path / "t")) == {**TARGET, 1: (1.0, "x")}


def test_a_file_source_is_given_up_while_read_once_its_merge_cost_is_over_the_cap(spark, tmp_path, monkeypatch):
    """The operator's local parquet source streams through ``read_within``: files whose bytes pass the
    estimate are still refused (Spark reads them) once their rows' merge cost passes the cap."""
    from airflow_delta_provider_apps.engine.spark import merge

    path = tmp_path / "many.parquet"
    pq.write_table(_upsert_table({i: (float(i), "x") for i in range(1000)}), path)
    monkeypatch.setattr(merge, "ARROW_GROWTH", 1)  # the bytes estimate alone lets it through
    monkeypatch.setattr(merge, "collect_cap", lambda *a, **k: 1 << 20)  # its bytes fit 1 MiB
    monkeypatch.setattr(merge, "HELD_ROW_BYTES", 0)
    assert small_source_as_arrow(spark, str(path), "parquet", {}) is not None
    monkeypatch.setattr(merge, "HELD_ROW_BYTES", 10_000)  # 1000 rows cost 10 MB: over the cap
    assert small_source_as_arrow(spark, str(path), "parquet", {}) is None
