"""The Arrow memory pool the engine allocates from: jemalloc where pyarrow would use mimalloc.

pyarrow's default pool on Linux is mimalloc, whose arenas are backed by transparent huge pages:
on a virtual machine each first touch of a 2 MiB page is a costly kernel fault, and reading the
checkpoint of a table of 100k files (about 60 MB of Arrow memory) spent 0.05-0.5 s of system time
in those faults, a different amount each run, against 0.02-0.07 s with jemalloc (bundled in the
same wheels; an OPTIMIZE of 600 small files and a 50k-row MERGE into 5M rows took the same time
with either). The engine switches the process's default pool to jemalloc once, before its first
large allocation, unless the user chose a pool: ``ARROW_DEFAULT_MEMORY_POOL``
(read by pyarrow itself) always wins, and so does a pool set with ``pyarrow.set_memory_pool`` to
anything but mimalloc. Buffers allocated before the switch stay in their pool and are freed there.
"""

from __future__ import annotations

import os

import pyarrow as pa

__all__ = ["use_engine_pool"]


def use_engine_pool() -> None:
    """Make jemalloc the process's default Arrow pool when pyarrow's default (mimalloc) is in use
    and the user set none; a build without jemalloc (Windows) keeps its pool."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or pa.default_memory_pool().backend_name != "mimalloc":
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return
    pa.set_memory_pool(pool)
