"""Schema changes and reader warnings in a command's result (issue 40 items 5 and 6): every commit that
changes the schema names each column added, widened, retyped, renamed or dropped (``schema_changes``),
and every commit that turns on a feature a common reader refuses says so (``reader_warnings``),
whatever the command: computed once in the command skeleton. Each reported change is checked against
the schemas the log holds before and after the commit."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append, append_arrow, overwrite
from airflow_delta_provider_apps.engine.schema import StructType
from airflow_delta_provider_apps.engine.schema.changes import schema_changes
from airflow_delta_provider_apps.engine.storage import storage_for


def _orders(root: str, properties: dict | None = None) -> DeltaTable:
    create_table(root, schema="order_id BIGINT, quantity INT, address STRUCT<city: STRING>", properties=properties)
    append_arrow(
        root,
        pa.table(
            {
                "order_id": pa.array([1, 2], pa.int64()),
                "quantity": pa.array([3, 4], pa.int32()),
                "address": pa.array([{"city": "Oslo"}, {"city": "Lyon"}]),
            }
        ),
    )
    return DeltaTable(None, root)


def _type_at(t: DeltaTable, path: str, version: int | None = None) -> str | None:
    """The type of a dotted column path in the log's schema of ``version`` (None: missing)."""
    node = t.snapshot(version=version).schema
    for part in path.split("."):
        f = node.find(part) if isinstance(node, StructType) else None
        if f is None:
            return None
        node = f.type
    j = node.to_json()
    return j if isinstance(j, str) else node.simple_string()


def _agrees_with_the_log(t: DeltaTable, result: dict) -> None:
    """Each reported change is what the log's schemas before and after the commit show."""
    before, after = result["version"] - 1, result["version"]
    for c in result["schema_changes"]:
        if c["change"] == "added":
            assert _type_at(t, c["column"], before) is None and _type_at(t, c["column"], after) == c["type"], c
        elif c["change"] in ("widened", "retyped"):
            assert (_type_at(t, c["column"], before), _type_at(t, c["column"], after)) == (c["from"], c["to"]), c
        elif c["change"] == "dropped":
            assert _type_at(t, c["column"], before) == c["type"] and _type_at(t, c["column"], after) is None, c
        else:  # renamed
            assert _type_at(t, c["from"], before) == _type_at(t, c["column"], after) is not None, c
            assert _type_at(t, c["column"], before) is None and _type_at(t, c["from"], after) is None, c


def test_a_merge_schema_append_names_each_added_column_and_its_type(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root)
    data = pa.table(
        {
            "order_id": pa.array([5], pa.int64()),
            "quantity": pa.array([1], pa.int32()),
            "address": pa.array([{"city": "Rome", "zip": "00100"}]),
            "channel": ["web"],
        }
    )
    res = append(root, data, merge_schema=True).to_dict()
    assert res["schema_changes"] == [
        {"change": "added", "column": "address.zip", "type": "string"},
        {"change": "added", "column": "channel", "type": "string"},
    ]
    assert "reader_warnings" not in res  # no feature turned on
    _agrees_with_the_log(t, res)
    # the next append changes nothing in the schema: nothing to report
    assert "schema_changes" not in append(root, data, merge_schema=True).to_dict()


def test_a_widening_write_names_the_type_change(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root, {"delta.enableTypeWidening": "true"})
    data = pa.table({"order_id": pa.array([9], pa.int64()), "quantity": pa.array([2**40], pa.int64())})
    res = append(root, data, merge_schema=True).to_dict()
    assert res["schema_changes"] == [{"change": "widened", "column": "quantity", "from": "integer", "to": "long"}]
    assert "reader_warnings" not in res  # the table had type widening from its creation
    _agrees_with_the_log(t, res)


def test_an_upsert_with_merge_schema_reports_added_and_widened_columns(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root, {"delta.enableTypeWidening": "true"})
    source = pa.table(
        {
            "order_id": pa.array([2, 3], pa.int64()),
            "quantity": pa.array([2**40, 1], pa.int64()),
            "address": pa.array([{"city": "Bern"}, {"city": "Graz"}]),
            "channel": ["web", "shop"],
        }
    )
    res = t.upsert(source, ["order_id"], merge_schema=True)
    assert res["operation"] == "MERGE"
    assert res["schema_changes"] == [
        {"change": "widened", "column": "quantity", "from": "integer", "to": "long"},
        {"change": "added", "column": "channel", "type": "string"},
    ]
    _agrees_with_the_log(t, res)


