"""Operators without running Spark: parse-time validation, templated fields, the spec each one hands
to the hook, the SetTransaction identity rule, lazy hook, Asset helper.
"""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Asset

from airflow_delta_provider.exceptions import DeltaConfigurationError
from airflow_delta_provider.hooks.delta import SparkSubmitOptions
from airflow_delta_provider.operators.delta import (
    DeltaCheckpointOperator,
    DeltaCreateTableOperator,
    DeltaWriteOperator,
    delta_asset,
)


def test_write_refuses_unknown_values_at_parse_time():
    with pytest.raises(ValueError, match="mode must be one of append, overwrite, not 'upsert'"):
        DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", mode="upsert")
    with pytest.raises(ValueError, match="replace_where= needs mode='overwrite'"):
        DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", replace_where="dt = '2026-01-01'")
    # a templated value is checked after rendering, not at parse time
    op = DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", mode="{{ params.mode }}")
    op.mode = "upsert"
    with pytest.raises(DeltaConfigurationError, match="mode must be one of"):
        op.operation_params({})
    with pytest.raises(ValueError, match="source_format"):
        DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", source_format="avro")
    with pytest.raises(TypeError):
        DeltaWriteOperator("w", "/t", "/s")  # keyword-only


def test_write_spec_and_template_fields():
    op = DeltaWriteOperator(
        task_id="w",
        table_uri="/t",
        source="/in/{{ ds }}.csv",
        source_format="csv",
        source_options={"header": True, "sep": ";"},
        app_id="loader",
        app_version="20260101",
        user_metadata="run {{ run_id }}",
    )
    assert {"table_uri", "source", "source_options", "app_id", "app_version", "user_metadata", "spark_conf"} <= set(
        op.template_fields
    )
    assert op.operation_params({}) == {
        "mode": "append",
        "source": "/in/{{ ds }}.csv",
        "source_format": "csv",
        "source_options": {"header": "True", "sep": ";"},
        "source_query": None,
        "target_file_size": None,
        "replace_where": None,
        "partition_overwrite_mode": "static",
        "overwrite_schema": False,
        "merge_schema": False,
    }
    assert op.transaction_identity({}) == {
        "app_id": "loader",
        "app_version": 20260101,
        "user_metadata": "run {{ run_id }}",
    }
    assert "hook" not in op.__dict__  # nothing built at parse time
    op.on_kill()  # nothing submitted: no error


def test_identity_needs_both_parts():
    op = DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", app_id="loader")
    with pytest.raises(DeltaConfigurationError, match="app_id and app_version must be given together"):
        op.transaction_identity({})
    op = DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", app_id="a", app_version="v2")
    with pytest.raises(DeltaConfigurationError, match="not a whole number from 0 up"):
        op.transaction_identity({})
    op = DeltaWriteOperator(task_id="w", table_uri="/t", source="/s", app_id="a", app_version=-1)
    with pytest.raises(DeltaConfigurationError, match="not a whole number from 0 up"):  # Delta: txn versions >= 0
        op.transaction_identity({})


def test_create_table_spec():
    fields = [{"name": n, "type": "string", "nullable": True, "metadata": {}} for n in ("id", "dt", "region")]
    op = DeltaCreateTableOperator(
        task_id="c",
        table_uri="/t",
        schema={"type": "struct", "fields": fields},
        partition_by="dt, region",
        properties={"delta.checkpointInterval": 5},
        description="events",
        if_not_exists=True,
    )
    params = op.operation_params({})
    assert json.loads(params["schema"]) == {"type": "struct", "fields": fields}
    assert params["partition_by"] == ["dt", "region"]
    assert params["properties"] == {"delta.checkpointInterval": "5"}
    assert params["if_not_exists"] is True and params["source"] is None
    ctas = DeltaCreateTableOperator(task_id="c2", table_uri="/t", source="/in/x")
    assert ctas.operation_params({})["source_format"] == "parquet"
    with pytest.raises(ValueError, match="give a schema, or a source"):
        DeltaCreateTableOperator(task_id="c3", table_uri="/t")


def test_checkpoint_spec_and_options_object():
    op = DeltaCheckpointOperator(
        task_id="cp", table_uri="/t", cleanup=True, submit_options={"driver_memory": "1g"}, spark_conf={"spark.x": "1"}
    )
    assert op.operation_params({}) == {"cleanup": True}
    assert op.transaction_identity({}) == {}
    assert SparkSubmitOptions.coerce(op.submit_options) == SparkSubmitOptions(driver_memory="1g")
    hook = op.hook
    assert hook.conn_id == "spark_default" and hook.spark_conf == {"spark.x": "1"}
    assert op.hook is hook  # built once


def test_delta_asset_uri():
    a = delta_asset("/lake/events/")
    assert isinstance(a, Asset) and a.uri == "file:///lake/events"
    assert delta_asset("s3://b/lake/events").uri == "s3://b/lake/events"


