"""Version checksum files (``_delta_log/<v>.crc``): the table's state after a commit in one small
JSON object (PROTOCOL.md "Version Checksum File").

Written by the transaction after each commit it can account for exactly (:func:`next_state`): the
version it read plus its own actions, no concurrent commit in between (after a rebase the state would
need the winners' file lists; no file is written then, as the protocol allows). Never overwritten,
and never needed: a reader works without it, and a missing or unreadable one is ignored. It is what
delta-spark validates a snapshot against (and reads a version's protocol and metadata from); here
:func:`verify` compares it with the replayed state (``DeltaTable.detail()["checksum"]``). It is
not trusted for answers: another writer's may be wrong (a replay is what the table is).

Fields written: ``tableSizeBytes``, ``numFiles``, ``numMetadata`` (1), ``numProtocol`` (1),
``metadata``, ``protocol``, ``setTransactions``, ``domainMetadata``, ``txnId``, and
``inCommitTimestampOpt`` when the commit carries one.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..actions import AddFile, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction

__all__ = ["checksum_path", "next_state", "read_checksum", "verify", "write_checksum"]

log = logging.getLogger(__name__)


def checksum_path(storage, table_root: str, version: int) -> str:
    from .listing import log_dir_of

    return storage.join(log_dir_of(storage, table_root), f"{version:020d}.crc")


def next_state(snapshot, actions: list, commit_info: dict) -> dict:
    """The checksum of the version a commit of ``actions`` writes on top of ``snapshot`` (the version
    it read, None for a new table): file count and bytes from the snapshot's files (vectorised over
    paths), then the commit's removes and adds; protocol, metadata, txns and domains as replay sets them."""
    adds = {a.path: a.size or 0 for a in actions if isinstance(a, AddFile)}
    removed = {a.path for a in actions if isinstance(a, RemoveFile)} | set(adds)  # an add replaces its path
    num_files, size = 0, 0
    protocol = metadata = None
    txns: dict[str, SetTransaction] = {}
    domains: dict[str, DomainMetadata] = {}
    if snapshot is not None:
        files = snapshot.files
        gone = pc.is_in(files.column("path"), value_set=pa.array(sorted(removed), pa.string()))
        kept = files.filter(pc.invert(gone))
        num_files, size = kept.num_rows, int(pc.sum(kept.column("size")).as_py() or 0) if kept.num_rows else 0
        protocol, metadata = snapshot.protocol, snapshot.metadata
        txns = dict(getattr(snapshot, "set_transactions", None) or {})
        domains = dict(getattr(snapshot, "domain_metadata", None) or {})
    num_files += len(adds)
    size += sum(adds.values())
    for a in actions:
        if isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, Metadata):
            metadata = a
        elif isinstance(a, SetTransaction):
            txns[a.app_id] = a
        elif isinstance(a, DomainMetadata):
            if a.removed:
                domains.pop(a.domain, None)
            else:
                domains[a.domain] = a
    state: dict[str, Any] = {
        "txnId": commit_info.get("txnId"),
        "tableSizeBytes": size,
        "numFiles": num_files,
        "numMetadata": 1,
        "numProtocol": 1,
        "setTransactions": [t.to_json() for t in sorted(txns.values(), key=lambda t: t.app_id)],
        "domainMetadata": [d.to_json() for d in sorted(domains.values(), key=lambda d: d.domain)],
        "metadata": metadata.to_json(),
        "protocol": protocol.to_json(),
    }
    if commit_info.get("inCommitTimestamp") is not None:
        state["inCommitTimestampOpt"] = commit_info["inCommitTimestamp"]
    if state["txnId"] is None:
        del state["txnId"]
    return state


def write_checksum(storage, table_root: str, version: int, state: dict) -> bool:
    """Write ``<version>.crc`` unless one exists (a checksum is never overwritten); False when it was
    not written. Best effort: an error is logged, never raised (the commit has landed)."""
    try:
        data = json.dumps(state, separators=(",", ":")).encode()
        storage.write_bytes(checksum_path(storage, table_root, version), data, overwrite=False)
        return True
    except FileExistsError:
        return False
    except Exception as e:  # e.g. a store that refused the write: the table is fine without it
        log.warning("writing the checksum of version %s failed: %s", version, e)
        return False


def read_checksum(storage, table_root: str, version: int) -> dict | None:
    """``<version>.crc`` as a dict, or None when it is missing, unreadable or lacks a required field
    (readers must work without it)."""
    try:
        state = json.loads(storage.read_bytes(checksum_path(storage, table_root, version)))
    except Exception:
        return None
    required = ("tableSizeBytes", "numFiles", "metadata", "protocol")
    if not isinstance(state, dict) or any(k not in state for k in required):
        return None
    if not isinstance(state["metadata"], dict) or not isinstance(state["protocol"], dict):
        return None
    return state


def verify(snapshot) -> str | None:
    """Whether the checksum file of ``snapshot``'s version agrees with the replayed state: ``"ok"``,
    ``"mismatch: <what>"``, or None when the version has none (or an unreadable one)."""
    state = read_checksum(snapshot.storage, snapshot.table_root, snapshot.version)
    if state is None:
        return None
    found = []
    for name, theirs, ours in (
        ("numFiles", state["numFiles"], snapshot.num_files),
        ("tableSizeBytes", state["tableSizeBytes"], snapshot.size_in_bytes),
        ("metadata id", state["metadata"].get("id"), snapshot.metadata.id),
        ("minReaderVersion", state["protocol"].get("minReaderVersion"), snapshot.protocol.min_reader_version),
        ("minWriterVersion", state["protocol"].get("minWriterVersion"), snapshot.protocol.min_writer_version),
    ):
        if theirs != ours:
            found.append(f"{name} {theirs} in the checksum, {ours} in the log")
    return "ok" if not found else "mismatch: " + "; ".join(found)
