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
