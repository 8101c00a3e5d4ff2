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
