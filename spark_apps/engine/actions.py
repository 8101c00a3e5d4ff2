"""Delta log actions and their wire format.

Every action is a frozen dataclass whose fields map 1:1 to the protocol's camelCase JSON keys
(``data_change`` <-> ``dataChange``). This module is the ONE place where that mapping lives:
``to_json_dict()`` renders ``{"<actionKey>": {...}}`` and :func:`action_from_json` parses it back.

Rules (PROTOCOL.md):
* unknown actions and unknown fields are ignored (no error);
* optional fields that are absent stay ``None`` and are not written back, so a parsed action
  re-serialises to the same JSON object (exact round trip of known fields).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .errors import LogCorruptedError


@functools.lru_cache(maxsize=1024)
def camel_case(name: str) -> str:
    """``data_change`` -> ``dataChange``: the one snake_case -> wire-name converter (cached: a commit of
    thousands of actions converts the same few names for each)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def snake_case(name: str) -> str:
    """``dataChange`` -> ``data_change``: the inverse of :func:`camel_case`."""
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)


def _string_map(action: str, key: str, value) -> dict:
    """A map field given as Arrow's map form (a list of ``(key, value)`` pairs, what ``to_pylist()``
    returns for a map column) as the JSON object the protocol requires; anything else is refused
    before it reaches a commit (a list written as-is makes the table unreadable to every reader)."""
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return {str(k): v for k, v in value}
    raise TypeError(f"{action}.{key} must be a map of strings, got {type(value).__name__}: {value!r:.200}")


class _Action:
    """Mixin: generic snake_case <-> camelCase mapping for flat dataclass actions."""

    ACTION_KEY: ClassVar[str] = ""
    # fields whose value is another action-like object (parsed/rendered via from_json/to_json)
    _NESTED: ClassVar[dict[str, Any]] = {}
    # fields whose JSON key is not the plain camelCase of the field name
    _RENAMED: ClassVar[dict[str, str]] = {}
    # fields the protocol types as a map of strings: always written as a JSON object
    _MAPS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _key(cls, f: str) -> str:
        return cls._RENAMED.get(f, camel_case(f))

    @classmethod
    def _wire_names(cls) -> tuple[tuple[str, str], ...]:
        """(field, JSON key) of every field, computed once per class."""
        names = cls.__dict__.get("_wire_names_cache")
        if names is None:
            names = tuple((f.name, cls._key(f.name)) for f in dataclasses.fields(cls))  # type: ignore[arg-type]
            cls._wire_names_cache = names
        return names

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        nested = self._NESTED
        for name, key in self._wire_names():
            v = getattr(self, name)
            if v is None:
                continue
            if name in nested:
                v = v.to_json()
            elif name in self._MAPS and not isinstance(v, dict):
                v = _string_map(self.ACTION_KEY, key, v)
            out[key] = v
        return out

    @classmethod
    def from_json(cls, obj: dict):
        if not isinstance(obj, dict):
            raise LogCorruptedError(
                f"A '{cls.ACTION_KEY}' action is not a JSON object",
                f"found {type(obj).__name__}",
                "repair or restore the commit file; the table's log is not valid Delta",
            )
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            key = cls._key(f.name)
            if key in obj:
                v = obj[key]
                if v is not None and f.name in cls._NESTED:
                    v = cls._NESTED[f.name].from_json(v)
                kwargs[f.name] = v
        try:
            return cls(**kwargs)
        except TypeError as e:  # a required field is missing
            raise LogCorruptedError(
                f"A '{cls.ACTION_KEY}' action lacks a required field",
                str(e),
                "repair or restore the commit file; the table's log is not valid Delta",
            ) from None

    def to_json_dict(self) -> dict:
        """The action wrapped in its envelope key, e.g. ``{"add": {...}}``."""
        return {self.ACTION_KEY: self.to_json()}


@dataclass(frozen=True)
class DeletionVectorDescriptor(_Action):
    ACTION_KEY: ClassVar[str] = "deletionVector"
    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @property
    def unique_id(self) -> str:
        base = self.storage_type + self.path_or_inline_dv
        return f"{base}@{self.offset}" if self.offset is not None else base


@dataclass(frozen=True)
class Format(_Action):
    ACTION_KEY: ClassVar[str] = "format"
    provider: str = "parquet"
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol(_Action):
    ACTION_KEY: ClassVar[str] = "protocol"
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple | list | None = None
    writer_features: tuple | list | None = None


@dataclass(frozen=True)
class Metadata(_Action):
    ACTION_KEY: ClassVar[str] = "metaData"
    _NESTED: ClassVar[dict] = {"format": Format}
    id: str
    schema_string: str
    partition_columns: list = field(default_factory=list)
    configuration: dict = field(default_factory=dict)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None

    @staticmethod
    def new_id() -> str:
        return str(uuid.uuid4())

    @property
    def schema_json(self) -> dict:
        return json.loads(self.schema_string)

    def to_json(self) -> dict:
        # the wire order Delta writers use; required keys always present
        out = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": self.format.to_json(),
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
            "createdTime": self.created_time,
        }
        return {k: v for k, v in out.items() if v is not None}


