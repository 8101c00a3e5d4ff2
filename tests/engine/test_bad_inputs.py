"""Bad inputs through the engine's Python API (issue 31.5): each fails with one of our errors (problem,
cause, fix), before anything is written (the table's files, log and data, stay byte for byte), and
the storage race VACUUM used to win against a writer's folder is survived. No JVM."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import (
    DeltaError,
    InvalidArgumentError,
    InvalidPredicateError,
    SchemaMismatchError,
)
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import LocalStorage


def table_bytes(root: str) -> dict[str, bytes]:
    """Every file under the table (log and data), by relative path."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def ours(err: DeltaError, retryable: bool = False) -> None:
    """A DeltaError that says the problem, the cause and the fix."""
    assert isinstance(err, DeltaError)
    assert err.problem and err.cause and err.fix
    assert err.retryable is retryable


@pytest.fixture
def table(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, name STRING, score INT")
    append_arrow(root, pa.table({"id": [1, 2], "name": ["a", "b"], "score": pa.array([5, 6], pa.int32())}))
    return root


# ------------------------------------------------------------------ append_arrow: the data vs the table


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        # (a missing nullable column is written NULL, a missing NOT NULL one refused:
        # tests/engine/commands/test_merge_left_out_columns.py)
        # an extra column
        (
            pa.table({"id": [3], "name": ["c"], "score": [1], "x": [1.0]}),
            SchemaMismatchError,
            "'x' are not in the table",
        ),
        # a string for a number (was ArrowInvalid)
        (
            pa.table({"id": [3], "name": ["c"], "score": ["seven"]}),
            SchemaMismatchError,
            "Column 'score' has string values in the data (e.g. 'seven')",
        ),
        # a number for a string
        (pa.table({"id": [3], "name": [4], "score": [1]}), SchemaMismatchError, "Column 'name' has int64"),
        # uint64 past BIGINT (was ArrowInvalid)
        (
            pa.table({"id": pa.array([3, 2**64 - 1], pa.uint64()), "name": ["c", "d"], "score": [1, 2]}),
            SchemaMismatchError,
            f"holds the value {2**64 - 1}, which bigint cannot hold",
        ),
        # an int64 past INT: the value is named
        (
            pa.table({"id": [3, 4, 5], "name": ["c", "d", "e"], "score": [1, 2**40, 3]}),
            SchemaMismatchError,
            f"holds the value {2**40}, which int cannot hold",
        ),
        # not Arrow data at all
        ({"id": [3]}, InvalidArgumentError, "Cannot append dict as Arrow data"),
    ],
)
def test_append_arrow_refuses_data_that_does_not_fit(table, data, kind, words):
    before = table_bytes(table)
    with pytest.raises(kind) as e:
        append_arrow(table, data)
    assert words in str(e.value)
    ours(e.value)
    assert table_bytes(table) == before


def test_append_arrow_converts_what_fits_exactly(table):
    # narrower or unsigned ints that fit, a column order of its own, names in another case
    data = pa.table(
        {"SCORE": pa.array([7, 8], pa.int64()), "name": ["c", "d"], "id": pa.array([3, 2**63 - 1], pa.uint64())}
    )
    append_arrow(table, data)
    rows = sorted(read_snapshot_table(DeltaTable.for_path(None, table).snapshot()).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["name"], r["score"]) for r in rows] == [
        (1, "a", 5),
        (2, "b", 6),
        (3, "c", 7),
        (2**63 - 1, "d", 8),
    ]


