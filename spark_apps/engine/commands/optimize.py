"""OPTIMIZE: compact small files (bin-packing) or cluster them (Z-order), without changing any row.

Planning (on the driver, from the log only):

* the files considered are those of the partitions ``partition_filter`` selects (a predicate over
  partition columns only; a data column is refused: OPTIMIZE rewrites whole files);
* bin-packing: per partition, the files smaller than ``min_file_size`` (default: the target size,
  ``target_size`` or ``delta.targetFileSize``) are packed, smallest first, into bins of about the
  target size; a bin of one file is dropped (nothing to compact), so a partition with a single small
  file is not rewritten, and files already big enough stay;
* Z-order (``z_order_by``): every file of each partition forms one bin, whose rows are sorted by the
  interleaved-bits key of the columns' range ids (:mod:`..zorder`) before they are written again.
* Clustering (a clustered table with clustering columns, :mod:`..clustering`): incremental. The
  files not clustered for the current columns (never clustered, clustered for other columns, or
  with too many deleted rows) form one bin, sorted by the same Z-order curve over the clustering
  columns, and written as a new ZCube (``clusteringProvider: liquid`` and its ZCube tags). An
  existing ZCube is merged into it only while it is no larger than what is being clustered
  (smallest first, size-tiered: a byte is rewritten about log2(appends) times, and the number of
  cubes stays logarithmic) and smaller than :data:`MAX_MERGED_CUBE_FACTOR` target files; so a
  second OPTIMIZE after a small append rewrites the appended files (and small cubes), not the
  table. Files another clustering implementation clustered are left alone (the protocol).

Each bin is read (deletion vectors applied: deleted rows stay deleted) and written through the core
writer with ``dataChange=false``, by a thread pool or in Spark tasks, one bin per task; files of at
most :data:`..rewrite.common.IN_PROCESS_BYTES` in all, and any on a local master, are compacted by the
driver's threads even with Spark (a Spark job costs more than the work, as for DELETE and UPDATE;
``spark.airflowDelta.fileWork=tasks`` sends every bin to tasks). One commit
removes the bins' files and adds the new ones (both ``dataChange=false``), operation ``OPTIMIZE``
with Delta's parameters and metrics. The files it rewrote are registered as read and nothing else:
a concurrent append lands and OPTIMIZE still commits; a concurrent DELETE, UPDATE or MERGE that
removed a file OPTIMIZE rewrote fails it (retryable), so deleted rows never come back.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..plane import in_process_plane
from .base import Command
from .reads import reads_snapshot_files
from .result import CommandResult, OptimizeMetrics

__all__ = ["optimize", "plan_bins", "plan_clustering", "purge_candidates", "MAX_DELETED_ROWS_RATIO"]


def _partition_keys(files: pa.Table, partition_columns: list[str], types: list) -> list[tuple]:
    """Per file, its partition values in ``partition_columns`` order, typed by the columns' Delta
    ``types``: writers spell one value in different ways (delta-spark a timestamp as
    ``2021-09-08 11:11:11``, we as ``2021-09-08T11:11:11.000000Z``), and one partition's files belong
    in one bin. One map lookup and parse per column over the whole column, not a Python dict per file."""
    if not partition_columns:
        return [()] * files.num_rows
    from ..partitions import partition_column_array

    maps = files.column("partition_values")
    columns = []
    for c, t in zip(partition_columns, types):
        values = partition_column_array(pc.map_lookup(maps, pa.scalar(c), "first"), t)
        # a float by its repr: NaN one key (NaN != NaN), -0.0 and 0.0 two
        columns.append(values.to_pylist() if not pa.types.is_floating(values.type) else map(repr, values.to_pylist()))
    return list(zip(*columns))


#: a file whose deletion vector removes more than this share of its rows is rewritten by OPTIMIZE
#: whatever its size (Delta's ``optimize.maxDeletedRowsRatio``)
MAX_DELETED_ROWS_RATIO = 0.05


def purge_candidates(files: pa.Table, ratio: float | None) -> np.ndarray:
    """Per file, whether it must be rewritten to drop its deleted rows: it has a deletion vector
    removing more than ``ratio`` of its rows (every file with one when ``ratio`` is None)."""
    if "deletion_vector" not in files.column_names or files.num_rows == 0:
        return np.zeros(files.num_rows, dtype=bool)
    dv = files.column("deletion_vector").combine_chunks()
    has = np.asarray(pc.is_valid(dv).to_numpy(zero_copy_only=False), dtype=bool)
    if ratio is None or not has.any():
        return has
    from ..expr.skipping import stats_table

    deleted = pc.fill_null(pc.struct_field(dv, "cardinality"), 0).to_numpy(zero_copy_only=False)
    st = stats_table(files, [])
    records = st.column("numRecords") if st is not None else pa.nulls(files.num_rows, pa.int64())
    # a file without numRecords in its stats: purged (its share is not known)
    records = np.asarray(pc.fill_null(records, 0).to_numpy(zero_copy_only=False), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(records > 0, deleted / records, 1.0)
    return has & (share > ratio)


def plan_bins(
    files: pa.Table,
    partition_columns: list[str],
    partition_types: list,
    target: int,
    min_file_size: int,
    zorder: bool,
    purge: np.ndarray | None = None,
    purge_only: bool = False,
) -> list[list[int]]:
    """Row indices of ``files`` per bin (see the module docstring), grouped by partition (the values
    of ``partition_columns`` typed by ``partition_types``, their Delta types). ``purge`` flags files that must
    be rewritten whatever their size (their deleted rows dropped), alone if need be; ``purge_only``
    rewrites only those."""
    sizes = np.asarray(files.column("size").to_numpy(zero_copy_only=False), dtype=np.int64) if files.num_rows else []
    purge = np.zeros(files.num_rows, dtype=bool) if purge is None else purge
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(_partition_keys(files, partition_columns, partition_types)):
        groups.setdefault(key, []).append(i)
    bins: list[list[int]] = []
    for _key, rows in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if zorder:  # z-order rewrites every file of the partition, in one bin
            bins.append(rows)
            continue
        chosen = (i for i in rows if purge[i] or (not purge_only and sizes[i] < min_file_size))
        small = sorted(chosen, key=lambda i: sizes[i])
        current, total = [], 0
        for i in small:
            if current and total + sizes[i] > target:
                bins.append(current)
                current, total = [], 0
            current.append(i)
            total += int(sizes[i])
        if current:
            bins.append(current)
    return [b for b in bins if len(b) > 1 or (zorder and b) or (b and purge[b[0]])]


#: a ZCube of at least this many target file sizes is never merged again (delta-spark: 100 files)
MAX_MERGED_CUBE_FACTOR = 100


def plan_clustering(files: pa.Table, columns: list[str], purge: np.ndarray, max_cube_bytes: int) -> tuple[list, int]:
    """Row indices of ``files`` an incremental clustering OPTIMIZE rewrites (see the module
    docstring), and how many files are already clustered for ``columns`` and kept."""
    from ..clustering import cube_of

    n = files.num_rows
    cubes, foreign = cube_of(files, columns)
    sizes = np.asarray(files.column("size").to_numpy(zero_copy_only=False), dtype=np.int64) if n else []
    fresh = [i for i in range(n) if not foreign[i] and (cubes[i] is None or purge[i])]
    members: dict[str, list[int]] = {}
    for i in range(n):
        if cubes[i] is not None and not purge[i]:
            members.setdefault(cubes[i], []).append(i)
    if not fresh:
        return [], sum(len(m) for m in members.values())
    chosen, total = list(fresh), int(sum(sizes[i] for i in fresh))
    for rows in sorted(members.values(), key=lambda rows: int(sum(sizes[i] for i in rows))):
        size = int(sum(sizes[i] for i in rows))
        if size > total or size >= max_cube_bytes:
            break
        chosen += rows
        total += size
    return sorted(chosen), n - len(chosen) - int(foreign.sum())


def _names(value, what: str) -> list[str]:
    """A column name or a list of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value):
        return list(value)
    raise InvalidArgumentError(
        f"{what} must be column names, got {value!r}", None, "pass a column name or a list of them, e.g. ['id']"
    )


