"""Target columns a MERGE's source leaves out, in process (no JVM), as delta-spark: with ``merge_schema``
(schema evolution) ``update_all`` leaves them unchanged and ``insert_all`` writes NULL; without it the
source must hold every column. A NOT NULL column left out of an insert is refused before anything is
written; identity and generated columns are assigned or computed. Appends of Arrow data write a left-out
nullable column as NULL, as Spark's appends do. Rows are compared with the plain-Python MERGE reference
(tests/merge_reference.py) and read back by deltalake."""

from __future__ import annotations

import pyarrow as pa
import pytest
from merge_reference import reference

from airflow_delta_provider_apps.engine import DeltaTable, cdf
from airflow_delta_provider_apps.engine.commands.write import append_arrow, write
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, SchemaMismatchError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

deltalake = pytest.importorskip("deltalake")

DDL = "order_id BIGINT, day INT, amount INT"
COLUMNS = ("order_id", "day", "amount", "channel")


def _day(day: int, n: int = 3, bump: int = 0, channel=None) -> pa.Table:
    """Day ``day``'s orders (``n`` of them; ``bump`` added to the amounts, as a corrected rerun)."""
    cols = {
        "order_id": pa.array([day * 10 + i for i in range(n)], pa.int64()),
        "day": pa.array([day] * n, pa.int32()),
        "amount": pa.array([day * 100 + i + bump for i in range(n)], pa.int32()),
    }
    if channel is not None:
        cols["channel"] = pa.array([channel] * n, pa.string())
    return pa.table(cols)


def _on(t, s) -> bool:
    return t["order_id"] is not None and t["order_id"] == s["order_id"]


# delta-spark's UPDATE * / INSERT * with schema evolution, row by row: a column the source leaves out
# keeps the target's value in an updated row and is NULL in an inserted one
UPSERT = [
    ("matched", ("update_all", None, lambda t, s: {**t, **s}), None),
    ("not_matched", ("insert_all", None, lambda t, s: {**dict.fromkeys(COLUMNS), **s}), None),
]


def _model(rows: list, source: pa.Table) -> list:
    return reference(rows, source.to_pylist(), UPSERT, _on)[0]


def _rows(root: str) -> list:
    return read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()


def _sorted(rows) -> list:
    return sorted(({c: r.get(c) for c in COLUMNS} for r in rows), key=lambda r: r["order_id"])


def _theirs(root: str, scan: bool) -> list:
    dt = deltalake.DeltaTable(root)
    if scan:  # deltalake's DataFusion scan applies deletion vectors and reads column mapping
        return pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()).to_pylist()
    return dt.to_pyarrow_table().to_pylist()


def _upsert(root: str, source: pa.Table, by: str, **kw) -> dict:
    t = DeltaTable.for_path(None, root)
    if by == "upsert":
        return t.upsert(source, ["order_id"], **kw)
    b = t.merge(source, "target.order_id = source.order_id", merge_schema=kw.get("merge_schema", False))
    return b.when_matched_update_all().when_not_matched_insert_all().execute()


@pytest.mark.parametrize("by", ["upsert", "merge"])
@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"partition_by": ["day"]},
        {"properties": {"delta.enableDeletionVectors": "true"}},
        {"properties": {"delta.enableChangeDataFeed": "true"}},
        {"properties": {"delta.columnMapping.mode": "name"}, "partition_by": ["day"]},
    ],
    ids=["plain", "partitioned", "dv", "cdf", "column_mapping"],
)
def test_a_day_from_before_a_schema_change_is_reprocessed(tmp_path, by, layout):
    """Days 1-5 upserted, day 6 adds ``channel`` (merge_schema) and sets it on one of day 3's orders;
    then day 3's original source, corrected, without ``channel``, is upserted again: it succeeds with
    merge_schema, channel unchanged in its updated rows and NULL in its new one; without merge_schema it
    is refused (delta-spark's rule) and nothing is written. Every version equals the model."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema=DDL, **layout)
    model: list = []
    for day in range(1, 6):
        _upsert(root, _day(day), by)
        model = _model(model, _day(day))
    day6 = pa.concat_tables([_day(6, channel="web"), _day(3, n=1, bump=50, channel="shop")])
    _upsert(root, day6, by, merge_schema=True)
    model = _model(model, day6)
    assert _sorted(_rows(root)) == _sorted(model)

    rerun = _day(3, n=4, bump=7)  # day 3 again: its 3 orders corrected, a 4th order new
    version = DeltaTable.for_path(None, root).version()
    with pytest.raises(InvalidArgumentError, match="source has no column channel") as e:
        _upsert(root, rerun, by)
    assert "merge_schema=True" in e.value.fix
    assert DeltaTable.for_path(None, root).version() == version

    res = _upsert(root, rerun, by, merge_schema=True)
    model = _model(model, rerun)
    got = _sorted(_rows(root))
    assert got == _sorted(model)
    by_id = {r["order_id"]: r for r in got}
    assert by_id[30] == {"order_id": 30, "day": 3, "amount": 307, "channel": "shop"}  # updated: kept
    assert by_id[33]["channel"] is None and by_id[33]["amount"] == 310  # inserted: NULL
    m = res["metrics"]
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (3, 1)
    assert DeltaTable.for_path(None, root).snapshot().schema.names == list(COLUMNS)
    assert _sorted(_theirs(root, bool(layout.get("properties")))) == got
    if "delta.enableChangeDataFeed" in layout.get("properties", {}):
        storage = storage_for(root)
        plan = cdf.plan_changes(storage, root, version + 1, version + 1)
        changes = sorted(
            (r["_change_type"], r["order_id"], r["amount"], r["channel"])
            for b in cdf.iter_changes(storage, plan)
            for r in b.to_pylist()
        )
        want = [("insert", 33, 310, None)]
        for i, channel in ((0, "shop"), (1, None), (2, None)):
            before = 350 if i == 0 else 300 + i
            want += [("update_preimage", 30 + i, before, channel), ("update_postimage", 30 + i, 307 + i, channel)]
        assert changes == sorted(want)


def test_a_not_null_column_left_out_is_refused_for_inserts_and_kept_by_updates(tmp_path):
    """``region`` is NOT NULL: an upsert whose source leaves it out is refused before anything is
    written (its inserts would be NULL), even with merge_schema; an update_all alone leaves it as it is."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="order_id BIGINT, amount INT, region STRING NOT NULL")
    append_arrow(root, pa.table({"order_id": pa.array([1, 2], pa.int64()), "amount": [10, 20], "region": ["eu", "us"]}))
    source = pa.table({"order_id": pa.array([2, 3], pa.int64()), "amount": pa.array([21, 30], pa.int32())})
    t = DeltaTable.for_path(None, root)
    for merge_schema in (False, True):
        with pytest.raises(InvalidArgumentError, match="source has no column region") as e:
            t.upsert(source, ["order_id"], merge_schema=merge_schema)
        assert ("NOT NULL" in str(e.value)) == merge_schema
    assert t.version() == 1
    res = t.merge(source, "target.order_id = source.order_id", merge_schema=True).when_matched_update_all().execute()
    assert res["metrics"]["numTargetRowsUpdated"] == 1
    got = sorted((r["order_id"], r["amount"], r["region"]) for r in _rows(root))
    assert got == [(1, 10, "eu"), (2, 21, "us")]


