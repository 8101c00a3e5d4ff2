"""Nested values by name and nested type widening (issue 45 item 6), in this process.

* Struct fields given in another order (or another case) resolve by name, as delta-spark resolves them:
  in MERGE's ``*_all`` clauses and in an explicit set/values of a struct column, inside arrays and maps
  too, and in appends (Arrow's own cast matches names exactly and drops unknown fields silently: the
  append refuses them instead).
* A nested field the source leaves out: NULL with ``merge_schema``, else refused naming ``merge_schema``;
  a nested field the source adds: added to the table (nullable) with ``merge_schema``.
* Array elements and map keys and values widen on a type-widening table with ``merge_schema``, the change
  recorded on the enclosing field with the protocol's ``fieldPath``; old files read in the new type.

Every result is compared with rows computed here in plain Python and read back by deltalake or
DuckDB's delta_scan (which reads type widening).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from outside_readers import deltalake_table, duckdb_table

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import DeltaError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

XY = pa.struct([("x", pa.int32()), ("y", pa.string())])
YX = pa.struct([("y", pa.string()), ("x", pa.int32())])  # the same fields, in the other order


def _rows(root: str) -> list[dict]:
    return sorted(read_snapshot_table(DeltaTable(None, root).snapshot()).to_pylist(), key=lambda r: r["id"])


def _outside(read, root: str) -> list[dict]:
    return sorted(read(root).to_pylist(), key=lambda r: r["id"])


def _struct_table(root: str, **props) -> None:
    create_table(root, schema="id BIGINT, s STRUCT<x: INT, y: STRING>, a ARRAY<STRUCT<x: INT, y: STRING>>", **props)
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "s": pa.array([{"x": 1, "y": "a"}, {"x": 2, "y": "b"}], XY),
                "a": pa.array([[{"x": 1, "y": "a"}], None], pa.list_(XY)),
            }
        ),
    )


def _source() -> tuple[pa.Table, dict[int, dict]]:
    """A source whose structs list y before x (and in the array's elements), and its rows by id."""
    rows = {
        2: {"id": 2, "s": {"x": 20, "y": "B"}, "a": [{"x": 21, "y": "b2"}, None]},
        3: {"id": 3, "s": None, "a": [{"x": 3, "y": None}]},
    }
    table = pa.table(
        {
            "id": pa.array(list(rows), pa.int64()),
            "s": pa.array([r["s"] for r in rows.values()], YX),
            "a": pa.array([r["a"] for r in rows.values()], pa.list_(YX)),
        }
    )
    return table, rows


def _expected(updated: dict[int, dict]) -> list[dict]:
    """The table's rows after an upsert of ``updated`` (plain Python)."""
    before = {
        1: {"id": 1, "s": {"x": 1, "y": "a"}, "a": [{"x": 1, "y": "a"}]},
        2: {"id": 2, "s": {"x": 2, "y": "b"}, "a": None},
    }
    return [r for _, r in sorted({**before, **updated}.items())]


@pytest.mark.parametrize("clauses", ["all", "explicit"])
def test_merge_resolves_struct_fields_by_name(tmp_path, clauses):
    """``update_all``/``insert_all`` and an explicit set/values of the struct columns: the source's y-before-x
    structs land in the table's x, y fields, also inside the array's elements (Spark's positional cast
    would have swapped same-typed fields; here the types differ and it was refused)."""
    root = str(tmp_path / "t")
    _struct_table(root)
    source, rows = _source()
    merge = DeltaTable.for_path(None, root).merge(source, "target.id = source.id")
    if clauses == "all":
        merge = merge.when_matched_update_all().when_not_matched_insert_all()
    else:
        values = {"s": "source.s", "a": "source.a"}
        merge = merge.when_matched_update(values).when_not_matched_insert({"id": "source.id", **values})
    merge.execute()
    assert _rows(root) == _expected(rows)
    assert _outside(deltalake_table, root) == _expected(rows)
    assert DeltaTable(None, root).snapshot().schema.field("s").type.names == ["x", "y"]


def test_a_nested_field_the_source_leaves_out_needs_merge_schema(tmp_path):
    """Without ``merge_schema`` a struct lacking the table's field ``y`` is refused by name, nothing written;
    with it ``y`` is NULL in the updated and inserted rows, as delta-spark's schema evolution does."""
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, s STRUCT<x: INT, y: STRING>")
    append_arrow(root, pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array([{"x": 1, "y": "a"}] * 2, XY)}))
    source = pa.table(
        {"id": pa.array([2, 3], pa.int64()), "s": pa.array([{"x": 20}, {"x": 30}], pa.struct([("x", pa.int32())]))}
    )
    version = DeltaTable(None, root).version()
    with pytest.raises(DeltaError, match="no field 'y'.*merge_schema") as err:
        DeltaTable(None, root).upsert(source, ["id"])
    assert "merge_schema=True" in str(err.value)
    assert DeltaTable(None, root).version() == version
    DeltaTable(None, root).upsert(source, ["id"], merge_schema=True)
    want = [
        {"id": 1, "s": {"x": 1, "y": "a"}},
        {"id": 2, "s": {"x": 20, "y": None}},
        {"id": 3, "s": {"x": 30, "y": None}},
    ]
    assert _rows(root) == want == _outside(deltalake_table, root)