def test_delete_and_update_operators_come_from_the_registry():
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaUpdateOperator

    d = DeltaDeleteOperator(task_id="d", table_uri="/t", predicate="dt = '{{ ds }}'")
    assert "predicate" in d.template_fields and "table_uri" in d.template_fields
    assert d.operation_params({}) == {"predicate": "dt = '{{ ds }}'"}
    u = DeltaUpdateOperator(task_id="u", table_uri="/t", updates={"v": "v * 2"}, predicate="id = 1")
    assert {"updates", "predicate"} <= set(u.template_fields)
    assert u.operation_params({}) == {"updates": {"v": "v * 2"}, "predicate": "id = 1"}
    with pytest.raises(ValueError, match="DeltaUpdateOperator: updates= must name at least one column"):
        DeltaUpdateOperator(task_id="u2", table_uri="/t", updates={})
    with pytest.raises(TypeError):
        DeltaDeleteOperator(task_id="d2", table_uri="/t", predicat="x = 1")  # a typo is not swallowed


def test_relative_table_locations_are_refused_everywhere(tmp_path):
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

    with pytest.raises(ValueError, match="relative path"):
        DeltaCheckpointOperator(task_id="cp", table_uri="rel_tbl/x")
    op = DeltaCheckpointOperator(task_id="cp", table_uri="{{ params.t }}")
    op.table_uri = "rel_tbl/x"  # as rendered
    with pytest.raises(DeltaConfigurationError, match="relative path"):
        op.execute({})
    with pytest.raises(InvalidArgumentError, match="relative path"):
        DeltaTable.for_path(None, "rel_tbl/x")
    from airflow_delta_provider_apps import cli

    assert cli.main(["describe", "--table-uri", "rel_tbl/x"]) == 1
    from airflow_delta_provider.version_decision import decide

    d = decide("rel_tbl/x", None)
    assert "relative path" in d.error and d.retryable is False


def test_object_store_locations_without_a_bucket_are_refused_everywhere():
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
    from airflow_delta_provider_apps.engine.table_view import table_view

    for uri in ("s3://", "s3:///lake/t", "abfss://"):
        with pytest.raises(ValueError, match="names no bucket"):
            DeltaCheckpointOperator(task_id="cp", table_uri=uri)
        with pytest.raises(InvalidArgumentError, match="names no bucket"):
            DeltaTable.for_path(None, uri)
        with pytest.raises(InvalidArgumentError, match="names no bucket"):  # the Delta view's 400
            table_view(uri)


def test_log_only_operations_run_in_the_worker_process_with_execution_local(tmp_path, monkeypatch):
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaUpdateOperator
    from airflow_delta_provider_apps.engine.log.listing import latest_version
    from airflow_delta_provider_apps.engine.storage import storage_for

    # no spark-submit may happen: the external boundary fails loudly if it is reached
    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    created = DeltaCreateTableOperator(
        task_id="c", table_uri=root, schema="id BIGINT, dt STRING", partition_by=["dt"], execution="local"
    ).execute({})
    assert (created["operation"], created["version"], created["created"]) == ("CREATE TABLE", 0, True)
    again = DeltaCreateTableOperator(
        task_id="c", table_uri=root, schema="id BIGINT, dt STRING", if_not_exists=True, execution="local"
    ).execute({})
    assert (again["skipped"], again["created"]) == (True, False)
    cp = DeltaCheckpointOperator(task_id="k", table_uri=root, cleanup=True, execution="local").execute({})
    assert cp["operation"] == "CHECKPOINT" and cp["metrics"]["numActions"] == 2 and cp["run_seconds"] >= 0
    assert (tmp_path / "t" / "_delta_log" / "00000000000000000000.checkpoint.parquet").exists()
    assert latest_version(storage_for(root), root) == 0

    # errors are the app's, classified as under spark-submit: a missing table fails without retry
    with pytest.raises(DeltaPermanentError, match="TableNotFoundError"):
        DeltaCheckpointOperator(task_id="k", table_uri=str(tmp_path / "none"), execution="local").execute({})
    # an operation that needs Spark is refused at DAG parse time, or (when it depends on the
    # arguments) before anything runs
    with pytest.raises(ValueError, match="needs Spark"):
        DeltaWriteOperator(task_id="w", table_uri=root, source="/s", execution="local")
    with pytest.raises(ValueError, match="execution="):
        DeltaCheckpointOperator(task_id="k", table_uri=root, execution="yarn")
    # DELETE and UPDATE run in the worker too: log only by partition, else files rewritten by threads
    import pyarrow as pa

    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    append_arrow(root, pa.table({"id": [1, 2, 3], "dt": ["a", "a", "b"]}))
    nothing = DeltaDeleteOperator(task_id="d", table_uri=root, predicate="dt = 'z'", execution="local").execute({})
    assert (nothing["committed"], nothing["skipped"], nothing["version"]) == (False, False, 1)  # nothing to do
    by_day = DeltaDeleteOperator(task_id="d", table_uri=root, predicate="dt = 'b'", execution="local").execute({})
    assert by_day["committed"] and by_day["metrics"]["numRemovedFiles"] == 1 and by_day["version"] == 2
    upd = DeltaUpdateOperator(
        task_id="u", table_uri=root, updates={"id": "id * 10"}, predicate="id = 2", execution="local"
    ).execute({})
    assert upd["committed"] and upd["metrics"]["numUpdatedRows"] == 1
    assert latest_version(storage_for(root), root) == 3


