"""log/listing.py and log/last_checkpoint.py: exact name patterns, segment selection, the hint."""

from __future__ import annotations

import json
import os

import pytest

from airflow_delta_provider_apps.engine.errors import (
    InvalidArgumentError,
    LogCorruptedError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta_provider_apps.engine.log.last_checkpoint import (
    canonicalize,
    compute_checksum,
    last_checkpoint_bytes,
    parse_last_checkpoint,
    read_last_checkpoint,
    url_encode,
    write_last_checkpoint,
)
from airflow_delta_provider_apps.engine.log.listing import latest_version, list_log, select_segment
from airflow_delta_provider_apps.engine.storage import LocalStorage

ST = LocalStorage()
UUID = "3a0d65cd-4056-49b8-937b-95f9e3ee90e5"


def touch(root, *names):
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for n in names:
        p = log / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"{}\n")


def v(n: int) -> str:
    return f"{n:020d}"


# ------------------------------------------------------------------------------------ patterns


def test_exact_patterns_and_strays_ignored(tmp_path):
    touch(
        tmp_path,
        f"{v(0)}.json",
        f"{v(1)}.json",
        f"{v(2)}.json",
        f"{v(1)}.crc",
        f"{v(0)}.{v(1)}.compacted.json",
        "_last_checkpoint",
        f".{v(3)}.json.tmp",
        f"{v(3)}.json.tmp",
        f"{v(3)}.json.crc",
        "1.json",
        f"{v(4)}.JSON",
        f".tmp/{v(5)}.json",
        f"_autostats/{v(6)}.json",
        f"_sidecars/{v(7)}.checkpoint.parquet",
        f"{v(2)}.checkpoint.parquet",
        f"{v(2)}.checkpoint.parquet.crc",
        f"{v(2)}.checkpoint.0000000001.0000000002.parquet",  # incomplete multi-part set
        f"{v(2)}.checkpoint.{UUID}.json",
        f"{v(2)}.checkpoint.{UUID}.avro",
        f"{v(2)}.checkpoint.not-a-uuid.json",
    )
    lst = list_log(ST, str(tmp_path))
    assert lst.commit_versions == [0, 1, 2]
    assert [(c.version, c.kind, c.format) for c in lst.checkpoints] == [(2, "classic", "parquet"), (2, "uuid", "json")]
    assert lst.latest_version == 2
    assert latest_version(ST, str(tmp_path)) == 2


def test_multipart_complete_sets_only(tmp_path):
    touch(
        tmp_path,
        f"{v(0)}.json",
        f"{v(1)}.json",
        f"{v(2)}.json",
        f"{v(1)}.checkpoint.0000000001.0000000003.parquet",
        f"{v(1)}.checkpoint.0000000003.0000000003.parquet",  # part 2 of 3 missing
        f"{v(2)}.checkpoint.0000000002.0000000002.parquet",
        f"{v(2)}.checkpoint.0000000001.0000000002.parquet",
    )
    lst = list_log(ST, str(tmp_path))
    assert [(c.version, c.kind) for c in lst.checkpoints] == [(2, "multipart")]
    cp = lst.checkpoints[0]
    assert [f.name for f in cp.files] == [
        f"{v(2)}.checkpoint.0000000001.0000000002.parquet",
        f"{v(2)}.checkpoint.0000000002.0000000002.parquet",
    ]
    seg = select_segment(lst, 1)
    assert seg.checkpoint is None and [c.version for c in seg.commits] == [0, 1]


def test_no_table(tmp_path):
    with pytest.raises(TableNotFoundError, match="No Delta table"):
        list_log(ST, str(tmp_path))
    assert latest_version(ST, str(tmp_path)) is None
    touch(tmp_path, "_last_checkpoint", f"{v(0)}.crc")
    with pytest.raises(TableNotFoundError, match="no commit"):
        list_log(ST, str(tmp_path))
    assert latest_version(ST, str(tmp_path)) is None


