"""Type widening on write (issue 34 item 5): with ``merge_schema=True`` on a table with
``delta.enableTypeWidening=true`` a MERGE whose source column has a wider type the protocol allows
widens the table's column in the same commit (``delta.typeChanges`` recorded); old files read in the new
type; without ``merge_schema``, on a table without type widening, for a partition column or for a
narrowing, the write is refused before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table


def _table(root: str, *, widening: bool = True) -> DeltaTable:
    props = {"delta.enableTypeWidening": "true"} if widening else {}
    create_table(root, schema="id BIGINT, v INT, p INT", partition_by=["p"], properties=props)
    append_arrow(
        root,
        pa.table(
            {"id": pa.array([1, 2], pa.int64()), "v": pa.array([10, 20], pa.int32()), "p": pa.array([0, 0], pa.int32())}
        ),
    )
    return DeltaTable(None, root)


def _source(v_type=pa.int64(), p_type=pa.int32()) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([2, 3], pa.int64()),
            "v": pa.array([2**40, 30], v_type),
            "p": pa.array([0, 1], p_type),
        }
    )


def test_an_upsert_with_merge_schema_widens_the_column(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root)
    res = t.upsert(_source(), ["id"], merge_schema=True)
    assert res["committed"]
    field = DeltaTable(None, root).snapshot().schema.find("v")
    assert field.type.name == "long"
    assert field.metadata["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    rows = sorted(read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["v"]) for r in rows] == [(1, 10), (2, 2**40), (3, 30)]  # the old file read as long


@pytest.mark.parametrize("widening, merge_schema", [(True, False), (False, True)])
def test_without_widening_the_source_is_cast_to_the_table_type_and_overflow_fails(tmp_path, widening, merge_schema):
    """No ``merge_schema``, or a table without type widening: the column keeps its type and the source
    is cast to it as an assignment is, so 2**40 into an INT fails before anything is written."""
    root = str(tmp_path / "t")
    t = _table(root, widening=widening)
    with pytest.raises(DeltaError):
        t.upsert(_source(), ["id"], merge_schema=merge_schema)
    assert DeltaTable(None, root).version() == 1
    assert DeltaTable(None, root).snapshot().schema.find("v").type.name == "integer"


def test_a_partition_column_is_never_widened(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root)
    t.upsert(_source(p_type=pa.int64()), ["id"], merge_schema=True)
    schema = DeltaTable(None, root).snapshot().schema
    assert (schema.find("p").type.name, schema.find("v").type.name) == ("integer", "long")


def _struct_table(root: str) -> DeltaTable:
    props = {"delta.enableTypeWidening": "true"}
    create_table(root, schema="id BIGINT, s STRUCT<x: INT, y: STRING>", properties=props)
    s = pa.StructArray.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array(["a", "b"])],
        fields=[pa.field("x", pa.int32()), pa.field("y", pa.string())],
    )
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "s": s}))
    return DeltaTable(None, root)


def test_an_upsert_widens_a_field_nested_in_a_struct(tmp_path):
    """The source's ``s.x`` is BIGINT: with merge_schema the nested field widens (its own
    ``delta.typeChanges``), the old file's values read as BIGINT, the new value past INT's range kept."""
    root = str(tmp_path / "t")
    t = _struct_table(root)
    s = pa.StructArray.from_arrays(
        [pa.array([2**40, 3], pa.int64()), pa.array(["B", "c"])],
        fields=[pa.field("x", pa.int64()), pa.field("y", pa.string())],
    )
    t.upsert(pa.table({"id": pa.array([2, 3], pa.int64()), "s": s}), ["id"], merge_schema=True)
    snap = DeltaTable(None, root).snapshot()
    x = snap.schema.field("s").type.field("x")
    assert x.type.to_json() == "long"
    assert x.metadata["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert snap.schema.field("s").metadata.get("delta.typeChanges") is None  # recorded on the field it changed
    got = sorted(read_snapshot_table(snap).to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "s": {"x": 1, "y": "a"}},
        {"id": 2, "s": {"x": 2**40, "y": "B"}},
        {"id": 3, "s": {"x": 3, "y": "c"}},
    ]
    assert snap.protocol.min_writer_version == 7 and "typeWidening" in snap.protocol.writer_features


def test_a_nested_field_widened_by_its_path_and_a_narrowing_refused(tmp_path):
    root = str(tmp_path / "t")
    t = _struct_table(root)
    res = t.change_column_type("s.x", "BIGINT")
    assert res["column"] == "s.x"
    x = DeltaTable(None, root).snapshot().schema.field("s").type.field("x")
    assert (x.type.to_json(), x.metadata["delta.typeChanges"]) == ("long", [{"fromType": "integer", "toType": "long"}])
    rows = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted(r["s"]["x"] for r in rows) == [1, 2]
    with pytest.raises(DeltaError, match="only the protocol's type widenings"):
        t.change_column_type("s.y", "INT")
    version = DeltaTable(None, root).version()
    with pytest.raises(DeltaError):
        t.change_column_type("s.nope", "BIGINT")
    assert DeltaTable(None, root).version() == version
