"""The UI view's data (issue 42), from the log alone, on tables with a known history built in
process: the size histogram against the files deltalake lists, the deletion-vector share against the
rows deltalake reads, the advice turning on after many small appends (and for a table another writer
never checkpointed) and off after OPTIMIZE, the task instance each commit records, the schema changes
with their versions, the size over time against each version's files."""

from __future__ import annotations

import pyarrow as pa
import pytest
from outside_readers import deltalake_scan

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, TableNotFoundError
from airflow_delta_provider_apps.engine.table_view import MIN_COMPACTABLE, SIZE_BINS, rows_changed, table_view
from airflow_delta_provider_apps.engine.txn.transaction import commit_provenance

deltalake = pytest.importorskip("deltalake")

DAY_MS = 86_400_000


def _kinds(view) -> set[str]:
    return {a["kind"] for a in view["advice"]}


def _sizes(root: str, version: int | None = None) -> list[int]:
    """Each live file's size, as deltalake lists them (an independent reader of the log)."""
    dt = deltalake.DeltaTable(root, version=version)
    return pa.table(dt.get_add_actions(flatten=True)).column("size_bytes").to_pylist()


def test_small_appends_advise_optimize_until_it_runs(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, p STRING", partition_by=["p"])
    appends = MIN_COMPACTABLE + 10
    for i in range(appends):
        append_arrow(root, pa.table({"id": [i, i + 1000], "p": ["a" if i % 3 else "b"] * 2}))

    view = table_view(root)
    sizes = _sizes(root)
    files = view["files"]
    assert (files["count"], files["bytes"]) == (len(sizes), sum(sizes)) == (appends, sum(sizes))
    # the histogram, bin by bin, against the sizes deltalake lists
    lows = (0, *SIZE_BINS)
    for i, b in enumerate(files["histogram"]):
        high = SIZE_BINS[i] if i < len(SIZE_BINS) else float("inf")
        assert b["files"] == sum(1 for s in sizes if lows[i] <= s < high)
    assert files["small_files"] == appends and files["small_share"] == 1.0
    assert files["compactable"] == appends - 2  # OPTIMIZE keeps one file in each of the 2 partitions
    optimize = [a for a in view["advice"] if a["kind"] == "optimize"]
    assert optimize == [
        {
            "kind": "optimize",
            "message": f"{appends} files under 8 MiB: run OPTIMIZE",
            "operator": "DeltaOptimizeOperator",
        }
    ]
    assert view["maintenance"]["last_optimize"] is None
    # the history is bounded: the newest 50 commits, newest first
    assert [c["version"] for c in view["history"]] == list(range(appends, appends - 50, -1))
    assert view["history"][0]["operation"] == "WRITE" and view["history"][0]["rows"] == {"written": 2}

    DeltaTable(None, root).optimize()
    after = table_view(root)
    assert "optimize" not in _kinds(after)
    assert after["files"]["count"] == len(_sizes(root)) == 2
    assert after["maintenance"]["last_optimize"]["version"] == appends + 1
    assert after["history"][0]["operation"] == "OPTIMIZE" and after["history"][0]["rows"] == {}
    # size over time: each version's bytes and files as deltalake lists them at that version
    for point in after["size_over_time"][-5:]:
        sizes = _sizes(root, point["version"])
        assert (point["bytes"], point["files"]) == (sum(sizes), len(sizes)), point
    # OPTIMIZE left removed files: VACUUM is advised once they are a week old, not before
    now = after["generated_at"]
    assert "vacuum" not in _kinds(table_view(root, now_ms=now + DAY_MS))
    later = [a for a in table_view(root, now_ms=now + 8 * DAY_MS)["advice"] if a["kind"] == "vacuum"]
    assert later and later[0]["operator"] == "DeltaVacuumOperator"
    assert later[0]["message"].endswith(f"; {appends} removed files")


def test_deletion_vector_share_and_purge_advice(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT", properties={"delta.enableDeletionVectors": "true"})
    append_arrow(root, pa.table({"id": list(range(1000))}))
    t = DeltaTable(None, root)
    t.delete("id < 30")  # 3%: under OPTIMIZE's purge ratio
    view = table_view(root)
    assert view["deletion_vectors"]["deleted_rows"] == 30 and view["deletion_vectors"]["rows"] == 1000
    assert "purge" not in _kinds(view) and "deletionVectors" in view["features"]
    assert view["history"][0]["rows"] == {"deleted": 30}

    t.delete("id >= 770")
    view = table_view(root)
    dvs = view["deletion_vectors"]
    live = deltalake_scan(root).num_rows  # what a reader sees
    assert (dvs["rows"] - dvs["deleted_rows"], dvs["files"]) == (live, 1) == (740, 1)
    purge = [a for a in view["advice"] if a["kind"] == "purge"]
    assert purge and purge[0]["message"] == "26% of rows deleted by vectors: OPTIMIZE purge"

    t.optimize(purge_deletion_vectors=True)
    view = table_view(root)
    assert view["deletion_vectors"]["deleted_rows"] == 0 and "purge" not in _kinds(view)


def test_a_table_another_writer_never_checkpointed(tmp_path):
    """deltalake writes no checkpoint by default: commits pile up until a checkpoint is advised."""
    root = str(tmp_path / "t")
    for i in range(22):
        deltalake.write_deltalake(root, pa.table({"id": [i]}), mode="append")
    view = table_view(root, history=5)
    m = view["maintenance"]
    assert (m["last_checkpoint"], m["commits_since_checkpoint"], m["checkpoint_interval"]) == (None, 22, 10)
    assert [a["message"] for a in view["advice"] if a["kind"] == "checkpoint"] == [
        "22 commits since the last checkpoint"
    ]
    assert len(view["history"]) == 5 and m["history_window"]["oldest_version"] == 17
    assert all(c["airflow"] is None for c in view["history"])

    DeltaTable(None, root).checkpoint()
    view = table_view(root)
    assert view["maintenance"]["last_checkpoint"]["version"] == 21 and "checkpoint" not in _kinds(view)


def test_commits_name_their_task_instance_and_schema_changes_their_version(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    task = {"dag_id": "orders", "task_id": "load", "run_id": "manual__2026-11-28", "map_index": "-1", "try_number": "2"}
    with commit_provenance(task):
        append_arrow(root, pa.table({"id": [1, 2, 3]}))
    append_arrow(root, pa.table({"id": [4]}))  # not from a task

    view = table_view(root)
    by_version = {c["version"]: c for c in view["history"]}
    assert by_version[1]["airflow"] == {
        "dag_id": "orders",
        "task_id": "load",
        "run_id": "manual__2026-11-28",
        "map_index": -1,
        "try_number": 2,
    }
    assert by_version[2]["airflow"] is None
    # the SetTransaction identity the operators derive names the DAG and task (no run: no link)
    append_arrow(root, pa.table({"id": [5]}), app_id="airflow:orders/load@2026-11-28T00:00:00+00:00", app_version=1)
    assert table_view(root)["history"][0]["airflow"] == {"dag_id": "orders", "task_id": "load", "run_id": None}


def test_schema_changes_with_the_version_that_made_them(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id INT", properties={"delta.enableTypeWidening": "true"})
    append_arrow(root, pa.table({"id": pa.array([1], pa.int32())}))
    DeltaTable(None, root).change_column_type("id", "BIGINT")
    changes = table_view(root)["schema_changes"]
    assert [c["version"] for c in changes] == [2] and changes[0]["column"] == "id"


def test_bad_input_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(InvalidArgumentError, match="history=0 is not a positive whole number"):
        table_view(str(tmp_path / "nowhere"), history=0)
    with pytest.raises(TableNotFoundError):
        table_view(str(tmp_path / "nowhere"))


def test_rows_changed_reads_delta_metric_names():
    assert rows_changed("MERGE", {"numTargetRowsInserted": "3", "numTargetRowsUpdated": "2", "numOutputRows": "9"}) == {
        "written": 3,
        "updated": 2,
    }
    assert rows_changed("WRITE", {"numOutputRows": "7"}) == {"written": 7}
    assert rows_changed("OPTIMIZE", {"numOutputRows": "7"}) == {}
    assert rows_changed("DELETE", {"numDeletedRows": 4, "numOutputRows": 5}) == {"deleted": 4}


def test_a_deadline_cuts_the_history_short_with_a_note(tmp_path):
    import time

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    for i in range(5):
        append_arrow(root, pa.table({"id": [i]}))
    whole = table_view(root, deadline=time.monotonic() + 60)
    assert [c["version"] for c in whole["history"]] == [5, 4, 3, 2, 1, 0] and whole["notes"] == []
    # a deadline already past (a slow object store): the snapshot's parts are whole, the history empty
    cut = table_view(root, deadline=time.monotonic())
    assert cut["history"] == [] and cut["size_over_time"] == []
    assert cut["notes"] == [
        "history cut short at the deadline: 0 of the newest 6 commits read "
        "(the object store is slow; the files, protocol and checkpoint are complete)"
    ]
    assert cut["files"]["count"] == len(_sizes(root)) == 5 and cut["version"] == 5
