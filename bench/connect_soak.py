"""Spark Connect soak: one long-lived server under 1,000 tasks with shared sessions, its processes and
memory beside per-task times; a short run without sharing for contrast (``python -m bench.connect_soak
[--quick]``; ``make bench`` runs it after the transport bench). Issue 32, item 3.

Each task runs as the operators run it: ``DeltaHook(conn_id).run(...)`` on a ``spark_connect``
connection given by ``AIRFLOW_CONN_BENCH_SOAK`` (the hook probes the server, finds the bundle, the run
attaches to the session of its key). Tasks come in cycles: append 10 rows from a Parquet file; MERGE
(upsert by ``key_columns=["id"]``) 3 rows from a Parquet file (2 existing keys, 1 new); DELETE one
existing row; and, every 4th cycle, OPTIMIZE. ``rewrite.common.IN_PROCESS_BYTES = -1`` in this process
(the Connect client, where the engine plans): every DELETE and MERGE rewrite runs in the server's Spark
tasks, on the session's Python workers, not in the client.

After tasks 10, 100 and 1,000 (quick: 10, 100) the server's process tree is read with psutil: the
number of processes (the JVM and its Python workers) and their summed RSS; beside it the wall time
of each task since the previous checkpoint (median, p90, max), per operation. Then, for contrast, the
same cycle of 20 tasks against a fresh server with sharing off (``ConnectRun(..., shared=False)``,
switched in where the hook imports ``ConnectRun``: a session per task, released at its end, as
before issue 32), read after 10 and 20 tasks. Every row of both tables is checked against a
plain-Python model with deltalake at each checkpoint and at the end; a wrong row fails the bench.
Nothing asserts a time or a memory figure.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
DATA = HERE / "data"
CONN_ID = "bench_soak"
OPS = ("append", "merge", "delete", "optimize")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _tree(pid: int) -> dict:
    """The server's process tree now (zombies left out: the launcher shell lingers as one for a while):
    processes, Python worker daemons (one per worker factory: the JVM's Python children), Python
    workers (the daemons' children: forked per task, reaped after a minute idle), summed RSS and the
    JVM's (MiB)."""
    import psutil

    root = psutil.Process(pid)
    procs, daemons, workers, rss, jvm = 0, 0, 0, 0, 0
    for p in [root, *root.children(recursive=True)]:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            r = p.memory_info().rss
            python = "python" in p.name().lower()
            parent = p.ppid()
        except psutil.Error:  # gone between the listing and the read
            continue
        procs += 1
        rss += r
        if p.pid == pid:
            jvm = r
        elif python and parent == pid:
            daemons += 1
        elif python:
            workers += 1
    return {
        "processes": procs,
        "python_daemons": daemons,
        "python_workers": workers,
        "rss_mib": rss >> 20,
        "jvm_rss_mib": jvm >> 20,
    }


def _parquet(path: Path, ids: list[int], v: int) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64())}), path)
    return str(path)