# ------------------------------------------------------------------------------------ segments


def test_segment_uses_newest_checkpoint_at_or_before(tmp_path):
    touch(tmp_path, *[f"{v(i)}.json" for i in range(13)], f"{v(5)}.checkpoint.parquet", f"{v(10)}.checkpoint.parquet")
    lst = list_log(ST, str(tmp_path))
    seg = select_segment(lst)
    assert seg.version == 12 and seg.checkpoint_version == 10 and [c.version for c in seg.commits] == [11, 12]
    seg = select_segment(lst, 10)
    assert seg.checkpoint_version == 10 and seg.commits == ()
    seg = select_segment(lst, 9)
    assert seg.checkpoint_version == 5 and [c.version for c in seg.commits] == [6, 7, 8, 9]
    seg = select_segment(lst, 4)
    assert seg.checkpoint is None and [c.version for c in seg.commits] == [0, 1, 2, 3, 4]


def test_gap_is_log_corruption_naming_the_version(tmp_path):
    touch(tmp_path, f"{v(0)}.json", f"{v(1)}.json", f"{v(3)}.json", f"{v(4)}.json")
    lst = list_log(ST, str(tmp_path))
    with pytest.raises(LogCorruptedError, match="commit 2 .*00000000000000000002.json.* missing"):
        select_segment(lst)
    assert [c.version for c in select_segment(lst, 1).commits] == [0, 1]  # before the gap is fine


def test_gap_covered_by_checkpoint_is_fine(tmp_path):
    touch(tmp_path, f"{v(0)}.json", f"{v(2)}.json", f"{v(2)}.checkpoint.parquet", f"{v(3)}.json")
    lst = list_log(ST, str(tmp_path))
    assert select_segment(lst).checkpoint_version == 2
    with pytest.raises(LogCorruptedError, match="commit 1"):
        select_segment(lst, 1)


def test_cleaned_up_log_time_travel(tmp_path):
    # commits 0..4 deleted by log cleanup, checkpoint at 5 kept
    touch(tmp_path, f"{v(5)}.checkpoint.parquet", *[f"{v(i)}.json" for i in range(5, 8)])
    lst = list_log(ST, str(tmp_path))
    assert lst.earliest_reconstructable_version == 5
    assert select_segment(lst).checkpoint_version == 5
    with pytest.raises(VersionNotFoundError, match="cannot be reconstructed") as ei:
        select_segment(lst, 3)
    assert "version >= 5" in str(ei.value)
    with pytest.raises(VersionNotFoundError, match="does not exist"):
        select_segment(lst, 8)
    with pytest.raises(VersionNotFoundError):
        select_segment(lst, -1)


def test_only_checkpoint_without_commit_file(tmp_path):
    touch(tmp_path, f"{v(3)}.checkpoint.parquet")
    lst = list_log(ST, str(tmp_path))
    assert lst.latest_version == 3
    seg = select_segment(lst)
    assert seg.checkpoint_version == 3 and seg.commits == ()


def test_no_checkpoint_and_missing_commit_zero_is_corruption(tmp_path):
    touch(tmp_path, f"{v(1)}.json", f"{v(2)}.json")
    with pytest.raises(LogCorruptedError, match="commit 0"):
        select_segment(list_log(ST, str(tmp_path)))


def test_checkpoint_preference_follows_hint_then_classic(tmp_path):
    touch(
        tmp_path,
        f"{v(0)}.json",
        f"{v(1)}.json",
        f"{v(1)}.checkpoint.parquet",
        f"{v(1)}.checkpoint.{UUID}.parquet",
        f"{v(1)}.checkpoint.0000000001.0000000001.parquet",
    )
    lst = list_log(ST, str(tmp_path))
    assert select_segment(lst).checkpoint.kind == "classic"
    write_last_checkpoint(
        ST,
        str(tmp_path / "_delta_log"),
        {
            "version": 1,
            "size": 3,
            "v2Checkpoint": {"path": f"{v(1)}.checkpoint.{UUID}.parquet", "sizeInBytes": 1, "modificationTime": 1},
        },
    )
    lst = list_log(ST, str(tmp_path))
    assert lst.last_checkpoint["version"] == 1
    assert select_segment(lst).checkpoint.kind == "uuid"


