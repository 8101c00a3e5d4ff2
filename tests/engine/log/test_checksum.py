"""Version checksum files (``<v>.crc``): after any sequence of commands each version's checksum equals
the state a full replay of the log computes; a rebased commit writes none; one is never overwritten;
a missing or broken one changes nothing; ``detail()`` says whether it agrees with the log."""

from __future__ import annotations

import json
import os

import deltalake
from command_programs import rows, run, steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.log.checksum import checksum_path, read_checksum, verify, write_checksum
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for


def _replayed(root: str, version: int) -> dict:
    """What a checksum of ``version`` must say, computed from a full replay of the log."""
    s = load_snapshot(storage_for(root), root, version=version)
    return {
        "numFiles": s.num_files,
        "tableSizeBytes": s.size_in_bytes,
        "metadata": s.metadata.to_json(),
        "protocol": s.protocol.to_json(),
        "setTransactions": sorted((t.app_id, t.version) for t in s.set_transactions.values()),
        "domainMetadata": sorted((d.domain, d.configuration) for d in s.domain_metadata.values()),
    }


def _written(root: str, version: int) -> dict | None:
    state = read_checksum(storage_for(root), root, version)
    if state is None:
        return None
    return {
        "numFiles": state["numFiles"],
        "tableSizeBytes": state["tableSizeBytes"],
        "metadata": state["metadata"],
        "protocol": state["protocol"],
        "setTransactions": sorted((t["appId"], t["version"]) for t in state["setTransactions"]),
        "domainMetadata": sorted((d["domain"], d["configuration"]) for d in state["domainMetadata"]),
    }


STEP = steps("append", "delete", "update", "upsert", "optimize", "properties", "idempotent", "restore")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STEP, min_size=1, max_size=8), st.booleans(), st.booleans(), st.booleans())
def test_every_versions_checksum_equals_the_replayed_state(tmp_path_factory, program, partitioned, dv, row_ids):
    """DML, MERGE, OPTIMIZE, RESTORE, property changes, idempotent appends (txns), checkpoints between
    commits, deletion vectors and row tracking (its domain's high water mark moving every commit)."""
    root = str(tmp_path_factory.mktemp("crc") / "t")
    props = {"delta.enableDeletionVectors": "true"} if dv else {}
    if row_ids:
        props["delta.enableRowTracking"] = "true"
    create_table(root, schema="id BIGINT, p INT", partition_by=["p"] if partitioned else None, properties=props)
    t = DeltaTable.for_path(None, root)
    run(t, root, program)
    latest = t.version()
    for v in range(latest + 1):
        assert _written(root, v) == _replayed(root, v), f"version {v}"
    theirs = deltalake.DeltaTable(root)  # another reader beside the checksums
    assert theirs.version() == latest and len(theirs.file_uris()) == _replayed(root, latest)["numFiles"]


def test_a_commit_rebased_over_a_concurrent_one_writes_no_checksum(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, p INT")
    stale = load_snapshot(storage_for(root), root)
    append_arrow(root, rows([1, 2]))  # version 1, checksum written
    append_arrow(stale, rows([3]))  # read version 0, lands at 2 after checking 1: no checksum
    assert _written(root, 1) == _replayed(root, 1)
    assert not os.path.exists(checksum_path(storage_for(root), root, 2))
    assert DeltaTable.for_path(None, root).detail()["checksum"] is None


def test_a_checksum_is_never_overwritten_and_a_broken_one_is_ignored(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, p INT")
    append_arrow(root, rows([1, 2, 3]))
    storage = storage_for(root)
    path = checksum_path(storage, root, 1)
    before = open(path).read()
    assert write_checksum(storage, root, 1, {"numFiles": 99}) is False
    assert open(path).read() == before
    detail = DeltaTable.for_path(None, root).detail()
    assert (detail["version"], detail["num_files"], detail["checksum"]) == (1, 1, "ok")
    assert detail["size_in_bytes"] == json.loads(before)["tableSizeBytes"] > 0
    for broken in ("", "{not json", json.dumps({"numFiles": 1})):
        with open(path, "w") as f:
            f.write(broken)
        assert read_checksum(storage, root, 1) is None
        assert DeltaTable.for_path(None, root).detail()["checksum"] is None
    with open(path, "w") as f:  # a checksum that disagrees with the log is reported, never believed
        f.write(before.replace('"numFiles":1', '"numFiles":7'))
    detail = DeltaTable.for_path(None, root).detail()
    assert detail["num_files"] == 1 and detail["checksum"] == "mismatch: numFiles 7 in the checksum, 1 in the log"


def test_other_writers_checksums_are_checked_against_our_replay(conformance_root):
    """Every checksum file the corpus's writers (Databricks, delta-spark, delta-rs) left agrees with
    what our replay of that version computes, except kernel's crc-full fixture, whose checksum claims
    10 files over a log that adds none: ``detail()`` reports that mismatch and keeps the log's answer."""
    checked = 0
    for crc in sorted(conformance_root.rglob("_delta_log/*.crc")):
        root = str(crc.parent.parent)
        snap = load_snapshot(storage_for(root), root, version=int(crc.name.split(".")[0]))
        status = verify(snap)
        if crc.parent.parent.name == "crc-full":
            assert (
                status
                == "mismatch: numFiles 10 in the checksum, 0 in the log; tableSizeBytes 5259 in the checksum, 0 in the log"
            )
            continue
        assert status == "ok", crc
        checked += 1
    assert checked >= 10
    detail = DeltaTable.for_path(None, str(conformance_root / "delta-kernel-rs" / "crc-full")).detail()
    assert detail["num_files"] == 0 and detail["checksum"].startswith("mismatch")
