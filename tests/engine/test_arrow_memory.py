"""The engine's Arrow pool: jemalloc in place of pyarrow's default mimalloc, unless the user chose one.

Each case runs in a fresh interpreter: the default pool is a per-process choice."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

CODE = """
import pyarrow as pa
{before}
import airflow_delta_provider_apps.engine.log.snapshot
print(pa.default_memory_pool().backend_name)
"""


def _backend(before: str = "", env: dict | None = None, code: str = CODE) -> str:
    """The default pool's backend a fresh interpreter reports after ``code``."""
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run(
        [sys.executable, "-c", code.format(before=before)],
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()[-1]


def _has(backend: str) -> bool:
    try:
        getattr(pa, f"{backend}_memory_pool")()
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not (_has("jemalloc") and _has("mimalloc")), reason="a pyarrow build without jemalloc or mimalloc")
def test_the_log_switches_mimalloc_to_jemalloc_and_leaves_a_chosen_pool():
    default = _backend(code="import pyarrow as pa; print(pa.default_memory_pool().backend_name)")
    assert _backend() == ("jemalloc" if default == "mimalloc" else default)
    # the user's choice wins: by the environment, or set in the process before the engine loads
    assert _backend(env={"ARROW_DEFAULT_MEMORY_POOL": "system"}) == "system"
    assert _backend(env={"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc"
    assert _backend("pa.set_memory_pool(pa.system_memory_pool())") == "system"