def test_append_arrow_assigns_identity_values_the_data_leaves_out(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(
        None, root, schema="id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 100 INCREMENT BY 3), v STRING"
    )
    n = 3000
    # the column left out, as the README says; two batches: one writer continues its range
    data = pa.table({"v": [f"r{i}" for i in range(n)]})
    append_arrow(root, data.to_batches(max_chunksize=1000))
    t = DeltaTable.for_path(None, root)
    ids = read_snapshot_table(t.snapshot()).column("id").to_pylist()
    assert len(ids) == n and len(set(ids)) == n and None not in ids
    assert sorted(ids) == list(range(100, 100 + 3 * n, 3))
    mark = t.snapshot().schema.find("id").metadata["delta.identity.highWaterMark"]
    assert mark == 100 + 3 * (n - 1)
    # the next append continues after the mark, in the same commit as its data
    append_arrow(root, pa.table({"v": ["x"]}))
    assert max(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == 100 + 3 * n


# ------------------------------------------------------------------ table properties


@pytest.mark.parametrize("value", ["TRUE ", " true", "yes", "1", "tru"])
def test_a_boolean_property_is_true_or_false_exactly(tmp_path, value):
    root = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match="delta.enableChangeDataFeed=.* is not a boolean") as e:
        DeltaTable.create(None, root, schema="id BIGINT", properties={"delta.enableChangeDataFeed": value})
    ours(e.value)
    assert not os.path.exists(root)
    DeltaTable.create(None, root, schema="id BIGINT")
    t = DeltaTable.for_path(None, root)
    before = table_bytes(root)
    with pytest.raises(InvalidArgumentError, match="is not a boolean") as e:
        t.set_properties({"delta.appendOnly": value})
    ours(e.value)
    assert table_bytes(root) == before
    # any case is Delta's
    t.set_properties({"delta.appendOnly": "TRUE"})
    assert t.snapshot().metadata.configuration["delta.appendOnly"] == "true"


def test_stats_columns_must_name_columns_of_the_table(tmp_path):
    root = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match="names column 'nope', which the table does not have") as e:
        DeltaTable.create(
            None, root, schema="id BIGINT, name STRING", properties={"delta.dataSkippingStatsColumns": "nope,name"}
        )
    ours(e.value)
    assert not os.path.exists(root)
    DeltaTable.create(None, root, schema="id BIGINT, name STRING, s STRUCT<a: INT>", properties={"owner": "me"})
    t = DeltaTable.for_path(None, root)
    before = table_bytes(root)
    for value in ["nope,name", "s.b", "name.x"]:
        with pytest.raises(InvalidArgumentError, match="which the table does not have") as e:
            t.set_properties({"delta.dataSkippingStatsColumns": value})
        ours(e.value)
    assert table_bytes(root) == before
    # existing columns, matched case-insensitively, nested through structs
    t.set_properties({"delta.dataSkippingStatsColumns": "NAME, s.a"})
    assert t.snapshot().properties.data_skipping_stats_columns == [("NAME",), ("s", "a")]


# ------------------------------------------------------------------ storage races


def _racing_cleaner(monkeypatch, folder: str, times: int = 2):
    """os.mkdir of ``folder`` first meets a folder another writer made and a cleaner (VACUUM
    removing an empty ``_change_data``) took away again: EEXIST, then nothing there."""
    real = os.mkdir
    left = {"n": times}

    def mkdir(path, *args, **kwargs):
        if os.path.abspath(path) == folder and left["n"]:
            left["n"] -= 1
            real(path, *args, **kwargs)
            os.rmdir(path)
            raise FileExistsError(17, "File exists", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)


def test_a_write_survives_a_cleaner_removing_its_new_folder(tmp_path, monkeypatch):
    folder = str(tmp_path / "t" / "_change_data")
    os.makedirs(os.path.dirname(folder))
    storage = LocalStorage()
    _racing_cleaner(monkeypatch, folder)
    storage.write_bytes(os.path.join(folder, "a.bin"), b"abc")
    assert open(os.path.join(folder, "a.bin"), "rb").read() == b"abc"
    os.remove(os.path.join(folder, "a.bin"))
    os.rmdir(folder)
    _racing_cleaner(monkeypatch, folder)
    with storage.open_output_stream(os.path.join(folder, "b.bin")) as f:
        f.write(b"xyz")
    assert open(os.path.join(folder, "b.bin"), "rb").read() == b"xyz"


def test_a_file_in_the_way_of_a_folder_still_fails(tmp_path):
    blocker = tmp_path / "t" / "_change_data"
    blocker.parent.mkdir()
    blocker.write_bytes(b"")
    with pytest.raises(OSError):
        LocalStorage().write_bytes(str(blocker / "a.bin"), b"abc")


# ------------------------------------------------------------------ arguments of the wrong kind


