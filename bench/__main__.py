"""``make bench`` = ``.venv/bin/python -m bench``: log replay and small-commit latency, ours vs
deltalake (delta-rs), on the same generated tables.

Algorithm:

1. Build (or reuse from ``bench/data``) every table the selected cases need (bench/generate.py).
2. For each case, ``rounds`` rounds; in each round each engine gets ONE fresh worker process
   (``python -m bench.worker``), the engines alternating which goes first so both see the same
   background load: imports are timed apart, the first call is reported as *cold*, then
   ``warmup`` calls are dropped and ``reps`` calls are kept. Samples are pooled over the rounds
   (median, p90, CPU median; cold = median of the rounds' first calls). Each engine runs in its
   own processes so the two never share caches, allocator state or thread pools. Mutating cases
   (commits) run on a private scratch copy of the table for each engine and round.
3. Both engines' answers (file count, version) are compared with each other and with what the
   generator wrote; a disagreement is flagged in the row (``[!...]``), not hidden.
4. Print the table; write ``latest.md``, ``latest.csv`` and ``latest.png`` to the output dir
   (``bench/results`` for a full run; ``bench/data/results-quick`` for ``--quick``).
5. Then the data-plane benches (bench/dataplane.py, merge.py, big_merge.py, maintenance.py,
   deletion_vectors.py, object_store.py;
   ``--no-dataplane`` skips them, ``--no-big-merge`` only big_merge.py,
   ``--no-cluster-merge`` only cluster_merge.py) and the transport bench (bench/transports.py: spark-submit vs
   Spark Connect per DAG task and per MERGE, large sources with peak memory; ``--no-transports``
   skips it, ``--transports-only`` runs it alone).
6. Then the Spark Connect soak (bench/connect_soak.py, in a child process: one server under 1,000
   tasks with shared sessions, its processes and RSS beside per-task times; 20 tasks with a
   session per task for contrast; ``--no-connect-soak`` skips it).
7. Then, each in a child process, the data source (bench/datasource.py: ``spark.read/write.format("delta")``
   beside Spark's own parquet scan and our append; ``--no-datasource`` skips it) and the UI view's data
   on a table of 100k files (bench/table_view.py; ``--no-table-view`` skips it).
8. Last, in a child process, issue 44's table in one run on the same files with the machine's load
   (bench/one_machine.py: the big and small upserts, OPTIMIZE, log replay, the filtered count, each
   beside deltalake or Spark's own scan; ``--no-one-machine`` skips it).

Usage: ``python -m bench [--quick] [--only SUBSTR ...] [--reps N] [--files N] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import cases as C
from . import generate as g
from . import report as R
from .engines import MUTATING

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

NOTES = [
    "**open**: ours = `load_snapshot(storage_for(p), p)` + `snap.files.num_rows` (an arrow "
    "table); deltalake = `DeltaTable(p)` + `dt.get_add_actions().num_rows` (arrow too; "
    "`len(dt.file_uris())` would add ~90-150 ms at 101k files for building Python strings, so "
    "it is not used). delta-rs materialises the files with parsed stats while loading "
    "(`get_add_actions(flatten=True)`, stats as columns, adds only ~20 ms afterwards); we keep "
    "the stats JSON strings as they are in the log. Samples are warm calls in a fresh "
    "process per engine and round (the cold column is the first call).",
    "**time travel**: the same with `version=v` (ours `load_snapshot(..., version=v)`, deltalake "
    "`DeltaTable(p, version=v)`).",
    "**fresh process, import + first open**: derived from the headline case: per round, the "
    "engine's import time plus its first call in that fresh process (one sample per round). "
    "This is what a one-shot task (one `python -m airflow_delta_provider_apps ...` per Airflow task) pays. Ours "
    "includes pyarrow's lazy `import pandas` (~0.25 s here; pyarrow imports pandas on the first "
    "`pa.array()`/`to_numpy()` call when it is installed); deltalake imports neither.",
    "**latest_version**: ours = `listing.latest_version(storage, p)` (directory listing only); "
    "deltalake = `DeltaTable(p).version()`: deltalake 1.6.6 has no cheaper public way "
    "(`without_files=True` is deprecated and ignored; loading always materialises the files).",
    "**small commit, preloaded snapshot**: the snapshot / `DeltaTable` is loaded outside the timer "
    "before every sample. *log only*: ours commits one `AddFile` through "
    "`OptimisticTransaction` (no data file) while deltalake's `write_deltalake(dt, 100 rows, "
    "mode='append')` also writes the parquet file: not like for like, shown for the pure log "
    "cost. *write 1 parquet*: ours writes a 100-row parquet file with pyarrow, computes its stats "
    "JSON, commits; deltalake's same `write_deltalake` call: like for like.",
    "**small commit incl. open**: opening the table is inside the timer (ours `load_snapshot` + "
    "write + commit; deltalake `write_deltalake(path, ...)`, which opens the table itself).",
    "Every bench table sets `delta.checkpointInterval=1000000` and deltalake's post-commit hook "
    "is told not to checkpoint/clean up, so no sample includes a checkpoint write.",
    "Tables: realistic logs (commitInfo, protocol (1,2), metaData partitioned by `dt`, adds with "
    "partitionValues and stats JSON strings, ~500 B per add line), fake data-file paths (only "
    "the log is read). Checkpoints: delta-rs `DeltaTable.create_checkpoint()` (third party) and, "
    "for the *(ours)* row, our `log/checkpoint.py` writer.",
    "Both engines' answers (file count, version, file set, partition values) are checked against "
    "each other and against the generator; after the commit cases both engines must read each "
    "engine's table at the expected version and file count, and every parquet file written must "
    "hold the numRecords its stats claim. A row marked [!n] failed a check.",
]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_worker(job: dict, timeout: int) -> R.EngineResult:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run(
            [sys.executable, "-m", "bench.worker", json.dumps(job)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return R.EngineResult("error", reason=f"timed out after {timeout}s")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return R.EngineResult("error", reason=f"worker exit {p.returncode}: {' | '.join(tail)}")
    out = json.loads(lines[-1])
    if out["status"] == "ok":
        return R.EngineResult(
            "ok", out["samples_ms"], out["cpu_ms"], [out["cold_ms"]], [out["import_ms"]], out["result"]
        )
    reason = out.get("reason") or out.get("error") or ""
    if out["status"] == "error" and out.get("traceback"):
        _log(out["traceback"])
    return R.EngineResult(out["status"], reason=reason)


def check(case: C.Case, ours: R.EngineResult, theirs: R.EngineResult) -> str:
    problems = []
    for name, r in (("ours", ours), ("deltalake", theirs)):
        if r.ok and r.result is not None:
            for k, v in case.expect.items():
                if k in r.result and r.result[k] != v:
                    problems.append(f"{name} {k}={r.result[k]}, expected {v}")
            if r.result.get("bad_partition_values"):
                problems.append(
                    f"{name}: {r.result['bad_partition_values']} files with a wrong "
                    f"partition value, e.g. {r.result['bad_sample']}"
                )
            if r.result.get("verify_error"):
                problems.append(f"{name}: check failed: {r.result['verify_error']}")
    if ours.ok and theirs.ok and ours.result and theirs.result:
        a, b = ours.result.get("paths_digest"), theirs.result.get("paths_digest")
        if a and b and a != b:
            problems.append("the two engines return different file sets")
    return "; ".join(problems)


def cross_check_commits(case: C.Case, engine: str) -> list[str]:
    """After the last round: both engines must read the table ``engine`` committed to, with one
    more version and one more file per commit, and every parquet file written must hold the
    ``numRecords`` its stats claim."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = g.DATA_DIR / "scratch" / f"{case.id}-{engine}"
    n_commits = 1 + case.warmup + case.reps
    want_v = g.latest_version(case.table) + n_commits
    want_files = C.files_at(case.table, g.latest_version(case.table)) + n_commits
    out = []
    try:
        from deltalake import DeltaTable

        dt = DeltaTable(str(path))
        adds = pa.table(dt.get_add_actions(flatten=True))
        if (dt.version(), adds.num_rows) != (want_v, want_files):
            out.append(
                f"deltalake reads {engine}'s table as v{dt.version()} with "
                f"{adds.num_rows} files, expected v{want_v} with {want_files}"
            )
        for rel, n in zip(adds.column("path").to_pylist(), adds.column("num_records").to_pylist()):
            f = path / rel
            if f.exists() and pq.ParquetFile(f).metadata.num_rows != n:
                out.append(
                    f"{engine} wrote {rel} with numRecords={n}, file has {pq.ParquetFile(f).metadata.num_rows} rows"
                )
    except Exception as e:
        out.append(f"deltalake cannot read {engine}'s table: {type(e).__name__}: {e}")
    try:
        from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
        from airflow_delta_provider_apps.engine.storage import storage_for

        snap = load_snapshot(storage_for(str(path)), str(path))
        if (snap.version, snap.files.num_rows) != (want_v, want_files):
            out.append(
                f"ours reads {engine}'s table as v{snap.version} with "
                f"{snap.files.num_rows} files, expected v{want_v} with {want_files}"
            )
    except ImportError:
        pass
    except Exception as e:
        out.append(f"ours cannot read {engine}'s table: {type(e).__name__}: {e}")
    return out


