"""Where the files a log names live: the one resolver of every path in ``_delta_log``.

Data files (``add``/``remove``/``cdc`` paths), deletion-vector files and sidecars are all located
through :func:`data_file_uri`, so one rule decides what a log may point at.
"""

from __future__ import annotations

from urllib.parse import unquote, urlparse

from .partitions import decode_add_path
from .storage import Storage

__all__ = ["data_file_uri"]


def data_file_uri(table_root: str, path_in_log: str) -> str:
    """Full location of a file named ``path_in_log`` (as written in the log) under ``table_root``."""
    parsed = urlparse(path_in_log)
    if parsed.scheme and len(parsed.scheme) > 1:  # absolute URI (a 1-letter scheme is a Windows drive)
        if parsed.scheme == "file":
            return unquote(parsed.path)
        return path_in_log
    rel = decode_add_path(path_in_log)
    if rel.startswith("/"):
        return rel  # absolute local path (not a URI, but seen in the wild)
    return Storage.join(table_root, rel)
