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
    status: str  # ok | unavailable | error
    samples_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    cold_samples_ms: list[float] = field(default_factory=list)
    import_samples_ms: list[float] = field(default_factory=list)
    result: dict | None = None
    reason: str = ""

    @classmethod
    def merge(cls, parts: list[EngineResult]) -> EngineResult:
        """Pool the samples of several worker processes (rounds); any failure wins."""
        bad = [p for p in parts if p.status != "ok"]
        if bad:
            return bad[0]
        out = cls("ok")
        for p in parts:
            out.samples_ms += p.samples_ms
            out.cpu_ms += p.cpu_ms
            out.cold_samples_ms += p.cold_samples_ms
            out.import_samples_ms += p.import_samples_ms
            out.result = dict(out.result or {}, **(p.result or {}))
        return out

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples_ms)

    @property
    def median(self) -> float | None:
        return median(self.samples_ms) if self.ok else None

    @property
    def p90(self) -> float | None:
        return p90(self.samples_ms) if self.ok else None

    @property
    def best(self) -> float | None:
        return min(self.samples_ms) if self.ok else None

    @property
    def cpu_median(self) -> float | None:
        return median(self.cpu_ms) if self.ok and self.cpu_ms else None

    @property
    def cold_ms(self) -> float | None:
        return median(self.cold_samples_ms) if self.ok and self.cold_samples_ms else None

    @property
    def import_ms(self) -> float | None:
        return median(self.import_samples_ms) if self.import_samples_ms else None


@dataclass
class Row:
    case_id: str
    title: str
    ours: EngineResult
    theirs: EngineResult
    check: str = ""  # "" or a description of a disagreement
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
        if self.ratio is None:
            return "-"
        return f"{self.ratio:.2f}x" if self.ratio >= 0.01 else f"{self.ratio:.3f}x"


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
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=False,
        ).stdout.strip()
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
        if hasattr(os, "sched_getaffinity")
        else "?",
        "cpu": cpu,
        "memory": mem_s,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "pyarrow": pyarrow.__version__,
        "deltalake": dl,
        "repo commit": rev,
    }


