"""Storage: the one small interface the engine talks to files through.

This is the only module that knows which filesystem a table lives on: callers pass full locations
(absolute local paths or URIs) and get pyarrow files, bytes, listings and Python exceptions back.

Contract (what commits rely on, after Delta Kernel's LogStore):

* ``write_bytes(path, data, overwrite=False)`` either creates the complete file or creates
  nothing at all, and raises :class:`FileExistsError` when the file is already there. This
  atomic put-if-absent is what makes two writers of the same log version mutually exclusive.
* ``list_dir`` returns the direct children that are files, sorted by path, with size and
  modification time; a missing directory lists as empty. With ``start_after`` only the names that
  sort after it (the store's listing from a start key where it has one: S3's ``start-after``;
  locally the names before it are not even stat'ed), so a writer looking for commits newer than the
  ones it read does not list the whole log again.
* ``list_files`` lists every file under a prefix (recursively by default) as one Arrow table
  (``LISTING_SCHEMA``) with paths *relative to the prefix*; :func:`hidden_mask` (or
  ``skip_hidden=True``) selects what Delta's VACUUM treats as hidden.
* Every "not found", whatever the filesystem calls it, surfaces as :class:`FileNotFoundError`
  whose ``filename`` is the location the caller passed (:func:`normalized_io_errors` is the one
  place that translates; wrap lazy reads through an opened file in it too).

The storage layer decides nothing about the protocol.

Implementations: :class:`LocalStorage` (POSIX: write to a temporary sibling, then ``link()`` it
into place, which fails atomically if the target exists), :class:`ObjectStoreStorage` for S3, GCS
and Azure (the store's own conditional create, see :mod:`.object_stores`) and :class:`PyArrowStorage`
for other ``pyarrow.fs`` schemes (HDFS, ...), whose put-if-absent is an exists check and then a
write: it refuses to commit unless the caller opts in for a single writer.
"""

from __future__ import annotations

import errno
import os
import uuid
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from .errors import InvalidArgumentError, StorageError

# One row per file: ``path`` relative to the listed prefix ('/'-separated, no leading '/', the
# names as stored, i.e. not URI-encoded), ``size`` in bytes, ``mtime_ms`` since the epoch.
LISTING_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime_ms", pa.int64(), nullable=False),
    ]
)

# How the filesystems pyarrow wraps spell "not found" when they raise a plain OSError
# (S3: "Path does not exist", "NO_SUCH_KEY"; GCS: "NotFound"; HDFS: "No such file or directory").
_NOT_FOUND_MARKERS = ("no such file", "does not exist", "not found", "notfound", "no_such_key", "nosuchkey")


def _is_not_found(e: OSError) -> bool:
    if isinstance(e, FileNotFoundError) or e.errno == errno.ENOENT:
        return True
    msg = str(e).lower()
    return any(m in msg for m in _NOT_FOUND_MARKERS)


def _file_not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


@contextmanager
def normalized_io_errors(path: str) -> Iterator[None]:
    """Inside the block, any "not found" OSError becomes ``FileNotFoundError`` naming ``path``.

    Storage methods already do this; callers wrap only reads through a file they opened with
    :meth:`Storage.open_input_file`, since a remote file may be fetched lazily (and vanish) after
    it was opened. Other OSErrors pass through unchanged.
    """
    try:
        yield
    except OSError as e:
        if _is_not_found(e) and not (isinstance(e, FileNotFoundError) and e.filename == path):
            raise _file_not_found(path) from e
        raise


