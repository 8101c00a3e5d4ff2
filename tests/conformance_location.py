"""Where the conformance corpus is (used in place, never copied into the repo).

Order: ``$DELTA_CONFORMANCE_DIR``; ``<repo>/../shared/conformance`` (the workspace layout); then
``/work/shared/conformance`` (a clone made elsewhere on the same machine). The first folder holding a
``manifest.json`` wins; ``None`` when there is none (the corpus tests then skip, saying why).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def candidates() -> list[Path]:
    env = os.environ.get("DELTA_CONFORMANCE_DIR")
    out = [Path(env)] if env else []
    out += [REPO.parent / "shared" / "conformance", Path("/work/shared/conformance")]
    return out


def find_conformance_dir() -> Path | None:
    for c in candidates():
        if (c / "manifest.json").is_file():
            return c.resolve()
    return None


CONFORMANCE = find_conformance_dir()
