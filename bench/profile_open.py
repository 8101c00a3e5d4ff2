"""Profile our snapshot open on a bench table: ``python -m bench.profile_open [options]``.

Runs ``load_snapshot`` + ``files.num_rows`` under cProfile on the table of one bench case (built
or reused exactly as ``make bench`` does), either the first call in this fresh process
(``--cold``: includes lazy imports) or after ``--warm`` untimed calls, and prints the functions
with the most own time and the most cumulative time, with their share of the total.

Options: ``--case ID`` (default ``open_ckpt_rs``, the headline), ``--quick`` (small sizes),
``--top N``, ``--cold``, ``--warm N`` (default 2), ``--save FILE`` (pstats dump).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from . import cases as C
from . import generate as g

REPO_ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_open")
    ap.add_argument("--case", default="open_ckpt_rs")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--save", default=None)
    a = ap.parse_args(argv)
    sizes = (C.Sizes.quick() if a.quick else C.Sizes()).with_env()
    case = next(c for c in C.build(sizes) if c.id == a.case)
    path = str(g.ensure(case.table))
    version = case.args.get("version")

    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for

    def once() -> int:
        return load_snapshot(storage_for(path), path, version=version).files.num_rows

    if not a.cold:
        for _ in range(a.warm):
            once()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    n = once()
    prof.disable()
    wall = (time.perf_counter() - t) * 1000
    print(f"{case.title}: {n} files, {wall:.0f} ms under cProfile ({'cold' if a.cold else 'warm'})")
    if a.save:
        prof.dump_stats(a.save)
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    rows = []
    for (fn, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, nc, f"{fn.split('site-packages/')[-1].split(str(REPO_ROOT) + '/')[-1]}:{line}({name})"))
    for title, key in (("own time", 0), ("cumulative", 1)):
        print(f"\n-- top {a.top} by {title} (total {total * 1000:.0f} ms) --")
        print(f"{'own ms':>8} {'own %':>6} {'cum ms':>8} {'cum %':>6} {'calls':>8}  function")
        for tt, ct, nc, name in sorted(rows, key=lambda r: -r[key])[: a.top]:
            print(f"{tt * 1000:8.1f} {100 * tt / total:6.1f} {ct * 1000:8.1f} {100 * ct / total:6.1f} {nc:8d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
