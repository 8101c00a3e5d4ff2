"""``_delta_log/_last_checkpoint``: read (as a hint) and write (with the spec's checksum).

Rules (PROTOCOL.md, "Last Checkpoint File"):

* The file is only a hint. A reader must tolerate it being missing, stale (pointing at an older
  checkpoint), empty or corrupt: :func:`read_last_checkpoint` returns ``None`` in all those cases
  and the caller falls back to listing the log. A present ``checksum`` that does not match the
  content also makes the hint unusable (``None``).
* ``checksum`` = MD5 (lowercase hex) of the canonicalized JSON without the top-level ``checksum`` key:
  every leaf becomes ``<path>=<value>``; path segments are ``"<url-encoded name>"`` for object
  keys and the 0-based index for array elements, joined by ``+``; string values are
  ``"<url-encoded>"``; ``true``/``false``/``null`` and numbers are literal; pairs are sorted by
  the UTF-8 bytes of their path and joined by ``,``. URL-encoding percent-encodes every UTF-8
  octet except ``A-Z a-z 0-9 - . _ ~`` with uppercase hex. Spec test vector:
  ``{"k0":"'v 0'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2],
  {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}`` -> ``6a92d155a59bf2eecbd4b4ec7fd1f875``.
* The writer overwrites the file (it is not a commit; last writer wins).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..storage import Storage

LAST_CHECKPOINT_NAME = "_last_checkpoint"

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def url_encode(text: str) -> str:
    """Strict percent-encoding of the spec (uppercase hex, only unreserved octets kept)."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


def _literal(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return '"' + url_encode(v) + '"'
    return json.dumps(v)  # numbers are their own canonical form


def _leaves(value: Any, path: list[str], out: list[tuple[bytes, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, path + ['"' + url_encode(str(k)) + '"'], out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _leaves(v, path + [str(i)], out)
    else:
        p = "+".join(path)
        out.append((p.encode("utf-8"), p + "=" + _literal(value)))


def canonicalize(obj: dict) -> str:
    """The spec's canonical form of a ``_last_checkpoint`` object (top-level ``checksum`` ignored)."""
    pairs: list[tuple[bytes, str]] = []
    for k, v in obj.items():
        if k == "checksum":
            continue
        _leaves(v, ['"' + url_encode(str(k)) + '"'], pairs)
    pairs.sort(key=lambda p: p[0])
    return ",".join(p[1] for p in pairs)


def compute_checksum(obj: dict) -> str:
    """MD5 hex of :func:`canonicalize` (``obj``)."""
    return hashlib.md5(canonicalize(obj).encode("utf-8")).hexdigest()


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_last_checkpoint(data: bytes) -> dict | None:
    """Parse and validate the content; ``None`` if it is empty, corrupt or fails its checksum."""
    try:
        text = data.decode("utf-8").strip()
        if not text:
            return None
        obj = json.loads(text, object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return None
    parts = obj.get("parts")
    if parts is not None and (not isinstance(parts, int) or parts < 1):
        return None
    stored = obj.get("checksum")
    if stored is not None and stored != compute_checksum(obj):
        return None
    return obj


def read_last_checkpoint(storage: Storage, log_dir: str) -> dict | None:
    """The ``_last_checkpoint`` hint as a dict, or ``None`` (missing, empty, corrupt, bad checksum, or
    unreadable: the file is overwritten in place, and an object store can fail a read that races the
    overwrite, e.g. Azure's 416 on a range of the old size). It is a hint: without it the log is
    listed, and a storage that cannot be read at all fails there."""
    from ..errors import StorageError

    try:
        data = storage.read_bytes(storage.join(log_dir, LAST_CHECKPOINT_NAME))
    except (OSError, StorageError):
        return None
    return parse_last_checkpoint(data)


def last_checkpoint_bytes(info: dict) -> bytes:
    """Serialise ``info`` (``version`` and ``size`` required) with its ``checksum`` added."""
    if "version" not in info or "size" not in info:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(
            "Cannot write _last_checkpoint",
            "the info lacks 'version' or 'size' (both required by the protocol)",
            "pass at least {'version': <checkpoint version>, 'size': <number of actions>}",
        )
    body = {k: v for k, v in info.items() if k != "checksum" and v is not None}
    body["checksum"] = compute_checksum(body)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def write_last_checkpoint(storage: Storage, log_dir: str, info: dict) -> None:
    """Write ``_delta_log/_last_checkpoint`` (overwrite) with the spec's checksum.

    :param info: ``version``, ``size`` (actions in the checkpoint) and optionally ``parts``,
        ``sizeInBytes``, ``numOfAddFiles``, ``checkpointSchema``, ``tags``, ``v2Checkpoint``.
    """
    storage.write_bytes(storage.join(log_dir, LAST_CHECKPOINT_NAME), last_checkpoint_bytes(info), overwrite=True)