def test_arguments_of_the_wrong_kind_are_refused_at_the_source(table, tmp_path):
    t = DeltaTable.for_path(None, table)
    before = table_bytes(table)
    calls = [
        (lambda: t.update("score = 1"), "UPDATE's assignments must be a mapping, got str"),
        (lambda: t.optimize(z_order_by=5), "z_order_by must be column names, got 5"),
        (
            lambda: DeltaTable.create(None, str(tmp_path / "n"), schema="id BIGINT", partition_by=5),
            "partition_by must be column names, got 5",
        ),
    ]
    for call, words in calls:
        with pytest.raises(InvalidArgumentError) as e:
            call()
        assert words in e.value.problem
        assert e.value.fix and not e.value.retryable
    assert table_bytes(table) == before and not os.path.exists(tmp_path / "n")


# ------------------------------------------------------------------ the net at the engine's API


def test_an_error_not_ours_leaves_the_api_as_ours_with_the_original_chained(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT", properties={"delta.enableChangeDataFeed": "true"})
    with pytest.raises(DeltaError) as e:
        DeltaTable.for_path(None, root).changes(0, 0, columns=5)  # list(5): a TypeError in the facade
    assert type(e.value) is DeltaError and e.value.problem == "Unexpected TypeError"
    ours(e.value)
    assert isinstance(e.value.__cause__, TypeError)


def test_a_spark_tasks_error_of_any_kind_comes_back_as_ours():
    from airflow_delta_provider_apps.engine.foreign import as_delta_error
    from airflow_delta_provider_apps.engine.spark.session import guard_executor

    def task(exc):
        def run():
            yield 1
            raise exc

        return guard_executor(run())

    def driver_sees(exc) -> DeltaError:
        try:
            list(task(exc))
        except Exception as e:  # what Spark would carry to the driver: the text
            return as_delta_error(RuntimeError(f"PythonException: An exception was thrown from the worker:\n{e}"))
        raise AssertionError("no error")

    missing = driver_sees(SchemaMismatchError("Bad rows", "column 'x' is NULL", "fill it"))
    assert type(missing) is SchemaMismatchError and missing.cause == "column 'x' is NULL"
    gone = driver_sees(FileNotFoundError(2, "No such file or directory", "/t/part-1.parquet"))
    assert "'/t/part-1.parquet'" in gone.problem
    ours(gone, retryable=True)  # a storage race: the retry reads the table again
    bug = driver_sees(KeyError("id"))
    assert bug.problem.startswith("Unexpected KeyError (at test_bad_inputs.py:") and bug.cause == "'id'"
    ours(bug)
    arrow = driver_sees(pa.ArrowInvalid("Integer value 300 not in range: -128 to 127"))
    assert arrow.problem.startswith("Unexpected ArrowInvalid") and "not in range" in arrow.cause
    # an infrastructure failure by its text: retryable
    lost = as_delta_error(RuntimeError("org.apache.spark.SparkException: ExecutorLostFailure (executor 1 exited)"))
    assert type(lost).__name__ == "SparkInfrastructureError"
    ours(lost, retryable=True)


def test_an_iterator_read_after_the_call_raises_only_ours_too():
    # DeltaTable.changes returns a reader whose batches are read later, outside the method's net
    from airflow_delta_provider_apps.engine.foreign import translated_iter

    def batches():
        yield pa.record_batch({"a": [1]})
        raise KeyError("a")

    reader = pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]), translated_iter(batches()))
    with pytest.raises(DeltaError) as e:
        reader.read_all()
    assert e.value.problem == "Unexpected KeyError" and isinstance(e.value.__cause__, KeyError)
    ours(e.value)


def test_append_arrow_computes_a_generated_column_the_data_leaves_out(tmp_path):
    import datetime

    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="day DATE, y INT GENERATED ALWAYS AS (year(day))")
    append_arrow(root, pa.table({"day": [datetime.date(2024, 5, 1), datetime.date(2026, 1, 2)]}))
    rows = read_snapshot_table(DeltaTable.for_path(None, root).snapshot()).to_pylist()
    assert sorted((r["day"].year, r["y"]) for r in rows) == [(2024, 2024), (2026, 2026)]


# ------------------------------------------------------------------ issue 40.2: messages that said too little


def _refused(root: str, call, kind=InvalidArgumentError, *, log_only: bool = False) -> DeltaError:
    """``call`` fails with ``kind`` saying problem, cause and fix, and leaves the table as it was
    (``log_only``: its log; a MERGE may have written a file of rewritten rows no commit names)."""

    def state():
        return {k: v for k, v in table_bytes(root).items() if not log_only or k.startswith("_delta_log")}

    before = state()
    with pytest.raises(kind) as e:
        call()
    ours(e.value)
    assert state() == before
    return e.value