class _FileAction(_Action):
    """What an add and a remove of a data file share: their map fields and their deletion vector."""

    _MAPS: ClassVar[frozenset[str]] = frozenset({"partition_values", "tags"})
    _NESTED: ClassVar[dict] = {"deletion_vector": DeletionVectorDescriptor}
    deletion_vector: DeletionVectorDescriptor | None  # a field of each subclass

    @property
    def dv_unique_id(self) -> str | None:
        return self.deletion_vector.unique_id if self.deletion_vector else None


@dataclass(frozen=True)
class AddFile(_FileAction):
    ACTION_KEY: ClassVar[str] = "add"
    path: str
    partition_values: dict
    size: int
    modification_time: int
    data_change: bool
    stats: str | None = None
    tags: dict | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    def num_records(self) -> int | None:
        if not self.stats:
            return None
        return json.loads(self.stats).get("numRecords")

    def remove(self, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        """The tombstone for this file (extended file metadata carried over)."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True)
class RemoveFile(_FileAction):
    ACTION_KEY: ClassVar[str] = "remove"
    path: str
    data_change: bool = True
    deletion_timestamp: int | None = None
    extended_file_metadata: bool | None = None
    partition_values: dict | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None


@dataclass(frozen=True)
class AddCDCFile(_Action):
    ACTION_KEY: ClassVar[str] = "cdc"
    _MAPS: ClassVar[frozenset[str]] = frozenset({"partition_values", "tags"})
    path: str
    partition_values: dict
    size: int
    data_change: bool = False
    tags: dict | None = None


@dataclass(frozen=True)
class SetTransaction(_Action):
    ACTION_KEY: ClassVar[str] = "txn"
    app_id: str
    version: int
    last_updated: int | None = None


@dataclass(frozen=True)
class DomainMetadata(_Action):
    ACTION_KEY: ClassVar[str] = "domainMetadata"
    domain: str
    configuration: str
    removed: bool = False


@dataclass(frozen=True)
class Sidecar(_Action):
    ACTION_KEY: ClassVar[str] = "sidecar"
    _MAPS: ClassVar[frozenset[str]] = frozenset({"tags"})
    path: str
    size_in_bytes: int
    modification_time: int
    tags: dict | None = None


@dataclass(frozen=True)
class CheckpointMetadata(_Action):
    ACTION_KEY: ClassVar[str] = "checkpointMetadata"
    _MAPS: ClassVar[frozenset[str]] = frozenset({"tags"})
    version: int
    tags: dict | None = None


@dataclass(frozen=True)
class CommitInfo:
    """commitInfo is free-form provenance: we keep the whole JSON object (unknown keys included)."""

    ACTION_KEY: ClassVar[str] = "commitInfo"
    values: dict

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    @property
    def timestamp(self) -> int | None:
        return self.values.get("timestamp")

    @property
    def operation(self) -> str | None:
        return self.values.get("operation")

    @property
    def in_commit_timestamp(self) -> int | None:
        return self.values.get("inCommitTimestamp")

    def to_json(self) -> dict:
        return dict(self.values)

    def to_json_dict(self) -> dict:
        return {"commitInfo": self.to_json()}

    @classmethod
    def from_json(cls, obj: dict) -> CommitInfo:
        return cls(dict(obj) if isinstance(obj, dict) else {})


Action = (
    AddFile
    | RemoveFile
    | Metadata
    | Protocol
    | CommitInfo
    | SetTransaction
    | AddCDCFile
    | DomainMetadata
    | Sidecar
    | CheckpointMetadata
)

ACTION_TYPES: dict[str, type] = {
    cls.ACTION_KEY: cls
    for cls in (
        AddFile,
        RemoveFile,
        Metadata,
        Protocol,
        CommitInfo,
        SetTransaction,
        AddCDCFile,
        DomainMetadata,
        Sidecar,
        CheckpointMetadata,
    )
}


def action_from_json(obj: dict) -> Action | None:
    """Parse one action envelope; ``None`` for an unknown action (ignored per the protocol)."""
    for key, value in obj.items():
        cls = ACTION_TYPES.get(key)
        if cls is not None:
            return cls.from_json(value)
    return None


def load_action_line(text: str | bytes, where: str):
    """``json.loads`` of one commit line; a bad line is a :class:`LogCorruptedError` whose problem is
    ``"<where> not valid JSON"`` (``where`` e.g. ``"Line 3 of 00000000000000000001.json is"``)."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise LogCorruptedError(
            f"{where} not valid JSON",
            str(e),
            "restore the commit file from a backup; a Delta commit is one JSON action per line",
        ) from None


def parse_commit_bytes(data: bytes, *, where: str = "commit") -> list[Action]:
    """Parse an NDJSON commit file into actions (unknown actions dropped)."""
    out: list[Action] = []
    for lineno, line in enumerate(data.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        obj = load_action_line(line, f"Line {lineno} of {where} is")
        action = action_from_json(obj)
        if action is not None:
            out.append(action)
    return out


def serialize_actions(actions: Iterable[Action]) -> bytes:
    """NDJSON bytes of a commit: one compact JSON object per line, newline-terminated."""
    lines = [json.dumps(a.to_json_dict(), separators=(",", ":"), ensure_ascii=False) for a in actions]
    return ("\n".join(lines) + "\n").encode("utf-8")
