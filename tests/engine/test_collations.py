"""String collations (delta's "Collated String Type" RFC; Spark 4's ``collations-preview``), in process:
tables whose string fields carry ``__COLLATIONS`` metadata (built by hand, as Spark writes them) read,
are written with the metadata kept, and data skipping uses no min/max of a collated column (Spark
collects them in the collation's order, which binary skipping would misread); a schema with a
collation on a protocol without the feature is refused by name."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.actions import Metadata, Protocol
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError
from airflow_delta_provider_apps.engine.expr import parse_predicate
from airflow_delta_provider_apps.engine.expr.skipping import skip_files
from airflow_delta_provider_apps.engine.features import check_write_supported, protocol_for_new_table
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.schema.collations import collated_columns, non_binary_collation

LCASE = {"__COLLATIONS": {"name": "spark.UTF8_LCASE"}}
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": LCASE},
        {"name": "code", "type": "string", "nullable": True, "metadata": {}},
        {
            "name": "tags",
            "type": {"type": "array", "elementType": "string", "containsNull": True},
            "nullable": True,
            "metadata": {"__COLLATIONS": {"tags.element": "ICU.de_DE"}},
        },
    ],
}


def _batch(ids, names) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": names,
            "code": names,
            "tags": pa.array([[n] for n in names], pa.list_(pa.string())),
        }
    )


def _spark_ordered_stats(root) -> None:
    """Rewrite each add's name min/max in UTF8_LCASE order, as Spark collects a collated column's stats."""
    log = root / "_delta_log"
    for commit in sorted(log.glob("*.json")):
        actions = [json.loads(x) for x in commit.read_text().splitlines()]
        for a in actions:
            if "add" in a and a["add"].get("stats"):
                stats = json.loads(a["add"]["stats"])
                values = sorted({stats["minValues"]["name"], stats["maxValues"]["name"]}, key=str.lower)
                stats["minValues"]["name"], stats["maxValues"]["name"] = values[0], values[-1]
                a["add"]["stats"] = json.dumps(stats)
        commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_collated_table_is_created_written_and_read_with_its_metadata(tmp_path):
    root = tmp_path / "t"
    DeltaTable.create(None, str(root), schema=json.dumps(SCHEMA))
    snap = DeltaTable.for_path(None, str(root)).snapshot()
    assert {"collations", "domainMetadata"} <= set(snap.protocol.writer_features)
    append_arrow(str(root), _batch([1, 2], ["a", "Z"]))
    append_arrow(str(root), _batch([3], ["m"]))
    snap = DeltaTable.for_path(None, str(root)).snapshot()
    assert snap.schema.to_json() == SCHEMA  # metadata kept verbatim
    assert collated_columns(snap.schema) == ["name", "tags"]
    assert non_binary_collation(snap.schema.field("name")) == "spark.UTF8_LCASE"
    assert non_binary_collation(snap.schema.field("code")) is None
    got = sorted((r["id"], r["name"], r["tags"]) for r in read_snapshot_table(snap).to_pylist())
    assert got == [(1, "a", ["a"]), (2, "Z", ["Z"]), (3, "m", ["m"])]


def test_skipping_uses_no_min_max_of_a_collated_column(tmp_path):
    """Two files: [a, Z] and [m]. With Spark's UTF8_LCASE-ordered stats (min 'a', max 'Z') binary
    skipping would drop the first file for name = 'Z' ('a' > 'Z' in bytes): every file is kept for the
    collated column, and a DELETE finds its row; the binary column ``code`` still skips."""
    root = tmp_path / "t"
    DeltaTable.create(None, str(root), schema=json.dumps(SCHEMA))
    append_arrow(str(root), _batch([1, 2], ["a", "Z"]))
    append_arrow(str(root), _batch([3], ["m"]))
    _spark_ordered_stats(root)
    snap = DeltaTable.for_path(None, str(root)).snapshot()

    def kept(text: str) -> int:
        return skip_files(snap.files, snap.schema, [], parse_predicate(text, snap.schema)).files.num_rows

    assert kept("name = 'Z'") == 2
    assert kept("name > 'x'") == 2
    assert kept("code = 'm'") == 1  # binary: its min/max used
    assert kept("name IS NULL") == 0  # null counts still used
    DeltaTable.for_path(None, str(root)).delete("name = 'Z'")
    rows = read_snapshot_table(DeltaTable.for_path(None, str(root)).snapshot()).to_pylist()
    assert sorted(r["id"] for r in rows) == [1, 3]


def test_a_collation_needs_its_feature():
    """A Spark table (collations-preview) is written to; a collated schema on a protocol without either
    feature is refused by name; a binary collation (UTF8_BINARY) needs nothing."""
    md = Metadata(id="x", schema_string=json.dumps(SCHEMA))
    check_write_supported(Protocol(1, 7, writer_features=["collations-preview", "domainMetadata"]), md)
    with pytest.raises(UnsupportedFeatureError, match=r"collated string columns \(name, tags\)") as e:
        check_write_supported(Protocol(1, 7, writer_features=["appendOnly", "invariants"]), md)
    assert "delta.feature.collations=supported" in e.value.fix
    binary = {
        "type": "struct",
        "fields": [{**SCHEMA["fields"][1], "metadata": {"__COLLATIONS": {"name": "spark.UTF8_BINARY"}}}],
    }
    check_write_supported(Protocol(1, 2), Metadata(id="x", schema_string=json.dumps(binary)))
    assert protocol_for_new_table(binary) == Protocol(1, 2)


def test_ddl_collate_is_stored_as_spark_stores_it():
    """``COLLATE`` in DDL gives the metadata pyspark 4's ``StructType.json()`` writes for the same
    columns (spark. for UTF8_*, icu. for the rest; UTF8_BINARY writes nothing); a bad name or a
    COLLATE on a non-string column is refused naming the column."""
    from airflow_delta_provider_apps.engine.errors import InvalidSchemaError
    from airflow_delta_provider_apps.engine.schema import parse_ddl

    got = parse_ddl(
        "m STRING COLLATE UTF8_LCASE, n STRING COLLATE UNICODE_CI, d STRING COLLATE 'de_CI', b STRING COLLATE UTF8_BINARY"
    )
    assert [f.metadata for f in got.fields] == [
        {"__COLLATIONS": {"m": "spark.UTF8_LCASE"}},
        {"__COLLATIONS": {"n": "icu.UNICODE_CI"}},
        {"__COLLATIONS": {"d": "icu.de_CI"}},
        {},
    ]
    with pytest.raises(InvalidSchemaError, match="Column 'x': 'a b' is not a collation name"):
        parse_ddl("x STRING COLLATE 'a b'")
    with pytest.raises(InvalidSchemaError, match="Column 'y' has a clause .*COLLATE UTF8_LCASE"):
        parse_ddl("y INT COLLATE UTF8_LCASE")
