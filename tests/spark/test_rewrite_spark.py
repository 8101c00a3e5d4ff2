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
from airflow_delta_provider_apps.engine.spark.scan import TASK_COLUMN

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
    slices = spark.createDataFrame(listing).rdd.glom().map(lambda rows: sorted({r[TASK_COLUMN] for r in rows}))
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
    got = out.column(TASK_COLUMN).to_pylist()
    assert got == sorted(got)  # ordered by task
    # task t holds exactly the rows of Spark's slice t
    for t in range(tasks):
        assert got[(t * n) // tasks : ((t + 1) * n) // tasks] == [t] * (((t + 1) * n) // tasks - (t * n) // tasks)
    per_task = [sum(s for s, k in zip(out.column("size").to_pylist(), got) if k == t) for t in range(tasks)]
    assert max(per_task) - min(per_task) <= max(sizes)


def test_append_optimize_delete_merge_through_spark_on_another_writers_table(spark, tmp_path, conformance_root):
    """delta-rs' checkpoint-v2-table stores ``created_at`` as ``timestamp[ns]`` without a zone; ours
    is ``timestamp[us, tz=UTC]``. After a Spark append of one of its own rows, OPTIMIZE (in Spark tasks)
    combines its files with ours, DELETE and MERGE rewrite them: the rows follow a plain-Python model
    (``id`` is an identity column: the writer's, compared apart)."""
    import datetime

    root = str(tmp_path / "t")
    shutil.copytree(conformance_root / "delta-rs" / "checkpoint-v2-table", root)  # the corpus stays untouched
    t = DeltaTable.for_path(spark, root)

    def rows():
        return read_snapshot_table(t.snapshot()).to_pylist()

    def model(rs):
        return sorted(((r["name"], r["created_at"]) for r in rs), key=repr)

    before = rows()
    first = before[0]
    schema = "name STRING, created_at TIMESTAMP"
    t.append(spark.createDataFrame([(first["name"], first["created_at"])], schema))  # id left to the writer
    expected = [*before, first]
    after = rows()
    assert model(after) == model(expected)
    ids = [r["id"] for r in after]
    assert None not in ids and len(set(ids)) == len(set(r["id"] for r in before)) + 1

    result = t.optimize()
    assert result["metrics"]["numRemovedFiles"] >= 2  # their files and ours, in one bin
    assert sorted(map(repr, rows())) == sorted(map(repr, after))

    t.delete(f"name = '{first['name']}'")
    expected = [r for r in after if r["name"] != first["name"]]
    assert model(rows()) == model(expected)

    current = rows()
    later = datetime.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
    source = spark.createDataFrame([(current[0]["name"], later), ("someone new", later)], schema)
    (
        t.merge(source, "target.name = source.name")
        .when_matched_update({"created_at": "source.created_at"})
        .when_not_matched_insert({"name": "source.name", "created_at": "source.created_at"})
        .execute()
    )
    expected = [{**r, "created_at": later} if r["name"] == current[0]["name"] else r for r in current]
    expected.append({"name": "someone new", "created_at": later})
    final = rows()
    assert model(final) == model(expected)
    assert len({r["id"] for r in final}) == len(final)  # the inserted row's identity is a new one
    # Spark's scan reads what our reader reads
    assert model(t.to_df().toArrow().to_pylist()) == model(final)