def fresh_process_row(case: C.Case, row: R.Row) -> R.Row:
    """Derived row: import + first call, per fresh process (what a one-shot CLI task pays)."""

    def derive(r: R.EngineResult) -> R.EngineResult:
        xs = [i + c for i, c in zip(r.import_samples_ms, r.cold_samples_ms)]
        return R.EngineResult("ok", samples_ms=xs, result=r.result)

    return R.Row(
        case.id + "_fresh",
        f"{case.title}: fresh process, import + first open",
        derive(row.ours),
        derive(row.theirs),
        reps=len(row.ours.cold_samples_ms),
    )


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small tables, few reps (smoke run)")
    ap.add_argument("--only", nargs="*", default=None, help="run only cases whose id contains one of these substrings")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--out", default=None, help="output directory for latest.{md,csv,png}")
    ap.add_argument("--timeout", type=int, default=900, help="per worker process, seconds")
    ap.add_argument(
        "--no-dataplane", action="store_true", help="skip the data-plane cases (bench/dataplane.py, bench/merge.py)"
    )
    ap.add_argument("--dataplane-only", action="store_true", help="run only the data-plane cases")
    ap.add_argument(
        "--no-big-merge",
        action="store_true",
        help="skip the big MERGE bench (bench/big_merge.py: a 2M-row upsert into 5M rows, with floors and memory)",
    )
    ap.add_argument(
        "--no-cluster-merge",
        action="store_true",
        help="skip the standalone-cluster MERGE bench (bench/cluster_merge.py: the same upsert on 1 and 2 workers)",
    )
    ap.add_argument(
        "--no-transports", action="store_true", help="skip the transport bench (bench/transports.py: DAGs, MERGE)"
    )
    ap.add_argument(
        "--transports-only",
        action="store_true",
        help="run only the transport bench (spark-submit vs Spark Connect: DAG tasks, MERGE, large sources)",
    )
    ap.add_argument(
        "--no-connect-soak",
        action="store_true",
        help="skip the Spark Connect soak (bench/connect_soak.py: server processes and memory over 1,000 tasks)",
    )
    ap.add_argument("--no-datasource", action="store_true", help="skip the data source bench (bench/datasource.py)")
    ap.add_argument("--no-table-view", action="store_true", help="skip the UI view's bench (bench/table_view.py)")
    ap.add_argument(
        "--no-one-machine",
        action="store_true",
        help="skip the one-run table of issue 44 (bench/one_machine.py: every row beside deltalake, with the load)",
    )
    for f in dataclasses.fields(C.Sizes):
        ap.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=int,
            default=None,
            dest=f.name,
            help=f"override size/repetition '{f.name}'",
        )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.transports_only:
        return _transports(a)
    if a.dataplane_only:
        return _data_plane(a)
    code = _log_plane(a)
    if not a.no_dataplane and not a.list and code == 0:
        code = _data_plane(a)
    if not a.no_transports and not a.list and code == 0:
        code = _transports(a)
    if not a.no_connect_soak and not a.list and code == 0:
        code = _connect_soak(a)
    if not a.no_datasource and not a.list and code == 0:
        quick = ["--rows", "400000", "--reps", "1"] if a.quick else []
        code = subprocess.run([sys.executable, "-m", "bench.datasource", *quick], cwd=REPO).returncode
    if not a.no_table_view and not a.list and code == 0:
        quick = ["--quick"] if a.quick else []
        code = subprocess.run([sys.executable, "-m", "bench.table_view", *quick], cwd=REPO).returncode
    if not a.no_one_machine and not a.list and code == 0:
        quick = ["--quick"] if a.quick else []
        code = subprocess.run([sys.executable, "-m", "bench.one_machine", *quick], cwd=REPO).returncode
    return code


