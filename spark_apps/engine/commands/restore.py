"""RESTORE: make the table's live files those of an older version, in one commit.

Files live now but not then are removed, files live then but not now are added again (with their
stats, partition values and deletion vectors as the old version had them), both with
``dataChange=true``; the metadata goes back to the old version's and the protocol is the higher of
the two (a table never downgrades). Before anything is committed, every file to be added again is
checked to still exist: when VACUUM deleted one, RESTORE refuses, naming the version and the file.
A file is the same file when its path and its deletion vector are the same.

Against a concurrent VACUUM (which could delete a file after that check): RESTORE refuses, retryably,
while a VACUUM's lease says it is running, and its commit conflicts with a ``VACUUM START`` that lands
after it read the table (see :mod:`.vacuum`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..commit_identity import TxnIdentity
from ..errors import InvalidArgumentError
from ..threads import ThreadPool
from ..values import parse_timestamp_ms, parse_version
from .base import Command
from .result import CommandResult, RestoreMetrics
from .vacuum import refuse_while_vacuum_runs

__all__ = ["restore"]


def _keys(files: pa.Table) -> pa.Array:
    """One key per file: its path and its deletion vector's identity (``path#`` without one, whether
    or not the version has any vector: the keys of two versions are compared)."""
    dv = files.column("deletion_vector") if "deletion_vector" in files.column_names else None
    if dv is None or dv.null_count == files.num_rows:
        return pc.binary_join_element_wise(files.column("path").combine_chunks(), pa.scalar(""), "#")
    dv = dv.combine_chunks()
    ident = pc.binary_join_element_wise(
        pc.fill_null(pc.struct_field(dv, "storageType"), ""),
        pc.fill_null(pc.struct_field(dv, "pathOrInlineDv"), ""),
        pc.fill_null(pc.cast(pc.struct_field(dv, "offset"), pa.string()), ""),
        "|",
    )
    ident = pc.if_else(pc.is_valid(dv), ident, pa.scalar(""))  # a file without a vector: "path#" as above
    return pc.binary_join_element_wise(files.column("path").combine_chunks(), ident, "#")


def _sum(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def restore(
    snapshot,
    *,
    version: int | None = None,
    timestamp_ms: int | None = None,
    timestamp=None,
    identity: TxnIdentity | None = None,
) -> CommandResult:
    """RESTORE the snapshot's table to ``version`` or to the version as of ``timestamp_ms`` (see the
    module docstring); ``timestamp``: how the user wrote it (for the commit's parameters);
    ``identity``: the run's transaction identity."""
    from ..actions import Protocol
    from ..log.snapshot import add_from_row, load_snapshot
    from ..paths import file_locations
    from .dml import removes_for

    if timestamp_ms is None and timestamp is not None:  # as the user wrote it (the registry's argument)
        timestamp_ms = parse_timestamp_ms(timestamp)
    if (version is None) == (timestamp_ms is None):
        raise InvalidArgumentError(
            "RESTORE needs exactly one of version and timestamp",
            f"got version={version!r}, timestamp={timestamp!r}",
            "pass version=N or timestamp='2026-01-01T00:00:00Z'",
        )
    if version is not None:  # before anything is read or written: 2.7 must never restore version 2
        version = parse_version(version)
    cmd = Command(snapshot, "RESTORE", identity=identity, txn_options={"readds_files": True})
    if cmd.duplicate:
        return cmd.skipped(None)
    storage, root = snapshot.storage, snapshot.table_root
    target = load_snapshot(storage, root, version=version, timestamp_ms=timestamp_ms)
    if target.version > snapshot.version:
        raise InvalidArgumentError(
            f"Cannot RESTORE to version {target.version}", f"the table's latest version is {snapshot.version}", None
        )
    now_keys, then_keys = _keys(snapshot.files), _keys(target.files)
    to_remove = snapshot.files.filter(pc.invert(pc.is_in(now_keys, value_set=then_keys)))
    to_add = target.files.filter(pc.invert(pc.is_in(then_keys, value_set=now_keys)))
    metrics = RestoreMetrics(
        table_size_after_restore=_sum(target.files),
        num_of_files_after_restore=target.files.num_rows,
        num_removed_files=to_remove.num_rows,
        num_restored_files=to_add.num_rows,
        removed_files_size=_sum(to_remove),
        restored_files_size=_sum(to_add),
    )
    params = {"version": target.version} if version is not None else {"timestamp": str(timestamp or timestamp_ms)}
    fields = {"restored_version": target.version}
    if to_add.num_rows:  # every file to bring back must still exist (VACUUM may have deleted it)
        refuse_while_vacuum_runs(snapshot, "RESTORE")
        locations = file_locations(root, to_add.column("path"))
        with ThreadPool(max_workers=16, thread_name_prefix="delta-restore") as pool:
            exists = list(pool.map(storage.exists, locations))
        missing = [loc for loc, ok in zip(locations, exists) if not ok]
        if missing:
            raise InvalidArgumentError(
                f"Cannot RESTORE to version {target.version}: {len(missing)} of its files no longer exist",
                f"e.g. {missing[0]}; VACUUM deleted files that only versions older than its retention needed",
                "restore a newer version (one inside the retention), or recover the files from a backup",
            )
    if not to_add.num_rows and not to_remove.num_rows and target.metadata == snapshot.metadata:
        return cmd.unchanged(metrics, fields=fields)
    cmd.set_parameters(**params)  # known only now (the version a timestamp resolves to)
    cmd.read_rows(None)
    if target.metadata != snapshot.metadata:
        from ..identity import kept_high_water_marks

        # identity values handed out since stay handed out: the current high water marks are kept
        cmd.update_metadata(kept_high_water_marks(target.metadata, snapshot.metadata))
    new, old = snapshot.protocol, target.protocol
    if (old.min_reader_version, old.min_writer_version) > (new.min_reader_version, new.min_writer_version):
        cmd.update_protocol(
            Protocol(
                max(old.min_reader_version, new.min_reader_version), max(old.min_writer_version, new.min_writer_version)
            )
        )
    adds = [add_from_row(r) for r in to_add.to_pylist(maps_as_pydicts="lossy")]
    adds = [a.__class__(**{**a.__dict__, "data_change": True}) for a in adds]
    return cmd.commit([*removes_for(to_remove), *adds], metrics, fields=fields)