def text_table(rows: list[Row]) -> str:
    head = ["case", "ours (ms)", "p90", "cold", "deltalake (ms)", "p90", "cold", "ratio ours/deltalake"]
    body, notes = [], []
    for r in rows:
        mark = ""
        if r.check:
            notes.append(r.check)
            mark = f"  [!{len(notes)}]"
        title = ("* " if r.headline else "") + r.title + mark
        body.append(
            [
                title,
                r.cell(r.ours),
                _fmt(r.ours.p90),
                _fmt(r.ours.cold_ms),
                r.cell(r.theirs),
                _fmt(r.theirs.p90),
                _fmt(r.theirs.cold_ms),
                r.ratio_cell(),
            ]
        )
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("-" * len(lines[0]))
    for b in body:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths))))
    lines.append(
        "* = headline case; ms = median of warm calls; cold = first call in a fresh process (imports excluded)"
    )
    lines += [f"[!{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines)


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        cols = ["median_ms", "p90_ms", "min_ms", "cpu_median_ms", "cold_ms", "import_ms", "samples", "status"]
        w.writerow(
            ["case_id", "case"]
            + [f"ours_{c}" for c in cols]
            + [f"deltalake_{c}" for c in cols]
            + ["ratio_ours_over_deltalake", "check"]
        )

        def part(x: EngineResult) -> list:
            return [
                _fmt(x.median),
                _fmt(x.p90),
                _fmt(x.best),
                _fmt(x.cpu_median),
                _fmt(x.cold_ms),
                _fmt(x.import_ms),
                len(x.samples_ms),
                x.status,
            ]

        for r in rows:
            w.writerow(
                [r.case_id, r.title]
                + part(r.ours)
                + part(r.theirs)
                + ["" if r.ratio is None else f"{r.ratio:.3f}", r.check]
            )


def write_md(
    rows: list[Row],
    path: Path,
    *,
    sizes: dict,
    notes: list[str],
    runtime_s: float,
    info: dict[str, str],
    extra: str = "",
) -> None:
    out = [
        "# Log replay and small-commit latency: ours vs deltalake (delta-rs)",
        "",
        "Generated by `make bench` (`.venv/bin/python -m bench`). Times are milliseconds of "
        "wall clock: median and p90 of the kept (warm) samples, pooled over the rounds; *cpu* "
        "= median process CPU time of the same samples (all threads; insensitive to other "
        "load on the machine, but counts delta-rs's worker threads too); *cold* = median over "
        "the rounds of the first call in a fresh process (imports excluded, lazy imports "
        "included). Ratio = ours / deltalake median wall time: above 1 we are slower.",
        "",
        "| case | ours (ms) | p90 | cpu | cold | deltalake (ms) | p90 | cpu | cold | "
        "ratio ours/deltalake | cpu ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    problems = []
    for r in rows:
        mark = ""
        if r.check:
            problems.append(r.check)
            mark = f" [!{len(problems)}]"
        title = (f"**{r.title}**" if r.headline else r.title) + mark
        ratio = f"**{r.ratio_cell()}**" if r.headline else r.ratio_cell()
        cpu_ratio = (
            f"{r.ours.cpu_median / r.theirs.cpu_median:.2f}x" if r.ours.cpu_median and r.theirs.cpu_median else "-"
        )
        o, t = r.ours, r.theirs
        out.append(
            f"| {title} | {r.cell(o)} | {_fmt(o.p90)} | {_fmt(o.cpu_median)} | "
            f"{_fmt(o.cold_ms)} | {r.cell(t)} | {_fmt(t.p90)} | {_fmt(t.cpu_median)} | "
            f"{_fmt(t.cold_ms)} | {ratio} | {cpu_ratio} |"
        )
    if problems:
        out += ["", "Correctness problems found (the time of a wrong answer means little):", ""]
        out += [f"- [!{i}] {n}" for i, n in enumerate(problems, 1)]
    if extra:
        out += ["", extra]
    unavailable = [
        (r.title, e, x.reason) for r in rows for e, x in (("ours", r.ours), ("deltalake", r.theirs)) if x.status != "ok"
    ]
    if unavailable:
        out += ["", "Not measured:", ""]
        out += [f"- {t} / {e}: {why}" for t, e, why in unavailable]
    out += ["", "## What each case includes", ""] + [f"- {n}" for n in notes]
    imports = [
        (e, m) for r in rows for e, x in (("ours", r.ours), ("deltalake", r.theirs)) for m in x.import_samples_ms
    ]
    if imports:
        for e in ("ours", "deltalake"):
            ms = [m for ee, m in imports if ee == e]
            if ms:
                out.append(
                    f"- import time per fresh process ({e}): median {median(ms):.0f} ms "
                    "(not included in any number above)"
                )
    out += ["", "## Sizes", "", "| parameter | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in sizes.items()]
    out += ["", "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in info.items()]
    out += ["", f"Total bench wall time: {runtime_s:.0f} s.", ""]
    path.write_text("\n".join(out))


def write_png(rows: list[Row], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.ours.ok or r.theirs.ok]
    labels = [(r.title if len(r.title) <= 90 else r.title[:87] + "...") + (" [!]" if r.check else "") for r in rows]
    n = len(rows)
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(17, 0.55 * n + 2.2), gridspec_kw={"width_ratios": [3, 2]}, sharey=True
    )
    ys = list(range(n))
    h = 0.38
    ours = [r.ours.median or 0 for r in rows]
    theirs = [r.theirs.median or 0 for r in rows]
    ax1.barh([y - h / 2 for y in ys], ours, h, label="ours (pure Python + pyarrow)", color="#1f77b4")
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
            ax2.text(x, y, f" {x:.2f}x" if x >= 0.01 else f" {x:.3f}x", va="center", fontsize=8)
    ax2.grid(axis="x", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
