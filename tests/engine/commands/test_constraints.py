"""CHECK constraints and generated columns enforced on every write, without a JVM (the in-process
writer every write path goes through), and checked against deltalake, which enforces both itself."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import ConstraintViolationError, DeltaError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        {"name": "amount", "type": "integer", "nullable": True, "metadata": {}},
        {
            "name": "double_amount",
            "type": "long",
            "nullable": True,
            "metadata": {"delta.generationExpression": "amount * 2"},
        },
    ],
}


def _rows(t: DeltaTable) -> list:
    return sorted(tuple(r.values()) for r in read_snapshot_table(t.snapshot()).to_pylist())


def _data(ids, amounts, doubles=None) -> pa.Table:
    cols = {"id": pa.array(ids, pa.int64()), "amount": pa.array(amounts, pa.int32())}
    cols["double_amount"] = pa.array(doubles if doubles is not None else [None] * len(ids), pa.int64())
    return pa.table(cols)


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(
        None, root, schema=json.dumps(SCHEMA), properties={"delta.constraints.positive": "amount > 0"}
    )
    return root, t


def test_a_new_table_declares_the_features(table):
    _, t = table
    p = t.snapshot().protocol
    assert {"checkConstraints", "generatedColumns"} <= set(p.writer_features)


def test_appends_compute_generated_columns_and_check_constraints(table):
    root, t = table
    append_arrow(root, _data([1, 2], [5, 7]))
    assert _rows(t) == [(1, 5, 10), (2, 7, 14)]
    # deltalake reads the computed values
    assert sorted(deltalake.DeltaTable(root).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])[0] == {
        "id": 1,
        "amount": 5,
        "double_amount": 10,
    }
    version = t.version()
    with pytest.raises(
        ConstraintViolationError, match=r"CHECK constraint positive \(amount > 0\) violated.*amount : -3"
    ):
        append_arrow(root, _data([3, 4], [9, -3]))
    with pytest.raises(ConstraintViolationError, match="amount : null"):  # NULL violates too, as in Delta
        append_arrow(root, _data([5], [None]))
    with pytest.raises(ConstraintViolationError, match=r"Generated Column \(double_amount <=> amount \* 2\)"):
        append_arrow(root, _data([6], [4], [9]))  # a value given must be the expression's
    append_arrow(root, _data([7], [4], [8]))
    assert t.version() == version + 1  # the refused ones committed nothing
    assert _rows(t)[-1] == (7, 4, 8)


def test_update_recomputes_generated_columns_and_checks_constraints(table):
    root, t = table
    append_arrow(root, _data([1, 2, 3], [5, 7, 9]))
    t.update({"amount": "amount + 1"}, "id <= 2")
    assert _rows(t) == [(1, 6, 12), (2, 8, 16), (3, 9, 18)]
    version = t.version()
    with pytest.raises(ConstraintViolationError, match=r"positive .*id : 3|positive .*amount : -9"):
        t.update({"amount": "-amount"}, "id = 3")
    assert t.version() == version and _rows(t)[-1] == (3, 9, 18)
    t.set_properties({"delta.enableDeletionVectors": "true"})  # the new row versions alone are written
    t.update({"amount": "amount * 10"}, "id = 3")
    assert _rows(t) == [(1, 6, 12), (2, 8, 16), (3, 90, 180)]


def test_add_constraint_checks_existing_rows_and_drop_removes_it(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    append_arrow(root, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", None, "c"]}))
    with pytest.raises(
        ConstraintViolationError, match=r"1 row\(s\) .* violate the new CHECK constraint \(v IS NOT NULL"
    ):
        t.add_constraint("v_given", "v IS NOT NULL AND length(v) = 1")
    assert t.version() == 1
    with pytest.raises(DeltaError, match="Invalid constraint name"):
        t.add_constraint("bad name", "id > 0")
    with pytest.raises(DeltaError, match="nope"):
        t.add_constraint("ids", "nope > 0")
    r = t.add_constraint("ids", "id > 0")
    assert r["committed"] and t.snapshot().metadata.configuration["delta.constraints.ids"] == "id > 0"
    assert "checkConstraints" in t.snapshot().protocol.writer_features
    assert t.history(limit=1)[0]["operation"] == "ADD CONSTRAINT"
    with pytest.raises(DeltaError, match="already exists"):
        t.add_constraint("IDS", "id > 1")
    with pytest.raises(ConstraintViolationError, match="ids"):
        append_arrow(root, pa.table({"id": pa.array([0], pa.int64()), "v": ["z"]}))
    # deltalake enforces what we declared
    with pytest.raises(Exception, match="failed validation"):
        deltalake.write_deltalake(root, pa.table({"id": pa.array([-1], pa.int64()), "v": ["z"]}), mode="append")
    t.drop_constraint("ids")
    append_arrow(root, pa.table({"id": pa.array([0], pa.int64()), "v": ["z"]}))
    with pytest.raises(DeltaError, match="has no constraint 'ids'"):
        t.drop_constraint("ids")
    assert t.drop_constraint("ids", if_exists=True)["committed"] is False


def test_constraints_deltalake_declared_are_enforced(tmp_path):
    root = str(tmp_path / "t")
    deltalake.write_deltalake(root, pa.table({"id": pa.array([1, 2], pa.int64())}))
    deltalake.DeltaTable(root).alter.add_constraint({"small": "id < 10"})
    with pytest.raises(ConstraintViolationError, match=r"CHECK constraint small \(id < 10\)"):
        append_arrow(root, pa.table({"id": pa.array([11], pa.int64())}))
    append_arrow(root, pa.table({"id": pa.array([3], pa.int64())}))
    assert sorted(deltalake.DeltaTable(root).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