def test_merge_operator_runs_in_the_worker_with_execution_local(tmp_path, monkeypatch):
    """DeltaMergeOperator(execution="local"): a parquet or Delta source merged file by file in the
    worker's process (no Spark application); deltalake reads the merged rows; a source that needs
    Spark (a query, a CSV) is refused before anything is written."""
    import deltalake
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaMergeOperator
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    DeltaCreateTableOperator(
        task_id="c", table_uri=root, schema="id BIGINT, v STRING, dt STRING", partition_by=["dt"], execution="local"
    ).execute({})
    append_arrow(root, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"], "dt": ["x", "x", "y"]}))
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"id": [2, 4], "v": ["B", "D"], "dt": ["y", "y"]}), tmp_path / "src" / "part-0.parquet")
    res = DeltaMergeOperator(
        task_id="m", table_uri=root, source=str(tmp_path / "src"), key_columns=["id"], execution="local"
    ).execute({})
    assert (res["metrics"]["numTargetRowsUpdated"], res["metrics"]["numTargetRowsInserted"]) == (1, 1)
    by_delta = DeltaMergeOperator(
        task_id="m2",
        table_uri=root,
        source=root,
        source_format="delta",
        source_options={"versionAsOf": "1"},
        predicate="target.id = source.id",
        clauses=[{"when": "matched", "then": "update", "set": {"v": "concat(target.v, '!')"}}],
        execution="local",
    ).execute({})
    assert by_delta["metrics"]["numTargetRowsUpdated"] == 3  # version 1's ids 1, 2, 3
    rows = sorted(deltalake.DeltaTable(root).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["v"], r["dt"]) for r in rows] == [(1, "a!", "x"), (2, "B!", "y"), (3, "c!", "y"), (4, "D", "y")]
    version = deltalake.DeltaTable(root).version()
    with pytest.raises(DeltaPermanentError, match="source_query needs Spark"):
        DeltaMergeOperator(
            task_id="q",
            table_uri=root,
            source=root,
            source_format="delta",
            source_query="SELECT * FROM source",
            key_columns=["id"],
            execution="local",
        ).execute({})
    assert deltalake.DeltaTable(root).version() == version


def test_vacuum_and_restore_operators_run_in_the_worker_by_default(tmp_path, monkeypatch):
    import pyarrow as pa

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaRestoreOperator, DeltaVacuumOperator
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1]}))
    append_arrow(root, pa.table({"id": [2]}))
    vac = DeltaVacuumOperator(task_id="v", table_uri=root, retention_hours="0", enforce_retention_duration=False)
    assert vac.execution == "local" and "retention_hours" in vac.template_fields
    dry = DeltaVacuumOperator(task_id="v", table_uri=root, dry_run=True).execute({})
    assert (dry["operation"], dry["committed"], dry["files"]) == ("VACUUM", False, [])
    assert vac.execute({})["metrics"]["numDeletedFiles"] == 0  # every file is young
    with pytest.raises(ValueError, match="pass exactly one of version and timestamp"):
        DeltaRestoreOperator(task_id="r", table_uri=root, version=1, timestamp="2026-01-01")
    undo = DeltaRestoreOperator(task_id="r", table_uri=root, version="1").execute({})
    assert undo["operation"] == "RESTORE" and undo["metrics"]["numRemovedFiles"] == 1 and undo["committed"]


def test_set_properties_operator_enables_deletion_vectors_in_the_worker(tmp_path, monkeypatch):
    import pyarrow as pa

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaSetPropertiesOperator
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1, 2, 3]}))
    with pytest.raises(ValueError, match="at least one table property"):
        DeltaSetPropertiesOperator(task_id="p", table_uri=root, properties={})
    op = DeltaSetPropertiesOperator(task_id="p", table_uri=root, properties={"delta.enableDeletionVectors": "true"})
    assert op.execution == "local" and "properties" in op.template_fields
    out = op.execute({})
    assert (out["operation"], out["committed"], out["protocol"]["minReaderVersion"]) == ("SET TBLPROPERTIES", True, 3)
    assert DeltaTable.for_path(None, root).delete("id = 2")["numDeletionVectorsAdded"] == 1


