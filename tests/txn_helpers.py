"""Helpers shared by the transaction / conflict / checkpoint / cleanup / race / crash tests.

Pure core, no Spark: small parquet data files are written with pyarrow, stats with the engine's
``stats.collect_stats`` when it is available (numRecords only otherwise), commits through
``OptimisticTransaction``.

Table shape: ``id long, value string, p string`` partitioned by ``p``.
"""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_provider_apps.engine.actions import AddFile, Metadata, Protocol
from airflow_delta_provider_apps.engine.commit_identity import takes_identity
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

SCHEMA_JSON = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}
DATA_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])


def make_metadata(configuration: dict | None = None, partition_by=("p",)) -> Metadata:
    return Metadata(
        id=Metadata.new_id(),
        schema_string=json.dumps(SCHEMA_JSON),
        partition_columns=list(partition_by),
        configuration=dict(configuration or {}),
        created_time=1_700_000_000_000,
    )


def create_table(root: str, configuration: dict | None = None, protocol: Protocol | None = None, partition_by=("p",)):
    st = storage_for(root)
    txn = OptimisticTransaction(
        st, root, None, operation="CREATE TABLE", operation_parameters={"partitionBy": list(partition_by)}
    )
    txn.update_metadata(make_metadata(configuration, partition_by))
    txn.update_protocol(protocol or Protocol(1, 2))
    return txn.commit([])


def _stats(rows: pa.Table) -> str:
    try:
        from airflow_delta_provider_apps.engine.schema import StructType
        from airflow_delta_provider_apps.engine.stats import collect_stats

        schema = StructType.from_json({"type": "struct", "fields": SCHEMA_JSON["fields"][:2]})
        return collect_stats(schema, rows)
    except ImportError:  # pragma: no cover - stats module absent
        return json.dumps({"numRecords": rows.num_rows})


def write_file(root: str, ids, part: str | None = "a", value: str = "v") -> AddFile:
    """Write one parquet data file with the given ids into partition ``p=part``; return its AddFile."""
    rows = pa.table(
        {"id": pa.array(list(ids), pa.int64()), "value": pa.array([f"{value}{i}" for i in ids], pa.string())},
        schema=DATA_SCHEMA,
    )
    dir_name = f"p={part}" if part is not None else "p=__HIVE_DEFAULT_PARTITION__"
    rel = f"{dir_name}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    full = os.path.join(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(rows, full, compression="snappy")
    st = os.stat(full)
    return AddFile(
        path=rel,
        partition_values={"p": part},
        size=st.st_size,
        modification_time=st.st_mtime_ns // 1_000_000,
        data_change=True,
        stats=_stats(rows),
    )


def snapshot(root: str, version: int | None = None):
    return load_snapshot(storage_for(root), root, version=version)


@takes_identity  # app_id=, app_version=, user_metadata= as one identity
def txn(root: str, snap=None, **kwargs) -> OptimisticTransaction:
    if snap is None:
        snap = snapshot(root)
    return OptimisticTransaction(storage_for(root), root, snap, **kwargs)


def append(root: str, ids, part: str = "a", **kwargs):
    """Blind append of one file; returns the CommitResult."""
    add = write_file(root, ids, part)
    return txn(root, operation="WRITE", operation_parameters={"mode": "Append"}, **kwargs).commit([add])


def add_rows_count(files: pa.Table) -> int:
    """Sum of numRecords from the stats of a snapshot's files (vectorised)."""
    return sum(json.loads(s)["numRecords"] for s in files.column("stats").to_pylist())


def read_row_count(root: str, snap=None) -> int:
    """Rows of the table by reading every live data file with pyarrow (no DVs in these tests)."""
    from urllib.parse import unquote

    snap = snap or snapshot(root)
    total = 0
    for path in snap.files.column("path").to_pylist():
        total += pq.ParquetFile(os.path.join(root, unquote(path))).metadata.num_rows
    return total


def read_ids(root: str, snap=None) -> list[int]:
    from urllib.parse import unquote

    snap = snap or snapshot(root)
    out: list[int] = []
    for path in snap.files.column("path").to_pylist():
        out += pq.read_table(os.path.join(root, unquote(path)), columns=["id"]).column("id").to_pylist()
    return sorted(out)


def commit_json(root: str, version: int) -> list[dict]:
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]
