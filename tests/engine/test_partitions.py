"""partitions.py: value <-> string serialisation, vectorised parsing, hive escaping, add.path encoding."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.partitions import (
    HIVE_DEFAULT_PARTITION,
    decode_add_path,
    encode_add_path,
    hive_escape,
    hive_unescape,
    parse_partition_value,
    partition_column_array,
    partition_path,
    serialize_partition_value,
)
from airflow_delta_provider_apps.engine.schema import DecimalType

UTC = dt.UTC


@pytest.mark.parametrize(
    "value,type_,expected",
    [
        (None, "long", None),
        ("abc", "string", "abc"),
        ("", "string", None),
        (" a ", "string", " a "),
        (0, "integer", "0"),
        (-12, "long", "-12"),
        (127, "byte", "127"),
        (3, "short", "3"),
        (0.0, "double", "0.0"),
        (1.0, "double", "1.0"),
        (-0.0, "double", "-0.0"),
        (1.5, "float", "1.5"),
        (0.1, "float", "0.1"),
        (1e20, "double", "1.0E20"),
        (1e-5, "double", "1.0E-5"),
        (123456789.0, "double", "1.23456789E8"),
        (1234567.0, "double", "1234567.0"),
        (0.001, "double", "0.001"),
        (float("nan"), "double", "NaN"),
        (float("inf"), "double", "Infinity"),
        (float("-inf"), "float", "-Infinity"),
        (True, "boolean", "true"),
        (False, "boolean", "false"),
        (dt.date(2021, 9, 8), "date", "2021-09-08"),
        (dt.date(1, 1, 1), "date", "0001-01-01"),
        (dt.datetime(2021, 1, 1, 1, 2, 3, 456789, tzinfo=UTC), "timestamp", "2021-01-01T01:02:03.456789Z"),
        (
            dt.datetime(2021, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "timestamp",
            "2020-12-31T22:00:00.000000Z",
        ),
        (dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "timestamp", "1969-12-31T23:59:59.999999Z"),
        (dt.datetime(2021, 1, 1, 1, 2, 3, 450000), "timestamp_ntz", "2021-01-01 01:02:03.45"),
        (dt.datetime(2021, 1, 1), "timestamp_ntz", "2021-01-01 00:00:00"),
        (decimal.Decimal("1.5"), DecimalType(10, 2), "1.50"),
        (decimal.Decimal("-0.001"), DecimalType(5, 3), "-0.001"),
        (decimal.Decimal("1E+3"), DecimalType(10, 0), "1000"),
        (b"hello", "binary", "hello"),
        ("😈".encode(), "binary", "😈"),
    ],
)
def test_serialize(value, type_, expected):
    assert serialize_partition_value(value, type_) == expected


def test_serialize_arrow_scalars():
    ts = pa.scalar(1_500_000, pa.timestamp("ns", tz="UTC"))
    assert serialize_partition_value(ts, "timestamp") == "1970-01-01T00:00:00.001500Z"
    assert serialize_partition_value(pa.scalar(None, pa.int64()), "long") is None
    assert serialize_partition_value(pa.scalar(7, pa.int8()), "byte") == "7"


def test_serialize_errors():
    with pytest.raises(InvalidArgumentError, match="UTF-8"):
        serialize_partition_value(b"\xff\xfe", "binary")
    with pytest.raises(InvalidArgumentError, match="not an integer"):
        serialize_partition_value("x", "long")
    with pytest.raises(InvalidArgumentError, match="Cannot partition"):
        serialize_partition_value([1], {"type": "array", "elementType": "long", "containsNull": True})


def test_partition_column_array_types():
    def parse(values, t):
        return partition_column_array(pa.array(values, pa.string()), t).to_pylist()

    assert parse(["1", None, "", "-5"], "integer") == [1, None, None, -5]
    assert partition_column_array(pa.array(["1"]), "integer").type == pa.int32()
    assert parse(["0.0", "NaN", "Infinity", "-Infinity", "1.0E20"], "double")[2:] == [math.inf, -math.inf, 1e20]
    assert math.isnan(parse(["NaN"], "double")[0])
    assert parse(["true", "false", "TRUE", None], "boolean") == [True, False, True, None]
    assert parse(["2021-09-08", "2021-09-08 00:00:00", ""], "date") == [dt.date(2021, 9, 8)] * 2 + [None]
    assert parse(["1.50", "-3", "0"], DecimalType(10, 2)) == [
        decimal.Decimal("1.50"),
        decimal.Decimal("-3.00"),
        decimal.Decimal("0.00"),
    ]
    assert parse(["1.005"], DecimalType(10, 2)) == [decimal.Decimal("1.01")]  # half-up like Spark's cast
    assert parse(["hello", "😈"], "binary") == [b"hello", "😈".encode()]
    assert parse(["null", ""], "string") == ["null", None]  # the literal string 'null' is not null
    assert partition_column_array(pa.array(["x"]), "void").type == pa.null()


def test_partition_timestamps_both_forms_and_zone_less_is_utc():
    vals = [
        "2021-01-01T01:02:03.456789Z",
        "2021-01-01 01:02:03.456789",
        "2021-01-01 01:02:03",
        "2021-01-01T03:02:03+02:00",
        "2021-01-01",
        None,
        "",
    ]
    arr = partition_column_array(pa.array(vals, pa.string()), "timestamp")
    assert arr.type == pa.timestamp("us", tz="UTC")
    got = arr.to_pylist()
    assert got[0] == got[1] == dt.datetime(2021, 1, 1, 1, 2, 3, 456789, tzinfo=UTC)
    assert got[2] == got[3] == dt.datetime(2021, 1, 1, 1, 2, 3, tzinfo=UTC)
    assert got[4] == dt.datetime(2021, 1, 1, tzinfo=UTC)
    assert got[5:] == [None, None]
    ntz = partition_column_array(pa.array(["2021-01-01 01:02:03.5", "2021-01-01T00:00:00"]), "timestamp_ntz")
    assert ntz.type == pa.timestamp("us")
    assert ntz.to_pylist() == [dt.datetime(2021, 1, 1, 1, 2, 3, 500000), dt.datetime(2021, 1, 1)]


def test_partition_column_array_repeat_single_value():
    a = partition_column_array("7", "long", length=4)
    assert a.to_pylist() == [7] * 4 and a.type == pa.int64()
    n = partition_column_array(None, "date", length=3)
    assert n.to_pylist() == [None] * 3 and n.type == pa.date32()
    assert partition_column_array("", "string", length=2).to_pylist() == [None, None]
    assert len(partition_column_array("1", "long", length=0)) == 0


def test_partition_column_array_errors_name_the_value():
    with pytest.raises(InvalidArgumentError) as e:
        partition_column_array(pa.array(["1", "abc"]), "long")
    assert "'abc'" in e.value.problem
    with pytest.raises(InvalidArgumentError, match="'300'"):
        partition_column_array("300", "byte", length=2)
    with pytest.raises(InvalidArgumentError):
        partition_column_array(pa.array(["maybe"]), "boolean")


def test_hive_escape_character_set():
    # Spark's ExternalCatalogUtils.escapePathName set (non-Windows), plus NUL as Hive escapes it
    special = [chr(c) for c in range(0, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^")
    for c in special:
        assert hive_escape(c) == f"%{ord(c):02X}", repr(c)
    for c in " <>|!@$&()+,;-._~`}abcXYZ09é😈":
        assert hive_escape(c) == c, repr(c)
    assert hive_escape(None) == hive_escape("") == HIVE_DEFAULT_PARTITION
    assert hive_unescape(HIVE_DEFAULT_PARTITION) is None
    assert hive_unescape("a%2Fb%zz%4") == "a/b%zz%4"  # malformed escapes are kept as is


def test_dat_multi_partitioned_paths(conformance_root):
    # value '/%20%f' -> dir 'letter=%2F%2520%25f' -> add.path 'letter=%252F%252520%2525f/...'
    d = partition_path(["letter", "date", "data"], {"letter": "/%20%f", "date": "1970-01-01", "data": "hello"})
    assert d == "letter=%2F%2520%25f/date=1970-01-01/data=hello"
    name = "part-00000-a29a3f63-5a26-4127-aeff-e6d27c077917.c000.snappy.parquet"
    enc = encode_add_path(d + "/" + name)
    assert enc == "letter=%252F%252520%2525f/date=1970-01-01/data=hello/" + name
    # exactly what the DAT log holds, and the decoded path is the file on disk
    root = conformance_root / "dat" / "multi_partitioned" / "delta"
    log = (root / "_delta_log" / "00000000000000000002.json").read_text(encoding="utf-8")
    assert f'"path":"{enc}"' in log
    assert (root / decode_add_path(enc)).is_file()
    # emoji (binary partition value) stays raw in add.path, as java.net.URI keeps non-ASCII letters
    emoji = partition_path(["letter", "date", "data"], {"letter": "b", "date": "1970-01-01", "data": "😈"})
    assert encode_add_path(emoji) == "letter=b/date=1970-01-01/data=😈"
    assert partition_path(["a", "b"], {"a": None}) == f"a={HIVE_DEFAULT_PARTITION}/b={HIVE_DEFAULT_PARTITION}"


def test_encode_add_path_uri_rules():
    assert encode_add_path("a b/c%d") == "a%20b/c%25d"
    assert encode_add_path("x=1/part-0.parquet") == "x=1/part-0.parquet"
    assert encode_add_path('k=a"b<c>{d}|e^f`g\\h#i?j[k]') == "k=a%22b%3Cc%3E%7Bd%7D%7Ce%5Ef%60g%5Ch%23i%3Fj%5Bk%5D"
    assert encode_add_path("k=\u00a0\t") == "k=%C2%A0%09"  # non-ASCII space and controls are quoted
    assert decode_add_path("test%25file%25prefix-part.parquet") == "test%file%prefix-part.parquet"


# ------------------------------------------------------------------------------------------
# property tests: round trips

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_property_hive_escape_round_trip(s):
    esc = hive_escape(s)
    assert "/" not in esc and "=" not in esc
    assert hive_unescape(esc) == s


@settings(max_examples=300, deadline=None)
@given(st.lists(_text, min_size=1, max_size=4))
def test_property_add_path_round_trip(parts):
    rel = "/".join(parts)
    enc = encode_add_path(rel)
    assert decode_add_path(enc) == rel
    # the encoded form never contains characters a URI forbids
    assert not any(c in enc for c in ' "<>\\^`{|}#?[]')


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), _text), min_size=1, max_size=3))
def test_property_partition_path_parses_back(values):
    cols = [f"c{i}" for i in range(len(values))]
    path = partition_path(cols, dict(zip(cols, values)))
    back = [hive_unescape(seg.split("=", 1)[1]) for seg in path.split("/")]
    assert back == [v if v != "" else None for v in values]


def _round_trip(value, t):
    s = serialize_partition_value(value, t)
    assert s is None or isinstance(s, str)
    return parse_partition_value(s, t)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-32768, 32767),
    st.integers(-128, 127),
)
def test_property_integer_round_trip(n, i, s, b):
    assert _round_trip(n, "long") == n and _round_trip(i, "integer") == i
    assert _round_trip(s, "short") == s and _round_trip(b, "byte") == b


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_property_double_round_trip(x):
    y = _round_trip(x, "double")
    assert (math.isnan(x) and math.isnan(y)) or (y == x and math.copysign(1, y) == math.copysign(1, x))


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False))
def test_property_float_round_trip(x):
    assert _round_trip(x, "float") == x
    # the text is the shortest that identifies the float32 (no double noise like 0.10000000149)
    s = serialize_partition_value(x, "float")
    assert len(s.replace("-", "").replace("E", "")) <= 16


@settings(max_examples=200, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**8), max_value=10**8))
def test_property_decimal_round_trip(d):
    t = DecimalType(12, 3)
    assert _round_trip(d, t) == d


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_property_timestamp_round_trip(ts):
    assert _round_trip(ts, "timestamp") == ts
    assert _round_trip(ts.replace(tzinfo=None), "timestamp_ntz") == ts.replace(tzinfo=None)


@settings(max_examples=100, deadline=None)
@given(st.dates(), st.booleans(), _text)
def test_property_misc_round_trip(d, b, s):
    assert _round_trip(d, "date") == d
    assert _round_trip(b, "boolean") is b
    assert _round_trip(s, "string") == s
    assert _round_trip(s.encode("utf-8"), "binary") == s.encode("utf-8")


# ------------------------------------------------------------------------------------------
# interop with delta-rs


def test_deltalake_reads_our_timestamp_partition_form(tmp_path):
    """delta-rs writes 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC); it reads our ISO 'Z' form to the same instants."""
    deltalake = pytest.importorskip("deltalake")
    ts = [dt.datetime(2021, 1, 1, 1, 2, 3, 456789, tzinfo=UTC), dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)]
    t = pa.table({"id": [1, 2], "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))})
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), t, partition_by=["ts"])
    log = root / "_delta_log" / "00000000000000000000.json"
    lines = []
    theirs = []
    for line in log.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        if "add" in obj:
            v = obj["add"]["partitionValues"]["ts"]
            theirs.append(v)
            # delta-rs' form parses to the right instant with our parser too
            parsed = parse_partition_value(v, "timestamp")
            assert parsed in ts
            obj["add"]["partitionValues"]["ts"] = serialize_partition_value(parsed, "timestamp")
            assert obj["add"]["partitionValues"]["ts"].endswith("Z")
            # data file paths written by delta-rs decode to files on disk
            assert (root / decode_add_path(obj["add"]["path"])).is_file()
        lines.append(json.dumps(obj))
    assert all(" " in v and "Z" not in v for v in theirs)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = pa.table(deltalake.DeltaTable(str(root)).to_pyarrow_table()).sort_by("id")
    assert got.column("ts").to_pylist() == ts


def test_deltalake_escaped_partition_values_read_back(tmp_path):
    """A table written by delta-rs with awkward string partition values: our decoding of its add.path
    finds the files and its partitionValues strings are the raw values."""
    deltalake = pytest.importorskip("deltalake")
    vals = ["a/b", "x y", "50%", "é=1", "q?#"]
    t = pa.table({"id": list(range(len(vals))), "p": vals})
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), t, partition_by=["p"])
    seen = {}
    for line in (root / "_delta_log" / "00000000000000000000.json").read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        if "add" in obj:
            seen[obj["add"]["partitionValues"]["p"]] = obj["add"]["path"]
    assert set(seen) == set(vals)
    for p in seen.values():
        assert (root / decode_add_path(p)).is_file(), p
    # and our own layout of the same values yields valid, distinct, decodable paths
    ours = {v: encode_add_path(partition_path(["p"], {"p": v}) + "/f.parquet") for v in vals}
    assert len(set(ours.values())) == len(vals)
    for v, p in ours.items():
        seg = decode_add_path(p).split("/")[0]
        assert hive_unescape(seg.split("=", 1)[1]) == v
