"""The DML rewrite (``engine.rewrite``) without a JVM: one pass for likely-touched files, probe first
for the others, parallel across files in this process.

* a file rewritten in one pass is opened (read) once; a probed and touched file twice; a probed
  untouched file once, and only its predicate's columns are read;
* a file that turns out untouched leaves nothing behind, in either plan, including when a one pass
  already wrote (the listing of the table folder before and after is the same);
* one pass and probe-then-rewrite give the same outcomes and the same rows written;
* the in-process rewrite in parallel gives the same rows (and metrics) as in serial;
* the stats estimate (``likely_touched``) picks one pass for bulk predicates and probing for point
  predicates, files without stats and predicates it cannot estimate.
"""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable, rewrite
from airflow_delta_provider_apps.engine.arrays import scatter
from airflow_delta_provider_apps.engine.commands import dml
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.expr import bind_assignments, parse_predicate
from airflow_delta_provider_apps.engine.paths import data_file_uri
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.rewrite import files as rw
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.writer import WriteSpec, resolve_target_file_size

DDL = "p INT, i BIGINT, d DOUBLE, s STRING"
COLUMNS = ["p", "i", "d", "s"]


def _batch(start: int, count: int, parts: int = 2) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "p": pa.array([i % parts for i in ids], pa.int32()),
            "i": pa.array(ids, pa.int64()),
            "d": pa.array([None if i % 11 == 0 else (i * 7919 % 1000) / 1000.0 for i in ids], pa.float64()),
            "s": pa.array([f"s{i % 5}" for i in ids], pa.string()),
        }
    )


def _table(root: str, commits: int = 3, rows: int = 400, partitioned: bool = True) -> DeltaTable:
    t = DeltaTable.create(None, root, schema=DDL, partition_by=["p"] if partitioned else None)
    for k in range(commits):
        append_arrow(root, _batch(k * rows, rows))
    return t


def _spec(snapshot, predicate: str | None, updates: dict | None = None, **write) -> rw.RewriteSpec:
    md = snapshot.metadata
    bound = parse_predicate(predicate, snapshot.schema) if predicate is not None else None
    sets = tuple(bind_assignments(updates, snapshot.schema).items()) if updates else ()
    return rw.RewriteSpec(
        write=WriteSpec(
            table_uri=snapshot.table_root,
            schema_json=snapshot.schema.to_json_string(),
            partition_columns=tuple(md.partition_columns or ()),
            configuration=dict(md.configuration or {}),
            target_file_size=resolve_target_file_size(snapshot.properties, None),
            **write,
        ),
        predicate=bound,
        updates=sets,
        column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
    )


def _listing(root: str) -> set[str]:
    out = set()
    for folder, _, names in os.walk(root):
        out |= {os.path.relpath(os.path.join(folder, x), root) for x in names}
    return out


def _data_files(root: str) -> set[str]:
    return {p for p in _listing(root) if p.endswith(".parquet")}


class CountingStorage:
    """The table's storage, counting the data files opened for reading (and the columns read)."""

    def __init__(self, inner):
        self._inner = inner
        self.opens: dict[str, int] = {}
        self._lock = threading.Lock()

    def open_input_file(self, path):
        with self._lock:
            self.opens[os.path.basename(path)] = self.opens.get(os.path.basename(path), 0) + 1
        return self._inner.open_input_file(path)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _written_rows(root: str, outcomes) -> list[tuple]:
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.paths import data_file_uri

    storage = storage_for(root)
    rows = []
    for o in outcomes:
        for w in o.written:
            with storage.open_input_file(data_file_uri(root, w.add.path)) as f:
                t = pq.read_table(f)
            pv = w.add.partition_values
            for r in t.to_pylist():
                rows.append((pv.get("p"), r["i"], r["d"], r["s"]))
    return sorted(rows, key=repr)


