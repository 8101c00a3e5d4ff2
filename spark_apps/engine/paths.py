"""Where the files a log names live: the one resolver of every path in ``_delta_log``, confined to the table.

Data files (``add``/``remove``/``cdc`` paths), deletion-vector files and checkpoint sidecars are all
located through :func:`resolve_log_path`. A path in the log is URI-encoded and normally relative to
the table root (sidecars: to ``_delta_log/_sidecars``). After URL-decoding and normalisation it must
stay under the table root: ``../secret.parquet``, ``%2E%2E/secret.parquet``, an absolute path or a
``file:``/``s3:`` URI elsewhere is refused with :class:`LogCorruptedError` naming the path, before any
byte is read. Whoever can write into ``_delta_log/`` therefore cannot make a reader (or, later,
VACUUM or RESTORE) read, rewrite or delete files outside the table.

The protocol allows absolute paths (shallow clones point at another table's files). They are refused
by default, as delta-rs refuses them; the opt-in is the environment variable
``DELTA_ALLOWED_PATH_PREFIXES``: a comma-separated list of locations (local folders or URIs) under which
absolute paths may point. Writers of this engine never produce absolute paths.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import unquote, urlparse

from .errors import LogCorruptedError
from .partitions import decode_add_path

__all__ = ["resolve_log_path", "data_file_uri", "ALLOWED_PREFIXES_ENV"]

ALLOWED_PREFIXES_ENV = "DELTA_ALLOWED_PATH_PREFIXES"


def _split(location: str) -> tuple[str, str]:
    """``(scheme://netloc, normalised path)`` of a location; local paths have an empty first part."""
    parsed = urlparse(location)
    if parsed.scheme and len(parsed.scheme) > 1 and parsed.scheme != "file":
        return f"{parsed.scheme}://{parsed.netloc}", posixpath.normpath("/" + unquote(parsed.path).lstrip("/"))
    path = unquote(parsed.path) if parsed.scheme == "file" else location
    return "", posixpath.normpath(path)


def _under(location: str, root: str) -> bool:
    (a_base, a_path), (r_base, r_path) = _split(location), _split(root)
    if a_base != r_base:
        return False
    r_path = r_path.rstrip("/") or "/"
    return a_path == r_path or a_path.startswith(r_path.rstrip("/") + "/")


def _allowed_prefixes() -> list[str]:
    raw = os.environ.get(ALLOWED_PREFIXES_ENV, "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def _refuse(path_in_log: str, kind: str, table_root: str, why: str) -> LogCorruptedError:
    return LogCorruptedError(
        f"The log names a {kind} outside the table: '{path_in_log}'",
        f"{why}; the table root is '{table_root}'",
        "repair the log (it may have been tampered with); if the table is a shallow clone whose files "
        f"live elsewhere, list the allowed locations in {ALLOWED_PREFIXES_ENV} (comma-separated)",
    )


def resolve_log_path(table_root: str, path_in_log: str, *, kind: str = "data file", base: str | None = None) -> str:
    """Full location of a file the log names, refused when it leaves the table root.

    :param table_root: the table's normalised root
    :param path_in_log: the path exactly as written in the log (URI-encoded, relative or absolute)
    :param kind: what it is, for messages (``data file``, ``deletion vector``, ``sidecar``)
    :param base: the folder relative paths start from (default: the table root)
    :raises LogCorruptedError: the path leaves the table root (after decoding and normalisation)
    """
    if not isinstance(path_in_log, str) or not path_in_log:
        raise LogCorruptedError(f"The log names a {kind} with an empty path", f"got {path_in_log!r}", "repair the log")
    base = base or table_root
    parsed = urlparse(path_in_log)
    absolute = bool(parsed.scheme and len(parsed.scheme) > 1)  # a 1-letter scheme is a Windows drive
    if absolute:
        location = unquote(parsed.path) if parsed.scheme == "file" else path_in_log
    else:
        rel = decode_add_path(path_in_log)
        absolute = rel.startswith("/")
        location = rel if absolute else _join(base, rel)
    if "\x00" in location:
        raise _refuse(path_in_log, kind, table_root, "it holds a NUL character")
    if _under(location, table_root):
        return _normal(location)
    if absolute and any(_under(location, p) for p in _allowed_prefixes()):
        return _normal(location)
    why = "it is an absolute location" if absolute else "it climbs out of the table with '..'"
    raise _refuse(path_in_log, kind, table_root, why)


def _join(base: str, rel: str) -> str:
    base_part, path = _split(base)
    joined = posixpath.normpath(posixpath.join(path, rel))
    return f"{base_part}{joined}" if base_part else joined


def _normal(location: str) -> str:
    base, path = _split(location)
    return f"{base}{path}" if base else path


def data_file_uri(table_root: str, path_in_log: str) -> str:
    """Full location of a data file named ``path_in_log`` (see :func:`resolve_log_path`)."""
    return resolve_log_path(table_root, path_in_log, kind="data file")
