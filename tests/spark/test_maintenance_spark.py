"""Maintenance through Spark: OPTIMIZE in Spark tasks (one bin per task) on a table deltalake wrote (the
same rows in both engines after compaction and after Z-order, fewer files); time travel after a VACUUM
fails clearly, naming the version and the VACUUM, while newer versions read; VACUUM's property test
over histories with MERGE."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vacuum_histories import OPS, SPARK_OPS, check_vacuum, run_history

from airflow_delta_provider_apps.engine import DeltaTable

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark


def test_optimize_in_spark_on_a_deltalake_table(spark, tmp_path, file_tasks):
    # the bins in Spark tasks (file_tasks): on a local master the driver's threads would compact them
    root = str(tmp_path / "t")
    rng = np.random.default_rng(3)
    for _ in range(6):
        data = pa.table({"x": rng.integers(0, 100, 200), "d": pa.array(["a", "b"] * 100)})
        deltalake.write_deltalake(root, data, mode="append", partition_by=["d"])
    before = sorted(tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist())
    t = DeltaTable.for_path(spark, root)
    res = t.optimize()
    assert res["numRemovedFiles"] == 12 and res["numAddedFiles"] == 2 and res["numBatches"] == 2
    z = DeltaTable.for_path(spark, root).optimize(z_order_by=["x"])
    assert z["numAddedFiles"] == 2
    ours = sorted((r["x"], r["d"]) for r in DeltaTable.for_path(spark, root).to_df().collect())
    theirs = sorted(tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist())
    assert ours == [(x, d) for x, d in before] and theirs == before


def test_time_travel_to_a_vacuumed_version_is_a_clear_error(spark, tmp_path):
    import os
    import time

    from airflow_delta_provider_apps.engine.commands.vacuum import vacuum
    from airflow_delta_provider_apps.engine.errors import DataFileMissingError

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT")
    t.append(spark.createDataFrame([(1,), (2,)], "id long"))
    t.delete("id = 1")  # version 2 rewrites version 1's file
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (time.time() - 30 * 86400,) * 2)
    vacuum(t.snapshot(), now_ms=int(time.time() * 1000) + 8 * 86400 * 1000)
    with pytest.raises(
        DataFileMissingError, match="Cannot read version 1.*VACUUM at version 3 \\(retention 168 hours\\)"
    ):
        t.to_df(version=1)
    assert [r["id"] for r in t.to_df(version=2).collect()] == [2] and t.to_df().count() == 1


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    st.lists(st.tuples(st.sampled_from(OPS + SPARK_OPS * 4), st.integers(0, 30)), min_size=3, max_size=8),
    st.integers(0, 3),
    st.integers(0, 4),
    st.sampled_from(["full", "lite"]),
)
def test_vacuum_after_histories_with_merges(spark, tmp_path_factory, history, retention_h, ahead_h, mode):
    """The VACUUM property of tests/engine/commands/test_vacuum.py over histories that include MERGE
    (upserts through Spark): versions inside the retention read the same rows in deltalake."""
    root, t, outside, hidden = run_history(tmp_path_factory.mktemp("vm"), history, spark=spark)
    check_vacuum(root, t, outside, hidden, retention_h, ahead_h, mode)


def test_a_local_master_does_per_file_work_in_the_driver_at_any_size(spark):
    """On a local master the executors are this machine's cores: DELETE, UPDATE, OPTIMIZE and a
    file-by-file MERGE use the driver's threads whatever the files' size, unless fileWork=tasks."""
    from airflow_delta_provider_apps.engine.spark.plane import SparkPlane
    from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF

    plane = SparkPlane(spark)
    assert plane.in_driver(0) and plane.in_driver(1 << 40)
    spark.conf.set(FILE_WORK_CONF, "tasks")
    try:
        assert not plane.in_driver(0) and not plane.in_driver(1 << 40)
    finally:
        spark.conf.unset(FILE_WORK_CONF)


class _Session:  # a classic session's face, for the master's name alone
    def __init__(self, master):
        self.sparkContext = type("Context", (), {"master": master})()


@pytest.mark.parametrize(
    "master, local",
    [("local", True), ("local[2]", True), ("local[*]", True), ("local[4,2]", True), ("local-cluster[2,1,1024]", False)]
    + [("spark://h:7077", False), ("yarn", False), ("k8s://https://h", False)],
)
def test_which_masters_are_local(master, local):
    """Only a local master's executors are the driver's own cores (local-cluster starts worker JVMs)."""
    from airflow_delta_provider_apps.engine.spark.session import local_master

    assert local_master(_Session(master)) is local


def test_delete_update_merge_and_optimize_over_the_size_limit_stay_in_the_driver_on_a_local_master(
    spark, tmp_path, monkeypatch
):
    """Files over the in-process size limit (a negative limit here): no Spark job runs the per-file
    work on this local master, one does with fileWork=tasks; the rows are the same either way."""
    from airflow_delta_provider_apps.engine.rewrite import common as rewrite_common
    from airflow_delta_provider_apps.engine.spark import rewrite as spark_rewrite
    from airflow_delta_provider_apps.engine.spark.session import FILE_WORK_CONF, collect_tasks

    monkeypatch.setattr(rewrite_common, "IN_PROCESS_BYTES", -1)
    jobs: list = []

    def counted(*args, **kwargs):  # the per-file jobs (DELETE, UPDATE, MERGE by file; OPTIMIZE)
        jobs.append(1)
        return collect_tasks(*args, **kwargs)

    monkeypatch.setattr(spark_rewrite, "collect_tasks", counted)

    def run(root: str) -> list:
        t = DeltaTable.create(spark, root, schema="id BIGINT, v BIGINT")
        for part in range(3):
            t.append(spark.range(part * 10, part * 10 + 10).selectExpr("id", "id AS v"))
        t.delete("id % 7 = 0")
        t.update({"v": "v + 100"}, "id % 5 = 0")
        t.merge(
            spark.range(25, 35).selectExpr("id", "-id AS v"), "target.id = source.id"
        ).when_matched_update_all().when_not_matched_insert_all().execute()
        t.optimize()
        return sorted(tuple(r) for r in DeltaTable.for_path(spark, root).to_df().collect())

    here = run(str(tmp_path / "driver"))
    assert jobs == []
    spark.conf.set(FILE_WORK_CONF, "tasks")
    try:
        assert run(str(tmp_path / "tasks")) == here and len(jobs) == 4
    finally:
        spark.conf.unset(FILE_WORK_CONF)