def _one(snapshot, path_filter=None):
    files = snapshot.files
    if path_filter is not None:
        files = files.filter(pa.array([path_filter(p) for p in files.column("path").to_pylist()]))
    return files


# ---------------------------------------------------------------------------------------------
# reads


@pytest.mark.parametrize("likely, touched, opens", [(True, True, 1), (False, True, 2), (False, False, 1)])
def test_reads_per_file(tmp_path, likely, touched, opens):
    root = str(tmp_path / "t")
    t = _table(root, commits=1)
    snap = t.snapshot()
    spec = _spec(snap, "d < 0.5" if touched else "i < 0")
    storage = CountingStorage(storage_for(root))
    row = snap.files.slice(0, 1).to_pylist()[0]
    o = rw.rewrite_file(spec, storage, row["path"], dict(row["partition_values"]), likely=likely)
    assert storage.opens == {os.path.basename(row["path"]): opens}
    assert o.reads == opens and o.one_pass is likely and o.touched is touched
    assert bool(o.written) is touched


def test_one_pass_reads_each_likely_file_once_through_the_command(tmp_path, monkeypatch):
    root = str(tmp_path / "t")
    t = _table(root)
    counting = CountingStorage(storage_for(root))
    monkeypatch.setattr("airflow_delta_provider_apps.engine.storage.storage_for", lambda uri: counting)
    before = _data_files(root)
    with rewrite.record_outcomes() as got:
        r = dml.delete(t.snapshot(), "d < 0.5")  # about half of every file: all likely touched
    assert r.metrics.num_removed_files == len(before) == len(got)
    assert all(o.one_pass and o.reads == 1 for o in got)
    assert sorted(counting.opens.values()) == [1] * len(before)
    assert set(counting.opens) == {os.path.basename(p) for p in before}


ROW_GROUP = 128


def _multi_group_file(tmp_path):
    """A table folder with one data file of 1000 rows in 8 row groups (i = 0..999), and a spec
    writing back into that folder."""
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.schema import parse_ddl

    root = tmp_path / "t"
    root.mkdir()
    pq.write_table(_batch(0, 1000).drop_columns(["p"]), root / "f.parquet", row_group_size=ROW_GROUP)
    schema = parse_ddl("i BIGINT, d DOUBLE, s STRING")
    write = WriteSpec(table_uri=str(root), schema_json=schema.to_json_string())
    return str(root), schema, write


def _spec_for(schema, write, predicate, updates=None):
    bound = parse_predicate(predicate, schema)
    sets = tuple(bind_assignments(updates, schema).items()) if updates else ()
    return rw.RewriteSpec(write=write, predicate=bound, updates=sets)