# ------------------------------------------------------------------------------------ _last_checkpoint


SPEC_VECTOR = (
    '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
    '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
)


def test_checksum_spec_test_vector():
    obj = json.loads(SPEC_VECTOR)
    assert canonicalize(obj) == (
        '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
        '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6","k1"+"k3"+2+"k5"+2="v7"'
    )
    assert compute_checksum(obj) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_url_encoding_rules():
    assert url_encode("a€+") == "a%E2%82%AC%2B"
    assert url_encode("AZaz09-._~") == "AZaz09-._~"
    assert url_encode("/ ?") == "%2F%20%3F"
    assert (
        canonicalize({"k1": "v1", "checksum": "x", "k3": 23, "b": {"y": None, "x": True}})
        == '"b"+"x"=true,"b"+"y"=null,"k1"="v1","k3"=23'
    )


def test_real_writers_checksums_validate(conformance_root):
    """Spark/Databricks-written _last_checkpoint files carry checksums our canonicalization reproduces."""
    checked = 0
    for p in conformance_root.rglob("_last_checkpoint"):
        data = p.read_bytes()
        if not data.strip():
            continue
        obj = json.loads(data)
        if "checksum" in obj:
            assert compute_checksum(obj) == obj["checksum"], p
            assert parse_last_checkpoint(data) is not None
            checked += 1
    assert checked >= 8


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"   \n",
        b"{not json",
        b"[1,2]",
        b'{"size": 3}',
        b'{"version": -1, "size": 1}',
        b'{"version": "3", "size": 1}',
        b'{"version": 3, "version": 4, "size": 1}',
        b'{"version": 3, "size": 1, "checksum": "00000000000000000000000000000000"}',
        b"\xff\xfe",
    ],
)
def test_bad_hint_is_ignored(tmp_path, content):
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / "_last_checkpoint").write_bytes(content)
    assert read_last_checkpoint(ST, str(log)) is None


def test_missing_hint_is_none(tmp_path):
    assert read_last_checkpoint(ST, str(tmp_path / "_delta_log")) is None


def test_write_then_read_roundtrip(tmp_path):
    log = tmp_path / "_delta_log"
    info = {"version": 10, "size": 13, "parts": 2, "sizeInBytes": 1234, "numOfAddFiles": 5, "tags": {"k": "v w"}}
    write_last_checkpoint(ST, str(log), info)
    raw = json.loads((log / "_last_checkpoint").read_bytes())
    assert raw["checksum"] == compute_checksum(info)
    assert read_last_checkpoint(ST, str(log)) == raw
    # overwrite (not a commit): a newer checkpoint replaces the hint
    write_last_checkpoint(ST, str(log), {"version": 20, "size": 3})
    assert read_last_checkpoint(ST, str(log))["version"] == 20
    with pytest.raises(InvalidArgumentError):
        last_checkpoint_bytes({"version": 1})


def test_stale_hint_does_not_hide_newer_checkpoint(tmp_path):
    touch(tmp_path, *[f"{v(i)}.json" for i in range(6)], f"{v(2)}.checkpoint.parquet", f"{v(4)}.checkpoint.parquet")
    write_last_checkpoint(ST, str(tmp_path / "_delta_log"), {"version": 2, "size": 3})
    assert select_segment(list_log(ST, str(tmp_path))).checkpoint_version == 4
    os.remove(tmp_path / "_delta_log" / f"{v(4)}.checkpoint.parquet")
    # hint pointing at a checkpoint that no longer exists
    write_last_checkpoint(ST, str(tmp_path / "_delta_log"), {"version": 4, "size": 3})
    assert select_segment(list_log(ST, str(tmp_path))).checkpoint_version == 2
