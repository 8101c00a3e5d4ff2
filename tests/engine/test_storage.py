"""storage.py: put-if-absent semantics (never overwrite), listing, errors, multi-process race."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.storage import (
    LocalStorage,
    PyArrowStorage,
    is_local,
    normalize_table_uri,
    storage_for,
)


def test_put_if_absent_second_writer_gets_file_exists(tmp_path):
    st = LocalStorage()
    p = str(tmp_path / "_delta_log" / "00000000000000000000.json")
    st.write_bytes(p, b"first\n")
    with pytest.raises(FileExistsError):
        st.write_bytes(p, b"second\n")
    assert st.read_bytes(p) == b"first\n"  # never overwritten
    # no temp files left behind by the losing write
    assert sorted(os.listdir(tmp_path / "_delta_log")) == ["00000000000000000000.json"]


def test_overwrite_true_replaces(tmp_path):
    st = LocalStorage()
    p = str(tmp_path / "_last_checkpoint")
    st.write_bytes(p, b"a")
    st.write_bytes(p, b"bb", overwrite=True)
    assert st.read_bytes(p) == b"bb"


def test_list_dir_files_only_sorted_with_size_and_mtime(tmp_path):
    st = LocalStorage()
    for name in ["b.json", "a.json", "c.json"]:
        (tmp_path / name).write_bytes(b"x" * len(name))
    (tmp_path / "sub").mkdir()
    os.utime(tmp_path / "a.json", (1_600_000_000.5, 1_600_000_000.5))
    infos = st.list_dir(str(tmp_path))
    assert [i.name for i in infos] == ["a.json", "b.json", "c.json"]
    assert infos[0].size == 6 and infos[0].mtime_ms == 1_600_000_000_500
    assert st.list_dir(str(tmp_path / "missing")) == []


def test_read_missing_and_delete_missing(tmp_path):
    st = LocalStorage()
    with pytest.raises(FileNotFoundError):
        st.read_bytes(str(tmp_path / "nope"))
    st.delete(str(tmp_path / "nope"))  # no error
    assert not st.exists(str(tmp_path / "nope"))


def _race(args):
    path, payload, barrier_dir, n = args
    # crude barrier: wait until every worker has announced itself, so the writes overlap
    open(os.path.join(barrier_dir, str(os.getpid())), "w").close()
    while len(os.listdir(barrier_dir)) < n:
        pass
    try:
        LocalStorage().write_bytes(path, payload)
        return payload
    except FileExistsError:
        return None


def test_many_processes_race_for_one_path_exactly_one_wins(tmp_path):
    n = 8
    path = str(tmp_path / "_delta_log" / "00000000000000000001.json")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    payloads = [(f'{{"commitInfo":{{"writer":{i}}}}}\n' * 2000).encode() for i in range(n)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(n) as pool:
        results = pool.map(_race, [(path, p, str(barrier), n) for p in payloads])
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert LocalStorage().read_bytes(path) == winners[0]  # complete, not interleaved
    assert sorted(os.listdir(tmp_path / "_delta_log")) == ["00000000000000000001.json"]


def test_pyarrow_storage_refuses_unsafe_put_if_absent_unless_opted_in(tmp_path):
    uri = "file://" + str(tmp_path)
    st = PyArrowStorage(uri)
    with pytest.raises(InvalidArgumentError, match="safely"):
        st.write_bytes(uri + "/x.json", b"1")
    st2 = PyArrowStorage(uri, allow_unsafe_put_if_absent=True)
    st2.write_bytes(uri + "/x.json", b"1")
    with pytest.raises(FileExistsError):
        st2.write_bytes(uri + "/x.json", b"2")
    assert st2.read_bytes(uri + "/x.json") == b"1"
    assert [f.name for f in st2.list_dir(uri)] == ["x.json"]
    with pytest.raises(FileNotFoundError):
        st2.read_bytes(uri + "/missing")


def test_normalize_and_storage_for(tmp_path):
    assert normalize_table_uri(str(tmp_path) + "/") == str(tmp_path)
    assert normalize_table_uri("file://" + str(tmp_path)) == str(tmp_path)
    assert normalize_table_uri("s3://bucket/t/") == "s3://bucket/t"
    assert is_local(str(tmp_path)) and not is_local("s3://b/t")
    assert isinstance(storage_for(str(tmp_path)), LocalStorage)
    with pytest.raises(InvalidArgumentError):
        normalize_table_uri("  ")
