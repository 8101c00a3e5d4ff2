"""Interop with deltalake (delta-rs 1.6.6), both ways.

* Tables we create and append (every primitive type incl. decimal, date, timestamp, timestamp_ntz,
  binary, byte/short; struct, array, map; nulls; awkward partition values; partitioned and not) are
  read by deltalake with identical rows, and deltalake sees valid per-file stats: its
  ``get_add_actions(flatten=True)`` min/max/null_count equal values computed independently with
  pyarrow on our data files.
* Tables deltalake writes (many commits, partitions, its checkpoints, deletes, updates) read the
  same in our engine, through Spark and log-only (file sets), at every version.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from decimal import Decimal

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from spark_helpers import df_rows, rows

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.partitions import decode_add_path
from airflow_delta_provider_apps.engine.storage import storage_for

pytestmark = [pytest.mark.spark, pytest.mark.interop]

ALL_TYPES_DDL = (
    "b TINYINT, sh SMALLINT, i INT, l BIGINT, f FLOAT, d DOUBLE, dec DECIMAL(10,3), big_dec DECIMAL(38,6), "
    "s STRING, bin BINARY, bo BOOLEAN, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
    "st STRUCT<x: INT, y: STRING>, arr ARRAY<INT>, m MAP<STRING, BIGINT>, part STRING, pint INT"
)
UTC = dt.UTC
AWKWARD = ["a/b", "x y", "%", "=", "ünï©ødé", "", None, "a%2Fb", "c:d", "#?*", "plain"]


def _arrow_schema() -> pa.Schema:
    return pa.schema(
        [
            ("b", pa.int8()),
            ("sh", pa.int16()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("dec", pa.decimal128(10, 3)),
            ("big_dec", pa.decimal128(38, 6)),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("bo", pa.bool_()),
            ("dt", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
            ("arr", pa.list_(pa.int32())),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("part", pa.string()),
            ("pint", pa.int32()),
        ]
    )


def _data(n: int, seed: int) -> pa.Table:
    rnd = random.Random(seed)

    def maybe(v, p=0.15):
        return None if rnd.random() < p else v

    cols = {name: [] for name in _arrow_schema().names}
    for k in range(n):
        cols["b"].append(maybe(rnd.randint(-128, 127)))
        cols["sh"].append(maybe(rnd.randint(-32768, 32767)))
        cols["i"].append(maybe(rnd.randint(-(2**31), 2**31 - 1)))
        cols["l"].append(maybe(rnd.randint(-(2**63), 2**63 - 1)))
        cols["f"].append(maybe(rnd.choice([0.0, -1.5, 3.25, 1e10, -2.5e-3])))
        cols["d"].append(maybe(rnd.uniform(-1e6, 1e6)))
        cols["dec"].append(maybe(Decimal(rnd.randint(-(10**9), 10**9)) / 1000))
        cols["big_dec"].append(maybe(Decimal(rnd.randint(-(10**30), 10**30)) / 10**6))
        cols["s"].append(maybe(rnd.choice(["", "a", "zz", "ünï", "x y", "Long text " * 2]) + str(k % 7)))
        cols["bin"].append(maybe(bytes(rnd.randint(0, 255) for _ in range(rnd.randint(0, 5)))))
        cols["bo"].append(maybe(rnd.random() < 0.5))
        cols["dt"].append(maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-1000, 30000))))
        cols["ts"].append(
            maybe(dt.datetime(2000, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=rnd.randint(-(10**15), 10**15)))
        )
        cols["ntz"].append(maybe(dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**15))))
        cols["st"].append(maybe({"x": maybe(rnd.randint(0, 9)), "y": maybe(rnd.choice(["p", "q"]))}))
        cols["arr"].append(maybe([maybe(rnd.randint(0, 5)) for _ in range(rnd.randint(0, 3))]))
        cols["m"].append(maybe([(f"k{j}", maybe(rnd.randint(0, 100))) for j in range(rnd.randint(0, 3))]))
        cols["part"].append(AWKWARD[k % len(AWKWARD)])
        cols["pint"].append(maybe(k % 3, 0.2))
    return pa.table(cols, schema=_arrow_schema())


def _spark_df(spark, table: pa.Table):
    return spark.createDataFrame(table, schema=ALL_TYPES_DDL)


def _expected(table: pa.Table, partitioned: bool) -> pa.Table:
    """What a Delta reader must return: an empty-string partition value reads as null."""
    if not partitioned:
        return table
    part = pc.if_else(pc.equal(table.column("part"), ""), pa.scalar(None, pa.string()), table.column("part"))
    return table.set_column(table.schema.get_field_index("part"), "part", part)


def _minmax_expected(arr: pa.ChunkedArray):
    valid = arr.drop_null()
    if len(valid) == 0:
        return None, None
    mm = pc.min_max(valid)
    return mm["min"].as_py(), mm["max"].as_py()


def _same(ours_value, deltalake_value, t: pa.DataType) -> bool:
    if ours_value is None or deltalake_value is None:
        return ours_value is None and deltalake_value is None
    if pa.types.is_timestamp(t):
        # stats hold milliseconds: min truncated down, max may be truncated too (Delta allows max < true max
        # by < 1 ms); deltalake returns datetimes
        a = ours_value.replace(tzinfo=None) if isinstance(ours_value, dt.datetime) else ours_value
        b = deltalake_value.replace(tzinfo=None) if isinstance(deltalake_value, dt.datetime) else deltalake_value
        return abs((a - b).total_seconds()) < 0.001
    if pa.types.is_floating(t):
        return abs(float(ours_value) - float(deltalake_value)) <= 1e-6 * max(1.0, abs(float(ours_value)))
    if pa.types.is_decimal(t):
        return Decimal(str(ours_value)) == Decimal(str(deltalake_value))
    return ours_value == deltalake_value


def _check_stats_against_pyarrow(root: str):
    """deltalake's view of our per-file stats equals pyarrow's min/max/null counts of each file."""
    dt_table = deltalake.DeltaTable(root)
    actions = pa.table(dt_table.get_add_actions(flatten=True)).to_pylist()
    assert actions
    checked = set()
    for a in actions:
        data = pq.read_table(os.path.join(root, decode_add_path(a["path"])))
        assert a["num_records"] == data.num_rows
        for name in data.column_names:
            col = data.column(name)
            t = col.type
            if pa.types.is_struct(t):
                for j in range(t.num_fields):
                    sub = pc.struct_field(col, [j])
                    key = f"{name}.{t.field(j).name}"
                    assert a[f"null_count.{key}"] == sub.null_count, key
                continue
            if pa.types.is_list(t) or pa.types.is_map(t):
                continue
            assert a[f"null_count.{name}"] == col.null_count, name
            if pa.types.is_binary(t) or pa.types.is_boolean(t):
                continue
            lo, hi = _minmax_expected(col)
            assert _same(lo, a.get(f"min.{name}"), t), (name, lo, a.get(f"min.{name}"))
            assert _same(hi, a.get(f"max.{name}"), t), (name, hi, a.get(f"max.{name}"))
            checked.add(name)
    assert checked >= {"b", "sh", "i", "l", "f", "d", "dec", "big_dec", "s", "dt", "ts", "ntz"} - {"part", "pint"}


@pytest.mark.parametrize("partitioned", [False, True])
def test_deltalake_reads_our_tables_with_identical_rows_and_valid_stats(spark, tmp_path, partitioned):
    root = str(tmp_path / "ours")
    t = DeltaTable.create(spark, root, schema=ALL_TYPES_DDL, partition_by=["part", "pint"] if partitioned else None)
    first, second = _data(150, seed=1), _data(90, seed=2)
    t.append(_spark_df(spark, first))
    t.append(_spark_df(spark, second), target_file_size=4096)
    dtl = deltalake.DeltaTable(root)
    assert dtl.version() == 2
    assert dtl.metadata().partition_columns == (["part", "pint"] if partitioned else [])
    expected = _expected(pa.concat_tables([first, second]), partitioned)
    schema = _arrow_schema()
    assert rows(dtl.to_pyarrow_table(), schema) == rows(expected, schema)
    assert rows(deltalake.DeltaTable(root, version=1).to_pyarrow_table(), schema) == rows(
        _expected(first, partitioned), schema
    )
    # the same rows through our own Spark scan
    assert df_rows(t.to_df(), schema) == rows(expected, schema)
    _check_stats_against_pyarrow(root)
    if partitioned:
        parts = pa.table(dtl.get_add_actions(flatten=True)).column("partition.part").to_pylist()
        assert set(parts) == {v for v in AWKWARD if v not in ("", None)} | {None}


def _write_deltalake_history(root: str):
    """A deltalake table with many commits, partitions, a checkpoint, a delete and an update."""
    rnd = random.Random(7)
    versions = []

    def batch(start, n):
        return pa.table(
            {
                "id": pa.array(range(start, start + n), pa.int64()),
                "cat": pa.array([AWKWARD[(start + k) % len(AWKWARD)] or "none" for k in range(n)], pa.string()),
                "v": pa.array([rnd.random() for _ in range(n)], pa.float64()),
                "ts": pa.array(
                    [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=start + k) for k in range(n)],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        )

    deltalake.write_deltalake(root, batch(0, 40), partition_by=["cat"])
    for k in range(1, 6):
        deltalake.write_deltalake(root, batch(k * 40, 25), mode="append", partition_by=["cat"])
    dtl = deltalake.DeltaTable(root)
    dtl.create_checkpoint()
    deltalake.write_deltalake(root, batch(1000, 10), mode="append", partition_by=["cat"])
    deltalake.DeltaTable(root).delete("id % 7 = 0")
    deltalake.DeltaTable(root).update(updates={"v": "-1.0"}, predicate="id > 100 AND id < 130")
    deltalake.write_deltalake(root, batch(2000, 5), mode="append", partition_by=["cat"])
    dtl = deltalake.DeltaTable(root)
    for v in range(dtl.version() + 1):
        versions.append(v)
    return versions


def test_we_read_deltalake_tables_identically(spark, tmp_path):
    root = str(tmp_path / "theirs")
    versions = _write_deltalake_history(root)
    assert versions[-1] >= 9
    assert any(f.endswith(".checkpoint.parquet") for f in os.listdir(os.path.join(root, "_delta_log")))
    storage = storage_for(root)
    t = DeltaTable.for_path(spark, root)
    assert t.version() == versions[-1]
    for v in versions:
        theirs = deltalake.DeltaTable(root, version=v)
        snap = load_snapshot(storage, root, version=v)
        # log only: the same live files, sizes and partition values
        their_adds = pa.table(theirs.get_add_actions(flatten=True))
        assert sorted(decode_add_path(p) for p in snap.files.column("path").to_pylist()) == sorted(
            decode_add_path(p) for p in their_adds.column("path").to_pylist()
        ), v
        assert snap.size_in_bytes == sum(their_adds.column("size_bytes").to_pylist())
        if v in (0, versions[-4], versions[-2], versions[-1]):  # Spark reads: a few versions (each is a job)
            their_rows = theirs.to_pyarrow_table()
            assert df_rows(t.to_df(version=v), their_rows.schema) == rows(their_rows), v
    hist = t.history()
    ops = [h["operation"] for h in hist]
    assert ops[0] == "WRITE" and "DELETE" in ops and "UPDATE" in ops
    assert [h["version"] for h in hist] == list(reversed(versions))
    d = t.detail()
    assert d["partition_columns"] == ["cat"] and d["num_files"] == snap.num_files