def _connect_soak(a) -> int:
    """One Spark Connect server under 1,000 tasks with shared sessions (quick: 100): its processes and
    RSS after 10, 100 and 1,000 tasks beside per-task times; then 20 tasks with a session per task.
    In a child process: it sets the engine's ``IN_PROCESS_BYTES`` and Airflow's log level for itself."""
    cmd = [sys.executable, "-m", "bench.connect_soak"] + (["--quick"] if a.quick else [])
    return subprocess.run(cmd, cwd=REPO).returncode


def _transports(a) -> int:
    """spark-submit vs Spark Connect: per-task wall time of the example DAGs, the 50k-row MERGE as a
    task over each transport, MERGE with 2M / 10M-row sources (time, strategy, peak memory)."""
    from . import transports

    return transports.main(["--quick"] if a.quick else [])


def _data_plane(a) -> int:
    """The data-plane bench (scans, appends, DELETE, UPDATE), the MERGE bench on the same table, the big
    MERGE bench (a 2M-row upsert beside Spark's floors, with peak memory; ``--no-big-merge`` skips it),
    the same upsert on a Spark standalone cluster (``--no-cluster-merge`` skips it),
    then the maintenance bench (OPTIMIZE, Z-order, VACUUM, RESTORE), the deletion-vector bench, then the
    object-store bench (S3 server)."""
    from . import big_merge, cluster_merge, dataplane, deletion_vectors, maintenance, merge, object_store

    args = ["--quick"] if a.quick else []
    return (
        dataplane.main(args)
        or merge.main(args)
        or (0 if a.no_big_merge else big_merge.main(args))
        or (0 if a.no_cluster_merge else cluster_merge.main(args))
        or maintenance.main(args)
        or deletion_vectors.main(args)
        or object_store.main(args)
    )


