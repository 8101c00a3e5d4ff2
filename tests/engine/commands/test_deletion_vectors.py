"""Deletion vectors written (merge-on-read DELETE and UPDATE), without a JVM (the in-process path).

Random tables with ``delta.enableDeletionVectors=true`` and random sequences of DELETEs (then an
UPDATE, OPTIMIZE and VACUUM): the rows equal the plain-Python SQL reference after every step,
deltalake (delta-rs, which reads deletion vectors through its DataFusion scan) reads the same rows,
no DELETE writes a data file, and the metrics add up. Also the bitmap encoding against the decoder
and Delta's layout of a deletion vector file.
"""

from __future__ import annotations

import glob
import json
import math
import os
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_strategies import ARROW, predicates, rows, table_of

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine import dv as dv_module
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.dv import INLINE_MAX_BYTES, MAGIC, decode_bitmap, encode_bitmap, z85_decode
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

DDL = "p INT, i BIGINT, d DOUBLE, s STRING, day DATE, b BOOLEAN"
DV = {"delta.enableDeletionVectors": "true"}
settings_ = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _canon(r: dict) -> tuple:
    return tuple(
        ("nan" if isinstance(v, float) and math.isnan(v) else v) if v is not None else ("null",) for v in r.values()
    )


def _rows(table) -> list[tuple]:
    return sorted((_canon(r) for r in pa.table(table).select(ARROW.names).to_pylist()), key=repr)


def _ours(t: DeltaTable) -> list[tuple]:
    return _rows(read_snapshot_table(t.snapshot()))


def _theirs(root: str) -> list[tuple]:
    dt = deltalake.DeltaTable(root)
    return _rows(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())


def _data_files(root: str) -> set[str]:
    return {os.path.relpath(p, root) for p in glob.glob(f"{root}/**/*.parquet", recursive=True)}


def _commit_actions(root: str, version: int) -> list[dict]:
    with open(f"{root}/_delta_log/{version:020d}.json") as f:
        return [json.loads(line) for line in f if line.strip()]


commits = st.lists(st.lists(rows, min_size=1, max_size=12), min_size=1, max_size=3)


@settings_
@given(commits, st.booleans(), st.lists(predicates(), min_size=1, max_size=3))
def test_deletes_with_deletion_vectors_equal_the_reference(tmp_path_factory, data, partitioned, preds):
    root = str(tmp_path_factory.mktemp("dv") / "t")
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"] if partitioned else None, properties=DV)
    for rs in data:
        append_arrow(root, table_of(rs))
    live = [r for rs in data for r in rs]
    for text, reference in preds:
        files_before = _data_files(root)
        result = t.delete(text)
        kept = [r for r in live if reference(r) is not True]
        assert _ours(t) == _rows(table_of(kept))
        assert _theirs(root) == _ours(t)
        m = result["metrics"]
        assert m.get("numDeletedRows", 0) == len(live) - len(kept)
        assert _data_files(root) == files_before  # marked, never rewritten
        if result["committed"]:
            actions = _commit_actions(root, result["version"])
            adds = [a["add"] for a in actions if "add" in a]
            removes = [a["remove"] for a in actions if "remove" in a]
            # small sets in the log itself, larger ones in vector files
            assert all(
                a["deletionVector"]["storageType"]
                == ("i" if a["deletionVector"]["sizeInBytes"] <= INLINE_MAX_BYTES else "u")
                for a in adds
            )
            assert {a["path"] for a in adds} <= {r["path"] for r in removes}  # the same files, new vectors
            assert all(json.loads(a["stats"])["tightBounds"] is False for a in adds if a.get("stats"))
            if "numDeletionVectorsAdded" in m:  # a data condition (not a whole-partition delete)
                dvs = m["numDeletionVectorsAdded"] + m["numDeletionVectorsUpdated"]
                assert dvs == len(adds) and m["numRemovedFiles"] == len(removes) - len(adds)
                assert m["numCopiedRows"] == 0 and m["numAddedFiles"] == 0
        live = kept
    # UPDATE: the old row versions marked in the vectors (deleted rows stay deleted), the new ones,
    # and only they, in new files
    files_before = _data_files(root)
    result = t.update({"i": "coalesce(i, 0) + 1000", "p": "3"}, "b = true")
    expected = [dict(r, i=(r["i"] or 0) + 1000, p=3) if r["b"] is True else r for r in live]
    assert _ours(t) == _rows(table_of(expected)) == _theirs(root)
    m = result["metrics"]
    updated = sum(1 for r in live if r["b"] is True)
    assert (m["numUpdatedRows"], m["numCopiedRows"]) == (updated, 0)
    assert files_before <= _data_files(root)  # nothing rewritten
    if updated:
        added = [a["add"] for a in _commit_actions(root, result["version"]) if "add" in a]
        new_files = [a for a in added if a["path"] not in files_before]
        assert sum(json.loads(a["stats"])["numRecords"] for a in new_files) == updated