def test_constraint_operators_add_check_and_drop_in_the_worker(tmp_path, monkeypatch):
    import pyarrow as pa

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaAddConstraintOperator, DeltaDropConstraintOperator
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1, 2, 3]}))
    with pytest.raises(ValueError, match="expression is required"):
        DeltaAddConstraintOperator(task_id="c", table_uri=root, name="big")
    too_strict = DeltaAddConstraintOperator(task_id="c", table_uri=root, name="big", expression="id > 1")
    assert too_strict.execution == "local" and {"name", "expression"} <= set(too_strict.template_fields)
    with pytest.raises(Exception, match="1 row.* violate the new CHECK constraint"):
        too_strict.execute({})
    out = DeltaAddConstraintOperator(task_id="c", table_uri=root, name="pos", expression="id > 0").execute({})
    assert (out["operation"], out["committed"], out["constraint"]) == ("ADD CONSTRAINT", True, "pos")
    with pytest.raises(Exception, match="CHECK constraint pos"):
        append_arrow(root, pa.table({"id": [-5]}))
    gone = DeltaDropConstraintOperator(task_id="d", table_uri=root, name="pos").execute({})
    assert (gone["operation"], gone["committed"]) == ("DROP CONSTRAINT", True)
    again = DeltaDropConstraintOperator(task_id="d", table_uri=root, name="pos", if_exists=True).execute({})
    assert again["committed"] is False


def test_asset_events_carry_the_partitions_the_commit_changed(tmp_path):
    """Airflow 3.2+ asset partitions: one event per partition the commit changed data in (the value
    itself for one partition column), none for a commit that changed no data (OPTIMIZE), a table
    without partitions, or a result that is not this task's commit."""
    import deltalake
    import pyarrow as pa
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaOptimizeOperator

    if not hasattr(OutletEventAccessors()[Asset("file:///x")], "add_partitions"):
        pytest.skip("asset partitions need Airflow 3.2")
    root = str(tmp_path / "t")
    rows = pa.table({"id": list(range(6)), "dt": ["2026-01-01", "2026-01-02", "2026-01-03"] * 2})
    deltalake.write_deltalake(root, rows, partition_by=["dt"])

    def run(op):
        events = OutletEventAccessors()
        result = op.execute({"outlet_events": events})
        if not op.outlets:  # a run that changed nothing emits no event
            return result, None, None
        event = events[op.outlets[0]]
        return result, event.extra, event.partition_keys

    result, extra, keys = run(DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id = 1", execution="local"))
    assert (extra["version"], extra["committed"], keys) == (1, True, {"2026-01-02"})
    # a data predicate that hits two partitions: two keys
    _, _, keys = run(DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id IN (0, 5)", execution="local"))
    assert keys == {"2026-01-01", "2026-01-03"}
    # nothing deleted: nothing committed, no event
    result, extra, keys = run(DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id = 1", execution="local"))
    assert (result["committed"], extra, keys) == (False, None, None)
    # compaction changes no data (dataChange false): the event names no partition
    deltalake.write_deltalake(root, rows, mode="append", partition_by=["dt"])
    result, extra, keys = run(DeltaOptimizeOperator(task_id="o", table_uri=root, execution="local"))
    assert result["metrics"]["numRemovedFiles"] > 0 and extra["committed"] and keys == set()

    flat = str(tmp_path / "flat")
    deltalake.write_deltalake(flat, rows)
    _, extra, keys = run(DeltaDeleteOperator(task_id="d", table_uri=flat, predicate="id = 1", execution="local"))
    assert extra["committed"] and keys == set()


def test_partition_keys_of_a_table_partitioned_by_two_columns(tmp_path):
    import deltalake
    import pyarrow as pa

    from airflow_delta_provider_apps.protocol import commit_partition_keys

    root = str(tmp_path / "t")
    rows = pa.table({"id": [1, 2, 3], "dt": ["2026-01-01", "2026-01-01", "2026-01-02"], "region": ["eu", None, "us"]})
    deltalake.write_deltalake(root, rows, partition_by=["dt", "region"])
    assert sorted(commit_partition_keys(root, 0)) == [
        "dt=2026-01-01/region=__HIVE_DEFAULT_PARTITION__",
        "dt=2026-01-01/region=eu",
        "dt=2026-01-02/region=us",
    ]
    assert commit_partition_keys(root, 7) is None  # no such commit


def test_outlets_given_are_kept_and_an_empty_list_means_none():
    from airflow_delta_provider.operators.delta import DeltaOptimizeOperator

    assert DeltaWriteOperator(task_id="w", table_uri="/lake/t", source="/s").outlets == [delta_asset("/lake/t")]
    assert DeltaWriteOperator(task_id="w", table_uri="/lake/t", source="/s", outlets=None).outlets == [
        delta_asset("/lake/t")
    ]
    assert DeltaWriteOperator(task_id="w", table_uri="/lake/t", source="/s", outlets=[]).outlets == []
    other = Asset("s3://b/report")
    assert DeltaOptimizeOperator(task_id="o", table_uri="/lake/t", outlets=[other]).outlets == [other]
    assert DeltaCheckpointOperator(task_id="k", table_uri="/lake/t").outlets == []  # commits nothing


def _succeed(op, events):
    """The message Airflow's task runner sends when the task succeeds: ``task_outlets`` are the assets
    the API server registers an event for (only those; outlet_events only add extras to them)."""
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner

    msg, _ = task_runner._handle_current_task_success(
        {"outlet_events": events},
        # Airflow 3.1's runner also reads the ids for its metrics' tags
        SimpleNamespace(task=op, stats_tags={}, rendered_map_index=None, dag_id="d", task_id=op.task_id),
    )
    return [o.uri for o in msg.task_outlets]


def test_a_run_that_changes_nothing_emits_no_asset_event(tmp_path):
    import pyarrow as pa
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_delta_provider.operators.delta import DeltaOptimizeOperator
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1]}))
    other = Asset("s3://b/report")
    op = DeltaOptimizeOperator(task_id="o", table_uri=root, execution="local", outlets=[delta_asset(root), other])
    events = OutletEventAccessors()
    noop = op.execute({"outlet_events": events})
    assert (noop["committed"], noop["skipped"], noop["metrics"]["numRemovedFiles"]) == (False, False, 0)
    assert _succeed(op, events) == ["s3://b/report"]  # the table's asset: no event; another outlet keeps its

    append_arrow(root, pa.table({"id": [2]}))  # two small files: this time OPTIMIZE commits
    events = OutletEventAccessors()
    done = op.execute({"outlet_events": events})
    assert (done["committed"], done["version"], done["metrics"]["numRemovedFiles"]) == (True, 3, 2)
    assert _succeed(op, events) == [delta_asset(root).uri, "s3://b/report"]
    assert events[delta_asset(root)].extra["version"] == 3


