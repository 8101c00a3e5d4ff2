"""Input values of issue #24, each parsed at one place (``engine/values.py`` and friends) and refused the
same way through the engine API, the CLI (exit 1, ``DELTA_ERROR <Class>: ...``) and the Airflow
operators (in process, no Spark)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.log.listing import latest_version
from airflow_delta_provider_apps.engine.storage import storage_for


def _table(tmp_path, commits: int = 3) -> str:
    """A table at version ``commits``: version 0 empty, then one row per append."""
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    for i in range(commits):
        append_arrow(root, pa.table({"id": [i]}))
    return root


def _version(root: str) -> int:
    return latest_version(storage_for(root), root)


def _cli(capsys, *argv) -> tuple[int, str]:
    """Exit code and last stdout line of the app's command line."""
    code = cli.main(list(argv))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, lines[-1]


@pytest.fixture
def no_spark_submit(monkeypatch):
    from airflow_delta_provider.hooks.delta import DeltaHook

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))


# ------------------------------------------------------------------ 1. table versions


@pytest.mark.parametrize("bad", [2.7, 2.0, True, False, -1, "-1", "abc", "2.7", "", 2**63])
def test_a_version_that_is_not_a_whole_number_from_0_is_refused_before_anything_is_written(tmp_path, bad):
    root = _table(tmp_path)
    t = DeltaTable(None, root)
    with pytest.raises(InvalidArgumentError, match="is not a table version"):
        t.restore(version=bad)
    with pytest.raises(InvalidArgumentError, match="is not a table version"):
        t.snapshot(version=bad)
    assert _version(root) == 3  # no RESTORE committed


def test_whole_number_versions_are_taken_as_ints_or_digits(tmp_path):
    import numpy as np

    from airflow_delta_provider_apps.engine.values import parse_version

    assert [parse_version(v) for v in (3, "3", " 3 ", np.int64(3), 0)] == [3, 3, 3, 3, 0]
    root = _table(tmp_path)
    t = DeltaTable(None, root)
    assert t.snapshot(version="1").version == 1
    assert t.restore(version="2")["restored_version"] == 2 and _version(root) == 4


def test_a_float_version_fails_the_cli_with_exit_1(tmp_path, capsys):
    root = _table(tmp_path)
    for argv in (
        ["restore", "--table-uri", root, "--version", "2.7"],
        ["restore", "--table-uri", root, "--spec-json", '{"version": 2.7}'],
        ["restore", "--table-uri", root, "--spec-json", '{"version": true}'],
        ["read", "--table-uri", root, "--output", str(tmp_path / "o.parquet"), "--version", "-1"],
    ):
        code, last = _cli(capsys, *argv)
        assert code == 1 and last.startswith("DELTA_ERROR InvalidArgumentError: ") and "not a table version" in last
        assert "Fix: " in last
    assert _version(root) == 3
    code, last = _cli(capsys, "restore", "--table-uri", root, "--version", "1")
    assert code == 0 and '"restored_version":1' in last


def test_a_float_version_is_refused_by_the_restore_operator(tmp_path, no_spark_submit):
    from airflow_delta_provider.exceptions import DeltaConfigurationError
    from airflow_delta_provider.operators.delta import DeltaRestoreOperator

    root = _table(tmp_path)
    with pytest.raises(ValueError, match="version=2.7 is not a table version"):  # at DAG parse time
        DeltaRestoreOperator(task_id="r", table_uri=root, version=2.7)
    op = DeltaRestoreOperator(task_id="r", table_uri=root, version="{{ params.v }}")
    op.version = "2.7"  # as rendered
    with pytest.raises(DeltaConfigurationError, match="is not a table version"):
        op.execute({})
    assert _version(root) == 3
    op.version = "1"
    assert op.execute({})["restored_version"] == 1


def test_a_delta_source_version_is_parsed_by_the_same_rule(tmp_path):
    from airflow_delta_provider_apps.preflight import preflight

    source = _table(tmp_path)
    target = str(tmp_path / "target")
    create_table(target, schema="id BIGINT")
    base = {"table_uri": target, "source": source, "source_format": "delta", "mode": "append"}
    preflight("write", {**base, "source_options": {"versionAsOf": "1"}})
    with pytest.raises(InvalidArgumentError, match="versionAsOf='1.5' is not a table version"):
        preflight("write", {**base, "source_options": {"versionAsOf": "1.5"}})


# ------------------------------------------------------------------ 2. retentions


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1, "-0.5", True, "abc", 2.6e9, 876_601])
def test_a_retention_that_is_not_finite_non_negative_and_at_most_100_years_is_refused(tmp_path, bad):
    root = _table(tmp_path)
    with pytest.raises(InvalidArgumentError, match="is not a retention"):
        DeltaTable(None, root).vacuum(bad, enforce_retention_duration=False)
    assert _version(root) == 3  # no VACUUM START committed


