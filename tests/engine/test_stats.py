"""stats.py: per-file statistics JSON (shape, truncation, column selection, incremental) and
agreement with delta-rs (deltalake) both ways."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.schema import StructType, parse_ddl
from airflow_delta_provider_apps.engine.stats import (
    StatsCollector,
    collect_stats,
    parse_stats_columns,
    stats_config_from_properties,
    truncate_max_string,
)

UTC = dt.UTC


def _stats(schema, data, **kw):
    return json.loads(collect_stats(parse_ddl(schema) if isinstance(schema, str) else schema, data, **kw))


def test_basic_shape_and_types():
    schema = parse_ddl(
        "id BIGINT, s STRING, f DOUBLE, d DATE, ts TIMESTAMP, tn TIMESTAMP_NTZ, dec DECIMAL(5,2), "
        "b BINARY, bo BOOLEAN, l ARRAY<INT>, m MAP<STRING, INT>, i8 TINYINT, r FLOAT"
    )
    data = pa.table(
        {
            "id": pa.array([3, None, 1], pa.int64()),
            "s": ["b", "a", None],
            "f": [1.5, float("nan"), -2.25],
            "d": pa.array([dt.date(2020, 1, 2), None, dt.date(2021, 3, 4)]),
            "ts": pa.array(
                [
                    dt.datetime(2021, 1, 1, 0, 0, 0, 1500, tzinfo=UTC),
                    None,
                    dt.datetime(2020, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "tn": pa.array([dt.datetime(2021, 1, 1, 1, 2, 3, 456000), None, None], pa.timestamp("us")),
            "dec": pa.array([decimal.Decimal("1.23"), decimal.Decimal("-5.00"), None], pa.decimal128(5, 2)),
            "b": pa.array([b"x", None, b"y"]),
            "bo": [True, None, False],
            "l": pa.array([[1], None, []], pa.list_(pa.int32())),
            "m": pa.array([[("a", 1)], None, None], pa.map_(pa.string(), pa.int32())),
            "i8": pa.array([1, 2, 3], pa.int8()),
            "r": pa.array([0.1, 0.2, None], pa.float32()),
        }
    )
    raw = collect_stats(schema, data)
    s = json.loads(raw)
    assert s["numRecords"] == 3
    assert s["minValues"] == {
        "id": 1,
        "s": "a",
        "f": -2.25,
        "d": "2020-01-02",
        "ts": "2020-01-01T00:00:00.000Z",
        "tn": "2021-01-01T01:02:03.456",
        "dec": -5.0,
        "i8": 1,
        "r": 0.1,
    }
    # max timestamp 00:00:00.0015 is rounded UP to .002 (never below the true max)
    assert s["maxValues"] == {
        "id": 3,
        "s": "b",
        "f": 1.5,
        "d": "2021-03-04",
        "ts": "2021-01-01T00:00:00.002Z",
        "tn": "2021-01-01T01:02:03.456",
        "dec": 1.23,
        "i8": 3,
        "r": 0.2,
    }
    assert s["nullCount"] == {
        "id": 1,
        "s": 1,
        "f": 0,
        "d": 1,
        "ts": 1,
        "tn": 2,
        "dec": 1,
        "b": 1,
        "bo": 1,
        "l": 1,
        "m": 2,
        "i8": 0,
        "r": 1,
    }
    # decimals keep their scale as JSON numbers; floats their shortest float32 text; keys in schema order
    assert '"dec":-5.00' in raw and '"dec":1.23' in raw and '"r":0.1}' in raw
    assert list(s["nullCount"]) == schema.names


def test_all_null_and_empty_and_nan_columns():
    schema = parse_ddl("a INT, f DOUBLE, s STRUCT<x: INT, y: STRING>")
    data = pa.table(
        {
            "a": pa.array([None, None], pa.int32()),
            "f": [float("nan"), None],
            "s": pa.array([None, {"x": None, "y": None}], pa.struct([("x", pa.int32()), ("y", pa.string())])),
        }
    )
    s = _stats(schema, data)
    assert s == {"numRecords": 2, "nullCount": {"a": 2, "f": 1, "s": {"x": 2, "y": 2}}}
    empty = _stats(schema, data.slice(0, 0))
    assert empty == {"numRecords": 0, "nullCount": {"a": 0, "f": 0, "s": {"x": 0, "y": 0}}}


def test_infinite_bounds_are_omitted():
    s = _stats("f DOUBLE", pa.table({"f": [float("-inf"), 1.0, float("inf")]}))
    assert "minValues" not in s and "maxValues" not in s
    s = _stats("f DOUBLE", pa.table({"f": [1.0, float("inf")]}))
    assert s["minValues"] == {"f": 1.0} and "maxValues" not in s


def test_nested_structs_and_parent_nulls():
    schema = parse_ddl("st STRUCT<x: INT, inner: STRUCT<y: STRING, z: ARRAY<INT>>>")
    t = pa.struct([("x", pa.int32()), ("inner", pa.struct([("y", pa.string()), ("z", pa.list_(pa.int32()))]))])
    data = pa.table({"st": pa.array([{"x": 5, "inner": {"y": "q", "z": [1]}}, None, {"x": 2, "inner": None}], t)})
    s = _stats(schema, data)
    assert s["minValues"] == {"st": {"x": 2, "inner": {"y": "q"}}}
    assert s["maxValues"] == {"st": {"x": 5, "inner": {"y": "q"}}}
    # a null parent makes every field below it null
    assert s["nullCount"] == {"st": {"x": 1, "inner": {"y": 2, "z": 2}}}


def test_string_truncation_rules():
    assert truncate_max_string("abc", 32) == "abc"
    assert truncate_max_string("abcdef", 3) == "abc\ufffd"
    # characters >= U+FFFD after the prefix are kept before the tie-breaker (delta-spark)
    assert truncate_max_string("abc\ufffd\uffffx", 3) == "abc\ufffd\uffff\ufffd"
    assert truncate_max_string("abc😀x", 3) == "abc😀\ufffd"  # U+1F600 > U+FFFD in code-point/UTF-8 order
    long_a = "a" * 40
    long_b = "b" * 35 + "z"
    s = _stats("s STRING", pa.table({"s": [long_a, long_b, "b" * 32]}))
    assert s["minValues"]["s"] == "a" * 32
    assert s["maxValues"]["s"] == "b" * 32 + "\ufffd"
    for v in (long_a, long_b):
        assert s["minValues"]["s"] <= v <= s["maxValues"]["s"]
    # prefix counts characters, not bytes
    s = _stats("s STRING", pa.table({"s": ["é" * 40]}), string_prefix_length=4)
    assert s["minValues"]["s"] == "éééé" and s["maxValues"]["s"] == "éééé\ufffd"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=20), st.integers(1, 6))
def test_property_string_bounds_hold(values, prefix):
    s = _stats("s STRING", pa.table({"s": pa.array(values, pa.string())}), string_prefix_length=prefix)
    lo, hi = s["minValues"]["s"], s["maxValues"]["s"]
    for v in values:
        assert lo <= v <= hi  # code point order == UTF-8 byte order
        assert v.encode("utf-8", "surrogatepass") <= hi.encode("utf-8", "surrogatepass")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-62_135_596_800_000_000, 253_402_300_799_000_000), min_size=1, max_size=20))
def test_property_timestamp_bounds_hold(micros):
    arr = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    s = _stats("ts TIMESTAMP", pa.table({"ts": arr}))

    def ms_of(text):
        d = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        return (d - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(milliseconds=1)

    lo, hi = ms_of(s["minValues"]["ts"]), ms_of(s["maxValues"]["ts"])
    assert lo * 1000 <= min(micros) and hi * 1000 >= max(micros)
    assert min(micros) - lo * 1000 < 1000 and hi * 1000 - max(micros) < 1000


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), min_size=1, max_size=40),
    st.lists(st.integers(1, 39), max_size=4),
)
def test_property_incremental_equals_one_shot(values, cuts):
    schema = parse_ddl("a INT, s STRING, st STRUCT<b: INT>")
    data = pa.table(
        {
            "a": pa.array(values, pa.int32()),
            "s": pa.array([None if v is None else str(v) * 20 for v in values]),
            "st": pa.array([None if v is None else {"b": -v} for v in values], pa.struct([("b", pa.int32())])),
        }
    )
    one = collect_stats(schema, data)
    c = StatsCollector(schema)
    start = 0
    for cut in sorted(set(cuts)) + [len(values)]:
        cut = min(cut, len(values))
        if cut > start:
            c.update(
                data.slice(start, cut - start).to_batches()[0]
                if data.slice(start, cut - start).num_rows
                else data.slice(start, 0)
            )
            start = cut
    assert c.to_json() == one
    assert c.num_records == len(values)


def test_num_indexed_cols_and_stats_columns():
    schema = parse_ddl("a INT, s STRUCT<b: INT, c: INT, d: STRUCT<e: INT>>, f INT, g ARRAY<INT>")
    t = pa.struct([("b", pa.int32()), ("c", pa.int32()), ("d", pa.struct([("e", pa.int32())]))])
    data = pa.table(
        {
            "a": pa.array([1], pa.int32()),
            "s": pa.array([{"b": 2, "c": 3, "d": {"e": 4}}], t),
            "f": pa.array([5], pa.int32()),
            "g": pa.array([[1]], pa.list_(pa.int32())),
        }
    )
    assert _stats(schema, data, num_indexed_cols=0) == {"numRecords": 1}
    assert _stats(schema, data, num_indexed_cols=2)["nullCount"] == {"a": 0, "s": {"b": 0}}
    assert _stats(schema, data, num_indexed_cols=4)["minValues"] == {"a": 1, "s": {"b": 2, "c": 3, "d": {"e": 4}}}
    assert _stats(schema, data, num_indexed_cols=-1)["nullCount"] == {
        "a": 0,
        "s": {"b": 0, "c": 0, "d": {"e": 0}},
        "f": 0,
        "g": 0,
    }
    # dataSkippingStatsColumns wins, is case-insensitive, a struct means all its leaves
    s = _stats(schema, data, num_indexed_cols=1, stats_columns="F, S.d, `s`.B")
    assert s["minValues"] == {"s": {"b": 2, "d": {"e": 4}}, "f": 5}
    # partition columns never have stats
    assert "a" not in _stats(schema, data, partition_columns=["A"])["nullCount"]


def test_stats_config_from_properties():
    assert stats_config_from_properties({}) == {
        "num_indexed_cols": 32,
        "stats_columns": None,
        "column_mapping_mode": "none",
    }
    assert stats_config_from_properties({"delta.columnMapping.mode": "name"})["column_mapping_mode"] == "name"
    assert stats_config_from_properties({"delta.dataSkippingNumIndexedCols": "-1"})["num_indexed_cols"] == -1
    assert stats_config_from_properties({"delta.dataSkippingNumIndexedCols": "0"})["num_indexed_cols"] == 0
    conf = stats_config_from_properties(
        {"delta.dataSkippingNumIndexedCols": "3", "delta.dataSkippingStatsColumns": "a,b.`c.d`"}
    )
    assert conf["stats_columns"] == [("a",), ("b", "c.d")]
    with pytest.raises(InvalidArgumentError):
        stats_config_from_properties({"delta.dataSkippingNumIndexedCols": "many"})
    with pytest.raises(InvalidArgumentError):
        stats_config_from_properties({"delta.dataSkippingNumIndexedCols": "-2"})
    assert parse_stats_columns(" a , `we``ird`.x ") == [("a",), ("we`ird", "x")]
    assert parse_stats_columns(["date.`b,c`", ("x", "y")]) == [("date", "b,c"), ("x", "y")]
    with pytest.raises(InvalidArgumentError) as e:
        parse_stats_columns("a..b")
    assert "delta.dataSkippingStatsColumns 'a..b'" in str(e.value) and e.value.fix
    with pytest.raises(InvalidArgumentError, match="'true' is not a column name"):
        stats_config_from_properties({"delta.dataSkippingStatsColumns": "a, true"})


def test_missing_column_counts_as_all_null_and_case_insensitive_match():
    schema = parse_ddl("Id INT, added STRING")
    s = _stats(schema, pa.table({"ID": pa.array([1, 2], pa.int32())}))
    assert s["minValues"] == {"Id": 1} and s["nullCount"] == {"Id": 0, "added": 2}


def test_column_mapping_uses_physical_names_and_tight_bounds():
    schema = StructType.from_json(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "a",
                    "type": "integer",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1a"},
                }
            ],
        }
    )
    data = pa.table({"col-1a": pa.array([4], pa.int32())})
    s = _stats(schema, data, column_mapping_mode="name", tight_bounds=True)
    assert s == {
        "numRecords": 1,
        "minValues": {"col-1a": 4},
        "maxValues": {"col-1a": 4},
        "nullCount": {"col-1a": 0},
        "tightBounds": True,
    }


def test_out_of_range_timestamp_bound_is_omitted():
    arr = pa.array([-62_135_596_800_000_001, 0], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    s = _stats("ts TIMESTAMP", pa.table({"ts": arr}))
    assert "minValues" not in s and s["maxValues"] == {"ts": "1970-01-01T00:00:00.000Z"}


def test_dictionary_and_large_types():
    schema = parse_ddl("s STRING, t TIMESTAMP")
    data = pa.table(
        {
            "s": pa.array(["b", "a", "b"]).dictionary_encode(),
            "t": pa.array([1_000_000_999, 2_000_000_000], pa.timestamp("ns", tz="UTC")).take([0, 1, 0]),
        }
    )
    s = _stats(schema, data)
    assert s["minValues"] == {"s": "a", "t": "1970-01-01T00:00:01.000Z"}
    assert s["maxValues"] == {"s": "b", "t": "1970-01-01T00:00:02.000Z"}


# ------------------------------------------------------------------------------------------
# delta-rs interop


def _deltalake_table(tmp_path, data, **kw):
    deltalake = pytest.importorskip("deltalake")
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), data, **kw)
    log = root / "_delta_log" / "00000000000000000000.json"
    adds = [json.loads(line)["add"] for line in log.read_text(encoding="utf-8").splitlines() if '"add"' in line]
    return deltalake, root, log, adds


def _interop_data():
    return pa.table(
        {
            "id": pa.array([1, 2, None, 7], pa.int64()),
            "i": pa.array([-3, 4, 5, None], pa.int32()),
            "s": ["pear", "apple", None, "zebra"],
            "f": [1.5, -0.25, None, 3.0],
            "d": pa.array([dt.date(2020, 1, 2), None, dt.date(2021, 3, 4), dt.date(1999, 1, 1)]),
            "ts": pa.array(
                [
                    dt.datetime(2021, 1, 1, 1, 2, 3, 456000, tzinfo=UTC),
                    None,
                    dt.datetime(2020, 5, 1, tzinfo=UTC),
                    dt.datetime(2022, 1, 1, tzinfo=UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array(
                [decimal.Decimal("1.25"), decimal.Decimal("-5.50"), None, decimal.Decimal("0.00")], pa.decimal128(5, 2)
            ),
            "tn": pa.array(
                [dt.datetime(2021, 1, 1, 1, 2, 3, 456000), None, None, dt.datetime(1990, 1, 1)], pa.timestamp("us")
            ),
            "st": pa.array(
                [{"x": 1, "y": "q"}, None, {"x": None, "y": "z"}, {"x": 9, "y": None}],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
        }
    )


def test_our_stats_match_delta_rs(tmp_path):
    """Same data written by delta-rs: min/max/nullCount agree on every column where both follow the
    same rules (numbers, short strings, dates, ms timestamps, decimals, nested structs)."""
    data = _interop_data()
    deltalake, root, _, adds = _deltalake_table(tmp_path, data)
    assert len(adds) == 1
    theirs = json.loads(adds[0]["stats"])
    schema = StructType.from_json(deltalake.DeltaTable(str(root)).schema().to_json())
    ours = json.loads(collect_stats(schema, data))
    assert ours["numRecords"] == theirs["numRecords"] == 4
    assert ours["nullCount"] == theirs["nullCount"]
    for k in ("minValues", "maxValues"):
        assert ours[k].keys() == theirs[k].keys()
        for col, v in theirs[k].items():
            if col == "dec":
                assert decimal.Decimal(str(ours[k][col])) == decimal.Decimal(str(v))
            elif col in ("ts", "tn"):  # delta-rs drops ".000" and writes ntz with a space; we write
                # Spark's form: always milliseconds, 'T', 'Z' only for timestamp
                assert dt.datetime.fromisoformat(ours[k][col]) == dt.datetime.fromisoformat(v)
                assert len(ours[k][col]) == len("2020-05-01T00:00:00.000Z") - (col == "tn")
            else:
                assert ours[k][col] == v, (k, col)


def test_delta_rs_reads_our_stats(tmp_path):
    """Put our stats JSON into a delta-rs table's log: delta-rs parses it (add actions show our
    min/max) and its file skipping honours it."""
    data = _interop_data()
    deltalake, root, log, _ = _deltalake_table(tmp_path, data)
    schema = StructType.from_json(deltalake.DeltaTable(str(root)).schema().to_json())
    # sub-millisecond timestamp to see our rounded-up max survive parsing
    data = data.set_column(
        5,
        "ts",
        pa.array(
            [dt.datetime(2021, 1, 1, 1, 2, 3, 456789, tzinfo=UTC), None, None, None], pa.timestamp("us", tz="UTC")
        ),
    )
    ours = collect_stats(schema, data)
    lines = []
    for line in log.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        if "add" in obj:
            obj["add"]["stats"] = ours
        lines.append(json.dumps(obj, ensure_ascii=False))
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dtab = deltalake.DeltaTable(str(root))
    row = pa.table(dtab.get_add_actions(flatten=True)).to_pylist()[0]
    assert row["num_records"] == 4
    assert row["min.id"] == 1 and row["max.id"] == 7 and row["null_count.id"] == 1
    assert row["min.s"] == "apple" and row["max.s"] == "zebra"
    assert row["min.d"] == dt.date(1999, 1, 1) and row["max.d"] == dt.date(2021, 3, 4)
    assert row["min.dec"] == decimal.Decimal("-5.50") and row["max.dec"] == decimal.Decimal("1.25")
    assert row["min.st.x"] == 1 and row["max.st.y"] == "z" and row["null_count.st.x"] == 2
    assert row["min.tn"] == dt.datetime(1990, 1, 1) and row["max.tn"] == dt.datetime(2021, 1, 1, 1, 2, 3, 456000)
    ts_max = row["max.ts"]
    assert ts_max.replace(tzinfo=UTC) == dt.datetime(2021, 1, 1, 1, 2, 3, 457000, tzinfo=UTC)
    # skipping with our stats: a predicate outside [min, max] prunes the file, one inside keeps it
    import pyarrow.compute as pc

    ds = dtab.to_pyarrow_dataset()
    assert ds.to_table(filter=pc.field("id") > 100).num_rows == 0
    assert len(list(ds.get_fragments(filter=pc.field("id") > 100))) == 0
    assert len(list(ds.get_fragments(filter=pc.field("id") == 7))) == 1
