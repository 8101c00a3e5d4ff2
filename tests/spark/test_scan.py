"""Snapshot -> DataFrame: typed partition values, awkward values, time travel, the _file column."""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from spark_helpers import df_rows, log_actions, rows

from airflow_delta_provider_apps.engine import DeltaTable, InvalidArgumentError, VersionNotFoundError
from airflow_delta_provider_apps.engine.spark.scan import FILE_COLUMN, scan_files

pytestmark = pytest.mark.spark

AWKWARD = ["a/b", "x y", "%", "=", "ünï©ødé", "", None, "a%2Fb", "__HIVE_DEFAULT_PARTITION__x", "c:d", "#?*"]


def test_partition_values_typed_and_escaped(spark, tmp_path):
    root = str(tmp_path / "t")
    schema = "id INT, s STRING, i INT, d DATE, b BOOLEAN, dec DECIMAL(7,2), ts TIMESTAMP, l BIGINT"
    t = DeltaTable.create(spark, root, schema=schema, partition_by=["s", "i", "d", "b", "dec", "ts"])
    data = []
    for k in range(len(AWKWARD) * 2):
        data.append(
            (
                k,
                AWKWARD[k % len(AWKWARD)],
                None if k % 4 == 0 else k % 3 - 1,
                None if k % 5 == 0 else dt.date(2024, 1, 1 + k % 3),
                None if k % 6 == 0 else k % 2 == 0,
                None if k % 7 == 0 else Decimal(f"{k % 3}.25"),
                None if k % 3 == 0 else dt.datetime(2024, 5, 6, 7, 8, 9, 123456 * (k % 2)),
                k * 10,
            )
        )
    t.append(spark.createDataFrame(data, schema.replace("BIGINT", "LONG")))
    got = df_rows(t.to_df())
    # Delta stores an empty string partition value as null
    expected = sorted([tuple(None if (j == 1 and v == "") else v for j, v in enumerate(r)) for r in data], key=repr)
    expected = [tuple(x.replace(tzinfo=dt.UTC) if isinstance(x, dt.datetime) else x for x in r) for r in expected]
    assert got == sorted([tuple(_norm_dec(x) for x in r) for r in expected], key=repr)
    adds = [a["add"] for a in log_actions(root, 1) if "add" in a]
    pvs = {a["partitionValues"]["s"] for a in adds}
    assert pvs == {v for v in AWKWARD if v not in ("", None)} | {None}
    by_value = {a["partitionValues"]["s"]: a["path"] for a in adds}
    assert by_value["a/b"].startswith("s=a%252Fb/")
    assert by_value["%"].startswith("s=%2525/")
    assert by_value[None].startswith("s=__HIVE_DEFAULT_PARTITION__/")
    ts_values = {a["partitionValues"]["ts"] for a in adds}
    assert "2024-05-06T07:08:09.123456Z" in ts_values and None in ts_values
    # every file lies where its path says, and holds no partition column
    from airflow_delta_provider_apps.engine.partitions import decode_add_path

    for a in adds:
        f = os.path.join(root, decode_add_path(a["path"]))
        assert pq.read_schema(f).names == ["id", "l"]


def _norm_dec(x):
    return ("dec", str(x.normalize())) if isinstance(x, Decimal) else x


def test_time_travel_by_version_and_timestamp(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT")
    for v in range(3):
        t.append(spark.createDataFrame([(v * 10 + i,) for i in range(v + 1)], "id long"))
    assert t.version() == 3
    counts = [t.to_df(version=v).count() for v in range(4)]
    assert counts == [0, 1, 3, 6]
    assert sorted(r[0] for r in t.to_df(version=2).collect()) == [0, 10, 11]
    hist = t.history()
    assert [h["version"] for h in hist] == [3, 2, 1, 0]
    ts2 = next(h["timestamp"] for h in hist if h["version"] == 2)
    assert t.to_df(timestamp=ts2).count() == 3
    iso = dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.UTC).isoformat()
    assert t.to_df(timestamp=iso).count() == 3
    with pytest.raises(VersionNotFoundError):
        t.to_df(version=9)
    with pytest.raises(InvalidArgumentError):
        t.to_df(version=1, timestamp=ts2)