def test_change_column_type_reports_the_widening_and_warns_once_of_type_widening(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root)
    first = t.change_column_type("quantity", "BIGINT")
    assert first["schema_changes"] == [{"change": "widened", "column": "quantity", "from": "integer", "to": "long"}]
    _agrees_with_the_log(t, first)
    (warning,) = first["reader_warnings"]
    assert warning["feature"] == "typeWidening" and warning["readers"] == ["deltalake", "Polars"]
    assert warning["message"].startswith(
        "feature 'typeWidening' turned on: deltalake 1.6.6 cannot read it with to_pyarrow_table"
    )
    create_table(str(tmp_path / "n"), schema="a STRUCT<b: INT>")
    nested = DeltaTable(None, str(tmp_path / "n")).change_column_type("a.b", "DECIMAL(12,2)")
    assert nested["schema_changes"] == [
        {"change": "widened", "column": "a.b", "from": "integer", "to": "decimal(12,2)"}
    ]
    # a second widening: the feature was already on, nothing more to warn of
    second = t.change_column_type("quantity", "DECIMAL(22,0)")
    assert second["schema_changes"] == [
        {"change": "widened", "column": "quantity", "from": "long", "to": "decimal(22,0)"}
    ]
    assert "reader_warnings" not in second


def test_rename_and_drop_column_are_reported_by_the_column_ids(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root, {"delta.columnMapping.mode": "name"})
    renamed = t.rename_column("quantity", "qty")
    assert renamed["schema_changes"] == [{"change": "renamed", "column": "qty", "from": "quantity"}]
    _agrees_with_the_log(t, renamed)
    dropped = t.drop_column("address")
    assert dropped["schema_changes"] == [{"change": "dropped", "column": "address", "type": "struct<city:string>"}]
    _agrees_with_the_log(t, dropped)


def test_an_overwrite_with_a_new_schema_reports_every_difference(tmp_path):
    root = str(tmp_path / "t")
    t = _orders(root)
    data = pa.table({"order_id": pa.array(["a"]), "quantity": pa.array([1], pa.int64()), "note": ["x"]})
    res = overwrite(t.snapshot(), data, overwrite_schema=True).to_dict()
    assert res["schema_changes"] == [
        {"change": "retyped", "column": "order_id", "from": "long", "to": "string"},
        {"change": "widened", "column": "quantity", "from": "integer", "to": "long"},
        {"change": "added", "column": "note", "type": "string"},
        {"change": "dropped", "column": "address", "type": "struct<city:string>"},
    ]
    _agrees_with_the_log(t, res)


@pytest.mark.parametrize(
    "properties, features",
    [
        ({"delta.enableTypeWidening": "true"}, ["typeWidening"]),
        ({"delta.enableDeletionVectors": "true", "delta.checkpointPolicy": "v2"}, ["v2Checkpoint", "deletionVectors"]),
        ({"delta.enableRowTracking": "true"}, ["rowTracking"]),
        ({"delta.enableChangeDataFeed": "true", "delta.appendOnly": "true"}, []),
    ],
)
def test_a_create_and_a_property_change_warn_of_the_features_they_turn_on(tmp_path, properties, features):
    created = create_table(str(tmp_path / "c"), schema="id BIGINT", properties=properties).to_dict()
    assert [w["feature"] for w in created.get("reader_warnings", [])] == features
    create_table(str(tmp_path / "p"), schema="id BIGINT")
    changed = DeltaTable(None, str(tmp_path / "p")).set_properties(properties)
    assert [w["feature"] for w in changed.get("reader_warnings", [])] == features
    again = DeltaTable(None, str(tmp_path / "p")).set_properties({**properties, "delta.checkpointInterval": "7"})
    assert "reader_warnings" not in again  # already on


