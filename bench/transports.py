"""Transport bench: spark-submit vs Spark Connect, per Airflow task and per MERGE (issue #22 items 4, 7).

``python -m bench.transports [--quick] [--only dags merge big]`` (``make bench`` runs it last).
Three parts, results in ``bench/results/transports.md`` and one CSV per part
(``transport_tasks.csv``, ``transport_merge.csv``, ``transport_big_merge.csv``):

1. **dags**: per-task wall time of two example DAGs, run with ``dag.test()`` through
   ``example_dags/run_demo.py run`` (what ``make demo`` runs), once with ``spark_local`` a ``spark``
   connection (``local[2]``: one spark-submit application per Spark task) and once a
   ``spark_connect`` connection to a warm local ``ConnectServer`` (started first; one warm-up DAG
   run whose times are not reported). Per transport, in a fresh copy of one migrated Airflow home:
   the quickstart DAG as warm-up (2026-01-01, its own folder), the quickstart measured
   (2026-01-02, a fresh table), the lakehouse pipeline's first day (2026-01-03: creates the tables),
   then its second day measured (2026-01-04, a Sunday: VACUUM runs too). ``--quick``: no warm-up
   over spark-submit and the pipeline's first day is the measured one. A task's time is its task
   instance's duration (``seconds`` in run_demo's summary); the DAG run's total is ``dag.test()``'s
   wall time.
2. **merge**: the merge bench's 50k-row upsert (half updates, half inserts; ON id and dt) into the
   5M-row data-plane table (20 ``dt`` partitions, every file spanning the whole id range), its source
   written once to Parquet, each run on a fresh copy of the same deltalake-written files: ours in a
   warm local[2] SparkSession of this process (what bench/merge.py measures) beside deltalake;
   then, alternating, the whole task over spark-submit (``DeltaHook`` on a ``spark`` connection:
   JVM start, reading the source, the merge, the commit) and over Spark Connect (``DeltaHook`` on a
   ``spark_connect`` connection to a warm server: the engine runs in this process as the client)
   and deltalake again. One untimed warm-up run each; the median of ``--reps``.
3. **big**: MERGE with large sources (2M and 10M rows; id, dt, v, a 64-character string s, n; read
   from Parquet; half of them update existing rows, half are new) into the same 5M-row table,
   default memory everywhere (``spark.driver.memory`` unset = 1g, the server's too): over
   spark-submit, over Spark Connect (a fresh server per run, warmed by one 1000-row merge:
   its peak covers its start, that merge and this one) and
   deltalake (source streamed from the Parquet file), each in a fresh child process
   (bench/transport_worker.py) whose whole process tree, and the server's, is sampled for peak
   memory (bench/procmem.py); every run has a timeout (its process group is killed on expiry and
   the run reported as such), a failed run is reported with its error line.

Row counts after every merge are checked (deltalake reads each engine's table). Nothing asserts a
time; the issue's targets are printed beside the numbers.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from . import dataplane as dp
from .merge import fresh_copy
from .procmem import MiB, run_measured

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data" / "transports"
RESULTS = HERE / "results"
RUN_DEMO = REPO / "example_dags" / "run_demo.py"
QUICKSTART, PIPELINE = "delta_quickstart", "delta_lakehouse_pipeline"
SUBMIT_CONN = '{"conn_type": "spark", "host": "local[2]"}'
SMALL_TASKS = {  # the "small task" examples, as they appear in the two DAGs
    (QUICKSTART, "append_day"): "24-row append",
    (QUICKSTART, "drop_small"): "one-file delete",
    (QUICKSTART, "checkpoint"): "checkpoint",
    (PIPELINE, "load_bronze"): "13-row daily load",
    (PIPELINE, "erase"): "small delete",
    (PIPELINE, "checkpoint"): "checkpoint",
}
NO_SPARK_TASKS = {  # operations that need no Spark (issue 44 item 6): in the worker on every connection
    (QUICKSTART, "create_table"): "create from a schema",
    (QUICKSTART, "checkpoint"): "checkpoint",
    (PIPELINE, "create_bronze"): "create if not exists",
    (PIPELINE, "create_silver"): "create if not exists",
    (PIPELINE, "checkpoint"): "checkpoint",
    (PIPELINE, "vacuum"): "VACUUM",
}
NO_SPARK_TARGET_S = 1.0  # each such task over spark-submit, as Airflow measures it
SPREAD = 1_000_003  # a prime: k * SPREAD % rows is a permutation of the ids when rows is 2^a * 5^b
SMALL_TARGET_S, SMALL_AIM_S, DAY_TARGET_S = 3.0, 1.5, 15.0
UPSERT = [{"when": "matched", "then": "update_all"}, {"when": "not_matched", "then": "insert_all"}]
ON_DAY = "target.id = source.id AND target.dt = source.dt"
BIG_CLAUSES = [
    {"when": "matched", "then": "update", "set": {c: f"source.{c}" for c in ("v", "s", "n")}},
    {"when": "not_matched", "then": "insert", "values": {c: f"source.{c}" for c in ("id", "dt", "v", "s", "n")}},
]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _connect_conn(server) -> str:
    return json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port})


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_HOME"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _stop_server(server, keep: Path | None = None) -> str:
    """Stop ``server``; its output kept at ``keep`` (when given), its temporary folder removed; returns
    the output's OutOfMemoryError / Terminating line, if any."""
    server.stop()
    try:
        text = server.output()
    except OSError:
        text = ""
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(text)
    shutil.rmtree(server.log_dir, ignore_errors=True)
    hits = [ln.strip() for ln in text.splitlines() if "OutOfMemoryError" in ln or "Terminating due to" in ln]
    return hits[-1][:300] if hits else ""