def test_scan_files_reports_files_and_file_column(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, p STRING", partition_by=["p"])
    t.append(spark.createDataFrame([(i, f"v{i % 3}") for i in range(30)], "id long, p string"))
    snap = t.snapshot()
    res = scan_files(spark, snap, columns=["id"], with_file_column=True)
    assert res.files.num_rows == snap.num_files >= 3  # at least one file per partition value
    got = res.df.toArrow()
    assert got.column_names == ["id", FILE_COLUMN]
    assert set(got.column(FILE_COLUMN).to_pylist()) == set(snap.files.column("path").to_pylist())
    # rows of one file share its partition value
    pv = {
        r["path"]: dict(r["partition_values"])["p"] for r in snap.files.select(["path", "partition_values"]).to_pylist()
    }
    for r in got.to_pylist():
        assert pv[r[FILE_COLUMN]] == f"v{r['id'] % 3}"
    # a subset of files
    one = snap.files.slice(0, 1)
    sub = scan_files(spark, snap, files=one)
    assert sub.df.count() == json.loads(one.column("stats")[0].as_py())["numRecords"]


def test_reads_conformance_tables(spark, conformance_root):
    """A few real tables (written by delta-spark) through the Spark scan: same rows as expected."""
    import pyarrow as pa

    cases = {
        "dat/basic_partitioned": "dat/basic_partitioned/expected/latest/table_content",
        "dat/multi_partitioned": "dat/multi_partitioned/expected/latest/table_content",
        "dat/nested_types": "dat/nested_types/expected/latest/table_content",
        "delta-golden/dv-partitioned-with-checkpoint": "delta-golden/dv-partitioned-with-checkpoint/expected",
    }
    for table, expected_dir in cases.items():
        root = conformance_root / table / "delta"
        exp_dir = conformance_root / expected_dir
        if not exp_dir.exists():
            pytest.fail(f"missing expected data for {table}")
        expected = pa.concat_tables(
            [pq.read_table(exp_dir / f) for f in sorted(os.listdir(exp_dir)) if f.endswith(".parquet")]
        )
        df = DeltaTable.for_path(spark, str(root)).to_df()
        got = df.toArrow()
        assert got.num_rows == expected.num_rows, table
        schema = got.schema
        assert rows(got) == rows(expected.select(schema.names).cast(schema)), table


def _inline_dv(deleted: list[int]) -> dict:
    """An inline ('i') deletion vector descriptor for ``deleted`` (row indexes < 2**32, at most
    4096 per 65536-row block: array containers only)."""
    import struct

    from airflow_delta_provider_apps.engine import dv as dvmod

    blocks: dict[int, list[int]] = {}
    for r in sorted(set(deleted)):
        blocks.setdefault(r >> 16, []).append(r & 0xFFFF)
    keys = sorted(blocks)
    assert all(len(blocks[k]) <= 4096 for k in keys)
    bitmap = struct.pack("<II", 12346, len(keys))  # portable RoaringBitmap, no run containers
    bitmap += b"".join(struct.pack("<HH", k, len(blocks[k]) - 1) for k in keys)
    off = len(bitmap) + 4 * len(keys)
    for k in keys:
        bitmap += struct.pack("<I", off)
        off += 2 * len(blocks[k])
    bitmap += b"".join(struct.pack(f"<{len(blocks[k])}H", *blocks[k]) for k in keys)
    data = struct.pack("<IQI", dvmod.MAGIC, 1, 0) + bitmap  # magic, one 32-bit bucket (high bits 0)
    padded = data + b"\x00" * (-len(data) % 4)
    return {
        "storageType": "i",
        "pathOrInlineDv": dvmod.z85_encode(padded),
        "sizeInBytes": len(data),
        "cardinality": sum(len(v) for v in blocks.values()),
    }


def test_streamed_scan_of_multi_row_group_files_with_deletion_vectors(spark, tmp_path):
    """Files with many row groups (and more rows than a batch) stream through mapInArrow: the
    deletion vector applies by physical row index across row groups and batches."""
    import numpy as np
    import pyarrow as pa

    from airflow_delta_provider_apps.engine.spark.scan import MAX_BATCH_ROWS

    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    n = MAX_BATCH_ROWS + 3000  # two batches at least, row groups of 1000 rows
    deleted = {0, 999, 1000, 1001, 4999, MAX_BATCH_ROWS - 1, MAX_BATCH_ROWS, n - 1} | set(range(2000, 3000))
    adds, expected = [], []
    for k, p in enumerate(["a", "b"]):
        ids = np.arange(n, dtype=np.int64) + k * n
        rel = f"p={p}/part-{k}.parquet"
        (root / f"p={p}").mkdir()
        pq.write_table(pa.table({"id": ids, "v": pa.array(ids.astype(str))}), root / rel, row_group_size=1000)
        dv = _inline_dv(sorted(deleted)) if p == "a" else None
        adds.append(
            {
                "add": {
                    "path": rel,
                    "partitionValues": {"p": p},
                    "size": os.path.getsize(root / rel),
                    "modificationTime": 0,
                    "dataChange": True,
                    "stats": json.dumps({"numRecords": n}),
                    **({"deletionVector": dv} if dv else {}),
                }
            }
        )
        expected += [(int(i), str(i), p) for j, i in enumerate(ids) if not (dv and j in deleted)]
    schema = {
        "type": "struct",
        "fields": [
            {"name": n_, "type": t, "nullable": True, "metadata": {}}
            for n_, t in [("id", "long"), ("v", "string"), ("p", "string")]
        ],
    }
    commit = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        },
        {
            "metaData": {
                "id": "streamed",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["p"],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ] + adds
    (root / "_delta_log" / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")

    t = DeltaTable.for_path(spark, str(root))
    got = t.to_df().toArrow()
    assert got.num_rows == len(expected) == 2 * n - len(deleted)
    assert sorted(
        zip(got.column("id").to_pylist(), got.column("v").to_pylist(), got.column("p").to_pylist())
    ) == sorted(expected)
    # partition column only, with the file column: row counts per file follow the vectors
    res = scan_files(spark, t.snapshot(), columns=["p"], with_file_column=True, num_tasks=2)
    per_file = res.df.groupBy(FILE_COLUMN, "p").count().collect()
    assert sorted((r[FILE_COLUMN], r["p"], r["count"]) for r in per_file) == [
        ("p=a/part-0.parquet", "a", n - len(deleted)),
        ("p=b/part-1.parquet", "b", n),
    ]


def test_scan_with_a_predicate_reads_only_files_that_may_match(spark, tmp_path):
    from airflow_delta_provider_apps.engine.spark.scan import scan_files

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, p STRING", partition_by=["p"])
    for k in range(4):  # one commit per id range: disjoint min/max per file
        t.append(spark.createDataFrame([(k * 100 + i, f"v{k % 2}") for i in range(10)], "id long, p string"))
    snap = t.snapshot()
    res = scan_files(spark, snap, predicate="p = 'v1' AND id >= 300")
    assert res.files.num_rows < snap.num_files  # partition and stats pruning
    assert sorted(r["id"] for r in res.df.collect()) == list(range(300, 310))
    assert sorted(r["id"] for r in t.to_df(predicate="id < 5", columns=["id"]).collect()) == list(range(5))


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_native_parquet_scan_of_one_partition_gives_the_arrow_path_rows(spark, tmp_path):
    from airflow_delta_provider_apps.engine.spark.scan import NATIVE_SCAN_CONF

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT NOT NULL, dt DATE, v DOUBLE", partition_by=["dt"])
    day = dt.date(2026, 1, 2)
    t.append(
        spark.createDataFrame([(i, day if i % 3 else None, i / 7) for i in range(30)], "id LONG, dt DATE, v DOUBLE")
    )
    # a column added later: older files do not hold it and read as NULL
    t.append(
        spark.createDataFrame([(100, day, 0.5, "x")], "id LONG, dt DATE, v DOUBLE, note STRING"), merge_schema=True
    )
    cases = [
        ("dt = DATE '2026-01-02'", None),
        ("dt = DATE '2026-01-02' AND v > 1.5", None),
        ("dt IS NULL", ["id", "note"]),
        ("id >= 0", None),  # both partitions, from the hive folder names (checked against the log)
    ]
    for predicate, columns in cases:
        spark.conf.set(NATIVE_SCAN_CONF, "false")
        try:
            arrow = t.to_df(predicate=predicate, columns=columns)
            expected = df_rows(arrow)
            assert "FileScan parquet" not in _plan(arrow)
        finally:
            spark.conf.unset(NATIVE_SCAN_CONF)
        native = t.to_df(predicate=predicate, columns=columns)
        assert df_rows(native) == expected, predicate
        assert native.columns == arrow.columns
        # partition and data predicates alike: Spark's own scan, the predicate applied by Spark
        assert "FileScan parquet" in _plan(native), predicate
    assert len(expected) == 31
    assert "FileScan parquet" in _plan(t.to_df())  # both partitions, from the hive folder names


def test_partition_values_that_folder_names_would_escape_keep_the_arrow_path(spark, tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, p STRING", partition_by=["p"])
    t.append(spark.createDataFrame([(1, "a b"), (2, "c"), (3, None)], "id LONG, p STRING"))
    both = t.to_df()
    assert "FileScan parquet" not in _plan(both)  # 'a b' is escaped in its folder name
    assert df_rows(both) == df_rows(spark.createDataFrame([(1, "a b"), (2, "c"), (3, None)], "id LONG, p STRING"))
    one = t.to_df(predicate="p = 'c'")  # one partition: its value as a literal
    assert "FileScan parquet" in _plan(one) and df_rows(one) == [(2, "c")]


def test_native_scan_names_a_missing_data_file(spark, tmp_path):
    from airflow_delta_provider_apps.engine.errors import DataFileMissingError

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, dt STRING", partition_by=["dt"])
    t.append(spark.createDataFrame([(1, "a")], "id LONG, dt STRING"))
    path = t.snapshot().files.column("path")[0].as_py()
    os.unlink(os.path.join(root, path))
    with pytest.raises(DataFileMissingError) as e:
        t.to_df(predicate="dt = 'a'").collect()
    assert path in e.value.problem


@pytest.mark.parametrize("partitioned", [False, True])
def test_native_scan_gives_each_row_its_file_and_physical_index_as_the_arrow_path(spark, tmp_path, partitioned):
    """The MERGE join and DELETE read their target with ``_file`` and the physical row index: Spark's own
    scan gives them from its file metadata, the same values the engine's reader gives."""
    from airflow_delta_provider_apps.engine.spark.scan import NATIVE_SCAN_CONF, ROW_COLUMN

    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, dt STRING", partition_by=["dt"] if partitioned else None)
    for k in range(3):
        t.append(spark.createDataFrame([(i, f"d{i % 2}") for i in range(k * 50, k * 50 + 50)], "id LONG, dt STRING"))
    snap = t.snapshot()

    def read():
        s = scan_files(spark, snap, with_file_column=True, with_row_index=True)
        return s.df, sorted(tuple(r) for r in s.df.select("id", FILE_COLUMN, ROW_COLUMN).collect())

    spark.conf.set(NATIVE_SCAN_CONF, "false")
    try:
        arrow_df, expected = read()
        assert "FileScan parquet" not in _plan(arrow_df)
    finally:
        spark.conf.unset(NATIVE_SCAN_CONF)
    native_df, got = read()
    assert "FileScan parquet" in _plan(native_df)
    assert got == expected and len(got) == 150
    assert {f for _, f, _ in got} == set(snap.files.column("path").to_pylist())
