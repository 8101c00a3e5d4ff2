"""Column defaults (``allowColumnDefaults``, PROTOCOL.md "Default Columns"), in process: a DEFAULT in a
create schema (DDL or JSON metadata ``CURRENT_DEFAULT``) needs the feature enabled explicitly, as
delta-spark's CREATE TABLE; rows an append or a MERGE insert writes without the column get the
default's value (an explicit NULL stays NULL); defaults that are not constants of the column's type
are refused before anything is written, and at DAG parse time for a literal schema. Rows are
compared with plain Python and read back by deltalake."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.actions import Metadata, Protocol
from airflow_delta_provider_apps.engine.commands.write import append_arrow, write
from airflow_delta_provider_apps.engine.defaults import check_defaults
from airflow_delta_provider_apps.engine.errors import (
    InvalidArgumentError,
    InvalidSchemaError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_delta_provider_apps.engine.features import check_write_supported
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.schema import parse_ddl

deltalake = pytest.importorskip("deltalake")

ON = {"delta.feature.allowColumnDefaults": "supported"}
DDL = (
    "id BIGINT NOT NULL, status STRING NOT NULL DEFAULT 'new', qty INT DEFAULT 1 + 2, "
    "price DECIMAL(6,2) DEFAULT 9.5, since DATE DEFAULT DATE'2026-01-01', note STRING"
)
COLUMNS = ("id", "status", "qty", "price", "since", "note")
DEFAULTS = {"status": "new", "qty": 3, "price": decimal.Decimal("9.50"), "since": dt.date(2026, 1, 1), "note": None}


def _rows(root: str) -> list:
    rows = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    return sorted((tuple(r[c] for c in COLUMNS) for r in rows), key=lambda r: r[0])


def _theirs(root: str) -> list:
    rows = deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()
    return sorted((tuple(r[c] for c in COLUMNS) for r in rows), key=lambda r: r[0])


def _model(given: list[dict]) -> list:
    """Plain Python: each row's given values over the defaults."""
    return sorted((tuple({**DEFAULTS, **r}[c] for c in COLUMNS) for r in given), key=lambda r: r[0])


def test_a_default_needs_the_feature_enabled_explicitly(tmp_path):
    root = tmp_path / "t"
    with pytest.raises(UnsupportedFeatureError, match="status, qty, price, since have a DEFAULT") as e:
        DeltaTable.create(None, str(root), schema=DDL)
    assert "delta.feature.allowColumnDefaults=supported" in e.value.fix
    assert not (root / "_delta_log").exists()  # nothing written
    DeltaTable.create(None, str(root), schema=DDL, properties=ON)
    protocol = DeltaTable.for_path(None, str(root)).snapshot().protocol
    assert "allowColumnDefaults" in protocol.writer_features
    assert DeltaTable.for_path(None, str(root)).snapshot().schema.field("qty").metadata == {"CURRENT_DEFAULT": "1 + 2"}


def test_appends_that_leave_columns_out_get_their_defaults(tmp_path):
    """append_arrow and the in-process plane's write: left-out columns get the default (a NOT NULL one
    too); a column given NULL explicitly stays NULL, as the protocol says; deltalake reads the same rows."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema=DDL, properties=ON)
    first = [{"id": 1}, {"id": 2}]
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64())}))
    second = [{"id": 3, "qty": None, "note": "x"}, {"id": 4, "qty": 7, "note": None}]
    write(
        root,
        pa.table({"id": pa.array([3, 4], pa.int64()), "qty": pa.array([None, 7], pa.int32()), "note": ["x", None]}),
    )
    want = _model(first + second)
    assert _rows(root) == want
    assert want[0] == (1, "new", 3, decimal.Decimal("9.50"), dt.date(2026, 1, 1), None)
    assert want[2][2] is None  # explicit NULL kept
    assert _theirs(root) == want


def test_merge_inserts_that_leave_columns_out_get_their_defaults(tmp_path):
    """A named insert that sets only some columns, and insert_all (with merge_schema) of a source without
    them: the rest get their defaults; matched rows are updated and keep their own values."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema=DDL, properties=ON)
    append_arrow(
        root, pa.table({"id": pa.array([1], pa.int64()), "status": ["paid"], "qty": pa.array([5], pa.int32())})
    )
    t = DeltaTable.for_path(None, root)
    source = pa.table({"id": pa.array([1, 2], pa.int64()), "note": ["again", "fresh"]})
    t.merge(source, "target.id = source.id").when_matched_update({"note": "source.note"}).when_not_matched_insert(
        {"id": "source.id", "note": "source.note"}
    ).execute()
    t.upsert(pa.table({"id": pa.array([3], pa.int64()), "qty": pa.array([9], pa.int32())}), ["id"], merge_schema=True)
    want = [
        (1, "paid", 5, decimal.Decimal("9.50"), dt.date(2026, 1, 1), "again"),
        *_model([{"id": 2, "note": "fresh"}, {"id": 3, "qty": 9}]),
    ]
    assert _rows(root) == want
    assert _theirs(root) == want


@pytest.mark.parametrize(
    ("ddl", "match"),
    [
        ("a INT DEFAULT 'abc'", "cannot be cast from string to integer"),
        ("a TINYINT DEFAULT 1000", "Cannot use 1000 as a byte"),
        ("a TIMESTAMP DEFAULT current_timestamp()", "Non-deterministic function"),
        ("a INT, b INT DEFAULT a + 1", "Unknown column 'a'"),
        ("a INT NOT NULL DEFAULT NULL", "NOT NULL but its DEFAULT 'NULL' is NULL"),
        ("v VARIANT DEFAULT 1", "VARIANT with a DEFAULT other than NULL"),
    ],
)
def test_a_default_that_is_not_a_constant_of_its_type_is_refused(tmp_path, ddl, match):
    with pytest.raises(InvalidSchemaError, match=match) as e:
        check_defaults(parse_ddl(ddl))
    assert e.value.fix
    with pytest.raises(InvalidSchemaError, match=match):  # before anything is written
        DeltaTable.create(None, str(tmp_path / "t"), schema=ddl, properties=ON)
    assert not (tmp_path / "t" / "_delta_log").exists()