def test_create_if_not_exists_that_keeps_the_table_emits_no_asset_event(tmp_path):
    """A daily CREATE TABLE IF NOT EXISTS must not start the table's consumers every day."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    root = str(tmp_path / "t")
    op = DeltaCreateTableOperator(
        task_id="c", table_uri=root, schema="id BIGINT", if_not_exists=True, execution="local"
    )
    events = OutletEventAccessors()
    first = op.execute({"outlet_events": events})
    assert (first["committed"], first["version"]) == (True, 0)
    assert _succeed(op, events) == [delta_asset(root).uri]
    events = OutletEventAccessors()
    again = op.execute({"outlet_events": events})
    assert (again["skipped"], again.get("created"), again["version"]) == (True, False, 0)
    assert _succeed(op, events) == []


def test_an_outlet_a_delta_watcher_watches_gets_its_event_from_the_watcher_only(tmp_path):
    """The one setup for a table written by Airflow tasks and by others: its asset carries the
    watcher wherever it is declared; the operators leave the announcing to the watcher."""
    import pyarrow as pa
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_delta_provider.operators.delta import DeltaDeleteOperator
    from airflow_delta_provider.triggers.delta import delta_table_watcher
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1, 2]}))
    watched = delta_asset(root, watchers=[delta_table_watcher(root)])
    elsewhere = delta_asset(str(tmp_path / "u"), watchers=[delta_table_watcher(str(tmp_path / "u"))])
    op = DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id = 1", execution="local", outlets=[watched])
    events = OutletEventAccessors()
    assert op.execute({"outlet_events": events})["committed"]
    assert _succeed(op, events) == []
    # a watcher of another table does not silence this table's event
    op = DeltaDeleteOperator(task_id="d", table_uri=root, predicate="id = 2", execution="local", outlets=[elsewhere])
    events = OutletEventAccessors()
    assert op.execute({"outlet_events": events})["committed"]
    assert _succeed(op, events) == [elsewhere.uri]


def test_partition_by_is_checked_against_a_literal_schema_at_parse_time():
    with pytest.raises(ValueError, match=r"Partition column 'dt' is not in the schema\. Cause: .*'day'.*Fix: "):
        DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT, day STRING", partition_by=["dt"])
    with pytest.raises(ValueError, match="Cannot partition by column 'tags'"):
        DeltaCreateTableOperator(
            task_id="c", table_uri="/t", schema="id BIGINT, tags ARRAY<STRING>", partition_by="tags"
        )
    json_schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    with pytest.raises(ValueError, match="Partition column 'dt'"):
        DeltaCreateTableOperator(task_id="c", table_uri="/t", schema=json_schema, partition_by="dt")
    ok = DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT, DT STRING", partition_by=["dt"])
    assert ok.partition_by == ["dt"]  # case-insensitive, as the engine decides
    # templated: checked once rendered
    DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT", partition_by="{{ params.part }}")
    DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="{{ params.schema }}", partition_by=["dt"])


def test_an_unknown_argument_names_the_closest_accepted_ones():
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaMergeOperator

    with pytest.raises(TypeError, match=r"unknown argument 'predciate' \(did you mean 'predicate'\?\)\. Cause: "):
        DeltaDeleteOperator(task_id="d", table_uri="/t", predciate="id = 1")
    with pytest.raises(TypeError, match=r"'key_column' \(did you mean 'key_columns'\?\).*Fix: "):
        DeltaMergeOperator(task_id="m", table_uri="/t", source="/s", key_column=["id"])
    with pytest.raises(TypeError, match=r"'conn' \(did you mean 'conn_id'"):  # a common argument
        DeltaCheckpointOperator(task_id="k", table_uri="/t", conn="spark_local")
    with pytest.raises(TypeError, match=r"'retires' \(did you mean 'retries'\?\)"):  # BaseOperator's
        DeltaCheckpointOperator(task_id="k", table_uri="/t", retires=2)
    with pytest.raises(TypeError, match=r"unknown argument 'zzz'\. Cause"):  # nothing close: no guess
        DeltaCheckpointOperator(task_id="k", table_uri="/t", zzz=1)
    # the sensor too
    from airflow_delta_provider.sensors.delta import DeltaTableVersionSensor

    with pytest.raises(TypeError, match=r"'baseline' \(did you mean 'baseline_version'\?\)"):
        DeltaTableVersionSensor(task_id="s", table_uri="/t", baseline=3)
    with pytest.raises(TypeError, match=r"'poke_intervall' \(did you mean 'poke_interval'\?\)"):
        DeltaTableVersionSensor(task_id="s", table_uri="/t", poke_intervall=3)
    assert DeltaTableVersionSensor(task_id="s", table_uri="/t", poke_interval=3, mode="reschedule").poke_interval == 3


def test_an_operator_that_commits_nothing_refuses_a_commit_identity_by_name():
    from airflow_delta_provider.operators.delta import DeltaCheckpointOperator

    for kwargs in ({"user_metadata": "nightly"}, {"app_id": "a", "app_version": 1}):
        with pytest.raises(ValueError, match="commits nothing.*Fix: remove") as e:
            DeltaCheckpointOperator(task_id="cp", table_uri="/lake/t", **kwargs)
        assert all(k in str(e.value) for k in kwargs)
    DeltaCheckpointOperator(task_id="cp", table_uri="/lake/t")  # without them: fine


def test_cluster_by_is_checked_at_parse_time_and_the_operators_cluster_in_the_worker(tmp_path, monkeypatch):
    import pyarrow as pa

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaClusterByOperator, DeltaOptimizeOperator
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    with pytest.raises(ValueError, match="partition_by and cluster_by cannot be combined"):
        DeltaCreateTableOperator(
            task_id="c", table_uri="/t", schema="id BIGINT, dt STRING", partition_by="dt", cluster_by="id"
        )
    with pytest.raises(ValueError, match=r"Clustering column 'ts' is not in the schema\. Cause: .*Fix: "):
        DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT", cluster_by=["ts"])
    with pytest.raises(ValueError, match="Cannot cluster by column 'ok' of type boolean"):
        DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT, ok BOOLEAN", cluster_by="ok")
    with pytest.raises(ValueError, match="columns is required"):
        DeltaClusterByOperator(task_id="k", table_uri="/t")
    DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT", cluster_by="{{ params.c }}")

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create = DeltaCreateTableOperator(
        task_id="c", table_uri=root, schema="id BIGINT, v STRING", cluster_by="id", execution="local"
    )
    assert create.operation_params({})["cluster_by"] == ["id"] and "cluster_by" in create.template_fields
    assert create.execute({})["created"] is True
    assert DeltaTable(None, root).clustering_columns() == ["id"]
    for i in range(3):
        append_arrow(root, pa.table({"id": [3 - i, 10 + i], "v": ["a", "b"]}))
    out = DeltaOptimizeOperator(task_id="o", table_uri=root, execution="local").execute({})
    assert out["clustering_columns"] == ["id"] and out["metrics"]["numRemovedFiles"] == 3
    changed = DeltaClusterByOperator(task_id="k", table_uri=root, columns=["v", "id"]).execute({})
    assert (changed["operation"], changed["committed"], changed["clustering_columns"]) == (
        "CLUSTER BY",
        True,
        ["v", "id"],
    )
    removed = DeltaClusterByOperator(task_id="k", table_uri=root, columns=[]).execute({})
    assert removed["clustering_columns"] == [] and DeltaTable(None, root).clustering_columns() == []


# one broken literal text per argument holding Spark SQL: (operator, its arguments, where, what, text)
_BROKEN_SQL = [
    ("DeltaDeleteOperator", {}, "predicate", "predicate", "status = 'cancelled' AND"),
    ("DeltaUpdateOperator", {"updates": {"v": "v * 2"}}, "predicate", "predicate", "id IN (1, 2"),
    ("DeltaUpdateOperator", {"predicate": "id = 1"}, "updates['v']", "expression", "upper(v"),
    ("DeltaWriteOperator", {"source": "/in/{{ ds }}", "mode": "overwrite"}, "replace_where", "predicate", "dt = '1"),
    (
        "DeltaMergeOperator",
        {"source": "/in", "clauses": [{"when": "matched", "then": "update_all"}]},
        "predicate",
        "merge condition",
        "target.id = source.id AND",
    ),
    ("DeltaMergeOperator", {"source": "/in"}, "clauses[1].condition", "condition", "source.v >"),
    ("DeltaMergeOperator", {"source": "/in"}, "clauses[0].set['v']", "expression", "source.v +"),
    ("DeltaOptimizeOperator", {}, "partition_filter", "predicate", "dt = '2026-01-01' OR"),
    ("DeltaAddConstraintOperator", {"name": "positive"}, "expression", "condition", "amount >="),
    ("DeltaDeleteOperator", {}, "predicate", "predicate", "id IN (SELECT id FROM other)"),
]


def _with_sql(operator: str, given: dict, where: str, text: str) -> dict:
    """The operator's arguments with ``text`` put where ``where`` says (a top-level argument, an
    UPDATE assignment, or a MERGE clause's condition or assignment)."""
    if where.startswith("updates"):
        return {**given, "updates": {"v": text}}
    if where.startswith("clauses"):
        clauses = [
            {"when": "matched", "then": "update", "set": {"v": "source.v"}},
            {"when": "matched", "then": "delete", "condition": "source.gone"},
        ]
        if where == "clauses[1].condition":
            clauses[1]["condition"] = text
        else:
            clauses[0]["set"] = {"v": text}
        return {**given, "predicate": "target.id = source.id", "clauses": clauses}
    return {**given, where: text}


