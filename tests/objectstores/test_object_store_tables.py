"""Tables on real object-store servers on loopback, S3 (moto) and Azure Blob (Azurite): every
operation that needs no Spark, commits made with the store's conditional create, deltalake reading
what we wrote and us reading what it wrote, racing writers in separate processes; on S3 also a
server that ignores conditional writes (refused before anything is written) and the request on the
wire. Spark's side (scan, append, overwrite, DML in tasks) is in tests/spark/test_s3_spark.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import StorageError
from airflow_delta_provider_apps.engine.log.checksum import verify
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import ObjectStoreStorage, storage_for

deltalake = pytest.importorskip("deltalake")

DAY_MS = 86_400_000


@pytest.fixture(params=["s3", "azure"])
def store(request):
    """A fresh bucket (S3) or container (Azure) with the store's standard variables set."""
    return request.getfixturevalue(request.param)


def _rows(root: str, version: int | None = None) -> list[tuple]:
    snap = load_snapshot(storage_for(root), root, version)
    t = read_snapshot_table(snap)
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "p"))))


def _theirs(store, root: str, version: int | None = None) -> list[tuple]:
    dt = deltalake.DeltaTable(root, storage_options=store.deltalake_options, version=version)
    t = dt.to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "p"))))


def test_a_table_lives_on_the_store_through_every_log_and_dml_operation(store):
    root = store.uri("events")
    assert isinstance(storage_for(root), ObjectStoreStorage)
    create_table(root, schema="id BIGINT, p STRING", partition_by=["p"])
    append_arrow(root, pa.table({"id": list(range(10)), "p": ["a", "b"] * 5}))
    append_arrow(root, pa.table({"id": list(range(10, 16)), "p": ["a", "c"] * 3}))
    t = DeltaTable(None, root)
    assert t.delete("id < 3")["numDeletedRows"] == 3
    assert t.update({"id": "id + 100"}, "p = 'c'")["numUpdatedRows"] == 3
    expected = sorted(
        [(i, "ab"[i % 2]) for i in range(3, 10)]
        + [(i, "a") for i in range(10, 16, 2)]
        + [(i + 100, "c") for i in range(11, 16, 2)]
    )
    assert _rows(root) == expected == _theirs(store, root)

    # Time travel: every version reads the same in both engines.
    for v in range(5):
        assert _rows(root, v) == _theirs(store, root, v)
    assert len(_rows(root, 1)) == 10

    # Checkpoint, then log cleanup (its retention passed by the clock we hand it): the table still reads.
    t.checkpoint()
    assert "events/_delta_log/00000000000000000004.checkpoint.parquet" in store.keys("events/_delta_log/")
    from airflow_delta_provider_apps.engine.log.cleanup import cleanup_expired_logs

    snap = load_snapshot(storage_for(root), root)
    report = cleanup_expired_logs(snap.storage, root, snap, now_ms=int(time.time() * 1000) + 40 * DAY_MS)
    assert report["num_deleted_commits"] == 4
    assert not any(k.endswith("00000000000000000000.json") for k in store.keys("events/_delta_log/"))
    assert _rows(root) == expected == _theirs(store, root)
    assert [h["operation"] for h in t.history()] == ["UPDATE"]  # the expired commits are gone

    # VACUUM lists the store (paginated LIST) and deletes exactly the removed files.
    live = {f["path"] for f in load_snapshot(storage_for(root), root).files.to_pylist()}
    before = [k for k in store.keys("events/") if k.endswith(".parquet") and "_delta_log" not in k]
    m = t.vacuum(0, enforce_retention_duration=False)
    after = [k for k in store.keys("events/") if k.endswith(".parquet") and "_delta_log" not in k]
    assert {k.removeprefix("events/") for k in after} == live and len(before) - len(after) == m["numDeletedFiles"] > 0
    assert _rows(root) == expected == _theirs(store, root)


