"""What a commit changed that people and other readers must hear of: the columns it added or changed
(``schema_changes``) and the features it turned on that a common reader refuses (``reader_warnings``).

:func:`changes_between` is the one computation; the command skeleton runs it on the commit it makes
(:meth:`..commands.base.Command.commit`), :func:`commit_changes` on a commit already in the log, made by
anyone (the Delta watcher's events, a result recovered from the log).
"""

from __future__ import annotations

from ..actions import Metadata, Protocol
from ..errors import VersionNotFoundError
from .commit_read import read_commit
from .listing import commit_file_name, log_dir_of
from .snapshot import load_table_metadata

__all__ = ["changes_between", "commit_changes"]


def changes_between(
    before_metadata: Metadata | None,
    before_protocol: Protocol | None,
    metadata: Metadata | None,
    protocol: Protocol | None,
) -> dict:
    """``schema_changes`` (:func:`..schema.changes.schema_changes`) from ``before_metadata`` to
    ``metadata``, and ``reader_warnings`` (:func:`..features.reader_warnings`) from ``before_protocol``
    to ``protocol``; each only when not empty. ``metadata``/``protocol`` None: the commit keeps the
    table's; ``before_*`` None: a new table (no schema change; every feature is new)."""
    from ..features import reader_warnings
    from ..schema import StructType
    from ..schema.changes import schema_changes

    out: dict = {}
    if metadata is not None and before_metadata is not None and metadata.schema_string != before_metadata.schema_string:
        changes = schema_changes(
            StructType.from_json(before_metadata.schema_json), StructType.from_json(metadata.schema_json)
        )
        if changes:
            out["schema_changes"] = changes
    if protocol is not None:
        warnings = reader_warnings(before_protocol, protocol)
        if warnings:
            out["reader_warnings"] = warnings
    return out


def commit_changes(storage, table_root: str, version: int) -> dict:
    """:func:`changes_between` for commit ``version`` of the log: its metaData and protocol actions
    against the table's at the version before. ``{}`` when the commit carries neither (found without
    parsing it), or its file or the version before it is gone (cleaned up)."""
    try:
        data = storage.read_bytes(storage.join(log_dir_of(storage, table_root), commit_file_name(version)))
    except FileNotFoundError:
        return {}
    if b'"metaData"' not in data and b'"protocol"' not in data:
        return {}
    actions = read_commit(version, data).actions
    metadata = next((a for a in reversed(actions) if isinstance(a, Metadata)), None)
    protocol = next((a for a in reversed(actions) if isinstance(a, Protocol)), None)
    if metadata is None and protocol is None:
        return {}
    try:
        before = load_table_metadata(storage, table_root, version - 1) if version > 0 else None
    except VersionNotFoundError:  # the versions before were cleaned up: no "before" to compare with
        return {}
    return changes_between(
        before.metadata if before is not None else None,
        before.protocol if before is not None else None,
        metadata,
        protocol,
    )
