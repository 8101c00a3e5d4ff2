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

Confinement by construction: :func:`confine_file_table` checks every path of a file-action table
(data files and their deletion vectors) in one vectorised pass where the snapshot's file table is
built (and where a concurrent winner's commit is read), so every consumer (scans, DML, checkpoints,
conflict checks, maintenance) only ever sees confined paths. The pass sends only paths that are not
*plainly inside* (relative, no ``..`` segment, no scheme, no encoded dot/slash/colon/NUL/backslash)
to :func:`resolve_log_path`; a plainly inside path resolves to the root joined with its decoded
self, which :func:`file_locations` builds vectorised. Nothing else joins a root and a log path.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .buffers import np_bools, pa_ints, str_scalar
from .errors import LogCorruptedError
from .partitions import decode_add_path

__all__ = [
    "resolve_log_path",
    "data_file_uri",
    "confine_paths",
    "confine_file_table",
    "file_locations",
    "plainly_inside",
    "new_file_location",
    "ALLOWED_PREFIXES_ENV",
]

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


def new_file_location(table_root: str, relative_path: str) -> str:
    """Where a file this engine writes goes: ``relative_path`` (on-disk form, written by us) under the root."""
    return _join_under(table_root, relative_path)


def _join_under(root: str, rel: str) -> str:
    return root.rstrip("/") + "/" + rel.lstrip("/")


# ---------------------------------------------------------------------------------------------
# vectorised confinement of whole file tables

# A path holding a ``%`` escape that decodes to a dot, slash, colon, NUL or backslash (or a ``.``/``..``
# segment, an empty one, a trailing slash) could decode to another structure: the resolver decides.
_SUSPECT = r"(^|/)\.{1,2}(/|$)|//|/$|%(2[EeFf]|3[Aa]|00|5[Cc])"


def plainly_inside(paths: pa.Array) -> np.ndarray:
    """Per path: True when it certainly resolves under the root (nulls and empties: False).

    Works on the string array's buffers with numpy (a regex kernel over 100k paths cost ~40 ms): a
    path is plainly inside when it is non-empty, starts with neither ``/`` nor ``.``, does not end with
    ``/``, and holds no ``:``, backslash or NUL and no ``//`` or ``/.``; a path whose only blemish is a
    ``%`` escape is plainly inside too unless an escape decodes to a dot, slash, colon, NUL or
    backslash (:data:`_SUSPECT`, checked on those rows only). The bytes are scanned a window at a
    time: the temporaries stay small (8 MB of paths would take fresh pages on every call).
    """
    n = len(paths)
    if n == 0:
        return np.zeros(0, dtype=bool)
    if not (pa.types.is_string(paths.type) or pa.types.is_large_string(paths.type)):
        paths = paths.cast(pa.string())
    validity, offsets_buf, data_buf = paths.buffers()[:3]
    width = 8 if pa.types.is_large_string(paths.type) else 4
    offsets = np.frombuffer(offsets_buf, dtype=f"<i{width}", count=n + 1, offset=paths.offset * width)
    ok = np.diff(offsets) > 0
    if paths.null_count and validity is not None:
        ok &= np_bools(pc.is_valid(paths))
    if data_buf is None or not ok.any():
        return ok
    data = np.frombuffer(data_buf, dtype=np.uint8, count=int(offsets[-1]))
    starts, ends = offsets[:-1], offsets[1:]
    first = data[np.minimum(starts, len(data) - 1)]
    last = data[np.maximum(ends - 1, 0)]
    ok &= (first != ord("/")) & (first != ord(".")) & (last != ord("/"))

    def rows_at(positions: np.ndarray) -> np.ndarray:
        rows = np.searchsorted(offsets, positions, side="right") - 1
        return rows[(rows >= 0) & (rows < n)]

    bad, escapes = [], []
    for lo in range(int(offsets[0]), len(data), SCAN_WINDOW):
        hi = min(len(data), lo + SCAN_WINDOW)
        window = data[lo : hi + 1]  # one byte more: a pair across the window's edge
        own = window[: hi - lo]
        blob = own.tobytes()  # the bytes' own search (memchr) finds no blemish fast
        for needle in (b":", b"\\", b"\x00"):
            if needle in blob:
                bad.append(lo + np.flatnonzero(own == needle[0]))
        slashes = np.flatnonzero(own == ord("/"))  # "//" and "/." (two-byte searches are slow here)
        slashes = slashes[slashes + 1 < len(window)]
        after = window[slashes + 1]
        bad.append(lo + slashes[(after == ord("/")) | (after == ord("."))])
        if b"%" in blob:
            escapes.append(lo + np.flatnonzero(own == ord("%")))
    if bad:
        ok[rows_at(np.concatenate(bad))] = False
    escaped = np.unique(rows_at(np.concatenate(escapes))) if escapes else np.zeros(0, dtype=np.int64)
    escaped = escaped[ok[escaped]]
    if len(escaped):  # decoding must not change the path's structure
        suspect = pc.match_substring_regex(paths.take(pa_ints(escaped)), _SUSPECT)
        ok[escaped[np_bools(suspect)]] = False
    return ok


