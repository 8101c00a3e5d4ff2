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
