"""The change data feed, written and read, without a JVM (the in-process path).

Random tables with ``delta.enableChangeDataFeed=true`` (with and without deletion vectors) and random
DELETEs then an UPDATE: each command's change rows equal the plain-Python reference's (deleted rows;
pre- and post-images), replaying the feed from version 0 gives the table's rows at every version,
and deltalake's ``load_cdf`` reads the same changes (where it can: it does not read deletion
vectors). Also a table written by delta-spark with deletion vectors and CDF, and the range errors.
"""

from __future__ import annotations

import collections
import datetime
import glob
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_strategies import ARROW, predicates, rows, table_of

from airflow_delta_provider_apps.engine import DeltaTable, cdf
from airflow_delta_provider_apps.engine.commands.write import append_arrow, overwrite
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for

deltalake = pytest.importorskip("deltalake")

DDL = "p INT, i BIGINT, d DOUBLE, s STRING, day DATE, b BOOLEAN"
CDF = {"delta.enableChangeDataFeed": "true"}
settings_ = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _canon(r: dict, names=ARROW.names) -> tuple:
    return tuple(
        ("nan" if isinstance(v, float) and math.isnan(v) else v) if v is not None else ("null",)
        for v in (r[k] for k in names)
    )


def _changes(root: str, start: int, end: int | None = None) -> pa.Table:
    storage = storage_for(root)
    plan = cdf.plan_changes(storage, root, start, end)
    return pa.Table.from_batches(list(cdf.iter_changes(storage, plan)), schema=cdf.changes_schema(plan.schema))


def _feed(table: pa.Table, *, versions: bool = False) -> list:
    """Change rows as sorted ``(_change_type, row...)`` tuples (``_commit_version`` first with ``versions``)."""
    return sorted(
        (
            ((int(r["_commit_version"]),) if versions else ()) + (r["_change_type"], *_canon(r))
            for r in table.to_pylist()
        ),
        key=repr,
    )


def _expected(pairs) -> list:
    return sorted(((kind, *_canon(r)) for r, kind in pairs), key=repr)


def _replayed(changes: pa.Table, names) -> collections.Counter:
    """The rows a table holds after applying ``changes`` (in commit order) to an empty one."""
    state = collections.Counter()
    for r in changes.sort_by([(cdf.COMMIT_VERSION, "ascending")]).to_pylist():
        key = _canon(r, names)
        if r[cdf.CHANGE_TYPE] in (cdf.INSERT, cdf.UPDATE_POSTIMAGE):
            state[key] += 1
        else:
            assert state[key] > 0, f"{r} changes a row the feed never inserted"
            state[key] -= 1
    return +state


commits = st.lists(st.lists(rows, min_size=1, max_size=12), min_size=1, max_size=3)


@settings_
@given(commits, st.booleans(), st.booleans(), st.lists(predicates(), min_size=1, max_size=2), predicates())
def test_dml_changes_equal_the_reference(tmp_path_factory, data, partitioned, dv, preds, where):
    root = str(tmp_path_factory.mktemp("cdf") / "t")
    props = {**CDF, **({"delta.enableDeletionVectors": "true"} if dv else {})}
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"] if partitioned else None, properties=props)
    for rs in data:
        append_arrow(root, table_of(rs))
    live = [r for rs in data for r in rs]
    for text, reference in preds:
        result = t.delete(text)
        gone = [r for r in live if reference(r) is True]
        if result["committed"]:
            assert _feed(_changes(root, result["version"], result["version"])) == _expected((r, "delete") for r in gone)
        else:
            assert not gone
        live = [r for r in live if reference(r) is not True]
    text, reference = where
    result = t.update({"i": "coalesce(i, 0) + 1000", "p": "3"}, text)
    hit = [r for r in live if reference(r) is True]
    if result["committed"]:
        pairs = [(r, "update_preimage") for r in hit] + [
            (dict(r, i=(r["i"] or 0) + 1000, p=3), "update_postimage") for r in hit
        ]
        got = _changes(root, result["version"], result["version"])
        assert _feed(got) == _expected(pairs)
        assert result["metrics"]["numAddedChangeFiles"] >= 1
    # the whole feed replayed is the table, at the end and at every version on the way
    latest = t.version()
    everything = _changes(root, 0)
    for v in range(latest + 1):
        upto = everything.filter(pa.compute.less_equal(everything.column(cdf.COMMIT_VERSION), v))
        at_v = read_snapshot_table(load_snapshot(storage_for(root), root, version=v))
        assert _replayed(upto, ARROW.names) == collections.Counter(_canon(r) for r in at_v.to_pylist())
    if not dv:
        theirs = pa.table(deltalake.DeltaTable(root).load_cdf(starting_version=0))
        assert _feed(theirs, versions=True) == _feed(everything, versions=True)


