"""reader.iter_data_file_batches: streaming one data file row group by row group.

Every result is checked against rows computed independently of the reader (the generated data, or
pyarrow's whole-file read with the deletion vector applied by numpy), for several ``batch_rows``
(1, odd sizes that straddle row groups, one row group, larger than the file), and
``read_data_file`` (the concatenated stream) must give the same table.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import uuid
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_reader import dv_bytes  # the test-side RoaringBitmap writer

from airflow_delta_provider_apps.engine import dv as dvmod
from airflow_delta_provider_apps.engine.errors import DataFileMissingError, InvalidArgumentError
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import ROW_INDEX, iter_data_file_batches, read_data_file
from airflow_delta_provider_apps.engine.schema import StructType, parse_ddl
from airflow_delta_provider_apps.engine.storage import LocalStorage, storage_for

UTC = dt.UTC
STORAGE = LocalStorage()
N = 1000
ROW_GROUP = 128  # -> 8 row groups (7 x 128 + 104)
BATCHES = [1, 7, 100, ROW_GROUP, 300, 5000]


def _write(tmp_path, name, table, row_group_size=ROW_GROUP, **kw):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, p, row_group_size=row_group_size, **kw)
    assert pq.ParquetFile(p).metadata.num_row_groups == -(-table.num_rows // row_group_size)
    return name


def inline_dv(rows: list[int]) -> dict:
    data = dv_bytes(rows)
    padded = data + b"\x00" * (-len(data) % 4)  # Z85 needs a multiple of 4; sizeInBytes cuts the padding
    return {
        "storageType": "i",
        "pathOrInlineDv": dvmod.z85_encode(padded),
        "sizeInBytes": len(data),
        "cardinality": len(set(rows)),
    }


def _on_disk_dv(root, rows: list[int]) -> dict:
    u = uuid.uuid4()
    data = dv_bytes(rows)
    blob = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    (root / f"deletion_vector_{u}.bin").write_bytes(blob)
    return {
        "storageType": "u",
        "pathOrInlineDv": dvmod.z85_encode(u.bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": len(set(rows)),
    }


def _stream(tmp_path, rel, pv, schema, parts, columns=None, dv=None, batch_rows=N, **kw) -> list[pa.RecordBatch]:
    batches = list(
        iter_data_file_batches(STORAGE, str(tmp_path), rel, pv, schema, parts, columns, dv, batch_rows=batch_rows, **kw)
    )
    assert batches, "a stream yields at least one batch"
    assert all(b.num_rows <= batch_rows for b in batches)
    assert all(b.schema.names == batches[0].schema.names for b in batches)
    assert all(b.num_rows for b in batches) or len(batches) == 1  # empty batches only alone
    return batches


def _rows(batches) -> list[dict]:
    return [r for b in batches for r in b.to_pylist()]


# ------------------------------------------------------------------------------------------
# synthetic multi-row-group files


def _data() -> pa.Table:
    t0 = dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)
    ids = np.arange(N, dtype=np.int32)
    return pa.table(
        {
            "ID": pa.array(ids),  # upper case in the file: matched case-insensitively
            "name": pa.array([None if i % 10 == 0 else f"n{i}" for i in range(N)]),
            # nanoseconds in the file: read as microseconds, the sub-microsecond part truncated
            "ts": pa.array(int(t0.timestamp()) * 10**9 + ids.astype(np.int64) * 10**9 + 7_999, pa.int64()).cast(
                pa.timestamp("ns", tz="UTC")
            ),
            "s": pa.array(
                [{"x": i, "gone": "g"} if i % 3 else None for i in range(N)],
                pa.struct([("x", pa.int16()), ("gone", pa.string())]),
            ),
            "junk": pa.array(np.zeros(N, dtype=np.int8)),
        }
    )


SCHEMA = parse_ddl(
    "id BIGINT, name STRING, ts TIMESTAMP, s STRUCT<x: BIGINT, new: STRING>, added DOUBLE, p DATE, q STRING"
)


def _expected(deleted=(), columns=None) -> list[dict]:
    t0 = dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)
    gone = set(deleted)
    out = []
    for i in range(N):
        if i in gone:
            continue
        row = {
            "id": i,
            "name": None if i % 10 == 0 else f"n{i}",
            "ts": t0 + dt.timedelta(seconds=i, microseconds=7),
            "s": {"x": i, "new": None} if i % 3 else None,
            "added": None,
            "p": dt.date(2024, 2, 29),
            "q": None,
        }
        out.append(row if columns is None else {c: row[c] for c in columns})
    return out


# deleted rows straddling row-group (128) and batch (7, 100, 300) boundaries, a whole row group
# (256..383), the first and last rows, and indexes past the end (ignored)
DELETED = sorted(
    {0, 6, 7, 99, 100, 127, 128, 129, 299, 300, 511, 512, 895, 896, 999, 1000, 5000} | set(range(256, 384))
)


@pytest.mark.parametrize("dv_kind", ["none", "inline", "on_disk"])
def test_stream_equals_expected_rows_for_every_batch_size(tmp_path, dv_kind):
    rel = _write(tmp_path, "p=x/f.parquet", _data())
    dv = {
        "none": lambda: None,
        "inline": lambda: inline_dv(DELETED),
        "on_disk": lambda: _on_disk_dv(tmp_path, DELETED),
    }[dv_kind]()
    expected = _expected(DELETED if dv else ())
    pv = {"p": "2024-02-29", "q": None}  # a null partition value is a key with a null value
    whole = read_data_file(STORAGE, str(tmp_path), rel, pv, SCHEMA, ["p", "q"], deletion_vector=dv)
    assert whole.to_pylist() == expected
    assert whole.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert whole.schema.field("s").type == SCHEMA.field("s").type.to_arrow()
    for b in BATCHES:
        batches = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], dv=dv, batch_rows=b)
        assert _rows(batches) == expected, b
        if b == ROW_GROUP:  # a fully deleted row group (256..383) yields nothing
            per_group = [122, 126, 127, 127, 128, 127, 102] if dv else [128] * 7 + [104]
            assert sum(x.num_rows for x in batches) == sum(per_group)
            assert max(x.num_rows for x in batches) <= ROW_GROUP
            if not dv:  # one batch per row group
                assert [x.num_rows for x in batches] == per_group


def test_few_deleted_rows_are_sliced_around_many_are_filtered(tmp_path):
    # a batch with at most SLICE_MAX_DELETED deleted rows comes out as zero-copy slices around them
    # (the row index still the physical one), a batch with more as one filtered batch
    from airflow_delta_provider_apps.engine.reader import SLICE_MAX_DELETED

    n = 1000
    rel = _write(tmp_path, "f.parquet", pa.table({"x": pa.array(range(n), pa.int64())}), row_group_size=n)
    schema = parse_ddl("x BIGINT")
    for deleted in ([0, 500, 999], [7], list(range(10, 10 + SLICE_MAX_DELETED + 1)), list(range(0, 1000, 3))):
        batches = list(
            iter_data_file_batches(
                STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=inline_dv(deleted), row_index=True
            )
        )
        live = [i for i in range(n) if i not in set(deleted)]
        assert [r["x"] for b in batches for r in b.to_pylist()] == live
        assert [i for b in batches for i in b.column(ROW_INDEX).to_pylist()] == live
        slices = len(deleted) + 1 - (0 in deleted) - (n - 1 in deleted)  # no empty slice at either end
        assert len(batches) == (slices if len(deleted) <= SLICE_MAX_DELETED else 1)


def test_subsets_partition_only_and_count(tmp_path):
    rel = _write(tmp_path, "f.parquet", _data())
    dv = inline_dv(DELETED)
    live = N - len([d for d in DELETED if d < N])
    pv = {"P": "2024-02-29", "q": None}  # partition keys match case-insensitively too
    for b in BATCHES:
        sub = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], ["q", "S", "id"], dv, batch_rows=b)
        assert sub[0].schema.names == ["q", "s", "id"]
        assert _rows(sub) == _expected(DELETED, ["q", "s", "id"])
        # only partition columns: no data column is read, the rows still follow the vector
        only = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], ["p"], dv, batch_rows=b)
        assert sum(x.num_rows for x in only) == live
        assert {r["p"] for r in _rows(only)} == {dt.date(2024, 2, 29)}
        # no column at all (count(*)): column-less batches with the live row count
        none = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], [], dv, batch_rows=b)
        assert all(x.num_columns == 0 for x in none) and sum(x.num_rows for x in none) == live
        nodv = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], [], None, batch_rows=b)
        assert sum(x.num_rows for x in nodv) == N
        # a column missing from the file only
        missing = _stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], ["added"], dv, batch_rows=b)
        assert _rows(missing) == [{"added": None}] * live
    assert read_data_file(STORAGE, str(tmp_path), rel, pv, SCHEMA, ["p", "q"], [], dv).num_rows == live
    assert read_data_file(STORAGE, str(tmp_path), rel, pv, SCHEMA, ["p", "q"], ["p"], dv).num_rows == live


def test_everything_deleted_and_empty_file_yield_one_empty_batch(tmp_path):
    rel = _write(tmp_path, "f.parquet", _data())
    nulls = {"p": None, "q": None}
    for cols in (None, ["id", "p"], []):
        batches = _stream(tmp_path, rel, nulls, SCHEMA, ["p", "q"], cols, inline_dv(list(range(N))), batch_rows=100)
        assert len(batches) == 1 and batches[0].num_rows == 0
        whole = read_data_file(STORAGE, str(tmp_path), rel, nulls, SCHEMA, ["p", "q"], cols, inline_dv(list(range(N))))
        assert whole.num_rows == 0
        assert whole.column_names == ([f.name for f in SCHEMA.fields] if cols is None else cols)
    empty = "e.parquet"
    pq.write_table(_data().slice(0, 0), tmp_path / empty)
    batches = _stream(tmp_path, empty, {"p": "2024-02-29", "q": None}, SCHEMA, ["p", "q"], batch_rows=10)
    assert [b.num_rows for b in batches] == [0]
    assert batches[0].schema.field("s").type == SCHEMA.field("s").type.to_arrow()
    assert batches[0].schema.field("p").type == pa.date32()


def test_int96_and_ms_timestamps_across_row_groups(tmp_path):
    far = dt.datetime(2900, 1, 1, tzinfo=UTC)  # beyond int64 nanoseconds: INT96 must be read as us
    base = dt.datetime(1970, 1, 1, tzinfo=UTC)
    vals = [far if i % 50 == 0 else base + dt.timedelta(days=i, microseconds=i) for i in range(N)]
    t = pa.table(
        {
            "a": pa.array(vals, pa.timestamp("us", tz="UTC")),
            "m": pa.array([v.replace(microsecond=0) for v in vals], pa.timestamp("ms", tz="UTC")),
        }
    )
    rel = _write(tmp_path, "t96.parquet", t, use_deprecated_int96_timestamps=True)
    schema = parse_ddl("a TIMESTAMP, m TIMESTAMP_NTZ")
    exp = [{"a": v, "m": v.replace(microsecond=0, tzinfo=None)} for i, v in enumerate(vals) if i not in set(DELETED)]
    for b in (1, 100, 5000):
        assert _rows(_stream(tmp_path, rel, {}, schema, [], dv=inline_dv(DELETED), batch_rows=b)) == exp
    whole = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [], deletion_vector=inline_dv(DELETED))
    assert whole.to_pylist() == exp


def test_column_mapping_name_and_id_across_row_groups(tmp_path):
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
                            },
                            {
                                "name": "later",
                                "type": "integer",
                                "nullable": True,
                                "metadata": {
                                    "delta.columnMapping.id": 5,
                                    "delta.columnMapping.physicalName": "col-later",
                                },
                            },
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
                {
                    "name": "added",
                    "type": "string",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.id": 6, "delta.columnMapping.physicalName": "col-new"},
                },
            ],
        }
    )
    f = lambda name, t, fid: pa.field(name, t, metadata={b"PARQUET:field_id": str(fid).encode()})  # noqa: E731
    sch = pa.schema(
        [
            f("col-aaa", pa.int32(), 1),
            f("a", pa.int64(), 99),
            f("col-sss", pa.struct([f("col-bbb", pa.string(), 3)]), 2),
        ]
    )
    t = pa.table(
        {
            "col-aaa": pa.array(range(N), pa.int32()),
            "a": pa.array([-1] * N, pa.int64()),
            "col-sss": [{"col-bbb": f"b{i}"} for i in range(N)],
        },
        schema=sch,
    )
    rel = _write(tmp_path, "cm.parquet", t)
    exp = [
        {"a": i, "s": {"b": f"b{i}", "later": None}, "p": 7, "added": None} for i in range(N) if i not in set(DELETED)
    ]
    for mode in (None, "name", "id"):
        for b in (7, 300):
            got = _stream(
                tmp_path,
                rel,
                {"col-ppp": "7"},
                schema,
                ["p"],
                dv=inline_dv(DELETED),
                batch_rows=b,
                column_mapping_mode=mode,
            )
            assert _rows(got) == exp, (mode, b)
        whole = read_data_file(
            STORAGE,
            str(tmp_path),
            rel,
            {"col-ppp": "7"},
            schema,
            ["p"],
            deletion_vector=inline_dv(DELETED),
            column_mapping_mode=mode,
        )
        assert whole.to_pylist() == exp
    # without mapping the display names are used
    got = _rows(_stream(tmp_path, rel, {"p": "7"}, schema, ["p"], batch_rows=300, column_mapping_mode="none"))
    assert got == [{"a": -1, "s": None, "p": 7, "added": None}] * N


def test_nullability_unified_across_batches(tmp_path):
    """A NOT NULL column holding nulls only in a later row group: batches differ, the table is nullable."""
    schema = parse_ddl("v INT NOT NULL, s STRUCT<x: INT NOT NULL> NOT NULL")
    v = [i if i < 900 else None for i in range(N)]
    t = pa.table({"v": pa.array(v, pa.int32()), "s": pa.array([{"x": x} for x in v], pa.struct([("x", pa.int32())]))})
    rel = _write(tmp_path, "n.parquet", t)
    batches = _stream(tmp_path, rel, {}, schema, [], batch_rows=ROW_GROUP)
    assert not batches[0].schema.field("v").nullable and batches[-1].schema.field("v").nullable
    whole = read_data_file(STORAGE, str(tmp_path), rel, {}, schema, [])
    assert whole.schema.field("v").nullable and whole.schema.field("s").type.field("x").nullable
    assert whole.column("v").to_pylist() == v


def test_errors_surface_on_the_call_and_iteration_can_stop_early(tmp_path):
    with pytest.raises(DataFileMissingError) as e:
        iter_data_file_batches(STORAGE, str(tmp_path), "p=1/gone.parquet", {}, SCHEMA, ["p", "q"])
    assert "p=1/gone.parquet" in e.value.problem
    rel = _write(tmp_path, "f.parquet", _data())
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        iter_data_file_batches(STORAGE, str(tmp_path), rel, {}, SCHEMA, [], ["nope"])
    with pytest.raises(InvalidArgumentError, match="batch_rows"):
        iter_data_file_batches(STORAGE, str(tmp_path), rel, {}, SCHEMA, [], batch_rows=0)
    it = iter_data_file_batches(STORAGE, str(tmp_path), rel, {}, SCHEMA, [], batch_rows=10)
    assert next(it).num_rows == 10
    it.close()  # closes the file; the file can then be removed
    os.remove(tmp_path / rel)


# ------------------------------------------------------------------------------------------
# real deletion-vector tables (conformance corpus), with batches smaller than the DVs' spread


@pytest.mark.parametrize(
    "table", ["delta-golden/dv-partitioned-with-checkpoint/delta", "delta-kernel-rs/table-with-dv-small"]
)
def test_conformance_dv_tables_streamed_in_tiny_batches(conformance_root, table):
    root = str(conformance_root / table)
    storage = storage_for(root)
    snap = load_snapshot(storage, root)
    files = snap.files.select(["path", "partition_values", "deletion_vector"]).to_pylist()
    assert any(f["deletion_vector"] for f in files)
    for f in files:
        pv = dict(f["partition_values"] or {})
        raw = pq.read_table(os.path.join(root, f["path"]))  # oracle: pyarrow whole file + numpy mask
        keep = np.ones(raw.num_rows, dtype=bool)
        if f["deletion_vector"]:
            keep[dvmod.deleted_row_indexes(storage, root, f["deletion_vector"]).astype(np.int64)] = False
        oracle = raw.filter(pa.array(keep))
        for b in (1, 2, 3):
            batches = list(
                iter_data_file_batches(
                    storage,
                    root,
                    f["path"],
                    pv,
                    snap.schema,
                    snap.partition_columns,
                    deletion_vector=f["deletion_vector"],
                    batch_rows=b,
                )
            )
            got = (
                pa.Table.from_batches(batches)
                if len(batches) == 1
                else pa.concat_tables([pa.Table.from_batches([x]) for x in batches], promote_options="default")
            )
            assert got.num_rows == oracle.num_rows
            for name in raw.column_names:
                assert got.column(name).to_pylist() == oracle.column(name).to_pylist(), (f["path"], name, b)
            for p in snap.partition_columns:
                assert {None if x is None else str(x) for x in got.column(p).to_pylist()} <= {pv.get(p)}
        whole = read_data_file(
            storage, root, f["path"], pv, snap.schema, snap.partition_columns, deletion_vector=f["deletion_vector"]
        )
        assert whole.num_rows == oracle.num_rows
        assert whole.select(raw.column_names).to_pylist() == oracle.to_pylist()


def test_scan_executor_function_streams_without_spark(tmp_path):
    """spark/scan.py's executor side (no JVM needed): bounded batches, _file column, Spark's schema."""
    from airflow_delta_provider_apps.engine.spark import scan

    rel = _write(tmp_path, "p=x/f.parquet", _data())
    listing = pa.record_batch(
        {
            "path": [rel, rel],
            "partition_values": pa.array([[("p", "2024-02-29")], [("p", None)]], pa.map_(pa.string(), pa.string())),
            "deletion_vector": pa.array(
                [inline_dv(DELETED), None],
                pa.struct(
                    [
                        ("storageType", pa.string()),
                        ("pathOrInlineDv", pa.string()),
                        ("offset", pa.int32()),
                        ("sizeInBytes", pa.int32()),
                        ("cardinality", pa.int64()),
                    ]
                ),
            ),
        }
    )
    target = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("p", pa.date32()),
            pa.field(scan.FILE_COLUMN, pa.string(), nullable=False),
        ]
    )
    out = list(
        scan.read_files_batches(
            [listing], str(tmp_path), SCHEMA.to_json_string(), ["p", "q"], ["id", "p"], target, True
        )
    )
    assert all(b.schema.equals(target) and 0 < b.num_rows <= scan.MAX_BATCH_ROWS for b in out)
    got = pa.Table.from_batches(out).to_pylist()
    live = [i for i in range(N) if i not in set(DELETED)]
    assert got == (
        [{"id": i, "p": dt.date(2024, 2, 29), "_file": rel} for i in live]
        + [{"id": i, "p": None, "_file": rel} for i in range(N)]
    )
    # count(*) shape: no columns, the row counts survive the executor's conforming
    counts = list(
        scan.read_files_batches([listing], str(tmp_path), SCHEMA.to_json_string(), ["p", "q"], [], pa.schema([]), False)
    )
    assert sum(b.num_rows for b in counts) == len(live) + N


def test_skipped_row_groups_keep_the_deletion_vector_aligned(tmp_path):
    rel = _write(tmp_path, "p=x/f.parquet", _data())
    pv = {"p": "2024-02-29", "q": None}
    dv = inline_dv(DELETED)
    keep = [g % 2 == 1 for g in range(8)]  # read only the odd row groups (128 rows each)
    got = _rows(_stream(tmp_path, rel, pv, SCHEMA, ["p", "q"], ["id"], dv, batch_rows=100, row_groups=lambda md: keep))
    expected = [r for r in _expected(DELETED, ["id"]) if (r["id"] // ROW_GROUP) % 2 == 1]
    assert got == expected


def test_row_index_without_data_columns_through_a_vector(tmp_path):
    # only partition columns (no data page read): the live rows' physical indexes still come out,
    # with a few deleted rows (slices) and with many (a mask)
    n = 300
    rel = _write(tmp_path, "f.parquet", pa.table({"x": pa.array(range(n), pa.int64())}), row_group_size=n)
    schema = parse_ddl("x BIGINT, p INT")
    for deleted in ([5, 6, 299], list(range(0, n, 2))):
        batches = list(
            iter_data_file_batches(
                STORAGE, str(tmp_path), rel, {"p": "1"}, schema, ["p"], ["p"], inline_dv(deleted), row_index=True
            )
        )
        got = [i for b in batches for i in b.column(ROW_INDEX).to_pylist()]
        assert got == [i for i in range(n) if i not in set(deleted)]
        assert [v for b in batches for v in b.column("p").to_pylist()] == [1] * len(got)
