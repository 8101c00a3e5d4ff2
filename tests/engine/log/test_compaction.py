"""Log compaction files: written every SPAN commits on a table whose checkpoints are further apart,
read in place of the commits they cover, and every version's snapshot through them equals the one
replayed from the JSON commits alone (our random command sequences, and kernel's corpus table)."""

from __future__ import annotations

import json
import logging
import os

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from command_programs import run, steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import LogCorruptedError
from airflow_delta_provider_apps.engine.log.compaction import SPAN, compacted_actions, compaction_due
from airflow_delta_provider_apps.engine.log.listing import LogListing, list_log, select_segment
from airflow_delta_provider_apps.engine.log.replay import replay
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_snapshot_table
from airflow_delta_provider_apps.engine.storage import storage_for


def _state(res) -> dict:
    files = res.files
    keys = sorted(
        zip(files.column("path").to_pylist(), [json.dumps(d) for d in files.column("deletion_vector").to_pylist()])
    )
    return {
        "files": keys,
        "size": int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0,
        "protocol": res.protocol,
        "metadata": res.metadata,
        "txns": {k: v.version for k, v in res.set_transactions.items()},
        "domains": {k: v.configuration for k, v in res.domain_metadata.items()},
    }


def _both(root: str, version: int) -> tuple[dict, dict, bool]:
    """(the state through the compactions, the state from the JSON commits alone, whether a
    compaction was read)."""
    listing = list_log(storage_for(root), root)
    seg = select_segment(listing, version)
    plain = LogListing(listing.table_root, listing.log_dir, listing.commits, listing.checkpoints, None, [])
    bare = select_segment(plain, version)
    used = any(f.name.endswith(".compacted.json") for f in seg.commits)
    storage = storage_for(root)
    ours = replay(storage, seg.log_dir, seg.checkpoint, seg.commits)
    theirs = replay(storage, bare.log_dir, bare.checkpoint, bare.commits)
    return _state(ours), _state(theirs), used


STEP = steps("append", "delete", "update", "upsert", "optimize", "idempotent")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STEP, min_size=SPAN + 2, max_size=3 * SPAN), st.booleans(), st.booleans())
def test_every_snapshot_through_compactions_equals_the_commits_replay(tmp_path_factory, program, dv, row_ids):
    root = str(tmp_path_factory.mktemp("lc") / "t")
    props = {"delta.checkpointInterval": "25"}  # checkpoints further apart than a span
    if dv:
        props["delta.enableDeletionVectors"] = "true"
    if row_ids:
        props["delta.enableRowTracking"] = "true"
    create_table(root, schema="id BIGINT, p INT", properties=props)
    t = DeltaTable.for_path(None, root)
    run(t, root, program)
    latest = t.version()
    names = os.listdir(os.path.join(root, "_delta_log"))
    want = {f"{v - SPAN + 1:020d}.{v:020d}.compacted.json" for v in range(1, latest + 1) if compaction_due(v, 25)}
    assert want == {n for n in names if n.endswith(".compacted.json")}
    used = False
    for v in range(latest + 1):
        ours, theirs, read = _both(root, v)
        assert ours == theirs, f"version {v}"
        used = used or read
    assert used == (latest > SPAN)  # version SPAN's compaction stands in from version SPAN + 1 on
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id FROM t")
    rows = sorted(pa.table(theirs.read_all()).column("id").to_pylist())
    assert rows == sorted(read_snapshot_table(load_snapshot(storage_for(root), root)).column("id").to_pylist())


def test_the_corpus_table_with_compactions_reads_the_same_through_them(conformance_root):
    root = str(conformance_root / "delta-kernel-rs" / "compacted-log-files-table")
    latest = list_log(storage_for(root), root).latest_version
    used = False
    for v in range(latest + 1):
        try:
            ours, theirs, read = _both(root, v)
        except Exception as e:  # a version the log cannot rebuild (cleaned up) fails both ways alike
            assert "reconstructed" in str(e) or "not contiguous" in str(e), e
            continue
        assert ours == theirs, f"version {v}"
        used = used or read
    assert used


def test_compacted_actions_keep_the_newest_action_of_each_key():
    def line(kind, **action):
        return json.dumps({kind: action})

    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 4, "cardinality": 1}
    commits = [
        "\n".join(
            [
                line("commitInfo", operation="WRITE"),
                line("add", path="a", size=1),
                line("add", path="b", size=2),
                line("txn", appId="x", version=1),
                line("domainMetadata", domain="d", configuration="1", removed=False),
            ]
        ),
        "\n".join(
            [
                line("remove", path="a", deletionTimestamp=5),
                line("remove", path="b"),
                line("add", path="b", size=2, deletionVector=dv),  # the same file with a vector: another key
                line("cdc", path="c", size=1),
                line("metaData", id="m", schemaString="{}"),
            ]
        ),
        "\n".join(
            [
                line("add", path="a", size=3),
                line("txn", appId="x", version=2),
                line("domainMetadata", domain="d", configuration="", removed=True),
            ]
        ),
    ]
    got = [json.loads(x) for x in compacted_actions([c.encode() for c in commits])]
    assert got == [
        {"metaData": {"id": "m", "schemaString": "{}"}},
        {"txn": {"appId": "x", "version": 2}},
        {"domainMetadata": {"domain": "d", "configuration": "", "removed": True}},
        {"remove": {"path": "b"}},
        {"add": {"path": "b", "size": 2, "deletionVector": dv}},
        {"add": {"path": "a", "size": 3}},
    ]


