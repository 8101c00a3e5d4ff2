"""The apps package as a zip: its files read once, written with deterministic bytes (sorted names,
fixed timestamps) and renamed into place, so two processes building it write identical files.

Standard library only: the provider's bundle (spark-submit, Spark Connect) and the data source (a
Connect server's Python workers) both zip the package here.
"""

from __future__ import annotations

import os
import uuid
import zipfile

__all__ = ["package_contents", "write_zip"]

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def package_contents(pkg_dir: str, package: str) -> list[tuple[str, bytes]]:
    """(archive name, bytes) of every .py file under ``pkg_dir``, sorted; archive names start with the
    import name ``package`` (the source folder may be named otherwise, as in a source checkout)."""
    files = []
    for folder, dirs, names in os.walk(pkg_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                arcname = os.path.relpath(path, pkg_dir).replace(os.sep, "/")
                files.append((package + "/" + arcname, path))
    out = []
    for arcname, path in sorted(files):
        with open(path, "rb") as f:
            out.append((arcname, f.read()))
    return out


def write_zip(path: str, contents: list[tuple[str, bytes]]) -> None:
    """``contents`` as a deflated zip at ``path``, written to a temporary name and renamed into place."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in contents:
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    os.replace(tmp, path)