def test_the_schema_diff_walks_arrays_and_maps_and_matches_names_case_insensitively():
    old = StructType.from_json(
        {
            "type": "struct",
            "fields": [
                {"name": "Id", "type": "integer", "nullable": True, "metadata": {}},
                {
                    "name": "items",
                    "type": {
                        "type": "array",
                        "elementType": {
                            "type": "struct",
                            "fields": [{"name": "n", "type": "short", "nullable": True, "metadata": {}}],
                        },
                        "containsNull": True,
                    },
                    "nullable": True,
                    "metadata": {},
                },
                {
                    "name": "m",
                    "type": {"type": "map", "keyType": "string", "valueType": "float", "valueContainsNull": True},
                    "nullable": True,
                    "metadata": {},
                },
            ],
        }
    )
    new = StructType.from_json(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "integer", "nullable": True, "metadata": {}},
                {
                    "name": "items",
                    "type": {
                        "type": "array",
                        "elementType": {
                            "type": "struct",
                            "fields": [
                                {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
                                {"name": "tag", "type": "string", "nullable": True, "metadata": {}},
                            ],
                        },
                        "containsNull": True,
                    },
                    "nullable": True,
                    "metadata": {},
                },
                {
                    "name": "m",
                    "type": {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
                    "nullable": True,
                    "metadata": {},
                },
            ],
        }
    )
    assert schema_changes(old, new) == [
        {"change": "renamed", "column": "id", "from": "Id"},  # the same column (Delta resolves names so)
        {"change": "widened", "column": "items.element.n", "from": "short", "to": "integer"},
        {"change": "added", "column": "items.element.tag", "type": "string"},
        {"change": "widened", "column": "m.value", "from": "float", "to": "double"},
    ]
    assert schema_changes(old, old) == [] and schema_changes(None, new) == []


def test_a_commit_read_back_from_the_log_tells_the_same_as_its_result(tmp_path):
    """commit_changes (the watcher's events, a result recovered from the log) reads a commit in the log
    and finds what the commit's own result said, for commits of ours and of another writer."""
    import deltalake

    from airflow_delta_provider_apps.engine.log.commit_changes import commit_changes
    from airflow_delta_provider_apps.engine.storage import storage_for

    root = str(tmp_path / "t")
    t = _orders(root)
    storage = storage_for(root)
    results = [
        create_table(
            str(tmp_path / "w"), schema="id BIGINT", properties={"delta.enableTypeWidening": "true"}
        ).to_dict(),
        t.change_column_type("quantity", "BIGINT"),
        append(
            root, pa.table({"order_id": pa.array([7], pa.int64()), "channel": ["web"]}), merge_schema=True
        ).to_dict(),
        t.set_properties({"delta.enableDeletionVectors": "true"}),
        append(root, pa.table({"order_id": pa.array([8], pa.int64())})).to_dict(),  # changes nothing
    ]
    for r in results:
        expected = {k: r[k] for k in ("schema_changes", "reader_warnings") if k in r}
        assert commit_changes(storage_for(r["table_uri"]), r["table_uri"], r["version"]) == expected, r["operation"]
    assert commit_changes(storage, root, 99) == {}  # no such commit

    other = str(tmp_path / "other")  # a commit deltalake made: its schema evolution is found too
    deltalake.write_deltalake(other, pa.table({"id": pa.array([1], pa.int64())}))
    deltalake.write_deltalake(
        other, pa.table({"id": pa.array([2], pa.int64()), "note": ["x"]}), mode="append", schema_mode="merge"
    )
    assert commit_changes(storage_for(other), other, 1) == {
        "schema_changes": [{"change": "added", "column": "note", "type": "string"}]
    }


def test_a_commit_whose_version_before_was_cleaned_up_reports_nothing_instead_of_failing(tmp_path):
    """The watcher reads commits long after they landed: log cleanup may have removed the version
    before (a checkpoint at the commit's own version stands in for it)."""
    from airflow_delta_provider_apps.engine.log.commit_changes import commit_changes

    root = str(tmp_path / "t")
    create_table(root, schema="id INT")
    for i in range(3):
        append_arrow(root, pa.table({"id": pa.array([i], pa.int32())}))
    t = DeltaTable(None, root)
    t.change_column_type("id", "BIGINT")  # version 4
    t.checkpoint()
    for v in range(4):
        os.remove(os.path.join(root, "_delta_log", f"{v:020d}.json"))
    assert commit_changes(storage_for(root), root, 4) == {}
