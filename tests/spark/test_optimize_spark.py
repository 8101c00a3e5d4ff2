"""OPTIMIZE in Spark tasks (one bin per task) on a table deltalake wrote: the same rows in both
engines after compaction and after Z-order, fewer files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark


def test_optimize_in_spark_on_a_deltalake_table(spark, tmp_path):
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
