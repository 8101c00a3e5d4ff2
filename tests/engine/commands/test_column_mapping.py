"""Column mapping written (name and id modes), without a JVM: files hold physical names and field
ids, stats and partition values are keyed by them, renames and drops touch only the schema, and
deltalake (its DataFusion scan reads column mapping) reads the same rows under the new names."""

from __future__ import annotations

import glob
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

STRUCT = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _ours(t: DeltaTable) -> list:
    return sorted(read_snapshot_table(t.snapshot()).to_pylist(), key=lambda r: r["id"])


def _theirs(root: str) -> list:
    got = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT * FROM t").read_all()
    return sorted(pa.table(got).to_pylist(), key=lambda r: r["id"])


def _files(root: str) -> set:
    return set(glob.glob(f"{root}/**/*.parquet", recursive=True))


@pytest.mark.parametrize("mode", ["name", "id"])
def test_writes_rename_drop_and_dml_on_a_mapped_table(tmp_path, mode):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None,
        root,
        schema="id BIGINT, name STRING, s STRUCT<a: INT, b: STRING>, p INT",
        partition_by=["p"],
        properties={"delta.columnMapping.mode": mode},
    )
    snap = t.snapshot()
    assert "columnMapping" in snap.protocol.reader_features and "columnMapping" in snap.protocol.writer_features
    assert snap.metadata.configuration["delta.columnMapping.maxColumnId"] == "6"  # 4 columns, 2 nested fields
    physical = {f.name: f.physical_name for f in snap.schema.fields}
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "name": ["a", "b", "c"],
                "s": pa.array([{"a": 1, "b": "x"}, None, {"a": 3, "b": None}], STRUCT),
                "p": pa.array([0, 1, 0], pa.int32()),
            }
        ),
    )
    # the files and the log speak physical names; parquet carries the ids
    one = sorted(_files(root))[0]
    file_schema = pq.read_schema(one)
    assert file_schema.names == [physical["id"], physical["name"], physical["s"]]
    assert file_schema.field(0).metadata[b"PARQUET:field_id"] == str(snap.schema.find("id").field_id).encode()
    assert f"/{physical['p']}=" in one
    row = t.snapshot().files.to_pylist()[0]
    assert dict(row["partition_values"]).keys() == {physical["p"]}
    assert physical["id"] in json.loads(row["stats"])["minValues"]
    # a rename touches no file; the next append uses the new name; DML and skipping see it
    files = _files(root)
    t.rename_column("name", "label")
    assert _files(root) == files
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([4], pa.int64()),
                "label": ["d"],
                "s": pa.array([None], STRUCT),
                "p": pa.array([1], pa.int32()),
            }
        ),
    )
    assert t.delete("label = 'b'")["metrics"]["numDeletedRows"] == 1
    assert t.update({"label": "upper(label)"}, "p = 0 AND s.a = 3")["metrics"]["numUpdatedRows"] == 1
    want = [
        {"id": 1, "label": "a", "s": {"a": 1, "b": "x"}, "p": 0},
        {"id": 3, "label": "C", "s": {"a": 3, "b": None}, "p": 0},
        {"id": 4, "label": "d", "s": None, "p": 1},
    ]
    assert _ours(t) == want == _theirs(root)
    # partition columns can be renamed too; a dropped column is gone for every reader
    t.rename_column("p", "part")
    t.drop_column("s")
    t.checkpoint()
    want = [{"id": r["id"], "label": r["label"], "part": r["p"]} for r in want]
    assert _ours(DeltaTable.for_path(None, root)) == want == _theirs(root)
    assert t.delete("part = 1")["metrics"]["numRemovedFiles"] == 1  # partition pruning by the new name
    assert [r["id"] for r in _ours(t)] == [1, 3]


