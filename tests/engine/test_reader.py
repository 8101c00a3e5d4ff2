"""reader.py and dv.py: one data file -> Arrow table in the table schema; deletion vectors."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import uuid
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import dv as dvmod
from airflow_delta_provider_apps.engine.actions import DeletionVectorDescriptor
from airflow_delta_provider_apps.engine.errors import (
    DataFileMissingError,
    InvalidArgumentError,
    InvalidSchemaError,
    LogCorruptedError,
)
from airflow_delta_provider_apps.engine.paths import data_file_uri
from airflow_delta_provider_apps.engine.reader import read_data_file, read_files_batches
from airflow_delta_provider_apps.engine.schema import StructType, parse_ddl
from airflow_delta_provider_apps.engine.storage import LocalStorage

UTC = dt.UTC
STORAGE = LocalStorage()


def test_data_file_uri():
    assert data_file_uri("/t", "a=1/f.parquet") == "/t/a=1/f.parquet"
    assert data_file_uri("/t", "letter=%252F%252520%2525f/x.parquet") == "/t/letter=%2F%2520%25f/x.parquet"
    assert data_file_uri("/t", "data=😈/x.parquet") == "/t/data=😈/x.parquet"
    assert data_file_uri("/t", "file:/t/a%20b.parquet") == "/t/a b.parquet"
    assert data_file_uri("/t", "file:///t/x.parquet") == "/t/x.parquet"
    assert data_file_uri("s3://bucket/t", "s3://bucket/t/k/x%20y.parquet") == "s3://bucket/t/k/x y.parquet"
    assert data_file_uri("s3://bucket/t", "p=1/x.parquet") == "s3://bucket/t/p=1/x.parquet"


def _write(tmp_path, name, table, **kw):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, p, **kw)
    return name


def test_columns_by_name_case_missing_extra_and_partitions(tmp_path):
    schema = parse_ddl("id BIGINT, Name STRING, added DOUBLE, part DATE, p2 STRING")
    rel = _write(
        tmp_path,
        "part=2021-01-01/f 1.parquet",
        pa.table({"NAME": ["a", "b", None], "id": pa.array([1, 2, 3], pa.int32()), "junk": [0, 0, 0]}),
    )
    out = read_data_file(
        STORAGE, str(tmp_path), rel.replace(" ", "%20"), {"part": "2021-09-08", "p2": None}, schema, ["part", "p2"]
    )
    assert out.schema == pa.schema(
        [("id", pa.int64()), ("Name", pa.string()), ("added", pa.float64()), ("part", pa.date32()), ("p2", pa.string())]
    )
    assert out.to_pylist() == [
        {"id": i, "Name": n, "added": None, "part": dt.date(2021, 9, 8), "p2": None}
        for i, n in [(1, "a"), (2, "b"), (3, None)]
    ]
    # partition values come from the log, never from the directory name
    assert set(out.column("part").to_pylist()) == {dt.date(2021, 9, 8)}
    # subset, in the order asked
    sub = read_data_file(
        STORAGE,
        str(tmp_path),
        rel.replace(" ", "%20"),
        {"part": "2021-09-08"},
        schema,
        ["part", "p2"],
        columns=["part", "ID"],
    )
    assert sub.column_names == ["part", "id"] and sub.num_rows == 3
    # no columns at all: the row count survives (count(*))
    assert (
        read_data_file(STORAGE, str(tmp_path), rel.replace(" ", "%20"), {}, schema, ["part", "p2"], columns=[]).num_rows
        == 3
    )
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], columns=["nope"])


def test_timestamp_units_int96_and_zone_handling(tmp_path):
    schema = parse_ddl("a TIMESTAMP, b TIMESTAMP, c TIMESTAMP, n TIMESTAMP_NTZ, far TIMESTAMP")
    t0 = dt.datetime(2021, 9, 8, 11, 11, 11, 123456, tzinfo=UTC)
    far = dt.datetime(2900, 1, 1, tzinfo=UTC)  # outside the int64 nanosecond range
    data = pa.table(
        {
            "a": pa.array([t0], pa.timestamp("ns", tz="UTC")),
            "b": pa.array([t0.replace(microsecond=123000)], pa.timestamp("ms", tz="UTC")),
            "c": pa.array([t0.replace(tzinfo=None)], pa.timestamp("us")),  # zone-less in the file: UTC
            "n": pa.array([t0], pa.timestamp("us", tz="UTC")),
            "far": pa.array([far], pa.timestamp("us", tz="UTC")),
        }
    )
    rel = _write(tmp_path, "ts.parquet", data)
    out = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [])
    assert out.schema.field("a").type == pa.timestamp("us", tz="UTC")
    assert out.schema.field("n").type == pa.timestamp("us")
    row = out.to_pylist()[0]
    assert row["a"] == t0 and row["b"] == t0.replace(microsecond=123000) and row["c"] == t0
    assert row["n"] == t0.replace(tzinfo=None) and row["far"] == far
    # INT96 (legacy Spark) is read as microseconds, so far-away dates do not overflow
    rel96 = _write(tmp_path, "ts96.parquet", data.select(["a", "far"]), use_deprecated_int96_timestamps=True)
    row = read_data_file(STORAGE, str(tmp_path), rel96, {}, parse_ddl("a TIMESTAMP, far TIMESTAMP"), []).to_pylist()[0]
    assert row == {"a": t0, "far": far}


def test_widening_nested_structs_lists_maps(tmp_path):
    schema = parse_ddl(
        "i BIGINT, f DOUBLE, dec DECIMAL(10,2), "
        "s STRUCT<x: BIGINT, new: STRING, inner: STRUCT<y: INT>>, "
        "l ARRAY<STRUCT<v: BIGINT, w: STRING>>, m MAP<STRING, STRUCT<k: BIGINT>>"
    )
    st_t = pa.struct([("inner", pa.struct([("Y", pa.int16())])), ("x", pa.int8()), ("gone", pa.string())])
    data = pa.table(
        {
            "i": pa.array([1, None], pa.int16()),
            "f": pa.array([1.5, 2.0], pa.float32()),
            "dec": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(5, 2)),
            "s": pa.array([{"inner": {"Y": 3}, "x": 4, "gone": "g"}, None], st_t),
            "l": pa.array([[{"v": 1}], None], pa.large_list(pa.struct([("v", pa.int32())]))),
            "m": pa.array([[("a", {"k": 5})], None], pa.map_(pa.string(), pa.struct([("k", pa.int32())]))),
        }
    )
    rel = _write(tmp_path, "n.parquet", data)
    out = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [])
    assert out.schema.field("s").type == schema.field("s").type.to_arrow()
    assert out.schema.field("l").type.value_type == pa.struct([("v", pa.int64()), ("w", pa.string())])
    rows = out.to_pylist()
    assert rows[0]["i"] == 1 and rows[0]["f"] == 1.5 and str(rows[0]["dec"]) == "1.25"
    assert rows[0]["s"] == {"x": 4, "new": None, "inner": {"y": 3}}
    assert rows[1]["s"] is None and rows[1]["l"] is None and rows[1]["m"] is None
    assert rows[0]["l"] == [{"v": 1, "w": None}]
    assert rows[0]["m"] == [("a", {"k": 5})]


def test_incompatible_type_is_a_clear_error(tmp_path):
    rel = _write(tmp_path, "bad.parquet", pa.table({"a": ["x"]}))
    with pytest.raises(InvalidSchemaError) as e:
        read_data_file(STORAGE, str(tmp_path), rel, {}, parse_ddl("a INT"), [])
    assert "'a'" in e.value.problem and "string" in e.value.cause


def test_missing_file_error(tmp_path):
    with pytest.raises(DataFileMissingError) as e:
        read_data_file(STORAGE, str(tmp_path), "p=1/gone.parquet", {}, parse_ddl("a INT"), [])
    assert "p=1/gone.parquet" in e.value.problem
    assert "VACUUM" in e.value.cause and "time travel" in e.value.cause
    assert e.value.fix


def test_column_mapping_name_and_id(tmp_path):
    schema = StructType.from_json(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "a",
                    "type": "long",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-aaa"},
                },
                {
                    "name": "s",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {
                                "name": "b",
                                "type": "string",
                                "nullable": True,
                                "metadata": {
                                    "delta.columnMapping.id": 3,
                                    "delta.columnMapping.physicalName": "col-bbb",
                                },
                            }
                        ],
                    },
                    "nullable": True,
                    "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-sss"},
                },
                {
                    "name": "p",
                    "type": "integer",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-ppp"},
                },
            ],
        }
    )
    f = lambda name, t, fid: pa.field(name, t, metadata={b"PARQUET:field_id": str(fid).encode()})  # noqa: E731
    sch = pa.schema(
        [
            f("col-aaa", pa.int64(), 1),
            f("a", pa.int64(), 99),
            f("col-sss", pa.struct([f("col-bbb", pa.string(), 3)]), 2),
        ]
    )
    rel = _write(
        tmp_path, "cm.parquet", pa.table({"col-aaa": [1], "a": [-1], "col-sss": [{"col-bbb": "x"}]}, schema=sch)
    )
    out = read_data_file(STORAGE, str(tmp_path), rel, {"col-ppp": "7"}, schema, ["p"])  # mode inferred: name
    assert out.to_pylist() == [{"a": 1, "s": {"b": "x"}, "p": 7}]
    # id mode matches parquet field ids (here the same columns)
    out = read_data_file(STORAGE, str(tmp_path), rel, {"col-ppp": "7"}, schema, ["p"], column_mapping_mode="id")
    assert out.to_pylist() == [{"a": 1, "s": {"b": "x"}, "p": 7}]
    # without mapping the display name is used
    out = read_data_file(STORAGE, str(tmp_path), rel, {"p": "7"}, schema, ["p"], column_mapping_mode="none")
    assert out.to_pylist() == [{"a": -1, "s": None, "p": 7}]


# ------------------------------------------------------------------------------------------
# deletion vectors


def _roaring32(values: list[int], *, runs: bool = False) -> bytes:
    """Minimal portable RoaringBitmap writer for tests (array/bitmap containers, or all runs)."""
    by_key: dict[int, list[int]] = {}
    for v in sorted(set(values)):
        by_key.setdefault(v >> 16, []).append(v & 0xFFFF)
    keys = sorted(by_key)
    out = bytearray()
    if runs:
        out += struct.pack("<I", 12347 | ((len(keys) - 1) << 16))
        out += bytes([0xFF] * ((len(keys) + 7) // 8))
    else:
        out += struct.pack("<II", 12346, len(keys))
    for k in keys:
        out += struct.pack("<HH", k, len(by_key[k]) - 1)
    bodies = []
    for k in keys:
        lows = by_key[k]
        if runs:
            rs = []
            for v in lows:
                if rs and rs[-1][0] + rs[-1][1] + 1 == v:
                    rs[-1][1] += 1
                else:
                    rs.append([v, 0])
            bodies.append(struct.pack("<H", len(rs)) + b"".join(struct.pack("<HH", a, b) for a, b in rs))
        elif len(lows) <= 4096:
            bodies.append(np.array(lows, "<u2").tobytes())
        else:
            bits = np.zeros(65536, np.uint8)
            bits[lows] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    if not runs or len(keys) >= 4:
        off = len(out) + 4 * len(keys)
        for b in bodies:
            out += struct.pack("<I", off)
            off += len(b)
    for b in bodies:
        out += b
    return bytes(out)


def dv_bytes(rows: list[int], *, runs: bool = False) -> bytes:
    highs: dict[int, list[int]] = {}
    for r in rows:
        highs.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = struct.pack("<IQ", dvmod.MAGIC, len(highs))
    for h in sorted(highs):
        out += struct.pack("<I", h) + _roaring32(highs[h], runs=runs)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 200_000), max_size=300), st.booleans())
def test_property_bitmap_decoding(rows, runs):
    got = dvmod.decode_bitmap(dv_bytes(rows, runs=runs))
    assert got.tolist() == sorted(set(rows))


def test_bitmap_container_and_high_buckets():
    rows = list(range(0, 20000, 3)) + [2**32 + 5, 2**33 + 65536 * 2 + 1]
    assert dvmod.decode_bitmap(dv_bytes(rows)).tolist() == sorted(rows)
    with pytest.raises(LogCorruptedError, match="magic"):
        dvmod.decode_bitmap(b"\x00" * 16)


def test_z85_round_trip_and_uuid_path():
    data = bytes(range(256))[:64]
    assert dvmod.z85_decode(dvmod.z85_encode(data)) == data
    assert dvmod.z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"  # ZeroMQ RFC 32 test vector
    assert dvmod.z85_decode("HelloWorld") == bytes.fromhex("864FD26FB559F75B")
    u = uuid.uuid4()
    d = {
        "storageType": "u",
        "pathOrInlineDv": "ab" + dvmod.z85_encode(u.bytes),
        "offset": 1,
        "sizeInBytes": 1,
        "cardinality": 1,
    }
    assert dvmod.dv_file_path("/t", d) == f"/t/ab/deletion_vector_{u}.bin"
    d["pathOrInlineDv"] = dvmod.z85_encode(u.bytes)
    assert dvmod.dv_file_path("/t", d) == f"/t/deletion_vector_{u}.bin"


def test_read_with_inline_and_on_disk_dvs(tmp_path):
    schema = parse_ddl("v INT")
    rel = _write(tmp_path, "d.parquet", pa.table({"v": pa.array(range(10), pa.int32())}))
    payload = dv_bytes([0, 3, 9])
    payload += b"\x00" * (-len(payload) % 4)  # Z85 needs a multiple of 4; sizeInBytes cuts the padding
    inline = DeletionVectorDescriptor("i", dvmod.z85_encode(payload), len(dv_bytes([0, 3, 9])), 3)
    out = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=inline)
    assert out.column("v").to_pylist() == [1, 2, 4, 5, 6, 7, 8]
    # on disk: version byte, then (size BE, data, crc BE) per DV; the second DV at its offset
    u = uuid.uuid4()
    first, second = dv_bytes([1]), dv_bytes([2, 4])
    blob = b"\x01"
    offs = []
    for b in (first, second):
        offs.append(len(blob))
        blob += struct.pack(">i", len(b)) + b + struct.pack(">I", zlib.crc32(b))
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / f"deletion_vector_{u}.bin").write_bytes(blob)
    desc = {
        "storageType": "u",
        "pathOrInlineDv": "zz" + dvmod.z85_encode(u.bytes),
        "offset": offs[1],
        "sizeInBytes": len(second),
        "cardinality": 2,
    }
    out = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=desc)
    assert out.column("v").to_pylist() == [0, 1, 3, 5, 6, 7, 8, 9]
    # absolute path form 'p'
    pdesc = dict(
        desc,
        storageType="p",
        pathOrInlineDv=f"file://{tmp_path}/zz/deletion_vector_{u}.bin",
        offset=offs[0],
        sizeInBytes=len(first),
        cardinality=1,
    )
    assert read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=pdesc).num_rows == 9
    # corruption is detected: wrong cardinality, bad CRC, missing file
    with pytest.raises(LogCorruptedError, match="cardinality"):
        read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=dict(desc, cardinality=5))
    bad = bytearray(blob)
    bad[offs[1] + 10] ^= 0xFF
    (tmp_path / "zz" / f"deletion_vector_{u}.bin").write_bytes(bytes(bad))
    with pytest.raises(LogCorruptedError, match="CRC"):
        read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=desc)
    (tmp_path / "zz" / f"deletion_vector_{u}.bin").unlink()
    with pytest.raises(DataFileMissingError):
        read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=desc)


def test_read_files_batches_from_a_file_table(tmp_path):
    schema = parse_ddl("v INT, p STRING")
    a = _write(tmp_path, "p=x/a.parquet", pa.table({"v": pa.array([1, 2], pa.int32())}))
    b = _write(tmp_path, "p=y/b.parquet", pa.table({"v": pa.array([3], pa.int32())}))
    files = pa.table(
        {"path": [a, b], "partition_values": pa.array([[("p", "x")], [("p", None)]], pa.map_(pa.string(), pa.string()))}
    )
    parts = list(read_files_batches(STORAGE, str(tmp_path), files, schema, ["p"]))
    assert [t.to_pylist() for t in parts] == [[{"v": 1, "p": "x"}, {"v": 2, "p": "x"}], [{"v": 3, "p": None}]]


def test_bitmap_runs_stay_small_and_exact():
    # a contiguous range is one run container (CRoaring's run_optimize): inline in the log, not a file
    rows = np.concatenate([np.arange(1000, 150000, dtype=np.uint64), np.array([2**32 + 7], np.uint64)])
    data = dvmod.encode_bitmap(rows)
    assert len(data) <= dvmod.INLINE_MAX_BYTES
    assert dvmod.decode_bitmap(data).tolist() == rows.tolist()
    with pytest.raises(LogCorruptedError, match="RoaringBitmap"):
        dvmod.decode_bitmap(data[:-3])
