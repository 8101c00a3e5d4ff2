"""OPTIMIZE's compaction as a unit of the one per-file loop (:func:`.files.run_units` in this
process, :func:`..spark.rewrite.run_file_tasks` in Spark tasks): a unit reads the N files of one bin
(deletion vectors applied) and writes their rows again as one bin (sorted by the Z-order key when
asked), in pure pyarrow."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..partitions import partition_column_array
from ..paths import file_locations
from ..reader import file_conformer, partition_lookup, read_data_file
from ..schema import parse_schema
from ..storage import is_local
from ..threads import ThreadPool
from ..writer import TableWriter, WriteSpec
from ..zorder import zorder_indices
from .common import FileOutcome

__all__ = ["CompactSpec", "Compactor", "compact_bin", "compact_files"]


@dataclass(frozen=True)
class CompactSpec:
    """Everything a unit needs to compact a bin (small and picklable).

    :param zorder_by: the columns whose Z-order curve sorts a bin's rows (as the data names them);
        empty: the rows keep their order
    :param row_tracking: row tracking enabled (:class:`..row_tracking.RowTracking` of the files
        compacted): the rows keep their stable row ids and commit versions (``write.row_tracking``
        names the same columns)
    """

    write: WriteSpec
    zorder_by: tuple[str, ...] = ()
    column_mapping_mode: str = "none"
    row_tracking: Any = None


def compact_files(spec: CompactSpec, files: pa.Table, bins: list[list[int]], *, max_workers: int | None = None) -> list:
    """Compact each bin (row indices of ``files``, rows of ``snapshot.files``) in this process, on
    the one per-file loop (bins in parallel); one outcome per bin, in order."""
    from ..storage import storage_for
    from .files import run_units

    if not bins:
        return []
    storage = storage_for(spec.write.table_uri)
    rows = bin_rows(files, bins)
    sizes = [sum(r.get("size") or 0 for r in b) for b in rows]
    return run_units(
        storage, spec.write.table_uri, len(rows), lambda i: compact_bin(spec, storage, rows[i]), sizes, max_workers
    )


def bin_rows(files: pa.Table, bins: list[list[int]]) -> list[list[dict]]:
    """The file rows (``path``, ``partition_values`` as a dict, ``deletion_vector``, ``size``) of each bin."""
    wanted = [c for c in ("path", "partition_values", "deletion_vector", "size") if c in files.column_names]
    rows = files.select(wanted).to_pylist()
    out = []
    for b in bins:
        out.append([{**rows[i], "partition_values": dict(rows[i].get("partition_values") or [])} for i in b])
    return out


class Compactor:
    """OPTIMIZE's unit work in a Spark task (:func:`..spark.rewrite.run_file_tasks` with units)."""

    def __init__(self, spec: CompactSpec):
        self.spec, self.table_uri = spec, spec.write.table_uri

    def __call__(self, storage, rows: list[dict], task_id: int) -> FileOutcome:
        return compact_bin(self.spec, storage, rows, task_id)


def compact_bin(spec: CompactSpec, storage, rows: list[dict], task_id: int = 0) -> FileOutcome:
    """Read the files of one bin (``rows``: ``path``, ``partition_values``, ``deletion_vector``;
    deletion vectors applied) and write their rows again (sorted by the Z-order key when asked):
    the outcome of the bin (named by its first file), with what it wrote."""
    started = time.perf_counter_ns()
    out = FileOutcome(rows[0]["path"], reads=1, one_pass=True)
    write = spec.write
    schema = parse_schema(write.schema_json)
    parts = list(write.partition_columns)
    tracked = spec.row_tracking

    def read(r):
        return read_data_file(
            storage,
            write.table_uri,
            r["path"],
            dict(r["partition_values"] or {}),
            schema,
            parts,
            None,
            r.get("deletion_vector"),
            column_mapping_mode=spec.column_mapping_mode,
            row_tracking=tracked.of(r["path"]) if tracked is not None else None,
        )

    plain = (
        spec.column_mapping_mode in (None, "none")
        and not any(r.get("deletion_vector") for r in rows)
        and tracked is None
    )
    if plain and len(rows) > 1:
        data = _read_plain(storage, write, schema, parts, rows, read)
    else:
        # reading the files one after the other would leave the cores idle (pyarrow releases the GIL)
        with ThreadPool(max_workers=min(8, max(1, len(rows)))) as pool:
            tables = list(pool.map(read, rows))
        data = pa.concat_tables(tables, promote_options="permissive") if tables else None
    out.read_ms = (time.perf_counter_ns() - started) // 1_000_000
    if data is None or data.num_rows == 0:
        return out
    out.num_rows = data.num_rows
    target = schema.to_arrow_schema()
    if tracked is not None:
        target = target.append(pa.field(tracked.row_id_column, pa.int64()))
        target = target.append(pa.field(tracked.commit_version_column, pa.int64()))
    data = data.cast(target) if data.schema != target else data
    if spec.zorder_by:
        data = data.take(pa.array(zorder_indices(data, list(spec.zorder_by))))
    started = time.perf_counter_ns()
    writer = TableWriter(write, task_id)
    written = out.written
    # a bin of small files reads as one chunk per file: the writer gets slices of 64k rows made
    # contiguous one at a time (not a batch per small file, nor a copy of the whole bin at once)
    for start in range(0, data.num_rows, _BATCH_ROWS):
        for batch in data.slice(start, _BATCH_ROWS).combine_chunks().to_batches():
            written.extend(writer.write(batch))
    written.extend(writer.finish())
    out.write_ms = (time.perf_counter_ns() - started) // 1_000_000
    return out


_BATCH_ROWS = 1 << 16


def _read_plain(storage, write: WriteSpec, schema, parts, rows, read) -> pa.Table:
    """A bin of files without deletion vectors or column mapping: each file read whole by pyarrow
    (not streamed: a bin of small files is mostly per-file overhead, and this costs a fifth of the
    general reader's), one after the other from a local disk, several at a time from an object
    store (latency-bound), each decoded in one thread (no contention) and conformed to the table's
    columns before the files are combined (:func:`..reader.file_conformer`: another writer's file may
    store a column in another type, e.g. ``timestamp[ns]`` without a zone), then the bin's one
    partition, typed from the log's text as every reader types it."""
    locations = file_locations(write.table_uri, pa.array([r["path"] for r in rows], pa.string()))
    conform = file_conformer([f for f in schema.fields if f.name not in parts])
    local = is_local(write.table_uri)

    def one(i: int) -> pa.Table:
        try:
            with storage.open_input_file(locations[i]) as f:
                # pre-buffering (reads coalesced on Arrow's I/O threads) pays on an object store only
                return conform(pq.ParquetFile(f, pre_buffer=not local).read(use_threads=False))
        except FileNotFoundError:  # name the file as every reader does (DataFileMissingError)
            read(rows[i])
            raise

    if local:  # CPU-bound: one thread, no hand-offs of the GIL between readers
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