def test_no_change_files_where_the_log_says_it_all(tmp_path):
    """Appends, whole-partition deletes and DELETEs through deletion vectors write no change file
    (readers take those rows from add/remove and the vectors); a copy-on-write DELETE does."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, p INT", partition_by=["p"], properties=CDF)
    append_arrow(
        root, pa.table({"id": pa.array(range(10), pa.int64()), "p": pa.array([i % 2 for i in range(10)], pa.int32())})
    )
    assert t.delete("p = 1")["metrics"]["numAddedChangeFiles"] == 0
    res = t.delete("id = 2")
    assert res["metrics"]["numAddedChangeFiles"] == 1
    with open(f"{root}/_delta_log/{res['version']:020d}.json") as f:
        cdc = [json.loads(line)["cdc"] for line in f if line.startswith('{"cdc"')]
    assert [c["dataChange"] for c in cdc] == [False] and cdc[0]["path"].startswith("_change_data/p=0/cdc-")
    assert len(glob.glob(f"{root}/_change_data/p=0/cdc-*.parquet")) == 1
    t.set_properties({"delta.enableDeletionVectors": "true"})
    assert t.delete("id = 4")["metrics"]["numAddedChangeFiles"] == 0
    got = _changes(root, 1)
    assert sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in got.to_pylist()) == sorted(
        [(i, "insert", 1) for i in range(10)]
        + [(i, "delete", 2) for i in (1, 3, 5, 7, 9)]
        + [(2, "delete", 3), (4, "delete", 5)]
    )


def test_reads_the_feed_delta_spark_wrote_with_deletion_vectors(conformance_root):
    """A delta-spark table with deletion vectors and CDF (DELETEs through vectors without change
    files, UPDATE and MERGE with them, OPTIMIZE between): the feed replayed is the table at every
    version."""
    root = str(conformance_root / "delta-kernel-rs" / "compacted-log-files-table")
    storage = storage_for(root)
    everything = _changes(root, 0)
    assert set(everything.column(cdf.CHANGE_TYPE).to_pylist()) == {
        "insert",
        "delete",
        "update_preimage",
        "update_postimage",
    }
    names = ["id", "comment"]
    for v in range(0, 26, 3):
        upto = everything.filter(pa.compute.less_equal(everything.column(cdf.COMMIT_VERSION), v))
        at_v = read_snapshot_table(load_snapshot(storage, root, version=v))
        assert _replayed(upto, names) == collections.Counter(_canon(r, names) for r in at_v.to_pylist())


def test_change_ranges_are_checked_before_reading(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64())}))
    storage = storage_for(root)
    with pytest.raises(DeltaError, match="change data feed was not enabled at that version"):
        cdf.plan_changes(storage, root, 0)
    t.set_properties(CDF)
    append_arrow(root, pa.table({"id": pa.array([3], pa.int64())}))
    assert _changes(root, 2).column("id").to_pylist() == [3]  # from the version that enabled it on
    with pytest.raises(DeltaError, match="latest version is 3"):
        cdf.plan_changes(storage, root, 4)
    with pytest.raises(DeltaError, match="ends .version 2. before it starts .version 3."):
        cdf.plan_changes(storage, root, 3, 2)
    with pytest.raises(DeltaError, match="non-negative integer"):
        cdf.plan_changes(storage, root, 2.5)


DAY = datetime.date(2026, 1, 3)


@pytest.mark.parametrize(
    "adds_column, properties",
    [
        (True, {}),
        (False, {}),
        (True, {"delta.columnMapping.mode": "name"}),
        (True, {"delta.enableDeletionVectors": "true"}),
        (True, {"delta.enableTypeWidening": "true"}),
    ],
    ids=["new-column", "same-columns", "new-column-mapped", "new-column-deletion-vectors", "new-column-widened"],
)
def test_replace_where_with_merge_schema_records_the_replaced_and_written_rows(tmp_path, adds_column, properties):
    """The README's rerunnable daily load after a schema change: ``replace_where`` on a data column
    with ``merge_schema`` on a table recording the feed. The commit adds the source's new column; its
    changes are the replaced rows as deletes (the new column NULL) and the written rows as inserts,
    in change files of one schema (none for the deletes through deletion vectors; with type widening
    a wider source column widens the table's, the deleted rows' values too), read alike by
    our reader, by deltalake's ``load_cdf`` (where it reads the table) and by a plain-Python model."""
    root = str(tmp_path / "t")
    schema = "order_id BIGINT, order_date DATE, region STRING, quantity INT"
    t = DeltaTable.create(None, root, schema=schema, partition_by=["region"], properties={**CDF, **properties})
    names = ["order_id", "order_date", "region", "quantity"]
    live = [
        dict(zip(names, (i, datetime.date(2026, 1, 1 + i % 3), ("eu", "us")[i % 2], i * 10), strict=True))
        for i in range(12)
    ]
    for part in (live[:6], live[6:]):
        append_arrow(root, pa.Table.from_pylist(part, schema=_ORDERS))
    source = [
        {"order_id": 5, "order_date": DAY, "region": "eu", "quantity": 55},  # an order of the day, restated
        {"order_id": 100, "order_date": DAY, "region": "eu", "quantity": 1},
    ]
    source_schema = _ORDERS
    if adds_column:
        source = [dict(source[0], channel="web"), dict(source[1], channel=None)]
        source_schema = _ORDERS.append(pa.field("channel", pa.string()))
    if "delta.enableTypeWidening" in properties:  # quantity INT -> BIGINT in the same commit
        source[0]["quantity"] = 2**40
        source_schema = source_schema.set(3, pa.field("quantity", pa.int64()))
    res = overwrite(
        DeltaTable(None, root).snapshot(),
        pa.Table.from_pylist(source, schema=source_schema),
        replace_where=f"order_date = '{DAY}' AND region = 'eu'",
        merge_schema=True,
    )
    version = res.version
    # the plain-Python model: the day's rows of that region go, the source's come
    replaced = [r for r in live if r["order_date"] == DAY and r["region"] == "eu"]
    assert replaced and len(replaced) < sum(r["region"] == "eu" for r in live)  # files rewritten, rows kept
    columns = names + (["channel"] if adds_column else [])
    blank = dict.fromkeys(columns)
    expected = sorted(
        [(*({**blank, **r}[c] for c in columns), "delete") for r in replaced]
        + [(*({**blank, **r}[c] for c in columns), "insert") for r in source]
    )

    def rows_of(table: pa.Table) -> list:
        return sorted((*(r[c] for c in columns), r[cdf.CHANGE_TYPE]) for r in table.to_pylist())

    assert rows_of(pa.table(t.changes(version, version))) == expected
    after = load_snapshot(storage_for(root), root)
    assert after.schema.names == columns
    kept = [r for r in live if r not in replaced]
    assert sorted(tuple(r.values()) for r in read_snapshot_table(after).to_pylist()) == sorted(
        tuple({**blank, **r}[c] for c in columns) for r in kept + source
    )
    # the feed replayed from the start is the table (rows of older versions read with the new column NULL)
    assert _replayed(_changes(root, 0), columns) == collections.Counter(
        _canon(r, columns) for r in read_snapshot_table(after).to_pylist()
    )
    cdc = glob.glob(f"{root}/_change_data/**/*.parquet", recursive=True)
    if "delta.enableDeletionVectors" in properties:
        assert res.metrics.num_deleted_rows == len(replaced)
        return
    # one schema for the commit's change files: the table's new one, with _change_type
    in_files = [(f.physical_name, f.type.to_arrow()) for f in after.schema.fields if f.name != "region"]  # in paths
    assert cdc and [[(f.name, f.type) for f in pq.read_schema(p)] for p in cdc] == len(cdc) * [
        [*in_files, (cdf.CHANGE_TYPE, pa.string())]
    ]
    if not properties:  # deltalake reads no change feed under column mapping, type widening or deletion vectors
        theirs = pa.table(deltalake.DeltaTable(root).load_cdf(starting_version=version, ending_version=version))
        assert rows_of(theirs) == expected


_ORDERS = pa.schema(
    [("order_id", pa.int64()), ("order_date", pa.date32()), ("region", pa.string()), ("quantity", pa.int32())]
)