def _check_columns(snapshot, z_order_by) -> list[str]:
    if not z_order_by:
        return []
    cols = _names(z_order_by, "z_order_by")
    parts = {c.lower() for c in snapshot.metadata.partition_columns or []}
    out = []
    for c in cols:
        f = snapshot.schema.find(c)
        if f is None:
            raise InvalidArgumentError(
                f"Cannot Z-order by '{c}'",
                f"the table has columns {', '.join(snapshot.schema.names)}",
                "name data columns",
            )
        if f.name.lower() in parts:
            raise InvalidArgumentError(
                f"Cannot Z-order by partition column '{f.name}'",
                "a partition column is constant within each file already",
                "Z-order by data columns; partition_filter selects partitions",
            )
        out.append(f.name)
    return out


def _percentiles(sizes: list[int]) -> dict:
    if not sizes:
        return {}
    a = np.asarray(sizes)
    return {
        "min": int(a.min()),
        "p25": int(np.percentile(a, 25)),
        "p50": int(np.percentile(a, 50)),
        "p75": int(np.percentile(a, 75)),
        "max": int(a.max()),
    }


@reads_snapshot_files("OPTIMIZE")
def optimize(
    snapshot,
    *,
    plane=None,
    partition_filter: str | None = None,
    target_size: int | None = None,
    min_file_size: int | None = None,
    z_order_by=None,
    purge_deletion_vectors: bool = False,
    identity=None,
) -> CommandResult:
    """OPTIMIZE the snapshot's table (see the module docstring); ``identity``: the run's
    :class:`~..commit_identity.TxnIdentity`; ``plane``: the data plane (:mod:`..plane`) that compacts the
    bins, None: this process.

    :param purge_deletion_vectors: rewrite only the files with deletion vectors, without their deleted
        rows (Delta's ``REORG TABLE ... APPLY (PURGE)``); otherwise files whose vectors remove more
        than :data:`MAX_DELETED_ROWS_RATIO` of their rows are rewritten with the small files
    """
    from ..clustering import clustering_columns, column_parts
    from ..expr import parse_predicate
    from ..expr.skipping import is_partition_only, skip_files
    from ..rewrite import CompactSpec
    from ..row_tracking import for_rewrite
    from ..writer import resolve_target_file_size, table_write_spec
    from .dml import removes_for

    cmd = Command(snapshot, "OPTIMIZE", identity=identity)
    if cmd.duplicate:
        return cmd.skipped(None)
    parts = list(snapshot.metadata.partition_columns or [])
    # a purge rewrites only the files with deletion vectors: compaction's path, even when clustered
    clustering = None if purge_deletion_vectors else clustering_columns(snapshot)
    if clustering and z_order_by:
        raise InvalidArgumentError(
            "Cannot Z-order a clustered table",
            f"OPTIMIZE clusters it by its clustering columns ({', '.join(clustering)})",
            "drop z_order_by, or change the clustering columns (cluster_by)",
        )
    zorder = _check_columns(snapshot, z_order_by)
    target = resolve_target_file_size(snapshot.properties, target_size)
    min_size = int(min_file_size) if min_file_size is not None else target
    files = snapshot.files
    predicates = []
    if partition_filter is not None:
        pred = parse_predicate(str(partition_filter), snapshot.schema)
        if not is_partition_only(pred, parts):
            raise InvalidArgumentError(
                f"OPTIMIZE's partition_filter '{partition_filter}' reads data columns",
                f"OPTIMIZE rewrites whole files, so it selects partitions only; the partition columns are {', '.join(parts) or 'none'}",
                "filter on partition columns only",
            )
        files = skip_files(files, snapshot.schema, parts, pred).files
        predicates = [str(partition_filter)]
    if purge_deletion_vectors and zorder:
        raise InvalidArgumentError(
            "purge_deletion_vectors cannot be combined with z_order_by",
            "a purge rewrites the files with deletion vectors as they are; Z-order rewrites whole partitions",
            "run them as two OPTIMIZE tasks",
        )
    purge = purge_candidates(files, None if purge_deletion_vectors else MAX_DELETED_ROWS_RATIO)
    from ..log.file_actions import partition_keys_of

    spelled = partition_keys_of(snapshot.metadata)  # partitionValues keys: physical under column mapping
    types = [snapshot.schema.find(c).type for c in parts]
    fields: dict = {}
    if clustering:
        chosen, kept = plan_clustering(files, clustering, purge, MAX_MERGED_CUBE_FACTOR * target)
        bins = [chosen] if chosen else []
        zorder = [column_parts(c) for c in clustering]  # the curve's columns, as the data names them
        fields.update(clustering_columns=clustering, num_files_already_clustered=kept)
    else:
        bins = plan_bins(
            files, spelled, types, target, min_size, bool(zorder), purge, purge_only=purge_deletion_vectors
        )
    metrics = OptimizeMetrics(total_considered_files=files.num_rows, num_batches=len(bins))
    chosen_rows = sorted(i for b in bins for i in b)
    metrics.total_files_skipped = files.num_rows - len(chosen_rows)
    cmd.set_parameters(predicate=json.dumps(predicates), zOrderBy=json.dumps(zorder))
    if clustering:
        cmd.set_parameters(zOrderBy="[]", clusterBy=json.dumps(clustering))
    fields["bins"] = len(bins)
    if not bins:
        return cmd.unchanged(metrics, fields=fields)
    removed = files.take(pa.array(chosen_rows, pa.int64()))
    rows = for_rewrite(snapshot, removed)  # row tracking: the rows keep their stable ids
    names = rows and (rows.row_id_column, rows.commit_version_column)
    write = table_write_spec(snapshot, target_file_size=target, data_change=False, row_tracking=names)
    spec = CompactSpec(
        write,
        zorder_by=tuple(zorder),
        column_mapping_mode=snapshot.properties.column_mapping_mode_for(snapshot.schema),
        row_tracking=rows,
    )
    outcomes = (plane or in_process_plane()).compact_bins(spec, files, bins)
    written = [w for o in outcomes for w in o.written]
    removes = removes_for(removed, data_change=False)
    adds = [w.add for w in written]
    if clustering:  # one new ZCube, recorded on each file it wrote
        from ..clustering import PROVIDER, cube_tags

        tags = cube_tags(clustering)
        adds = [dataclasses.replace(a, clustering_provider=PROVIDER, tags={**(a.tags or {}), **tags}) for a in adds]
    metrics.num_removed_files = len(removes)
    metrics.num_added_files = len(adds)
    metrics.num_removed_bytes = int(pc.sum(removed.column("size")).as_py() or 0)
    metrics.num_added_bytes = sum(a.size for a in adds)
    metrics.partitions_optimized = len({k for k in _partition_keys(removed, spelled, types)})
    sizes = _percentiles([a.size for a in adds])
    for k, v in sizes.items():
        setattr(metrics, f"{k}_file_size", v)
    cmd.read_files(removed)
    return cmd.commit([*removes, *adds], metrics, fields=fields)
