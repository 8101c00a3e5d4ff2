"""Type widening: the protocol's allowed widenings, change_column_type (metadata only, typeChanges,
the typeWidening feature), old files read in the new type by us and by deltalake."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.schema.ddl import parse_type
from airflow_delta_provider_apps.engine.schema.widening import is_widening


@pytest.mark.parametrize(
    "a,b,ok",
    [
        ("TINYINT", "SMALLINT", True),
        ("TINYINT", "BIGINT", True),
        ("INT", "BIGINT", True),
        ("BIGINT", "INT", False),
        ("INT", "INT", False),
        ("FLOAT", "DOUBLE", True),
        ("DOUBLE", "FLOAT", False),
        ("INT", "DOUBLE", True),
        ("BIGINT", "DOUBLE", False),
        ("INT", "FLOAT", False),
        ("DATE", "TIMESTAMP_NTZ", True),
        ("DATE", "TIMESTAMP", False),
        ("DECIMAL(10,2)", "DECIMAL(12,4)", True),
        ("DECIMAL(10,2)", "DECIMAL(12,2)", True),
        ("DECIMAL(10,2)", "DECIMAL(11,3)", True),
        ("DECIMAL(10,2)", "DECIMAL(11,4)", False),  # scale grows more than precision
        ("DECIMAL(10,2)", "DECIMAL(10,1)", False),
        ("INT", "DECIMAL(10,0)", True),
        ("INT", "DECIMAL(9,0)", False),
        ("INT", "DECIMAL(12,2)", True),
        ("INT", "DECIMAL(11,2)", False),
        ("BIGINT", "DECIMAL(20,0)", True),
        ("BIGINT", "DECIMAL(19,0)", False),
        ("STRING", "BIGINT", False),
        ("FLOAT", "DECIMAL(20,2)", False),
    ],
)
def test_allowed_widenings(a, b, ok):
    assert is_widening(parse_type(a), parse_type(b)) is ok


def _rows(t: DeltaTable) -> list:
    return sorted(read_snapshot_table(t.snapshot()).to_pylist(), key=lambda r: r["id"])


def test_int_to_long_then_append_longs(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, n INT, f FLOAT, d DATE")
    import datetime as dt

    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "n": pa.array([7, -(2**31)], pa.int32()),
                "f": pa.array([0.5, None], pa.float32()),
                "d": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
            }
        ),
    )
    res = t.change_column_type("n", "BIGINT")
    assert res["from_type"] == "integer" and res["to_type"] == "long"
    t.change_column_type("f", "DOUBLE")
    t.change_column_type("d", "TIMESTAMP_NTZ")
    snap = t.snapshot()
    assert "typeWidening" in snap.protocol.reader_features and "typeWidening" in snap.protocol.writer_features
    assert snap.metadata.configuration["delta.enableTypeWidening"] == "true"
    fields = {f.name: f for f in snap.schema.fields}
    assert fields["n"].type.to_json() == "long"
    assert fields["n"].metadata["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert fields["d"].metadata["delta.typeChanges"] == [{"fromType": "date", "toType": "timestamp_ntz"}]
    raw = json.loads(snap.metadata.schema_string)
    assert raw["fields"][1]["type"] == "long"
    # a second widening appends to typeChanges
    t.change_column_type("n", "DECIMAL(22,1)")
    assert t.snapshot().schema.field("n").metadata["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long"},
        {"fromType": "long", "toType": "decimal(22,1)"},
    ]
    t2 = DeltaTable.create(None, str(tmp_path / "u"), schema="id BIGINT, n INT")
    append_arrow(str(tmp_path / "u"), pa.table({"id": [1], "n": pa.array([5], pa.int32())}))
    t2.change_column_type("n", "BIGINT")
    append_arrow(str(tmp_path / "u"), pa.table({"id": [2], "n": pa.array([2**40], pa.int64())}))
    got = read_snapshot_table(t2.snapshot())
    assert got.schema.field("n").type == pa.int64()
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "n": 5}, {"id": 2, "n": 2**40}]

    rows = _rows(t)
    import decimal

    assert rows[0]["n"] == decimal.Decimal("7.0") and rows[1]["n"] == decimal.Decimal(-(2**31))
    assert rows[0]["f"] == 0.5 and rows[0]["d"] == dt.datetime(2024, 1, 2)
    got = read_snapshot_table(t.snapshot())
    assert got.schema.field("f").type == pa.float64()
    assert got.schema.field("d").type == pa.timestamp("us")


def test_deltalake_reads_widened_table(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, n INT")
    append_arrow(root, pa.table({"id": [1], "n": pa.array([5], pa.int32())}))
    t.change_column_type("n", "BIGINT")
    append_arrow(root, pa.table({"id": [2], "n": pa.array([2**40], pa.int64())}))
    try:
        dl = deltalake.DeltaTable(root)
        got = pa.table(deltalake.QueryBuilder().register("t", dl).execute("SELECT * FROM t").read_all())
    except Exception as e:  # deltalake 1.6.6 refuses the feature by name
        assert "TypeWidening" in str(e)
        return
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "n": 5}, {"id": 2, "n": 2**40}]


def test_narrowing_and_partition_columns_refused(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, n INT, p INT", partition_by=["p"])
    with pytest.raises(DeltaError, match="from long to integer") as ei:
        t.change_column_type("id", "INT")
    assert ei.value.fix
    with pytest.raises(DeltaError, match="partition column 'p'"):
        t.change_column_type("p", "BIGINT")
    with pytest.raises(DeltaError):
        t.change_column_type("n", "STRING")
    assert t.snapshot().version == 0
    assert "typeWidening" not in (t.snapshot().protocol.writer_features or [])


def test_operator_checks_the_type_at_parse_time_and_widens(tmp_path, monkeypatch):
    pytest.importorskip("airflow")
    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaChangeColumnTypeOperator

    with pytest.raises(ValueError, match="new_type='BIGGINT'"):
        DeltaChangeColumnTypeOperator(task_id="c", table_uri="/t", column="n", new_type="BIGGINT")
    with pytest.raises(ValueError, match="new_type is required"):
        DeltaChangeColumnTypeOperator(task_id="c", table_uri="/t", column="n", new_type=" ")
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, n INT")
    out = DeltaChangeColumnTypeOperator(
        task_id="c", table_uri=root, column="n", new_type="BIGINT", execution="local"
    ).execute({})
    assert (out["operation"], out["version"]) == ("CHANGE COLUMN", 1)
    assert DeltaTable.for_path(None, root).snapshot().schema.field("n").type.to_json() == "long"
