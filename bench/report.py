"""Results: summary statistics, the stdout table, ``latest.md`` / ``latest.csv`` and the PNG chart.

Statistics: median and p90 (nearest rank) of the kept samples (warm-up and the cold first call
excluded); ``cold`` is the first call in a fresh process. Ratio = ours median / deltalake median
(> 1 means we are slower).
"""

from __future__ import annotations

import csv
import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


@dataclass
class EngineResult:
    status: str                      # ok | unavailable | error | skipped
    samples_ms: list[float] = field(default_factory=list)
    cold_ms: float | None = None
    import_ms: float | None = None
    result: dict | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples_ms)

    @property
    def median(self) -> float | None:
        return median(self.samples_ms) if self.ok else None

    @property
    def p90(self) -> float | None:
        return p90(self.samples_ms) if self.ok else None


@dataclass
class Row:
    case_id: str
    title: str
    ours: EngineResult
    theirs: EngineResult
    check: str = ""                  # "" or a description of a disagreement
    headline: bool = False
    reps: int = 0

    @property
    def ratio(self) -> float | None:
        if self.ours.ok and self.theirs.ok and self.theirs.median:
            return self.ours.median / self.theirs.median
        return None

    def cell(self, r: EngineResult) -> str:
        if r.ok:
            return f"{r.median:.1f}"
        if r.status == "unavailable":
            return "not available"
        return r.status

    def ratio_cell(self) -> str:
        return f"{self.ratio:.2f}x" if self.ratio is not None else "-"


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def machine_info() -> dict[str, str]:
    import pyarrow

    try:
        import deltalake
        dl = deltalake.__version__
    except Exception:  # pragma: no cover
        dl = "missing"
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        rev = ""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem_s = f"{mem:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        mem_s = "?"
    return {
        "cores (os.cpu_count)": str(os.cpu_count()),
        "usable cores (sched_getaffinity)": str(len(os.sched_getaffinity(0)))
        if hasattr(os, "sched_getaffinity") else "?",
        "cpu": cpu,
        "memory": mem_s,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "pyarrow": pyarrow.__version__,
        "deltalake": dl,
        "repo commit": rev,
    }


def text_table(rows: list[Row]) -> str:
    head = ["case", "ours (ms)", "ours p90", "deltalake (ms)", "dl p90", "ratio ours/deltalake"]
    body = []
    for r in rows:
        title = ("* " if r.headline else "") + r.title + (f"  [!{r.check}]" if r.check else "")
        body.append([title, r.cell(r.ours), _fmt(r.ours.p90), r.cell(r.theirs),
                     _fmt(r.theirs.p90), r.ratio_cell()])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in
                       enumerate(zip(head, widths)))]
    lines.append("-" * len(lines[0]))
    for b in body:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                               enumerate(zip(b, widths))))
    return "\n".join(lines)


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case_id", "case", "ours_median_ms", "ours_p90_ms", "ours_cold_ms",
                    "ours_status", "deltalake_median_ms", "deltalake_p90_ms", "deltalake_cold_ms",
                    "deltalake_status", "ratio_ours_over_deltalake", "reps", "check"])
        for r in rows:
            w.writerow([r.case_id, r.title, _fmt(r.ours.median), _fmt(r.ours.p90),
                        _fmt(r.ours.cold_ms), r.ours.status, _fmt(r.theirs.median),
                        _fmt(r.theirs.p90), _fmt(r.theirs.cold_ms), r.theirs.status,
                        "" if r.ratio is None else f"{r.ratio:.3f}", r.reps, r.check])


def write_md(rows: list[Row], path: Path, *, sizes: dict, notes: list[str], runtime_s: float,
             info: dict[str, str], extra: str = "") -> None:
    out = ["# Log replay and small-commit latency: ours vs deltalake (delta-rs)", "",
           "Generated by `make bench` (`.venv/bin/python -m bench`). Times are milliseconds, "
           "median (p90) of the kept samples; *cold* = first call in a fresh process "
           "(imports excluded). Ratio = ours / deltalake median: above 1 we are slower.", "",
           "| case | ours (ms) | ours p90 | ours cold | deltalake (ms) | deltalake p90 | "
           "deltalake cold | ratio ours/deltalake |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        title = (f"**{r.title}**" if r.headline else r.title) + (f" (!{r.check})" if r.check
                                                                   else "")
        ratio = f"**{r.ratio_cell()}**" if r.headline else r.ratio_cell()
        out.append(f"| {title} | {r.cell(r.ours)} | {_fmt(r.ours.p90)} | {_fmt(r.ours.cold_ms)} "
                   f"| {r.cell(r.theirs)} | {_fmt(r.theirs.p90)} | {_fmt(r.theirs.cold_ms)} | "
                   f"{ratio} |")
    unavailable = [(r.title, e, x.reason) for r in rows for e, x in
                   (("ours", r.ours), ("deltalake", r.theirs)) if x.status != "ok"]
    if unavailable:
        out += ["", "Not measured:", ""]
        out += [f"- {t} / {e}: {why}" for t, e, why in unavailable]
    out += ["", "## What each case includes", ""] + [f"- {n}" for n in notes]
    imports = [(e, x.import_ms) for r in rows for e, x in (("ours", r.ours),
                                                           ("deltalake", r.theirs))
               if x.import_ms is not None]
    if imports:
        for e in ("ours", "deltalake"):
            ms = [m for ee, m in imports if ee == e]
            if ms:
                out.append(f"- import time per fresh process ({e}): median {median(ms):.0f} ms "
                           "(not included in any number above)")
    out += ["", "## Sizes", "", "| parameter | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in sizes.items()]
    out += ["", "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in info.items()]
    out += ["", f"Total bench wall time: {runtime_s:.0f} s.", ""]
    if extra:
        out += [extra, ""]
    path.write_text("\n".join(out))


def write_png(rows: list[Row], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.ours.ok or r.theirs.ok]
    labels = [r.title if len(r.title) <= 70 else r.title[:67] + "..." for r in rows]
    n = len(rows)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 0.55 * n + 2.2),
                                   gridspec_kw={"width_ratios": [3, 2]}, sharey=True)
    ys = list(range(n))
    h = 0.38
    ours = [r.ours.median or 0 for r in rows]
    theirs = [r.theirs.median or 0 for r in rows]
    ax1.barh([y - h / 2 for y in ys], ours, h, label="ours (pure Python + pyarrow)",
             color="#1f77b4")
    ax1.barh([y + h / 2 for y in ys], theirs, h, label="deltalake (delta-rs)", color="#ff7f0e")
    ax1.set_xscale("log")
    ax1.set_xlabel("median latency, ms (log scale)")
    ax1.set_yticks(ys)
    ax1.set_yticklabels(labels, fontsize=8)
    ax1.invert_yaxis()
    ax1.legend(loc="lower right", fontsize=8)
    ax1.grid(axis="x", which="both", alpha=0.3)
    ratios = [r.ratio or 0 for r in rows]
    colors = ["#2ca02c" if 0 < x <= 1.5 else "#d62728" for x in ratios]
    ax2.barh(ys, ratios, 0.6, color=colors)
    ax2.set_xscale("log")
    ax2.axvline(1.0, color="black", lw=1)
    ax2.axvline(1.5, color="grey", lw=1, ls="--")
    ax2.set_xlabel("ratio ours / deltalake (log; dashed = 1.5x)")
    for y, x in zip(ys, ratios):
        if x:
            ax2.text(x, y, f" {x:.2f}x", va="center", fontsize=8)
    ax2.grid(axis="x", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