def test_retentions_up_to_100_years_are_taken(tmp_path):
    from airflow_delta_provider_apps.engine.values import MAX_RETENTION_HOURS, parse_retention_hours

    assert [parse_retention_hours(v) for v in (0, "0.5", " 168 ", MAX_RETENTION_HOURS)] == [
        0.0,
        0.5,
        168.0,
        876_600.0,
    ]
    t = DeltaTable(None, _table(tmp_path))
    assert t.vacuum(MAX_RETENTION_HOURS, dry_run=True)["retention_hours"] == MAX_RETENTION_HOURS


def test_an_infinite_retention_fails_the_cli_with_exit_1(tmp_path, capsys):
    root = _table(tmp_path)
    for argv in (
        ["vacuum", "--table-uri", root, "--retention-hours", "inf", "--no-enforce-retention-duration"],
        ["vacuum", "--table-uri", root, "--spec-json", '{"retention_hours": 1e12}'],
    ):
        code, last = _cli(capsys, *argv)
        assert code == 1 and last.startswith("DELTA_ERROR InvalidArgumentError: ") and "is not a retention" in last
        assert "Unexpected" not in last
    assert _version(root) == 3


def test_an_infinite_retention_is_refused_by_the_vacuum_operator(tmp_path, no_spark_submit):
    from airflow_delta_provider.exceptions import DeltaConfigurationError
    from airflow_delta_provider.operators.delta import DeltaVacuumOperator

    root = _table(tmp_path)
    with pytest.raises(ValueError, match="retention_hours=inf is not a retention"):
        DeltaVacuumOperator(task_id="v", table_uri=root, retention_hours=float("inf"))
    op = DeltaVacuumOperator(task_id="v", table_uri=root, retention_hours="{{ params.h }}")
    op.retention_hours = "nan"  # as rendered
    with pytest.raises(DeltaConfigurationError, match="is not a retention"):
        op.execute({})
    assert _version(root) == 3


ABSURD = "interval " + "9" * 400 + " days"  # float('9' * 400) is inf


@pytest.mark.parametrize("interval", [ABSURD, "interval 36526 days", "interval -1 days"])
def test_an_absurd_retention_property_is_a_clear_error(tmp_path, capsys, interval):
    from txn_helpers import create_table as create_unchecked

    prop = "delta.deletedFileRetentionDuration"
    with pytest.raises(InvalidArgumentError, match=f"Cannot use {prop} value"):
        create_table(str(tmp_path / "checked"), schema="id BIGINT", properties={prop: interval})
    # a table whose log already holds such a value (another writer): the operations that read it say so
    root = str(tmp_path / "t")
    create_unchecked(root, configuration={prop: interval, "delta.logRetentionDuration": interval})
    t = DeltaTable(None, root)
    with pytest.raises(InvalidArgumentError, match=f"Cannot use {prop} value"):
        t.vacuum()
    with pytest.raises(InvalidArgumentError, match="Cannot use delta.logRetentionDuration value"):
        t.cleanup_metadata()
    code, last = _cli(capsys, "vacuum", "--table-uri", root)
    assert code == 1 and last.startswith("DELTA_ERROR InvalidArgumentError: Cannot use") and prop in last


# ------------------------------------------------------------------ 3. a timestamp after the latest commit


def test_a_timestamp_after_the_latest_commit_is_refused_not_read_as_the_latest_version(tmp_path, capsys):
    from airflow_delta_provider_apps.engine.errors import VersionNotFoundError

    root = _table(tmp_path)
    t = DeltaTable(None, root)
    latest_ms = t.history(limit=1)[0]["timestamp"]
    assert t.snapshot(timestamp=latest_ms).version == 3  # at the latest commit's time: that commit
    later = latest_ms + 1
    for call in (lambda: t.snapshot(timestamp=later), lambda: t.restore(timestamp=later)):
        with pytest.raises(VersionNotFoundError, match="is after the latest version available") as e:
            call()
        assert f"({later})" in e.value.problem and "version 3, committed at" in e.value.problem
    with pytest.raises(VersionNotFoundError, match="is after the latest version"):
        t.restore(timestamp="2999-01-01T00:00:00Z")
    assert _version(root) == 3
    code, last = _cli(capsys, "restore", "--table-uri", root, "--timestamp", str(later))
    assert code == 1 and last.startswith("DELTA_ERROR VersionNotFoundError: The provided timestamp")
    with pytest.raises(InvalidArgumentError, match="not a finite number"):
        t.snapshot(timestamp=float("inf"))


def test_a_timestamp_after_the_latest_commit_fails_the_restore_operator(tmp_path, no_spark_submit):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.operators.delta import DeltaRestoreOperator

    root = _table(tmp_path)
    with pytest.raises(DeltaPermanentError, match="VersionNotFoundError"):
        DeltaRestoreOperator(task_id="r", table_uri=root, timestamp="2999-01-01").execute({})
    assert _version(root) == 3


# ------------------------------------------------------------------ 4. a killed commit's temp file


