"""storage.py: put-if-absent semantics (never overwrite), listing, errors, multi-process race."""

from __future__ import annotations

import multiprocessing as mp
import os

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.storage import (
    LISTING_SCHEMA,
    LocalStorage,
    PyArrowStorage,
    hidden_mask,
    is_local,
    normalize_table_uri,
    normalized_io_errors,
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
    st2.write_bytes(uri + "/_delta_log/y.json", b"y")  # a missing parent directory is created
    assert st2.read_bytes(uri + "/_delta_log/y.json") == b"y"
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


# ---- recursive listing, on every implementation

# relative path -> content; a table root with what VACUUM meets in the wild
TREE = {
    "a.parquet": b"aaa",
    "dt=1/part-0.parquet": b"p0",
    "dt=1/h=x/part-1.parquet": b"p1p1",
    "dt=1/_SUCCESS": b"",
    "dt=1/.part-0.parquet.crc": b"c",
    "_delta_log/00000000000000000000.json": b"{}",
    "_delta_log/_sidecars/s.parquet": b"s",
    "_x=1/part-2.parquet": b"p2",
    ".hidden/f.parquet": b"h",
    "_tmp/dt=2/f.parquet": b"t",
    "_change_data/cdc-0.parquet": b"cdc",
    "dt=1/_change_data/cdc-1.parquet": b"cdc1",
}
EMPTY_DIRS = ["empty", "dt=3", "_x=1/sub"]


def _make_tree(root) -> None:
    for rel, data in TREE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for d in EMPTY_DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    os.utime(root / "a.parquet", (1_600_000_000.25, 1_600_000_000.25))


def _ref_hidden(path: str, not_hidden=()) -> bool:
    """The VACUUM rule, component by component (independent of the vectorised one)."""
    *dirs, name = path.split("/")
    hidden_dir = any(d.startswith(("_", ".")) and "=" not in d and d not in not_hidden for d in dirs)
    return hidden_dir or name.startswith(("_", "."))


def _storages(tmp_path):
    """(storage, prefix of the tree) for LocalStorage and two pyarrow-filesystem paths."""
    root = tmp_path / "tree"
    return [
        (LocalStorage(), str(root)),
        (PyArrowStorage("file://" + str(root)), "file://" + str(root)),
        # object-store-like paths: relative to the filesystem, no leading '/'
        (PyArrowStorage("mem://", filesystem=pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())), "tree"),
    ]


IMPLS = ["local", "file-uri", "subtree"]


@pytest.fixture(params=range(3), ids=IMPLS)
def tree(request, tmp_path):
    _make_tree(tmp_path / "tree")
    return _storages(tmp_path)[request.param]


def test_list_files_recursive_everything_relative_sorted(tree):
    storage, prefix = tree
    t = storage.list_files(prefix)
    assert t.schema == LISTING_SCHEMA
    assert t.column("path").to_pylist() == sorted(TREE)  # empty directories are no rows
    assert dict(zip(t.column("path").to_pylist(), t.column("size").to_pylist())) == {k: len(v) for k, v in TREE.items()}
    row = t.column("path").to_pylist().index("a.parquet")
    assert t.column("mtime_ms")[row].as_py() == 1_600_000_000_250
    # a trailing slash on the prefix changes nothing; the relative paths join back to readable locations
    assert storage.list_files(prefix + "/").equals(t)
    for rel in t.column("path").to_pylist():
        assert storage.read_bytes(storage.join(prefix, rel)) == TREE[rel]


def test_list_files_skip_hidden_follows_the_vacuum_rule(tree):
    storage, prefix = tree
    visible = storage.list_files(prefix, skip_hidden=True).column("path").to_pylist()
    assert visible == ["_x=1/part-2.parquet", "a.parquet", "dt=1/h=x/part-1.parquet", "dt=1/part-0.parquet"]
    assert visible == sorted(p for p in TREE if not _ref_hidden(p))
    with_cdc = storage.list_files(prefix, skip_hidden=True, not_hidden=["_change_data"]).column("path").to_pylist()
    assert with_cdc == sorted(p for p in TREE if not _ref_hidden(p, ["_change_data"]))
    assert set(with_cdc) - set(visible) == {"_change_data/cdc-0.parquet", "dt=1/_change_data/cdc-1.parquet"}
    # nothing is dropped silently: the full listing with the mask says the same
    full = storage.list_files(prefix)
    mask = hidden_mask(full.column("path"))
    assert full.filter(pa.compute.invert(mask)).column("path").to_pylist() == visible


