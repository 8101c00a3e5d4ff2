"""Variant columns (``variantType``) in process: create, append, DELETE, UPDATE, MERGE and OPTIMIZE carry
each value's bytes unchanged; stats have a nullCount and no min/max; tables deltalake creates read and
take our writes. Values are encoded by Spark's own ``parse_json`` (pyspark's pure-Python VariantUtils,
no JVM); deltalake and delta-kernel-rs read the rows back (DuckDB 1.5's delta_scan refuses the
variant Arrow type, as its message says)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from outside_readers import deltalake_table, kernel_table

from airflow_delta_provider_apps.engine import DeltaTable, variant
from airflow_delta_provider_apps.engine.actions import Metadata, Protocol
from airflow_delta_provider_apps.engine.commands.write import append_arrow, write
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError, SchemaMismatchError, UnsupportedFeatureError
from airflow_delta_provider_apps.engine.features import check_write_supported, reader_warnings
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

VariantUtils = pytest.importorskip("pyspark.sql.variant_utils").VariantUtils
deltalake = pytest.importorskip("deltalake")

DOCS = {
    1: '{"kind": "order", "total": 12.5, "items": [{"sku": "a", "n": 2}]}',
    2: '{"kind": "refund", "total": -3, "note": null}',
    3: None,
    4: '"plain string"',
    5: '{"kind": "order", "total": 99, "nested": {"deep": [1, 2, {"x": true}]}}',
}


def _variants(docs: list[str | None]) -> pa.Array:
    """Spark's encoding of each JSON text (None: a SQL NULL)."""
    encoded = [None if d is None else VariantUtils.parse_json(d) for d in docs]
    return pa.array([None if e is None else {"value": e[0], "metadata": e[1]} for e in encoded], variant.arrow_type())


def _batch(ids: list[int], docs: dict = DOCS) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": _variants([docs[i] for i in ids])})


def _their_form(ids: list[int]) -> pa.Table:
    """The rows as deltalake takes a variant: ``struct<metadata, value>``, untagged."""
    v = _batch(ids).column("v").combine_chunks()
    fields = [pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)]
    struct = pa.StructArray.from_arrays([v.field("metadata"), v.field("value")], fields=fields)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": struct})


def _json_rows(table: pa.Table) -> dict:
    """{id: the value's JSON as Python} of a table read by any reader (variant struct in either field order)."""
    out = {}
    for r in table.to_pylist():
        v = r["v"]
        out[r["id"]] = None if v is None else json.loads(variant.to_json(v["value"], v["metadata"]))
    return out


def _bytes(table: pa.Table) -> dict:
    return {r["id"]: r["v"] and (r["v"]["value"], r["v"]["metadata"]) for r in table.to_pylist()}


def _ours(root: str) -> pa.Table:
    return read_snapshot_table(DeltaTable(None, root).snapshot())


def _expected(ids) -> dict:
    return {i: None if DOCS[i] is None else json.loads(DOCS[i]) for i in ids}


def test_create_append_dml_merge_optimize_carry_values_unchanged(tmp_path):
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, v VARIANT")
    snap = DeltaTable.for_path(None, root).snapshot()
    assert snap.protocol.reader_features == ["variantType"]
    assert "variantType" in snap.protocol.writer_features
    (warning,) = reader_warnings(None, snap.protocol)  # what the task log says when the feature turns on
    assert warning["message"] == "feature 'variantType' turned on: DuckDB 1.5.5 cannot read it with delta_scan"
    append_arrow(root, _batch([1, 2, 3]))
    append_arrow(root, _batch([4, 5]))
    original = _bytes(_batch([1, 2, 3, 4, 5]))
    assert _bytes(_ours(root)) == original  # bytes as written

    stats = [json.loads(s) for s in DeltaTable(None, root).snapshot().files.column("stats").to_pylist()]
    assert sorted(s["nullCount"]["v"] for s in stats) == [0, 1]
    assert all("v" not in s.get("minValues", {}) and "v" not in s.get("maxValues", {}) for s in stats)

    t = DeltaTable.for_path(None, root)
    t.delete("v:kind::string = 'refund'")  # a variant path: only row 2
    t.update({"id": "id + 100"}, "id = 4")
    source = pa.table({"id": pa.array([1, 6], pa.int64()), "v": _variants([DOCS[5], '{"new": [1]}'])})
    t.merge(source, "target.id = source.id").when_matched_update(
        {"v": "source.v"}
    ).when_not_matched_insert_all().execute()
    t.optimize()
    assert len(DeltaTable(None, root).snapshot().files) == 1

    want = {**_expected([3, 5]), 1: json.loads(DOCS[5]), 104: json.loads(DOCS[4]), 6: {"new": [1]}}
    assert _json_rows(_ours(root)) == want
    got = _bytes(_ours(root))
    assert got[104] == original[4] and got[3] is None and got[1] == original[5]  # carried unchanged
    assert _json_rows(deltalake_table(root)) == want
    assert _json_rows(kernel_table(root)) == want


