"""On one machine, in one run (issue 44 item 7): every row of issue 44's table, ours beside deltalake
(or Spark's own parquet scan) on the same files, with the ratio, each row's check and the machine's
load at the time.

``python -m bench.one_machine [--rows N] [--small-rows N] [--reps N] [--quick]`` (``make bench`` runs
it last; ``--no-one-machine`` skips it there). Each part is the bench that owns the case, imported
and called with its own checks (no case is written twice):

* the big upsert (``--rows`` target rows, a source of 0.4x that, default 2M into 5M): bench/big_merge.py's
  cases but its Spark floors (ours through Spark local[2] and without Spark, copy on write and
  deletion vectors) beside deltalake's upsert in a fresh process; checked: row count, distinct ids and the sum of
  ``n`` of every merged table, as deltalake reads it, equal to each other and to the generator's;
* the three 50k-row upserts into ``--small-rows`` rows (default 5M): bench/merge.py's cases "as the
  merge operator runs it" (the app's merge, a Parquet source file), through Spark (local[2]), over
  Spark Connect (a local[2] server on loopback, warm) and without Spark;
  checked: row count and the sums of ``id``, ``v``, ``n`` equal to deltalake's;
* OPTIMIZE of 600 small files in 3 partitions, in process and through Spark: bench/maintenance.py;
  checked: the rows after (count and a digest), as deltalake reads each table, equal to deltalake's;
* log replay of the 101k-file table (a delta-rs checkpoint and 100 commits): the log-plane bench's
  headline case (bench/cases.py ``open_ckpt_rs``), each engine in fresh processes: warm opens, and
  import + first open; checked: file count and version equal to each other and to the generator's;
* the filtered count of 5M rows (``v < 0.01``): bench/dataplane.py's scan beside Spark's own parquet
  scan of the same rows; checked: the counts equal (deltalake's too).

Medians of ``--reps`` (default 2; OPTIMIZE, a ~0.1 s case, at least :data:`SHORT_REPS`); ``--quick``: small tables, one repetition (a smoke run). Results:
``bench/results/one_machine.md`` (quick: ``bench/data/results-quick/``). Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
QUICK_RESULTS = HERE / "data" / "results-quick"


@dataclasses.dataclass
class Row:
    """One line of the table: seconds (None: not measured), what was checked."""

    work: str
    ours: float | None
    theirs: float | None
    theirs_name: str = "deltalake"
    check: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.ours / self.theirs if self.ours and self.theirs else None


def _log(msg: str) -> None:
    print(f"[one_machine {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _m(x: float) -> str:
    return f"{x / 1e6:g}M" if x >= 1e6 else f"{x / 1e3:g}k"


def big_upserts(rows: int, reps: int, timeout: float) -> list[Row]:
    from . import big_merge as bm

    n = rows * 2 // 5
    res = bm.run(rows, n, reps, [c for c in bm.CASES if not c.startswith("floor")], timeout)  # no Spark floors
    table = bm.summarize(res, None)
    theirs = next((r["seconds"] for r in table if r["case"] == "deltalake"), None)
    checks = res["checks"]
    check = "rows, distinct ids, sum of n equal" if checks["ok"] else "MISMATCH: " + "; ".join(checks["problems"])
    return [
        Row(
            f"{_m(n)}-row upsert into {_m(rows)} rows, {r['title']}",
            r["seconds"],
            theirs,
            check=check if r["status"] == "ok" else r["status"],
            note=f"strategy {r['strategy']}" if r.get("strategy") else "",
        )
        for r in table
        if r["case"] != "deltalake"
    ]


#: bench/merge.py's rows (its ``key``) and their title here
SMALL = {
    "operator_int": "int key, through Spark",
    "operator_string": "string key, through Spark",
    "operator_conditional": "conditional clauses, through Spark",
    "operator_int_connect": "int key, over Spark Connect",
    "operator_string_connect": "string key, over Spark Connect",
    "operator_conditional_connect": "conditional clauses, over Spark Connect",
    "operator_int_local": "int key, without Spark",
    "operator_string_local": "string key, without Spark",
    "operator_conditional_local": "conditional clauses, without Spark",
}


def small_upserts(rows: int, reps: int) -> list[Row]:
    from . import merge

    got = {r["key"]: r for r in merge.run(rows, reps, ["merge operator"], []) if r.get("key")}
    out = []
    for key, title in SMALL.items():
        r = got.get(key)
        if r is None:
            out.append(Row(f"small upsert, {title}", None, None, check="not run"))
            continue
        out.append(
            Row(
                f"{_m(rows // 100)}-row upsert into {_m(rows)} rows, {title} (as DeltaMergeOperator runs it)",
                r["ours_s"],
                r["deltalake_s"],
                check="rows and sums of id, v, n equal",
                note=f"source read: {r['source_read'] or '-'}; files read {r['files_read']}/{r['files_total']}, "
                f"rewritten {r['files_rewritten']}",
            )
        )
    return out


#: the timed runs per engine of a sub-second case (OPTIMIZE), whatever ``--reps`` says (at least)
SHORT_REPS = 7


def optimize(quick: bool, reps: int) -> list[Row]:
    from . import maintenance

    # a compaction takes ~0.1 s: the median of two such runs is mostly the machine's noise
    reps = reps if quick else max(reps, SHORT_REPS)
    rows = [r for r in maintenance.run(quick, reps, optimize_only=True) if "in 3 partitions" in r["case"]]
    return [
        Row(r["case"].replace("optimize", "OPTIMIZE of"), r["ours_s"], r["deltalake_s"], check=r["note"]) for r in rows
    ]


def replay(quick: bool, timeout: int) -> list[Row]:
    from . import cases as C
    from . import generate as g
    from .__main__ import fresh_process_row, measure

    sizes = (C.Sizes.quick() if quick else C.Sizes()).with_env()
    case = next(c for c in C.build(sizes) if c.id == "open_ckpt_rs")
    path = g.ensure(case.table, log=_log)
    row = measure(case, path, timeout)
    check = row.check or "files and version equal (both engines, the generator)"
    where = case.title.split(", ")[-1]
    out = [
        Row(
            f"log replay, {where}: warm open in a fresh process",
            row.ours.median / 1e3 if row.ours.ok else None,
            row.theirs.median / 1e3 if row.theirs.ok else None,
            check=check,
        )
    ]
    if row.ours.ok and row.theirs.ok:
        fresh = fresh_process_row(case, row)
        out.append(
            Row(
                f"log replay, {where}: import + first open (a fresh process)",
                fresh.ours.median / 1e3,
                fresh.theirs.median / 1e3,
                check=check,
            )
        )
    return out


def filtered_count(rows: int, reps: int) -> list[Row]:
    from . import dataplane

    got = {r["case"]: r for r in dataplane.run(rows, reps, scans_only=True)}
    r = got["filtered scan, v < 0.01 (~1%)"]
    return [
        Row(
            f"filtered count, {_m(rows)} rows, v < 0.01 (vs Spark's own parquet scan)",
            r["ours_s"],
            r["spark_native_s"],
            theirs_name="Spark's parquet",
            check=f"counts equal ({r['note']}; deltalake's too)",
            note=f"deltalake {r['deltalake_s']:.2f} s" if r.get("deltalake_s") else "",
        )
    ]


def markdown(rows: list[Row], info: dict) -> str:
    md = [
        "# One machine, one run (`python -m bench.one_machine`, issue 44 item 7)",
        "",
        *(f"- {k}: {v}" for k, v in info.items()),
        "",
        "| work | ours | deltalake (or Spark's own) | ratio | checked | note |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ours = "-" if r.ours is None else f"{r.ours:.2f} s"
        theirs = (
            "-"
            if r.theirs is None
            else f"{r.theirs:.2f} s" + ("" if r.theirs_name == "deltalake" else f" ({r.theirs_name})")
        )
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        md.append(f"| {r.work} | {ours} | {theirs} | {ratio} | {r.check} | {r.note} |")
    return "\n".join(md) + "\n"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.one_machine", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="the big upsert's target rows (default 5M; source 0.4x)")
    p.add_argument("--small-rows", type=int, default=None, help="the small upserts' and the scan's table (default 5M)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (median; default 2, quick 1)")
    p.add_argument("--quick", action="store_true", help="small tables, one repetition (smoke run)")
    p.add_argument("--timeout", type=int, default=900, help="per child process, seconds")
    a = p.parse_args(argv)
    rows = a.rows or (500_000 if a.quick else 5_000_000)
    small = a.small_rows or (200_000 if a.quick else 5_000_000)
    reps = a.reps or (1 if a.quick else 2)
    started, load0 = time.time(), _uptime()
    parts = [
        ("big upserts", lambda: big_upserts(rows, reps, a.timeout)),
        ("small upserts", lambda: small_upserts(small, reps)),
        ("OPTIMIZE", lambda: optimize(a.quick, reps)),
        ("log replay", lambda: replay(a.quick, a.timeout)),
        ("filtered count", lambda: filtered_count(small, reps)),
    ]
    table: list[Row] = []
    failed = False
    for name, part in parts:
        _log(f"{name} ...")
        t0 = time.time()
        try:
            table += part()
        except Exception as e:  # a failed part is a row (a failed check among them), not a lost table
            failed = True
            table.append(Row(name, None, None, check=f"FAILED: {type(e).__name__}: {' '.join(str(e).split())[:300]}"))
        _log(f"{name}: {time.time() - t0:.0f} s")
    import deltalake
    import pyspark

    info = {
        "machine": f"{os.cpu_count()} cores; ours: Spark local[2] (pyspark {pyspark.__version__}), a local[2] Spark Connect server, or in process; "
        f"deltalake {deltalake.__version__}",
        "load (`uptime`) at the start": load0,
        "load (`uptime`) at the end": _uptime(),
        "method": f"median of {reps} timed runs per engine (OPTIMIZE: {reps if a.quick else max(reps, SHORT_REPS)}), "
        "engines alternating, each on a fresh copy of the same files (see each bench's docstring)",
        "run time": f"{time.time() - started:.0f} s",
    }
    text = markdown(table, info)
    out = QUICK_RESULTS if a.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    (out / "one_machine.md").write_text(text)
    print(text)
    print(f"wrote {out / 'one_machine.md'}")
    return 1 if failed or any(r.check.startswith(("MISMATCH", "FAILED")) for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())