def _short_error(e: str) -> str:
    """The error's class and its most telling part (an OutOfMemoryError line when there is one)."""
    if not e:
        return ""
    head = ": ".join(e.split(": ")[:2])
    for mark in ("Terminating due to java.lang.OutOfMemoryError", "java.lang.OutOfMemoryError", "OutOfMemoryError"):
        i = e.find(mark)
        if i >= 0:
            tail = e[i:].split(" | ")[0].split(". Fix")[0]
            return f"{head}: ... {tail}"[:400]
    return e[:400]


def _start_server(conf: dict | None = None):
    from airflow_delta_provider_apps.connect_server import ConnectServer

    t0 = time.monotonic()
    server = ConnectServer(conf=conf)
    return server, time.monotonic() - t0


def _server_pythons(server) -> tuple[int, int]:
    """(number, summed PSS bytes) of the Python processes under the Connect server (its workers):
    PSS (proportional set size) counts the pages a forked worker shares with its daemon once."""
    import psutil

    try:
        kids = psutil.Process(server._proc.pid).children(recursive=True)
    except psutil.Error:
        return 0, 0
    n = pss = 0
    for k in kids:
        try:
            if "python" in k.name():
                info = k.memory_full_info()
                n, pss = n + 1, pss + getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return n, pss


def _fmt(x, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _mib(v) -> str:
    return "-" if not v else f"{v / MiB:,.0f}"


# --------------------------------------------------------------------------------------------------
# 1. per-task wall time of the example DAGs


def _dag_run(home: Path, dag_id: str, date: str, env: dict, log: Path, timeout: float, watch=()) -> dict:
    m = run_measured(
        [sys.executable, str(RUN_DEMO), "run", "--home", str(home), "--dag-id", dag_id, "--date", date],
        env=env,
        cwd=str(REPO),
        timeout=timeout,
        log_path=log,
        watch_pids=watch,
    )
    summary = m.result or {"state": m.status, "tasks": {}, "seconds": None}
    if m.status != "ok":
        summary["state"] = f"{summary.get('state')} ({m.status}: {m.error})"
    summary["peak_total"] = m.peak_total
    summary["peak_jvm"] = m.peak.get("jvm")
    _log(f"  {dag_id} {date}: {summary['state']} in {summary.get('seconds')} s (log {log})")
    return summary


def dags(quick: bool, timeout: float) -> dict:
    work = DATA / "dags"
    shutil.rmtree(work, ignore_errors=True)
    template = work / "home-template"
    _log(f"[dags] migrating an Airflow home ({template}) ...")
    m = run_measured(
        [sys.executable, str(RUN_DEMO), "migrate", "--home", str(template)],
        env=_child_env(),
        cwd=str(REPO),
        timeout=timeout,
        log_path=work / "migrate.log",
    )
    if m.status != "ok":
        raise RuntimeError(f"airflow db migrate failed: {m.error} (log {m.log})")
    out: dict = {"runs": {}, "server_start_s": None}
    for transport in ("spark-submit", "connect"):
        home = work / f"home-{transport}"
        shutil.copytree(template, home)
        for f in ("delta_quickstart.py", "delta_lakehouse_pipeline.py"):
            shutil.copy(REPO / "example_dags" / f, home / "dags" / f)
        server, watch = None, ()
        if transport == "connect":
            server, out["server_start_s"] = _start_server()
            watch = (server._proc.pid,)
            _log(f"[dags] Connect server at {server.url} in {out['server_start_s']:.1f} s")
        conn = SUBMIT_CONN if server is None else _connect_conn(server)
        root = work / transport

        def env(**kw: str) -> dict:
            return _child_env(AIRFLOW_CONN_SPARK_LOCAL=conn, **kw)  # noqa: B023

        try:
            runs = {}
            if not quick or server is not None:
                _log(f"[dags] {transport}: warm-up run (not reported)")
                _dag_run(
                    home,
                    QUICKSTART,
                    "2026-01-01",
                    env(DELTA_QUICKSTART_ROOT=str(root / "warmup")),
                    work / f"{transport}-warmup.log",
                    timeout,
                    watch,
                )
            runs[QUICKSTART] = _dag_run(
                home,
                QUICKSTART,
                "2026-01-02",
                env(DELTA_QUICKSTART_ROOT=str(root / "quickstart")),
                work / f"{transport}-quickstart.log",
                timeout,
                watch,
            )
            days = ["2026-01-03"] if quick else ["2026-01-03", "2026-01-04"]
            for date in days:
                runs[PIPELINE] = _dag_run(
                    home,
                    PIPELINE,
                    date,
                    env(DELTA_PIPELINE_ROOT=str(root / "lakehouse")),
                    work / f"{transport}-pipeline-{date}.log",
                    timeout,
                    watch,
                )
                runs[PIPELINE]["date"] = date
                if date != days[-1]:
                    runs[f"{PIPELINE} setup"] = runs[PIPELINE]
            out["runs"][transport] = runs
            if server is not None:
                spark_tasks = sum(
                    1
                    for r in runs.values()
                    for t in r.get("tasks", {}).values()
                    if isinstance(t.get("xcom"), dict) and t["xcom"].get("transport") == "connect"
                )
                n, rss = _server_pythons(server)
                out["server_pythons"] = {"processes": n, "rss": rss, "runs": len(runs) + 1, "tasks": spark_tasks}
        finally:
            if server is not None:
                _stop_server(server, work / "connect-server.out")
    return out


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _transport_of(t: dict | None) -> str:
    """How a task ran: its result's ``transport`` (a Delta task), else ``python`` (a plain task)."""
    x = (t or {}).get("xcom")
    return str(x.get("transport") or "python") if isinstance(x, dict) and "transport" in x else "python"


def dag_rows(res: dict) -> tuple[list[dict], list[str]]:
    """The per-task rows (csv) and the markdown lines of part 1."""
    sub, con = res["runs"].get("spark-submit", {}), res["runs"].get("connect", {})
    rows: list[dict] = []
    md = [
        "## 1. Per-task wall time: spark-submit vs Spark Connect (example DAGs, `dag.test()`)",
        "",
        "| DAG | task | ran as | spark-submit (s) | Connect (s) | Connect / spark-submit | issue's targets |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for dag_id in (QUICKSTART, PIPELINE):
        a, b = sub.get(dag_id, {}), con.get(dag_id, {})
        ta, tb = a.get("tasks", {}), b.get("tasks", {})
        label = dag_id + (f" {a.get('date') or b.get('date')}" if dag_id == PIPELINE else " 2026-01-02")
        firsts = {next(iter(t), None) for t in (ta, tb)} - {None}  # run_demo lists tasks by start time
        for task in list(dict.fromkeys([*ta, *tb])):
            sa, sb = (ta.get(task) or {}).get("seconds"), (tb.get(task) or {}).get("seconds")
            states = {(ta.get(task) or {}).get("state"), (tb.get(task) or {}).get("state")} - {None}
            note = "" if states <= {"success"} else f" ({'/'.join(sorted(map(str, states)))})"
            if task in firsts:
                first_in = [n for n, t in (("spark-submit", ta), ("Connect", tb)) if next(iter(t), None) == task]
                note += f" (first task over {' and '.join(first_in)} [1])"
            target = ""
            if (dag_id, task) in SMALL_TASKS:
                what = SMALL_TASKS[(dag_id, task)]
                verdict = (
                    "-"
                    if sb is None
                    else "aim met"
                    if sb <= SMALL_AIM_S
                    else "target met"
                    if sb <= SMALL_TARGET_S
                    else "**missed**"
                )
                target = f"{what}: <= {SMALL_TARGET_S:g} s over Connect (aim {SMALL_AIM_S:g} s): {verdict}"
            if (dag_id, task) in NO_SPARK_TASKS:
                verdict = "-" if sa is None else "met" if sa <= NO_SPARK_TARGET_S else "**missed**"
                no_spark = f"{NO_SPARK_TASKS[(dag_id, task)]}, no Spark: <= {NO_SPARK_TARGET_S:g} s over spark-submit: {verdict}"
                target = f"{target}; {no_spark}" if target else no_spark
            how = " / ".join(_transport_of(t.get(task)) for t in (ta, tb))
            md.append(f"| {label} | {task}{note} | {how} | {_fmt(sa)} | {_fmt(sb)} | {_ratio(sb, sa)} | {target} |")
            rows.append(
                {
                    "dag": label,
                    "task": task,
                    "spark_submit_s": sa,
                    "connect_s": sb,
                    "ratio_connect_over_submit": None if not (sa and sb is not None) else round(sb / sa, 3),
                    "ran_as": how,
                    "state_submit": (ta.get(task) or {}).get("state"),
                    "state_connect": (tb.get(task) or {}).get("state"),
                    "target": target,
                }
            )
        ma = _median([t.get("seconds") for t in ta.values()])
        mb = _median([t.get("seconds") for t in tb.values()])
        md.append(f"| {label} | *median task* | | {_fmt(ma)} | {_fmt(mb)} | {_ratio(mb, ma)} | |")
        tot_a, tot_b = a.get("seconds"), b.get("seconds")
        target = ""
        if dag_id == PIPELINE:
            verdict = "-" if tot_b is None else "met" if tot_b <= DAY_TARGET_S else "**missed**"
            target = f"a pipeline day <= {DAY_TARGET_S:g} s: {verdict}"
        md.append(
            f"| {label} | **DAG run total** ({a.get('state')} / {b.get('state')}) | | {_fmt(tot_a)} | {_fmt(tot_b)} | "
            f"{_ratio(tot_b, tot_a)} | {target} |"
        )
        for name, t_a, t_b in (("median task", ma, mb), ("DAG run total", tot_a, tot_b)):
            rows.append(
                {
                    "dag": label,
                    "task": f"({name})",
                    "spark_submit_s": t_a,
                    "connect_s": t_b,
                    "ratio_connect_over_submit": None if not (t_a and t_b is not None) else round(t_b / t_a, 3),
                    "ran_as": "",
                    "state_submit": a.get("state"),
                    "state_connect": b.get("state"),
                    "target": target if name == "DAG run total" else "",
                }
            )
    setup_a, setup_b = sub.get(f"{PIPELINE} setup"), con.get(f"{PIPELINE} setup")
    md += [""]
    if setup_a or setup_b:
        md.append(
            f"The pipeline's first day (2026-01-03, creates both tables; not in the table): "
            f"{_fmt((setup_a or {}).get('seconds'))} s over spark-submit, "
            f"{_fmt((setup_b or {}).get('seconds'))} s over Connect."
        )
    if res.get("server_start_s") is not None:
        md.append(f"The Connect server took {res['server_start_s']:.1f} s to start (before the warm-up run).")
    jvm = [r.get("peak_jvm") for r in con.values() if isinstance(r, dict)]
    if any(jvm):
        md.append(f"The Connect server's JVM peaked at {_mib(max(x for x in jvm if x))} MiB resident over these runs.")
    sp = res.get("server_pythons")
    if sp:
        md.append(
            f"After {sp['runs']} DAG runs on it ({sp['tasks']} tasks with `transport: connect` besides those of "
            f"the warm-up run), the server held {sp['processes']} Python processes ({_mib(sp['rss'])} MiB, summed PSS): the "
            "tasks share one session (a session's Python daemon and workers stay until the server stops, so "
            "one per task used to add two processes per task; see bench/results/connect_soak.md)."
        )
    md.append(
        "[1] The first task of a `dag.test()` run also waits for Airflow's in-process execution API to "
        "start (~4-6 s between 'running task' and 'Task started' in its log): Airflow's cost in this "
        "test harness, not the provider's, and not paid per task by a real worker."
    )
    md.append(
        "A task's seconds are its task instance's duration (`ti.duration`: the operator's execute, "
        "spark-submit's JVM start included for spark-submit); the create, checkpoint and vacuum tasks "
        "need no Spark and run in the worker (`execution='auto'`, the default) under both connections. "
        "Ratio above 1: Connect is slower."
    )
    return rows, md


# --------------------------------------------------------------------------------------------------
# 2. the 50k-row merge: in session, spark-submit task, Connect task, deltalake


def _source_50k(spark, rows: int) -> str:
    """merge.py's 50k-row upsert source (half updates of existing rows, half new ids), as Parquet."""
    from pyspark.sql import functions as F

    half = max(1, rows // 200)
    path = DATA / f"source_upsert_{rows}"
    if not (path / "_SUCCESS").exists():
        updates = dp._rows_df(spark, 0, rows).filter("id % 199 = 7").limit(half).withColumn("v", F.col("v") + 1)
        inserts = dp._rows_df(spark, 2 * rows, half)
        updates.unionByName(inserts).coalesce(1).write.mode("overwrite").parquet(str(path))
    return str(path)


def _rows_after(path: str) -> int:
    import deltalake

    return deltalake.DeltaTable(path).to_pyarrow_dataset().count_rows()


def _rs_merge(table: str, source, predicate: str, clauses: list[dict]) -> dict:
    import deltalake

    b = deltalake.DeltaTable(table).merge(
        source=source, predicate=predicate, source_alias="source", target_alias="target"
    )
    for c in clauses:
        b = getattr(b, f"when_{c['when']}_{c['then']}")()
    return b.execute()


def merge50k(rows: int, reps: int) -> dict:
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine import DeltaTable

    work = DATA / "merge_work"
    spark = dp._session()
    try:
        base = dp.build(spark, rows)["rs"]
        src = _source_50k(spark, rows)
        n_src = pq.read_table(src).num_rows
        want = rows + n_src // 2
        h: dict = {}

        def rs_source():
            t = pq.read_table(src)
            return t.cast(dp._rs_schema(t.schema))

        def ours():
            b = DeltaTable.for_path(spark, h["ours"]).merge(spark.read.parquet(src), ON_DAY)
            for c in UPSERT:
                b = b.clause(**c)
            return b.execute()

        _log(f"[merge] in session: ours (local[2]) vs deltalake, {reps} reps on fresh copies ...")
        times, outs = dp._alternating(
            {
                "ours": (ours, lambda: h.update(ours=fresh_copy(base, work / "ours"))),
                "rs": (
                    lambda: _rs_merge(h["rs"], rs_source(), ON_DAY, UPSERT),
                    lambda: h.update(rs=fresh_copy(base, work / "rs")),
                ),
            },
            reps,
            warm=True,
        )
        checks = {k: _rows_after(h[k]) for k in ("ours", "rs")}
        session = {"ours_s": times["ours"], "deltalake_s": times["rs"], "ours_result": outs["ours"]}
    finally:
        spark.stop()

    from airflow_delta_provider.hooks.delta import DeltaHook

    server, start_s = _start_server()
    try:
        os.environ["AIRFLOW_CONN_BENCH_SUBMIT"] = SUBMIT_CONN
        os.environ["AIRFLOW_CONN_BENCH_CONNECT"] = _connect_conn(server)
        params = {"source": src, "source_format": "parquet", "predicate": ON_DAY, "clauses": UPSERT}
        results: dict = {}

        def via(conn_id: str, key: str):
            def run():
                r = DeltaHook(conn_id).run("merge", h[key], **params)
                results[key] = r
                return r

            return run

        _log(
            f"[merge] tasks: spark-submit vs Connect (server started in {start_s:.1f} s) vs deltalake, warm-up + {reps} reps ..."
        )
        t_times, t_outs = dp._alternating(
            {
                "submit": (via("bench_submit", "submit"), lambda: h.update(submit=fresh_copy(base, work / "submit"))),
                "connect": (
                    via("bench_connect", "connect"),
                    lambda: h.update(connect=fresh_copy(base, work / "connect")),
                ),
                "rs2": (
                    lambda: _rs_merge(h["rs2"], rs_source(), ON_DAY, UPSERT),
                    lambda: h.update(rs2=fresh_copy(base, work / "rs2")),
                ),
            },
            reps,
            warm=True,
        )
        checks.update({k: _rows_after(h[k]) for k in ("submit", "connect", "rs2")})
        server_pythons = _server_pythons(server)
    finally:
        _stop_server(server, DATA / "logs" / "merge-connect-server.out")
        os.environ.pop("AIRFLOW_CONN_BENCH_SUBMIT", None)
        os.environ.pop("AIRFLOW_CONN_BENCH_CONNECT", None)
    shutil.rmtree(work, ignore_errors=True)
    bad = {k: v for k, v in checks.items() if v != want}
    return {
        "rows": rows,
        "source_rows": n_src,
        "reps": reps,
        "session": session,
        "tasks": t_times,
        "results": t_outs,
        "server_start_s": start_s,
        "server_pythons": server_pythons,
        "check": "" if not bad else f"row counts after the merge differ from {want}: {bad}",
    }


def merge_rows(res: dict) -> tuple[list[dict], list[str]]:
    s, t, r = res["session"], res["tasks"], res["results"]
    rs_session, rs_tasks = s["deltalake_s"], t["rs2"]
    sub, con = r.get("submit") or {}, r.get("connect") or {}

    def engine_ms(x: dict):
        v = (x.get("metrics") or {}).get("executionTimeMs")
        return None if v is None else v / 1000

    table = [
        ("deltalake (in this process, same phase as ours in session)", rs_session, rs_session, None, "", None),
        (
            "ours in a warm local[2] session (bench/merge.py's measure)",
            s["ours_s"],
            rs_session,
            None,
            (s.get("ours_result") or {}).get("strategy", ""),
            engine_ms(s.get("ours_result") or {}),
        ),
        ("deltalake (in this process, same phase as the tasks)", rs_tasks, rs_tasks, t["submit"], "", None),
        (
            "ours, spark-submit task (DeltaHook, `local[2]`)",
            t["submit"],
            rs_tasks,
            t["submit"],
            sub.get("strategy", ""),
            engine_ms(sub),
        ),
        (
            "ours, Spark Connect task (DeltaHook, warm server)",
            t["connect"],
            rs_tasks,
            t["submit"],
            con.get("strategy", ""),
            engine_ms(con),
        ),
    ]
    md = [
        f"## 2. MERGE of {res['source_rows']:,} rows (half updates, half inserts) into {res['rows']:,} rows",
        "",
        "Every file of the table spans the whole id range; ON id and dt; the source read from one Parquet "
        f"file; median of {res['reps']} on fresh copies of the same deltalake-written files, after one "
        "untimed warm-up each.",
        "",
        "| how | seconds | / deltalake | / spark-submit task | strategy | engine's own time (executionTimeMs) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    rows = []
    for how, sec, rs, subm, strategy, eng in table:
        md.append(
            f"| {how} | {_fmt(sec)} | {_ratio(sec, rs)} | {_ratio(sec, subm) if subm else '-'} | {strategy} | "
            f"{_fmt(eng)} |"
        )
        rows.append(
            {
                "how": how,
                "seconds": round(sec, 3),
                "ratio_over_deltalake": round(sec / rs, 3) if rs else None,
                "ratio_over_submit_task": round(sec / subm, 3) if subm else None,
                "strategy": strategy,
                "engine_execution_s": eng,
            }
        )
    md += [
        "",
        f"Inside the spark-submit task the hook reports `submit_seconds` {_fmt(sub.get('submit_seconds'))} s; "
        f"the Connect task `run_seconds` {_fmt(con.get('run_seconds'))} s (last timed run). The Connect "
        f"server took {res['server_start_s']:.1f} s to start (not counted).",
    ]
    n, rss = res.get("server_pythons") or (0, 0)
    if n:
        md.append(
            f"After {res['reps'] + 1} Connect merges (one session each) the server held {n} Python processes "
            f"({_mib(rss)} MiB, summed PSS)."
        )
    if res["check"]:
        md.append(f"\n**Check failed**: {res['check']}")
    return rows, md


# --------------------------------------------------------------------------------------------------
# 3. large sources: time, strategy, peak memory


def big_source(rows: int, n: int) -> str:
    """``n`` rows (id, dt, v, s: 64 characters, n), half updates of distinct existing ids (k * a
    prime modulo the table's rows: spread over every partition and file), half new ids; one Parquet
    file written in 1M-row row groups."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = DATA / f"big_source_{n}_into_{rows}.parquet"
    done = path.with_suffix(".done")
    if done.exists():
        return str(path)
    upd = min(n // 2, rows)
    schema = pa.schema(
        [("id", pa.int64()), ("dt", pa.date32()), ("v", pa.float64()), ("s", pa.string()), ("n", pa.int32())]
    )
    rng = np.random.default_rng(7)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    day0 = (np.datetime64("2026-01-01") - np.datetime64("1970-01-01")).astype(np.int64)
    with pq.ParquetWriter(str(path), schema) as w:
        for start in range(0, n, 1_000_000):
            k = np.arange(start, min(n, start + 1_000_000), dtype=np.int64)
            ids = np.where(k < upd, (k * SPREAD) % rows, 2 * rows + k)
            m = len(ids)
            data = letters[rng.integers(0, len(letters), size=m * 64)].tobytes()
            offsets = np.arange(0, 64 * (m + 1), 64, dtype=np.int32)
            s = pa.StringArray.from_buffers(m, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))
            w.write_table(
                pa.table(
                    {
                        "id": ids,
                        "dt": pa.array((day0 + ids % dp.DAYS).astype(np.int32), pa.int32()).cast(pa.date32()),
                        "v": rng.random(m),
                        "s": s,
                        "n": (ids % 100).astype(np.int32),
                    },
                    schema=schema,
                ),
                row_group_size=1_000_000,
            )
    done.write_text("ok")
    return str(path)


def _ensure_base(rows: int) -> str:
    base = dp.DATA / f"rows_{rows}"
    if not (base / "done").exists():
        spark = dp._session()
        try:
            dp.build(spark, rows)
        finally:
            spark.stop()
    return str(base / "deltalake")


#: what the hook's task log says when a MERGE starts each strategy (a failed run has no result)
STRATEGY_LINES = {
    "merged file by file": "file_by_file",
    "joined with the candidate files in Spark": "join",
    '"phase":"join"': "join",
    '"phase":"file_by_file"': "file_by_file",
}


def _strategy_from_log(*paths: str) -> str:
    text = ""
    for p in paths:
        try:
            text += Path(p).read_text(errors="replace")
        except OSError:
            pass
    found = [(text.rfind(k), v) for k, v in STRATEGY_LINES.items() if k in text]
    return max(found)[1] if found else ""


def _strategy_log_line(log: str, mark: str) -> str:
    """The last line of the run's logs holding ``mark``, from the mark on."""
    for p in (log.replace(".log", ".stdout"), log):
        try:
            text = Path(p).read_text(errors="replace")
        except OSError:
            continue
        hits = [ln[ln.find(mark) :].split(" [")[0] for ln in text.splitlines() if mark in ln]
        if hits:
            return hits[-1][:200]
    return ""


def big(rows: int, sizes: list[int], timeout: float, memories: tuple[str, ...] = ("default",)) -> list[dict]:
    """Part 3; ``memories``: ``spark.driver.memory`` of the Spark runs (``default``: unset, 1g); deltalake
    runs only with ``default`` in them."""
    base = _ensure_base(rows)
    work = DATA / "big_work"
    out = []
    for i, n in enumerate(sizes):
        _log(f"[big] writing the {n:,}-row source ...")
        src = big_source(rows, n)
        engines = ["deltalake", "spark-submit", "connect"]
        runs = [
            (e, mem)
            for e in (engines if i % 2 == 0 else engines[::-1])
            for mem in memories
            if e != "deltalake" or mem == "default"
        ]
        for engine, mem in runs:
            table = fresh_copy(base, work / engine)
            conf = {} if mem == "default" else {"spark.driver.memory": mem}
            server, watch, env = None, (), _child_env(AIRFLOW_CONN_BENCH_SUBMIT=SUBMIT_CONN)
            if engine == "connect":
                server, _ = _start_server(conf)
                watch = (server._proc.pid,)
                env["AIRFLOW_CONN_BENCH_CONNECT"] = _connect_conn(server)
                _warm_up(server, base, rows, env, timeout)
            job = {
                "engine": engine,
                "table": table,
                "source": src,
                "predicate": ON_DAY,
                "clauses": BIG_CLAUSES,
                "conn_id": "bench_connect" if engine == "connect" else "bench_submit",
                "spark_conf": conf if engine == "spark-submit" else {},
            }
            tag = "" if mem == "default" else f"-{mem}"
            _log(f"[big] {n:,} rows, {engine}{tag} (timeout {timeout:.0f} s) ...")
            server_line = ""
            try:
                m = run_measured(
                    [sys.executable, "-m", "bench.transport_worker", json.dumps(job)],
                    env=env,
                    cwd=str(REPO),
                    timeout=timeout,
                    log_path=DATA / "logs" / f"big-{n}-{engine}{tag}.log",
                    watch_pids=watch,
                )
                server_alive = server is None or server._proc.poll() is None
            finally:
                if server is not None:
                    server_line = _stop_server(server, DATA / "logs" / f"big-{n}-{engine}{tag}-server.out")
            res = (m.result or {}).get("result") or {}
            error = m.error
            if server is not None and not server_alive:
                error = (error + "; " if error else "") + "the Connect server died during the run"
                if server_line:
                    error += f" (its output: {server_line})"
            rows_after = None
            if m.status == "ok":
                try:
                    rows_after = _rows_after(table)
                except Exception as e:  # reported, not fatal
                    error = f"deltalake cannot read the table after the merge: {e}"
            want = rows + n - min(n // 2, rows)
            row = {
                "source_rows": n,
                "engine": engine,
                "driver_memory": "" if engine == "deltalake" else "1g (default)" if mem == "default" else mem,
                "status": m.status if not (m.status == "ok" and rows_after != want) else "wrong rows",
                "seconds": (m.result or {}).get("seconds") if m.status == "ok" else None,
                "process_wall_s": round(m.wall_s, 2),
                "strategy": ""
                if engine == "deltalake"
                else res.get("strategy") or _strategy_from_log(m.log, m.log.replace(".log", ".stdout")),
                "peak_jvm_mib": _round_mib(m.peak.get("jvm")),
                "peak_task_python_mib": _round_mib(m.peak.get("task")),
                "peak_app_python_mib": _round_mib(m.peak.get("app")),
                "peak_worker_python_mib": _round_mib(m.peak.get("worker")),
                "peak_workers_sum_mib": _round_mib(m.peak_sum.get("worker")),
                "peak_total_mib": _round_mib(m.peak_total),
                "ru_maxrss_mib": _round_mib(m.ru_maxrss),
                "rows_after": rows_after,
                "rows_expected": want,
                "error": error,
                "log": m.log,
            }
            _log(f"[big]   -> {json.dumps({k: v for k, v in row.items() if k != 'log'})}")
            out.append(row)
            shutil.rmtree(work / engine, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def _warm_up(server, base: str, rows: int, env: dict, timeout: float) -> None:
    """One small merge (1000 rows) on a scratch copy through a fresh server, so the measured run
    finds it warm, as a production server is (its first session, Python workers, code paths)."""
    table = fresh_copy(base, DATA / "big_work" / "warmup")
    job = {
        "engine": "connect",
        "table": table,
        "source": big_source(rows, 1000),
        "predicate": ON_DAY,
        "clauses": BIG_CLAUSES,
        "conn_id": "bench_connect",
    }
    m = run_measured(
        [sys.executable, "-m", "bench.transport_worker", json.dumps(job)],
        env=env,
        cwd=str(REPO),
        timeout=timeout,
        log_path=DATA / "logs" / "big-warmup.log",
    )
    _log(f"[big]   server warm-up merge: {m.status} in {m.wall_s:.1f} s {m.error}")
    shutil.rmtree(DATA / "big_work" / "warmup", ignore_errors=True)


def _round_mib(v) -> float | None:
    return None if not v else round(v / MiB, 1)


def big_md(rows: int, res: list[dict], timeout: float, number: str = "3") -> list[str]:
    md = [
        f"## {number}. MERGE with large sources into {rows:,} rows"
        + (", default memory" if all(r.get("driver_memory", "") in ("", "1g (default)") for r in res) else ""),
        "",
        "Source: id, dt, v, s (64 characters), n from one Parquet file; half the rows update existing rows "
        "(SET v, s, n), half are inserted. `spark.driver.memory` unset (1g) for the spark-submit driver and "
        "the Connect server unless the engine column names another (then set to it for both) (a fresh server per run, warmed by one 1000-row merge first: its peak covers "
        f"its start, that small merge and this one); every run in a fresh child process, timeout {timeout:.0f} s. "
        "Peak resident memory (VmHWM, MiB) sampled every 0.2 s over the child's process tree and the "
        "server's: *JVM* = the spark-submit driver JVM or the Connect server's JVM; *engine Python* = where "
        "our engine plans and commits (the spark-submit app's Python driver; the Connect client, i.e. the "
        "task's process; deltalake's process); *hook* = the Airflow task process that runs spark-submit; "
        "*workers* = Spark's Python workers (the largest one, and the largest sampled sum of all at once); "
        "*total* = the largest sampled sum over every process of the run (client, JVM, workers).",
        "",
        "| source rows | engine | status | seconds | strategy | JVM | engine Python | hook | worker (max one / sum) | "
        "total | note |",
        "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in res:
        engine_py = r["peak_app_python_mib"] if r["engine"] == "spark-submit" else r["peak_task_python_mib"]
        hook = r["peak_task_python_mib"] if r["engine"] == "spark-submit" else None
        workers = (
            "-"
            if not r["peak_worker_python_mib"]
            else f"{r['peak_worker_python_mib']:,.0f} / {r['peak_workers_sum_mib'] or 0:,.0f}"
        )
        r = {"driver_memory": "" if r["engine"] == "deltalake" else "1g (default)", **r}
        if not r["strategy"] and r["engine"] != "deltalake" and r.get("log"):  # a record without it
            r["strategy"] = _strategy_from_log(r["log"], r["log"].replace(".log", ".stdout"))
        err, _, server = (r["error"] or "").partition("; the Connect server died")
        if err and "OutOfMemoryError" not in err and r.get("log"):  # the error line was cut before it
            oom = _strategy_log_line(r["log"], "Terminating due to java.lang.OutOfMemoryError")
            err = f"{err.split(' Cause:')[0]} ... {oom}" if oom else err
        note = _short_error(err)
        if server:
            note += "; the Connect server died" + (
                " (its JVM: OutOfMemoryError)" if "OutOfMemoryError" in server else ""
            )
        strategy = r["strategy"] if r["status"] == "ok" or not r["strategy"] else f"{r['strategy']} (started)"
        engine = r["engine"] + (f" ({r['driver_memory']})" if r["driver_memory"] not in ("", "1g (default)") else "")
        if r["status"] == "wrong rows":
            note = f"{r['rows_after']} rows after, expected {r['rows_expected']}"
        md.append(
            f"| {r['source_rows']:,} | {engine} | {r['status']} | {_fmt(r['seconds'], 1)} | {strategy} | "
            f"{_fmt(r['peak_jvm_mib'], 0)} | {_fmt(engine_py, 0)} | {_fmt(hook, 0)} | {workers} | "
            f"{_fmt(r['peak_total_mib'], 0)} | {note} |"
        )
    md += [
        "",
        "Seconds: the merge call in the child (`DeltaHook.run`: spark-submit's whole application, or the "
        "Connect client's run; deltalake's `merge().execute()` with the source streamed from the file), "
        "not the interpreter's start. deltalake's peak is also its process's `ru_maxrss` "
        "(in transport_big_merge.csv, with each failed run's whole error line). *(started)*: the strategy "
        "the MERGE had started when the run failed (from the task log).",
    ]
    return md


# --------------------------------------------------------------------------------------------------


def _dirty() -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":!bench"], capture_output=True, text=True, cwd=REPO
        ).stdout
    except OSError:
        return "?"
    return ", ".join(line[3:] for line in out.splitlines() if line.strip())


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200k-row table, 80k/400k-row large sources, one rep")
    p.add_argument("--only", nargs="*", default=None, choices=("dags", "merge", "big"), help="parts to run")
    p.add_argument("--rows", type=int, default=None, help="rows of the target table (default 5M; quick 200k)")
    p.add_argument("--reps", type=int, default=None, help="repetitions of the 50k merge (default 3; quick 1)")
    p.add_argument("--big", type=int, nargs="*", default=None, help="large source sizes (default 2M 10M)")
    p.add_argument("--timeout", type=float, default=None, help="per run, seconds (default 900; quick 300)")
    p.add_argument(
        "--memory",
        nargs="*",
        default=["default"],
        help="part 3: spark.driver.memory of the Spark runs, e.g. default 4g (default: unset, 1g); "
        "deltalake runs only with 'default'",
    )
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument(
        "--report",
        action="store_true",
        help="run nothing: write transports.md and the CSVs again from the parts' saved results "
        "(bench/data/transports/<part>.json, each with when and at what load it was measured)",
    )
    a = p.parse_args(argv)
    rows = a.rows or (200_000 if a.quick else 5_000_000)
    reps = a.reps or (1 if a.quick else 3)
    sizes = a.big or ([rows * 2 // 5, rows * 2] if a.quick else [2_000_000, 10_000_000])
    timeout = a.timeout or (300 if a.quick else 900)
    parts = a.only or ["dags", "merge", "big"]
    suffix = "" if a.memory == ["default"] else "-" + "-".join(a.memory)
    mode = "-quick" if a.quick else ""
    out = Path(a.out) if a.out else (HERE / "data" / "results-quick" if a.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    DATA.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.time()
    saved = {"dags": f"dags{mode}.json", "merge": f"merge{mode}.json", "big": f"big{mode}{suffix}.json"}
    failed: dict[str, str] = {}
    runners = {
        "dags": lambda: dags(a.quick, timeout),
        "merge": lambda: merge50k(rows, reps),
        "big": lambda: big(rows, sizes, timeout, tuple(a.memory)),
    }
    for name in [] if a.report else parts:
        load0, t0, commit0 = os.getloadavg()[0], time.time(), _commit()
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        try:
            res = runners[name]()
        except Exception as e:  # reported in the md; the other parts still run
            import traceback

            traceback.print_exc()
            failed[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
            continue
        record = {
            "measured_at": when,
            "load": [load0, os.getloadavg()[0]],
            "seconds": None,
            "rows": rows,
            "timeout": timeout,
            "commit": commit0 if _commit() == commit0 else f"{commit0} -> {_commit()} (commits landed during the part)",
            "dirty": _dirty(),
            "result": res,
        }
        record["seconds"] = round(time.time() - t0)
        (DATA / saved[name]).write_text(json.dumps(record, indent=1, default=str))
    shown = [(n, saved[n], suffix) for n in ("dags", "merge", "big") if not a.report or (DATA / saved[n]).exists()]
    shown = [x for x in shown if a.report or x[0] in parts]
    if a.report:  # part 3 measured again with other driver memories (--memory): after the default one
        for path in sorted(DATA.glob(f"big{mode}-*.json")):
            extra = path.stem[len(f"big{mode}") :]
            if not extra.startswith("-quick"):  # a full report leaves the quick runs out
                shown.append(("big", path.name, extra))
    md = [
        "# Transports: spark-submit vs Spark Connect (`python -m bench.transports`)",
        "",
        f"Generated by `make bench`{' --quick' if a.quick else ''}. "
        "Ratios above 1: the first named is slower. Nothing asserts a time.",
        "",
    ]
    titles = {"dags": "1. Per-task wall time", "merge": "2. The 50k-row MERGE", "big": "3. MERGE with large sources"}
    for name, file, sfx in shown:
        if name in failed:
            md += [f"## {titles[name]}", "", f"**Not measured**: {failed[name]}", ""]
            continue
        rec = _load(DATA / file)
        res = rec["result"]
        if name == "dags":
            r, lines = dag_rows(res)
            _write_csv(out / "transport_tasks.csv", r)
        elif name == "merge":
            r, lines = merge_rows(res)
            _write_csv(out / "transport_merge.csv", r)
        else:
            _write_csv(out / f"transport_big_merge{sfx}.csv", [{k: v for k, v in x.items() if k != "log"} for x in res])
            lines = big_md(rec.get("rows") or rows, res, rec.get("timeout") or timeout, "3" if not sfx else "3b")
        load = rec.get("load") or [None, None]
        stamp = f"*Measured {rec.get('measured_at')}"
        if load[0] is not None and load[1] is not None:
            stamp += f", load average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end"
        stamp += f", commit {rec.get('commit') or '?'}"
        stamp += f", product files changed since: {rec['dirty']}" if rec.get("dirty") else ""
        stamp += f". {rec['note']}*" if rec.get("note") else "*"
        lines = lines[:2] + [stamp, ""] + lines[2:]
        md += lines + [""]
        print("\n".join(lines), flush=True)
    from .report import machine_info

    info = machine_info()
    info.pop("repo commit", None)  # each part says its own
    md += ["## Machine", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in info.items()]
    md += [""]
    name = (
        "transports.md" if a.report or parts == ["dags", "merge", "big"] else f"transports-{'-'.join(parts)}{suffix}.md"
    )
    (out / name).write_text("\n".join(md))
    _log(f"wrote {out / name} ({time.time() - started:.0f} s)")
    return 1 if failed else 0


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
    except OSError:
        return ""


def _load(path: Path) -> dict:
    """A part's saved record; a bare result (saved before records had their time) gets the file's."""
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "result" in data and "measured_at" in data:
        return data
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
    return {"measured_at": f"{when} (file time)", "result": data}


if __name__ == "__main__":
    sys.exit(main())
