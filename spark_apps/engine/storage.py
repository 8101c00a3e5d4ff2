"""Storage: the one small interface the engine talks to files through.

Contract (what commits rely on, after Delta Kernel's LogStore):

* ``write_bytes(path, data, overwrite=False)`` either creates the complete file or creates
  nothing at all, and raises :class:`FileExistsError` when the file is already there. This
  atomic put-if-absent is what makes two writers of the same log version mutually exclusive.
* ``list_dir`` returns the direct children that are files, sorted by path, with size and
  modification time; a missing directory lists as empty.
* ``read_bytes`` raises :class:`FileNotFoundError` for a missing file.

The storage layer decides nothing about the protocol.

Implementations: :class:`LocalStorage` (POSIX: write to a temporary sibling, then ``link()`` it
into place, which fails atomically if the target exists) and :class:`PyArrowStorage` for other
``pyarrow.fs`` schemes (HDFS, S3, GCS), whose put-if-absent is *not* atomic on object stores:
it refuses to commit unless the caller opts in (see README, limits).
"""

from __future__ import annotations

import errno
import os
import uuid
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from .errors import InvalidArgumentError, StorageError


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


class Storage:
    """Abstract storage. Paths are full locations (absolute local paths or URIs)."""

    filesystem: pafs.FileSystem

    def list_dir(self, dir_path: str) -> list[FileInfo]:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        raise NotImplementedError

    def delete(self, path: str) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def mkdirs(self, dir_path: str) -> None:
        raise NotImplementedError

    def fs_path(self, path: str) -> str:
        """The path to hand to ``self.filesystem`` (pyarrow) for ``path``."""
        raise NotImplementedError

    @staticmethod
    def join(*parts: str) -> str:
        out = parts[0].rstrip("/")
        for p in parts[1:]:
            out = out + "/" + p.strip("/")
        return out


class LocalStorage(Storage):
    def __init__(self) -> None:
        self.filesystem = pafs.LocalFileSystem()

    def fs_path(self, path: str) -> str:
        return path

    def list_dir(self, dir_path: str) -> list[FileInfo]:
        out = []
        try:
            it = os.scandir(dir_path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        with it:
            for e in it:
                try:
                    if not e.is_file():
                        continue
                    st = e.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                out.append(FileInfo(e.path, st.st_size, st.st_mtime_ns // 1_000_000))
        out.sort(key=lambda f: f.path)
        return out

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
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
                    from .errors import StorageError

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

    def delete(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdirs(self, dir_path: str) -> None:
        os.makedirs(dir_path, exist_ok=True)


class PyArrowStorage(Storage):
    """Any ``pyarrow.fs`` filesystem (hdfs://, s3://, gs://, ...).

    Put-if-absent is emulated (exists check, then write), which is NOT atomic on object stores;
    commits through it are refused unless ``allow_unsafe_put_if_absent=True`` (a single-writer
    deployment may accept that).
    """

    def __init__(self, uri: str, *, allow_unsafe_put_if_absent: bool = False) -> None:
        try:
            self.filesystem, _ = pafs.FileSystem.from_uri(uri)
        except Exception as e:  # pyarrow raises several types here
            raise InvalidArgumentError(
                f"Cannot open storage for '{uri}'",
                str(e),
                "use a local path, file://, or a URI scheme pyarrow.fs supports (hdfs://, s3://, gs://)",
            ) from None
        self._scheme = urlparse(uri).scheme
        self._netloc = urlparse(uri).netloc
        self.allow_unsafe_put_if_absent = allow_unsafe_put_if_absent

    def fs_path(self, path: str) -> str:
        if "://" in path:
            _, p = pafs.FileSystem.from_uri(path)
            return p
        return path

    def _uri(self, fs_path: str) -> str:
        if self._scheme in ("s3", "gs", "gcs"):
            return f"{self._scheme}://{fs_path}"
        return f"{self._scheme}://{self._netloc}{fs_path if fs_path.startswith('/') else '/' + fs_path}"

    def list_dir(self, dir_path: str) -> list[FileInfo]:
        sel = pafs.FileSelector(self.fs_path(dir_path), allow_not_found=True, recursive=False)
        out = []
        for info in self.filesystem.get_file_info(sel):
            if info.type == pafs.FileType.File:
                mtime = int(info.mtime.timestamp() * 1000) if info.mtime else 0
                out.append(FileInfo(self._uri(info.path), info.size or 0, mtime))
        out.sort(key=lambda f: f.path)
        return out

    def read_bytes(self, path: str) -> bytes:
        try:
            with self.filesystem.open_input_stream(self.fs_path(path)) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                raise FileNotFoundError(path) from None
            raise StorageError(f"Cannot read '{path}'", str(e), "check the storage credentials and retry") from None

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        p = self.fs_path(path)
        if not overwrite:
            if not self.allow_unsafe_put_if_absent:
                raise InvalidArgumentError(
                    f"Cannot commit to '{path}' safely",
                    f"the '{self._scheme}' filesystem offers no atomic put-if-absent, so two writers could "
                    "overwrite each other's commit",
                    "commit from a single writer and set allow_unsafe_put_if_absent, or use a local/HDFS path",
                )
            if self.exists(path):
                raise FileExistsError(path)
        with self.filesystem.open_output_stream(p) as f:
            f.write(data)

    def delete(self, path: str) -> None:
        try:
            self.filesystem.delete_file(self.fs_path(path))
        except FileNotFoundError:
            pass

    def exists(self, path: str) -> bool:
        return self.filesystem.get_file_info(self.fs_path(path)).type != pafs.FileType.NotFound

    def mkdirs(self, dir_path: str) -> None:
        self.filesystem.create_dir(self.fs_path(dir_path), recursive=True)


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
    return normalize_table_uri(raw)


_LOCAL = LocalStorage()


def storage_for(table_uri: str, **options) -> Storage:
    uri = normalize_table_uri(table_uri)
    if "://" not in uri:
        return _LOCAL
    return PyArrowStorage(uri, **options)


def is_local(table_uri: str) -> bool:
    return "://" not in normalize_table_uri(table_uri)