@pytest.fixture
def reads(monkeypatch):
    """(columns, row groups) of every parquet read."""
    import pyarrow.parquet as pq

    got = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *a, **kw):
        got.append((tuple(kw.get("columns") or ()), tuple(kw.get("row_groups") or ())))
        return original(self, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    return got


def test_probe_reads_the_predicate_columns_up_to_the_first_match(tmp_path, reads):
    root, schema, write = _multi_group_file(tmp_path)
    o = rw.rewrite_file(_spec_for(schema, write, "i % 2 = 0"), storage_for(root), "f.parquet", {})
    assert o.touched and not o.one_pass and o.reads == 2
    probe, rewrite = reads[0], reads[1:]
    assert probe == (("i",), (0,))  # the first row group matched: the probe stops there
    assert [g for _, g in rewrite] == [(g,) for g in range(8)]
    assert {c for c, _ in rewrite} == {("i", "d", "s")}
    assert o.num_rows == 1000 and o.num_matched == 500 and o.num_written_rows == 500


def test_probe_skips_row_groups_the_statistics_rule_out(tmp_path, reads):
    root, schema, write = _multi_group_file(tmp_path)
    o = rw.rewrite_file(_spec_for(schema, write, "i >= 1000 OR s = 's9'"), storage_for(root), "f.parquet", {})
    assert not o.touched and o.num_rows == 1000 and reads == []  # nothing read but the footer
    reads.clear()
    o = rw.rewrite_file(_spec_for(schema, write, "i >= 900"), storage_for(root), "f.parquet", {})
    assert reads[0] == (("i",), (7,)) and o.num_matched == 100


def test_probe_of_an_untouched_file_reads_only_the_predicate_columns(tmp_path, reads):
    root, schema, write = _multi_group_file(tmp_path)
    before = _listing(root)
    o = rw.rewrite_file(_spec_for(schema, write, "s LIKE '%9'"), storage_for(root), "f.parquet", {})
    assert not o.touched and o.num_rows == 1000 and o.reads == 1 and not o.written
    assert {c for c, _ in reads} == {("s",)} and len(reads) == 8
    assert _listing(root) == before


@pytest.mark.parametrize("dv_rows", [list(range(200)), [0, 5, 129, 130, 999]])
@pytest.mark.parametrize("predicate", ["i < 100", "i < 300", "i >= 990", "d < 0.5"])
def test_deletion_vectors_in_both_plans(tmp_path, dv_rows, predicate):
    from test_reader_streaming import inline_dv

    root, schema, write = _multi_group_file(tmp_path)
    dv = inline_dv(dv_rows)
    live = [i for i in range(1000) if i not in set(dv_rows)]
    got = {}
    for likely in (True, False):
        o = rw.rewrite_file(_spec_for(schema, write, predicate), storage_for(root), "f.parquet", {}, dv, likely=likely)
        got[likely] = (o.num_rows, o.num_matched, o.num_written_rows)
        for w in o.written:
            storage_for(root).delete(data_file_uri(root, w.add.path))
    assert got[True] == got[False]
    assert got[True][0] == len(live)
    assert got[True][1] + got[True][2] == (len(live) if got[True][1] else 0)


# ---------------------------------------------------------------------------------------------
# untouched files leave nothing behind


@pytest.mark.parametrize("likely", [True, False])
@pytest.mark.parametrize("row_group_bytes", [None, 1])  # 1 byte: a one pass writes from its first batch
def test_untouched_file_leaves_no_written_file(tmp_path, likely, row_group_bytes):
    root = str(tmp_path / "t")
    t = _table(root, commits=2)
    snap = t.snapshot()
    extra = {} if row_group_bytes is None else {"row_group_bytes": row_group_bytes}
    spec = _spec(snap, "s = 'nope'", **extra)
    before = _listing(root)
    outcomes = rw.rewrite_files(spec, snap.files, one_pass=likely)
    assert _listing(root) == before
    assert all(not o.touched and not o.written for o in outcomes)
    assert [o.num_rows for o in outcomes] == [r for r in _records(snap)]
    if likely and row_group_bytes == 1:
        assert all(o.discarded >= 1 for o in outcomes)  # written, then deleted
    else:
        assert all(o.discarded == 0 for o in outcomes)


def _records(snap) -> list[int]:
    import json

    return [json.loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist()]


def test_untouched_files_are_neither_removed_nor_rewritten_by_delete(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root)
    before = _data_files(root)
    r = dml.delete(t.snapshot(), "i = 5")  # one file holds i = 5
    assert r.metrics.num_removed_files == 1 and r.metrics.num_added_files == 1
    assert r.metrics.num_deleted_rows == 1
    after = _data_files(root)
    assert len(after - before) == 1 and before <= after  # nothing removed on disk, one file added


# ---------------------------------------------------------------------------------------------
# one pass == probe then rewrite


PREDICATES = [
    "d < 0.5",
    "d IS NULL",
    "i % 3 = 0 AND s != 's2'",
    "s = 's9'",
    "i = 401",
    "p = 1 AND d > 0.9",
    "p = 0 OR i < 10",
    "NOT (d >= 0.2)",
]


def _key(o):
    return (o.path, o.num_rows, o.num_matched, o.touched, o.num_written_rows)


@pytest.mark.parametrize("predicate", PREDICATES)
@pytest.mark.parametrize("updates", [None, {"d": "d * 2", "s": "'u'"}, {"p": "p + 10"}])
def test_one_pass_equals_two_passes(tmp_path, predicate, updates):
    import shutil

    root = str(tmp_path / "t")
    _table(root)
    roots = {}
    outcomes = {}
    for plan in (True, False):
        roots[plan] = str(tmp_path / f"copy_{plan}")
        shutil.copytree(root, roots[plan])
        snap = DeltaTable.for_path(None, roots[plan]).snapshot()
        outcomes[plan] = rw.rewrite_files(_spec(snap, predicate, updates), snap.files, one_pass=plan)
    assert [_key(o) for o in outcomes[True]] == [_key(o) for o in outcomes[False]]
    assert all(o.one_pass for o in outcomes[True]) and not any(o.one_pass for o in outcomes[False])
    assert _written_rows(roots[True], outcomes[True]) == _written_rows(roots[False], outcomes[False])


@pytest.mark.parametrize("one_pass", [True, False])
def test_set_values_are_evaluated_on_the_matching_rows_only(tmp_path, one_pass):
    """As Spark's CASE WHEN: ``SET d = 1 / (i % 4)`` WHERE ``i % 4 != 0`` divides by zero in no
    matching row, so the UPDATE succeeds (ANSI division by zero would fail it otherwise)."""
    root = str(tmp_path / "t")
    t = _table(root, commits=1)
    snap = t.snapshot()
    spec = _spec(snap, "i % 4 != 0", {"d": "1 / (i % 4)"})
    outcomes = rw.rewrite_files(spec, snap.files, one_pass=one_pass)
    rows = _written_rows(root, outcomes)
    assert len(rows) == 400
    for _, i, d, _ in rows:
        assert d == (1 / (i % 4) if i % 4 else (None if i % 11 == 0 else (i * 7919 % 1000) / 1000.0))


def test_update_of_nested_columns_in_some_rows(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="i BIGINT, st STRUCT<a: INT, b: STRING>, xs ARRAY<INT>")
    append_arrow(
        root,
        pa.table(
            {
                "i": pa.array(range(10), pa.int64()),
                "st": pa.array([{"a": k, "b": str(k)} if k % 3 else None for k in range(10)]),
                "xs": pa.array([[k, k] for k in range(10)], pa.list_(pa.int32())),
            }
        ).cast(t.snapshot().schema.to_arrow_schema()),
    )
    dml.update(t.snapshot(), {"st": "NULL", "xs": "NULL"}, "i >= 5")
    got = sorted(read_snapshot_table(t.snapshot()).to_pylist(), key=lambda r: r["i"])
    for r in got:
        if r["i"] >= 5:
            assert r["st"] is None and r["xs"] is None
        else:
            k = r["i"]
            assert r["st"] == ({"a": k, "b": str(k)} if k % 3 else None) and r["xs"] == [k, k]


@pytest.mark.parametrize(
    "col",
    [
        pa.array([1, None, 3, 4]),
        pa.array(["a", "b", None, "d"]),
        pa.array([{"a": 1}, None, {"a": 3}, {"a": 4}]),
        pa.array([[1], [2], None, [4]]),
        pa.array([[("k", 1)], [], None, [("z", 2)]], pa.map_(pa.string(), pa.int64())),
    ],
)
def test_scatter_replaces_the_masked_rows_in_order(col):
    mask = pa.array([True, False, False, True])
    new = col.take(pa.array([2, 1]))
    assert scatter(col, mask, new).to_pylist() == [
        new[0].as_py(),
        col[1].as_py(),
        col[2].as_py(),
        new[1].as_py(),
    ]


def test_no_predicate_update_is_one_pass_and_touches_every_row(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root)
    with rewrite.record_outcomes() as got:
        r = dml.update(t.snapshot(), {"s": "'all'"})
    assert all(o.one_pass and o.reads == 1 for o in got)
    assert r.metrics.num_updated_rows == 1200 and r.metrics.num_copied_rows == 0
    assert set(read_snapshot_table(t.snapshot()).column("s").to_pylist()) == {"all"}


# ---------------------------------------------------------------------------------------------
# parallel == serial


@pytest.mark.parametrize(
    "command, args",
    [
        ("delete", ("d < 0.3 OR s = 's1'",)),
        ("update", ({"d": "d + 1", "p": "p + 5"}, "i % 4 = 1")),
        ("update", ({"s": "upper(s)"}, "d IS NULL")),
    ],
)
def test_parallel_equals_serial(tmp_path, monkeypatch, command, args):
    import shutil

    root = str(tmp_path / "t")
    _table(root, commits=4)
    results, rows = {}, {}
    for workers in (1, 4):
        copy = str(tmp_path / f"w{workers}")
        shutil.copytree(root, copy)
        monkeypatch.setattr(rw.os, "cpu_count", lambda w=workers: w)
        seen_threads = set()
        original = rw.rewrite_file

        def spy(*a, _orig=original, _seen=seen_threads, **kw):
            _seen.add(threading.get_ident())
            return _orig(*a, **kw)

        monkeypatch.setattr(rw, "rewrite_file", spy)
        r = getattr(dml, command)(DeltaTable.for_path(None, copy).snapshot(), *args)
        monkeypatch.setattr(rw, "rewrite_file", original)
        if workers == 1:
            assert seen_threads == {threading.get_ident()}
        else:
            assert seen_threads and threading.get_ident() not in seen_threads
        results[workers] = r.metrics
        t = read_snapshot_table(DeltaTable.for_path(None, copy).snapshot())
        rows[workers] = sorted(t.select(COLUMNS).to_pylist(), key=repr)
    assert rows[1] == rows[4]
    keys = [k for k in vars(results[1]) if not k.endswith("time_ms") and "bytes" not in k]
    assert {k: getattr(results[1], k) for k in keys} == {k: getattr(results[4], k) for k in keys}


def test_parallel_outcomes_keep_the_order_of_the_files(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, commits=5)
    snap = t.snapshot()
    outcomes = rw.rewrite_files(_spec(snap, "d > 0.7"), snap.files, max_workers=3)
    assert [o.path for o in outcomes] == snap.files.column("path").to_pylist()


def test_an_error_in_one_file_fails_the_parallel_rewrite(tmp_path):
    from airflow_delta_provider_apps.engine.errors import DataFileMissingError

    root = str(tmp_path / "t")
    t = _table(root, commits=3)
    snap = t.snapshot()
    victim = snap.files.column("path").to_pylist()[1]
    os.remove(os.path.join(root, victim))
    with pytest.raises(DataFileMissingError):
        rw.rewrite_files(_spec(snap, "d > 0.7"), snap.files, max_workers=2)


# ---------------------------------------------------------------------------------------------
# the estimate


def _likely(snapshot, predicate):
    return rw.likely_touched(
        snapshot.files,
        snapshot.schema,
        list(snapshot.metadata.partition_columns or []),
        parse_predicate(predicate, snapshot.schema) if predicate else None,
    )


@pytest.mark.parametrize(
    "predicate, expected",
    [
        (None, True),
        ("d < 0.5", True),
        ("d >= 0.1 AND s = 's1'", True),  # the string conjunct cannot be estimated: it constrains nothing
        ("i < 1000000", True),
        ("d IS NOT NULL", True),
        ("i = 5", False),  # one value in ~400: a point predicate is probed
        ("i IN (5, 6)", False),
        ("d < 0.0001", False),
        ("d IS NULL AND i < 0", False),
        ("s = 's1'", False),  # strings: not estimated
        ("s LIKE 'x%'", False),
        ("i < 0", False),
        ("p = 0 OR d < 0.5", True),
    ],
)
def test_likely_touched(tmp_path, predicate, expected):
    root = str(tmp_path / "t")
    t = _table(root, commits=1)
    snap = t.snapshot()
    assert _likely(snap, predicate) == [expected] * snap.files.num_rows


def test_likely_touched_sees_through_numeric_casts_and_dates(tmp_path):
    import datetime as dt
    import decimal

    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="d DATE, ts TIMESTAMP, m DECIMAL(10,2), f FLOAT, x SMALLINT")
    count = 1000
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    append_arrow(
        root,
        pa.table(
            {
                "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i % 100) for i in range(count)], pa.date32()),
                "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(count)], pa.timestamp("us", tz="UTC")),
                "m": pa.array([decimal.Decimal(i) / 4 for i in range(count)], pa.decimal128(10, 2)),
                "f": pa.array([i / count for i in range(count)], pa.float32()),
                "x": pa.array([i % 300 for i in range(count)], pa.int16()),
            }
        ),
    )
    snap = t.snapshot()
    likely = {
        "d < '2026-02-01'": True,
        "d = '2026-01-05'": True,  # one day in 100: ~10 rows
        "ts > '2026-01-01 00:10:00'": True,
        "ts = '2026-01-01 00:00:05'": False,
        "m >= 100": True,  # CAST(m AS DECIMAL(12,2)) >= 100.00
        "m = 3.25": False,
        "f < 0.5": True,  # CAST(f AS DOUBLE) < 0.5
        "x IN (1, 2, 3)": True,  # CAST(x AS INT) IN (...): 3 values of 300, 1000 rows
        "x BETWEEN 5 AND 200": True,
        "x = 7": True,
        "x = 400": False,
        "d IS NULL": False,
    }
    assert {p: _likely(snap, p) for p in likely} == {p: [v] for p, v in likely.items()}