@pytest.mark.parametrize(("operator", "given", "where", "what", "text"), _BROKEN_SQL)
def test_broken_literal_sql_fails_the_dag_import_with_the_engines_own_error(operator, given, where, what, text):
    import time

    from airflow_delta_provider.operators import delta
    from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
    from airflow_delta_provider_apps.engine.expr import parse_expression, parse_predicate
    from airflow_delta_provider_apps.engine.schema import parse_schema

    cls = getattr(delta, operator)
    started = time.monotonic()
    with pytest.raises(ValueError) as raised:
        cls(task_id="t", table_uri="/lake/t", **_with_sql(operator, given, where, text))
    assert time.monotonic() - started < 5  # at parse time, no Spark (a first sqlglot import included)
    message = str(raised.value)
    assert message.startswith(f"{operator}: {where}: ")
    assert f"'{text}'" in message and "Fix: " in message
    if "SELECT" not in text:  # a subquery is refused as such, a syntax error names what is missing
        assert f"Cannot parse the {what} '{text}'. Cause: " in message
    # what the engine says of the same text when the task runs, over a schema with every column named
    schema = parse_schema("id BIGINT, v STRING, status STRING, dt DATE, amount INT")
    with pytest.raises(InvalidPredicateError) as at_run:
        (parse_expression if what == "expression" else parse_predicate)(text.replace("source.", ""), schema)
    assert (at_run.value.cause or at_run.value.problem).replace("source.", "") in message.replace("source.", "")


