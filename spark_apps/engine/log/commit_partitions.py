"""The partitions a commit changed data in, read from its commit file (what the operators' Asset
events carry as partition keys)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..actions import Metadata
from .commit_read import read_commit
from .file_actions import STRING_MAP, partition_keys_of
from .listing import commit_file_name, log_dir_of
from .snapshot import load_table_metadata

__all__ = ["commit_partitions"]


def commit_partitions(storage, table_root: str, version: int) -> tuple[list[str], list[dict]] | None:
    """``(partition columns, distinct partition values)`` that commit ``version`` changed data in: its
    adds and removes with ``dataChange`` true (a compaction's rewrite changes no data), each as the
    log's text (NULL as None), keyed by the logical column names, in first-seen order. None when that
    is not known: the commit file is gone (cleaned up), the commit changed the partition columns (the
    whole table was replaced), or a remove does not say its partition values (optional in the
    protocol)."""
    try:
        data = storage.read_bytes(storage.join(log_dir_of(storage, table_root), commit_file_name(version)))
    except FileNotFoundError:
        return None
    c = read_commit(version, data)
    metas = [a for a in c.actions if isinstance(a, Metadata)]
    before = load_table_metadata(storage, table_root, version - 1).metadata if version > 0 else None
    meta = metas[-1] if metas else before
    columns = list(meta.partition_columns) if meta is not None else []
    if metas and before is not None and list(before.partition_columns or []) != columns:
        return None
    if not columns:
        return [], []
    keys = partition_keys_of(meta)  # the names in partitionValues: physical under column mapping
    changed = [f.filter(pc.fill_null(f.column("data_change"), True)) for f in (c.adds, c.removes) if f.num_rows]
    maps = pa.chunked_array([part for f in changed for part in f.column("partition_values").chunks], STRING_MAP)
    if maps.null_count:
        return None
    values = {}
    for name, key in zip(columns, keys):
        v = pc.map_lookup(maps, pa.scalar(key), "first")
        values[name] = pc.if_else(pc.equal(v, ""), pa.scalar(None, pa.string()), v)  # "" and NULL: one partition
    # the distinct rows, in first-seen order (one thread's grouping keeps it)
    return columns, pa.table(values).group_by(columns, use_threads=False).aggregate([]).to_pylist()
