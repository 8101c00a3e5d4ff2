"""MERGE without Spark: a table opened with no session merges Arrow data file by file in this process
(no JVM is started). Random targets, sources and clause lists (every clause kind, conditions, NULL keys,
partition moves, deletion vectors, the change data feed) equal the plain-Python reference that the
Spark MERGE tests use, and deltalake reads the same rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from merge_reference import PROGRAM, Duplicate, assert_changes, build_merge, file_rows, reference, row_key

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError, InvalidArgumentError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int32()), ("p", pa.int32())])


def _arrow(rows) -> pa.Table:
    return pa.Table.from_pylist([dict(r) for r in rows], schema=SCHEMA)


def _table(root: str, target, *, partitioned: bool, props: dict | None = None) -> DeltaTable:
    create_table(
        root, schema="id BIGINT, v INT, p INT", partition_by=["p"] if partitioned else None, properties=props or {}
    )
    if target:
        append_arrow(root, _arrow(target))
    return DeltaTable(None, root)


def _theirs(root: str, dv: bool) -> list:
    dt = deltalake.DeltaTable(root)
    if dv:  # deltalake's DataFusion scan applies deletion vectors
        return pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()).to_pylist()
    return dt.to_pyarrow_table().to_pylist()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(*PROGRAM, st.sampled_from(["", "dv", "cdf"]))
def test_merge_in_process_equals_the_reference(tmp_path_factory, target, source, clauses, partitioned, on, mode):
    root = str(tmp_path_factory.mktemp("m") / "t")
    props = {"": {}, "dv": {"delta.enableDeletionVectors": "true"}, "cdf": {"delta.enableChangeDataFeed": "true"}}
    t = _table(root, target, partitioned=partitioned, props=props[mode])
    version, before = t.version(), file_rows(t.snapshot())
    try:
        want, inserted, changed, feed = reference(target, source, clauses, on[1])
    except Duplicate:
        with pytest.raises(DeltaError, match="multiple source rows matched"):
            build_merge(t, _arrow(source), clauses, on[0]).execute()
        assert DeltaTable(None, root).version() == version
        return
    res = build_merge(t, _arrow(source), clauses, on[0]).execute()
    assert res.get("strategy", "file_by_file") == "file_by_file"
    ours = read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()
    assert sorted(ours, key=row_key) == sorted(want, key=row_key), (clauses, target, source, on[0])
    assert sorted(_theirs(root, mode == "dv"), key=row_key) == sorted(want, key=row_key)
    m = res["metrics"]
    assert (m["numSourceRows"], m["numTargetRowsInserted"]) == (len(source), inserted)
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"]) == (changed["u"], changed["d"])
    assert m["numOutputRows"] == m["numTargetRowsCopied"] + m["numTargetRowsUpdated"] + inserted
    removed = [p for p in before if p not in file_rows(DeltaTable(None, root).snapshot())]
    assert m["numTargetFilesRemoved"] == len(removed)
    if mode == "cdf" and res["committed"]:
        assert_changes(root, res["version"], feed, True)


def test_upsert_in_process_dedupes_and_refuses_duplicate_keys(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, [{"id": 1, "v": 10, "p": 0}, {"id": 2, "v": 20, "p": 1}], partitioned=True)
    source = pa.table(
        {
            "id": pa.array([2, 5, 5, None], pa.int64()),
            "v": pa.array([-2, 50, 51, 7], pa.int32()),
            "p": pa.array([0, 1, 1, 0], pa.int32()),
        }
    )
    with pytest.raises(InvalidArgumentError, match="duplicate keys"):
        t.upsert(source, ["id"])
    assert DeltaTable(None, root).version() == 1
    m = t.upsert(source, ["id"], dedupe_by="v")["metrics"]
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 2)
    got = sorted(_theirs(root, False), key=row_key)
    want = [
        {"id": None, "v": 7, "p": 0},
        {"id": 1, "v": 10, "p": 0},
        {"id": 2, "v": -2, "p": 0},
        {"id": 5, "v": 51, "p": 1},
    ]
    assert got == sorted(want, key=row_key)  # id 2 moved to partition 0, the greatest v of id 5 won


def test_upsert_rolls_files_at_the_target_file_size(tmp_path):
    rows = [{"id": i, "v": i, "p": 0} for i in range(40)]
    added = {}
    for size in (None, 1):  # the table's default, or a new file after every row written
        root = str(tmp_path / f"t{size}")
        t = _table(root, rows[:2], partitioned=False)
        m = t.upsert(_arrow(rows), ["id"], target_file_size=size)["metrics"]
        assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (2, 38)
        assert sorted(_theirs(root, False), key=row_key) == sorted(rows, key=row_key)
        added[size] = m["numTargetFilesAdded"]
    assert added[None] == 2 and added[1] > 2  # the rewritten file and the inserts; then rolled


def test_a_merge_without_spark_needs_keys_and_arrow_data(tmp_path):
    root = str(tmp_path / "t")
    t = _table(root, [{"id": 1, "v": 10, "p": 0}], partitioned=False)
    with pytest.raises(InvalidArgumentError, match="needs ON to equate"):
        t.merge(_arrow([{"id": 1, "v": 2, "p": 0}]), "target.v < source.v").when_matched_delete().execute()
    with pytest.raises(InvalidArgumentError, match="takes Arrow data"):
        t.merge([{"id": 1}], "target.id = source.id").when_matched_delete().execute()
    assert DeltaTable(None, root).version() == 1


def test_upsert_and_update_copy_struct_array_and_map_columns(tmp_path):
    """A value that is a whole nested column (``update_all`` / ``insert_all`` copy ``source.s``) is
    copied as it is: MERGE and UPDATE on tables with struct, array and map columns."""
    root = str(tmp_path / "t")
    create_table(
        root,
        schema="id BIGINT, s STRUCT<x: INT, y: STRING>, a ARRAY<INT>, m MAP<STRING, INT>, t STRUCT<x: INT, y: STRING>",
    )
    sx = pa.struct([("x", pa.int32()), ("y", pa.string())])

    def rows(data):
        return pa.table(
            {
                "id": pa.array([r[0] for r in data], pa.int64()),
                "s": pa.array([r[1] for r in data], sx),
                "a": pa.array([r[2] for r in data], pa.list_(pa.int32())),
                "m": pa.array([r[3] for r in data], pa.map_(pa.string(), pa.int32())),
                "t": pa.array([None] * len(data), sx),
            }
        )

    append_arrow(root, rows([(1, {"x": 1, "y": "a"}, [1], [("k", 1)]), (2, {"x": 2, "y": "b"}, [2, 2], None)]))
    t = DeltaTable(None, root)
    res = t.upsert(rows([(2, {"x": 20, "y": None}, None, [("z", 26)]), (3, None, [3], [])]), ["id"])
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 1)
    t.update({"t": "s"}, "id <= 2")  # a struct column copied into another
    got = {r["id"]: r for r in read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist()}
    assert got[1] == {"id": 1, "s": {"x": 1, "y": "a"}, "a": [1], "m": [("k", 1)], "t": {"x": 1, "y": "a"}}
    assert got[2] == {"id": 2, "s": {"x": 20, "y": None}, "a": None, "m": [("z", 26)], "t": {"x": 20, "y": None}}
    assert got[3] == {"id": 3, "s": None, "a": [3], "m": [], "t": None}
    theirs = {r["id"]: r for r in deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()}
    assert theirs == got
    with pytest.raises(InvalidArgumentError, match="cannot be used"):  # conditions still need primitives
        t.delete("s = s")


def test_nested_values_are_stored_by_name_and_a_possible_null_into_not_null_is_refused(tmp_path):
    """A nested value is stored as Spark's store assignment stores it: fields by name (case-insensitively),
    each leaf cast (an INT field into a BIGINT one); a field that may be NULL into a NOT NULL one is a
    clear error at binding, before anything is written."""
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, s STRUCT<x: BIGINT NOT NULL, y: STRING>")
    sx = pa.struct([pa.field("x", pa.int64(), nullable=False), ("y", pa.string())])
    append_arrow(root, pa.table({"id": pa.array([1], pa.int64()), "s": pa.array([{"x": 1, "y": "a"}], sx)}))
    t = DeltaTable(None, root)
    int_x = pa.struct([pa.field("x", pa.int32(), nullable=False), ("y", pa.string())])  # INT into BIGINT
    upper_x = pa.struct([("y", pa.string()), pa.field("X", pa.int64(), nullable=False)])  # another case and order
    for struct, pairs in ((int_x, [(5, "b"), (7, None)]), (upper_x, [(6, "c"), (8, None)])):
        rows = [{"X" if "X" in struct.names else "x": x, "y": y} for x, y in pairs]
        t.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array(rows, struct)}), ["id"])
        got = sorted(read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist(), key=lambda r: r["id"])
        assert got == [
            {"id": 1, "s": {"x": pairs[0][0], "y": pairs[0][1]}},
            {"id": 2, "s": {"x": pairs[1][0], "y": None}},
        ]
    version = t.version()
    nullable = pa.struct([pa.field("x", pa.int64()), ("y", pa.string())])  # x may be NULL
    source = pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array([{"x": 5, "y": "b"}] * 2, nullable)})
    with pytest.raises(InvalidArgumentError, match="'x' may be NULL in the data but is NOT NULL"):
        t.upsert(source, ["id"])
    assert DeltaTable(None, root).version() == version


def test_one_shot_arrow_inputs_are_read_once_by_append_overwrite_and_create(tmp_path):
    """A RecordBatchReader (or a generator of batches) can be read only once: the in-process plane holds
    it before the schema check, so the rows are written, never an empty commit."""
    from airflow_delta_provider_apps.engine.commands.write import append, overwrite

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([1, 2, 3], pa.int32())})
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, v INT", source=rows.to_reader())
    assert read_snapshot_table(DeltaTable(None, root).snapshot()).num_rows == 3
    append(root, rows.to_reader())
    append(root, iter(rows.to_batches()))
    assert read_snapshot_table(DeltaTable(None, root).snapshot()).num_rows == 9
    overwrite(DeltaTable(None, root).snapshot(), rows.slice(0, 1).to_reader())
    assert read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist() == [{"id": 1, "v": 1}]


def test_create_as_select_without_spark_takes_the_arrow_sources_schema(tmp_path):
    """``DeltaTable.create(None, path, source_df=...)`` with no schema: the table takes the Arrow
    source's schema (the table API once read a pyspark schema from it and failed), a one-shot reader
    included, and deltalake reads the rows."""
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["a", None, "c"], pa.string())})
    for name, data in (("table", rows), ("reader", rows.to_reader())):
        root = str(tmp_path / name)
        DeltaTable.create(None, root, source_df=data, partition_by=["s"])
        theirs = deltalake.DeltaTable(root)
        got = theirs.to_pyarrow_table().sort_by("id")
        assert got.column("id").to_pylist() == [1, 2, 3] and got.column("s").to_pylist() == ["a", None, "c"]
        assert theirs.metadata().partition_columns == ["s"]


def test_create_as_select_if_not_exists_leaves_the_source_unread_when_the_table_exists(tmp_path):
    """IF NOT EXISTS over an existing table is a no-op: a one-shot reader is not read."""
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, source_df=rows)
    reader = rows.to_reader()
    t = DeltaTable.create(None, root, source_df=reader, if_not_exists=True)
    assert t.last_result["skipped"] and reader.read_all().num_rows == 2
    assert deltalake.DeltaTable(root).version() == 0


def test_a_key_held_twice_is_found_with_nulls_nans_and_several_columns():
    """The upsert's uniqueness check (sorted keys, neighbours compared): NULL keys never count, NaN
    equals NaN (as in Spark's grouping), a key is all its columns."""
    from airflow_delta_provider_apps.engine.merge import first_duplicate_key

    nan = float("nan")
    assert first_duplicate_key(pa.table({"a": [nan, 1.0, 2.0]}), ["a"]) is None
    got = first_duplicate_key(pa.table({"a": [nan, 1.0, nan]}), ["a"])
    assert got is not None and got[0] != got[0]  # NaN
    assert first_duplicate_key(pa.table({"a": [None, None, 1]}), ["a"]) is None
    two = pa.table({"a": [1, 2, 1, 1], "b": ["x", "y", "z", "x"]})
    assert first_duplicate_key(two, ["a", "b"]) == [1, "x"]
    assert first_duplicate_key(two.slice(0, 3), ["a", "b"]) is None
    chunked = pa.concat_tables([two.slice(0, 2), two.slice(2)])
    assert first_duplicate_key(chunked, ["a", "b"]) == [1, "x"]
    ints = pa.table({"a": pa.chunked_array([[3, 1, None], [2, None, 3]])})  # one integer key: NumPy's sort
    assert first_duplicate_key(ints, ["a"]) == [3]
    assert first_duplicate_key(ints.slice(0, 4), ["a"]) is None


def _string_keyed(root: str, files: list[list[str]]) -> DeltaTable:
    create_table(root, schema="k STRING, v INT")
    for keys in files:  # one file per append
        append_arrow(root, pa.table({"k": keys, "v": pa.array([0] * len(keys), pa.int32())}))
    return DeltaTable(None, root)


def _merged_files(monkeypatch, table: DeltaTable, source: pa.Table) -> list:
    """MERGE (upsert by ``k``), returning per file, in the order they were merged, its outcome and
    whether it was read once (True) or probed first."""
    from airflow_delta_provider_apps.engine.merge import by_file as rm

    seen: list = []
    real = rm.merge_file

    def observed(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append((out, kwargs["likely"]))
        return out

    monkeypatch.setattr(rm, "merge_file", observed)
    monkeypatch.setattr("os.cpu_count", lambda: 1)  # one thread: the files in listing order
    table.merge(source, "target.k = source.k").when_matched_update_all().when_not_matched_insert_all().execute()
    return seen


def test_string_keys_spread_over_every_file_are_probed_only_until_files_keep_being_touched(tmp_path, monkeypatch):
    """String keys give no match estimate from min/max stats: the first files are probed (key column,
    then the whole file), and once RUN in a row were changed the rest are read once; a file read once
    that no clause changed sends the worker back to probing. Rows stay right either way."""
    from airflow_delta_provider_apps.engine.merge import TouchStreak

    spread = [[f"{i:04d}" for i in range(f, 400, 8)] for f in range(8)]  # every file spans the range
    t = _string_keyed(str(tmp_path / "spread"), spread)
    source = pa.table(
        {"k": ["0000", "0001", "0002", "0003", "0004", "0005", "0006", "0007"], "v": pa.array([1] * 8, pa.int32())}
    )
    got = _merged_files(monkeypatch, t, source)
    run = TouchStreak.RUN
    assert [once for _o, once in got] == [False] * run + [True] * (8 - run)
    assert [o.reads for o, _ in got] == [2] * run + [1] * (8 - run) and all(o.changed == 1 for o, _ in got)
    rows = sorted(deltalake.DeltaTable(str(tmp_path / "spread")).to_pyarrow_table().to_pylist(), key=lambda r: r["k"])
    assert [r["v"] for r in rows[:8]] == [1] * 8 and all(r["v"] == 0 for r in rows[8:]) and len(rows) == 400

    # files of clustered keys (even numbers), the source matching the first RUN files and the last,
    # and inserting an odd key inside each other file's range (so no file is skipped): the file after
    # the streak is read once for nothing (its output deleted), the ones after it are probed again
    clustered = [[f"{f}{i:03d}" for i in range(0, 100, 2)] for f in range(8)]
    t = _string_keyed(str(tmp_path / "clustered"), clustered)
    keys = [f"{f}000" if f < run or f == 7 else f"{f}001" for f in range(8)]
    source = pa.table({"k": keys, "v": pa.array([1] * len(keys), pa.int32())})
    got = _merged_files(monkeypatch, t, source)
    assert [once for _o, once in got] == [False] * run + [True] + [False] * (8 - run - 1)
    assert [(o.reads, bool(o.changed)) for o, _ in got] == (
        [(2, True)] * run + [(1, False)] + [(1, False)] * (8 - run - 2) + [(2, True)]
    )
    assert all(not o.written for o, _ in got if not o.changed)
    rows = deltalake.DeltaTable(str(tmp_path / "clustered")).to_pyarrow_table().to_pylist()
    assert sorted(r["k"] for r in rows if r["v"] == 1) == sorted(keys) and len(rows) == 400 + 8 - run - 1
