"""The core writer (airflow_delta_provider_apps.engine.writer) without a JVM: property tests.

Random batches (in any partition order, as the Spark side delivers them, or sorted) are written with
a random target file size; the files must hold exactly the input rows (read back through the engine's
reader with the partition values from the AddFile actions), each file one partition value, stats
that match the file, and sizes near the target.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_helpers import rows

from airflow_delta_provider_apps.engine import writer as writer_mod
from airflow_delta_provider_apps.engine.partitions import decode_add_path
from airflow_delta_provider_apps.engine.reader import read_data_file
from airflow_delta_provider_apps.engine.schema import parse_schema
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.writer import TableWriter, WriteSpec, grouped, write_batches

SCHEMA = "id BIGINT, s STRING, p STRING, q INT"
ARROW = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string()), ("q", pa.int32())])


@st.composite
def tables(draw):
    n = draw(st.integers(0, 400))
    p_values = draw(st.lists(st.sampled_from(["a", "b/c", "%", "x y", None, "ü"]), min_size=n, max_size=n))
    q_values = draw(st.lists(st.sampled_from([0, 1, None]), min_size=n, max_size=n))
    s_values = draw(st.lists(st.one_of(st.none(), st.text(max_size=40)), min_size=n, max_size=n))
    t = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array(s_values, pa.string()),
            "p": pa.array(p_values, pa.string()),
            "q": pa.array(q_values, pa.int32()),
        },
        schema=ARROW,
    )
    # rows in the source's order (what the Spark side delivers), or sorted by the partition columns
    if n and draw(st.booleans()):
        t = t.sort_by([("p", "ascending", "at_start"), ("q", "ascending", "at_start")])
    batch_rows = draw(st.integers(1, 150))
    return t, batch_rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=tables(), partitioned=st.booleans(), target=st.sampled_from([1, 600, 3000, 10**9]))
def test_written_files_hold_exactly_the_rows(data, partitioned, target):
    table, batch_rows = data
    parts = ("p", "q") if partitioned else ()
    with tempfile.TemporaryDirectory() as root:
        spec = WriteSpec(
            table_uri=root,
            schema_json=parse_schema(SCHEMA).to_json_string(),
            partition_columns=parts,
            target_file_size=target,
            row_group_bytes=2000,
        )
        out = list(write_batches(spec, table.to_batches(max_chunksize=batch_rows), task_id=7))
        adds = [w.add for w in out]
        counts = [w.num_rows for w in out]
        schema = parse_schema(SCHEMA)
        storage = storage_for(root)
        read = []
        seen_dirs = {}
        for add, n in zip(adds, counts):
            assert add.path.rsplit("/", 1)[-1].startswith("part-00007-")
            stats = json.loads(add.stats)
            assert stats["numRecords"] == n > 0
            f = os.path.join(root, decode_add_path(add.path))
            assert os.path.getsize(f) == add.size
            if partitioned:
                assert set(add.partition_values) == {"p", "q"}
                assert pq.read_schema(f).names == ["id", "s"]
                d = os.path.dirname(decode_add_path(add.path))
                assert seen_dirs.setdefault(d, tuple(add.partition_values.items())) == tuple(
                    add.partition_values.items()
                )
            got = read_data_file(storage, root, add.path, add.partition_values, schema, list(parts))
            ids = got.column("id")
            assert stats["minValues"]["id"] == pc.min(ids).as_py() and stats["maxValues"]["id"] == pc.max(ids).as_py()
            assert stats["nullCount"]["s"] == got.column("s").null_count
            if target >= 10**9:
                pass
            elif target > 1 and n > 1:
                # rolled near the target: a multi-row file is not far above it
                assert add.size < 3 * target + 2000
            read.append(got)
        assert sum(counts) == table.num_rows
        if target >= 10**9 and not partitioned:
            assert len(adds) == (1 if table.num_rows else 0)
        result = pa.concat_tables(read) if read else ARROW.empty_table()
        assert rows(result, ARROW) == rows(table, ARROW)


def test_runs_split_on_value_changes_including_nulls():
    b = pa.record_batch({"p": pa.array([None, None, "a", "a", "b"]), "q": pa.array([1, 2, 2, 2, None])})

    def groups(batch, columns):
        runs = grouped(batch, columns)
        return sorted(list(range(batch.num_rows)) if rows is None else rows.to_pylist() for _, rows in runs)

    assert groups(b, ["p"]) == [[0, 1], [2, 3], [4]]
    assert groups(b, ["p", "q"]) == [[0], [1], [2, 3], [4]]
    f = pa.record_batch({"x": pa.array([float("nan"), 1.0, float("nan")])})
    assert groups(f, ["x"]) == [[0, 2], [1]]
    assert grouped(b.slice(2, 2), ["p"]) == [(0, None)]  # one run: the batch itself


def test_unsorted_partitions_and_data_change_false(tmp_path):
    # rows of one task in any partition order (an UPDATE moving rows between partitions)
    spec = WriteSpec(
        table_uri=str(tmp_path),
        schema_json=parse_schema("id BIGINT, p INT").to_json_string(),
        partition_columns=("p",),
        data_change=False,
    )
    batch = pa.record_batch(
        {"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "p": pa.array([2, 1, 2, None, 1], pa.int32())}
    )
    out = list(write_batches(spec, [batch]))
    by_part = {w.add.partition_values["p"]: w.num_rows for w in out}
    assert by_part == {"1": 2, "2": 2, None: 1}
    assert all(w.add.data_change is False for w in out)
    got = sorted(
        (r["id"], r["p"])
        for w in out
        for r in read_data_file(
            storage_for(str(tmp_path)),
            str(tmp_path),
            w.add.path,
            w.add.partition_values,
            parse_schema("id BIGINT, p INT"),
            ["p"],
        ).to_pylist()
    )
    assert got == [(1, 2), (2, 1), (3, 2), (4, None), (5, 1)]


@pytest.mark.parametrize("buffer_bytes", [4000, 10**9])
def test_many_partition_values_interleaved_bounded_files_and_buffers(tmp_path, monkeypatch, buffer_bytes):
    # 40 partition values interleaved in every batch, at most 3 open files: with 4 kB of buffers the
    # least recently written file is closed and the largest buffer written out; with room for all
    # rows, each value gets exactly one file. Every row lands once, in a file of its own value.
    monkeypatch.setattr(writer_mod, "MAX_OPEN_FILES", 3)
    schema = parse_schema("id BIGINT, p INT")
    spec = WriteSpec(
        table_uri=str(tmp_path),
        schema_json=schema.to_json_string(),
        partition_columns=("p",),
        row_group_bytes=buffer_bytes,
    )
    n, values = 6000, 40
    table = pa.table(
        {"id": pa.array(range(n), pa.int64()), "p": pa.array([(i * 7) % values for i in range(n)], pa.int32())}
    )
    w = TableWriter(spec, 3)
    out = []
    for b in table.to_batches(max_chunksize=500):
        out.extend(w.write(b))
        assert w._open_files <= 3
        assert w._buffer_bytes < buffer_bytes + b.nbytes
        # what the buffers hold in memory, not only the rows they count: no run keeps its batch alive
        held = sum(x.get_total_buffer_size() for p in w._parts.values() for x in p.buffer)
        assert held <= 2 * (w._buffer_bytes + b.nbytes), (held, w._buffer_bytes)
    out.extend(w.finish())
    assert w._open_files == 0 and not w._parts
    got = []
    for written in out:
        part = read_data_file(
            storage_for(str(tmp_path)), str(tmp_path), written.add.path, written.add.partition_values, schema, ["p"]
        )
        assert part.num_rows == written.num_rows == json.loads(written.add.stats)["numRecords"]
        assert set(part.column("p").to_pylist()) == {int(written.add.partition_values["p"])}
        got.extend(part.column("id").to_pylist())
    assert sorted(got) == list(range(n))
    if buffer_bytes > table.nbytes:
        assert len(out) == values
    else:  # each flush writes at least buffer_bytes / values: files stay within that bound
        assert len(out) <= values * (table.nbytes / buffer_bytes + 1)


def test_abort_deletes_every_open_file_of_every_partition(tmp_path):
    # several partition values with files open at once: abort() closes and deletes all of them, and
    # only the files already yielded (the caller's to discard) stay
    schema = parse_schema("id BIGINT, p INT")
    spec = WriteSpec(
        table_uri=str(tmp_path), schema_json=schema.to_json_string(), partition_columns=("p",), row_group_bytes=500
    )
    w = TableWriter(spec, 1)
    batch = pa.record_batch(
        {"id": pa.array(range(600), pa.int64()), "p": pa.array([i % 3 for i in range(600)], pa.int32())}
    )
    yielded = list(w.write(batch))
    assert w._open_files == 3
    w.abort()
    assert w._open_files == 0 and not w._parts
    on_disk = {os.path.relpath(p, tmp_path) for p in glob.glob(f"{tmp_path}/**/*.parquet", recursive=True)}
    assert on_disk == {decode_add_path(x.add.path) for x in yielded}