def test_optimize_purges_and_vacuum_keeps_the_vectors_still_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(dv_module, "INLINE_MAX_BYTES", 0)  # every vector in a file
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, p INT", partition_by=["p"], properties=DV)
    for k in range(4):  # two small files in each partition
        append_arrow(root, pa.table({"id": pa.array(range(k * 10, k * 10 + 10), pa.int64()), "p": [k % 2] * 10}))
    t.delete("id % 3 = 0")
    vectors = set(glob.glob(f"{root}/deletion_vector_*.bin"))
    assert len(vectors) == 4
    t.optimize(partition_filter="p = 0")  # rewrites the two p=0 files without their deleted rows
    live = [i for i in range(40) if i % 3]
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == live
    p1_vectors = {
        os.path.join(
            root,
            "deletion_vector_"
            + str(__import__("uuid").UUID(bytes=z85_decode(f["deletion_vector"]["pathOrInlineDv"])))
            + ".bin",
        )
        for f in t.snapshot().files.to_pylist()
        if f["deletion_vector"] is not None
    }
    assert len(p1_vectors) == 2 and p1_vectors < vectors
    t.vacuum(retention_hours=0, enforce_retention_duration=False)
    assert set(glob.glob(f"{root}/deletion_vector_*.bin")) == p1_vectors  # dead ones gone, live ones kept
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == live
    assert (
        sorted(
            pa.table(
                deltalake.QueryBuilder()
                .register("t", deltalake.DeltaTable(root))
                .execute("SELECT id FROM t")
                .read_all()
            )
            .column("id")
            .to_pylist()
        )
        == live
    )


@given(st.lists(st.integers(0, 2**34), max_size=3000), st.integers(0, 70000))
@settings(max_examples=60, deadline=None)
def test_bitmap_encoding_round_trips(values, dense):
    rows = np.array(values + list(range(1000, 1000 + dense)), dtype=np.uint64)  # dense: bitmap containers
    assert decode_bitmap(encode_bitmap(rows)).tolist() == sorted(set(rows.tolist()))


def test_a_deletion_vector_file_has_delta_s_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(dv_module, "INLINE_MAX_BYTES", 0)  # every vector in a file
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT", properties=DV)
    append_arrow(root, pa.table({"id": pa.array(range(100), pa.int64())}))
    t.delete("id IN (3, 50, 99)")
    [path] = glob.glob(f"{root}/deletion_vector_*.bin")
    raw = open(path, "rb").read()
    (size,) = struct.unpack(">i", raw[1:5])
    data, (crc,) = raw[5 : 5 + size], struct.unpack(">I", raw[5 + size : 9 + size])
    assert raw[0] == 1 and len(raw) == 9 + size and zlib.crc32(data) == crc
    assert struct.unpack("<I", data[:4])[0] == MAGIC
    assert decode_bitmap(data).tolist() == [3, 50, 99]
    [dv] = [f["deletion_vector"] for f in t.snapshot().files.to_pylist()]
    assert (dv["offset"], dv["sizeInBytes"], dv["cardinality"]) == (1, size, 3)


