"""The DML rewrite in Spark tasks (``engine.spark.rewrite``): the plan flag chosen on the driver
reaches the tasks (one pass reads a likely-touched file once), untouched files leave nothing behind,
the listing is cut by Spark into one balanced slice per task so the rewrite is ONE Spark job (no
range partitioning job, no shuffle), and the rows equal the in-process rewrite's."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine import rewrite as rw
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.spark import rewrite as spark_rw
from airflow_delta_provider_apps.engine.spark.plane import SparkPlane
from airflow_delta_provider_apps.engine.spark.scan import _TASK_COLUMN

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _in_spark_tasks(file_tasks):
    """The tests here are about the Spark tasks: without this, DELETE and UPDATE on a local master
    rewrite in the driver's threads."""


DDL = "p INT, i BIGINT, d DOUBLE, s STRING"


def _batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "p": pa.array([i % 2 for i in ids], pa.int32()),
            "i": pa.array(ids, pa.int64()),
            "d": pa.array([None if i % 11 == 0 else (i * 7919 % 1000) / 1000.0 for i in ids], pa.float64()),
            "s": pa.array([f"s{i % 5}" for i in ids], pa.string()),
        }
    )


def _table(root: str, commits: int = 3) -> None:
    DeltaTable.create(None, root, schema=DDL, partition_by=["p"])
    for k in range(commits):
        append_arrow(root, _batch(k * 300, 300))


def _data_files(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f.endswith(".parquet")
    }


def _rows(root: str) -> list:
    t = read_snapshot_table(DeltaTable.for_path(None, root).snapshot())
    return sorted(t.select(["p", "i", "d", "s"]).to_pylist(), key=repr)


@pytest.mark.parametrize(
    "command, args, one_pass",
    [
        ("delete", ("d < 0.5",), True),
        ("delete", ("i = 7",), False),
        ("update", ({"s": "'x'", "p": "p + 2"}, "d >= 0.25"), True),
        ("update", ({"d": "0.0"}, "i IN (3, 650)"), False),
    ],
)
def test_spark_rewrite_equals_in_process(spark, tmp_path, command, args, one_pass):
    base = str(tmp_path / "base")
    _table(base)
    roots = {k: str(tmp_path / k) for k in ("spark", "local")}
    got = {}
    for k, root in roots.items():
        shutil.copytree(base, root)
        before = _data_files(root)
        with rw.record_outcomes() as outcomes:
            r = getattr(DeltaTable.for_path(spark if k == "spark" else None, root), command)(*args)
        got[k] = (r, outcomes)
        touched = [o for o in outcomes if o.touched]
        assert all(o.one_pass is one_pass for o in outcomes)
        assert all(o.reads == 1 for o in outcomes if o.one_pass or not o.touched)
        assert all(o.reads == 2 for o in touched if not o.one_pass)
        assert all(not o.written and not o.discarded for o in outcomes if not o.touched)
        after = _data_files(root)
        assert before <= after  # nothing deleted on disk (removes are logical)
        assert len(after - before) == sum(len(o.written) for o in touched)
    assert _rows(roots["spark"]) == _rows(roots["local"])
    metrics = [{k: v for k, v in got[k][0].items() if k.startswith("num") and "Bytes" not in k} for k in roots]
    assert metrics[0] == metrics[1]


def test_untouched_files_leave_nothing_behind_in_spark(spark, tmp_path):
    root = str(tmp_path / "t")
    _table(root)
    snap = DeltaTable.for_path(spark, root).snapshot()
    from airflow_delta_provider_apps.engine.commands import dml

    before = sorted(_listing(root))
    r = dml.delete(snap, "s = 'nope' OR d > 5", plane=SparkPlane(spark))
    assert r.metrics.num_removed_files == 0 and r.version == snap.version
    assert sorted(_listing(root)) == before


def _listing(root):
    return [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]


def test_the_rewrite_is_one_spark_job_with_balanced_tasks(spark, tmp_path):
    root = str(tmp_path / "t")
    _table(root, commits=5)
    t = DeltaTable.for_path(spark, root)
    files = t.snapshot().files
    n_tasks = min(files.num_rows, spark_rw.task_slices(spark))
    listing = spark_rw.listing_for_tasks(files, n_tasks)
    # Spark cuts the local listing into n_tasks contiguous slices: each holds exactly one task's files
    slices = spark.createDataFrame(listing).rdd.glom().map(lambda rows: sorted({r[_TASK_COLUMN] for r in rows}))
    assert sorted(slices.collect()) == [[i] for i in range(n_tasks)]
    sc = spark.sparkContext
    sc.setJobGroup("rewrite-jobs", "one job")
    try:
        t.delete("d < 0.5")
        jobs = sc.statusTracker().getJobIdsForGroup("rewrite-jobs")
    finally:
        sc.setJobGroup("after", "after")
    assert len(jobs) == 1


@pytest.mark.parametrize("n, tasks", [(1, 1), (7, 2), (23, 4), (100, 8)])
def test_listing_deals_every_file_once_with_balanced_bytes(n, tasks):
    sizes = [(i * 7919) % 1000 + 1 for i in range(n)]
    files = pa.table(
        {
            "path": [f"f{i}" for i in range(n)],
            "partition_values": pa.array([[]] * n, pa.map_(pa.string(), pa.string())),
            "size": sizes,
        }
    )
    out = spark_rw.listing_for_tasks(files, tasks)
    assert sorted(out.column("path").to_pylist()) == sorted(files.column("path").to_pylist())
    got = out.column(_TASK_COLUMN).to_pylist()
    assert got == sorted(got)  # ordered by task
    # task t holds exactly the rows of Spark's slice t
    for t in range(tasks):
        assert got[(t * n) // tasks : ((t + 1) * n) // tasks] == [t] * (((t + 1) * n) // tasks - (t * n) // tasks)
    per_task = [sum(s for s, k in zip(out.column("size").to_pylist(), got) if k == t) for t in range(tasks)]
    assert max(per_task) - min(per_task) <= max(sizes)