def test_we_read_what_deltalake_wrote_and_it_reads_our_appends(store):
    root = store.uri("theirs")
    deltalake.write_deltalake(
        root,
        pa.table({"id": [1, 2, 3], "p": ["x", "y", "x"]}),
        partition_by=["p"],
        storage_options=store.deltalake_options,
    )
    deltalake.write_deltalake(
        root, pa.table({"id": [4], "p": ["y"]}), mode="append", storage_options=store.deltalake_options
    )
    assert _rows(root) == [(1, "x"), (2, "y"), (3, "x"), (4, "y")]
    append_arrow(root, pa.table({"id": [5], "p": ["z"]}))
    assert _theirs(store, root) == [(1, "x"), (2, "y"), (3, "x"), (4, "y"), (5, "z")]
    if not store.uri().startswith("s3://"):
        return  # deltalake 1.6 cannot commit a third version to Azurite even after its own commits
    # And deltalake commits after us, to the version after ours.
    deltalake.write_deltalake(
        root, pa.table({"id": [6], "p": ["z"]}), mode="append", storage_options=store.deltalake_options
    )
    assert load_snapshot(storage_for(root), root).version == 3 and len(_rows(root)) == 6


RACER = textwrap.dedent(
    """
    import sys, time, pyarrow as pa
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    root, writer, commits, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    time.sleep(max(0.0, start - time.time()))
    versions = []
    for i in range(commits):
        r = append_arrow(root, pa.table({"id": [writer * 1000 + i], "p": [f"w{writer}"]}))
        versions.append(r.version)
    print(" ".join(map(str, versions)))
    """
)


def test_eight_processes_racing_commits_lose_and_double_nothing(store):
    """Each append reads the latest version and commits the next one with a create-only PUT; losers of
    a race retry on the next version. Every commit lands exactly once, at a version of its own."""
    root = store.uri("race")
    create_table(root, schema="id BIGINT, p STRING")
    writers, commits = 8, 4
    start = time.time() + 3  # all start together, after their imports
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, root, str(w), str(commits), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    versions = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        versions += [int(v) for v in out.split()]
    assert sorted(versions) == list(range(1, writers * commits + 1))  # no version twice, none lost
    expected = sorted((w * 1000 + i, f"w{w}") for w in range(writers) for i in range(commits))
    assert _rows(root) == expected == _theirs(store, root)
    # The log holds exactly one commit per version, each adding one file.
    snap = load_snapshot(storage_for(root), root)
    assert snap.version == writers * commits and snap.num_files == writers * commits
    # No probe object, temp file or directory marker is left in the log (checkpoints every 10 versions;
    # the checksum of each version whose commit did not have to rebase, each agreeing with the log).
    log = store.keys("race/_delta_log/")
    assert [k for k in log if not k.endswith((".checkpoint.parquet", "_last_checkpoint", ".crc"))] == [
        f"race/_delta_log/{v:020d}.json" for v in range(writers * commits + 1)
    ]
    checksums = [int(k.rsplit("/", 1)[1].split(".")[0]) for k in log if k.endswith(".crc")]
    assert 0 in checksums and set(checksums) <= set(range(writers * commits + 1))
    for v in checksums:
        assert verify(load_snapshot(storage_for(root), root, version=v)) == "ok", v


def test_a_server_that_ignores_conditional_writes_is_refused_before_anything_is_written(s3_server, monkeypatch):
    from object_store_servers import no_conditional_writes_proxy

    proxy = no_conditional_writes_proxy(s3_server.port)
    try:
        bucket = s3_server.new_bucket()
        for k, v in s3_server.env(proxy.endpoint).items():
            monkeypatch.setenv(k, v)
        root = f"s3://{bucket}/t"
        with pytest.raises(StorageError) as e:
            create_table(root, schema="id BIGINT")
        msg = str(e.value)
        assert "ignores conditional writes" in msg and "DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT" in msg
        assert s3_server.keys(bucket) == []  # nothing written, the probe removed

        # A single writer may still opt in, knowingly.
        monkeypatch.setenv("DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT", "true")
        create_table(root, schema="id BIGINT")
        append_arrow(root, pa.table({"id": [1, 2]}))
        assert load_snapshot(storage_for(root), root).version == 1
    finally:
        proxy.stop()