def test_a_small_set_is_stored_in_the_log_and_a_large_one_in_a_file(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT", properties=DV)
    append_arrow(root, pa.table({"id": pa.array(range(100_000), pa.int64())}))
    t.delete("id IN (3, 50, 99)")
    assert glob.glob(f"{root}/deletion_vector_*.bin") == []  # nothing written but the commit
    [dv] = [f["deletion_vector"] for f in t.snapshot().files.to_pylist()]
    assert (dv["storageType"], dv["offset"], dv["cardinality"]) == ("i", None, 3)
    data = z85_decode(dv["pathOrInlineDv"])
    assert len(data) % 4 == 0 and len(data) - dv["sizeInBytes"] < 4  # padded to whole Z85 words
    assert decode_bitmap(data[: dv["sizeInBytes"]]).tolist() == [3, 50, 99]
    t.delete("id % 7 = 0")  # ~14k more rows: joined with the inline set, too large for the log
    [dv] = [f["deletion_vector"] for f in t.snapshot().files.to_pylist()]
    assert dv["storageType"] == "u" and dv["sizeInBytes"] > INLINE_MAX_BYTES
    assert len(glob.glob(f"{root}/deletion_vector_*.bin")) == 1
    live = [i for i in range(100_000) if i % 7 and i not in (3, 50, 99)]
    assert read_snapshot_table(t.snapshot()).column("id").to_pylist() == live
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id FROM t").read_all()
    assert sorted(pa.table(theirs).column("id").to_pylist()) == live


def test_optimize_rewrites_files_with_many_deleted_rows_and_purges_on_demand(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT", properties=DV)
    for k in range(3):  # three files of 100 ids
        append_arrow(root, pa.table({"id": pa.array(range(k * 100, k * 100 + 100), pa.int64())}))
    t.delete("id IN (5, 6, 7, 8, 9, 10)")  # 6% of the first file
    t.delete("id = 150")  # 1% of the second
    live = sorted(i for i in range(300) if i not in (5, 6, 7, 8, 9, 10, 150))

    def vectors() -> dict:
        return {f["path"]: f["deletion_vector"] for f in t.snapshot().files.to_pylist()}

    before = vectors()
    # no file is small (min_file_size=1): only the file over the deleted-rows ratio is rewritten, alone
    r = t.optimize(min_file_size=1)
    after = vectors()
    assert (r["numRemovedFiles"], r["numAddedFiles"]) == (1, 1)
    assert [p for p in before if p not in after] == [p for p, v in before.items() if v and v["cardinality"] == 6]
    assert sum(v is not None for v in after.values()) == 1  # the 1% file keeps its vector
    # purge: every file with a vector, and only those
    r = t.optimize(purge_deletion_vectors=True)
    assert (r["numRemovedFiles"], r["numAddedFiles"]) == (1, 1)
    assert all(v is None for v in vectors().values()) and len(vectors()) == 3
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == live
    assert t.optimize(purge_deletion_vectors=True)["committed"] is False  # nothing left to purge
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all())
    assert sorted(theirs.column("id").to_pylist()) == live


def test_enabling_deletion_vectors_on_an_existing_table_upgrades_its_protocol(tmp_path):
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, UnsupportedFeatureError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT", properties={"delta.appendOnly": "false"})
    append_arrow(root, pa.table({"id": pa.array(range(50), pa.int64())}))
    assert (t.snapshot().protocol.min_reader_version, t.snapshot().protocol.min_writer_version) == (1, 2)
    # refused before anything is committed: an unknown key, a feature this engine cannot write
    for bad, error in (
        ({"delta.enableDeletionVector": "true"}, InvalidArgumentError),
        ({"delta.enableIcebergCompatV2": "true"}, UnsupportedFeatureError),
        ({"delta.feature.icebergCompatV2": "supported"}, UnsupportedFeatureError),
    ):
        with pytest.raises(error):
            t.set_properties(bad)
    assert t.version() == 1
    r = t.set_properties({"delta.enableDeletionVectors": True, "team": "lake"})
    assert r["committed"] and r["version"] == 2
    snap = t.snapshot()
    assert snap.protocol.reader_features == ["deletionVectors"]
    assert snap.protocol.writer_features == ["appendOnly", "invariants", "deletionVectors"]
    assert snap.metadata.configuration == {
        "delta.appendOnly": "false",
        "delta.enableDeletionVectors": "true",
        "team": "lake",
    }
    assert t.history(limit=1)[0]["operation"] == "SET TBLPROPERTIES"
    assert t.set_properties({"team": "lake"})["committed"] is False  # nothing changes: no commit
    files = _data_files(root)
    assert t.delete("id % 7 = 0")["numDeletionVectorsAdded"] == 1
    assert _data_files(root) == files
    live = [i for i in range(50) if i % 7]
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all())
    assert (
        sorted(theirs.column("id").to_pylist())
        == live
        == sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist())
    )


