"""The Delta view's data on a table of 100k files (issue 42: under 2 s): ``python -m bench.table_view``.

The table is the log bench's kind ``ckptrs`` (:mod:`bench.generate`: only ``_delta_log/``, no data
file): 100 commits of 1000 adds, a delta-rs checkpoint, then 60 commits of 10 adds (every 10th also
rewrites 10 checkpointed files), 100,600 live files in 100 partitions. Timed: ``table_view`` (the
snapshot, the file histogram and small-file share, the deletion-vector share, the newest 50 commits
with their schema changes and sizes, the advice), the first call in this process (``cold``: imports
and the first replay) and the median of ``--reps`` more. Writes ``bench/results/table_view.md``.

Options: ``--quick`` (10k files, results under ``bench/data/results-quick/``), ``--reps N`` (5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from . import generate as g

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_S = 2.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.table_view")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    base_adds = 100 if a.quick else 1000
    s = g.spec("ckptrs", base_commits=100, base_adds=base_adds, tail_commits=60, tail_adds=10)
    root = str(g.ensure(s))

    t0 = time.perf_counter()
    from airflow_delta_provider_apps.engine.table_view import table_view

    view = table_view(root)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        view = table_view(root)
        warm.append(time.perf_counter() - t0)
    files = view["files"]["count"]
    assert files == g.expected_files(s), (files, g.expected_files(s))
    median = statistics.median(warm)
    load = os.getloadavg()[0]
    lines = [
        "# Delta view data bench (`python -m bench.table_view`)",
        "",
        f"`table_view` on `{s.key}`: {files:,} live files in {g.N_PARTITIONS} partitions, version "
        f"{view['version']}, a delta-rs checkpoint {view['maintenance']['commits_since_checkpoint']} commits "
        f"back; history of the newest {len(view['history'])} commits. Target under {TARGET_S:g} s. "
        f"Load average at the end {load:.1f}.",
        "",
        "| case | seconds |",
        "|---|---:|",
        f"| first call in the process (imports, replay) | {cold:.3f} |",
        f"| median of {a.reps} more | {median:.3f} |",
        f"| slowest of them | {max(warm):.3f} |",
        "",
        f"Advice given: {'; '.join(x['message'] for x in view['advice']) or 'none'}.",
        "",
    ]
    out_dir = g.DATA_DIR / "results-quick" if a.quick else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "table_view.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
