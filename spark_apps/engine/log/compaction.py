"""Log compaction files (``<x>.<y>.compacted.json``, PROTOCOL.md "Log Compaction Files"): the
reconciled actions of commits ``x..y`` in one file, which a reader may replay in their place.

Where they help: a table whose checkpoints are far apart (``delta.checkpointInterval`` above
:data:`SPAN`) makes every snapshot read up to that many JSON commits after its checkpoint; one
compaction per :data:`SPAN` commits cuts that to a file per span. So after commit ``v`` that ends a
span (``v % SPAN == 0``, no checkpoint due at ``v``) the transaction writes the compaction of
``v - SPAN + 1 .. v``: spans start right after checkpoints at multiples of :data:`SPAN`, where a
snapshot's replay starts. Reading: :func:`.listing.select_segment`
substitutes them (:func:`.listing._with_compactions`); a replay that cannot parse one (torn, not
JSON, no actions) reads the commits it covers instead and logs a warning naming it
(:func:`.replay._collect_commits`). Log cleanup deletes them with the commits.

The content: per logical file ``(path, deletion vector id)`` the newest add or remove of the range,
per ``appId`` the newest txn, per domain the newest domainMetadata (a removal kept: it must hide an
older one), the newest protocol and metaData; no commitInfo, cdc or other actions. Each winner is
copied as the line its commit wrote, so nothing is lost in a round trip through our action model.
"""

from __future__ import annotations

import json
import logging

__all__ = ["SPAN", "compacted_actions", "compaction_due", "write_compaction"]

log = logging.getLogger(__name__)

#: commits per compaction file
SPAN = 10

_SINGLE = ("protocol", "metaData")


def compaction_due(version: int, checkpoint_interval: int) -> bool:
    """Whether commit ``version`` ends a span whose compaction helps (checkpoints further apart than
    a span, none due at ``version``)."""
    return checkpoint_interval > SPAN and version >= SPAN and version % SPAN == 0 and version % checkpoint_interval != 0


def _file_key(action: dict) -> str:
    dv = action.get("deletionVector") or None
    if not dv:
        return action["path"]
    unique = f"{dv.get('storageType', '')}{dv.get('pathOrInlineDv', '')}"
    if dv.get("offset") is not None:
        unique += f"@{dv['offset']}"
    return action["path"] + "\0" + unique


def compacted_actions(commits: list[bytes]) -> list[str]:
    """The reconciled action lines of ``commits`` (their bytes, in version order)."""
    single: dict[str, str] = {}
    txns: dict[str, str] = {}
    domains: dict[str, str] = {}
    files: dict[str, str] = {}
    for data in commits:
        for line in data.decode().splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            (kind, action), *_ = obj.items()
            if kind in _SINGLE:
                single[kind] = line
            elif kind == "txn":
                txns[action["appId"]] = line
            elif kind == "domainMetadata":
                domains[action["domain"]] = line
            elif kind in ("add", "remove"):
                files.pop(_file_key(action), None)  # re-inserted last: the file actions keep log order
                files[_file_key(action)] = line
    return [*(single[k] for k in _SINGLE if k in single), *txns.values(), *domains.values(), *files.values()]


def write_compaction(storage, table_root: str, start: int, end: int) -> str | None:
    """Write ``<start>.<end>.compacted.json`` of the commits ``start..end`` (all must exist); its path,
    or None when it exists already or a commit is missing. Best effort: errors are logged, never raised."""
    from .listing import commit_path, log_dir_of

    try:
        data = [storage.read_bytes(commit_path(storage, table_root, v)) for v in range(start, end + 1)]
        path = storage.join(log_dir_of(storage, table_root), f"{start:020d}.{end:020d}.compacted.json")
        storage.write_bytes(path, ("\n".join(compacted_actions(data)) + "\n").encode(), overwrite=False)
        return path
    except (FileExistsError, FileNotFoundError):
        return None
    except Exception as e:  # the table is whole without it
        log.warning("writing the log compaction %s..%s failed: %s", start, end, e)
        return None