def test_valid_literal_sql_is_accepted_at_parse_time():
    from airflow_delta_provider.operators.delta import (
        DeltaAddConstraintOperator,
        DeltaDeleteOperator,
        DeltaMergeOperator,
        DeltaOptimizeOperator,
        DeltaUpdateOperator,
    )

    many = ", ".join(f"'c{i}'" for i in range(500))  # a GDPR erasure's IN list
    for predicate in (
        "dt BETWEEN '2026-01-01' AND '2026-01-31' AND status <> 'it''s'",
        "`odd name` <=> NULL OR upper(status) LIKE 'CANCEL%'",
        f"customer_id IN ({many})",
        "CAST(ts AS DATE) = DATE'2026-01-01' AND NOT (amount > 10 * 2)",
    ):
        assert DeltaDeleteOperator(task_id="d", table_uri="/t", predicate=predicate).predicate == predicate
    DeltaUpdateOperator(task_id="u", table_uri="/t", updates={"v": "coalesce(v, 0) * 2", "s": "'done'"})
    DeltaMergeOperator(
        task_id="m",
        table_uri="/t",
        source="/in",
        predicate="t.id = s.id AND t.dt = s.dt",
        target_alias="t",
        source_alias="s",
        clauses=[
            {"when": "matched", "condition": "s.deleted", "then": "delete"},
            {"when": "not_matched", "then": "insert", "values": {"id": "s.id", "v": "s.v || '!'"}},
        ],
    )
    DeltaOptimizeOperator(task_id="o", table_uri="/t", partition_filter="dt >= '2026-01-01'")
    DeltaAddConstraintOperator(task_id="c", table_uri="/t", name="positive", expression="amount >= 0")


def test_templated_sql_is_checked_after_rendering_before_anything_runs(monkeypatch):
    import re

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaDeleteOperator, DeltaMergeOperator

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    monkeypatch.setattr(DeltaHook, "run_in_process", lambda *a, **k: pytest.fail("the app was started"))
    delete = DeltaDeleteOperator(task_id="d", table_uri="/lake/t", predicate="status = '{{ params.s }}' AND")
    merge = DeltaMergeOperator(  # a literal clause beside a templated one: each text is judged on its own
        task_id="m",
        table_uri="/lake/t",
        source="/in",
        predicate="target.id = source.id",
        clauses=[
            {"when": "matched", "condition": "source.dt = '{{ ds }}' AND", "then": "update_all"},
            {"when": "not_matched", "then": "insert_all"},
        ],
    )
    for op, where in ((delete, "predicate"), (merge, "clauses[0].condition")):
        op.render_template_fields({"params": {"s": "cancelled"}, "ds": "2026-01-01"})
        with pytest.raises(
            DeltaConfigurationError, match=rf"{re.escape(where)}: Cannot parse the .* an operand is missing"
        ):
            op.execute({})
        assert "hook" not in op.__dict__  # no connection read, nothing submitted
    assert delete.predicate == "status = 'cancelled' AND"
    with pytest.raises(ValueError, match=r"clauses\[1\]\.condition: Cannot parse the condition 'source\.v >'"):
        DeltaMergeOperator(
            task_id="m",
            table_uri="/lake/t",
            source="/in/{{ ds }}",
            predicate="target.id = source.id",
            clauses=[
                {"when": "matched", "condition": "source.dt = '{{ ds }}'", "then": "update_all"},
                {"when": "matched", "condition": "source.v >", "then": "delete"},
            ],
        )


