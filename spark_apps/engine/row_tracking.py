"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row ids assigned at commit, stable row ids and
row commit versions kept by every rewrite. Pure Python + pyarrow.

* **Supported** (the ``rowTracking`` writer feature, ``delta.rowTrackingSuspended`` not true): every
  committed ``add`` carries ``baseRowId`` and ``defaultRowCommitVersion`` (:func:`assign`, called by
  the transaction on every attempt, so a rebase onto a winner takes ids above the winner's high
  water mark), and the ``delta.rowTracking`` domain's ``rowIdHighWaterMark`` moves in the same
  commit. Recommitted adds (a new deletion vector) and removes carry their file's values.
* **Enabled** (also ``delta.enableRowTracking=true``): a rewrite keeps each copied row's stable id
  and commit version in the materialized columns the table names
  (``delta.rowTracking.materializedRowIdColumnName`` / ``...CommitVersionColumnName``): extra
  physical columns of the data files, never part of the schema. An updated row keeps its id; its
  commit version is NULL (the new file's default). Inserted rows have NULL in both.

A reader fills a row's stable id as the materialized value when not NULL, else ``baseRowId`` +
the row's physical index in its file (:func:`..reader.iter_data_file_batches`' ``row_tracking``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from .actions import AddFile, DomainMetadata, Metadata, Protocol, RemoveFile
from .config import TableProperties
from .errors import InvalidCommitError, UnsupportedFeatureError

__all__ = [
    "DOMAIN",
    "ENABLE",
    "SUSPENDED",
    "ROW_ID_COLUMN",
    "COMMIT_VERSION_COLUMN",
    "PRESERVED_TAG",
    "RowTracking",
    "supported",
    "enabled",
    "high_water_mark",
    "assign",
    "materialized_names",
    "new_column_names",
    "for_rewrite",
    "refuse",
    "with_column_names",
    "backfill",
    "read_with_row_ids",
]

DOMAIN = "delta.rowTracking"
FEATURE = "rowTracking"
ENABLE = "delta.enableRowTracking"
SUSPENDED = "delta.rowTrackingSuspended"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
#: commitInfo tag: every copied or updated row kept its stable id (and copied rows their version)
PRESERVED_TAG = "delta.rowTracking.preserved"


def _has_feature(protocol: Protocol | None) -> bool:
    return protocol is not None and protocol.min_writer_version >= 7 and FEATURE in set(protocol.writer_features or ())


def supported(protocol: Protocol | None, metadata: Metadata | None) -> bool:
    """Whether commits assign fresh row ids: the feature is listed and not suspended."""
    return _has_feature(protocol) and not TableProperties.of(metadata).row_tracking_suspended


def enabled(protocol: Protocol | None, metadata: Metadata | None) -> bool:
    """Whether rewrites must keep stable row ids: supported and ``delta.enableRowTracking=true``."""
    return supported(protocol, metadata) and TableProperties.of(metadata).enable_row_tracking


def high_water_mark(domains: Mapping[str, DomainMetadata] | Iterable[DomainMetadata] | None) -> int:
    """The ``rowIdHighWaterMark`` of the ``delta.rowTracking`` domain (-1: no id assigned yet)."""
    if domains is None:
        return -1
    found = (
        domains.get(DOMAIN) if isinstance(domains, Mapping) else next((d for d in domains if d.domain == DOMAIN), None)
    )
    if found is None or found.removed:
        return -1
    try:
        return int(json.loads(found.configuration)["rowIdHighWaterMark"])
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidCommitError(
            "The table's row tracking high water mark cannot be read",
            f"domain '{DOMAIN}' has configuration {found.configuration!r} ({e})",
            "repair the table with the engine that wrote it (delta-spark)",
        ) from None


def _domain(hwm: int) -> DomainMetadata:
    return DomainMetadata(
        domain=DOMAIN, configuration=json.dumps({"rowIdHighWaterMark": hwm}, separators=(",", ":")), removed=False
    )


def _live_ids(files: pa.Table | None, paths: list[str]) -> dict[str, tuple[int | None, int | None]]:
    """``path -> (baseRowId, defaultRowCommitVersion)`` of the live files among ``paths``."""
    if files is None or not paths or files.num_rows == 0 or "base_row_id" not in files.column_names:
        return {}
    hit = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
    return dict(
        zip(
            hit.column("path").to_pylist(),
            zip(hit.column("base_row_id").to_pylist(), hit.column("default_row_commit_version").to_pylist()),
        )
    )


def assign(actions: list, *, high_water: int, version: int, live: pa.Table | None) -> tuple[list, int]:
    """``actions`` with row ids assigned for commit ``version`` over ``high_water`` (the highest id
    taken so far: the read snapshot's, or a winner's after a rebase), and the new high water mark.

    An add that already carries a ``baseRowId`` keeps it (RESTORE brings a file back with its ids); an
    add or remove of a file live in ``live`` (the read snapshot's files) takes that file's values
    (a recommit with a new deletion vector; a remove); any other add is new: ``baseRowId`` one
    above the high water mark, which moves by its ``numRecords``, and ``defaultRowCommitVersion``
    this version. A domain action for the new mark is appended when it moved."""
    wanted = [
        a.path
        for a in actions
        if isinstance(a, (AddFile, RemoveFile)) and (a.base_row_id is None or a.default_row_commit_version is None)
    ]
    known = _live_ids(live, wanted)
    hwm = high_water
    out = []
    for a in actions:
        if isinstance(a, DomainMetadata) and a.domain == DOMAIN:
            continue  # the mark is this function's to write
        if isinstance(a, (AddFile, RemoveFile)) and a.base_row_id is None:
            base, committed = known.get(a.path, (None, None))
            if base is not None:
                a = replace(a, base_row_id=base, default_row_commit_version=committed)
            elif isinstance(a, AddFile):
                records = a.num_records()
                if records is None:
                    raise InvalidCommitError(
                        f"Cannot assign row ids to the file '{a.path}'",
                        "the table tracks row ids and the add has no numRecords in its stats",
                        "write the file with statistics (numRecords)",
                    )
                a = replace(a, base_row_id=hwm + 1, default_row_commit_version=version)
                hwm += int(records)
        elif isinstance(a, AddFile) and a.default_row_commit_version is None:
            a = replace(a, default_row_commit_version=version)
        out.append(a)
    if hwm != high_water:
        out.append(_domain(hwm))
    return out, hwm


# ---------------------------------------------------------------------------------------------
# materialized columns


def materialized_names(metadata: Metadata | None) -> tuple[str, str] | None:
    """The materialized row id and row commit version column names, or None when unnamed."""
    props = TableProperties.of(metadata)
    row_id, version = props.get(ROW_ID_COLUMN), props.get(COMMIT_VERSION_COLUMN)
    return (row_id, version) if row_id and version else None


def new_column_names() -> dict[str, str]:
    """Fresh materialized column names, as delta-spark spells them (unique: a random suffix)."""
    return {
        ROW_ID_COLUMN: f"_row-id-col-{uuid.uuid4()}",
        COMMIT_VERSION_COLUMN: f"_row-commit-version-col-{uuid.uuid4()}",
    }


def with_column_names(configuration: Mapping[str, str]) -> dict:
    """``configuration`` with materialized column names added when it enables row tracking and
    names none (a table keeps the names it has: they must never change)."""
    out = dict(configuration)
    if TableProperties.of(out).enable_row_tracking:
        for key, name in new_column_names().items():
            out.setdefault(key, name)
    return out


def backfill(snapshot, protocol: Protocol, metadata: Metadata) -> list:
    """Enabling row tracking on an existing table (PROTOCOL.md: every live add must carry row ids in
    the version that enables it): the live files without ``baseRowId`` added again unchanged
    (``dataChange=false``); the commit assigns their ids. Empty when nothing is enabled here."""
    if not enabled(protocol, metadata) or enabled(snapshot.protocol, snapshot.metadata):
        return []
    from .log.snapshot import add_from_row

    files = snapshot.files
    missing = files.filter(pc.is_null(files.column("base_row_id")))
    return [
        replace(add_from_row(row), data_change=False, base_row_id=None, default_row_commit_version=None)
        for row in missing.to_pylist(maps_as_pydicts="lossy")
    ]


@dataclass(frozen=True)
class RowTracking:
    """What a rewrite needs to keep stable row ids (small and picklable: it rides in the specs to
    Spark tasks): the materialized column names and ``path -> (baseRowId, defaultRowCommitVersion)``
    of the files it may rewrite."""

    row_id_column: str
    commit_version_column: str
    files: Mapping[str, tuple[int, int]]

    def of(self, path: str) -> tuple[str, str, int, int]:
        """The reader's ``row_tracking`` argument for one file."""
        try:
            base, committed = self.files[path]
        except KeyError:
            base = committed = None
        if base is None or committed is None:
            raise InvalidCommitError(
                f"The file '{path}' has no row ids",
                "the table has row tracking enabled, but the file's add action carries no baseRowId/"
                "defaultRowCommitVersion (its backfill is incomplete)",
                "re-enable row tracking on the table (delta.enableRowTracking=true backfills every file)",
            )
        return self.row_id_column, self.commit_version_column, int(base), int(committed)


def for_rewrite(snapshot, files: pa.Table | None = None) -> RowTracking | None:
    """The :class:`RowTracking` of a rewrite of ``files`` (default: every live file), or None
    when the table does not have row tracking enabled."""
    if not enabled(snapshot.protocol, snapshot.metadata):
        return None
    names = materialized_names(snapshot.metadata)
    if names is None:
        raise UnsupportedFeatureError(
            f"Cannot rewrite the table '{snapshot.table_root}': its materialized row id columns are not named",
            f"row tracking is enabled but {ROW_ID_COLUMN} / {COMMIT_VERSION_COLUMN} are not set",
            "set both properties (as delta-spark does when it enables row tracking)",
        )
    files = snapshot.files if files is None else files
    ids = dict(
        zip(
            files.column("path").to_pylist(),
            zip(files.column("base_row_id").to_pylist(), files.column("default_row_commit_version").to_pylist()),
        )
    )
    return RowTracking(names[0], names[1], ids)


def refuse(protocol: Protocol | None, metadata: Metadata | None, what: str, cause: str, fix: str) -> None:
    """Refuse ``what`` on a table with row tracking enabled, before anything is written: a path
    that cannot keep the stable row ids must not run there."""
    if enabled(protocol, metadata):
        raise UnsupportedFeatureError(f"Cannot {what} a table with row tracking enabled", cause, fix)


def read_with_row_ids(snapshot, columns: list[str] | None = None) -> pa.Table:
    """The snapshot's rows with each row's stable ``row_id`` and ``row_commit_version`` (the
    protocol's reader requirements), in this process: what a reader asking for row ids sees."""
    from .reader import batches_to_table, iter_data_file_batches

    rt = for_rewrite(snapshot)
    if rt is None:
        raise UnsupportedFeatureError(
            f"Cannot read row ids of the table '{snapshot.table_root}'",
            "row tracking is not enabled on it (delta.enableRowTracking)",
            "set delta.enableRowTracking=true on the table first",
        )
    mode = snapshot.properties.column_mapping_mode_for(snapshot.schema)
    parts = list(snapshot.metadata.partition_columns or [])
    names = {rt.row_id_column: "row_id", rt.commit_version_column: "row_commit_version"}
    tables = []
    for row in snapshot.files.select(["path", "partition_values", "deletion_vector"]).to_pylist():
        batches = iter_data_file_batches(
            snapshot.storage,
            snapshot.table_root,
            row["path"],
            dict(row["partition_values"] or []),
            snapshot.schema,
            parts,
            columns,
            row["deletion_vector"],
            column_mapping_mode=mode,
            row_tracking=rt.of(row["path"]),
        )
        table = batches_to_table(list(batches))
        tables.append(table.rename_columns([names.get(c, c) for c in table.column_names]))
    if not tables:
        fields = [f for f in snapshot.schema.to_arrow_schema() if columns is None or f.name in columns]
        return pa.schema(
            [*fields, pa.field("row_id", pa.int64()), pa.field("row_commit_version", pa.int64())]
        ).empty_table()
    return pa.concat_tables(tables, promote_options="permissive")
