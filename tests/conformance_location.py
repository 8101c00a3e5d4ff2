"""Where the conformance corpus is (used in place, never copied into the repo).

``$DELTA_CONFORMANCE_DIR`` when set (the only place then: set it to an empty folder to run as a clone
without the corpus), else ``<repo>/../shared/conformance`` (a checkout beside the corpus). ``None``
when that folder holds no ``manifest.json``: the corpus tests then skip with :data:`HOW_TO_GET_IT`.

Tests reach the corpus only through the ``conformance_root`` / ``conformance_manifest`` fixtures
(tests/conftest.py), which skip without it; :func:`manifest_tables` is for parametrising at collection
time. tests/test_layering.py fails a test module that imports anything else from here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def candidates() -> list[Path]:
    env = os.environ.get("DELTA_CONFORMANCE_DIR")
    if env is not None:
        return [Path(env)] if env else []
    return [REPO.parent / "shared" / "conformance"]


def find_conformance_dir() -> Path | None:
    for c in candidates():
        if (c / "manifest.json").is_file():
            return c.resolve()
    return None


CONFORMANCE = find_conformance_dir()
HOW_TO_GET_IT = (
    "Delta conformance corpus not found: set DELTA_CONFORMANCE_DIR to a folder holding its manifest.json "
    "(or check it out as ../shared/conformance beside the repository)"
)


def manifest_tables() -> list[dict]:
    """The manifest's table entries, for parametrising tests at collection time ([] without the corpus).
    A test reads the tables through the ``conformance_root`` fixture, so it skips without the corpus."""
    if CONFORMANCE is None:
        return []
    return json.loads((CONFORMANCE / "manifest.json").read_text())["tables"]


# what a test module may import from here (the rest is conftest.py's)
FOR_TEST_MODULES = frozenset({"HOW_TO_GET_IT", "manifest_tables"})