def test_restore_across_deletion_vectors_brings_back_the_rows_and_the_files_as_they_were(tmp_path):
    """RESTORE to a version before the table had any vector: the files with vectors are removed with
    them and added back without; a file no DELETE touched stays as it is (neither removed nor added).
    Found by the VACUUM property test: a version without vectors keyed its files apart from the
    vector-less files of a version with vectors, and the restore re-added the untouched file."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, p STRING", partition_by=["p"], properties=DV)
    for ids in ([1, 2, 3], [4, 5, 6], [7, 8, 9]):
        append_arrow(root, pa.table({"id": pa.array(ids, pa.int64()), "p": ["a"] * 3}))

    def ids(table) -> list[int]:
        return sorted(table.column("id").to_pylist())

    deleted = t.delete("id % 5 = 0")  # row 5 (second file); no row of the first or third file
    assert deleted["metrics"]["numDeletionVectorsAdded"] == 1
    restored = t.restore(version=3)
    assert restored["metrics"]["numRemovedFiles"] == 1 and restored["metrics"]["numRestoredFiles"] == 1
    assert ids(read_snapshot_table(t.snapshot())) == list(range(1, 10))
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id FROM t").read_all()
    assert ids(theirs) == list(range(1, 10))


@pytest.mark.parametrize("update", ["id % 37 = 3", "id = 205", "id >= 390", "s = 'none'"])
def test_update_with_vectors_across_row_groups_and_an_earlier_vector(tmp_path, update):
    """An UPDATE through deletion vectors of a file of 8 row groups whose earlier vector already
    deleted rows: rows matched in one group, in many, in the last, or none. The rows equal the
    reference and what deltalake reads; the old versions are marked, nothing is rewritten."""
    root = str(tmp_path / "t")
    n = 400
    data = pa.table({"id": pa.array(range(n), pa.int64()), "s": pa.array([f"s{i}" for i in range(n)])})
    deltalake.write_deltalake(root, data, writer_properties=deltalake.WriterProperties(max_row_group_size=50))
    t = DeltaTable.for_path(None, root)
    t.set_properties({"delta.enableDeletionVectors": True})
    assert t.delete("id % 11 = 0")["numDeletionVectorsAdded"] == 1
    files = _data_files(root)
    result = t.update({"s": "concat(s, '!')"}, update)
    live = [i for i in range(n) if i % 11]
    predicate = {
        "id % 37 = 3": lambda i: i % 37 == 3,
        "id = 205": lambda i: i == 205,
        "id >= 390": lambda i: i >= 390,
        "s = 'none'": lambda i: False,
    }[update]
    expected = sorted((i, f"s{i}!" if predicate(i) else f"s{i}") for i in live)
    ours = read_snapshot_table(t.snapshot())
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("s").to_pylist())) == expected
    dt = deltalake.DeltaTable(root)
    theirs = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id, s FROM t").read_all())
    assert sorted(zip(theirs.column("id").to_pylist(), theirs.column("s").to_pylist())) == expected
    updated = sum(1 for i in live if predicate(i))
    assert result.get("numUpdatedRows", 0) == updated and result.get("numCopiedRows", 0) == 0
    assert files <= _data_files(root)  # nothing rewritten
