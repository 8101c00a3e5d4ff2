"""Rewriting a group of files as new files with the same rows (OPTIMIZE's bins), in pure pyarrow: in
a thread or in a Spark task."""

from __future__ import annotations

import pyarrow as pa

from ..threads import ThreadPool

__all__ = ["compact_bin"]


def compact_bin(snapshot_info: dict, rows: list[dict], zorder_by: list[str], task_id: int = 0) -> list:
    """Read the files of one bin (deletion vectors applied) and write their rows again (sorted by the
    z-order key when asked); the WrittenFiles. Pure pyarrow (a thread or a Spark task)."""
    from ..reader import read_data_file
    from ..schema import parse_schema
    from ..storage import storage_for
    from ..writer import TableWriter
    from ..zorder import zorder_indices

    spec = snapshot_info["write"]
    schema = parse_schema(spec.schema_json)
    storage = storage_for(spec.table_uri)
    parts = list(spec.partition_columns)

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
        )

    plain = snapshot_info["column_mapping_mode"] in (None, "none") and not any(r.get("deletion_vector") for r in rows)
    if plain and len(rows) > 1:
        data = _read_plain(storage, spec, schema, parts, rows, read)
    else:
        # reading the files one after the other would leave the cores idle (pyarrow releases the GIL)
        with ThreadPool(max_workers=min(8, max(1, len(rows)))) as pool:
            tables = list(pool.map(read, rows))
        data = pa.concat_tables(tables, promote_options="permissive") if tables else None
    if data is None or data.num_rows == 0:
        return []
    data = data.cast(schema.to_arrow_schema()) if data.schema != schema.to_arrow_schema() else data
    if zorder_by:
        data = data.take(pa.array(zorder_indices(data, zorder_by)))
    writer = TableWriter(spec, task_id)
    written = []
    for batch in data.to_batches(max_chunksize=1 << 16):
        written.extend(writer.write(batch))
    written.extend(writer.finish())
    return written


def _read_plain(storage, spec, schema, parts, rows, read) -> pa.Table:
    """A bin of files without deletion vectors or column mapping, read by pyarrow's dataset reader in
    one multi-threaded call: their data columns by name (NULLs for columns a file lacks), then the
    bin's partition values (one partition per bin) taken from the first file read the usual way."""
    from ..paths import file_locations

    try:
        raw = storage.read_parquet_files(
            file_locations(spec.table_uri, pa.array([r["path"] for r in rows], pa.string()))
        )
    except FileNotFoundError:  # name the file as every reader does (DataFileMissingError)
        for r in rows:
            read(r)
        raise
    first = read(rows[0]).slice(0, 1)
    columns = []
    for f in schema.to_arrow_schema():
        if f.name in parts:
            columns.append(pa.repeat(first.column(f.name)[0], raw.num_rows).cast(f.type))
        elif f.name in raw.column_names:
            columns.append(raw.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(raw.num_rows, f.type))
    return pa.table(columns, schema=schema.to_arrow_schema())