def measure(case: C.Case, path, timeout: int) -> R.Row:
    """One log-plane case on its generated table at ``path``: ``case.rounds`` rounds, each engine in
    fresh worker processes (alternating which goes first), the answers checked; its row."""
    parts: dict[str, list[R.EngineResult]] = {"ours": [], "deltalake": []}
    for rnd in range(case.rounds):
        # alternate which engine goes first so both see the same background load
        order = ("deltalake", "ours") if rnd % 2 == 0 else ("ours", "deltalake")
        for engine in order:
            if parts[engine] and parts[engine][-1].status != "ok":
                continue
            p = path
            if case.op in MUTATING:
                p = g.scratch_copy(path, f"{case.id}-{engine}")
            job = {
                "op": case.op,
                "engine": engine,
                "path": str(p),
                "args": case.args,
                "warmup": case.warmup,
                "reps": case.reps,
                "verify": rnd == 0,
            }
            parts[engine].append(run_worker(job, timeout))
    res = {e: R.EngineResult.merge(v) for e, v in parts.items()}
    problems = []
    if case.op in MUTATING:
        for engine, r in res.items():
            if r.ok:
                problems += cross_check_commits(case, engine)
    for engine in ("ours", "deltalake"):
        r = res[engine]
        _log(
            f"[{case.id}] {engine:9s} {r.status:11s} "
            + (
                f"median {r.median:9.1f} ms  p90 {r.p90:9.1f}  cpu {r.cpu_median:9.1f}  "
                f"cold {r.cold_ms:9.1f}  n={len(r.samples_ms)}"
                if r.ok
                else r.reason
            )
        )
    return R.Row(
        case.id,
        case.title,
        res["ours"],
        res["deltalake"],
        check="; ".join(filter(None, [check(case, res["ours"], res["deltalake"])] + problems)),
        headline=case.headline,
        reps=case.reps,
    )