def _check(uri: str, model: dict[int, int], where: str) -> None:
    import deltalake

    got = {r["id"]: r["v"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    if got != model:
        missing = sorted(set(model) - set(got))[:5]
        extra = sorted(set(got) - set(model))[:5]
        wrong = sorted(k for k in set(got) & set(model) if got[k] != model[k])[:5]
        raise AssertionError(
            f"{where}: the table ({len(got)} rows) differs from the model ({len(model)} rows): "
            f"missing ids {missing}, unexpected ids {extra}, wrong v for ids {wrong}"
        )


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[max(0, -(-len(s) * q // 100) - 1)] if q < 100 else s[-1]


def _stats(xs: list[float]) -> dict:
    import statistics

    if not xs:
        return {"n": 0, "median_s": None, "p90_s": None, "max_s": None}
    return {"n": len(xs), "median_s": statistics.median(xs), "p90_s": _pct(xs, 90), "max_s": max(xs)}


def soak(label: str, tasks: int, checkpoints: tuple[int, ...], work: Path, *, shared: bool) -> dict:
    """``tasks`` tasks on a fresh server; the server's tree and the task times at each checkpoint."""
    from airflow_delta_provider.hooks.bundle import build_app_bundle
    from airflow_delta_provider.hooks.delta import DeltaHook
    from airflow_delta_provider_apps import protocol
    from airflow_delta_provider_apps.connect import ConnectRun
    from airflow_delta_provider_apps.connect_server import ConnectServer

    class Unshared(ConnectRun):
        """A session per run, released at its end (the life before issue 32)."""

        def __init__(self, url, **kw):
            super().__init__(url, **{**kw, "shared": False})

    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(32)
    t0 = time.monotonic()
    server = ConnectServer()
    start_s = time.monotonic() - t0
    saved = protocol.ConnectRun
    if not shared:
        protocol.ConnectRun = Unshared  # where ConnectTransport.run imports it from
    points, times, ops_done, sessions, bundles = [], [], [], [], set()
    try:
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port}
        )
        uri = str(work / "table")
        DeltaHook(CONN_ID).run("create-table", uri, schema="id BIGINT, v BIGINT")  # log only: no session
        points.append({"after_tasks": 0, **_tree(server.pid)})
        _log(f"[{label}] server started in {start_s:.1f} s: {points[-1]}")
        model: dict[int, int] = {}
        i, cycle = 0, 0
        while i < tasks:
            for op in OPS:
                if i >= tasks:
                    break
                if op == "optimize" and cycle % 4 != 3:
                    continue
                if op == "append":
                    ids = list(range(cycle * 10, cycle * 10 + 10))
                    src = _parquet(work / f"a{i}.parquet", ids, i)
                    call = ("write", {"source": src})
                    after = dict.fromkeys(ids, i)
                elif op == "merge":
                    ids = sorted(set(rng.sample(sorted(model), min(2, len(model)))) | {10_000_000 + i})
                    src = _parquet(work / f"m{i}.parquet", ids, -i)
                    call = ("merge", {"source": src, "key_columns": ["id"]})
                    after = dict.fromkeys(ids, -i)
                elif op == "delete":
                    gone = rng.choice(sorted(model))
                    call = ("delete", {"predicate": f"id = {gone}"})
                    after = None
                else:
                    call = ("optimize", {})
                    after = {}
                hook = DeltaHook(CONN_ID)
                started = time.perf_counter()
                hook.run(call[0], uri, **call[1])
                times.append(time.perf_counter() - started)
                run = getattr(hook.transport, "_run", None)
                sessions.append(getattr(run, "session_id", None) if shared else f"own-{i}")
                bundles.add(build_app_bundle().digest)  # what the next hook run ships (others may edit the checkout)
                ops_done.append(op)
                if after is None:
                    del model[gone]
                else:
                    model.update(after)
                i += 1
                if i in checkpoints:
                    tree = _tree(server.pid)
                    _check(uri, model, f"{label}, after task {i}")
                    points.append({"after_tasks": i, **tree})
                    _log(f"[{label}] after {i} tasks ({time.monotonic() - t0:.0f} s): {tree}, {len(model)} rows")
            cycle += 1
        _check(uri, model, f"{label}, at the end")
        rows = len(model)
    finally:
        protocol.ConnectRun = saved
        os.environ.pop(f"AIRFLOW_CONN_{CONN_ID.upper()}", None)
        server.stop()
        log = DATA / "logs" / f"connect-soak-{label}-server.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            log.write_text(server.output())
        except OSError:
            pass
        shutil.rmtree(server.log_dir, ignore_errors=True)
    windows = []
    prev = 0
    for p in points[1:]:
        n = p["after_tasks"]
        sel = list(zip(ops_done[prev:n], times[prev:n]))
        per = {op: _stats([t for o, t in sel if o == op]) for op in OPS}
        per["all"] = _stats([t for _, t in sel])
        used = {x for x in sessions[:n] if x}
        windows.append({**p, "from_task": prev + 1, "ops": per, "sessions": len(used)})
        prev = n
    return {
        "label": label,
        "shared": shared,
        "tasks": tasks,
        "server_start_s": start_s,
        "seconds": time.monotonic() - t0,
        "rows": rows,
        "bundles": len(bundles),
        "start": points[0],
        "windows": windows,
    }


def _cell(s: dict) -> str:
    if not s["n"]:
        return "-"
    return f"{s['median_s']:.2f} / {s['p90_s']:.2f} / {s['max_s']:.2f} ({s['n']})"


def report(runs: list[dict], meta: dict) -> tuple[str, list[dict]]:
    lines = [
        f"# Spark Connect soak: one server, {runs[0]['tasks'] if runs else 0:,} tasks (`python -m bench.connect_soak`)",
        "",
        f"*Measured {meta['measured_at']}, load average (1 min) {meta['load'][0]:.2f} at the start, "
        f"{meta['load'][1]:.2f} at the end, commit {meta['commit']}"
        + (f", files changed in the checkout: {meta['dirty']}" if meta["dirty"] else "")
        + f"; {meta['seconds']:.0f} s in all.*",
        "",
        "Each task as the operators run it (`DeltaHook.run` on a `spark_connect` connection). A cycle: "
        "append 10 rows (Parquet), MERGE upserting 3 rows by `key_columns=['id']` (2 existing, 1 new), "
        "DELETE one existing row, and every 4th cycle OPTIMIZE. "
        "`rewrite.common.IN_PROCESS_BYTES = -1` in the bench process (the Connect client): every DELETE "
        "and MERGE rewrite runs in the server's Spark tasks, on the session's Python workers. "
        "Server: `ConnectServer()` (local[2], default memory), a fresh one per run. "
        "*Processes*: the server's JVM and every live process under it, read with psutil right after "
        "the task: in brackets its Python worker daemons (one per worker factory: a session's Python "
        "environment keeps one until the server stops, SPARK-54055) + their forked Python workers "
        "(started as tasks need them, reaped after a minute idle: their count moves with timing). "
        "*RSS*: the processes' summed resident memory (MiB; forked workers share pages with their "
        "daemon, so the sum overstates them), the JVM's in brackets. "
        "*Sessions so far*: distinct server sessions the tasks used (shared: the session id each run "
        "attached to; sharing off: one per task). Task times: wall seconds of `DeltaHook.run`, over the tasks since the previous row: "
        "median / p90 / max (count). Every row of each table checked against a plain-Python model "
        "with deltalake after each row and at the end: "
        + ("all right." if meta["ok"] else f"**FAILED: {meta['error']}**"),
        "",
        "| sharing | after task | sessions so far | processes (daemons + workers) | RSS MiB (JVM) | tasks "
        "| all | append | merge | delete | optimize |",
        "|---|---:|---:|---:|---:|---|---|---|---|---|---|",
    ]
    csv_rows = []
    for run in runs:
        kind = "shared" if run["shared"] else "off: a session per task"
        s = run["start"]
        lines.append(
            f"| {kind} | 0 (server up, {run['server_start_s']:.0f} s) | 0 | {s['processes']} ({s['python_daemons']} + {s['python_workers']}) | "
            f"{s['rss_mib']} ({s['jvm_rss_mib']}) | | | | | | |"
        )
        for w in run["windows"]:
            ops = w["ops"]
            lines.append(
                f"| {kind} | {w['after_tasks']:,} | {w['sessions']} | {w['processes']} ({w['python_daemons']} + {w['python_workers']}) | "
                f"{w['rss_mib']} ({w['jvm_rss_mib']}) | {w['from_task']}-{w['after_tasks']} | "
                + " | ".join(_cell(ops[k]) for k in ("all", *OPS))
                + " |"
            )
            for k in ("all", *OPS):
                csv_rows.append(
                    {
                        "sessions": "shared" if run["shared"] else "per_task",
                        "after_tasks": w["after_tasks"],
                        "sessions_so_far": w["sessions"],
                        "server_processes": w["processes"],
                        "server_python_daemons": w["python_daemons"],
                        "server_python_workers": w["python_workers"],
                        "server_rss_mib": w["rss_mib"],
                        "server_jvm_rss_mib": w["jvm_rss_mib"],
                        "from_task": w["from_task"],
                        "op": k,
                        "n": ops[k]["n"],
                        "median_s": None if ops[k]["median_s"] is None else round(ops[k]["median_s"], 4),
                        "p90_s": None if ops[k]["p90_s"] is None else round(ops[k]["p90_s"], 4),
                        "max_s": None if ops[k]["max_s"] is None else round(ops[k]["max_s"], 4),
                    }
                )
    for run in runs:
        w = run["windows"]
        if len(w) >= 2:
            first, last = w[0], w[-1]
            per = (last["rss_mib"] - first["rss_mib"]) / max(1, last["after_tasks"] - first["after_tasks"])
            lines += [
                "",
                f"*{'Shared sessions' if run['shared'] else 'A session per task'}*: from task "
                f"{first['after_tasks']:,} to {last['after_tasks']:,} the server went from {first['processes']} to "
                f"{last['processes']} processes ({first['python_daemons']} to {last['python_daemons']} Python "
                f"worker daemons) and {first['rss_mib']} to {last['rss_mib']} MiB "
                f"({per:+.2f} MiB per task); {run['rows']:,} rows at the end, {run['seconds']:.0f} s for the run.",
            ]
            if run["shared"] and last["sessions"] > 1:
                lines[-1] += (
                    f" The tasks used {last['sessions']} sessions, and the apps' bundle had {run['bundles']} "
                    "contents during the run (others edited the checkout's spark_apps/ meanwhile): a session's key "
                    "includes the bundle's content, so the runs after a change attach to that version's session "
                    "(with a worker daemon of its own)."
                )
    lines += ["", "## Machine", "", "| | |", "|---|---|"]
    from .report import machine_info

    info = machine_info()
    info.pop("repo commit", None)  # the stamp above says it
    lines += [f"| {k} | {v} |" for k, v in info.items()]
    return "\n".join(lines) + "\n", csv_rows


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.connect_soak", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 tasks (checkpoints 10, 100), results in bench/data/")
    ap.add_argument("--tasks", type=int, default=None, help="tasks of the shared run (default 1000; quick 100)")
    ap.add_argument("--unshared", type=int, default=20, help="tasks of the run without sharing (0: skip it)")
    ap.add_argument("--out", default=None, help="output folder")
    a = ap.parse_args(argv)
    tasks = a.tasks or (100 if a.quick else 1000)
    checkpoints = tuple(sorted({n for n in (10, 100, 1000) if n < tasks} | {tasks}))
    out = Path(a.out) if a.out else (DATA / "results-quick" if a.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "airflow" not in sys.modules:  # 4 INFO lines per task otherwise (too late once Airflow configured logging)
        os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

    from airflow_delta_provider_apps.engine.rewrite import common as rewrite_common

    rewrite_common.IN_PROCESS_BYTES = -1  # every DELETE / MERGE rewrite through the server's Spark tasks
    _log(
        "connect_soak: rewrite.common.IN_PROCESS_BYTES = -1 in this process: DELETE and MERGE rewrite "
        f"through the server's Spark tasks; {tasks} tasks shared, checkpoints {checkpoints}; "
        f"then {a.unshared} tasks with a session per task"
    )
    meta = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": _git("rev-parse", "--short", "HEAD").strip(),
        "dirty": ", ".join(
            ln.split(None, 1)[1]
            for ln in _git("status", "--porcelain", "--untracked-files=no").splitlines()
            if ln.strip()
        ),
        "ok": True,
        "error": "",
    }
    load0, t0 = os.getloadavg()[0], time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="connect-soak-", dir=DATA if DATA.is_dir() else None))
    runs = []
    try:
        plan = [("shared", tasks, checkpoints, True)]
        if a.unshared:
            plan.append(("unshared", a.unshared, tuple(sorted({min(10, a.unshared), a.unshared})), False))
        for label, n, cps, shared in plan:
            try:
                runs.append(soak(label, n, cps, work / label, shared=shared))
            except AssertionError as e:
                meta.update(ok=False, error=str(e))
                _log(f"[{label}] CHECK FAILED: {e}")
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta.update(load=(load0, os.getloadavg()[0]), seconds=time.monotonic() - t0)
    end = _git("rev-parse", "--short", "HEAD").strip()
    if end != meta["commit"]:
        meta["commit"] += f" -> {end} (commits landed during the run)"
    text, csv_rows = report(runs, meta)
    print(text, flush=True)
    (out / "connect_soak.md").write_text(text)
    if csv_rows:
        with open(out / "connect_soak.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(csv_rows[0]))
            w.writeheader()
            w.writerows(csv_rows)
    _log(f"wrote {out / 'connect_soak.md'}, connect_soak.csv ({meta['seconds']:.0f} s)")
    if not meta["ok"]:
        _log(f"connect_soak: WRONG ROWS: {meta['error']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
