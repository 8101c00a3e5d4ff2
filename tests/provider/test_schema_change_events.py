"""Schema changes and reader warnings reach the people and DAGs downstream (issue 40 items 5 and 6): the
task log prints one line per column the commit added or changed and a warning naming the readers a
newly turned-on feature locks out; the table's asset event carries both in its extra. Operators run
in the worker (``execution="local"``) on the real engine."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_delta_provider.operators.delta import (
    DeltaChangeColumnTypeOperator,
    DeltaMergeOperator,
    DeltaSetPropertiesOperator,
    delta_asset,
)
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.commit_identity import TxnIdentity


def _orders(root: str, properties: dict | None = None) -> None:
    create_table(root, schema="order_id BIGINT, quantity INT", properties=properties)
    append_arrow(root, pa.table({"order_id": pa.array([1, 2], pa.int64()), "quantity": pa.array([3, 4], pa.int32())}))


# a task log line as Airflow's structured logging prints it: "<time> [info     ] <message> [<logger>] ..."
_LOG_LINE = re.compile(r"\[(?P<level>\w+)\s*\] (?P<message>.*?) \[airflow\.")


def _run(op, capsys) -> tuple[dict, dict, list[tuple[str, str]]]:
    """The operator's result, its table's asset event extra and the (level, message) lines it logged."""
    events = OutletEventAccessors()
    capsys.readouterr()
    result = op.execute({"outlet_events": events})
    out = capsys.readouterr()
    lines = [m.group("level", "message") for m in map(_LOG_LINE.search, (out.out + out.err).splitlines()) if m]
    return result, events[delta_asset(op.table_uri)].extra, lines


def _lines(records, level: str) -> list[str]:
    """The hook's result lines of that level (Airflow's own, e.g. about running outside a task runner, left out)."""
    return [message for lvl, message in records if lvl == level and message.startswith("Delta ")]


def test_a_merge_that_adds_and_widens_columns_says_so_in_the_log_and_the_event(tmp_path, capsys):
    root = str(tmp_path / "orders")
    _orders(root, {"delta.enableTypeWidening": "true"})
    (tmp_path / "day6").mkdir()
    source = pa.table(
        {
            "order_id": pa.array([2, 3], pa.int64()),
            "quantity": pa.array([2**40, 5], pa.int64()),
            "channel": ["web", "shop"],
        }
    )
    pq.write_table(source, tmp_path / "day6" / "part-0.parquet")
    op = DeltaMergeOperator(
        task_id="m",
        table_uri=root,
        source=str(tmp_path / "day6"),
        key_columns=["order_id"],
        merge_schema=True,
        execution="local",
    )
    result, extra, records = _run(op, capsys)
    expected = [
        {"change": "widened", "column": "quantity", "from": "integer", "to": "long"},
        {"change": "added", "column": "channel", "type": "string"},
    ]
    assert result["schema_changes"] == extra["schema_changes"] == expected
    assert (extra["version"], extra["operation"]) == (2, "MERGE")
    info = _lines(records, "info")
    assert f"Delta merge on {root}: schema change: column quantity widened from integer to long" in info
    assert f"Delta merge on {root}: schema change: column channel added (string)" in info
    assert not _lines(records, "warning") and "reader_warnings" not in extra  # no new feature
    # the table holds what the event says
    schema = DeltaTable(None, root).snapshot().schema
    assert (schema.find("quantity").type.name, schema.find("channel").type.name) == ("long", "string")


def test_turning_on_type_widening_warns_of_the_readers_it_locks_out(tmp_path, capsys):
    root = str(tmp_path / "orders")
    _orders(root)
    op = DeltaChangeColumnTypeOperator(task_id="c", table_uri=root, column="quantity", new_type="BIGINT")
    result, extra, records = _run(op, capsys)
    assert extra["schema_changes"] == [{"change": "widened", "column": "quantity", "from": "integer", "to": "long"}]
    (warning,) = extra["reader_warnings"]
    assert (warning["feature"], warning["readers"]) == ("typeWidening", ["deltalake", "Polars"])
    (line,) = _lines(records, "warning")
    assert line.startswith(f"Delta change_column_type on {root}: other readers: feature 'typeWidening' turned on")
    assert "or append to it with write_deltalake; Polars 2.1.0 cannot read it" in line
    # a second widening: the schema change is reported, no warning (the feature was on already)
    again = DeltaChangeColumnTypeOperator(task_id="c2", table_uri=root, column="quantity", new_type="DECIMAL(22,0)")
    _, extra, records = _run(again, capsys)
    assert extra["schema_changes"][0]["to"] == "decimal(22,0)" and "reader_warnings" not in extra
    assert not _lines(records, "warning")


def test_a_property_change_that_turns_on_deletion_vectors_warns(tmp_path, capsys):
    root = str(tmp_path / "orders")
    _orders(root)
    op = DeltaSetPropertiesOperator(
        task_id="p", table_uri=root, properties={"delta.enableDeletionVectors": "true"}, execution="local"
    )
    result, extra, records = _run(op, capsys)
    assert [w["feature"] for w in extra["reader_warnings"]] == ["deletionVectors"]
    assert "schema_changes" not in extra
    (line,) = _lines(records, "warning")
    assert "deltalake 1.6.6 cannot read it with to_pyarrow_table/to_pyarrow_dataset" in line


def test_the_watchers_events_and_a_result_recovered_from_the_log_carry_them_too(tmp_path):
    """A watched table's consumers get the watcher's event (the operator emits none): each commit in it
    names its schema changes, whoever made the commit; a retry that finds its commit in the log
    reports them as the first try did."""
    from airflow_delta_provider.version_decision import watch_step
    from airflow_delta_provider_apps.engine.commands.write import append
    from airflow_delta_provider_apps.protocol import landed_result

    root = str(tmp_path / "orders")
    _orders(root)
    first = append(
        root,
        pa.table({"order_id": pa.array([5], pa.int64()), "channel": ["web"]}),
        merge_schema=True,
        identity=TxnIdentity("daily", 6),
    ).to_dict()
    DeltaTable(None, root).change_column_type("quantity", "BIGINT")
    step = watch_step(root, 1)
    assert [c["version"] for c in step.commits] == [2, 3]
    added, widened = step.commits
    assert added["schema_changes"] == [{"change": "added", "column": "channel", "type": "string"}]
    assert "reader_warnings" not in added
    assert widened["schema_changes"] == [{"change": "widened", "column": "quantity", "from": "integer", "to": "long"}]
    assert [w["feature"] for w in widened["reader_warnings"]] == ["typeWidening"]
    assert landed_result(root, "daily", 6)["schema_changes"] == first["schema_changes"]