def test_a_broken_literal_schema_fails_the_dag_import_with_the_engines_own_error():
    from airflow_delta_provider_apps.engine.errors import InvalidSchemaError
    from airflow_delta_provider_apps.engine.schema import parse_schema

    for schema in ("id BIGNT, v STRING", "id BIGINT, v STRUCT<a INT", {"type": "struct"}):
        with pytest.raises(InvalidSchemaError) as at_run:
            parse_schema(schema)
        with pytest.raises(ValueError) as raised:
            DeltaCreateTableOperator(task_id="c", table_uri="/t", schema=schema)
        assert str(raised.value) == f"DeltaCreateTableOperator: schema: {at_run.value.one_line()}"
    # a templated schema is parsed after rendering; a good one constructs
    DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT, v {{ params.t }}")
    DeltaCreateTableOperator(task_id="c", table_uri="/t", schema="id BIGINT NOT NULL, tags ARRAY<STRING>")


def test_vacuum_operator_and_cli_keep_versions_and_inventory(tmp_path, monkeypatch, capsys):
    """keep_versions and inventory through the operator (in the worker) and the CLI: the file only
    version 1 reads is kept while version 1 is kept; the inventory plans what the listing plans."""
    import json
    import os
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider.operators.delta import DeltaVacuumOperator
    from airflow_delta_provider_apps import cli
    from airflow_delta_provider_apps.engine import DeltaTable
    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow

    monkeypatch.setattr(DeltaHook, "run", lambda *a, **k: pytest.fail("spark-submit was called"))
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1]}))
    DeltaTable(None, root).delete("id = 1")  # version 2: version 1's file is a tombstone
    rows = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            os.utime(p, (time.time() - 30 * 86400,) * 2)
            rows.append((p, os.path.getsize(p), False, int(os.path.getmtime(p) * 1000)))
    inv = str(tmp_path / "inventory.parquet")
    cols = list(zip(*rows))
    pq.write_table(pa.table(dict(zip(["path", "length", "isDir", "modificationTime"], cols))), inv)
    common = dict(table_uri=root, retention_hours="0", enforce_retention_duration=False, dry_run=True)
    listed = DeltaVacuumOperator(task_id="v", **common).execute({})["files"]
    assert len(listed) == 1 and listed[0].endswith(".parquet")
    assert DeltaVacuumOperator(task_id="v", inventory=inv, **common).execute({})["files"] == listed
    kept = DeltaVacuumOperator(task_id="v", keep_versions="{{ params.keep }}", **common)
    assert "keep_versions" in kept.template_fields and "inventory" in kept.template_fields
    kept.keep_versions = "1"  # as rendered
    assert kept.execute({})["files"] == []
    argv = ["vacuum", "--table-uri", root, "--retention-hours", "0", "--no-enforce-retention-duration"]
    assert cli.main([*argv, "--keep-versions", "1", "--inventory", inv]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["metrics"]["numDeletedFiles"] == 0 and res["keep_versions"] == [1] and os.path.exists(listed[0])
    assert cli.main([*argv, "--inventory", inv]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]["numDeletedFiles"] == 1
    assert not os.path.exists(listed[0])


@pytest.mark.parametrize(
    "properties, message",
    [
        ({"delta.checkpointPolicy": "v3"}, "is not a checkpoint policy"),
        ({"delta.bogus": "1"}, "Unknown Delta table property 'delta.bogus'"),
        ({"delta.rowTracking.materializedRowIdColumnName": "x"}, "the engine alone sets it"),
        ({"delta.checkpointInterval": "0"}, "is not a valid integer"),
    ],
)
def test_literal_table_properties_are_checked_at_dag_parse_time(properties, message):
    from airflow_delta_provider.operators.delta import DeltaCreateTableOperator, DeltaSetPropertiesOperator

    with pytest.raises(ValueError, match=message):
        DeltaSetPropertiesOperator(task_id="p", table_uri="/lake/t", properties=properties)
    with pytest.raises(ValueError, match=message):
        DeltaCreateTableOperator(task_id="c", table_uri="/lake/t", schema="id INT", properties=properties)
    # a templated value is checked after rendering, not at parse time
    DeltaSetPropertiesOperator(task_id="q", table_uri="/lake/t", properties={"delta.appendOnly": "{{ params.x }}"})
