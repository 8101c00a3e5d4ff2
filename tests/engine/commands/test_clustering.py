"""Liquid clustering in process (no Spark): CREATE with cluster_by writes the ``delta.clustering``
domain and the features; bad clustering columns are refused before anything is written; appends,
DELETE, UPDATE, RESTORE and VACUUM keep the domain and deltalake reads the same rows; OPTIMIZE
clusters incrementally (a second OPTIMIZE after a small append rewrites only the appended files) and
a point predicate then reads few files; changing the columns makes the old files unclustered; the
domain survives checkpoints; two commits to the domain conflict. MERGE and the Spark path:
tests/spark/test_clustering_spark.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.optimize import optimize
from airflow_delta_provider_apps.engine.commands.properties import cluster_by
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import (
    ConcurrentTransactionError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)
from airflow_delta_provider_apps.engine.expr import parse_predicate
from airflow_delta_provider_apps.engine.expr.skipping import skip_files
from airflow_delta_provider_apps.engine.features import check_write_supported

deltalake = pytest.importorskip("deltalake")


def _rows(root):
    return sorted(
        tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table(columns=["x", "y"]).to_pylist()
    )


def _ours(root):
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    return sorted(
        tuple(r.values()) for r in read_snapshot_table(DeltaTable(None, root).snapshot(), ["x", "y"]).to_pylist()
    )


def _domain(root):
    d = DeltaTable(None, root).snapshot().domain_metadata.get("delta.clustering")
    return json.loads(d.configuration) if d is not None else None


def _commit(root, version):
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    return [json.loads(line) for line in open(path)]


def _append(root, n, seed):
    rng = np.random.default_rng(seed)
    return append_arrow(root, pa.table({"x": rng.integers(0, 10_000, n), "y": rng.integers(0, 100, n), "s": ["v"] * n}))


def _clustered(tmp_path, appends=12, rows=400, **kw):
    root = str(tmp_path / "t")
    create_table(root, schema="x BIGINT, y INT, s STRING", cluster_by=["x"], **kw)
    for i in range(appends):
        _append(root, rows, i)
    return root


def _files_read(root, predicate):
    s = DeltaTable(None, root).snapshot()
    return skip_files(s.files, s.schema, [], parse_predicate(predicate, s.schema)).files.num_rows


def test_create_writes_the_domain_and_the_features(tmp_path):
    root = str(tmp_path / "t")
    res = create_table(root, schema="x BIGINT, y INT, s STRING", cluster_by=["X", "s"])
    t = DeltaTable(None, root)
    proto = t.detail()["protocol"]
    assert {"clustering", "domainMetadata"} <= set(proto["writer_features"]) and proto["min_writer_version"] == 7
    assert _domain(root) == {"clusteringColumns": [["x"], ["s"]]}
    assert t.clustering_columns() == ["x", "s"] and res.version == 0
    assert json.loads(t.history()[0]["operationParameters"]["clusterBy"]) == ["x", "s"]
    check_write_supported(t.snapshot().protocol, t.snapshot().metadata)  # no longer refused
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cluster_by": ["x"], "partition_by": ["s"]}, "both partitioned and clustered"),
        ({"cluster_by": ["nope"]}, "Clustering column 'nope' is not in the schema"),
        ({"cluster_by": ["b"]}, "Cannot cluster by column 'b' of type boolean"),
        ({"cluster_by": ["x", "X"]}, "listed twice"),
        ({"cluster_by": ["x", "y", "s", "b", "x"]}, "Too many clustering columns"),
        (
            {"cluster_by": ["s"], "properties": {"delta.dataSkippingNumIndexedCols": "1"}},
            "Clustering column 's' has no statistics",
        ),
        ({"cluster_by": "x, y"}, "Clustering column 'x, y' is not in the schema"),
    ],
)
def test_bad_clustering_columns_are_refused_before_anything_is_written(tmp_path, kwargs, message):
    root = tmp_path / "t"
    with pytest.raises(InvalidArgumentError, match=message) as e:
        create_table(str(root), schema="x BIGINT, y INT, s STRING, b BOOLEAN", **kwargs)
    assert e.value.fix and not root.exists()


def test_writes_and_dml_keep_the_domain_and_deltalake_agrees(tmp_path):
    root = _clustered(tmp_path, appends=3, rows=50)
    t = DeltaTable(None, root)
    domain, proto = _domain(root), t.snapshot().protocol
    t.delete("x < 2000")
    assert _rows(root) == _ours(root) and all(x >= 2000 for x, _ in _rows(root))
    t.update({"y": "y + 1000"}, "x > 8000")
    assert _rows(root) == _ours(root) and any(y >= 1000 for _, y in _rows(root))
    before_restore = _rows(root)
    t.restore(version=1)
    assert _rows(root) == _ours(root) and len(_rows(root)) == 50
    t.restore(version=t.version() - 1)
    assert _rows(root) == before_restore
    t.vacuum(0, enforce_retention_duration=False)
    assert _rows(root) == before_restore
    snap = t.snapshot()
    assert _domain(root) == domain and snap.protocol == proto
    # no commit after CREATE wrote the domain again: it is carried by the log
    assert not any("domainMetadata" in a for v in range(1, snap.version + 1) for a in _commit(root, v))


def test_optimize_clusters_incrementally_and_points_read_few_files(tmp_path):
    root = _clustered(tmp_path, appends=12)
    t = DeltaTable(None, root)
    rows = _rows(root)
    before = _files_read(root, "x = 5000")
    first = t.optimize(target_size=12_000)
    assert _rows(root) == rows == _ours(root)
    assert first["numRemovedFiles"] == 12 and first["numAddedFiles"] > 1
    assert first["clustering_columns"] == ["x"] and first["num_files_already_clustered"] == 0
    adds = [a["add"] for a in _commit(root, t.version()) if "add" in a]
    cubes = {a["tags"]["ZCUBE_ID"] for a in adds}
    assert len(cubes) == 1 and all(a["clusteringProvider"] == "liquid" for a in adds)
    assert all(json.loads(a["tags"]["ZCUBE_ZORDER_BY"]) == ["x"] and not a["dataChange"] for a in adds)
    params = t.history()[0]["operationParameters"]
    assert json.loads(params["clusterBy"]) == ["x"] and params["zOrderBy"] == "[]"
    after = _files_read(root, "x = 5000")
    assert after < before and after <= 2, (before, after)

    appended = [_append(root, 40, 100 + i) for i in range(2)]  # a small append: two files
    new_bytes = sum(r.metrics.num_output_bytes for r in appended)
    second = t.optimize(target_size=12_000)
    assert second["numRemovedFiles"] == 2 and second["numRemovedBytes"] == new_bytes
    assert second["num_files_already_clustered"] == first["numAddedFiles"]
    assert second["numRemovedBytes"] < t.detail()["size_in_bytes"] / 10
    assert len(_rows(root)) == len(rows) + 80 and _rows(root) == _ours(root)
    again = t.optimize(target_size=12_000)  # everything clustered: no commit
    assert again["committed"] is False


def test_small_cubes_merge_size_tiered(tmp_path):
    root = _clustered(tmp_path, appends=2, rows=40)
    t = DeltaTable(None, root)
    t.optimize()  # one small cube
    _append(root, 40, 50)
    _append(root, 40, 51)
    res = t.optimize()  # the new data is as large as the cube: merged with it
    assert res["numRemovedFiles"] == 3 and res["num_files_already_clustered"] == 0
    assert len({a["add"]["tags"]["ZCUBE_ID"] for a in _commit(root, t.version()) if "add" in a}) == 1


def test_changing_and_removing_the_clustering_columns(tmp_path):
    root = _clustered(tmp_path, appends=6, rows=300)
    t = DeltaTable(None, root)
    t.optimize(target_size=8_000)
    clustered_x = t.snapshot().num_files
    assert _files_read(root, "y = 10") == clustered_x  # clustered for x: every file spans y's range
    res = t.cluster_by(["y", "x"])
    assert res["clustering_columns"] == ["y", "x"] and res["previous_clustering_columns"] == ["x"]
    assert _domain(root) == {"clusteringColumns": [["y"], ["x"]]}
    h = t.history()[0]
    assert h["operation"] == "CLUSTER BY" and h["operationParameters"]["newClusteringColumns"] == "y,x"
    assert t.cluster_by(["y", "x"])["committed"] is False  # the same columns: no commit
    again = t.optimize(target_size=2_500)  # every file was clustered for x only: all rewritten
    assert again["numRemovedFiles"] == clustered_x and again["num_files_already_clustered"] == 0
    assert again["numAddedFiles"] > 4 and _files_read(root, "y = 10") < again["numAddedFiles"]
    rows = _rows(root)
    t.cluster_by(None)  # CLUSTER BY NONE: the feature stays, no columns
    assert _domain(root) == {"clusteringColumns": []} and t.clustering_columns() == []
    _append(root, 10, 99)
    res = t.optimize(target_size=1 << 30)  # plain compaction again
    assert "clustering_columns" not in res and res["numRemovedFiles"] > 1
    assert len(_rows(root)) == len(rows) + 10


def test_cluster_by_on_other_tables(tmp_path):
    plain = str(tmp_path / "plain")
    create_table(plain, schema="x BIGINT, y INT")
    append_arrow(plain, pa.table({"x": [3, 1, 2], "y": [1, 2, 3]}))
    t = DeltaTable(None, plain)
    t.cluster_by(["x"])  # an unpartitioned table becomes clustered
    assert {"clustering", "domainMetadata"} <= set(t.detail()["protocol"]["writer_features"])
    assert t.optimize()["numRemovedFiles"] == 1 and _rows(plain) == [(1, 2), (2, 3), (3, 1)]

    featured = str(tmp_path / "featured")  # the feature asked for by property: domainMetadata comes with it
    create_table(featured, schema="x BIGINT")
    DeltaTable(None, featured).set_properties({"delta.feature.clustering": "supported"})
    wf = DeltaTable(None, featured).detail()["protocol"]["writer_features"]
    assert wf.index("domainMetadata") < wf.index("clustering")
    assert DeltaTable(None, featured).clustering_columns() == []  # clustered, no columns yet

    parted = str(tmp_path / "parted")
    create_table(parted, schema="x BIGINT, p STRING", partition_by=["p"])
    with pytest.raises(InvalidArgumentError, match="both partitioned and clustered"):
        DeltaTable(None, parted).cluster_by(["x"])
    with pytest.raises(InvalidArgumentError, match="Cannot Z-order a clustered table"):
        t.optimize(z_order_by=["y"])
    with pytest.raises(InvalidArgumentError, match="has no statistics"):
        t.set_properties({"delta.dataSkippingStatsColumns": "y"})


def test_column_mapping_keeps_physical_names_in_the_domain(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="x BIGINT, y INT", cluster_by=["x"], properties={"delta.columnMapping.mode": "name"})
    t = DeltaTable(None, root)
    physical = t.snapshot().schema.field("x").physical_name
    assert physical != "x" and _domain(root) == {"clusteringColumns": [[physical]]}
    append_arrow(root, pa.table({"x": [5, 4, 6], "y": [1, 2, 3]}))
    t.rename_column("x", "k")
    assert t.clustering_columns() == ["k"] and _domain(root) == {"clusteringColumns": [[physical]]}
    with pytest.raises(InvalidArgumentError, match="clustered by it"):
        t.drop_column("k")
    res = t.optimize()
    assert res["clustering_columns"] == ["k"] and res["numRemovedFiles"] == 1
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    assert sorted(read_snapshot_table(t.snapshot(), ["k"]).column("k").to_pylist()) == [4, 5, 6]


def test_the_domain_survives_checkpoints(tmp_path):
    root = _clustered(tmp_path, appends=2, rows=20, properties={"delta.checkpointInterval": "2"})
    t = DeltaTable(None, root)
    t.optimize()
    t.checkpoint()
    for v in range(t.version()):  # only the checkpoint (and later commits) left to read the domain from
        os.remove(os.path.join(root, "_delta_log", f"{v:020d}.json"))
    assert t.clustering_columns() == ["x"]
    snap = t.snapshot()
    assert set(snap.files.column("clustering_provider").to_pylist()) == {"liquid"}  # kept by the checkpoint
    assert _rows(root) == _ours(root) and len(_rows(root)) == 40
    assert t.optimize()["committed"] is False  # still clustered after the checkpoint


def test_concurrent_commits_to_the_clustering_domain_conflict(tmp_path):
    root = _clustered(tmp_path, appends=1, rows=10)
    t = DeltaTable(None, root)
    stale = t.snapshot()
    t.cluster_by(["y"])
    with pytest.raises(ConcurrentTransactionError, match="delta.clustering") as e:
        cluster_by(stale, ["s"])
    assert e.value.retryable and _domain(root) == {"clusteringColumns": [["y"]]}
    stale = t.snapshot()
    _append(root, 10, 3)  # a blind append does not touch the domain: OPTIMIZE still commits
    optimize(stale)
    assert len(_rows(root)) == 20


def test_corpus_tables_with_clustering_features(conformance_root, tmp_path):
    """crc-full (Databricks: clustering with row tracking and deletion vectors, no data yet) is written:
    a copy takes two appends and an OPTIMIZE, deltalake reads the rows, the new files get row ids from
    the high-water mark and OPTIMIZE clusters them. delta-rs' table_with_liquid_clustering uses the
    preview name 'liquid', which stays refused by name."""
    import shutil

    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table
    from airflow_delta_provider_apps.engine.storage import storage_for

    liquid = str(conformance_root / "delta-rs/table_with_liquid_clustering")
    snap = load_snapshot(storage_for(liquid), liquid)
    read_snapshot_table(snap)  # read as before
    with pytest.raises(UnsupportedFeatureError, match="'liquid'"):
        check_write_supported(snap.protocol, snap.metadata)

    root = str(tmp_path / "crc-full")
    shutil.copytree(conformance_root / "delta-kernel-rs/crc-full", root)
    t = DeltaTable(None, root)
    for start in (0, 10):
        append_arrow(root, pa.table({"id": pa.array(range(start, start + 10), pa.int64())}))
    files = t.snapshot().files
    assert sorted(files.column("base_row_id").to_pylist()) == [0, 10]
    t.optimize()
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root))  # reads deletion-vector tables
    got = pa.table(query.execute("SELECT id FROM t").read_all()).column("id").to_pylist()
    assert sorted(got) == list(range(20))
    assert t.clustering_columns() == [] and len(t.snapshot().files) >= 1


def test_a_schema_change_may_not_drop_a_clustering_column(tmp_path):
    import dataclasses

    from airflow_delta_provider_apps.engine.errors import InvalidCommitError
    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    root = _clustered(tmp_path, appends=1, rows=5)
    snap = DeltaTable(None, root).snapshot()
    schema = {"type": "struct", "fields": [f for f in snap.metadata.schema_json["fields"] if f["name"] != "x"]}
    txn = OptimisticTransaction(snap.storage, snap.table_root, snap, operation="WRITE")
    txn.update_metadata(dataclasses.replace(snap.metadata, schema_string=json.dumps(schema)))
    with pytest.raises(InvalidCommitError, match="drop the clustering column 'x'"):
        txn.commit([])
    assert DeltaTable(None, root).version() == snap.version