def _damaged(data: bytes) -> list[tuple[str, bytes]]:
    """Ways a compaction file is found broken: torn mid-line, emptied, not JSON, JSON but no actions."""
    return [
        ("torn", data[: len(data) - 30]),
        ("empty", b""),
        ("garbage", b"\x00\xff not json at all\n"),
        ("not an object", data + b"[1, 2]\n"),
        ("an add that is no object", b'{"add": 5}\n' + data),
        ("an add without a path", data + b'{"add": {"size": 3, "dataChange": true}}\n'),
        ("a remove without a path", b'{"remove": {"deletionTimestamp": 1}}\n'),
    ]


@pytest.mark.parametrize("kind", [k for k, _ in _damaged(b"")])
def test_a_damaged_compaction_is_skipped_for_its_commits(tmp_path, caplog, kind):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT", properties={"delta.checkpointInterval": "25"})
    for i in range(SPAN + 2):  # commit SPAN writes the compaction of 1..SPAN, read from SPAN + 1 on
        append_arrow(root, pa.table({"id": [i]}))
    name = f"{1:020d}.{SPAN:020d}.compacted.json"
    path = os.path.join(root, "_delta_log", name)
    whole = open(path, "rb").read()
    want = list(range(SPAN + 2))
    t = DeltaTable.for_path(None, root)
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == want
    open(path, "wb").write(dict(_damaged(whole))[kind])
    caplog.set_level(logging.WARNING, logger="airflow_delta_provider_apps.engine")
    assert sorted(read_snapshot_table(load_snapshot(storage_for(root), root)).column("id").to_pylist()) == want
    warned = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert warned and "Skipped the damaged log compaction file" in warned[0]
    assert f"reading commits 1..{SPAN} in its place" in warned[0]
    assert not any(f"{SPAN:020d}.json" in r.getMessage() for r in caplog.records)  # the intact commit not blamed
    caplog.clear()  # said once per process: a long-lived server loading the table again does not repeat it
    assert sorted(read_snapshot_table(load_snapshot(storage_for(root), root)).column("id").to_pylist()) == want
    assert not [r for r in caplog.records if name in r.getMessage()]
    # the table can be written, and its older versions read, through the damaged file
    append_arrow(root, pa.table({"id": [99]}))
    assert sorted(read_snapshot_table(t.snapshot()).column("id").to_pylist()) == [*want, 99]
    old = read_snapshot_table(load_snapshot(storage_for(root), root, version=SPAN + 1))
    assert sorted(old.column("id").to_pylist()) == want[:-1]
    theirs = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(root)).execute("SELECT id FROM t")
    assert sorted(pa.table(theirs.read_all()).column("id").to_pylist()) == [*want, 99]


def test_a_damaged_compaction_whose_commits_are_gone_names_itself(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT", properties={"delta.checkpointInterval": "25"})
    for i in range(SPAN + 1):
        append_arrow(root, pa.table({"id": [i]}))
    name = f"{1:020d}.{SPAN:020d}.compacted.json"
    open(os.path.join(root, "_delta_log", name), "wb").write(b"garbage\n")
    listing = list_log(storage_for(root), root)
    seg = select_segment(listing)
    assert [f.name for f in seg.commits][1] == name
    os.remove(os.path.join(root, "_delta_log", f"{3:020d}.json"))  # gone after the listing
    with pytest.raises(LogCorruptedError) as e:
        replay(storage_for(root), seg.log_dir, seg.checkpoint, seg.commits)
    assert e.value.problem == f"The log file {name} has a line that is not valid JSON"


def test_a_commit_line_that_is_no_action_names_the_commit(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT")
    append_arrow(root, pa.table({"id": [1]}))
    path = os.path.join(root, "_delta_log", f"{1:020d}.json")
    whole = open(path, "rb").read()
    for line, what in [
        (b"[1]", "a line that is not a JSON object"),
        (b'{"add": "x"}', "a file action whose value is not a JSON object"),
        (b'{"remove": {"size": 1}}', "an 'remove' without a 'path'"),
    ]:
        open(path, "wb").write(whole + line + b"\n")
        with pytest.raises(LogCorruptedError) as e:
            load_snapshot(storage_for(root), root)
        assert e.value.problem == f"Commit 1 of the table ({1:020d}.json) has {what}"
        assert line.decode() in e.value.cause and e.value.fix