def test_a_nested_field_the_source_adds_is_added_with_merge_schema(tmp_path):
    """The source's struct has a new field ``z`` (and ``Y`` in another case, in another order): with
    ``merge_schema`` the table's struct gains ``z`` (nullable, at the end), old rows read NULL there."""
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, s STRUCT<x: INT, y: STRING>, m MAP<STRING, STRUCT<x: INT>>")
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "s": pa.array([{"x": 1, "y": "a"}], XY),
                "m": pa.array([[("k", {"x": 1})]], pa.map_(pa.string(), pa.struct([("x", pa.int32())]))),
            }
        ),
    )
    zyx = pa.struct([("z", pa.float64()), ("Y", pa.string()), ("x", pa.int32())])
    mv = pa.struct([("w", pa.string()), ("x", pa.int32())])
    source = pa.table(
        {
            "id": pa.array([2], pa.int64()),
            "s": pa.array([{"z": 1.5, "Y": "b", "x": 2}], zyx),
            "m": pa.array([[("k", {"w": "new", "x": 2})]], pa.map_(pa.string(), mv)),
        }
    )
    version = DeltaTable(None, root).version()
    with pytest.raises(DeltaError, match="in column 's': field 'z' is not in the table"):
        DeltaTable(None, root).upsert(source, ["id"])
    assert DeltaTable(None, root).version() == version
    DeltaTable(None, root).upsert(source, ["id"], merge_schema=True)
    schema = DeltaTable(None, root).snapshot().schema
    assert schema.field("s").type.simple_string() == "struct<x:int,y:string,z:double>"
    assert schema.field("m").type.simple_string() == "map<string,struct<x:int,w:string>>"
    want = [
        {"id": 1, "s": {"x": 1, "y": "a", "z": None}, "m": [("k", {"x": 1, "w": None})]},
        {"id": 2, "s": {"x": 2, "y": "b", "z": 1.5}, "m": [("k", {"x": 2, "w": "new"})]},
    ]
    assert _rows(root) == want == _outside(deltalake_table, root)


def test_appends_resolve_nested_fields_by_name_and_refuse_unknown_ones(tmp_path):
    """An in-process append: fields in another order and case land by name (Arrow's cast would have
    written NULL for ``X``); a field the table lacks is refused by name before anything is written
    (Arrow's cast would have dropped it); a leaf value out of range is named."""
    root = str(tmp_path / "t")
    _struct_table(root)
    upper = pa.struct([("Y", pa.string()), ("X", pa.int32())])
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "s": pa.array([{"Y": "c", "X": 3}], upper),
                "a": pa.array([[{"Y": "c", "X": 4}, None]], pa.list_(upper)),
            }
        ),
    )
    assert _rows(root)[-1] == {"id": 3, "s": {"x": 3, "y": "c"}, "a": [{"x": 4, "y": "c"}, None]}
    version = DeltaTable(None, root).version()
    extra = pa.struct([("x", pa.int32()), ("y", pa.string()), ("z", pa.int32())])
    with pytest.raises(DeltaError, match="field 's.z' is not in the table"):
        append_arrow(
            root, pa.table({"id": pa.array([4], pa.int64()), "s": pa.array([{"x": 1, "y": "d", "z": 9}], extra)})
        )
    wide = pa.struct([("x", pa.int64()), ("y", pa.string())])
    with pytest.raises(DeltaError, match="1099511627776"):
        append_arrow(root, pa.table({"id": pa.array([4], pa.int64()), "s": pa.array([{"x": 2**40, "y": "d"}], wide)}))
    assert DeltaTable(None, root).version() == version