def _leftover(root: str, version: int, age_days: float) -> str:
    """The temp file LocalStorage's put-if-absent writes before it links ``<version>.json``, as a writer
    killed between the two leaves it (content: the commit it was writing)."""
    import time
    import uuid

    log = os.path.join(root, "_delta_log")
    path = os.path.join(log, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    with open(os.path.join(log, f"{version - 1:020d}.json"), "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data)
    t = time.time() - age_days * 86_400
    os.utime(path, (t, t))
    return path


def test_log_cleanup_deletes_a_killed_commits_old_temp_file_but_never_a_young_one(tmp_path, capsys):
    root = _table(tmp_path)  # 4 young commits, no checkpoint: no log file is old enough to go
    old, young = _leftover(root, 4, age_days=31), _leftover(root, 4, age_days=0)
    r = DeltaTable(None, root).cleanup_metadata()
    assert not os.path.exists(old) and os.path.exists(young)
    assert r["metrics"]["numDeletedFiles"] == 1 and r["metrics"]["numDeletedCommits"] == 0
    assert r["protected_checkpoint_version"] is None
    assert _version(root) == 3 and DeltaTable(None, root).snapshot().num_files == 3
    # a checkpoint with cleanup does the same, through the CLI, DeltaTable and the operator
    old = _leftover(root, 4, age_days=31)
    code, _ = _cli(capsys, "checkpoint", "--table-uri", root, "--cleanup")
    assert code == 0 and not os.path.exists(old) and os.path.exists(young)
    old = _leftover(root, 4, age_days=31)
    r = DeltaTable(None, root).checkpoint(cleanup=True)
    assert not os.path.exists(old) and os.path.exists(young)
    assert r["version"] == 3 and r["cleanup"]["metrics"]["numDeletedFiles"] == 1


def test_the_checkpoint_operator_with_cleanup_deletes_old_temp_files(tmp_path, no_spark_submit):
    from airflow_delta_provider.operators.delta import DeltaCheckpointOperator

    root = _table(tmp_path)
    old, young = _leftover(root, 4, age_days=31), _leftover(root, 4, age_days=0)
    DeltaCheckpointOperator(task_id="k", table_uri=root, cleanup=True, execution="local").execute({})
    assert not os.path.exists(old) and os.path.exists(young)


def test_a_temp_file_younger_than_the_log_retention_stays(tmp_path):
    root = _table(tmp_path)
    kept = _leftover(root, 4, age_days=20)  # older than an hour, younger than 30 days
    DeltaTable(None, root).cleanup_metadata()
    assert os.path.exists(kept)


# ------------------------------------------------------------------ 7. `committed` on every result


def test_create_table_results_say_whether_they_committed(tmp_path, capsys, no_spark_submit):
    import json

    from airflow_delta_provider.operators.delta import DeltaCreateTableOperator

    root = str(tmp_path / "t")
    code, last = _cli(capsys, "create-table", "--table-uri", root, "--schema", "id BIGINT")
    created = json.loads(last)
    assert code == 0 and (created["committed"], created["created"], created["skipped"]) == (True, True, False)
    code, last = _cli(capsys, "create-table", "--table-uri", root, "--schema", "id BIGINT", "--if-not-exists")
    kept = json.loads(last)
    assert code == 0 and (kept["committed"], kept["created"], kept["skipped"]) == (False, False, True)
    engine = create_table(root, schema="id BIGINT", if_not_exists=True).to_dict()
    assert engine["committed"] is False
    other = str(tmp_path / "o")
    op = DeltaCreateTableOperator(
        task_id="c", table_uri=other, schema="id BIGINT", if_not_exists=True, execution="local"
    )
    assert op.execute({})["committed"] is True and op.execute({})["committed"] is False


def test_every_committing_operation_that_runs_in_process_reports_committed(tmp_path):
    from airflow_delta_provider_apps.landed import landed_result

    root = _table(tmp_path)
    calls = [
        ("create-table", {"schema": "id BIGINT", "if_not_exists": True}),
        ("delete", {"predicate": "id = 0"}),
        ("delete", {"predicate": "id = 99"}),  # nothing matches: no commit
        ("update", {"updates": {"id": "id + 10"}, "predicate": "id = 1"}),
        ("optimize", {}),
        ("restore", {"version": 1}),
        ("vacuum", {"dry_run": True}),
        ("vacuum", {}),
        ("delete", {"app_id": "a", "app_version": 1}),
        ("delete", {"app_id": "a", "app_version": 1}),  # already committed: skipped
    ]
    seen = []
    for name, params in calls:
        r = cli.run_in_process(name, root, params)
        assert isinstance(r.get("committed"), bool), (name, r)
        seen.append(r["committed"])
    assert seen == [False, True, False, True, True, True, False, True, True, False]
    landed = landed_result(root, "a", 1)
    assert (landed["skipped"], landed["committed"]) == (True, False)
