"""Snapshot -> DataFrame: typed partition values, awkward values, time travel, the _file column."""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from spark_helpers import df_rows, log_actions, rows

from spark_apps.engine import DeltaTable, InvalidArgumentError, VersionNotFoundError
from spark_apps.engine.spark.scan import FILE_COLUMN, scan_files

pytestmark = pytest.mark.spark

AWKWARD = ["a/b", "x y", "%", "=", "ünï©ødé", "", None, "a%2Fb", "__HIVE_DEFAULT_PARTITION__x", "c:d", "#?*"]


def test_partition_values_typed_and_escaped(spark, tmp_path):
    root = str(tmp_path / "t")
    schema = "id INT, s STRING, i INT, d DATE, b BOOLEAN, dec DECIMAL(7,2), ts TIMESTAMP, l BIGINT"
    t = DeltaTable.create(spark, root, schema=schema, partition_by=["s", "i", "d", "b", "dec", "ts"])
    data = []
    for k in range(len(AWKWARD) * 2):
        data.append((
            k,
            AWKWARD[k % len(AWKWARD)],
            None if k % 4 == 0 else k % 3 - 1,
            None if k % 5 == 0 else dt.date(2024, 1, 1 + k % 3),
            None if k % 6 == 0 else k % 2 == 0,
            None if k % 7 == 0 else Decimal(f"{k % 3}.25"),
            None if k % 3 == 0 else dt.datetime(2024, 5, 6, 7, 8, 9, 123456 * (k % 2)),
            k * 10,
        ))
    t.append(spark.createDataFrame(data, schema.replace("BIGINT", "LONG")))
    got = df_rows(t.to_df())
    # Delta stores an empty string partition value as null
    expected = sorted([tuple(None if (j == 1 and v == "") else v for j, v in enumerate(r)) for r in data], key=repr)
    expected = [tuple(x.replace(tzinfo=dt.timezone.utc) if isinstance(x, dt.datetime) else x for x in r)
                for r in expected]
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
    from spark_apps.engine.partitions import decode_add_path

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
    iso = dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.timezone.utc).isoformat()
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
    assert res.files.num_rows == snap.num_files == 3
    got = res.df.toArrow()
    assert got.column_names == ["id", FILE_COLUMN]
    assert set(got.column(FILE_COLUMN).to_pylist()) == set(snap.files.column("path").to_pylist())
    # rows of one file share its partition value
    pv = {r["path"]: dict(r["partition_values"])["p"] for r in snap.files.select(["path", "partition_values"]).to_pylist()}
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
        expected = pa.concat_tables([pq.read_table(exp_dir / f) for f in sorted(os.listdir(exp_dir))
                                     if f.endswith(".parquet")])
        df = DeltaTable.for_path(spark, str(root)).to_df()
        got = df.toArrow()
        assert got.num_rows == expected.num_rows, table
        schema = got.schema
        assert rows(got) == rows(expected.select(schema.names).cast(schema)), table
