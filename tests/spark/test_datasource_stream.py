"""Structured Streaming through the data source (``airflow_delta_provider_apps.datasource_streaming``):
readStream of a table (snapshot then appends, OPTIMIZE skipped, a DELETE refused unless
skipChangeCommits, the change feed) and writeStream exactly once per batch across a restart and a
crash between our commit and Spark's checkpoint. Results are read back by deltalake."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from outside_readers import deltalake_table, sorted_rows

from airflow_delta_provider_apps.datasource import register
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", autouse=True)
def names(spark):
    return register(spark)


def _ids(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "s": [f"s{i}" for i in range(lo, hi)]})


def _copy(spark, source: str, target: str, checkpoint: str, **options) -> str:
    """One availableNow run of source -> target through the source and the sink; the query's id."""
    reader = spark.readStream.format("delta")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load(source)
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()
    return query.id


def _source(root: str) -> str:
    DeltaTable.create(None, root, schema="id BIGINT, s STRING")  # version 0, no files
    return root


def _txn(root: str):
    snapshot = load_snapshot(storage_for(root), root)
    return snapshot.version, {a: t.version for a, t in snapshot.set_transactions.items()}


def test_stream_reads_the_snapshot_then_each_append_once_and_skips_optimize(spark, tmp_path):
    source, target, chk = _source(str(tmp_path / "src")), str(tmp_path / "dst"), str(tmp_path / "chk")
    append_arrow(source, _ids(0, 5))
    append_arrow(source, _ids(5, 10))
    query_id = _copy(spark, source, target, chk)
    assert sorted_rows(deltalake_table(target), ["id", "s"]) == sorted_rows(_ids(0, 10), ["id", "s"])
    version, txns = _txn(target)
    assert txns == {query_id: 0}  # one batch: the snapshot, committed with (query id, batch 0)

    append_arrow(source, _ids(10, 15))
    DeltaTable.for_path(None, source).optimize()  # rewrites every file with dataChange=false
    assert _copy(spark, source, target, chk) == query_id  # the restarted query keeps its id
    assert sorted_rows(deltalake_table(target), ["id", "s"]) == sorted_rows(_ids(0, 15), ["id", "s"])
    assert _txn(target) == (version + 1, {query_id: 1})  # the append only: OPTIMIZE added nothing

    assert _copy(spark, source, target, chk) == query_id  # nothing new: no batch, no commit
    assert _txn(target) == (version + 1, {query_id: 1})


def test_write_stream_commits_a_replayed_batch_once(spark, tmp_path):
    source, target, chk = _source(str(tmp_path / "src")), str(tmp_path / "dst"), str(tmp_path / "chk")
    for i in range(3):
        append_arrow(source, _ids(10 * i, 10 * i + 10))
    # from version 0 on, one file a batch: batches 0, 1, 2
    query_id = _copy(spark, source, target, chk, startingVersion=0, maxFilesPerTrigger=1)
    assert _txn(target) == (2, {query_id: 2})
    # the crash window: our commit of batch 2 landed, Spark's record of it did not
    for name in ("2", ".2.crc"):
        os.remove(os.path.join(chk, "commits", name))
    assert _copy(spark, source, target, chk, startingVersion=0, maxFilesPerTrigger=1) == query_id
    assert _txn(target) == (2, {query_id: 2})  # batch 2 ran again and committed nothing
    assert sorted_rows(deltalake_table(target), ["id", "s"]) == sorted_rows(_ids(0, 30), ["id", "s"])
    assert not [f for f in os.listdir(target) if f.endswith(".parquet")][30:]  # the replay's files were removed
    assert len([f for f in os.listdir(target) if f.endswith(".parquet")]) == 3


def test_a_delete_fails_the_stream_unless_skip_change_commits(spark, tmp_path):
    source, target, chk = _source(str(tmp_path / "src")), str(tmp_path / "dst"), str(tmp_path / "chk")
    append_arrow(source, _ids(0, 10))
    _copy(spark, source, target, chk)
    DeltaTable.for_path(None, source).delete("id < 3")
    append_arrow(source, _ids(10, 12))
    with pytest.raises(
        Exception, match=r"Detected a data update \(for example DELETE\) in the source table at version 2"
    ):
        _copy(spark, source, target, chk)
    _copy(spark, source, target, chk, skipChangeCommits="true")
    assert sorted(r[0] for r in sorted_rows(deltalake_table(target), ["id"])) == list(range(12))


def test_change_feed_stream_gives_the_change_rows(spark, tmp_path):
    source = str(tmp_path / "src")
    DeltaTable.create(None, source, schema="id BIGINT, s STRING", properties={"delta.enableChangeDataFeed": "true"})
    append_arrow(source, _ids(0, 4))
    DeltaTable.for_path(None, source).delete("id = 1")
    query = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(source)
        .writeStream.format("memory")
        .queryName("cdf_stream")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = spark.table("cdf_stream").select("id", "_change_type", "_commit_version").collect()
    expected = [(i, "insert", 1) for i in range(4)] + [(1, "delete", 2)]
    assert sorted(tuple(r) for r in got) == sorted(expected)
    batch = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(source)
    assert sorted(tuple(r) for r in batch.select("id", "_change_type", "_commit_version").collect()) == sorted(expected)


def test_change_feed_stream_starts_with_the_snapshot_as_inserts(spark, tmp_path):
    source = str(tmp_path / "src")
    DeltaTable.create(None, source, schema="id BIGINT, s STRING", properties={"delta.enableChangeDataFeed": "true"})
    append_arrow(source, _ids(0, 4))
    DeltaTable.for_path(None, source).delete("id = 1")
    query = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .load(source)
        .writeStream.format("memory")
        .queryName("cdf_snapshot_stream")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = spark.table("cdf_snapshot_stream").select("id", "_change_type", "_commit_version").collect()
    assert sorted(tuple(r) for r in got) == [(0, "insert", 2), (2, "insert", 2), (3, "insert", 2)]


def test_complete_mode_overwrites_the_table_each_batch(spark, tmp_path):
    source, target = _source(str(tmp_path / "src")), str(tmp_path / "dst")
    append_arrow(source, _ids(0, 3))
    append_arrow(source, _ids(3, 5))

    def run():
        query = (
            spark.readStream.format("delta")
            .load(source)
            .groupBy()
            .count()
            .writeStream.format("delta")
            .outputMode("complete")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert deltalake_table(target).column("count").to_pylist() == [5]
    append_arrow(source, _ids(5, 9))
    run()
    assert deltalake_table(target).column("count").to_pylist() == [9]  # replaced, not appended
