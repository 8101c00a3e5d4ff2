"""Identity columns assigned by the writer and advanced in the commit, without a JVM; deltalake reads
the values."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.identity import STRIDE, Identity
from airflow_delta_provider_apps.engine.reader import read_snapshot_table


def _schema(step: int = 1, explicit: bool = False) -> str:
    md = {"delta.identity.start": 10, "delta.identity.step": step, "delta.identity.allowExplicitInsert": explicit}
    return json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": False, "metadata": md},
                {"name": "v", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )


def _hwm(t: DeltaTable):
    return t.snapshot().schema.find("id").metadata.get("delta.identity.highWaterMark")


def _rows(t: DeltaTable) -> list:
    return sorted((r["id"], r["v"]) for r in read_snapshot_table(t.snapshot()).to_pylist())


@pytest.mark.parametrize("step", [1, -5])
def test_values_are_assigned_in_order_and_the_mark_advances(tmp_path, step):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=_schema(step))
    assert "identityColumns" in t.snapshot().protocol.writer_features
    append_arrow(root, pa.table({"id": pa.nulls(3, pa.int64()), "v": ["a", "b", "c"]}))
    first = [10, 10 + step, 10 + 2 * step]
    assert sorted(r[0] for r in _rows(t)) == sorted(first) and _hwm(t) == first[-1]
    append_arrow(root, pa.table({"id": pa.nulls(2, pa.int64()), "v": ["d", "e"]}))
    assert _hwm(t) == 10 + 4 * step
    assert len({r[0] for r in _rows(t)}) == 5
    theirs = pytest.importorskip("deltalake").DeltaTable(root).to_pyarrow_table()
    assert sorted(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist())) == _rows(t)
    # DML keeps the values and the mark; setting them is refused
    t.update({"v": "upper(v)"}, "v = 'a'")
    t.delete("v = 'b'")
    assert _hwm(t) == 10 + 4 * step and sorted(r[0] for r in _rows(t)) == sorted(
        [10, *[10 + k * step for k in (2, 3, 4)]]
    )
    with pytest.raises(DeltaError, match="Cannot update identity column 'id'"):
        t.update({"id": "id + 1"})
    with pytest.raises(DeltaError, match="GENERATED ALWAYS"):
        append_arrow(root, pa.table({"id": pa.array([99], pa.int64()), "v": ["x"]}))


def test_parallel_writers_take_disjoint_ranges():
    ident = Identity("id", 1, 3, 100, False)
    a, b = ident.values(0, 0, 4).to_pylist(), ident.values(1, 0, 4).to_pylist()
    assert a == [103, 106, 109, 112] and b[0] == 100 + 3 * (1 + STRIDE) and not set(a) & set(b)
    assert ident.values(0, 4, 1).to_pylist() == [115]  # the writer's next value continues its range


def test_by_default_keeps_given_values(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=_schema(explicit=True))
    append_arrow(root, pa.table({"id": pa.array([None, 500, None], pa.int64()), "v": ["a", "b", "c"]}))
    assert _rows(t) == [(10, "a"), (11, "c"), (500, "b")]
    assert _hwm(t) == 500  # past every value in the table: later values never collide
    append_arrow(root, pa.table({"id": pa.nulls(1, pa.int64()), "v": ["d"]}))
    assert _rows(t)[-1] == (501, "d")


def test_ddl_declares_identity_and_generated_columns(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None,
        root,
        schema="id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 5 INCREMENT BY 2), day DATE, "
        "year INT GENERATED ALWAYS AS (year(day))",
    )
    import datetime as dt

    append_arrow(
        root,
        pa.table(
            {
                "id": pa.nulls(2, pa.int64()),
                "day": [dt.date(2024, 5, 1), dt.date(2025, 1, 2)],
                "year": pa.nulls(2, pa.int32()),
            }
        ),
    )
    got = sorted(tuple(r.values()) for r in read_snapshot_table(t.snapshot()).to_pylist())
    assert got == [(5, dt.date(2024, 5, 1), 2024), (7, dt.date(2025, 1, 2), 2025)]
    with pytest.raises(DeltaError, match="cannot honour"):
        DeltaTable.create(None, str(tmp_path / "u"), schema="id INT GENERATED ALWAYS AS IDENTITY")


def test_two_writers_of_one_snapshot_never_assign_the_same_values(tmp_path):
    """Both read version 1 and would start at the same value: the second commit conflicts (the
    first moved the high water mark), as in Delta; its retry on the new snapshot continues after it."""
    from airflow_delta_provider_apps.engine.errors import CommitConflictError

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=_schema())
    append_arrow(root, pa.table({"id": pa.nulls(1, pa.int64()), "v": ["a"]}))
    snap = t.snapshot()
    append_arrow(snap, pa.table({"id": pa.nulls(2, pa.int64()), "v": ["b", "c"]}))
    with pytest.raises(CommitConflictError):
        append_arrow(snap, pa.table({"id": pa.nulls(2, pa.int64()), "v": ["d", "e"]}))
    append_arrow(root, pa.table({"id": pa.nulls(2, pa.int64()), "v": ["d", "e"]}))
    assert [r[0] for r in sorted(_rows(t), key=lambda r: r[1])] == [10, 11, 12, 13, 14]


def test_restore_keeps_the_mark_and_values_never_wrap(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema=_schema())
    append_arrow(root, pa.table({"id": pa.nulls(3, pa.int64()), "v": ["a", "b", "c"]}))
    t.restore(version=0)
    assert _hwm(t) == 12  # values 10-12 were handed out
    append_arrow(root, pa.table({"id": pa.nulls(1, pa.int64()), "v": ["d"]}))
    assert _rows(t) == [(13, "d")]
    with pytest.raises(DeltaError, match="run out of values"):
        Identity("id", 1, 2**40, 0, False).values(3, 0, 2)