def _widening_table(root: str) -> None:
    """Rows 1 and 2 in two files: the MERGEs below rewrite row 2's and leave row 1's file in the old types."""
    create_table(
        root,
        schema="id BIGINT, a ARRAY<INT>, m MAP<INT, FLOAT>, n ARRAY<MAP<STRING, DECIMAL(5,2)>>",
        properties={"delta.enableTypeWidening": "true"},
    )
    for i, a, m, n in (
        (1, [1, None], [(1, 1.5)], [[("k", 1)]]),
        (2, [2], None, None),
    ):
        row = {
            "id": pa.array([i], pa.int64()),
            "a": pa.array([a], pa.list_(pa.int32())),
            "m": pa.array([m], pa.map_(pa.int32(), pa.float32())),
            "n": pa.array([n], pa.list_(pa.map_(pa.string(), pa.decimal128(5, 2)))),
        }
        append_arrow(root, pa.table(row))


def test_array_elements_and_map_keys_and_values_widen_with_merge_schema(tmp_path):
    """A source with BIGINT elements, BIGINT keys and DOUBLE values, and a wider decimal two levels down:
    each widens in the one MERGE commit, recorded on the column with the protocol's ``fieldPath``; the
    old file's values read in the new types (by DuckDB's delta_scan too; delta-kernel-rs' Python wrapper
    cannot read an old file's narrower list elements yet: "Cannot cast list to non-list data types")."""
    import decimal

    root = str(tmp_path / "t")
    _widening_table(root)
    source = pa.table(
        {
            "id": pa.array([2, 3], pa.int64()),
            "a": pa.array([[2**40], None], pa.list_(pa.int64())),
            "m": pa.array([[(2**40, 0.1)], [(3, 3.0)]], pa.map_(pa.int64(), pa.float64())),
            "n": pa.array(
                [None, [[("q", decimal.Decimal("12345.678"))]]], pa.list_(pa.map_(pa.string(), pa.decimal128(8, 3)))
            ),
        }
    )
    res = DeltaTable(None, root).upsert(source, ["id"], merge_schema=True)
    assert {"change": "widened", "column": "m.key", "from": "integer", "to": "long"} in res["schema_changes"]
    schema = DeltaTable(None, root).snapshot().schema
    assert [schema.field(c).type.simple_string() for c in ("a", "m", "n")] == [
        "array<bigint>",
        "map<bigint,double>",
        "array<map<string,decimal(8,3)>>",
    ]
    assert schema.field("a").metadata["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    assert schema.field("m").metadata["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "key"},
        {"fromType": "float", "toType": "double", "fieldPath": "value"},
    ]
    assert schema.field("n").metadata["delta.typeChanges"] == [
        {"fromType": "decimal(5,2)", "toType": "decimal(8,3)", "fieldPath": "element.value"}
    ]
    want = [
        {"id": 1, "a": [1, None], "m": [(1, 1.5)], "n": [[("k", decimal.Decimal("1.000"))]]},
        {"id": 2, "a": [2**40], "m": [(2**40, 0.1)], "n": None},
        {"id": 3, "a": None, "m": [(3, 3.0)], "n": [[("q", decimal.Decimal("12345.678"))]]},
    ]
    assert _rows(root) == want
    assert _outside(duckdb_table, root) == want
    assert DeltaTable(None, root).version() == 3  # create, two appends, the one MERGE


def _set_a(root: str, source: pa.Table) -> None:
    DeltaTable.for_path(None, root).merge(source, "target.id = source.id").when_matched_update(
        {"a": "source.a"}
    ).execute()