def test_a_table_deltalake_creates_takes_our_writes_and_theirs(tmp_path):
    """deltalake creates and appends; we append (in its field order too), DELETE by a variant path, MERGE and
    OPTIMIZE; deltalake appends again; every reader reads the same values."""
    root = str(tmp_path / "t")
    schema = deltalake.Schema.from_json(
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
                ],
            }
        )
    )
    deltalake.DeltaTable.create(root, schema=schema)
    # deltalake writes the struct in the parquet order (metadata first): give it that form
    deltalake.write_deltalake(root, _their_form([1, 2]), mode="append")
    append_arrow(root, _batch([3]))
    append_arrow(root, _their_form([4]))  # their field order, appended by us: taken by name
    t = DeltaTable.for_path(None, root)
    t.delete("v:items[0].sku::string = 'a'")  # row 1, a file deltalake wrote
    source = pa.table({"id": pa.array([2, 8], pa.int64()), "v": _variants([DOCS[5], '"eight"'])})
    t.merge(source, "target.id = source.id").when_matched_update_all().when_not_matched_insert_all().execute()
    deltalake.write_deltalake(root, _their_form([2]).set_column(0, "id", pa.array([5], pa.int64())), mode="append")
    t.optimize()
    assert len(DeltaTable(None, root).snapshot().files) == 1
    want = {**_expected([3, 4]), 2: json.loads(DOCS[5]), 8: "eight", 5: json.loads(DOCS[2])}
    assert _json_rows(_ours(root)) == want
    assert _json_rows(deltalake_table(root)) == want
    assert _json_rows(kernel_table(root)) == want


def test_variant_columns_need_the_feature_and_are_no_partition_or_plain_struct(tmp_path):
    """The feature gate refuses a variant column in a protocol without variantType (every commit passes it);
    a variant is no partition column; a struct that is not a variant is refused for a variant column."""
    schema = json.dumps(
        {"type": "struct", "fields": [{"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}
    )
    with pytest.raises(UnsupportedFeatureError, match=r"variant columns \(v\).*'variantType'") as e:
        check_write_supported(Protocol(1, 2), Metadata(id="x", schema_string=schema))
    assert "delta.feature.variantType=supported" in e.value.fix
    check_write_supported(
        Protocol(3, 7, ["variantType-preview"], ["variantType-preview"]), Metadata(id="x", schema_string=schema)
    )
    with pytest.raises(InvalidArgumentError, match="Cannot partition by column 'v'"):
        DeltaTable.create(None, str(tmp_path / "p"), schema="id BIGINT, v VARIANT", partition_by=["v"])
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, v VARIANT")
    for data in (["not a variant"], pa.array([{"value": b"\x0c\x01"}])):
        with pytest.raises(SchemaMismatchError, match="Column 'v'") as e:
            append_arrow(root, pa.table({"id": pa.array([1], pa.int64()), "v": data}))
        assert e.value.fix
    assert len(DeltaTable(None, root).snapshot().files) == 0


def test_schema_evolution_that_adds_a_variant_column_turns_variant_type_on(tmp_path):
    """merge_schema adds a variant column: the same commit upgrades the protocol with variantType (as
    delta-spark enables it) and says which readers refuse it; kernel reads the rows."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": pa.array([0], pa.int64())}))
    result = write(root, _batch([1, 5]), merge_schema=True)
    assert result.fields["schema_changes"] == [{"change": "added", "column": "v", "type": "variant"}]
    assert [w["feature"] for w in result.fields["reader_warnings"]] == ["variantType"]
    protocol = DeltaTable(None, root).snapshot().protocol
    assert (protocol.min_reader_version, protocol.reader_features) == (3, ["variantType"])
    assert {"appendOnly", "invariants", "variantType"} == set(protocol.writer_features)
    assert _json_rows(kernel_table(root)) == {0: None, **_expected([1, 5])}


@pytest.mark.parametrize(
    "properties", [{"delta.columnMapping.mode": "name"}, {"delta.enableDeletionVectors": "true"}], ids=str
)
def test_update_sets_a_variant_from_a_path_and_to_null(tmp_path, properties):
    """UPDATE SET v = v:path (a variant's nested value, its bytes sliced out), n = v:path::int, v = NULL; on
    a column-mapped table and one with deletion vectors; kernel reads the same rows."""
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, v VARIANT, n INT", properties=properties)
    docs = {1: '{"a": {"b": 5, "c": [true]}}', 2: '{"a": 1}', 3: None}
    append_arrow(root, _batch([1, 2, 3], docs))
    t = DeltaTable.for_path(None, root)
    t.update({"v": "v:a", "n": "v:a.b::int"}, "id = 1")
    t.update({"v": "NULL"}, "id = 2")
    t.delete("v IS NULL AND id = 3")
    want = {1: ({"b": 5, "c": [True]}, 5), 2: (None, None)}
    for table in (_ours(root), kernel_table(root)):
        rows = _json_rows(table)
        assert {i: (rows[i], r["n"]) for i, r in ((r["id"], r) for r in table.to_pylist())} == want