def test_mapping_starts_on_an_existing_table_by_name_and_refuses_other_changes(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    with pytest.raises(DeltaError, match="without column mapping"):
        t.rename_column("v", "w")
    with pytest.raises(DeltaError, match="from 'none' to 'id'"):
        t.set_properties({"delta.columnMapping.mode": "id"})
    t.set_properties({"delta.columnMapping.mode": "name"})
    assert [f.physical_name for f in t.snapshot().schema.fields] == ["id", "v"]  # the files' names
    t.rename_column("v", "w")
    append_arrow(root, pa.table({"id": pa.array([3], pa.int64()), "w": ["c"]}))
    assert _ours(t) == _theirs(root) == [{"id": 1, "w": "a"}, {"id": 2, "w": "b"}, {"id": 3, "w": "c"}]
    with pytest.raises(DeltaError, match="from 'name' to 'none'"):
        t.set_properties({"delta.columnMapping.mode": "none"})
    with pytest.raises(DeltaError, match="another column has it"):
        t.rename_column("w", "ID")


def test_mapped_tables_keep_their_partitions_apart_and_their_nested_ids(tmp_path):
    """OPTIMIZE bins by partition, the change feed gives partition values, structs inside arrays and
    maps get ids and physical names (deltalake refuses a mapped table without them), and a column a
    CHECK constraint names cannot be renamed."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None,
        root,
        schema="id BIGINT, xs ARRAY<STRUCT<a: INT>>, p INT",
        partition_by=["p"],
        properties={"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true"},
    )
    xs = pa.array([[{"a": 1}], None], pa.list_(pa.struct([("a", pa.int32())])))
    for _ in range(2):
        append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "xs": xs, "p": pa.array([0, 1], pa.int32())}))
    element = t.snapshot().schema.find("xs").type.element_type.fields[0]
    assert element.field_id is not None and element.physical_name.startswith("col-")
    assert _theirs(root) == _ours(t)
    assert t.optimize()["metrics"]["partitionsOptimized"] == 2 and len(t.snapshot().files.to_pylist()) == 2
    changes = pa.table(t.changes(1, 2))
    assert sorted(changes.column("p").to_pylist()) == [0, 0, 1, 1]
    t.add_constraint("positive", "id > 0")
    with pytest.raises(DeltaError, match="positive use"):
        t.rename_column("id", "key")


def _log_bytes(root: str) -> dict:
    return {p: open(p, "rb").read() for p in sorted(glob.glob(f"{root}/_delta_log/*"))}


def test_the_last_data_column_cannot_be_dropped_and_no_append_loses_rows(tmp_path):
    # issue 31.1: `id BIGINT, dt DATE` partitioned by dt: dropping id left a table of partition
    # columns only, whose appends committed 0 rows
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None, root, schema="id BIGINT, dt DATE", partition_by=["dt"], properties={"delta.columnMapping.mode": "name"}
    )
    day = pa.array([19000, 19001], pa.int32()).cast(pa.date32())
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "dt": day}))
    before = _log_bytes(root)
    with pytest.raises(DeltaError, match="every column of the table would be a partition column") as e:
        t.drop_column("id")
    assert "at least one data column" in str(e.value) and "keep at least one column" in str(e.value)
    assert _log_bytes(root) == before
    # a table another writer left with partition columns only: an append is refused before any file
    log = sorted(glob.glob(f"{root}/_delta_log/*.json"))[0]
    lines = [json.loads(x) for x in open(log).read().splitlines()]
    for a in lines:
        if "metaData" in a:
            md = a["metaData"]
            md["schemaString"] = json.dumps(
                {**json.loads(md["schemaString"]), "fields": json.loads(md["schemaString"])["fields"][1:]}
            )
    open(log, "w").write("\n".join(json.dumps(a) for a in lines) + "\n")
    files = _files(root)
    with pytest.raises(DeltaError, match="every column of the table would be a partition column"):
        append_arrow(root, pa.table({"dt": day}))
    assert _files(root) == files
    # and the data column can still be dropped once another exists
    t2 = DeltaTable.create(
        None,
        str(tmp_path / "u"),
        schema="id BIGINT, v STRING, dt DATE",
        partition_by=["dt"],
        properties={"delta.columnMapping.mode": "name"},
    )
    t2.drop_column("id")
    assert [f.name for f in t2.snapshot().schema.fields] == ["v", "dt"]


def test_no_commit_leaves_a_table_without_a_data_column(tmp_path):
    # the transaction refuses it whatever the command (an overwrite that repartitions, a schema merge)
    import dataclasses

    from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, dt DATE", partition_by=["dt"])
    snap = t.snapshot()
    txn = OptimisticTransaction(snap.storage, root, snap, operation="WRITE")
    txn.update_metadata(dataclasses.replace(snap.metadata, partition_columns=["dt", "id"]))
    with pytest.raises(DeltaError, match="This WRITE commit is refused: every column"):
        txn.commit([])
    assert t.snapshot().version == 0