def test_a_json_schema_default_is_checked_before_anything_is_written(tmp_path):
    schema = {
        "type": "struct",
        "fields": [{"name": "a", "type": "date", "nullable": True, "metadata": {"CURRENT_DEFAULT": "'someday'"}}],
    }
    with pytest.raises(InvalidSchemaError, match="Column 'a' \\(date\\) has a DEFAULT"):
        DeltaTable.create(None, str(tmp_path / "t"), schema=json.dumps(schema), properties=ON)
    assert not (tmp_path / "t").exists() or not (tmp_path / "t" / "_delta_log").exists()


def test_a_default_this_engine_cannot_evaluate_refuses_only_writes_that_need_it(tmp_path):
    """A table Spark made with ``DEFAULT current_timestamp()``: rows that give the column are written;
    rows that leave it out are refused by name before any file is written."""
    root = tmp_path / "t"
    DeltaTable.create(None, str(root), schema="id BIGINT, at TIMESTAMP", properties=ON)
    log = root / "_delta_log" / "00000000000000000000.json"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    for a in lines:  # as Spark's CREATE with a non-deterministic default writes it
        if "metaData" in a:
            schema = json.loads(a["metaData"]["schemaString"])
            schema["fields"][1]["metadata"] = {"CURRENT_DEFAULT": "current_timestamp()"}
            a["metaData"]["schemaString"] = json.dumps(schema)
    log.write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    at = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    append_arrow(
        str(root), pa.table({"id": pa.array([1], pa.int64()), "at": pa.array([at], pa.timestamp("us", "UTC"))})
    )
    with pytest.raises(InvalidSchemaError, match="Non-deterministic function current_timestamp") as e:
        append_arrow(str(root), pa.table({"id": pa.array([2], pa.int64())}))
    assert "write it in the data" in e.value.fix
    assert len(list(root.glob("*.parquet"))) == 1
    assert DeltaTable.for_path(None, str(root)).version() == 1


def test_the_feature_gate_refuses_defaults_without_the_feature():
    """Every commit's protocol and metadata pass the gate: a schema with a default on a protocol without
    allowColumnDefaults is refused by name; with it, accepted."""
    schema = parse_ddl("id BIGINT, qty INT DEFAULT 0").to_json_string()
    md = Metadata(id="x", schema_string=schema)
    with pytest.raises(UnsupportedFeatureError, match="without the 'allowColumnDefaults' feature"):
        check_write_supported(Protocol(min_reader_version=1, min_writer_version=2), md)
    check_write_supported(Protocol(1, 7, writer_features=["allowColumnDefaults", "appendOnly", "invariants"]), md)


def test_merge_schema_cannot_add_a_column_with_its_default(tmp_path):
    """PROTOCOL.md: a column is never added with a default in the same command (ALTER TABLE ADD COLUMN
    c INT DEFAULT 42 is not supported); an evolving write whose new column carries one is refused."""
    from airflow_delta_provider_apps.engine.schema import check_write_compatible

    table = parse_ddl("id BIGINT")
    data = parse_ddl("id BIGINT, qty INT DEFAULT 0")
    with pytest.raises(SchemaMismatchError, match="new column 'qty' carries a DEFAULT"):
        check_write_compatible(table, data, merge_schema=True)


def test_a_column_added_by_an_evolving_write_gets_its_default_afterwards(tmp_path):
    """A column comes in through an evolving upsert (merge_schema) without a default, then SET DEFAULT (after the feature is
    enabled, as delta-spark asks): rows written before keep NULL, later rows that leave it out get the
    default; DROP DEFAULT makes them NULL again. Bad defaults and computed columns are refused, nothing
    committed."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, n BIGINT GENERATED ALWAYS AS (id * 2)")
    t = DeltaTable.for_path(None, root)
    t.upsert(pa.table({"id": pa.array([1], pa.int64()), "tier": ["gold"]}), ["id"], merge_schema=True)
    append_arrow(root, pa.table({"id": pa.array([2], pa.int64())}))
    with pytest.raises(UnsupportedFeatureError, match="does not enable 'allowColumnDefaults'"):
        t.set_column_default("tier", "'basic'")
    t.set_properties(ON)
    version = t.version()
    for column, default, match in (
        ("tier", "1 +", "Column 'tier' \\(string\\) has a DEFAULT this engine cannot use"),
        ("n", "0", "it is an identity or generated column"),
        ("nope", "1", "no such column"),
    ):
        with pytest.raises((InvalidArgumentError, InvalidSchemaError), match=match):
            t.set_column_default(column, default)
    assert t.version() == version
    res = t.set_column_default("TIER", "'basic'")
    assert res["operation"] == "CHANGE COLUMN"
    append_arrow(root, pa.table({"id": pa.array([3], pa.int64())}))
    assert t.set_column_default("tier", "'basic'")["version"] == t.version()  # unchanged: nothing committed
    t.set_column_default("tier", None)
    append_arrow(root, pa.table({"id": pa.array([4], pa.int64())}))
    rows = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    got = sorted((r["id"], r["n"], r["tier"]) for r in rows)
    assert got == [(1, 2, "gold"), (2, 4, None), (3, 6, "basic"), (4, 8, None)]
    theirs = deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["n"], r["tier"]) for r in theirs) == got
