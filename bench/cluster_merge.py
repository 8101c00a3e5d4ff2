"""Scale out, shown (issue 33 item 4): big_merge's upsert on a real Spark standalone cluster.

``python -m bench.cluster_merge [--quick] [--big50]`` (``make bench`` runs it after the big MERGE
bench, without ``--big50``; ``--no-cluster-merge`` skips it there).

* **Cluster**: a master and N workers started here as separate processes on loopback from the
  installed pyspark distribution (``spark-class ...deploy.master.Master`` / ``...worker.Worker``, as
  ``tests/airflow/test_standalone_cluster.py`` does), each in its own process group, all stopped
  afterwards (SIGTERM, then SIGKILL of the group and of every process seen under it). Two shapes on
  a 2-core machine: one worker with 2 cores (6g), and two workers with 1 core each (3g each).
* **Runs**: for each shape, and for local[2] beside them, a fresh child process (the driver) builds
  a session with our ``build_session(master=...)`` (default 1g driver, Spark's default 1g per
  executor), ships the apps' zip (``hooks.bundle.build_app_bundle``) with ``addPyFile``, waits for
  its executors, runs one 1000-row warm-up upsert, then
  ``DeltaTable.for_path(spark, fresh copy).upsert(spark.read.parquet(source), ["id"])`` of a 0.5M-row
  and then a 2M-row source into big_merge's 5M-row target (``--reps`` each, default 2, each on a
  fresh copy). ``spark.airflowDelta.merge.maxSourceBytes=1``: every source is joined in Spark (the
  0.5M-row one would otherwise be collected to the driver, the small-source strategy, bounded by an
  eighth of the driver's memory), so the two sizes run the same plan and the driver's peak can be
  compared between them: it should not grow with the source (the driver plans from the log's file
  list and commits; the rows stay in the executors).
* **Memory** (MiB, ``VmHWM``, big_merge's ``Peaks``, reset at each upsert's start): the driver's
  Python process, its JVM (and its used heap after a full GC at the upsert's end: what the driver
  still holds, where the resident set mostly shows how far the JVM grew its heap), and the executors: the largest sampled sum of the resident sets of
  everything the workers started (executor JVMs and their Python workers); none for local[2], whose
  tasks run in the driver's JVM. **Phases**: the engine's progress reports
  (``engine.progress``) timestamped: ``commit s`` is from the last report (files rewritten) to the
  upsert's return, driver-only work (actions built, the log committed).
* **Rows**: deltalake reads every result (big_merge's ``checksums``: rows, distinct ids, sum of
  ``n``), which must equal big_merge's expected values; a mismatch or a failed run exits 1.
* ``--big50``: a 50M-row target (big_merge's 20 appends of 2.5M rows, which deltalake writes as 60
  files) and a 5M-row source, upserted once on the two-worker cluster and once on local[2]
  (``--no-big50-local``: not there).

Data: big_merge's cache (``bench/data/big_merge``). ``--quick``: 500k rows, 50k / 200k sources, one
repetition, ``--big50`` 5M rows. Results: ``bench/results/cluster_merge.md`` and ``.csv`` (quick:
``bench/data/results-quick/``). Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .big_merge import DATA, QUICK_RESULTS, REPO, RESULTS, Peaks, _child, _commit, _ours
from .merge import fresh_copy
from .procmem import MiB, _descendants, _kill, _status, run_measured

WORK = DATA / "cluster_work"
JOIN_ALWAYS = {"spark.airflowDelta.merge.maxSourceBytes": "1"}
# name -> (workers, cores each, memory each); None: local[2] in the driver's JVM
SHAPES = {"local[2]": None, "1 worker x 2 cores": (1, 2, "6g"), "2 workers x 1 core": (2, 1, "3g")}
FIELDS = [
    "configuration",
    "target_rows",
    "source_rows",
    "seconds",
    "runs",
    "strategy",
    "driver_python_mib",
    "driver_jvm_mib",
    "driver_heap_mib",
    "executors_mib",
    "commit_s",
    "rows_ok",
    "note",
]


def _log(msg: str) -> None:
    print(f"[cluster_merge {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------
# the standalone cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive_workers(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
            return sum(w.get("state") == "ALIVE" for w in json.loads(r.read()).get("workers", []))
    except OSError:
        return 0


@contextmanager
def standalone(workers: int, cores: int, memory: str, folder: Path):
    """``(spark://127.0.0.1:<port>, worker pids)`` with ``workers`` workers registered; every process
    started here is stopped on the way out, whatever happened."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_HOME": str(home),
    }
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        with open(folder / f"{name}.log", "wb") as out:
            p = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: executors included, killed as one
            )
        procs.append(p)
        return p

    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        ws = []
        for i in range(workers):
            ws.append(
                start(
                    f"worker{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    master,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(folder / f"work{i}"),
                )
            )
        deadline = time.monotonic() + 120
        while _alive_workers(ui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tails = {f.name: f.read_text(errors="replace")[-1500:] for f in folder.glob("*.log")}
                raise RuntimeError(f"the standalone cluster did not come up: {tails}")
            time.sleep(1)
        yield master, [p.pid for p in ws]
    finally:
        _stop(procs)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, then SIGKILL whatever of it (or of its tree) is left."""
    trees = {p.pid: _descendants(p.pid) for p in procs}
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        _kill(p.pid, {})  # the group, then the tree as it is now
        for pid in trees[p.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        p.wait()


# --------------------------------------------------------------------------------------------------
# the driver (a fresh child process per configuration)


class ClusterPeaks(Peaks):
    """big_merge's ``Peaks`` of this driver's tree (its Python, its JVM, Spark's Python workers under
    it), plus ``executors``: the largest sampled sum of the resident sets of everything the standalone
    workers ``workers`` started (executor JVMs and their Python workers)."""

    def __init__(self, workers: list[int]):
        super().__init__()
        self.workers = workers
        self.executors = 0

    def _sample(self) -> None:
        super()._sample()
        pids = [p for w in self.workers for p in _descendants(w)[1:]]  # [0] is the worker daemon itself
        self.executors = max(self.executors, sum(_status(p)[1].get("VmRSS", 0) for p in pids) * 1024)


def _wait_for_executors(spark, n: int, timeout: float = 120) -> None:
    """Until ``n`` executors have registered (the driver's own block manager is counted too)."""
    sc = spark.sparkContext._jsc.sc()
    deadline = time.monotonic() + timeout
    while sc.getExecutorMemoryStatus().size() - 1 < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} executors did not register in {timeout:.0f} s")
        time.sleep(0.5)


def _driver(job: dict) -> dict:
    """The session on ``job["master"]`` with the apps' zip shipped, a 1000-row warm-up upsert, then
    each of ``job["runs"]`` (target, source, table) on a fresh copy, timed, with its peaks and the
    times of the engine's progress reports."""
    from airflow_delta_provider_apps.engine.progress import reporting_to
    from airflow_delta_provider_apps.engine.spark.session import build_session

    from .big_merge import _ours_note

    spark = build_session(app_name="bench-cluster-merge", master=job["master"], conf=JOIN_ALWAYS)
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.addPyFile(job["zip"])
    _wait_for_executors(spark, len(job["workers"]))
    # the warm-up on the small target (a 1000-row upsert into a big one rewrites every file)
    warm = Path(job["work"]) / "warm"
    spark.read.parquet(job["runs"][0]["source"]).limit(1000).write.mode("overwrite").parquet(str(warm / "source"))
    _ours(spark, fresh_copy(job["warm_target"], warm / "t"), str(warm / "source"))
    shutil.rmtree(warm, ignore_errors=True)
    out = []
    for run in job["runs"]:
        table = fresh_copy(run["target"], Path(run["table"]))
        load = os.getloadavg()[0]
        events: list[tuple[float, str]] = []
        with (
            ClusterPeaks(job["workers"]) as peaks,
            reporting_to(lambda e, ev=events: ev.append((time.perf_counter(), e["phase"]))),
        ):
            t0 = time.perf_counter()
            r = _ours(spark, table, run["source"])
            t1 = time.perf_counter()
        jvm = spark.sparkContext._jvm  # what the driver's heap still holds after the run (a full GC first)
        jvm.java.lang.System.gc()
        heap = jvm.java.lang.Runtime.getRuntime().totalMemory() - jvm.java.lang.Runtime.getRuntime().freeMemory()
        out.append(
            {
                **run,
                "seconds": t1 - t0,
                "driver_heap_mib": round(heap / MiB, 1),
                "load": round(load, 2),
                "strategy": r.get("strategy", ""),
                "note": _ours_note(r),
                "phases": " ".join(f"{p}@{t - t0:.1f}" for t, p in events),
                "commit_s": t1 - events[-1][0] if events else None,
                **peaks.result(),
                # local[2]: the tasks run in the driver's JVM (no Python worker runs for this upsert)
                "executors_mib": round(peaks.executors / MiB, 1) if job["workers"] else None,
            }
        )
        _log(f"{job['name']}: {json.dumps(out[-1], default=str)[:400]}")
    spark.stop()
    return {"runs": out}


def run_config(
    name: str, master: str, workers: list[int], runs: list[dict], common: dict, timeout: float
) -> list[dict]:
    """``runs`` in a fresh driver process on ``master``; then deltalake checks every result.
    ``common``: the apps' zip and the warm-up's target."""
    work = WORK / name.replace(" ", "_").replace("[", "").replace("]", "")
    job = {"name": name, "master": master, "workers": workers, "work": str(work), **common}
    job["runs"] = [{**r, "table": str(work / f"t{i}")} for i, r in enumerate(runs)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    m = run_measured(
        [sys.executable, "-m", "bench.cluster_merge", "--worker", json.dumps(job)],
        env=env,
        cwd=str(REPO),
        timeout=timeout,
        log_path=DATA / "logs" / f"cluster-{work.name}-{runs[0]['target_rows']}.log",
    )
    if m.status != "ok" or not m.result:
        shutil.rmtree(work, ignore_errors=True)
        _log(f"{name} {m.status}: {m.error}")
        return [{**r, "configuration": name, "status": m.status, "error": m.error} for r in runs]
    done = m.result["runs"]
    sums = _child({"kind": "checksums", "paths": [r["table"] for r in done]})["checksums"]
    shutil.rmtree(work, ignore_errors=True)
    for r, got in zip(done, sums, strict=True):
        r.update(configuration=name, status="ok", checksums=got, rows_ok=got == r["expected"])
    return done


@contextmanager
def _cluster(shape):
    """``(master, worker pids)``: local[2] (no worker) or a standalone cluster of ``shape``."""
    if shape is None:
        yield "local[2]", []
        return
    with standalone(*shape, WORK / "cluster") as c:
        yield c


def _runs(prep: dict, reps: int) -> list[dict]:
    rows = prep["expected"]["rows"] - prep["inserts"]
    one = {"target": prep["target"], "source": prep["source"], "expected": prep["expected"]}
    return [{**one, "target_rows": rows, "source_rows": prep["updates"] + prep["inserts"]}] * reps


# --------------------------------------------------------------------------------------------------
# report


def summarize(samples: list[dict]) -> list[dict]:
    """One row per configuration and size: median seconds, the largest peaks, rows ok in every run."""
    groups: dict[tuple, list[dict]] = {}
    for s in samples:
        groups.setdefault((s["configuration"], s["target_rows"], s["source_rows"]), []).append(s)
    out = []
    for (name, target, source), ss in groups.items():
        ok = [s for s in ss if s["status"] == "ok"]

        def most(key, ok=ok):
            v = [s[key] for s in ok if s.get(key) is not None]
            return max(v) if v else None

        out.append(
            {
                "configuration": name,
                "target_rows": target,
                "source_rows": source,
                "seconds": statistics.median([s["seconds"] for s in ok]) if ok else None,
                "runs": len(ok),
                "strategy": ok[-1]["strategy"] if ok else "",
                "driver_python_mib": most("peak_python_mib"),
                "driver_jvm_mib": most("peak_jvm_mib"),
                "driver_heap_mib": most("driver_heap_mib"),
                "executors_mib": most("executors_mib"),
                "commit_s": statistics.median([s["commit_s"] for s in ok if s.get("commit_s") is not None] or [0]),
                "rows_ok": bool(ok) and len(ok) == len(ss) and all(s["rows_ok"] for s in ok),
                "note": (
                    f"{ok[-1]['note']}; reports at s: {ok[-1]['phases']}; load average (1 min) at the start "
                    + " / ".join(f"{s['load']:.1f}" for s in ok)
                    if ok
                    else ss[-1].get("error", "")
                )
                + "".join(f"; rows {s['checksums']} != {s['expected']}" for s in ok if not s["rows_ok"]),
            }
        )
    return out


def _f(x, nd: int = 0) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _findings(rows: list[dict]) -> str:
    """What the cluster changes, in sentences from the numbers."""
    by = {(r["configuration"], r["target_rows"], r["source_rows"]): r for r in rows if r["runs"]}
    target = min((t for _c, t, _s in by), default=0)
    sizes = sorted({s for _c, t, s in by if t == target})
    if len(sizes) < 2:
        return ""
    large = sizes[-1]
    times = ", ".join(
        f"{_f(by[(c, target, large)]['seconds'], 1)} s on {c}" for c in SHAPES if (c, target, large) in by
    )
    driver = []
    for r in sorted((r for r in rows if r["runs"] and SHAPES[r["configuration"]]), key=lambda r: r["source_rows"]):
        driver.append(
            f"{r['source_rows'] / 1e6:g}M into {r['target_rows'] / 1e6:g}M on {r['configuration']}: Python "
            f"{_f(r['driver_python_mib'])}, JVM {_f(r['driver_jvm_mib'])} ({_f(r['driver_heap_mib'])} held after GC), "
            f"executors {_f(r['executors_mib'])}"
        )
    on = [r for r in rows if r["runs"] and SHAPES[r["configuration"]]]

    def span(key):
        v = [r[key] for r in on if r[key] is not None]
        return f"{_f(min(v))}-{_f(max(v))}" if v else "-"

    biggest = max(r["target_rows"] for r in on) if on else 0
    ok = all(r["rows_ok"] for r in rows)
    return (
        f"What the cluster changes: where the rows are worked on, not the speed here. The {large:,}-row upsert "
        f"took {times}; on 2 cores a cluster only adds executor JVMs, a shuffle over loopback and task shipping "
        "to the same two cores, so neither shape can be expected to beat local[2], and the differences between the shapes "
        "move with this machine's load (see the load averages in the notes). On the clusters the driver "
        "plans from the log's file list and commits, and the rows stay in the executors (MiB: "
        + "; ".join(driver)
        + f"). Over every size on a cluster the driver's Python peaks at {span('driver_python_mib')} MiB; its JVM's "
        f"resident set at {span('driver_jvm_mib')} MiB (a JVM grows its heap toward its 1g limit as garbage "
        f"accrues) while what it holds after a full GC is {span('driver_heap_mib')} MiB; the default 1g driver "
        f"ran a {biggest:,}-row target. More workers on more machines would add cores where the rows are, "
        "without adding to the driver. "
        + (
            "Rows are right in every run (deltalake's checksums equal the expected ones)."
            if ok
            else "**Some runs failed or gave wrong rows: see the table.**"
        )
    )


def write(rows: list[dict], out: Path, reps: int, runtime: float, load0: float) -> str:
    import deltalake
    import pyspark

    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    md = [
        "# MERGE on a Spark standalone cluster (`python -m bench.cluster_merge`, issue 33 item 4)",
        "",
        f"*{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {_commit()}, {os.cpu_count()} cores, "
        f"pyspark {pyspark.__version__}, deltalake {deltalake.__version__}, load average (1 min) at the start / end "
        f"{load0:.2f} / {load[0]:.2f}, {runtime:.0f} s*",
        "",
        "big_merge's upsert (`DeltaTable.for_path(spark, path).upsert(spark.read.parquet(source), ['id'])`: "
        "ids shuffled over 20 appends, which deltalake writes as 20 files, or 60 for the 50M-row target, half the source updating ids spread over every file, half new) by a driver "
        "in a fresh process: on local[2], and on a standalone master with one 2-core worker (6g) or two 1-core "
        "workers (3g each) started on loopback; default 1g driver and 1g executors, the apps shipped as a zip "
        "(`addPyFile`), the source always joined in Spark (`spark.airflowDelta.merge.maxSourceBytes=1`, so the "
        f"sizes run the same plan), one 1000-row warm-up upsert into a 500k-row copy first. Seconds: median of {reps} (each on a fresh copy; "
        "the 50M-row target: one run). Peaks (MiB, each process's VmHWM reset at the upsert's start): the "
        "driver's Python and JVM; *driver heap after GC*: the driver JVM's used heap after a full GC at the "
        "upsert's end (what it still holds); *executors*: the largest sum of the resident sets of the executor JVMs and "
        "their Python workers (local[2]: -, its tasks run in the driver's JVM). "
        "*commit s*: from the engine's last progress report (files rewritten) to the upsert's return, driver "
        "only. *rows ok*: deltalake's row count, distinct ids and sum of n equal the expected ones.",
        "",
        "| configuration | target rows | source rows | time s | strategy | driver Python MiB | driver JVM MiB "
        "| driver heap after GC MiB | executors MiB | commit s | rows ok |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['configuration']} | {r['target_rows']:,} | {r['source_rows']:,} | {_f(r['seconds'], 2)} | "
            f"{r['strategy']} | {_f(r['driver_python_mib'])} | {_f(r['driver_jvm_mib'])} | {_f(r['driver_heap_mib'])} | "
            f"{_f(r['executors_mib'])} | "
            f"{_f(r['commit_s'], 2)} | {'yes' if r['rows_ok'] else '**NO**'} |"
        )
    md += ["", _findings(rows), "", "Notes (the last run of each row):", ""]
    md += [f"* {r['configuration']}, {r['source_rows']:,} into {r['target_rows']:,}: {r['note']}" for r in rows]
    text = "\n".join(md) + "\n"
    (out / "cluster_merge.md").write_text(text)
    with open(out / "cluster_merge.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows({k: r.get(k) for k in FIELDS} for r in rows)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_merge", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="500k rows, 50k / 200k sources, one repetition")
    p.add_argument("--reps", type=int, default=None, help="repetitions per source (default 2; quick 1)")
    p.add_argument("--big50", action="store_true", help="also a 5M-row source into 50M rows (2 workers, local[2])")
    p.add_argument("--big50-local", action=argparse.BooleanOptionalAction, default=True, help="--big50 on local[2] too")
    p.add_argument("--timeout", type=float, default=None, help="per driver process, seconds (default 1200; quick 300)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps({"status": "ok", **_driver(json.loads(a.worker))}, default=str), flush=True)
        return 0
    from airflow_delta_provider.hooks.bundle import build_app_bundle

    started, load0 = time.time(), os.getloadavg()[0]
    reps, timeout = a.reps or (1 if a.quick else 2), a.timeout or (300 if a.quick else 1200)
    rows, small, large = (500_000, 50_000, 200_000) if a.quick else (5_000_000, 500_000, 2_000_000)
    _log("preparing the target and the sources (big_merge's cache) ...")
    main_runs = [r for n in (small, large) for r in _runs(_child({"kind": "prepare", "rows": rows, "n": n}), reps)]
    warm = _child({"kind": "prepare", "rows": 500_000, "n": 50_000})["target"]
    common = {"zip": build_app_bundle().zip_path, "warm_target": warm}
    samples = []
    for name, shape in SHAPES.items():
        _log(f"{name} ...")
        with _cluster(shape) as (master, workers):
            samples += run_config(name, master, workers, main_runs, common, timeout)
    if a.big50:
        big_rows, big_n = (2_000_000, 1_000_000) if a.quick else (50_000_000, 5_000_000)
        _log(f"--big50: preparing the {big_rows:,}-row target and the {big_n:,}-row source (cached) ...")
        big = _runs(_child({"kind": "prepare", "rows": big_rows, "n": big_n}), 1)
        for name in ["2 workers x 1 core"] + (["local[2]"] if a.big50_local else []):
            _log(f"--big50 on {name} ...")
            with _cluster(SHAPES[name]) as (master, workers):
                samples += run_config(name, master, workers, big, common, 3 * timeout)
    shutil.rmtree(WORK, ignore_errors=True)
    table = summarize(samples)
    out = QUICK_RESULTS if a.quick else RESULTS
    print(write(table, out, reps, time.time() - started, load0))
    print(f"wrote {out}/cluster_merge.md, cluster_merge.csv ({time.time() - started:.0f} s)")
    return 0 if all(r["rows_ok"] for r in table) else 1


if __name__ == "__main__":
    sys.exit(main())