def test_likely_touched_by_partition(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, commits=1)
    snap = t.snapshot()
    parts = [dict(pv)["p"] for pv in snap.files.column("partition_values").to_pylist()]
    assert _likely(snap, "p = 1 OR i = 3") == [p == "1" for p in parts]


def test_files_without_stats_are_probed(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, commits=1)
    snap = t.snapshot()
    files = snap.files.set_column(
        snap.files.column_names.index("stats"), "stats", pa.nulls(snap.files.num_rows, pa.string())
    )
    got = rw.likely_touched(files, snap.schema, ["p"], parse_predicate("d < 0.9", snap.schema))
    assert got == [False] * files.num_rows


def test_a_failing_rewrite_leaves_no_written_file(tmp_path, monkeypatch):
    """A file failing mid-rewrite (here: its writer) fails the command, and what the other files
    (in parallel) and the failing file itself already wrote is deleted: nothing is left behind."""
    root = str(tmp_path / "t")
    t = _table(root, commits=4)
    snap = t.snapshot()
    victim = snap.files.column("path").to_pylist()[2]
    original = rw.TableWriter.write

    def write(self, batch):
        if self.task_id == 7 and _current.get(threading.get_ident()) == victim:
            raise RuntimeError("disk full")
        return original(self, batch)

    _current: dict = {}
    original_rewrite = rw.FileRewrite.rewrite

    def rewrite(self):
        _current[threading.get_ident()] = self.path
        return original_rewrite(self)

    monkeypatch.setattr(rw.TableWriter, "write", write)
    monkeypatch.setattr(rw.FileRewrite, "rewrite", rewrite)
    before = _listing(root)
    with pytest.raises(RuntimeError, match="disk full"):
        rw.rewrite_files(_spec(snap, "d < 0.5", row_group_bytes=1), snap.files, task_id=7, max_workers=3)
    assert _listing(root) == before
