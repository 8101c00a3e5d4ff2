"""Isolation levels and the rule that picks one for a commit.

Levels (strongest first, names as written to ``commitInfo.isolationLevel``):

* ``Serializable``: a concurrent commit's data-changing adds (blind appends included) that match
  what this transaction read are a conflict.
* ``WriteSerializable``: like Serializable, but a concurrent *blind append* (a commit that read
  nothing and only added files) is not a conflict, unless this transaction changes the metadata.
  The result equals some serial order of the writes, not necessarily of the reads.
* ``SnapshotIsolation``: concurrent adds are never a conflict. Used automatically for commits that
  change no data (every file action has ``dataChange=false``: OPTIMIZE-style rearrangements) and
  carry no metadata, protocol, txn or domain action, for which it gives the same guarantee as
  Serializable.

Choice (:func:`choose_isolation_level`): only rearranged files -> SnapshotIsolation; otherwise the level
the caller asked for, else the table's ``delta.isolationLevel`` (read and checked by
:attr:`~airflow_delta_provider_apps.engine.config.TableProperties.isolation_level`), else Serializable.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from .actions import AddCDCFile, AddFile, CommitInfo, RemoveFile
from .errors import InvalidArgumentError


class IsolationLevel(str, Enum):
    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    def __str__(self) -> str:  # the wire name
        return self.value

    @classmethod
    def parse(cls, value: IsolationLevel | str) -> IsolationLevel:
        """Accept the enum, the wire name (any case) or the snake/upper-case name."""
        if isinstance(value, IsolationLevel):
            return value
        key = str(value).strip().replace("_", "").replace(" ", "").lower()
        for level in cls:
            if level.value.lower() == key:
                return level
        raise InvalidArgumentError(
            f"Unknown isolation level '{value}'",
            None,
            "use one of Serializable, WriteSerializable, SnapshotIsolation",
        )


DEFAULT_ISOLATION_LEVEL = IsolationLevel.SERIALIZABLE
# Levels a table may be configured with (Delta refuses SnapshotIsolation as a table property).
VALID_TABLE_LEVELS = (IsolationLevel.SERIALIZABLE, IsolationLevel.WRITE_SERIALIZABLE)


def changes_data(actions: Iterable[Any]) -> bool:
    """True when any file action has ``dataChange=true`` (cdc files do not count)."""
    for a in actions:
        if isinstance(a, (AddFile, RemoveFile)) and a.data_change:
            return True
    return False


def can_downgrade_to_snapshot_isolation(actions: Iterable[Any]) -> bool:
    """True when the commit only rearranges files (every file action has ``dataChange=false``) and
    carries nothing else that must be checked against concurrent writers: a metadata, protocol,
    application-transaction or domain action keeps the stronger level, as in Delta."""
    for a in actions:
        if isinstance(a, (AddFile, RemoveFile)):
            if a.data_change:
                return False
        elif not isinstance(a, (AddCDCFile, CommitInfo)):
            return False
    return True


def choose_isolation_level(
    actions: Iterable[Any], table_level: IsolationLevel | None = None, requested: IsolationLevel | str | None = None
) -> IsolationLevel:
    """The level this commit's conflicts are checked under (see module doc).

    :param actions: the commit's actions
    :param table_level: the table's ``delta.isolationLevel`` (``TableProperties.isolation_level``
        of the metadata the commit is based on), ``None`` when unset
    :param requested: an explicit level from the caller, overriding the table property
    """
    acts = [a for a in actions if not isinstance(a, AddCDCFile)]
    if can_downgrade_to_snapshot_isolation(acts):
        return IsolationLevel.SNAPSHOT_ISOLATION
    if requested is not None:
        return IsolationLevel.parse(requested)
    return table_level or DEFAULT_ISOLATION_LEVEL