def _listing(prefix: str, paths: list[str], sizes: list[int], mtimes: list[int]) -> pa.Table:
    """The listing table, sorted by path, built from buffers.

    Not ``pa.array(list)``: converting Python values makes pyarrow import pandas (~0.25 s), which
    the log listing of a fresh process must not pay.
    """
    try:
        encoded = [p.encode() for p in paths]
    except UnicodeEncodeError:
        bad = next(p for p in paths if _not_utf8(p))
        raise StorageError(
            f"Cannot list '{prefix}': the file name {bad!r} is not UTF-8",
            "Delta paths are UTF-8 strings, so this file cannot belong to the table",
            "rename or remove the file",
        ) from None
    n = len(paths)
    path_col = pa.Array.from_buffers(
        pa.large_string(),
        n,
        [None, pa.py_buffer(array("q", accumulate(map(len, encoded), initial=0))), pa.py_buffer(b"".join(encoded))],
    ).cast(pa.string())
    size_col = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(array("q", sizes))])
    mtime_col = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(array("q", mtimes))])
    t = pa.Table.from_arrays([path_col, size_col, mtime_col], schema=LISTING_SCHEMA)
    return t.take(pc.sort_indices(path_col)) if n > 1 else t


def _not_utf8(name: str) -> bool:
    try:
        name.encode()
        return False
    except UnicodeEncodeError:
        return True


def _hidden_name(name: str, not_hidden: Iterable[str]) -> bool:
    """The per-name form of :func:`hidden_mask` for a directory (used to prune a local walk)."""
    return name[:1] in ("_", ".") and "=" not in name and name not in not_hidden


def hidden_mask(paths: pa.Array | pa.ChunkedArray, *, not_hidden: Iterable[str] = ()) -> pa.ChunkedArray:
    """True for each relative path that Delta's VACUUM leaves alone as hidden.

    A path is hidden when one of its directories, or the file name itself, starts with ``_`` or
    ``.`` (``_delta_log``, ``_temporary``, ``.spark-staging``, ``_SUCCESS``, ``.part-0.crc``), except
    that a directory whose name contains ``=`` is a partition directory (``_x=1``) and never hidden.
    Directory names listed in ``not_hidden`` are not hidden either (VACUUM passes ``_change_data``
    and ``_delta_index``, whose files it does clean). Paths are as :meth:`Storage.list_files`
    returns them; the prefix itself is not judged, so a table under ``/data/_staging/t`` works.
    """
    paths = pa.chunked_array([paths]) if isinstance(paths, pa.Array) else paths
    names = [n for n in not_hidden if n]
    for n in names:
        if "/" in n:
            raise InvalidArgumentError(f"'{n}' is not a directory name", "it contains '/'", "pass single names")
    # only a path with a name starting with "_" or "." can be hidden: literal tests find those, and
    # the regexes below (a few times slower) run on them alone
    maybe = pc.or_(
        pc.or_(pc.starts_with(paths, "_"), pc.starts_with(paths, ".")),
        pc.or_(pc.match_substring(paths, "/_"), pc.match_substring(paths, "/.")),
    )
    maybe = pc.fill_null(maybe, False).combine_chunks()
    if maybe.true_count == len(paths):
        return _hidden_mask(paths, names)
    out = pc.replace_with_mask(maybe, maybe, _hidden_mask(paths.filter(maybe), names).combine_chunks())
    return pa.chunked_array([out])


def _hidden_mask(paths: pa.ChunkedArray, names: list[str]) -> pa.ChunkedArray:
    """:func:`hidden_mask`'s rule, by regular expressions."""
    if names:
        # Rename the exempted directories first (RE2 has no look-around), so the test below passes
        # them: with every separator doubled, each directory sits alone between its own two '/'.
        alternation = "|".join(_re2_escape(n) for n in names)
        doubled = pc.binary_join_element_wise("/", pc.replace_substring(paths, "/", "//"), "")
        doubled = pc.replace_substring_regex(doubled, f"/({alternation})/", "/d/")
        paths = pc.utf8_slice_codeunits(pc.replace_substring(doubled, "//", "/"), 1)
    hidden_dir = pc.match_substring_regex(paths, "(^|/)[_.][^/=]*/")
    hidden_file = pc.match_substring_regex(paths, "(^|/)[_.][^/]*$")
    return pc.or_(hidden_dir, hidden_file)


def _re2_escape(name: str) -> str:
    return "".join("\\" + c if not c.isalnum() and c != "_" else c for c in name)


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