def test_list_files_not_recursive_and_missing_or_file_prefix(tree):
    storage, prefix = tree
    assert storage.list_files(prefix, recursive=False).column("path").to_pylist() == ["a.parquet"]
    for nothing in (
        storage.join(prefix, "missing"),
        storage.join(prefix, "missing/deeper"),
        storage.join(prefix, "empty"),
    ):
        t = storage.list_files(nothing)
        assert t.num_rows == 0 and t.schema == LISTING_SCHEMA
    assert storage.list_files(storage.join(prefix, "a.parquet")).num_rows == 0  # a file is no directory
    assert storage.list_dir(storage.join(prefix, "missing")) == []


def test_list_dir_gives_full_locations(tree):
    storage, prefix = tree
    assert [(f.path, f.size) for f in storage.list_dir(storage.join(prefix, "dt=1"))] == [
        (storage.join(prefix, "dt=1", name), len(TREE["dt=1/" + name]))
        for name in sorted([".part-0.parquet.crc", "_SUCCESS", "part-0.parquet"])
    ]


def test_list_dir_from_a_start_key_is_the_full_listing_after_it(tree):
    storage, prefix = tree
    d = storage.join(prefix, "dt=1")  # files and a sub-directory (h=x), which is no row
    full = storage.list_dir(d)
    for key in ["", ".part", ".part-0.parquet.crc", "_SUCCESS", "a", "h=x", "part-0.parquet", "~"]:
        assert storage.list_dir(d, start_after=key) == [f for f in full if f.name > key], key
    assert storage.list_dir(storage.join(prefix, "missing"), start_after="a") == []


_component = st.text(alphabet="_.=ab", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_component, min_size=1, max_size=4).map("/".join), max_size=20))
def test_hidden_mask_matches_the_rule_per_component(paths):
    exempt = ["_a", "_.b"]  # '.' must be taken literally, not as a regex wildcard
    arr = pa.array(paths, pa.string())
    assert hidden_mask(arr).to_pylist() == [_ref_hidden(p) for p in paths]
    assert hidden_mask(arr, not_hidden=exempt).to_pylist() == [_ref_hidden(p, exempt) for p in paths]


def test_hidden_mask_refuses_a_path_as_exempt_name():
    with pytest.raises(InvalidArgumentError, match="not a directory name"):
        hidden_mask(pa.array(["_a/b/c"]), not_hidden=["_a/b"])


# ---- not found is FileNotFoundError, whatever the filesystem


@pytest.fixture(params=range(3), ids=IMPLS)
def impl(request, tmp_path):
    (tmp_path / "tree").mkdir()
    return _storages(tmp_path)[request.param]


def test_every_not_found_is_file_not_found_naming_the_location(impl):
    storage, prefix = impl
    missing = storage.join(prefix, "dir", "missing.parquet")
    for op in (
        storage.read_bytes,
        storage.open_input_file,
        storage.file_info,
        lambda p: storage.delete(p, missing_ok=False),
    ):
        with pytest.raises(FileNotFoundError) as e:
            op(missing)
        assert e.value.filename == missing
    storage.delete(missing)  # missing_ok by default: cleanup and VACUUM race other cleaners
    assert not storage.exists(missing)


def test_output_stream_creates_parents_and_input_file_seeks(impl):
    storage, prefix = impl
    path = storage.join(prefix, "dt=1", "deep", "f.bin")
    with storage.open_output_stream(path) as out:
        out.write(b"0123456789")
    with storage.open_input_file(path) as f:
        f.seek(4)
        assert f.read(3) == b"456"
    info = storage.file_info(path)
    assert (info.path, info.size) == (path, 10)
    assert storage.list_files(prefix).column("path").to_pylist() == ["dt=1/deep/f.bin"]
    with pytest.raises(IsADirectoryError):
        storage.file_info(storage.join(prefix, "dt=1"))
    storage.delete(path, missing_ok=False)
    assert not storage.exists(path)


@pytest.mark.parametrize(
    "error",
    [
        OSError("When getting information for key 'k' in bucket 'b': AWS Error NO_SUCH_KEY"),
        OSError("Path does not exist 'b/k'"),
        OSError(2, "No such file or directory"),
        FileNotFoundError("[Errno 2] Failed to open local file '/x'"),
    ],
)
def test_normalized_io_errors_turns_other_spellings_into_file_not_found(error):
    with pytest.raises(FileNotFoundError) as e, normalized_io_errors("s3://b/k"):
        raise error
    assert e.value.filename == "s3://b/k"


def test_normalized_io_errors_lets_other_errors_through():
    with pytest.raises(PermissionError), normalized_io_errors("s3://b/k"):
        raise PermissionError(13, "Permission denied")
