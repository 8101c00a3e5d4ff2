"""OPTIMIZE keeps every row and lowers the file count (deltalake reads the same rows); big files and
single-file partitions stay; partition_filter limits it; adds and removes carry dataChange=false;
Z-order makes point predicates on each z-order column read fewer files; as a rearrangement it lets a
concurrent append land and fails, retryably, when a concurrent DELETE removed a file it rewrote. In
process (the Spark execution is in tests/spark/test_maintenance_spark.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.optimize import optimize
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import CommitConflictError, InvalidArgumentError
from airflow_delta_provider_apps.engine.expr import parse_predicate
from airflow_delta_provider_apps.engine.expr.skipping import skip_files

deltalake = pytest.importorskip("deltalake")


def _rows(root):
    return sorted(
        tuple(r.values()) for r in deltalake.DeltaTable(root).to_pyarrow_table(columns=["x", "y", "p"]).to_pylist()
    )


def _table(tmp_path, files_a=12, rows=300):
    root = str(tmp_path / "t")
    create_table(root, schema="x BIGINT, y BIGINT, p STRING", partition_by=["p"])
    rng = np.random.default_rng(7)
    for _ in range(files_a):
        append_arrow(
            root, pa.table({"x": rng.integers(0, 1000, rows), "y": rng.integers(0, 1000, rows), "p": ["a"] * rows})
        )
    append_arrow(root, pa.table({"x": [1], "y": [2], "p": ["b"]}))  # a partition with one small file
    return root


def _files_read(root, predicate):
    s = DeltaTable(None, root).snapshot()
    return skip_files(s.files, s.schema, ["p"], parse_predicate(predicate, s.schema)).files.num_rows


def test_compaction_keeps_every_row_and_leaves_big_files_and_lone_files_alone(tmp_path):
    root = _table(tmp_path)
    before = _rows(root)
    t = DeltaTable(None, root)
    res = t.optimize(target_size=20_000)
    assert _rows(root) == before and res["numRemovedFiles"] == 12  # p=b's lone file stays
    assert res["numAddedFiles"] < 12 and res["totalFilesSkipped"] == 1 and res["partitionsOptimized"] == 1
    snap = t.snapshot()
    assert snap.files.num_rows == res["numAddedFiles"] + 1
    version = snap.version
    log = [a for a in _commit(root, version) if "add" in a or "remove" in a]
    assert log and all(next(iter(a.values()))["dataChange"] is False for a in log)
    params = t.history()[0]["operationParameters"]
    assert (params["predicate"], params["zOrderBy"]) == ("[]", "[]")
    again = t.optimize(target_size=20_000, min_file_size=1)  # nothing below 1 byte: no commit
    assert again["committed"] is False and t.version() == version


def _commit(root, version):
    import json
    import os

    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    return [json.loads(line) for line in open(path)]


def test_partition_filter_and_its_checks(tmp_path):
    root = _table(tmp_path, files_a=3)
    append_arrow(root, pa.table({"x": [5], "y": [6], "p": ["b"]}))
    t = DeltaTable(None, root)
    res = t.optimize(partition_filter="p = 'b'")
    assert res["numRemovedFiles"] == 2 and res["totalConsideredFiles"] == 2
    with pytest.raises(InvalidArgumentError, match="reads data columns"):
        t.optimize(partition_filter="x > 1")
    with pytest.raises(InvalidArgumentError, match="partition column 'p'"):
        t.optimize(z_order_by=["p"])
    with pytest.raises(InvalidArgumentError, match="Cannot Z-order by 'nope'"):
        t.optimize(z_order_by=["nope"])


def test_zorder_lowers_the_files_a_point_predicate_reads_on_each_column(tmp_path):
    root = _table(tmp_path, files_a=16, rows=400)
    t = DeltaTable(None, root)
    t.optimize(target_size=16_000)  # compacted: every file still spans both columns' whole range
    before = (_files_read(root, "x = 500"), _files_read(root, "y = 500"))
    rows = _rows(root)
    res = t.optimize(z_order_by=["x", "y"], target_size=16_000)
    after = (_files_read(root, "x = 500"), _files_read(root, "y = 500"))
    assert _rows(root) == rows and res["numAddedFiles"] > 1
    assert after[0] < before[0] and after[1] < before[1], (before, after)
    assert t.history()[0]["operationParameters"]["zOrderBy"] == '["x", "y"]'


def test_a_concurrent_append_lands_and_a_concurrent_delete_of_a_rewritten_file_fails_it(tmp_path):
    root = _table(tmp_path, files_a=4)
    t = DeltaTable(None, root)
    stale = t.snapshot()
    append_arrow(root, pa.table({"x": [7], "y": [7], "p": ["a"]}))  # lands first
    optimize(stale, target_size=1 << 30)
    assert (7, 7, "a") in _rows(root) and len(_rows(root)) == 4 * 300 + 2

    stale = t.snapshot()
    t.delete("x < 100")  # rewrites files OPTIMIZE would rewrite
    kept = _rows(root)
    with pytest.raises(CommitConflictError) as failed:
        optimize(stale, target_size=1 << 30)
    assert failed.value.retryable and _rows(root) == kept  # the deleted rows stay deleted


def test_a_bin_that_fails_leaves_no_file_of_the_other_bins_behind(tmp_path):
    """Bins run as units of the one per-file loop: when one fails (a data file gone), what the other
    bins wrote is deleted, nothing is committed, and the error names the missing file."""
    import os

    from airflow_delta_provider_apps.engine.errors import DataFileMissingError

    root = _table(tmp_path, files_a=4)
    for _ in range(3):  # a second partition with a bin of its own
        append_arrow(root, pa.table({"x": [1, 2], "y": [3, 4], "p": ["b", "b"]}))
    t = DeltaTable(None, root)
    version = t.snapshot().version

    def data_files():
        return {os.path.join(d, f) for d, _, fs in os.walk(root) if "_delta_log" not in d for f in fs}

    gone = next(p for p in t.snapshot().files.column("path").to_pylist() if p.startswith("p=b/"))
    os.remove(os.path.join(root, gone))
    before = data_files()
    with pytest.raises(DataFileMissingError, match="p=b/"):
        t.optimize(target_size=1 << 30)
    assert data_files() == before and t.snapshot().version == version
