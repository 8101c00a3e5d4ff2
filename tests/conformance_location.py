"""Where the conformance corpus is (used in place, never copied into the repo).

Order: ``$DELTA_CONFORMANCE_DIR``, then ``<repo>/../shared/conformance`` (a checkout beside the corpus).
The first folder holding a ``manifest.json`` wins; ``None`` when there is none: the corpus tests then
skip with :data:`HOW_TO_GET_IT`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def candidates() -> list[Path]:
    env = os.environ.get("DELTA_CONFORMANCE_DIR")
    out = [Path(env)] if env else []
    out.append(REPO.parent / "shared" / "conformance")
    return out


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