def test_changing_the_type_of_a_missing_column_names_what_is_there(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, s STRUCT<a: INT>")
    for column, cause in [
        ("nope", "the table has no column 'nope'; its columns are id, s"),
        ("s.b", "the struct 's' has no field 'b'; its fields are a"),
        ("id.x", "'id' is bigint, not a struct with fields"),
    ]:
        e = _refused(root, lambda c=column: t.change_column_type(c, "BIGINT"))
        assert e.problem == f"Cannot change the type of column '{column}': no such column"
        assert e.cause == cause and "dotted path" in e.fix


@pytest.mark.parametrize("merge_schema", [True, False])
def test_an_upsert_value_past_the_columns_type_names_the_value_and_column(tmp_path, merge_schema):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, p INT, v INT", partition_by=["p"])
    append_arrow(root, pa.table({"id": [1], "p": pa.array([1], pa.int32()), "v": pa.array([1], pa.int32())}))
    t = DeltaTable.for_path(None, root)
    for column, rows in [
        ("p", {"id": [2, 3], "p": [5, 2**40], "v": [0, 0]}),
        ("v", {"id": [1, 2], "p": [1, 1], "v": [7, -(2**33)]}),
    ]:
        source = pa.table({k: pa.array(v, pa.int64()) for k, v in rows.items()})
        bad = rows[column][1]
        upsert = lambda s=source: t.upsert(s, ["id"], merge_schema=merge_schema)  # noqa: E731
        e = _refused(root, upsert, SchemaMismatchError, log_only=column == "v")  # "v": id 1's file is rewritten
        assert e.problem == f"Cannot write the value {bad} into column '{column}' of type integer"
        assert "the long value does not convert to integer" in e.cause and str(bad) in e.cause
        assert "CAST_OVERFLOW_IN_TABLE_INSERT" in e.cause
        assert "change_column_type" in e.fix and "division" not in e.fix and "x / y" not in e.fix
    # an UPDATE's assignment alike; a failing expression gets the advice of its own failure
    e = _refused(root, lambda: t.update({"v": "v * 10000000000"}), SchemaMismatchError)
    assert e.problem == "Cannot write the value 10000000000 into column 'v' of type integer"
    e = _refused(root, lambda: t.update({"v": "v / (id - 1)"}), InvalidPredicateError)
    assert "DIVIDE_BY_ZERO" in e.cause and e.fix == "guard the division (e.g. CASE WHEN y <> 0 THEN x / y END)"
    e = _refused(root, lambda: t.delete("v * 2147483647 * 4 > 0"), InvalidPredicateError)
    assert "overflow" in e.cause.lower() and "wider type" in e.fix
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == [1]


def test_a_clustering_column_listed_twice_says_why(tmp_path):
    root = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError) as e:
        DeltaTable.create(None, root, schema="id BIGINT, v INT", cluster_by=["id", "ID"])
    ours(e.value)
    assert e.value.problem == "Clustering column 'id' is listed twice" and not os.path.exists(root)
    assert "'id', 'ID'" in e.value.cause and "case-insensitively" in e.value.cause and e.value.fix == "list 'id' once"
    t = DeltaTable.create(None, root, schema="id BIGINT, v INT", cluster_by=["id"])
    e = _refused(root, lambda: t.cluster_by(["v", "v"]))
    assert e.problem == "Clustering column 'v' is listed twice"


@pytest.mark.parametrize(
    ("key", "value", "cause"),
    [
        ("delta.checkpointPolicy", "v3", "Delta defines only 'classic' and 'v2'"),
        ("delta.columnMapping.mode", "names", "Delta defines only 'none', 'name', 'id'"),
        ("delta.targetFileSize", "big", "a number of bytes above 0"),
    ],
)
def test_a_property_value_out_of_its_set_says_which_values_there_are(tmp_path, key, value, cause):
    root = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError) as e:
        DeltaTable.create(None, root, schema="id BIGINT", properties={key: value})
    ours(e.value)
    assert e.value.problem.startswith(f"Table property {key}='{value}' is not") and cause in e.value.cause
    assert not os.path.exists(root)
    t = DeltaTable.create(None, root, schema="id BIGINT")
    assert cause in _refused(root, lambda: t.set_properties({key: value})).cause