#: bytes of paths :func:`plainly_inside` scans at a time
SCAN_WINDOW = 1 << 17


def confine_paths(table_root: str, paths, *, kind: str = "data file") -> None:
    """Refuse (:class:`LogCorruptedError`, naming the path) the first path of ``paths`` that leaves the root.

    Vectorised: one regex pass; only the paths that are not plainly inside go through
    :func:`resolve_log_path` one by one (usually none).
    """
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks() if paths.num_chunks != 1 else paths.chunk(0)
    if len(paths) == 0:
        return
    for i in np.flatnonzero(~plainly_inside(paths)):
        resolve_log_path(table_root, paths[int(i)].as_py(), kind=kind)


_DV_NAME = str_scalar("deletion_vector.bin")  # stands for the fixed name a ``u`` descriptor derives
_NULL_STRING = pa.nulls(1, pa.string())[0]
_U, _P, _SLASH = str_scalar("u"), str_scalar("p"), str_scalar("/")


def _dv_paths(dv: pa.Array) -> pa.Array:
    """The path part a deletion-vector descriptor names, relative as the log writes it: the random
    prefix plus a fixed file name for storage type ``u``, the path itself for ``p``, null for inline."""
    storage_type = pc.struct_field(dv, "storageType")
    p = pc.struct_field(dv, "pathOrInlineDv")
    prefix = pc.utf8_slice_codeunits(p, 0, -20)
    u_path = pc.if_else(
        pc.match_substring_regex(prefix, "^$"),
        _DV_NAME,
        pc.binary_join_element_wise(prefix, _DV_NAME, _SLASH),
    )
    return pc.if_else(pc.equal(storage_type, _U), u_path, pc.if_else(pc.equal(storage_type, _P), p, _NULL_STRING))


def confine_file_table(table_root: str, files: pa.Table, *, kind: str = "data file") -> pa.Table:
    """Check every location a file-action table names (``path`` and on-disk deletion vectors) stays in
    the table (see the module docstring); returns the table unchanged so callers can chain it."""
    if files.num_rows == 0:
        return files
    confine_paths(table_root, files.column("path"), kind=kind)
    if "deletion_vector" in files.column_names:
        dv = files.column("deletion_vector")
        if dv.null_count < len(dv):
            dv = dv.combine_chunks() if isinstance(dv, pa.ChunkedArray) else dv
            dv_paths = pc.drop_null(_dv_paths(dv))
            if len(dv_paths):
                confine_paths(table_root, dv_paths, kind="deletion vector")
    return files


def file_locations(table_root: str, paths) -> list[str]:
    """Full locations of log paths already confined (a snapshot's or a winning commit's files):
    the root joined with each decoded path; only paths that are not plainly inside go through the
    resolver (it also applies the allowed absolute prefixes)."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks() if paths.num_chunks != 1 else paths.chunk(0)
    plain = plainly_inside(paths)
    root = table_root.rstrip("/")
    out = []
    for p, ok in zip(paths.to_pylist(), plain):
        if ok:
            out.append(f"{root}/{decode_add_path(p)}")
        else:
            out.append(resolve_log_path(table_root, p))
    return out