def test_identity_and_generated_columns_left_out_are_assigned_and_computed(tmp_path):
    """The source leaves out an identity column, a generated one and ``channel``: updated rows keep
    their id and channel and recompute the generated column from the new amount; inserted rows get a
    new id, the computed value and a NULL channel. Without merge_schema only ``channel`` is named."""
    root = str(tmp_path / "t")
    DeltaTable.create(
        None,
        root,
        schema="id BIGINT GENERATED ALWAYS AS IDENTITY, order_id BIGINT, amount INT, "
        "doubled INT GENERATED ALWAYS AS (amount * 2), channel STRING",
    )
    first = pa.table({"order_id": pa.array([1, 2], pa.int64()), "amount": [10, 20], "channel": ["web", "app"]})
    append_arrow(root, first)
    ids = {r["order_id"]: r["id"] for r in _rows(root)}
    source = pa.table({"order_id": pa.array([2, 3], pa.int64()), "amount": pa.array([25, 30], pa.int32())})
    t = DeltaTable.for_path(None, root)
    with pytest.raises(InvalidArgumentError, match=r"source has no column channel\. Cause"):
        t.upsert(source, ["order_id"])
    t.upsert(source, ["order_id"], merge_schema=True)
    got = {r["order_id"]: r for r in _rows(root)}
    assert {k: (r["amount"], r["doubled"], r["channel"]) for k, r in got.items()} == {
        1: (10, 20, "web"),
        2: (25, 50, "app"),
        3: (30, 60, None),
    }
    assert got[1]["id"] == ids[1] and got[2]["id"] == ids[2]
    assert got[3]["id"] is not None and got[3]["id"] not in ids.values()


def test_append_arrow_writes_a_left_out_nullable_column_as_null(tmp_path):
    """append_arrow and the in-process append follow Spark's append: a nullable column the data leaves
    out is written NULL; a NOT NULL one is refused, naming it, before any file is written."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="order_id BIGINT NOT NULL, amount INT, channel STRING")
    append_arrow(root, pa.table({"order_id": pa.array([1], pa.int64()), "amount": pa.array([10], pa.int32())}))
    write(root, pa.table({"order_id": pa.array([2], pa.int64()), "channel": ["web"]}))  # the in-process plane
    want = [(1, 10, None), (2, None, "web")]
    assert sorted((r["order_id"], r["amount"], r["channel"]) for r in _rows(root)) == want
    theirs = deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()
    assert sorted((r["order_id"], r["amount"], r["channel"]) for r in theirs) == want
    files = set((tmp_path / "t").glob("*.parquet"))
    with pytest.raises(SchemaMismatchError, match="NOT NULL column.*'order_id'") as e:
        append_arrow(root, pa.table({"amount": pa.array([3], pa.int32())}))
    assert "add them to the data" in e.value.fix
    with pytest.raises(SchemaMismatchError, match="missing non-nullable column 'order_id'"):
        write(root, pa.table({"amount": pa.array([3], pa.int32())}))
    assert DeltaTable.for_path(None, root).version() == 2 and set((tmp_path / "t").glob("*.parquet")) == files


def test_a_partition_column_left_out_keeps_updated_rows_in_their_partition(tmp_path):
    """With merge_schema an upsert whose source lacks the partition column updates rows where they are
    and inserts its new rows into the NULL partition, as the reference says."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema=DDL, partition_by=["day"])
    append_arrow(root, pa.concat_tables([_day(1), _day(2)]))
    source = _day(2, n=4, bump=5).drop_columns(["day"])
    DeltaTable.for_path(None, root).upsert(source, ["order_id"], merge_schema=True)
    model = _model(pa.concat_tables([_day(1), _day(2)]).to_pylist(), source)
    assert _sorted(_rows(root)) == _sorted(model)
    assert {r["order_id"]: r["day"] for r in _rows(root) if r["order_id"] >= 20} == {20: 2, 21: 2, 22: 2, 23: None}
    parts = {
        tuple(sorted(p))
        for p in DeltaTable.for_path(None, root).snapshot().files.column("partition_values").to_pylist()
    }
    assert (("day", None),) in parts
