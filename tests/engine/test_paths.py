"""Paths named in the log never leave the table root: every spelling, every kind of file, refused
before a byte is read (issue: hostile logs)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from txn_helpers import append, create_table, snapshot

from airflow_delta_provider_apps.engine.errors import LogCorruptedError
from airflow_delta_provider_apps.engine.paths import ALLOWED_PREFIXES_ENV, resolve_log_path
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

OUTSIDE = [
    "../secret.parquet",
    "%2E%2E/secret.parquet",
    "p=a/../../secret.parquet",
    "/etc/secret.parquet",
    "file:///etc/secret.parquet",
    "file:/tmp/secret.parquet",
    "s3://other-bucket/t/x.parquet",
    "hdfs://nn/elsewhere/x.parquet",
]


@pytest.mark.parametrize("path", OUTSIDE)
def test_paths_leaving_the_root_are_refused(path):
    with pytest.raises(LogCorruptedError) as e:
        resolve_log_path("/data/t", path)
    assert path in str(e.value) and ALLOWED_PREFIXES_ENV in str(e.value)


def test_paths_inside_the_root_resolve():
    assert resolve_log_path("/data/t", "p=a/x.parquet") == "/data/t/p=a/x.parquet"
    assert resolve_log_path("/data/t", "p=a/../p=b/x.parquet") == "/data/t/p=b/x.parquet"
    assert resolve_log_path("/data/t", "/data/t/p=a/x.parquet") == "/data/t/p=a/x.parquet"
    assert resolve_log_path("/data/t", "file:///data/t/x%20y.parquet") == "/data/t/x y.parquet"
    # a sibling whose name starts like the root is outside it
    with pytest.raises(LogCorruptedError):
        resolve_log_path("/data/t", "/data/t2/x.parquet")
    sidecar_base = "/data/t/_delta_log/_sidecars"
    assert resolve_log_path("/data/t", "a.parquet", kind="sidecar", base=sidecar_base) == f"{sidecar_base}/a.parquet"
    with pytest.raises(LogCorruptedError, match="sidecar"):
        resolve_log_path("/data/t", "../../../x.parquet", kind="sidecar", base=sidecar_base)


def test_absolute_paths_need_the_opt_in(monkeypatch):
    with pytest.raises(LogCorruptedError):
        resolve_log_path("/data/t", "/mnt/source/x.parquet")
    monkeypatch.setenv(ALLOWED_PREFIXES_ENV, "/mnt/source, s3://shared")
    assert resolve_log_path("/data/t", "/mnt/source/x.parquet") == "/mnt/source/x.parquet"
    assert resolve_log_path("/data/t", "s3://shared/k/x.parquet") == "s3://shared/k/x.parquet"
    with pytest.raises(LogCorruptedError):  # the opt-in never lets relative paths climb out
        resolve_log_path("/data/t", "../mnt/source/x.parquet")


def _commit(root, version, actions):
    with open(f"{root}/_delta_log/{version:020d}.json", "w") as f:
        for a in actions:
            f.write(json.dumps(a) + "\n")


@pytest.mark.parametrize("spelling", ["../secret.parquet", "%2E%2E/secret.parquet", "ABS", "FILEURI"])
def test_reading_a_table_that_names_an_outside_file_fails_naming_it(tmp_path, spelling):
    root = tmp_path / "t"
    create_table(str(root))
    append(str(root), [1, 2])
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"id": [666], "v": ["stolen"]}), secret)
    path = {"ABS": str(secret), "FILEURI": f"file://{secret}"}.get(spelling, spelling)
    _commit(
        root,
        2,
        [
            {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
            {
                "add": {
                    "path": path,
                    "partitionValues": {"p": "a"},
                    "size": secret.stat().st_size,
                    "modificationTime": 1,
                    "dataChange": True,
                }
            },
        ],
    )
    with pytest.raises(LogCorruptedError) as e:
        read_snapshot_table(snapshot(str(root)))
    assert path in str(e.value)


# ---- confinement by construction: the snapshot's file table and the winners' commits --------------

from airflow_delta_provider_apps.engine.paths import confine_paths, file_locations  # noqa: E402

HOSTILE = [*OUTSIDE, "..", "p=a/../..", "p=a/%2e%2e/%2E%2E/x", "a%2F..%2F..%2Fx", "", "a\x00b"]


@pytest.mark.parametrize("path", HOSTILE)
def test_the_vectorised_check_refuses_every_spelling_the_resolver_refuses(path):
    with pytest.raises(LogCorruptedError):
        resolve_log_path("/data/t", path)
    many = pa.array([f"p=a/f{k}.parquet" for k in range(1000)] + [path] + ["z.parquet"])
    with pytest.raises(LogCorruptedError) as e:
        confine_paths("/data/t", many)
    assert repr(path)[1:-1] in str(e.value) or path in str(e.value)


def test_the_vectorised_check_and_the_resolver_agree_on_locations():
    paths = ["p=a/x.parquet", "p=a%252Fb/x.parquet", "./y.parquet", "a//b.parquet", "p=a/../p=b/z.parquet"]
    confine_paths("/data/t", pa.array(paths))
    assert file_locations("/data/t", pa.array(paths)) == [resolve_log_path("/data/t", p) for p in paths]


@pytest.mark.parametrize("window", [1, 2, 5, 1 << 17])
def test_the_windowed_scan_flags_blemishes_across_window_edges(monkeypatch, window):
    """The byte scan works a window at a time: a blemish straddling two windows (``//``, ``/.``) or
    sitting at either edge is found, in whole arrays and slices, as a plain-Python check finds it."""
    import re

    from airflow_delta_provider_apps.engine import paths as P

    def plain(p):  # an escape may not decode to a dot, slash, colon, NUL or backslash
        if not p or p[0] in "/." or p.endswith("/") or any(c in p for c in ":\\\x00"):
            return False
        return "//" not in p and "/." not in p and not re.search("%(2[EeFf]|3[Aa]|00|5[Cc])", p)

    monkeypatch.setattr(P, "SCAN_WINDOW", window)
    values = ["a/b", "a//b", "a/.b", "x:y", "a%2Fb", "a%41b", "b/", ".a", "ab", None, "", "a\\b", "p=1/%2e", "c/d"]
    arr = pa.array(values * 3, pa.string())
    for a in (arr, arr.slice(5, 20), arr.slice(13)):
        assert P.plainly_inside(a).tolist() == [v is not None and plain(v) for v in a.to_pylist()]


def _hostile_commit(root, version, action: str, path: str, dv: dict | None = None):
    body = {"path": path, "partitionValues": {"p": "a"}, "size": 1, "dataChange": True}
    if action == "add":
        body["modificationTime"] = 1
    else:
        body["deletionTimestamp"] = 1
    if dv is not None:
        body["deletionVector"] = dv
    _commit(root, version, [{"commitInfo": {"timestamp": 1, "operation": "WRITE"}}, {action: body}])


@pytest.mark.parametrize("action", ["add", "remove"])
def test_a_snapshot_naming_an_outside_file_or_tombstone_cannot_be_loaded(tmp_path, action):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1])
    _hostile_commit(root, 2, action, "../victim.parquet")
    with pytest.raises(LogCorruptedError, match=r"\.\./victim\.parquet"):
        snapshot(root)
    snapshot(root, version=1)  # the versions before it still read


@pytest.mark.parametrize(
    "dv",
    [
        {"storageType": "p", "pathOrInlineDv": "../dv.bin", "offset": 1, "sizeInBytes": 10, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "../ab" + "0" * 20, "offset": 1, "sizeInBytes": 10, "cardinality": 1},
    ],
)
def test_a_deletion_vector_outside_the_table_is_refused_when_the_snapshot_is_built(tmp_path, dv):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1])
    _hostile_commit(root, 2, "add", "p=a/inside.parquet", dv)
    with pytest.raises(LogCorruptedError, match="deletion vector"):
        snapshot(root)


def test_a_concurrent_winner_naming_an_outside_file_fails_the_commit_and_writes_nothing(tmp_path):
    from txn_helpers import txn, write_file

    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1])
    mine = txn(root, operation="WRITE", operation_parameters={"mode": "Append"})
    _hostile_commit(root, 2, "add", "../stolen.parquet")  # lands between our read and our commit
    with pytest.raises(LogCorruptedError, match=r"\.\./stolen\.parquet"):
        mine.commit([write_file(root, [2], "a")])
    assert sorted(p.name for p in (tmp_path / "t" / "_delta_log").glob("*.json"))[-1] == f"{2:020d}.json"
