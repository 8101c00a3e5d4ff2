"""Errors raised in Spark tasks reach the caller as our own (issue 31.5): a MERGE whose target data file
is gone fails with DataFileMissingError through the engine API and through the app's command line,
whichever job met the file (Spark's join: a scan inside a `collect`; the per-file tasks), not with
pyspark's PythonException holding it as text; when a concurrent commit removed the file and VACUUM
deleted it, the retryable conflict. Nothing is committed, no file changes."""

from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.merge import MergeClause, merge
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import ConcurrentDeleteReadError, DataFileMissingError, DeltaError
from airflow_delta_provider_apps.engine.spark.plane import SparkPlane

pytestmark = pytest.mark.spark


@pytest.fixture(params=["join", "tasks"])
def execution(request, monkeypatch):
    """MERGE as Spark's join (forced by a zero limit on the shipped source) or file by file in Spark
    tasks (the ``file_tasks`` fixture)."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    if request.param == "join":
        monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)
    else:
        request.getfixturevalue("file_tasks")
    return request.param


def _table(tmp_path) -> str:
    """Two data files: ids 1-3 and 4-6."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, v INT")
    append_arrow(root, pa.table({"id": [1, 2, 3], "v": pa.array([1, 2, 3], pa.int32())}))
    append_arrow(root, pa.table({"id": [4, 5, 6], "v": pa.array([4, 5, 6], pa.int32())}))
    return root


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for p in glob.glob(f"{root}/**/*", recursive=True):
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def _data_file_of(root: str, id_: int) -> str:
    for p in glob.glob(f"{root}/*.parquet"):
        if id_ in pq.read_table(p).column("id").to_pylist():
            return p
    raise AssertionError(id_)


def _ours(err, cls, retryable: bool) -> None:
    assert type(err) is cls, repr(err)
    assert err.problem and err.cause and err.fix and err.retryable is retryable
    assert "PythonException" not in str(err) and "Traceback" not in str(err)


def test_a_data_file_deleted_outside_delta_fails_merge_with_our_error(spark, tmp_path, execution):
    root = _table(tmp_path)
    os.remove(_data_file_of(root, 2))  # the log still names it
    before = _files(root)
    source = spark.createDataFrame([(2, 20), (9, 90)], "id BIGINT, v INT")
    t = DeltaTable.for_path(spark, root)
    with pytest.raises(DeltaError) as e:
        t.merge(source, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    # a file gone while the latest version still names it: a retry meets the same log, not retryable
    _ours(e.value, DataFileMissingError, retryable=False)
    assert "referenced by the table's log is missing" in e.value.problem
    assert _files(root) == before and t.version() == 2


def test_a_file_a_concurrent_commit_removed_and_vacuum_deleted_is_a_retryable_conflict(spark, tmp_path, execution):
    root = _table(tmp_path)
    t = DeltaTable.for_path(spark, root)
    read = t.snapshot()  # what the MERGE read
    gone = _data_file_of(root, 2)
    DeltaTable.for_path(None, root).delete("id <= 3")  # removes that file (a concurrent commit)
    os.remove(gone)  # and VACUUM, with a retention shorter than the MERGE, deleted it
    before = _files(root)
    source = spark.createDataFrame([(2, 20), (9, 90)], "id BIGINT, v INT")
    clauses = [MergeClause("matched", "update", assignments={"v": "source.v"})]
    with pytest.raises(DeltaError) as e:
        merge(read, source, "target.id = source.id", clauses, plane=SparkPlane(spark))
    _ours(e.value, ConcurrentDeleteReadError, retryable=True)
    assert e.value.winning_version == 3
    assert _files(root) == before and t.version() == 3


def test_mark_file_names_a_vanished_data_file(tmp_path):
    # MERGE by join on a table with deletion vectors marks the changed rows in the touched files
    # (one Spark group per file): a file VACUUM deleted meanwhile was a raw FileNotFoundError
    from airflow_delta_provider_apps.engine.spark.merge_join import mark_file

    root = _table(tmp_path)
    rows = pa.table({"__file": ["part-00000-gone.parquet"], "__row": pa.array([0], pa.int64())})
    with pytest.raises(DataFileMissingError) as e:
        mark_file(rows, {}, root)
    assert "part-00000-gone.parquet" in e.value.problem and e.value.fix


def test_the_command_line_reports_the_missing_file(spark, tmp_path, capsys, monkeypatch):
    # the app an operator runs (spark-submit or Connect): one DELTA_ERROR line, exit code 1
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    monkeypatch.setattr(merge_rewrite, "MAX_SOURCE_BYTES", 0)  # Spark's join
    root = _table(tmp_path)
    os.remove(_data_file_of(root, 5))
    src = tmp_path / "src.parquet"
    pq.write_table(pa.table({"id": [5, 7], "v": pa.array([50, 70], pa.int32())}), src)
    before = _files(root)
    spec = {"source": str(src), "source_format": "parquet", "key_columns": ["id"]}
    code = cli.main(["merge", "--table-uri", root, "--spec-json", json.dumps(spec)], spark=spark)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last.startswith("DELTA_ERROR DataFileMissingError: Data file ") and " Fix: " in last
    assert _files(root) == before


def test_a_file_gone_under_sparks_own_reader_is_ours_too(spark, tmp_path):
    # a full scan is read by Spark's parquet reader (no Python task of ours to encode the error):
    # its FAILED_READ_FILE.FILE_NOT_EXIST names the file by its full location
    from airflow_delta_provider_apps.engine.commands.reads import reads_snapshot_files
    from airflow_delta_provider_apps.engine.foreign import as_delta_error

    root = _table(tmp_path)
    t = DeltaTable.for_path(spark, root)
    read = t.snapshot()
    df = t.to_df()  # planned on version 2
    gone = _data_file_of(root, 2)
    DeltaTable.for_path(None, root).delete("id <= 3")  # version 3 removes the file
    os.remove(gone)  # and VACUUM deletes it
    with pytest.raises(Exception) as raw:
        df.collect()
    err = as_delta_error(raw.value)
    _ours(err, DataFileMissingError, retryable=False)
    assert os.path.basename(gone) in err.problem

    # a command that read version 2: the retryable conflict naming the commit that removed the
    # file, as for a file our own tasks found gone
    @reads_snapshot_files("MERGE")
    def command(snapshot):
        df.collect()

    with pytest.raises(ConcurrentDeleteReadError) as e:
        command(read)
    _ours(e.value, ConcurrentDeleteReadError, retryable=True)
    assert e.value.winning_version == 3


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (pa.table({"id": [7], "v": ["seven"]}), "column 'v' has type string in the data but int in the table"),
        # Spark reads a uint64 column as DECIMAL(20,0): not a BIGINT
        (
            pa.table({"id": pa.array([2**64 - 1], pa.uint64()), "v": pa.array([7], pa.int32())}),
            "column 'id' has type decimal(20,0) in the data but bigint in the table",
        ),
    ],
)
def test_the_command_line_write_refuses_data_that_does_not_fit(spark, tmp_path, capsys, data, words):
    # the write operator's path (Spark's append): our error, nothing written
    root = _table(tmp_path)
    src = tmp_path / "src.parquet"
    pq.write_table(data, src)
    before = _files(root)
    spec = {"source": str(src), "source_format": "parquet", "mode": "append"}
    code = cli.main(["write", "--table-uri", root, "--spec-json", json.dumps(spec)], spark=spark)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1 and last.startswith("DELTA_ERROR SchemaMismatchError: ") and words in last and " Fix: " in last
    assert _files(root) == before