class Storage:
    """Abstract storage. Paths are full locations (absolute local paths or URIs).

    Subclasses set ``_fs`` (a ``pyarrow.fs`` filesystem) and implement ``_fs_path``; both stay
    private to this module.
    """

    _fs: pafs.FileSystem

    def _fs_path(self, path: str) -> str:
        """The path to hand to ``self._fs`` for ``path``."""
        raise NotImplementedError

    # ---- listing

    def list_files(
        self,
        prefix: str,
        *,
        recursive: bool = True,
        skip_hidden: bool = False,
        not_hidden: Iterable[str] = (),
    ) -> pa.Table:
        """Every file under the directory ``prefix`` (its subdirectories too, unless ``recursive=False``).

        Returns a ``LISTING_SCHEMA`` table sorted by path, whose ``path`` is relative to ``prefix``
        (join it with ``prefix`` for a full location). Directories are not rows, so empty ones do
        not appear; a missing prefix, or one that is a file, lists as empty. Files deleted while
        listing are left out. Symbolic links to directories are not followed.
        ``skip_hidden=True`` leaves out what :func:`hidden_mask` calls hidden (with ``not_hidden``
        passed through) and, where the filesystem allows, does not even descend into hidden
        directories; without it everything is listed and the caller may apply :func:`hidden_mask`.
        """
        not_hidden = frozenset(not_hidden)
        t = _listing(prefix, *self._walk(prefix, recursive=recursive, prune=not_hidden if skip_hidden else None))
        if skip_hidden and t.num_rows:
            t = t.filter(pc.invert(hidden_mask(t.column("path"), not_hidden=not_hidden)))
        return t

    def list_dir(self, dir_path: str, *, start_after: str | None = None) -> list[FileInfo]:
        """The files directly in ``dir_path``, sorted by path, with full locations; [] if missing.

        :param start_after: only the files whose name sorts after this one (plain string order, as
            S3's ``start-after``); the listing starts there where the storage can
        """
        if start_after is None:
            paths, sizes, mtimes = self._walk(dir_path, recursive=False, prune=None)
        else:
            paths, sizes, mtimes = self._list_after(dir_path, start_after)
        base = dir_path.rstrip("/") + "/"  # join() for plain names, once
        return [
            FileInfo(base + paths[i], sizes[i], mtimes[i]) for i in sorted(range(len(paths)), key=paths.__getitem__)
        ]

    def _list_after(self, dir_path: str, start_after: str) -> tuple[list[str], list[int], list[int]]:
        """The files directly in ``dir_path`` named after ``start_after`` (as :meth:`_walk` returns
        them); here the whole directory filtered, where a storage has nothing better."""
        paths, sizes, mtimes = self._walk(dir_path, recursive=False, prune=None)
        keep = [i for i, p in enumerate(paths) if p > start_after]
        return [paths[i] for i in keep], [sizes[i] for i in keep], [mtimes[i] for i in keep]

    def _walk(
        self, prefix: str, *, recursive: bool, prune: frozenset[str] | None
    ) -> tuple[list[str], list[int], list[int]]:
        """The files under ``prefix``: paths relative to it, sizes, mtimes in ms (any order).

        ``prune`` (the ``not_hidden`` names) asks to skip hidden directories where that saves work;
        ``list_files`` applies :func:`hidden_mask` afterwards either way.
        """
        raise NotImplementedError

    def file_info(self, path: str) -> FileInfo:
        """Size and modification time of one file; ``FileNotFoundError`` if it is missing."""
        with normalized_io_errors(path):
            info = self._fs.get_file_info(self._fs_path(path))
        if info.type == pafs.FileType.NotFound:
            raise _file_not_found(path)
        if info.type != pafs.FileType.File:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return FileInfo(path, int(info.size or 0), (info.mtime_ns or 0) // 1_000_000)

    # ---- reading and writing

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def open_input_file(self, path: str) -> pa.NativeFile:
        """A seekable pyarrow file (for ``pyarrow.parquet.ParquetFile`` and ranged reads).

        ``FileNotFoundError`` if missing. Close it (or use it as a context manager).
        """
        with normalized_io_errors(path):
            return self._fs.open_input_file(self._fs_path(path))

    def read_parquet_files(self, paths: list[str], *, file_format: str = "parquet") -> pa.Table:
        """Many parquet (or ``file_format="orc"``) files at once, read by pyarrow's multi-threaded
        dataset reader (one table, the files' own columns, unified by name); ``FileNotFoundError`` if
        one is missing."""
        import pyarrow.dataset as ds

        with normalized_io_errors(paths[0] if paths else ""):
            return ds.dataset([self._fs_path(p) for p in paths], format=file_format, filesystem=self._fs).to_table()

    def open_output_stream(self, path: str) -> pa.NativeFile:
        """A new file at ``path`` to stream into (parent directories created where needed).

        Not put-if-absent and not atomic: an existing file is replaced, and a crash leaves a partial
        file. Meant for data files under fresh unique names (an unreferenced partial file is an
        orphan VACUUM removes) and for outputs; log entries go through :meth:`write_bytes`.
        """
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        raise NotImplementedError

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        """Delete one file; a missing one is fine unless ``missing_ok=False`` (``FileNotFoundError``)."""
        raise NotImplementedError

    def remove_empty_dir(self, dir_path: str) -> bool:
        """Remove the directory ``dir_path`` if it exists and is empty (object stores have no
        directories: nothing to do there); whether it was removed."""
        return False

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def mkdirs(self, dir_path: str) -> None:
        raise NotImplementedError

    @staticmethod
    def join(*parts: str) -> str:
        out = parts[0].rstrip("/")
        for p in parts[1:]:
            out = out + "/" + p.strip("/")
        return out


class LocalStorage(Storage):
    def __init__(self) -> None:
        self._fs = pafs.LocalFileSystem()

    def _fs_path(self, path: str) -> str:
        return path

    def _walk(
        self, prefix: str, *, recursive: bool, prune: frozenset[str] | None
    ) -> tuple[list[str], list[int], list[int]]:
        paths: list[str] = []
        sizes: list[int] = []
        mtimes: list[int] = []
        pending = [("", prefix.rstrip("/") or "/")]  # (relative dir with trailing '/', absolute dir)
        while pending:
            rel_dir, abs_dir = pending.pop()
            try:
                it = os.scandir(abs_dir)
            except (FileNotFoundError, NotADirectoryError):  # missing prefix, or removed while listing
                continue
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if recursive and not (prune is not None and _hidden_name(e.name, prune)):
                                pending.append((rel_dir + e.name + "/", e.path))
                            continue
                        if not e.is_file():
                            continue
                        st = e.stat()
                    except FileNotFoundError:  # deleted while listing
                        continue
                    paths.append(rel_dir + e.name)
                    sizes.append(st.st_size)
                    mtimes.append(st.st_mtime_ns // 1_000_000)
        return paths, sizes, mtimes

    def _list_after(self, dir_path: str, start_after: str) -> tuple[list[str], list[int], list[int]]:
        # the names come from one readdir; only those after the start key cost a stat
        paths: list[str] = []
        sizes: list[int] = []
        mtimes: list[int] = []
        try:
            it = os.scandir(dir_path.rstrip("/") or "/")
        except (FileNotFoundError, NotADirectoryError):
            return paths, sizes, mtimes
        with it:
            for e in it:
                if e.name <= start_after:
                    continue
                try:
                    if e.is_dir(follow_symlinks=False) or not e.is_file():  # files only, as _walk
                        continue
                    st = e.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                paths.append(e.name)
                sizes.append(st.st_size)
                mtimes.append(st.st_mtime_ns // 1_000_000)
        return paths, sizes, mtimes

    def read_bytes(self, path: str) -> bytes:
        with normalized_io_errors(path), open(path, "rb") as f:
            return f.read()

    def open_output_stream(self, path: str) -> pa.NativeFile:
        return _in_own_dir(path, self._fs.open_output_stream)

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        parent = os.path.dirname(path)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with _in_own_dir(tmp, lambda p: open(p, "wb")) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                # link() is atomic and fails with EEXIST if the target exists: put-if-absent.
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    if os.path.isdir(path):  # not a racing writer: the name is taken by a directory
                        raise IsADirectoryError(errno.EISDIR, "a directory is in the way", path) from None
                    raise
                except FileNotFoundError:  # the temp file vanished (e.g. removed by a cleaner)
                    raise StorageError(
                        f"Writing '{path}' failed: its temporary file disappeared before it was published",
                        f"'{tmp}' was removed by another process while the write was in flight",
                        "retry the operation",
                    ) from None
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise _file_not_found(path) from None

    def remove_empty_dir(self, dir_path: str) -> bool:
        try:
            os.rmdir(self._fs_path(dir_path))
            return True
        except OSError:  # not empty, missing, or not a directory
            return False

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdirs(self, dir_path: str) -> None:
        _make_dirs(dir_path)


#: how many times a local write recreates its folder that a cleaner removed meanwhile
_DIR_RACE_TRIES = 8


def _make_dirs(dir_path: str) -> None:
    """``os.makedirs(dir_path, exist_ok=True)`` that survives a racing cleaner: makedirs raises
    FileExistsError when another process created a folder of the path and a cleaner (VACUUM
    removing an empty ``_change_data``) deleted it before makedirs looked again; create it again."""
    for attempt in range(_DIR_RACE_TRIES):
        try:
            os.makedirs(dir_path or "/", exist_ok=True)
            return
        except FileExistsError:
            if attempt == _DIR_RACE_TRIES - 1 or os.path.lexists(dir_path) and not os.path.isdir(dir_path):
                raise  # a file is in the way, or the race never ends


def _in_own_dir(path: str, create):
    """``create(path)`` (a new file), its folder made first and made again when a cleaner removed
    it (still empty) between the two calls."""
    for attempt in range(_DIR_RACE_TRIES):
        _make_dirs(os.path.dirname(path))
        try:
            return create(path)
        except FileNotFoundError:
            if attempt == _DIR_RACE_TRIES - 1 or os.path.isdir(os.path.dirname(path) or "/"):
                raise  # not the folder's race


class PyArrowStorage(Storage):
    """Any ``pyarrow.fs`` filesystem (hdfs://, s3://, gs://, ...).

    Put-if-absent is emulated (exists check, then write), which is NOT atomic on object stores;
    commits through it are refused unless ``allow_unsafe_put_if_absent=True`` (a single-writer
    deployment may accept that). ``filesystem`` replaces the one built from ``uri`` (custom
    credentials or endpoints, a ``SubTreeFileSystem``); paths without a scheme go to it unchanged.
    """

    def __init__(
        self,
        uri: str,
        *,
        allow_unsafe_put_if_absent: bool = False,
        filesystem: pafs.FileSystem | None = None,
    ) -> None:
        if filesystem is not None:
            self._fs = filesystem
        else:
            try:
                self._fs, _ = pafs.FileSystem.from_uri(uri)
            except Exception as e:  # pyarrow raises several types here
                raise InvalidArgumentError(
                    f"Cannot open storage for '{uri}'",
                    str(e),
                    "use a local path, file://, or a URI scheme pyarrow.fs supports (hdfs://, s3://, gs://)",
                ) from None
        self._scheme = urlparse(uri).scheme
        self.allow_unsafe_put_if_absent = allow_unsafe_put_if_absent

    def _fs_path(self, path: str) -> str:
        if "://" in path:
            _, p = pafs.FileSystem.from_uri(path)
            return p
        return path

    def _walk(
        self, prefix: str, *, recursive: bool, prune: frozenset[str] | None
    ) -> tuple[list[str], list[int], list[int]]:
        # One listing call (a paginated LIST on object stores, where walking directory by
        # directory would cost a request each); hidden paths are filtered afterwards.
        raw = self._fs_path(prefix)
        base = raw.rstrip("/")
        sel = pafs.FileSelector(base or raw, allow_not_found=True, recursive=recursive)
        try:
            with normalized_io_errors(prefix):
                infos = self._fs.get_file_info(sel)
        except (FileNotFoundError, NotADirectoryError):
            infos = []
        paths, sizes, mtimes = [], [], []
        for info in infos:
            if info.type == pafs.FileType.File:
                paths.append(info.path[len(base) :].lstrip("/"))
                sizes.append(info.size or 0)
                mtimes.append((info.mtime_ns or 0) // 1_000_000)
        return paths, sizes, mtimes

    def read_bytes(self, path: str) -> bytes:
        try:
            with normalized_io_errors(path), self._fs.open_input_stream(self._fs_path(path)) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as e:
            raise StorageError(f"Cannot read '{path}'", str(e), "check the storage credentials and retry") from None

    def _open_output(self, fs_path: str) -> pa.NativeFile:
        try:
            return self._fs.open_output_stream(fs_path)
        except FileNotFoundError:
            # Only filesystems with real directories (local) refuse a missing parent; object stores
            # never do, so they pay for no directory markers and no extra request.
            parent = fs_path.rsplit("/", 1)[0]
            if not parent or parent == fs_path:
                raise
            self._fs.create_dir(parent, recursive=True)
            return self._fs.open_output_stream(fs_path)

    def open_output_stream(self, path: str) -> pa.NativeFile:
        with normalized_io_errors(path):
            return self._open_output(self._fs_path(path))

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        p = self._fs_path(path)
        if not overwrite:
            if not self.allow_unsafe_put_if_absent:
                raise InvalidArgumentError(
                    f"Cannot commit to '{path}' safely",
                    f"the '{self._scheme}' filesystem offers no atomic put-if-absent, so two writers could "
                    "overwrite each other's commit",
                    f"use a local path or an object store (s3://, gs://, abfss://), or commit from a single writer "
                    f"and set {UNSAFE_PUT_ENV}=true",
                )
            if self.exists(path):
                raise FileExistsError(path)
        with normalized_io_errors(path), self._open_output(p) as f:
            f.write(data)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            with normalized_io_errors(path):
                self._fs.delete_file(self._fs_path(path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def exists(self, path: str) -> bool:
        with normalized_io_errors(path):
            return self._fs.get_file_info(self._fs_path(path)).type != pafs.FileType.NotFound

    def mkdirs(self, dir_path: str) -> None:
        with normalized_io_errors(dir_path):
            self._fs.create_dir(self._fs_path(dir_path), recursive=True)


class ObjectStoreStorage(PyArrowStorage):
    """S3 (and S3-compatible servers), GCS and Azure: the data plane through ``pyarrow.fs``, commits
    through the store's own conditional create (:mod:`.object_stores`), so two writers of one log
    version are mutually exclusive as on a local disk. A store that ignores conditional writes is
    detected before the first commit and refused; ``allow_unsafe_put_if_absent=True`` keeps the
    old exists-then-write for a single writer."""

    def __init__(self, uri: str, *, allow_unsafe_put_if_absent: bool = False) -> None:
        from . import object_stores

        self._fs = object_stores.pyarrow_filesystem(uri)
        self._scheme = urlparse(uri).scheme
        self.allow_unsafe_put_if_absent = allow_unsafe_put_if_absent

    def _fs_path(self, path: str) -> str:
        from . import object_stores

        return object_stores.fs_path(path) if "://" in path else path

    def _list_after(self, dir_path: str, start_after: str) -> tuple[list[str], list[int], list[int]]:
        if "://" not in dir_path:  # a path without its scheme: pyarrow's listing, filtered
            return super()._list_after(dir_path, start_after)
        from . import object_stores

        return object_stores.list_after(dir_path, start_after)

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        if overwrite or self.allow_unsafe_put_if_absent:
            super().write_bytes(path, data, overwrite=overwrite)
            return
        from . import object_stores

        object_stores.create_object(path, data)

    def mkdirs(self, dir_path: str) -> None:
        """Nothing to do: object stores have no directories (pyarrow would write an empty marker object)."""


def normalize_table_uri(table_uri: str) -> str:
    """Local paths and ``file:`` URIs -> absolute local path; other URIs unchanged. No trailing slash."""
    if not table_uri or not str(table_uri).strip():
        raise InvalidArgumentError(
            "No table location given", "table_uri is empty", "pass the table's path or URI as table_uri"
        )
    uri = str(table_uri).strip()
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        uri = unquote(parsed.path)
    elif parsed.scheme and len(parsed.scheme) > 1:
        return uri.rstrip("/")
    return os.path.abspath(os.path.expanduser(uri)).rstrip("/") or "/"


def table_location(table_uri: str) -> str:
    """A table's location, normalised; a relative path is refused.

    A relative path would be resolved against each process's working directory, so one table could
    split across the machines of a cluster or the workers of an Airflow deployment. Every place a
    table location enters (Python API, CLI, operators, sensor) goes through here.
    """
    raw = str(table_uri or "").strip()
    parsed = urlparse(raw)
    is_uri = bool(parsed.scheme) and len(parsed.scheme) > 1
    if raw and not is_uri and not raw.startswith(("/", "~")):
        raise InvalidArgumentError(
            f"Table location '{raw}' is a relative path",
            "it would be resolved against the working directory of each process that touches the table",
            "give an absolute path (/data/lake/t) or a URI (file:///data/lake/t, s3://bucket/t)",
        )
    if is_uri and not parsed.netloc:
        from .object_stores import store_kind

        if store_kind(raw) is not None:  # hdfs:///path (the default file system) stays valid
            raise InvalidArgumentError(
                f"Table location '{raw}' names no bucket",
                f"an object store location is {parsed.scheme}://<bucket or container>/<path>",
                f"give the bucket, e.g. {parsed.scheme}://my-bucket/lake/orders",
            )
    return normalize_table_uri(raw)


_LOCAL = LocalStorage()


def storage_for(table_uri: str, **options) -> Storage:
    uri = normalize_table_uri(table_uri)
    if "://" not in uri:
        return _LOCAL
    from .object_stores import store_kind

    # The single-writer opt-in, read here so that every entry point (Python, CLI, apps) honours it.
    options.setdefault("allow_unsafe_put_if_absent", _env_flag(UNSAFE_PUT_ENV))
    if store_kind(uri) is not None:
        return ObjectStoreStorage(uri, **options)
    return PyArrowStorage(uri, **options)


# Set to "true" to commit with an exists check and a plain write where the store has no conditional
# create: safe only when a single writer ever commits to the table.
UNSAFE_PUT_ENV = "DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def is_local(table_uri: str) -> bool:
    return "://" not in normalize_table_uri(table_uri)


def storage_settings(env: dict[str, str] | None):
    """A context manager: inside it, object stores use ``env`` (the standard variables, such as
    ``AWS_ACCESS_KEY_ID`` or ``AZURE_STORAGE_CONNECTION_STRING``) over the process environment,
    without changing it (see :func:`.object_stores.storage_settings`)."""
    from .object_stores import storage_settings as settings

    return settings(env)


def executor_env() -> dict[str, str]:
    """This process's object-store settings (credentials, endpoints) as environment variables, for
    executors that must reach the same stores (see ``engine.spark.session.map_in_arrow``)."""
    from .object_stores import credential_env

    return credential_env()


def hadoop_object_schemes() -> tuple[str, ...]:
    """The URI schemes Spark's own Hadoop filesystems may read object stores by (``s3a``, ``gs``, ...)."""
    from .object_stores import HADOOP_SCHEMES

    return HADOOP_SCHEMES


def store_for_connection_type(conn_type: str):
    """The object store (:class:`.object_stores.ObjectStore`) an Airflow connection type describes, or None."""
    from .object_stores import store_for_connection_type as lookup

    return lookup(conn_type)
