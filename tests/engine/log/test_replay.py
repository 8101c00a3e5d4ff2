"""log/replay.py: reconciliation rules, vectorised JSON/parquet parsing details, property test."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.actions import DomainMetadata, SetTransaction
from airflow_delta_provider_apps.engine.errors import LogCorruptedError
from airflow_delta_provider_apps.engine.log.file_actions import FILE_SCHEMA, REMOVE_SCHEMA, dv_unique_ids
from airflow_delta_provider_apps.engine.log.listing import list_log, select_segment
from airflow_delta_provider_apps.engine.log.replay import replay
from airflow_delta_provider_apps.engine.storage import LocalStorage

ST = LocalStorage()

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}


# ------------------------------------------------------------------------------------ log writers


def protocol(r=1, w=2, **kw):
    return {"protocol": {"minReaderVersion": r, "minWriterVersion": w, **kw}}


def metadata(partition_columns=(), configuration=None, schema=SCHEMA):
    return {
        "metaData": {
            "id": "id-1",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema),
            "partitionColumns": list(partition_columns),
            "configuration": configuration or {},
            "createdTime": 1,
        }
    }


def dv(tag: str, offset: int | None = 1):
    d = {"storageType": "u", "pathOrInlineDv": f"dv{tag}", "sizeInBytes": 10, "cardinality": 1}
    if offset is not None:
        d["offset"] = offset
    return d


def add(path, pv=None, dv_=None, stats=None, size=100, **kw):
    a = {"path": path, "partitionValues": pv or {}, "size": size, "modificationTime": 1, "dataChange": True}
    if stats is not None:
        a["stats"] = stats
    if dv_ is not None:
        a["deletionVector"] = dv_
    a.update(kw)
    return {"add": a}


def remove(path, dv_=None, ts=5, **kw):
    r = {"path": path, "deletionTimestamp": ts, "dataChange": True}
    if dv_ is not None:
        r["deletionVector"] = dv_
    r.update(kw)
    return {"remove": r}


def write_commit(root: Path, version: int, actions: list[dict], *, raw: bytes | None = None) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else ("\n".join(json.dumps(a) for a in actions) + "\n").encode()
    (log / f"{version:020d}.json").write_bytes(data)


STR_MAP = pa.map_(pa.string(), pa.string())
DV_T = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
CKPT_TYPES = {
    "txn": pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())]),
    "add": pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", STR_MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("tags", STR_MAP),
            ("deletionVector", DV_T),
            ("baseRowId", pa.int64()),
            ("defaultRowCommitVersion", pa.int64()),
            ("stats", pa.string()),
            ("partitionValues_parsed", pa.struct([("p", pa.string())])),
        ]
    ),
    "remove": pa.struct(
        [
            ("path", pa.string()),
            ("deletionTimestamp", pa.int64()),
            ("dataChange", pa.bool_()),
            ("extendedFileMetadata", pa.bool_()),
            ("partitionValues", STR_MAP),
            ("size", pa.int64()),
            ("deletionVector", DV_T),
        ]
    ),
    "metaData": pa.struct(
        [
            ("id", pa.string()),
            ("name", pa.string()),
            ("description", pa.string()),
            ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("configuration", STR_MAP),
            ("createdTime", pa.int64()),
        ]
    ),
    "protocol": pa.struct(
        [
            ("minReaderVersion", pa.int32()),
            ("minWriterVersion", pa.int32()),
            ("readerFeatures", pa.list_(pa.string())),
            ("writerFeatures", pa.list_(pa.string())),
        ]
    ),
    "domainMetadata": pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
    "checkpointMetadata": pa.struct([("version", pa.int64()), ("tags", STR_MAP)]),
    "sidecar": pa.struct(
        [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", STR_MAP)]
    ),
}


def checkpoint_table(actions: list[dict], columns=("txn", "add", "remove", "metaData", "protocol", "domainMetadata")):
    cols = {}
    for c in columns:
        cols[c] = pa.array([a.get(c) for a in actions], CKPT_TYPES[c])
    return pa.table(cols)


def write_checkpoint(root: Path, version: int, actions: list[dict], parts: int = 1, **kw) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    if parts == 1:
        pq.write_table(checkpoint_table(actions, **kw), log / f"{version:020d}.checkpoint.parquet")
        return
    for i in range(parts):
        chunk = actions[i::parts]
        pq.write_table(
            checkpoint_table(chunk, **kw), log / f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        )


def load(root: Path, version=None):
    lst = list_log(ST, str(root))
    seg = select_segment(lst, version)
    return replay(ST, seg.log_dir, seg.checkpoint, seg.commits)


def live(res) -> set:
    ids = dv_unique_ids(res.files.column("deletion_vector").combine_chunks(), res.files.num_rows).to_pylist()
    return set(zip(res.files.column("path").to_pylist(), ids))


def dead(res) -> set:
    ids = dv_unique_ids(res.tombstones.column("deletion_vector").combine_chunks(), res.tombstones.num_rows).to_pylist()
    return set(zip(res.tombstones.column("path").to_pylist(), ids))


# ------------------------------------------------------------------------------------ rules


def test_schemas_are_the_contract():
    assert FILE_SCHEMA.names == [
        "path",
        "partition_values",
        "size",
        "modification_time",
        "data_change",
        "stats",
        "tags",
        "deletion_vector",
        "base_row_id",
        "default_row_commit_version",
        "clustering_provider",
    ]
    assert FILE_SCHEMA.field("partition_values").type == pa.map_(pa.string(), pa.string())
    assert FILE_SCHEMA.field("deletion_vector").type == DV_T
    assert REMOVE_SCHEMA.names[:4] == ["path", "deletion_timestamp", "data_change", "extended_file_metadata"]


def test_add_remove_readd(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(), add("a"), add("b")])
    write_commit(tmp_path, 1, [remove("a"), add("c")])
    write_commit(tmp_path, 2, [add("a", stats='{"numRecords":7}')])  # re-added: live again
    res = load(tmp_path)
    assert live(res) == {("a", None), ("b", None), ("c", None)}
    assert dead(res) == set()
    row = [r for r in res.files.to_pylist() if r["path"] == "a"][0]
    assert row["stats"] == '{"numRecords":7}'  # newest add wins
    res1 = load(tmp_path, 1)
    assert live(res1) == {("b", None), ("c", None)} and dead(res1) == {("a", None)}


def test_readd_replaces_metadata_of_live_file(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(), add("a", stats='{"numRecords":1}', size=1)])
    write_commit(tmp_path, 1, [add("a", stats='{"numRecords":1,"minValues":{}}', size=1, dataChange=False)])
    res = load(tmp_path)
    assert res.files.num_rows == 1
    r = res.files.to_pylist()[0]
    assert r["stats"] == '{"numRecords":1,"minValues":{}}' and r["data_change"] is False


def test_dv_is_part_of_the_key(tmp_path):
    write_commit(
        tmp_path,
        0,
        [protocol(3, 7, readerFeatures=["deletionVectors"], writerFeatures=["deletionVectors"]), metadata(), add("f")],
    )
    write_commit(tmp_path, 1, [remove("f"), add("f", dv_=dv("1"))])
    write_commit(tmp_path, 2, [remove("f", dv_=dv("1")), add("f", dv_=dv("2", offset=None))])
    res = load(tmp_path)
    assert live(res) == {("f", "udv2")}
    assert dead(res) == {("f", None), ("f", "udv1@1")}
    d = res.files.column("deletion_vector").to_pylist()[0]
    assert d == {"storageType": "u", "pathOrInlineDv": "dv2", "offset": None, "sizeInBytes": 10, "cardinality": 1}


def test_protocol_metadata_txn_domain_rules(tmp_path):
    write_commit(
        tmp_path,
        0,
        [
            protocol(),
            metadata(),
            {"txn": {"appId": "a", "version": 5}},
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}},
            {"domainMetadata": {"domain": "d2", "configuration": "x", "removed": False}},
        ],
    )
    write_commit(
        tmp_path,
        1,
        [
            {"txn": {"appId": "a", "version": 3, "lastUpdated": 9}},
            {"txn": {"appId": "b", "version": 1}},
            protocol(1, 3),
            metadata(["p"], {"k": "v"}),
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": True}},
            {"domainMetadata": {"domain": "d2", "configuration": "y", "removed": False}},
        ],
    )
    res = load(tmp_path)
    assert (res.protocol.min_reader_version, res.protocol.min_writer_version) == (1, 3)
    assert res.protocol_version == 1 and res.metadata_version == 1
    assert res.metadata.partition_columns == ["p"] and res.metadata.configuration == {"k": "v"}
    assert res.set_transactions == {"a": SetTransaction("a", 3, 9), "b": SetTransaction("b", 1)}
    assert res.domain_metadata == {"d2": DomainMetadata("d2", "y", False)}


@pytest.mark.parametrize("missing", ["protocol", "metaData"])
def test_missing_protocol_or_metadata(tmp_path, missing):
    acts = [a for a in [protocol(), metadata(), add("a")] if missing not in a]
    write_commit(tmp_path, 0, acts)
    with pytest.raises(LogCorruptedError, match=f"no '{missing}' action"):
        load(tmp_path)


def test_commit_info_of_last_commit(tmp_path):
    write_commit(tmp_path, 0, [{"commitInfo": {"operation": "CREATE"}}, protocol(), metadata()])
    write_commit(tmp_path, 1, [{"commitInfo": {"operation": "WRITE", "x": [1]}}, add("a")])
    assert load(tmp_path).commit_info.operation == "WRITE"
    assert load(tmp_path, 0).commit_info.operation == "CREATE"
    write_commit(tmp_path, 2, [add("b")])
    assert load(tmp_path).commit_info is None


# ------------------------------------------------------------------------------------ JSON parsing details


def test_partition_values_nulls_tags_stats(tmp_path):
    write_commit(
        tmp_path,
        0,
        [
            protocol(),
            metadata(["p", "q"]),
            add("p=1/q=x/a", {"p": "1", "q": "x"}, tags={"t": "v"}, stats='{"numRecords":3}'),
            add("p=__HIVE_DEFAULT_PARTITION__/b", {"p": None, "q": ""}),
            add("c", {"p": "2", "q": None}),
        ],
    )  # (a key missing altogether is a corrupt log: tests/engine/log/test_hostile.py)
    res = load(tmp_path)
    rows = {r["path"]: r for r in res.files.to_pylist(maps_as_pydicts="strict")}
    assert rows["p=1/q=x/a"]["partition_values"] == {"p": "1", "q": "x"}
    assert rows["p=1/q=x/a"]["tags"] == {"t": "v"} and rows["p=1/q=x/a"]["stats"] == '{"numRecords":3}'
    assert rows["p=__HIVE_DEFAULT_PARTITION__/b"]["partition_values"] == {"p": None, "q": ""}
    assert rows["c"]["partition_values"] == {"p": "2", "q": None}
    assert rows["c"]["tags"] is None and rows["c"]["stats"] is None
    # the map keeps the partition-column order for every row
    assert [list(r["partition_values"]) for r in rows.values()] == [["p", "q"]] * 3


def test_checkpoint_columns_null_throughout_are_not_read_and_read_alike(tmp_path):
    """A checkpoint's columns and fields that hold no value anywhere (the ``remove`` column of a
    checkpoint without tombstones, unset deletion vectors and row ids, no ``txn``) are left unread,
    by the file's statistics: the state is the same. Empty maps are values (not nulls), and a second
    checkpoint with a tombstone and a txn reads them."""
    from airflow_delta_provider_apps.engine.log.checkpoint_read import empty_columns

    adds = [add("a"), add("b", tags={}, stats='{"numRecords":1}')]
    write_checkpoint(tmp_path, 0, [protocol(), metadata(), *adds])
    log = tmp_path / "_delta_log"
    empty = empty_columns(pq.ParquetFile(log / f"{0:020d}.checkpoint.parquet").metadata)
    assert {"remove.path", "add.deletionVector", "add.baseRowId", "txn"} <= empty
    assert not {"add", "add.path", "add.partitionValues", "add.tags", "metaData", "protocol"} & empty
    res = load(tmp_path)
    rows = {r["path"]: r for r in res.files.to_pylist(maps_as_pydicts="strict")}
    assert rows["a"]["partition_values"] == {} and rows["b"]["partition_values"] == {}  # empty, not null
    assert rows["a"]["tags"] is None and rows["b"]["tags"] == {}
    assert rows["a"]["deletion_vector"] is None and rows["a"]["base_row_id"] is None
    assert rows["b"]["stats"] == '{"numRecords":1}' and res.tombstones.num_rows == 0
    assert res.set_transactions == {}

    txn = {"txn": {"appId": "app", "version": 3, "lastUpdated": 1}}
    write_checkpoint(tmp_path, 1, [protocol(), metadata(), adds[0], remove("b"), txn])
    res = load(tmp_path)
    assert live(res) == {("a", None)} and dead(res) == {("b", None)}
    assert res.set_transactions["app"].version == 3


def test_partition_change_by_overwrite_keeps_each_files_keys(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(["a"]), add("a=1/f", {"a": "1"})])
    write_commit(
        tmp_path,
        1,
        [
            metadata(["b"]),
            remove("a=1/f", partitionValues={"a": "1"}, extendedFileMetadata=True),
            add("b=2/g", {"b": "2"}),
        ],
    )
    res = load(tmp_path)
    assert res.files.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {"b": "2"}
    assert res.tombstones.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {"a": "1"}
    assert load(tmp_path, 0).files.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {"a": "1"}


def test_column_mapping_partition_keys_are_physical(tmp_path):
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "id",
                "type": "long",
                "nullable": True,
                "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-aaa"},
            },
            {
                "name": "part",
                "type": "string",
                "nullable": True,
                "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-bbb"},
            },
        ],
    }
    write_commit(
        tmp_path,
        0,
        [
            protocol(2, 5),
            metadata(["part"], {"delta.columnMapping.mode": "name"}, schema),
            add("x/f", {"col-bbb": "v"}),
        ],
    )
    res = load(tmp_path)
    assert res.files.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {"col-bbb": "v"}


def test_crlf_blank_lines_odd_formatting_unknown_and_cdc_lines(tmp_path):
    lines = [
        json.dumps({"commitInfo": {"operation": "WRITE"}}),
        json.dumps(protocol()),
        "",
        "   ",
        json.dumps(metadata()),
        '  { "add" : {"path": "spaced", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}}',
        json.dumps({"cdc": {"path": "_change_data/c", "partitionValues": {}, "size": 1, "dataChange": False}}),
        json.dumps({"futureAction": {"a": 1}}),
        json.dumps(add("normal")),
    ]
    write_commit(tmp_path, 0, [], raw=("\r\n".join(lines)).encode())  # no trailing newline, CRLF
    res = load(tmp_path)
    assert sorted(res.files.column("path").to_pylist()) == ["normal", "spaced"]
    assert res.commit_info.operation == "WRITE"


def test_invalid_json_line_names_the_commit(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata()])
    write_commit(tmp_path, 1, [], raw=b'{"txn": {"appId": "a", "version": 1}\n')
    with pytest.raises(LogCorruptedError, match="Commit 1 .*not valid JSON"):
        load(tmp_path)
    write_commit(tmp_path, 1, [], raw=b'{"add": {"path": "a", "size": 1,\n')
    with pytest.raises(LogCorruptedError, match="Commit 1"):
        load(tmp_path)


def test_type_conflicting_unknown_fields_fall_back_correctly(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(), add("a", vendor={"x": 1})])
    write_commit(tmp_path, 1, [add("b", vendor="text"), add("c", vendor=[1, 2]), remove("a")])
    res = load(tmp_path)
    assert live(res) == {("b", None), ("c", None)} and dead(res) == {("a", None)}


def test_many_commits_one_parse(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(["p"])])
    for v in range(1, 60):
        acts = [add(f"p={v % 3}/f{v}-{i}", {"p": str(v % 3)}) for i in range(5)]
        if v > 2:
            acts.append(remove(f"p={(v - 2) % 3}/f{v - 2}-0"))
        write_commit(tmp_path, v, acts)
    res = load(tmp_path)
    assert res.files.num_rows == 59 * 5 - 57 and res.tombstones.num_rows == 57
    assert {r["path"]: r["partition_values"]["p"] for r in res.files.to_pylist(maps_as_pydicts="strict")}[
        "p=1/f1-1"
    ] == "1"


# ------------------------------------------------------------------------------------ checkpoints


def _cp_actions(files, removes=(), pc=("p",)):
    acts = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": metadata(list(pc))["metaData"]},
        {"txn": {"appId": "app", "version": 4, "lastUpdated": None}},
    ]
    for path, p in files:
        acts.append(
            {
                "add": {
                    "path": path,
                    "partitionValues": {"p": p},
                    "size": 10,
                    "modificationTime": 1,
                    "dataChange": False,
                    "stats": '{"numRecords":1}',
                    "partitionValues_parsed": {"p": p},
                }
            }
        )
    for path in removes:
        acts.append({"remove": {"path": path, "deletionTimestamp": 3, "dataChange": True}})
    return acts


def test_classic_checkpoint_plus_commits(tmp_path):
    for v in range(3):
        write_commit(tmp_path, v, [protocol(), metadata(["p"])] if v == 0 else [])
    write_checkpoint(tmp_path, 2, _cp_actions([("p=1/a", "1"), ("p=2/b", None)], removes=["p=1/old"]))
    write_commit(tmp_path, 3, [remove("p=1/a"), add("p=1/old", {"p": "1"}), add("p=3/c", {"p": "3"})])
    res = load(tmp_path)
    assert live(res) == {("p=2/b", None), ("p=1/old", None), ("p=3/c", None)}
    assert dead(res) == {("p=1/a", None)}
    assert res.set_transactions["app"] == SetTransaction("app", 4)
    rows = {r["path"]: r for r in res.files.to_pylist(maps_as_pydicts="strict")}
    assert rows["p=2/b"]["partition_values"] == {"p": None} and rows["p=2/b"]["stats"] == '{"numRecords":1}'
    at2 = load(tmp_path, 2)
    assert live(at2) == {("p=1/a", None), ("p=2/b", None)} and dead(at2) == {("p=1/old", None)}


def test_multipart_checkpoint(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata(["p"])])
    write_commit(tmp_path, 1, [])
    write_checkpoint(tmp_path, 1, _cp_actions([(f"p=1/f{i}", "1") for i in range(7)]), parts=3)
    res = load(tmp_path)
    assert res.files.num_rows == 7 and res.metadata.partition_columns == ["p"]


def test_checkpoint_without_stats_column(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata()])
    t = checkpoint_table(_cp_actions([("a", "1")]))
    add_col = t.column("add").combine_chunks()
    keep = [f.name for f in add_col.type if f.name not in ("stats", "partitionValues_parsed")]
    new_add = pa.StructArray.from_arrays([add_col.field(n) for n in keep], names=keep, mask=add_col.is_null())
    t = t.set_column(t.schema.get_field_index("add"), "add", new_add)
    pq.write_table(t, tmp_path / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    res = load(tmp_path)
    assert res.files.column("stats").to_pylist() == [None]


def test_v2_parquet_checkpoint_with_sidecars(tmp_path):
    write_commit(
        tmp_path, 0, [protocol(3, 7, readerFeatures=["v2Checkpoint"], writerFeatures=["v2Checkpoint"]), metadata()]
    )
    log = tmp_path / "_delta_log"
    (log / "_sidecars").mkdir(parents=True)
    for i, names in enumerate([["a", "b"], ["c"]]):
        side = checkpoint_table(
            [
                {"add": {"path": n, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}}
                for n in names
            ]
            + ([{"remove": {"path": "gone", "deletionTimestamp": 1, "dataChange": True}}] if i else []),
            columns=("add", "remove"),
        )
        pq.write_table(side, log / "_sidecars" / f"side-{i}.parquet")
    nonfile = [
        protocol(3, 7, readerFeatures=["v2Checkpoint"], writerFeatures=["v2Checkpoint"]),
        metadata(),
        {"checkpointMetadata": {"version": 0}},
        {"sidecar": {"path": "side-0.parquet", "sizeInBytes": 1, "modificationTime": 1}},
        {"sidecar": {"path": "side-1.parquet", "sizeInBytes": 1, "modificationTime": 1}},
    ]
    uuid = "11111111-2222-3333-4444-555555555555"
    pq.write_table(
        checkpoint_table(nonfile, columns=("protocol", "metaData", "checkpointMetadata", "sidecar")),
        log / f"{0:020d}.checkpoint.{uuid}.parquet",
    )
    write_commit(tmp_path, 1, [remove("b"), add("d")])
    res = load(tmp_path)
    assert live(res) == {("a", None), ("c", None), ("d", None)}
    assert dead(res) == {("gone", None), ("b", None)}
    # a missing sidecar is a broken checkpoint, reported clearly
    (log / "_sidecars" / "side-1.parquet").unlink()
    with pytest.raises(LogCorruptedError, match="side-1.parquet"):
        load(tmp_path)


def test_v2_json_checkpoint_inline_and_sidecar(tmp_path):
    write_commit(
        tmp_path, 0, [protocol(3, 7, readerFeatures=["v2Checkpoint"], writerFeatures=["v2Checkpoint"]), metadata(["p"])]
    )
    write_commit(tmp_path, 1, [])
    log = tmp_path / "_delta_log"
    (log / "_sidecars").mkdir()
    pq.write_table(
        checkpoint_table(
            [
                {
                    "add": {
                        "path": "p=1/s",
                        "partitionValues": {"p": "1"},
                        "size": 1,
                        "modificationTime": 1,
                        "dataChange": True,
                    }
                }
            ],
            columns=("add",),
        ),
        log / "_sidecars" / "s.parquet",
    )
    lines = [
        {"checkpointMetadata": {"version": 1}},
        protocol(3, 7, readerFeatures=["v2Checkpoint"], writerFeatures=["v2Checkpoint"]),
        metadata(["p"]),
        {"txn": {"appId": "x", "version": 2}},
        {"sidecar": {"path": "s.parquet", "sizeInBytes": 1, "modificationTime": 1}},
    ]
    uuid = "11111111-2222-3333-4444-555555555555"
    (log / f"{1:020d}.checkpoint.{uuid}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (log / f"{0:020d}.json").unlink()  # prove the checkpoint is used
    res = load(tmp_path)
    assert live(res) == {("p=1/s", None)} and res.set_transactions["x"].version == 2
    assert res.files.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {"p": "1"}


def test_dv_unique_ids_vectorised():
    arr = pa.array(
        [
            dv("a"),
            None,
            dv("b", offset=None),
            {"storageType": "i", "pathOrInlineDv": "xyz", "sizeInBytes": 1, "cardinality": 1},
        ],
        DV_T,
    )
    assert dv_unique_ids(arr, 4).to_pylist() == ["udva@1", None, "udvb", "ixyz"]


# ------------------------------------------------------------------------------------ property test

PATHS = ["a", "b", "c", "d=1/e"]
DVS = [None, "1", "2"]


def _dv_of(tag):
    return None if tag is None else dv(tag, offset=None if tag == "2" else 4)


def _uid(tag):
    return None if tag is None else ("udv2" if tag == "2" else f"udv{tag}@4")


op = st.tuples(st.sampled_from(["add", "remove"]), st.sampled_from(PATHS), st.sampled_from(DVS), st.integers(0, 9))
commit_ops = st.lists(op, min_size=0, max_size=5, unique_by=lambda o: o[1])  # one action per path per commit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit_ops, min_size=1, max_size=8), cut=st.integers(0, 8), use_checkpoint=st.booleans())
def test_property_matches_reference_replay(commits, cut, use_checkpoint):
    # reference: plain dict replay, newest action per (path, dv id) wins
    states = []
    state: dict = {}
    for ops in [[]] + commits:
        for kind, path, tag, size in ops:
            state[(path, _uid(tag))] = (kind, size)
        states.append(dict(state))
    cut = min(cut, len(commits))
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_commit(root, 0, [protocol(), metadata()])
        for v, ops in enumerate(commits, start=1):
            acts = []
            for kind, path, tag, size in ops:
                acts.append(
                    add(path, dv_=_dv_of(tag), size=size)
                    if kind == "add"
                    else remove(path, dv_=_dv_of(tag), size=size, extendedFileMetadata=True)
                )
            write_commit(root, v, acts)
        if use_checkpoint and cut > 0:
            ref = states[cut]
            acts = _cp_actions([], pc=())[:2]
            for (path, uid), (kind, size) in ref.items():
                tag = None if uid is None else ("2" if uid == "udv2" else "1")
                if kind == "add":
                    acts.append(
                        {
                            "add": {
                                "path": path,
                                "partitionValues": {},
                                "size": size,
                                "modificationTime": 1,
                                "dataChange": True,
                                "deletionVector": _dv_of(tag),
                            }
                        }
                    )
                else:
                    acts.append(
                        {
                            "remove": {
                                "path": path,
                                "deletionTimestamp": 5,
                                "dataChange": True,
                                "deletionVector": _dv_of(tag),
                                "size": size,
                            }
                        }
                    )
            write_checkpoint(root, cut, acts)
        for version in {len(commits), cut}:
            res = load(root, version)
            ref = states[version]
            assert live(res) == {k for k, (kind, _) in ref.items() if kind == "add"}
            assert dead(res) == {k for k, (kind, _) in ref.items() if kind == "remove"}
            sizes = dict(
                zip(
                    zip(
                        res.files.column("path").to_pylist(),
                        dv_unique_ids(
                            res.files.column("deletion_vector").combine_chunks(), res.files.num_rows
                        ).to_pylist(),
                    ),
                    res.files.column("size").to_pylist(),
                )
            )
            assert sizes == {k: s for k, (kind, s) in ref.items() if kind == "add"}


def test_stats_rebuilt_from_stats_parsed_when_json_stats_absent(tmp_path):
    import datetime as dt

    write_commit(tmp_path, 0, [protocol(), metadata()])
    ts = pa.timestamp("us", tz="UTC")
    stats_t = pa.struct(
        [
            ("numRecords", pa.int64()),
            ("minValues", pa.struct([("id", pa.int64()), ("t", ts), ("d", pa.date32())])),
            ("maxValues", pa.struct([("id", pa.int64()), ("t", ts), ("d", pa.date32())])),
            ("nullCount", pa.struct([("id", pa.int64()), ("t", pa.int64()), ("d", pa.int64())])),
        ]
    )
    add_t = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", STR_MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats_parsed", stats_t),
        ]
    )
    t0 = dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    rows = [
        None,
        None,
        {
            "path": "a",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 1,
            "dataChange": False,
            "stats_parsed": {
                "numRecords": 3,
                "minValues": {"id": 1, "t": t0, "d": dt.date(2024, 1, 2)},
                "maxValues": {"id": 9, "t": t0, "d": None},
                "nullCount": {"id": 0, "t": 1, "d": 2},
            },
        },
        {
            "path": "b",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 1,
            "dataChange": False,
            "stats_parsed": None,
        },
    ]
    base = checkpoint_table([protocol(), metadata(), {}, {}], columns=("protocol", "metaData"))
    t = base.append_column("add", pa.array(rows, add_t))
    pq.write_table(t, tmp_path / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    res = load(tmp_path)
    stats = dict(zip(res.files.column("path").to_pylist(), res.files.column("stats").to_pylist()))
    assert stats["b"] is None
    assert json.loads(stats["a"]) == {
        "numRecords": 3,
        "minValues": {"id": 1, "t": "2024-01-02T03:04:05.678Z", "d": "2024-01-02"},
        "maxValues": {"id": 9, "t": "2024-01-02T03:04:05.678Z"},
        "nullCount": {"id": 0, "t": 1, "d": 2},
    }


def test_iso_looking_strings_are_not_reinterpreted(tmp_path):
    """pyarrow.json infers "2021-01-01" as a timestamp; partition values and tags must stay verbatim."""
    write_commit(
        tmp_path,
        0,
        [
            protocol(),
            metadata(["d", "t"]),
            add("a", {"d": "2021-01-01", "t": "2021-09-08 11:11:11"}),
            add(
                "b",
                {"d": "1970-01-01", "t": "2021-09-08T11:11:11.123456Z"},
                tags={"INSERTION_TIME": "2021-01-01", "n": "007"},
            ),
        ],
    )
    write_commit(tmp_path, 1, [remove("a", partitionValues={"d": "2021-01-01", "x": "2020-02-02"})])
    res = load(tmp_path)
    row = res.files.to_pylist(maps_as_pydicts="strict")[0]
    assert row["partition_values"] == {"d": "1970-01-01", "t": "2021-09-08T11:11:11.123456Z"}
    assert row["tags"] == {"INSERTION_TIME": "2021-01-01", "n": "007"}
    tomb = res.tombstones.to_pylist(maps_as_pydicts="strict")[0]
    assert tomb["partition_values"] == {"d": "2021-01-01", "x": "2020-02-02"}
    assert load(tmp_path, 0).files.to_pylist(maps_as_pydicts="strict")[0]["partition_values"] == {
        "d": "2021-01-01",
        "t": "2021-09-08 11:11:11",
    }


# ------------------------------------------------------------------------------------ checkpoint + later commits
#
# The fast path (module docstring, "Algorithm"): checkpoint rows are trusted to be reconciled, so only
# the keys named by later commits are deduplicated, and a checkpoint row is dropped iff a later commit
# names its (path, dv id). These tests touch checkpoint keys from later commits in every way, on every
# checkpoint layout (row groups / parts / sidecars / JSON; add and remove rows interleaved, so the
# checkpoint's add and remove columns have null runs).

LAYOUTS = ["classic", "multipart", "v2_sidecars", "v2_json"]


def _cp_file_action(kind, path, tag, size, stats):
    if kind == "add":
        return {
            "add": {
                "path": path,
                "partitionValues": {},
                "size": size,
                "modificationTime": 1,
                "dataChange": False,
                "stats": stats,
                "deletionVector": _dv_of(tag),
            }
        }
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": 3,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": size,
            "deletionVector": _dv_of(tag),
        }
    }


def _write_checkpoint_layout(root: Path, version: int, file_actions: list[dict], layout: str) -> None:
    """A checkpoint at ``version`` holding protocol, metaData and ``file_actions`` (in that row order)."""
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    head = [protocol(), metadata()]
    uuid = "11111111-2222-3333-4444-555555555555"
    if layout == "classic":  # tiny row groups: several chunks per column
        pq.write_table(
            checkpoint_table(head + file_actions), log / f"{version:020d}.checkpoint.parquet", row_group_size=3
        )
    elif layout == "multipart":
        write_checkpoint(root, version, head + file_actions, parts=3)
    elif layout == "v2_sidecars":
        (log / "_sidecars").mkdir(exist_ok=True)
        halves = [file_actions[: len(file_actions) // 2], file_actions[len(file_actions) // 2 :]]
        sidecars = []
        for i, part in enumerate(halves):
            pq.write_table(checkpoint_table(part, columns=("add", "remove")), log / "_sidecars" / f"s{i}.parquet")
            sidecars.append({"sidecar": {"path": f"s{i}.parquet", "sizeInBytes": 1, "modificationTime": 1}})
        pq.write_table(
            checkpoint_table(
                head + [{"checkpointMetadata": {"version": version}}] + sidecars,
                columns=("protocol", "metaData", "checkpointMetadata", "sidecar"),
            ),
            log / f"{version:020d}.checkpoint.{uuid}.parquet",
        )
    else:  # V2 JSON checkpoint with the file actions inline
        lines = [{"checkpointMetadata": {"version": version}}] + head + [_strip(a) for a in file_actions]
        (log / f"{version:020d}.checkpoint.{uuid}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if v is not None}
    return obj


def _state(res) -> tuple[dict, dict]:
    """({(path, dv id): (size, stats)} of live files, {(path, dv id): size} of tombstones)."""
    f, t = res.files, res.tombstones
    f_ids = dv_unique_ids(f.column("deletion_vector").combine_chunks(), f.num_rows).to_pylist()
    t_ids = dv_unique_ids(t.column("deletion_vector").combine_chunks(), t.num_rows).to_pylist()
    files = list(
        zip(zip(f.column("path").to_pylist(), f_ids), zip(f.column("size").to_pylist(), f.column("stats").to_pylist()))
    )
    tombs = list(zip(zip(t.column("path").to_pylist(), t_ids), t.column("size").to_pylist()))
    assert len(dict(files)) == len(files) and len(dict(tombs)) == len(tombs), "a key appears twice"
    return dict(files), dict(tombs)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_later_commits_touching_checkpoint_keys(tmp_path, layout):
    write_commit(tmp_path, 0, [protocol(), metadata()])
    write_commit(tmp_path, 1, [])
    cp = [
        ("add", "a", None, 1, '{"numRecords":1}'),
        ("remove", "old", None, 2, None),
        ("add", "b", None, 3, '{"numRecords":3}'),
        ("add", "c", None, 4, '{"numRecords":4}'),
        ("remove", "old2", "1", 5, None),
        ("add", "d", "1", 6, '{"numRecords":6}'),
        ("add", "e", None, 7, '{"numRecords":7}'),
        ("add", "f", "2", 8, '{"numRecords":8}'),
        ("add", "untouched", None, 9, '{"numRecords":9}'),
    ]
    _write_checkpoint_layout(tmp_path, 1, [_cp_file_action(*x) for x in cp], layout)
    write_commit(
        tmp_path,
        2,
        [
            add("a", size=10, stats='{"numRecords":10}'),  # re-add: new stats win
            remove("b", size=3),
        ],
    )  # remove a checkpoint file
    write_commit(
        tmp_path,
        3,
        [
            remove("c", size=4),
            add("c", size=11, stats='{"numRecords":11}'),  # remove + re-add
            remove("d", dv_=dv("1", offset=4), size=6),  # DV change: new key
            add("d", dv_=dv("2", offset=None), size=12, stats='{"numRecords":12}'),
        ],
    )
    write_commit(
        tmp_path,
        4,
        [
            add("old", size=13, stats='{"numRecords":13}'),  # re-add a checkpoint tombstone
            remove("never", size=14),  # removes nothing: a plain tombstone
            add("e", dv_=dv("1", offset=4), size=15, stats='{"numRecords":15}'),  # e + DV: other key
            remove("f", size=16),  # wrong key (f has a DV): f stays live
            add("g", size=17),
            remove("g", size=17),
        ],
    )  # added and removed in one commit
    write_commit(
        tmp_path,
        5,
        [
            add("b", size=18, stats='{"numRecords":18}'),  # remove, then add again later
            remove("old2", dv_=dv("1", offset=4), size=19),
        ],
    )  # tombstone replaced
    files, tombs = _state(load(tmp_path))
    assert files == {
        ("a", None): (10, '{"numRecords":10}'),
        ("b", None): (18, '{"numRecords":18}'),
        ("c", None): (11, '{"numRecords":11}'),
        ("d", "udv2"): (12, '{"numRecords":12}'),
        ("old", None): (13, '{"numRecords":13}'),
        ("e", None): (7, '{"numRecords":7}'),
        ("e", "udv1@4"): (15, '{"numRecords":15}'),
        ("f", "udv2"): (8, '{"numRecords":8}'),
        ("untouched", None): (9, '{"numRecords":9}'),
    }
    assert tombs == {("old2", "udv1@4"): 19, ("d", "udv1@4"): 6, ("never", None): 14, ("f", None): 16, ("g", None): 17}
    # the checkpoint alone, and the state in between
    files1, tombs1 = _state(load(tmp_path, 1))
    assert files1 == {(p, None if t is None else _uid(t)): (s, st_) for k, p, t, s, st_ in cp if k == "add"}
    assert tombs1 == {(p, None if t is None else _uid(t)): s for k, p, t, s, _ in cp if k == "remove"}
    files3, tombs3 = _state(load(tmp_path, 3))
    assert ("b", None) not in files3 and tombs3[("b", None)] == 3 and files3[("c", None)][0] == 11
    assert ("c", None) not in tombs3 and ("d", "udv1@4") not in files3


def test_many_superseded_checkpoint_rows(tmp_path):
    """More superseded rows than slice runs (the filtered path), spread over row groups."""
    write_commit(tmp_path, 0, [protocol(), metadata()])
    write_commit(tmp_path, 1, [])
    n = 1500
    _write_checkpoint_layout(tmp_path, 1, [_cp_file_action("add", f"f{i}", None, i, None) for i in range(n)], "classic")
    write_commit(tmp_path, 2, [remove(f"f{i}", size=i) for i in range(0, n, 3)])
    write_commit(tmp_path, 3, [add(f"f{i}", size=i + 10_000) for i in range(0, n, 6)])
    files, tombs = _state(load(tmp_path))
    assert {k[0]: v[0] for k, v in files.items()} == {
        f"f{i}": (i + 10_000 if i % 6 == 0 else i) for i in range(n) if i % 3 or i % 6 == 0
    }
    assert set(tombs) == {(f"f{i}", None) for i in range(3, n, 6)}


def test_stats_parsed_only_checkpoint_with_later_commits(tmp_path):
    write_commit(tmp_path, 0, [protocol(), metadata()])
    stats_t = pa.struct([("numRecords", pa.int64())])
    add_t = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", STR_MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats_parsed", stats_t),
        ]
    )
    rows = [None, None] + [
        {
            "path": p,
            "partitionValues": {},
            "size": 1,
            "modificationTime": 1,
            "dataChange": False,
            "stats_parsed": {"numRecords": i},
        }
        for i, p in enumerate("abc")
    ]
    base = checkpoint_table([protocol(), metadata()] + [{}] * 3, columns=("protocol", "metaData"))
    pq.write_table(
        base.append_column("add", pa.array(rows, add_t)), tmp_path / "_delta_log" / f"{0:020d}.checkpoint.parquet"
    )
    write_commit(tmp_path, 1, [remove("b"), add("c", stats='{"numRecords":9}')])
    files, tombs = _state(load(tmp_path))
    assert {k[0]: json.loads(v[1]) for k, v in files.items()} == {"a": {"numRecords": 0}, "c": {"numRecords": 9}}
    assert set(tombs) == {("b", None)}


CP_PATHS = ["a", "b", "c", "d=1/e", "f g"]
cp_key = st.tuples(st.sampled_from(CP_PATHS), st.sampled_from(DVS))
cp_op = st.tuples(
    st.sampled_from(["add", "remove"]), st.sampled_from(CP_PATHS), st.sampled_from(DVS), st.integers(0, 99)
)
cp_commit = st.lists(cp_op, min_size=0, max_size=6, unique_by=lambda o: (o[1], o[2]))  # one action per key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.dictionaries(cp_key, st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 99)), max_size=12),
    commits=st.lists(cp_commit, min_size=1, max_size=5),
    layout=st.sampled_from(LAYOUTS),
    data=st.data(),
)
def test_property_checkpoint_plus_commits_matches_reference(initial, commits, layout, data):
    """Random reconciled checkpoint (rows in random order) + random later commits vs a dict replay."""
    ref = {
        (p, _uid(t)): (kind, size, f'{{"n":{size}}}' if kind == "add" else None)
        for (p, t), (kind, size) in initial.items()
    }
    rows = [_cp_file_action(kind, p, t, size, f'{{"n":{size}}}') for (p, t), (kind, size) in initial.items()]
    rows = data.draw(st.permutations(rows)) if rows else rows
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_commit(root, 0, [protocol(), metadata()])
        write_commit(root, 1, [])
        _write_checkpoint_layout(root, 1, rows, layout)
        for v, ops in enumerate(commits, start=2):
            acts = []
            for kind, path, tag, size in ops:
                stats = f'{{"v":{v},"n":{size}}}'
                acts.append(
                    add(path, dv_=_dv_of(tag), size=size, stats=stats)
                    if kind == "add"
                    else remove(path, dv_=_dv_of(tag), size=size, extendedFileMetadata=True)
                )
                ref[(path, _uid(tag))] = (kind, size, stats if kind == "add" else None)
            write_commit(root, v, acts)
        files, tombs = _state(load(root))
    assert files == {k: (size, stats) for k, (kind, size, stats) in ref.items() if kind == "add"}
    assert tombs == {k: size for k, (kind, size, _) in ref.items() if kind == "remove"}


def test_open_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas (~0.25 s) on its first numpy/Python <-> arrow conversion; a fresh process
    that opens a table (checkpoint + commits with DVs and partition values, JSON-only) must not, nor
    the engine's schema package (a replay has no use for it: it loads when a command first asks)."""
    import subprocess
    import sys

    cp_root, json_root = tmp_path / "cp", tmp_path / "json"
    write_commit(cp_root, 0, [protocol(), metadata(["p"])])
    write_commit(cp_root, 1, [])
    write_checkpoint(cp_root, 1, _cp_actions([("p=1/a", "1"), ("p=2/b", "2")], removes=["p=1/old"]))
    write_commit(
        cp_root,
        2,
        [remove("p=1/a"), add("p=1/a", {"p": "1"}, dv_=dv("1"), tags={"t": "v"}), add("p=1/old", {"p": "1"})],
    )
    write_commit(json_root, 0, [protocol(), metadata(["p"]), add("p=1/x", {"p": "1"}), add("y", {"p": None})])
    write_commit(json_root, 1, [remove("y"), add("z", {"p": "2"}, dv_=dv("2"))])
    code = (
        "import sys\n"
        "from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot\n"
        "from airflow_delta_provider_apps.engine.storage import storage_for\n"
        f"for p in {[str(cp_root), str(json_root)]!r}:\n"
        "    print(load_snapshot(storage_for(p), p).files.num_rows)\n"
        "print('pandas' in sys.modules, 'airflow_delta_provider_apps.engine.schema' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        check=True,
    ).stdout.split()
    assert out == ["3", "2", "False", "False"]
