"""Exactly once across retries and clears, without Spark: the identity a task instance commits
with, the earlier commit found in the log before anything is submitted, and a lost result recovered
from the log. (The Spark side of a re-run's replace is in tests/spark/test_append.py; a real retry
of a real DAG in tests/airflow/test_retry_after_commit.py.)"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from txn_helpers import create_table, txn, write_file

from airflow_delta_provider.hooks.delta import DeltaHook
from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaWriteOperator, task_instance_identity
from airflow_delta_provider_apps.engine.commit_identity import TxnIdentity
from airflow_delta_provider_apps.protocol import landed_result

DAY = datetime(2026, 3, 1, tzinfo=UTC)


def append(root: str, ids, **identity):
    """One committed file of ``ids`` with a SetTransaction identity; ``numOutputRows`` as metrics."""
    t = txn(root, operation="WRITE", operation_parameters={"mode": "Append"}, **identity)
    return t.commit([write_file(root, ids)], operation_metrics={"numOutputRows": len(ids)})


def _context(*, try_number=1, max_tries=2, map_index=-1, logical=DAY, task_id="load"):
    ti = SimpleNamespace(
        dag_id="daily", task_id=task_id, map_index=map_index, try_number=try_number, max_tries=max_tries, run_id="r1"
    )
    return {"ti": ti, "logical_date": logical, "run_id": "r1"}


def test_the_identity_is_the_task_instance_and_its_version_counts_clears_not_retries():
    app_id, first = task_instance_identity(_context(try_number=1, max_tries=2), retries=2)
    assert app_id == "airflow:daily/load@2026-03-01T00:00:00+00:00" and first == 1
    # a retry keeps max_tries: same version, so a commit that landed is found and reported
    assert task_instance_identity(_context(try_number=3, max_tries=2), retries=2) == (app_id, 1)
    # a clear after try 3 sets max_tries = 3 + retries: the next run is a new version
    assert task_instance_identity(_context(try_number=4, max_tries=5), retries=2) == (app_id, 4)
    # mapped instances and other dates are other applications; no logical date: the run id
    assert (
        task_instance_identity(_context(map_index=3), retries=2)[0] == "airflow:daily/load[3]@2026-03-01T00:00:00+00:00"
    )
    assert task_instance_identity(_context(logical=None), retries=2)[0] == "airflow:daily/load@r1"
    assert task_instance_identity({}, retries=2) is None


def test_landed_result_reports_the_commit_carrying_the_identity(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1, 2], app_id="airflow:daily/load@d1", app_version=1)
    append(root, [3], app_id="someone-else", app_version=9)
    got = landed_result(root, "airflow:daily/load@d1", 1)
    assert (got["version"], got["skipped"], got["operation"], got["app_version"]) == (1, True, "WRITE", 1)
    assert landed_result(root, "airflow:daily/load@d1", 2) is None  # a newer run: not landed
    assert landed_result(root, "airflow:daily/load@d1", 2, any_version=True)["version"] == 1
    assert landed_result(root, "airflow:daily/load@d2", 1) is None
    assert landed_result(str(tmp_path / "missing"), "x", 1) is None


def test_a_retry_after_the_commit_landed_reports_it_without_submitting(tmp_path, monkeypatch):
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create_table(root)
    ctx = _context(try_number=2, max_tries=2)  # the second try of the first run
    app_id, version = task_instance_identity(ctx, retries=2)
    append(root, [1, 2], app_id=app_id, app_version=version)
    op = DeltaWriteOperator(task_id="load", table_uri=root, source="/nowhere/x.parquet", retries=2)
    result = op.execute(ctx)
    assert (result["skipped"], result["version"], result["app_id"]) == (True, 1, app_id)
    assert "hook" not in op.__dict__  # nothing was prepared for a submit
    # on_rerun="skip": a cleared run (newer version) reports the earlier commit too
    cleared = _context(try_number=3, max_tries=4)
    skip = DeltaWriteOperator(task_id="load", table_uri=root, source="/x.parquet", retries=2, on_rerun="skip")
    assert skip.execute(cleared)["version"] == 1
    # the default: a cleared run is applied again (here it would submit: the boundary refuses)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')  # resolved first
    again = DeltaDeleteOperator(task_id="load", table_uri=root, predicate="id = 1", retries=2)
    with pytest.raises(pytest.fail.Exception, match="spark-submit was called"):
        again.execute(cleared)


def test_a_lost_result_is_recovered_from_the_commit(tmp_path):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1], app_id="airflow:daily/load@d1", app_version=4)
    hook = DeltaHook()
    got = hook.result_from_log(root, TxnIdentity("airflow:daily/load@d1", 4))
    assert (got["version"], got["skipped"], got["from_log"]) == (1, False, True)
    assert got["metrics"]["numOutputRows"] == 1
    assert hook.result_from_log(root, TxnIdentity("airflow:daily/load@d1", 5)) is None
    assert hook.result_from_log(root, TxnIdentity()) is None