def test_the_commit_request_is_a_create_only_put(s3, monkeypatch):
    """What travels to S3 for a commit: a PUT with ``If-None-Match: *``, seen by a recording proxy."""
    from object_store_servers import LoopbackProxy

    proxy = LoopbackProxy(s3.server.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        root = s3.uri("recorded")
        create_table(root, schema="id BIGINT")
    finally:
        proxy.stop()
    seen = proxy.requests
    commit = [s for s in seen if s[0] == "PUT" and s[1].endswith("/_delta_log/00000000000000000000.json")]
    assert commit and all(h == "*" for _, _, h in commit), seen
    # The first commit of a process to a bucket checks that the store honours the precondition.
    probes = [s for s in seen if "conditional-create-probe" in s[1]]
    assert [(m, h) for m, _, h in probes] == [("PUT", "*"), ("PUT", "*")], seen
    assert any(m == "POST" and p.endswith("?delete") for m, p, _ in seen), "the probe is deleted afterwards"


def test_credentials_for_one_block_of_work_reach_the_store_without_the_process_environment(store, monkeypatch):
    """What the worker and the triggerer do with a storage connection: the settings apply inside the
    block only (another thread or task with other credentials is not affected)."""
    from airflow_delta_provider_apps.protocol import latest_version, storage_settings

    env = dict(store.env)
    for name in env:
        monkeypatch.delenv(name)
    root = store.uri("scoped")
    with storage_settings(env):
        create_table(root, schema="id BIGINT, p STRING")
        append_arrow(root, pa.table({"id": [1], "p": ["a"]}))
        assert latest_version(storage_for(root), root) == 1
    from airflow_delta_provider_apps.engine.storage import executor_env

    assert not any(name in __import__("os").environ for name in env) and executor_env() == {}


def test_the_version_sensor_polls_the_store_with_its_connection(s3, monkeypatch):
    """The sensor's check (worker and triggerer alike) reads the log with ``storage_conn_id``'s
    credentials; the process environment holds none."""
    import json as _json

    from airflow_delta_provider.version_decision import decide

    root = s3.uri("sensed")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1]}))
    conn = {
        "conn_type": "aws",
        "login": s3.env["AWS_ACCESS_KEY_ID"],
        "password": s3.env["AWS_SECRET_ACCESS_KEY"],
        "extra": {"region_name": "us-east-1", "endpoint_url": s3.server.endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_T", _json.dumps(conn))
    for name in s3.env:
        monkeypatch.delenv(name)
    d = decide(root, 0, storage_conn_id="lake_s3_t")
    assert (d.fired, d.version, d.error) == (True, 1, None)
    assert [op["operation"] for op in d.operations] == ["WRITE"]


def test_vacuum_with_an_s3_inventory_deletes_what_the_listing_deletes(s3):
    """delta-spark's VACUUM ... USING INVENTORY on S3: an inventory report (parquet in the bucket,
    made from the bucket's own LIST as S3 Inventory would: s3:// paths, sizes, times, another
    prefix's objects too) plans the same deletions as listing the table, and VACUUM with it deletes
    exactly those."""
    import io

    import boto3
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine.commands.vacuum import vacuum

    root = s3.uri("events")
    create_table(root, schema="id BIGINT, p STRING", partition_by=["p"])
    append_arrow(root, pa.table({"id": list(range(6)), "p": ["a", "b"] * 3}))
    t = DeltaTable(None, root)
    t.delete("p = 'b'")
    client = boto3.client("s3", **_boto(s3))
    for key in ("events/p=a/orphan.parquet", "events/_staging/hidden.parquet", "other/part-0.parquet"):
        client.put_object(Bucket=s3.bucket, Key=key, Body=b"x")
    rows = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket):
        for o in page.get("Contents", []):
            rows.append((f"s3://{s3.bucket}/{o['Key']}", o["Size"], False, int(o["LastModified"].timestamp() * 1000)))
    inventory = pa.table(dict(zip(["path", "length", "isDir", "modificationTime"], map(list, zip(*rows)))))
    buf = io.BytesIO()
    pq.write_table(inventory, buf)
    client.put_object(Bucket=s3.bucket, Key="inventory/data/report.parquet", Body=buf.getvalue())
    inv = f"s3://{s3.bucket}/inventory/data"

    later = int(time.time() * 1000) + 3_600_000  # every object is older than retention 0 then
    snap = load_snapshot(storage_for(root), root)
    listed = vacuum(snap, 0, enforce_retention_duration=False, dry_run=True, now_ms=later).fields["files"]
    planned = vacuum(snap, 0, enforce_retention_duration=False, dry_run=True, now_ms=later, inventory=inv)
    assert planned.fields["files"] == listed and f"{root}/p=a/orphan.parquet" in listed
    assert len([p for p in listed if "/p=b/" in p]) == 1 and not any("_staging" in p or "other/" in p for p in listed)
    expected = _rows(root)
    done = vacuum(snap, 0, enforce_retention_duration=False, now_ms=later, inventory=inv)
    assert done.metrics.num_deleted_files == len(listed)
    keys = set(s3.keys())
    assert not any(p.removeprefix(f"s3://{s3.bucket}/") in keys for p in listed)
    assert {"events/_staging/hidden.parquet", "other/part-0.parquet", "inventory/data/report.parquet"} <= keys
    assert _rows(root) == expected == _theirs(s3, root)


def _boto(s3) -> dict:
    o = s3.deltalake_options
    return {
        "endpoint_url": o["AWS_ENDPOINT_URL"],
        "region_name": o["AWS_REGION"],
        "aws_access_key_id": o["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": o["AWS_SECRET_ACCESS_KEY"],
    }


def test_the_log_listed_from_a_start_key_is_the_full_listing_after_it(store):
    """A commit's check for concurrent commits lists the log only from the version it read on (the
    store's listing from a start key): the same files the full listing has after that key, nothing
    from deeper "directories" (_sidecars/)."""
    from airflow_delta_provider_apps.engine.log.listing import latest_version

    root = store.uri("events")
    create_table(root, schema="id BIGINT, p STRING", partition_by=["p"])
    for i in range(3):
        append_arrow(root, pa.table({"id": [i], "p": ["a"]}))
    storage = storage_for(root)
    log = storage.join(root, "_delta_log")
    storage.write_bytes(storage.join(log, "_sidecars", "s.parquet"), b"x", overwrite=True)
    full = storage.list_dir(log)
    for key in ["", f"{1:020d}", f"{2:020d}.json", "_last_checkpoint", "~"]:
        after = storage.list_dir(log, start_after=key)
        assert [(f.path, f.size) for f in after] == [(f.path, f.size) for f in full if f.name > key], key
        assert all(abs(a.mtime_ms - f.mtime_ms) < 1000 for a, f in zip(after, [f for f in full if f.name > key]))
    assert [latest_version(storage, root, since=v) for v in (0, 2, 3, 4)] == [3, 3, 3, None]


def test_an_append_on_s3_lists_the_log_once_in_full_then_from_the_version_it_read(s3, monkeypatch):
    """On the wire, through a recording proxy: an append's snapshot lists ``_delta_log`` (one
    LIST), its check for concurrent commits lists it with ``start-after`` the version it read."""
    from urllib.parse import parse_qs, urlparse

    from object_store_servers import LoopbackProxy

    root = s3.uri("listed")
    create_table(root, schema="id BIGINT")
    for i in range(3):
        append_arrow(root, pa.table({"id": [i]}))
    proxy = LoopbackProxy(s3.server.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        assert append_arrow(root, pa.table({"id": [9]})).version == 4
    finally:
        proxy.stop()
    lists = [parse_qs(urlparse(p).query) for m, p, _ in proxy.requests if m == "GET" and "list-type=2" in p]
    of_log = [q for q in lists if q.get("prefix", [""])[0].startswith("listed/_delta_log")]
    assert [q.get("start-after", [None])[0] for q in of_log] == [None, f"listed/_delta_log/{3:020d}"], proxy.requests
