"""Commits without Spark for the Airflow and provider tests: the engine's pure core (OptimisticTransaction, put-if-absent),
with real parquet data files written by pyarrow. Used to play "another process commits" next to a DAG run.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_provider_apps.engine.actions import AddFile, Metadata, Protocol
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def create(root: str) -> int:
    """Version 0 of an unpartitioned ``id long, name string`` table."""
    st = storage_for(root)
    txn = OptimisticTransaction(st, root, None, operation="CREATE TABLE")
    txn.update_protocol(Protocol(1, 2))
    txn.update_metadata(
        Metadata(
            id=Metadata.new_id(),
            schema_string=json.dumps(SCHEMA),
            partition_columns=[],
            configuration={},
            created_time=int(time.time() * 1000),
        )
    )
    return txn.commit([]).version


def append(root: str, ids: list[int], operation: str = "WRITE") -> int:
    """Append ``ids`` as one parquet file (a WRITE commit); returns the new version."""
    st = storage_for(root)
    name = f"part-{uuid.uuid4().hex}.parquet"
    path = os.path.join(root, name)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}), path)
    add = AddFile(
        path=name,
        partition_values={},
        size=os.path.getsize(path),
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps({"numRecords": len(ids)}),
    )
    txn = OptimisticTransaction(
        st, root, load_snapshot(st, root), operation=operation, operation_parameters={"mode": "Append"}
    )
    return txn.commit([add]).version
