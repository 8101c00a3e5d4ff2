"""Rewriting a group of files as new files with the same rows (OPTIMIZE's bins), in pure pyarrow: in
a thread or in a Spark task."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ..partitions import partition_column_array
from ..paths import file_locations
from ..reader import file_conformer, partition_lookup, read_data_file
from ..schema import parse_schema
from ..storage import is_local, storage_for
from ..threads import ThreadPool
from ..writer import TableWriter
from ..zorder import zorder_indices

__all__ = ["compact_bin"]


def compact_bin(snapshot_info: dict, rows: list[dict], zorder_by: list[str], task_id: int = 0) -> list:
    """Read the files of one bin (deletion vectors applied) and write their rows again (sorted by the
    z-order key when asked); the WrittenFiles. Pure pyarrow (a thread or a Spark task)."""
    spec = snapshot_info["write"]
    schema = parse_schema(spec.schema_json)
    storage = storage_for(spec.table_uri)
    parts = list(spec.partition_columns)
    tracked = snapshot_info.get("row_tracking")  # row tracking: the rows keep their stable ids

    def read(r):
        return read_data_file(
            storage,
            spec.table_uri,
            r["path"],
            dict(r["partition_values"] or {}),
            schema,
            parts,
            None,
            r.get("deletion_vector"),
            column_mapping_mode=snapshot_info["column_mapping_mode"],
            row_tracking=tracked.of(r["path"]) if tracked is not None else None,
        )

    plain = (
        snapshot_info["column_mapping_mode"] in (None, "none")
        and not any(r.get("deletion_vector") for r in rows)
        and tracked is None
    )
    if plain and len(rows) > 1:
        data = _read_plain(storage, spec, schema, parts, rows, read)
    else:
        # reading the files one after the other would leave the cores idle (pyarrow releases the GIL)
        with ThreadPool(max_workers=min(8, max(1, len(rows)))) as pool:
            tables = list(pool.map(read, rows))
        data = pa.concat_tables(tables, promote_options="permissive") if tables else None
    if data is None or data.num_rows == 0:
        return []
    target = schema.to_arrow_schema()
    if tracked is not None:
        target = target.append(pa.field(tracked.row_id_column, pa.int64()))
        target = target.append(pa.field(tracked.commit_version_column, pa.int64()))
    data = data.cast(target) if data.schema != target else data
    if zorder_by:
        data = data.take(pa.array(zorder_indices(data, zorder_by)))
    writer = TableWriter(spec, task_id)
    written = []
    # a bin of small files reads as one chunk per file: the writer gets slices of 64k rows made
    # contiguous one at a time (not a batch per small file, nor a copy of the whole bin at once)
    for start in range(0, data.num_rows, _BATCH_ROWS):
        for batch in data.slice(start, _BATCH_ROWS).combine_chunks().to_batches():
            written.extend(writer.write(batch))
    written.extend(writer.finish())
    return written


_BATCH_ROWS = 1 << 16


def _read_plain(storage, spec, schema, parts, rows, read) -> pa.Table:
    """A bin of files without deletion vectors or column mapping: each file read whole by pyarrow
    (not streamed: a bin of small files is mostly per-file overhead, and this costs a fifth of the
    general reader's), one after the other from a local disk, several at a time from an object
    store (latency-bound), each decoded in one thread (no contention) and conformed to the table's
    columns before the files are combined (:func:`..reader.file_conformer`: another writer's file may
    store a column in another type, e.g. ``timestamp[ns]`` without a zone), then the bin's one
    partition, typed from the log's text as every reader types it."""
    locations = file_locations(spec.table_uri, pa.array([r["path"] for r in rows], pa.string()))
    conform = file_conformer([f for f in schema.fields if f.name not in parts])

    def one(i: int) -> pa.Table:
        try:
            with storage.open_input_file(locations[i]) as f:
                return conform(pq.ParquetFile(f).read(use_threads=False))
        except FileNotFoundError:  # name the file as every reader does (DataFileMissingError)
            read(rows[i])
            raise

    if is_local(spec.table_uri):  # CPU-bound: one thread, no hand-offs of the GIL between readers
        tables = [one(i) for i in range(len(rows))]
    else:  # latency-bound: several requests in flight
        with ThreadPool(max_workers=min(_READERS, len(rows))) as pool:
            tables = list(pool.map(one, range(len(rows))))
    raw = pa.concat_tables(tables, promote_options="permissive")
    pvals = partition_lookup(dict(rows[0]["partition_values"] or {}), schema, "none", rows[0]["path"])
    columns = [
        partition_column_array(pvals(f), f.type, length=raw.num_rows) if f.name in parts else raw.column(f.name)
        for f in schema.fields
    ]
    return pa.table(columns, names=schema.names)  # nullability as the data holds it: compact_bin casts


#: files of one bin read at once from an object store
_READERS = 8