def _log_plane(a) -> int:
    sizes = (C.Sizes.quick() if a.quick else C.Sizes()).with_env()
    for f in dataclasses.fields(C.Sizes):
        v = getattr(a, f.name)
        if v is not None:
            setattr(sizes, f.name, v)
    cases = C.build(sizes)
    if a.only:
        cases = [c for c in cases if any(s in c.id for s in a.only)]
    if a.list:
        for c in cases:
            print(f"{c.id:20s} {c.title}")
        return 0
    default_out = (g.DATA_DIR / "results-quick") if a.quick else RESULTS
    out_dir = Path(a.out) if a.out else default_out
    out_dir.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    have_ckpt = g.checkpoint_ours_available()
    _log(f"bench: {len(cases)} cases, sizes {dataclasses.asdict(sizes)}")
    rows: list[R.Row] = []
    for case in cases:
        if case.needs_ours_checkpoint and not have_ckpt:
            why = "airflow_delta_provider_apps.engine.log.checkpoint (our checkpoint writer) not available"
            skipped = R.EngineResult("unavailable", reason=why)
            rows.append(
                R.Row(case.id, case.title, skipped, R.EngineResult("unavailable", reason=why), headline=case.headline)
            )
            _log(f"[{case.id}] skipped: {why}")
            continue
        try:
            path = g.ensure(case.table, log=_log)
        except Exception as e:  # a generator failure is a row, not a crash
            err = R.EngineResult("error", reason=f"table generation failed: {e}")
            rows.append(R.Row(case.id, case.title, err, err, headline=case.headline))
            _log(f"[{case.id}] table generation failed: {e!r}")
            continue
        t0 = time.perf_counter()
        row = measure(case, path, a.timeout)
        _log(f"[{case.id}] {time.perf_counter() - t0:.1f}s")
        rows.append(row)
        if case.headline and row.ours.ok and row.theirs.ok:
            rows.append(fresh_process_row(case, row))
    runtime = time.perf_counter() - t_start

    print()
    print(R.text_table(rows))
    head = [r for r in rows if r.headline]
    verdict_line = ""
    if head and head[0].ratio is not None:
        verdict = "within" if head[0].ratio <= 1.5 else "NOT within"
        verdict_line = (
            f"Headline ({head[0].title}): ours/deltalake = {head[0].ratio:.2f}x "
            f"(median of warm opens), {verdict} the 1.5x target."
        )
        print("\n" + verdict_line)
    info = R.machine_info()
    info["load average (1 min) at start / end"] = f"{load0:.2f} / {os.getloadavg()[0]:.2f}"
    R.write_md(
        rows,
        out_dir / "latest.md",
        sizes=dataclasses.asdict(sizes),
        notes=NOTES,
        runtime_s=runtime,
        info=info,
        extra=verdict_line,
    )
    R.write_csv(rows, out_dir / "latest.csv")
    try:
        R.write_png(
            rows,
            out_dir / "latest.png",
            title=f"ours vs deltalake {info['deltalake']} - {info['cores (os.cpu_count)']}"
            f" cores, python {info['python']}, pyarrow {info['pyarrow']}",
        )
    except Exception as e:  # the chart is a convenience; the md/csv are the record
        _log(f"chart not written: {e!r}")
    print(f"\nwrote {out_dir}/latest.md, latest.csv, latest.png ({runtime:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