def test_without_merge_schema_nested_values_are_cast_to_the_table_types(tmp_path):
    """No ``merge_schema``: the columns keep their types and the source's nested values are cast to them
    as an assignment is (fits: written; 2**40 into an INT element: refused, nothing written)."""
    root = str(tmp_path / "t")
    _widening_table(root)
    fits = pa.table({"id": pa.array([2], pa.int64()), "a": pa.array([[7]], pa.list_(pa.int64()))})
    _set_a(root, fits)
    assert DeltaTable(None, root).snapshot().schema.field("a").type.simple_string() == "array<int>"
    assert [r["a"] for r in _rows(root)] == [[1, None], [7]]
    version = DeltaTable(None, root).version()
    too_big = pa.table({"id": pa.array([2], pa.int64()), "a": pa.array([[2**40]], pa.list_(pa.int64()))})
    with pytest.raises(DeltaError, match="1099511627776"):
        _set_a(root, too_big)
    assert DeltaTable(None, root).version() == version


def test_update_assigns_a_struct_by_name(tmp_path):
    """UPDATE ``SET s = r``, ``r`` holding the same fields in the other order: by name, as delta-spark."""
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, s STRUCT<x: INT, y: STRING>, r STRUCT<y: STRING, x: INT>")
    append_arrow(
        root,
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "s": pa.array([None, {"x": 0, "y": "old"}], XY),
                "r": pa.array([{"y": "one", "x": 1}, None], YX),
            }
        ),
    )
    DeltaTable(None, root).update({"s": "r"})
    assert [r["s"] for r in _rows(root)] == [{"x": 1, "y": "one"}, None]


def test_appends_with_merge_schema_widen_array_elements_and_map_values():
    """The schema an append with ``merge_schema`` leaves on a type-widening table (the rule Spark's appends
    follow, :func:`check_write_compatible`): the element and the map value widened, recorded with their
    ``fieldPath``, and named ``a.element`` / ``m.value`` in the commit's schema changes."""
    from airflow_delta_provider_apps.engine.schema import StructType
    from airflow_delta_provider_apps.engine.schema.changes import schema_changes
    from airflow_delta_provider_apps.engine.schema.compat import check_write_compatible
    from airflow_delta_provider_apps.engine.schema.ddl import parse_schema

    table = parse_schema("id BIGINT, a ARRAY<SHORT>, m MAP<STRING, DATE>")
    data = StructType.from_arrow(
        pa.schema([("id", pa.int64()), ("a", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.timestamp("us")))])
    )
    after = check_write_compatible(table, data, merge_schema=True, widen=frozenset({"a", "m"}))
    assert [after.field(c).type.simple_string() for c in ("a", "m")] == ["array<int>", "map<string,timestamp_ntz>"]
    assert after.field("m").metadata["delta.typeChanges"] == [
        {"fromType": "date", "toType": "timestamp_ntz", "fieldPath": "value"}
    ]
    assert schema_changes(table, after) == [
        {"change": "widened", "column": "a.element", "from": "short", "to": "integer"},
        {"change": "widened", "column": "m.value", "from": "date", "to": "timestamp_ntz"},
    ]
    with pytest.raises(DeltaError, match="'a' has type array<int>"):  # without widening: refused
        check_write_compatible(table, data, merge_schema=True)


def test_appends_with_merge_schema_add_fields_of_structs_in_arrays_and_maps():
    """``merge_schema`` adds a new field of a struct held in an array or a map (nullable, at the end), as
    it does for a struct column; without it the field is refused by name."""
    from airflow_delta_provider_apps.engine.schema import StructType
    from airflow_delta_provider_apps.engine.schema.compat import check_write_compatible
    from airflow_delta_provider_apps.engine.schema.ddl import parse_schema

    table = parse_schema("a ARRAY<STRUCT<x: INT>>, m MAP<STRING, STRUCT<x: INT>>")
    zx = pa.struct([("z", pa.string()), ("x", pa.int32())])
    data = StructType.from_arrow(pa.schema([("a", pa.list_(zx)), ("m", pa.map_(pa.string(), zx))]))
    after = check_write_compatible(table, data, merge_schema=True)
    assert [f.type.simple_string() for f in after.fields] == [
        "array<struct<x:int,z:string>>",
        "map<string,struct<x:int,z:string>>",
    ]
    with pytest.raises(DeltaError, match="column 'a' has type array<struct<z:string,x:int>>"):
        check_write_compatible(table, data)
