"""Big MERGE bench (issue 33's targets): a 2M-row upsert into 5M rows, ours beside deltalake and
beside what Spark itself needs for the same work, with peak memory, in one run on the same files.

``python -m bench.big_merge [--quick] [--reps N] [--only SUBSTR ...] [--big]`` (``make bench`` runs
it after the MERGE bench, without ``--big``; ``--no-big-merge`` skips it there).

* **Target**: 5M rows (id long, dt date, v double, s a 64-character string, n long) in 20 files
  written by deltalake (one append each), ids shuffled over the files so that every file spans the
  whole id range; a copy of the same files with ``delta.enableDeletionVectors=true`` committed on
  top by our engine's ``set_properties``. Every repetition runs on a fresh copy (data files
  hard-linked, log copied: ``merge.fresh_copy``).
* **Source**: 2M rows of the same columns, one Parquet file written once: half update distinct
  existing ids (spread over every file), half are new ids. Every engine reads it from that file.
* **Cases**, in a warm local[2] SparkSession of this process (``spark.driver.memory`` unset: 1g):
  ``ours_plain`` / ``ours_dv``: ``DeltaTable.for_path(spark, path).upsert(source, ["id"])``, what the
  merge operator runs with ``key_columns=["id"]`` (update all matched, insert all new, ON
  ``target.id = source.id``, the source's keys checked unique); ``deltalake``: the same upsert with
  ``DeltaTable.merge(...).when_matched_update_all().when_not_matched_insert_all().execute()`` in a
  fresh child process (``bench.transport_worker``: the source streamed from the file), on the plain
  table (deltalake rewrites files either way); ``arrow_plain`` / ``arrow_dv``: ours without Spark,
  ``DeltaTable.for_path(None, path).upsert(pyarrow.parquet.read_table(source), ["id"])`` in this
  process (the source's read inside the timer, as deltalake's is); ``floor_plain``: Spark's own parquet scan of the 20
  files, a full outer join with the source on id, the coalesced columns written as Parquet (no
  Delta log) in ``max(default parallelism, bytes / 128 MiB)`` tasks: what any copy-on-write upsert
  on Spark costs at least; ``floor_dv``: the scan of only ``id`` with ``_metadata.file_path`` and
  ``_metadata.row_index``, the left outer join from the source, the matched positions collected per
  file (what deletion vectors are made of), and the source's rows written as Parquet: the least a
  merge-on-read upsert does.
* **Checks**: after the last repetition deltalake reads ours (plain and DV) and its own result: the
  row count, distinct ids and the sum of ``n`` must agree with each other and with the values the
  generator expects (a wrong result fails the run); the floors' outputs are counted too.
* **Memory**: peak resident set (``VmHWM``) of the JVM, of this Python process and of Spark's
  Python workers during each in-session run (each process's high-water mark reset first through
  ``/proc/<pid>/clear_refs``, then sampled every 0.2 s); deltalake's child is measured from outside
  (``bench/procmem.py``). A warm JVM keeps the heap it grew earlier in the session, so its peak is
  at least what it held when the run started.
* ``--big``: a 10M-row source into 20M rows (1M-row files): ours in a fresh child process (its own
  local[2] session, default 1g driver, one 1000-row warm-up upsert first, a timeout) beside
  deltalake and Spark's plain floor (its own process and session likewise), and ours without Spark
  (``big_arrow``: its own process, no JVM), once each: does it complete, its time and peak memory.
  Opt-in: it takes several minutes on 2 cores; ``--only`` picks among these too.

Medians of ``--reps`` (default 3; the cases alternate, the first one moving each repetition);
``--quick``: 500k rows / 200k source (``--big``: 2M / 1M), one repetition. Results:
``bench/results/big_merge.md`` and ``.csv`` (quick: ``bench/data/results-quick/``). Nothing asserts
a time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from .merge import fresh_copy
from .procmem import MiB, _descendants, _status, run_measured

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data" / "big_merge"
RESULTS = HERE / "results"
QUICK_RESULTS = HERE / "data" / "results-quick"
FILES = 20
COLUMNS = ["id", "dt", "v", "s", "n"]
ON_ID = "target.id = source.id"
UPSERT = [{"when": "matched", "then": "update_all"}, {"when": "not_matched", "then": "insert_all"}]
FILE_BYTES = 128 * MiB  # the output file size the floors aim at (Delta's default target size)
CASES = ["ours_plain", "ours_dv", "arrow_plain", "arrow_dv", "deltalake", "floor_plain", "floor_dv"]
BIG = ["big_ours", "big_arrow", "big_floor", "big_deltalake"]
TITLES = {
    "ours_plain": "ours through Spark local[2] (DataFrame source), plain table",
    "ours_dv": "ours through Spark local[2] (DataFrame source), deletion vectors enabled",
    "arrow_plain": "ours without Spark (Arrow source), plain table",
    "arrow_dv": "ours without Spark (Arrow source), deletion vectors enabled",
    "deltalake": "deltalake (plain table)",
    "floor_plain": "Spark floor: full outer join, write all rows",
    "floor_dv": "Spark floor for deletion vectors: key scan, positions per file, write the source",
    "big_ours": "ours through Spark local[2] (DataFrame source), plain table (own process)",
    "big_arrow": "ours without Spark (Arrow source), plain table (own process)",
    "big_deltalake": "deltalake (own process)",
    "big_floor": "Spark floor: full outer join, write all rows (own process)",
}


def _log(msg: str) -> None:
    print(f"[big_merge {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------
# data (generated in a child process, so that this process's memory is Spark's and our engine's only)


def _table(ids, n_offset: int, seed: int):
    """Rows for ``ids``: dt = 2026-01-01 + id % 20, v random, s 64 random characters, n = id % 100
    + ``n_offset`` (the source's n differs from the target's, so a missed update changes the sums)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    m = len(ids)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    data = letters[rng.integers(0, len(letters), size=m * 64)].tobytes()
    offsets = np.arange(0, 64 * (m + 1), 64, dtype=np.int32)
    s = pa.StringArray.from_buffers(m, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))
    day0 = int((np.datetime64("2026-01-01") - np.datetime64("1970-01-01")).astype(np.int64))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "dt": pa.array((day0 + ids % 20).astype(np.int32), pa.int32()).cast(pa.date32()),
            "v": pa.array(rng.random(m), pa.float64()),
            "s": s,
            "n": pa.array(ids % 100 + n_offset, pa.int64()),
        }
    )


def prepare(rows: int, n: int) -> dict:
    """The target (deltalake, ``FILES`` appends of shuffled ids), its deletion-vector copy and the
    source (cached by size); returns their paths, the target's file URIs and the expected checksums."""
    import deltalake
    import numpy as np
    import pyarrow.parquet as pq

    base = DATA / f"target_{rows}"
    if not (base / "done").exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        perm = np.random.default_rng(1).permutation(rows).astype(np.int64)
        for i, chunk in enumerate(np.array_split(perm, FILES)):
            deltalake.write_deltalake(str(base / "t"), _table(chunk, 0, 100 + i), mode="append")
        (base / "done").write_text("ok")
    target = str(base / "t")
    dv = DATA / f"target_{rows}_dv"
    if not (dv / "done").exists():
        from airflow_delta_provider_apps.engine import DeltaTable

        shutil.rmtree(dv, ignore_errors=True)
        dv.mkdir(parents=True)
        fresh_copy(target, dv / "t")
        DeltaTable.for_path(None, str(dv / "t")).set_properties({"delta.enableDeletionVectors": "true"})
        (dv / "done").write_text("ok")
    updates = min(n // 2, rows)
    source = DATA / f"source_{n}_into_{rows}.parquet"
    if not source.with_suffix(".done").exists():
        picked = np.random.default_rng(2).choice(rows, size=updates, replace=False).astype(np.int64)
        ids = np.concatenate([picked, np.arange(rows, rows + n - updates, dtype=np.int64)])
        with pq.ParquetWriter(str(source), _table(ids[:1], 1, 0).schema) as w:
            for start in range(0, n, 1_000_000):
                w.write_table(_table(ids[start : start + 1_000_000], 1, 200 + start), row_group_size=500_000)
        source.with_suffix(".done").write_text("ok")
    new = np.arange(rows, rows + n - updates, dtype=np.int64)
    all_ids = np.arange(rows, dtype=np.int64)
    expected = {
        "rows": rows + len(new),
        "ids": rows + len(new),
        "sum_n": int((all_ids % 100).sum()) + updates + int((new % 100 + 1).sum()),
    }
    return {
        "target": target,
        "target_dv": str(dv / "t"),
        "source": str(source),
        "files": deltalake.DeltaTable(target).file_uris(),
        "target_bytes": sum(os.path.getsize(p) for p in deltalake.DeltaTable(target).file_uris()),
        "source_bytes": source.stat().st_size,
        "updates": updates,
        "inserts": len(new),
        "expected": expected,
    }


def checksums(paths: list[str]) -> list[dict]:
    """Rows, distinct ids and the sum of ``n`` of each table, read by deltalake (DataFusion SQL)."""
    import deltalake

    out = []
    for p in paths:
        try:
            qb = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(p))
            r = qb.execute("SELECT count(*) AS r, count(DISTINCT id) AS i, sum(n) AS s FROM t").read_all()
            out.append({"rows": r["r"][0].as_py(), "ids": r["i"][0].as_py(), "sum_n": r["s"][0].as_py()})
        except Exception as e:  # reported in the table, and the run fails
            out.append({"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"})
    return out


def _child(job: dict) -> dict:
    """``job`` run by ``python -m bench.big_merge --worker`` in a fresh process; its JSON answer."""
    cmd = [sys.executable, "-m", "bench.big_merge", "--worker", json.dumps(job)]
    p = subprocess.run(cmd, cwd=str(REPO), capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{job['kind']} failed (exit {p.returncode}): {(p.stderr or p.stdout)[-2000:]}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------------------------------
# peak memory of this process's tree


def _clear_peak(pid: int) -> bool:
    """Reset the process's ``VmHWM`` to its current resident set (Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Peaks:
    """Peak resident memory of this process (``python``), its JVM (``jvm``) and Spark's Python workers
    (``worker``: the largest one; ``workers_sum``: the largest sampled sum) over a ``with`` block:
    every process's high-water mark is reset on entry, then read every ``interval`` seconds (a process
    that starts during the block starts with its own). ``reset`` says whether the reset worked (if not,
    the peaks are since each process started)."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.hwm: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.workers_sum = 0
        self.reset = True
        self._stop = threading.Event()

    def _role(self, pid: int, name: str) -> str:
        return "python" if pid == os.getpid() else "jvm" if name == "java" else "worker"

    def _sample(self) -> None:
        total = 0
        for pid in _descendants(os.getpid()):
            name, st = _status(pid)
            if not st:
                continue
            self.roles.setdefault(pid, self._role(pid, name))
            self.hwm[pid] = max(self.hwm.get(pid, 0), st.get("VmHWM", 0) * 1024)
            if self.roles[pid] == "worker":
                total += st.get("VmRSS", 0) * 1024
        self.workers_sum = max(self.workers_sum, total)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Peaks:
        for pid in _descendants(os.getpid()):
            self.reset = _clear_peak(pid) and self.reset
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def result(self) -> dict:
        def peak(role):
            v = [h for pid, h in self.hwm.items() if self.roles.get(pid) == role]
            return round(max(v) / MiB, 1) if v else None

        return {
            "peak_jvm_mib": peak("jvm"),
            "peak_python_mib": peak("python"),
            "peak_worker_mib": peak("worker"),
            "peak_workers_sum_mib": round(self.workers_sum / MiB, 1) if self.workers_sum else None,
        }


# --------------------------------------------------------------------------------------------------
# the cases


def _session():
    from . import dataplane as dp

    spark = dp._session()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ours(spark, table: str, source: str) -> dict:
    """The upsert as the merge operator runs it with ``key_columns=["id"]``."""
    from airflow_delta_provider_apps.engine import DeltaTable

    return DeltaTable.for_path(spark, table).upsert(spark.read.parquet(source), ["id"])


def _arrow(table: str, source: str) -> dict:
    """The same upsert without Spark: the source read from its file by pyarrow, merged in this process."""
    import pyarrow.parquet as pq

    from airflow_delta_provider_apps.engine import DeltaTable

    return DeltaTable.for_path(None, table).upsert(pq.read_table(source), ["id"])


def _floor_plain(spark, prep: dict, out: str) -> dict:
    """Spark without Delta: scan the 20 files, full outer join with the source, coalesce the columns
    (source first: an upsert), write every row."""
    from pyspark.sql import functions as F

    t = spark.read.parquet(*prep["files"]).alias("t")
    s = spark.read.parquet(prep["source"]).alias("s")
    joined = s.join(t, F.col("s.id") == F.col("t.id"), "full_outer")
    rows = joined.select(*[F.coalesce(F.col(f"s.{c}"), F.col(f"t.{c}")).alias(c) for c in COLUMNS])
    parts = _write_tasks(spark, prep["target_bytes"] + prep["source_bytes"])
    rows.coalesce(parts).write.mode("overwrite").parquet(out)
    return {"write_tasks": parts}


def _floor_dv(spark, prep: dict, out: str) -> dict:
    """Spark's least work for a merge-on-read upsert: the target's key column with each row's file and
    position, joined from the source; the matched positions collected per file; the source's rows
    (updated and inserted) written."""
    from pyspark.sql import functions as F

    keys = spark.read.parquet(*prep["files"]).select(
        "id", F.col("_metadata.file_path").alias("file"), F.col("_metadata.row_index").alias("pos")
    )
    s = spark.read.parquet(prep["source"])
    per_file = (
        s.select("id")
        .join(keys, "id", "left_outer")
        .where(F.col("file").isNotNull())
        .groupBy("file")
        .agg(F.count("*").alias("matched"), F.collect_list("pos").alias("positions"))
        .toArrow()
    )
    parts = _write_tasks(spark, prep["source_bytes"])
    s.coalesce(parts).write.mode("overwrite").parquet(out)
    return {"files": per_file.num_rows, "matched": sum(per_file.column("matched").to_pylist()), "write_tasks": parts}


def _warm_prep(prep: dict, source: str) -> dict:
    """``prep`` cut to one target file and the small ``source``: what a floor's warm-up runs on."""
    return {**prep, "files": prep["files"][:1], "source": source, "source_bytes": 0, "target_bytes": 0}


def _write_tasks(spark, nbytes: int) -> int:
    """At least the default parallelism (both cores write), else one task per 128 MiB of output."""
    return max(spark.sparkContext.defaultParallelism, -(-nbytes // FILE_BYTES))


def _parquet_rows(folder: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(str(p)).num_rows for p in Path(folder).glob("*.parquet"))


def _deltalake(table: str, source: str, log: Path, timeout: float) -> dict:
    """deltalake's upsert in a fresh child process (``bench.transport_worker``), measured from outside."""
    job = {"engine": "deltalake", "table": table, "source": source, "predicate": ON_ID, "clauses": UPSERT}
    m = run_measured(
        [sys.executable, "-m", "bench.transport_worker", json.dumps(job)],
        cwd=str(REPO),
        timeout=timeout,
        log_path=log,
    )
    out = {
        "status": m.status,
        "seconds": (m.result or {}).get("seconds") if m.status == "ok" else None,
        "peak_python_mib": round(m.peak["task"] / MiB, 1) if m.peak.get("task") else None,
        "ru_maxrss_mib": round(m.ru_maxrss / MiB, 1),
        "error": m.error,
    }
    metrics = ((m.result or {}).get("result") or {}).get("metrics") or {}
    out["note"] = (
        f"{metrics.get('num_target_rows_updated')} updated, {metrics.get('num_target_rows_inserted')} inserted, "
        f"{metrics.get('num_target_files_removed')} files rewritten, {metrics.get('num_target_files_added')} added"
        if metrics
        else ""
    )
    return out


def _ours_note(r: dict) -> str:
    dvs = r.get("numTargetDeletionVectorsAdded")
    return (
        f"{r.get('numTargetRowsUpdated')} updated, {r.get('numTargetRowsInserted')} inserted, "
        f"{r.get('numTargetRowsCopied')} copied; files read {r.get('numTargetFilesAfterSkipping')}/"
        f"{r.get('numTargetFilesBeforeSkipping')}, removed {r.get('numTargetFilesRemoved')}, "
        f"added {r.get('numTargetFilesAdded')}"
        + (f", {dvs} deletion vectors" if dvs else "")
        + f"; executionTimeMs {r.get('executionTimeMs')} (scan {r.get('scanTimeMs')}, "
        f"rewrite {r.get('rewriteTimeMs')})"
    )


def run(rows: int, n: int, reps: int, only: list[str] | None, timeout: float) -> dict:
    """The main cases (see the module docstring); returns the rows of the table and the checks."""
    wanted = [c for c in CASES if not only or any(o in c for o in only)]
    _log(f"preparing the {rows:,}-row target and the {n:,}-row source (cached) ...")
    prep = _child({"kind": "prepare", "rows": rows, "n": n})
    work = DATA / "work"
    spark = _session()
    samples: dict[str, list[dict]] = {c: [] for c in wanted}
    try:
        # warm: Python workers, both strategies of ours, deletion vectors, the floors' code paths
        warm_src = str(work / "warm_source")
        spark.read.parquet(prep["source"]).limit(1000).write.mode("overwrite").parquet(warm_src)
        if any(c.startswith("ours") for c in wanted):
            for base in (prep["target"], prep["target_dv"]):
                _ours(spark, fresh_copy(base, work / "warm"), warm_src)
            spark.conf.set("spark.airflowDelta.merge.maxSourceBytes", "1")  # the join
            try:
                _ours(spark, fresh_copy(prep["target"], work / "warm"), warm_src)
            finally:
                spark.conf.unset("spark.airflowDelta.merge.maxSourceBytes")
        if any(c.startswith("arrow") for c in wanted):
            for base in (prep["target"], prep["target_dv"]):
                _arrow(fresh_copy(base, work / "warm"), warm_src)
        if any(c.startswith("floor") for c in wanted):
            small = _warm_prep(prep, warm_src)
            _floor_plain(spark, small, str(work / "warm_floor"))
            _floor_dv(spark, small, str(work / "warm_floor"))
        for i in range(reps):
            for case in wanted[i % len(wanted) :] + wanted[: i % len(wanted)]:
                s = _one(spark, case, prep, work, timeout)
                _log(f"rep {i + 1}/{reps} {case}: {json.dumps(s, default=str)[:600]}")
                samples[case].append(s)
        checks = _checks(prep, work, wanted, samples)
    finally:
        spark.stop()
    return {"prep": prep, "samples": samples, "checks": checks}


def _one(spark, case: str, prep: dict, work: Path, timeout: float) -> dict:
    if case == "deltalake":
        table = fresh_copy(prep["target"], work / "deltalake")
        return _deltalake(table, prep["source"], DATA / "logs" / "deltalake.log", timeout)
    if case.startswith(("ours", "arrow")):
        table = fresh_copy(prep["target_dv" if case.endswith("_dv") else "target"], work / case)
    else:
        table = str(work / case)
        shutil.rmtree(table, ignore_errors=True)
    out: dict = {"status": "ok"}
    try:
        with Peaks() as peaks:
            t0 = time.perf_counter()
            if case.startswith(("ours", "arrow")):
                r = _ours(spark, table, prep["source"]) if case.startswith("ours") else _arrow(table, prep["source"])
                out["strategy"] = r.get("strategy", "")
                out["metrics"] = r.get("metrics", {})
                out["note"] = _ours_note(r)
            else:
                out.update((_floor_plain if case == "floor_plain" else _floor_dv)(spark, prep, table))
            out["seconds"] = time.perf_counter() - t0
    except Exception as e:  # a failed run is a row, not a crash
        out = {"status": "failed", "error": f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"}
    out.update(peaks.result())
    out["peak_reset"] = peaks.reset
    if case.startswith("floor"):  # no Python worker runs: theirs would be the idle ones of ours
        out["peak_worker_mib"] = out["peak_workers_sum_mib"] = None
    return out


def _checks(prep: dict, work: Path, wanted: list[str], samples: dict) -> dict:
    """deltalake's checksums of the merged tables, the floors' row counts; ``ok`` False on any mismatch."""
    exp = prep["expected"]
    tables = [c for c in ("ours_plain", "ours_dv", "arrow_plain", "arrow_dv", "deltalake") if c in wanted]
    tables = [c for c in tables if samples[c][-1]["status"] == "ok"]
    sums = _child({"kind": "checksums", "paths": [str(work / t) for t in tables]})["checksums"] if tables else []
    out = {"expected": exp, "tables": dict(zip(tables, sums, strict=True)), "problems": []}
    for t, got in out["tables"].items():
        if got != exp:
            out["problems"].append(f"{t}: {got} (expected {exp})")
    if "floor_plain" in wanted and samples["floor_plain"][-1]["status"] == "ok":
        got = _parquet_rows(str(work / "floor_plain"))
        out["floor_plain_rows"] = got
        if got != exp["rows"]:
            out["problems"].append(f"floor_plain wrote {got} rows (expected {exp['rows']})")
    if "floor_dv" in wanted and samples["floor_dv"][-1]["status"] == "ok":
        matched = samples["floor_dv"][-1]["matched"]
        if matched != prep["updates"]:
            out["problems"].append(f"floor_dv matched {matched} rows (expected {prep['updates']})")
    out["ok"] = not out["problems"]
    return out


# --------------------------------------------------------------------------------------------------
# --big: ours and deltalake in fresh processes


def _big_worker(job: dict) -> dict:
    """In the child: a local[2] session (default memory; none for ``big_arrow``), one warm-up on 1000
    source rows (ours: an upsert on a scratch copy; the floor: its own query), then the timed run with
    its peaks (``big_ours`` our upsert, ``big_arrow`` ours without Spark, ``big_floor`` Spark's floor
    on the same files)."""
    kind = job["kind"]
    spark = None if kind == "big_arrow" else _session()
    work = Path(job["work"])
    prep = job["prep"]
    src = str(work / "warm_source")
    if spark is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        Path(src).mkdir(parents=True, exist_ok=True)
        first = next(pq.ParquetFile(prep["source"]).iter_batches(1000))
        pq.write_table(pa.Table.from_batches([first]), f"{src}/part-0.parquet")
    else:
        spark.read.parquet(prep["source"]).limit(1000).write.mode("overwrite").parquet(src)
    if kind in ("big_ours", "big_arrow"):
        warm = work / "warm"
        if spark is None:
            _arrow(fresh_copy(prep["target"], warm), src)
        else:
            _ours(spark, fresh_copy(prep["target"], warm), src)
        shutil.rmtree(warm, ignore_errors=True)
        table = fresh_copy(prep["target"], work / kind.removeprefix("big_"))
    else:  # one file and the small source, as the in-session warm-up
        small = _warm_prep(prep, src)
        _floor_plain(spark, small, str(work / "floor_warm"))
    # the warm-up's upsert is merged file by file in this process's threads (a local master), and
    # Arrow's allocator keeps what it freed: handed back, so that the peak is the timed run's
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    with Peaks() as peaks:
        t0 = time.perf_counter()
        if kind == "big_ours":
            r = _ours(spark, table, prep["source"])
        elif kind == "big_arrow":
            r = _arrow(table, prep["source"])
        else:
            r = _floor_plain(spark, prep, str(work / "floor"))
        seconds = time.perf_counter() - t0
    if kind == "big_floor":
        r["rows"] = _parquet_rows(str(work / "floor"))
        r["note"] = f"{r['rows']:,} rows written; {_floor_note(r)}"
    if spark is not None:
        spark.stop()
    return {
        "seconds": seconds,
        "strategy": r.get("strategy", ""),
        "note": r["note"] if kind == "big_floor" else _ours_note(r),
        "metrics": r.get("metrics", {}),
        "rows": r.get("rows"),
        **peaks.result(),
    }


def run_big(rows: int, n: int, timeout: float, only: list[str] | None = None) -> dict:
    """The ``--big`` case: ours (own process, 1g driver), ours without Spark, Spark's floor and
    deltalake, one run each (those of ``only`` when given)."""
    _log(f"--big: preparing the {rows:,}-row target and the {n:,}-row source (cached) ...")
    prep = _child({"kind": "prepare", "rows": rows, "n": n})
    work = DATA / "big_work"
    samples = {}
    wanted = [c for c in BIG if not only or any(o in c for o in only)]
    for kind in [k for k in wanted if k != "big_deltalake"]:
        _log(f"--big: {kind} (timeout {timeout:.0f} s) ...")
        job = {"kind": kind, "prep": prep, "work": str(work)}
        m = run_measured(
            [sys.executable, "-m", "bench.big_merge", "--worker", json.dumps(job)],
            cwd=str(REPO),
            timeout=timeout,
            log_path=DATA / "logs" / f"{kind.replace('_', '-')}.log",
        )
        r = m.result or {}
        samples[kind] = {
            "status": m.status,
            "error": m.error,
            **r,
            # the whole child (session start and warm-up included), from outside: a failed run's peaks
            "process_peak_jvm_mib": round(m.peak.get("jvm", 0) / MiB, 1) or None,
            "process_peak_python_mib": round(m.peak.get("task", 0) / MiB, 1) or None,
        }
        if m.status != "ok":
            samples[kind].update(
                peak_jvm_mib=samples[kind]["process_peak_jvm_mib"],
                peak_python_mib=samples[kind]["process_peak_python_mib"],
            )
        _log(f"--big {kind}: {json.dumps(samples[kind], default=str)[:600]}")
    if "big_deltalake" in wanted:
        _log(f"--big: deltalake (timeout {timeout:.0f} s) ...")
        table = fresh_copy(prep["target"], work / "deltalake")
        samples["big_deltalake"] = _deltalake(table, prep["source"], DATA / "logs" / "big-deltalake.log", timeout)
        _log(f"--big deltalake: {json.dumps(samples['big_deltalake'], default=str)[:600]}")
    tables = [c for c in ("ours", "arrow", "deltalake") if samples.get(f"big_{c}", {}).get("status") == "ok"]
    floor = samples.get("big_floor", {})
    sums = _child({"kind": "checksums", "paths": [str(work / t) for t in tables]})["checksums"] if tables else []
    checks = {"expected": prep["expected"], "tables": dict(zip(tables, sums, strict=True)), "problems": []}
    for t, got in checks["tables"].items():
        if got != prep["expected"]:
            checks["problems"].append(f"big {t}: {got} (expected {prep['expected']})")
    if floor.get("status") == "ok" and floor.get("rows") != prep["expected"]["rows"]:
        checks["problems"].append(f"big floor: {floor.get('rows')} rows written (expected {prep['expected']['rows']})")
    checks["ok"] = not checks["problems"]
    shutil.rmtree(work, ignore_errors=True)
    return {"prep": prep, "samples": samples, "checks": checks}


# --------------------------------------------------------------------------------------------------
# report


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _max(xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def summarize(res: dict, big: dict | None) -> list[dict]:
    """One row per case: median seconds, the largest peaks over the repetitions, ratios."""
    rows = []
    for case, ss in res["samples"].items() if res else ():
        ok = [s for s in ss if s["status"] == "ok"]
        last = (ok or ss)[-1]
        rows.append(
            {
                "case": case,
                "title": TITLES[case],
                "status": "ok" if len(ok) == len(ss) else f"{len(ss) - len(ok)}/{len(ss)} failed",
                "seconds": _median([s.get("seconds") for s in ok]),
                "runs": len(ok),
                "strategy": last.get("strategy", ""),
                "peak_jvm_mib": _max([s.get("peak_jvm_mib") for s in ss]),
                "peak_python_mib": _max([s.get("peak_python_mib") for s in ss]),
                "peak_worker_mib": _max([s.get("peak_worker_mib") for s in ss]),
                "peak_workers_sum_mib": _max([s.get("peak_workers_sum_mib") for s in ss]),
                "note": last.get("note", "") or last.get("error", "") or _floor_note(last),
                "metrics": json.dumps(last["metrics"]) if last.get("metrics") else "",
            }
        )
    by = {r["case"]: r["seconds"] for r in rows}
    floor = {"ours_plain": "floor_plain", "ours_dv": "floor_dv", "deltalake": "floor_plain"}
    floor.update(arrow_plain="floor_plain", arrow_dv="floor_dv")
    for r in rows:
        s = r["seconds"]
        r["vs_deltalake"] = s / by["deltalake"] if s and by.get("deltalake") and r["case"] != "deltalake" else None
        f = by.get(floor.get(r["case"], ""))
        r["vs_floor"] = s / f if s and f else None
    for case, s in (big or {}).get("samples", {}).items():
        rows.append(
            {
                "case": case,
                "title": TITLES[case],
                "status": s["status"],
                "seconds": s.get("seconds"),
                "runs": 1 if s["status"] == "ok" else 0,
                "strategy": s.get("strategy", ""),
                "peak_jvm_mib": s.get("peak_jvm_mib"),
                "peak_python_mib": s.get("peak_python_mib"),
                "peak_worker_mib": s.get("peak_worker_mib"),
                "peak_workers_sum_mib": s.get("peak_workers_sum_mib"),
                "note": s.get("note") or s.get("error", ""),
                "metrics": json.dumps(s["metrics"]) if s.get("metrics") else "",
                "vs_floor": None,
            }
        )
    bd = (big or {}).get("samples", {}).get("big_deltalake")
    bf = (big or {}).get("samples", {}).get("big_floor")
    for r in rows:
        if r["case"] in ("big_ours", "big_arrow", "big_deltalake"):
            r["vs_floor"] = r["seconds"] / bf["seconds"] if r["seconds"] and bf and bf.get("seconds") else None
        if r["case"] in ("big_ours", "big_arrow", "big_floor"):
            r["vs_deltalake"] = r["seconds"] / bd["seconds"] if r["seconds"] and bd and bd.get("seconds") else None
        elif r["case"] == "big_deltalake":
            r["vs_deltalake"] = None
    return rows


def _floor_note(s: dict) -> str:
    if "matched" in s:
        return f"{s['matched']} positions in {s['files']} files collected; {s['write_tasks']} write tasks"
    if "write_tasks" in s:
        return f"{s['write_tasks']} write tasks"
    return ""


def _f(x, unit: str = "", nd: int = 2) -> str:
    return "-" if x is None else f"{x:,.{nd}f}{unit}"


def write(
    rows: list[dict], res: dict | None, big: dict | None, reps: int, out: Path, runtime: float, load0: float
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    import deltalake
    import pyspark

    load = os.getloadavg()
    md = ["# Big MERGE bench (`python -m bench.big_merge`, issue 33)", ""]
    md.append(
        f"*{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {_commit()}, {os.cpu_count()} cores, "
        f"pyspark {pyspark.__version__}, deltalake {deltalake.__version__}, load average (1 min) at the start / "
        f"end {load0:.2f} / {load[0]:.2f}, {runtime:.0f} s*"
    )
    md.append("")
    if res:
        p = res["prep"]
        md.append(
            f"Target: {p['expected']['rows'] - p['inserts']:,} rows in {len(p['files'])} files written by deltalake "
            f"(id, dt, v, s: 64 characters, n; ids shuffled: every file spans the whole id range); source: "
            f"{p['updates'] + p['inserts']:,} rows from one Parquet file, {p['updates']:,} updating distinct ids "
            f"over every file, {p['inserts']:,} new. Upsert ON id (update all, insert all). Ours (through Spark and "
            f"without it: the Arrow source read inside the timer) and the floors in one warm local[2] session (driver memory unset: 1g), deltalake in a fresh child process; "
            f"median of {reps} (cases alternating, each on a fresh copy of the same files). Peaks (MiB): the "
            "largest over the repetitions of each process's VmHWM during the run (reset at its start); a warm "
            "JVM keeps the heap it grew earlier, so its figure is at least what it held when the run began."
        )
        md.append("")
    md += [
        "| case | status | seconds | vs deltalake | vs floor | strategy | JVM | Python | worker (max one / sum) | note |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        workers = (
            "-"
            if r["peak_worker_mib"] is None
            else f"{r['peak_worker_mib']:,.0f} / {_f(r['peak_workers_sum_mib'], nd=0)}"
        )
        md.append(
            f"| {r['title']} | {r['status']} | {_f(r['seconds'])} | {_f(r['vs_deltalake'], 'x')} | "
            f"{_f(r['vs_floor'], 'x')} | {r['strategy']} | {_f(r['peak_jvm_mib'], nd=0)} | "
            f"{_f(r['peak_python_mib'], nd=0)} | {workers} | {r['note']} |"
        )
    md.append("")
    md.append(
        "*vs floor*: ours plain and deltalake against the Spark floor (scan, full outer join, write all rows, "
        "no Delta log), ours with deletion vectors against the deletion-vector floor (scan of the key with "
        "`_metadata.file_path` / `row_index`, join from the source, positions collected per file, the source "
        "rows written). *Python*: this process for ours and the floors (where our engine plans and commits), "
        "the child's for deltalake."
    )
    for name, r in (("main", res), ("big", big)):
        if not r:
            continue
        c = r["checks"]
        md.append("")
        md.append(
            f"Rows check ({name}, deltalake reads every result; expected {c['expected']}): "
            + ("all equal. " if c["ok"] else "**MISMATCH**: " + "; ".join(c["problems"]) + ". ")
            + "; ".join(f"{t}: {v}" for t, v in c["tables"].items())
        )
    if big:
        p = big["prep"]
        md += [
            "",
            f"`--big`: {p['updates'] + p['inserts']:,}-row source into {p['expected']['rows'] - p['inserts']:,} rows "
            f"({len(p['files'])} files), one run each in a fresh process: ours in its own local[2] session "
            "(default 1g driver, after one 1000-row warm-up upsert; peaks during the timed upsert, or over the "
            "whole process if it failed), ours without Spark (Arrow source) the same way in its own process with "
            "no JVM, Spark's plain floor the same way in its own session, deltalake as above.",
        ]
    text = "\n".join(md) + "\n"
    (out / "big_merge.md").write_text(text)
    keys = ["case", "title", "status", "seconds", "runs", "vs_deltalake", "vs_floor", "strategy"]
    keys += ["peak_jvm_mib", "peak_python_mib", "peak_worker_mib", "peak_workers_sum_mib", "note", "metrics"]
    with open(out / "big_merge.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})
    return text


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=str(REPO), capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"


def worker(job: dict) -> int:
    """``--worker JSON``: one job in this fresh process; prints its JSON answer as the last line."""
    if job["kind"] == "prepare":
        out = prepare(job["rows"], job["n"])
    elif job["kind"] == "checksums":
        out = {"checksums": checksums(job["paths"])}
    else:
        out = _big_worker(job)
    print(json.dumps({"status": "ok", **out}, default=str), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.big_merge", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="500k rows / 200k source (--big: 2M / 1M), one repetition")
    p.add_argument("--reps", type=int, default=None, help="repetitions of the main cases (default 3; quick 1)")
    p.add_argument("--only", nargs="*", default=None, help=f"cases whose id contains one of these: {CASES}")
    p.add_argument("--big", action="store_true", help="also the 10M-row source into 20M rows (ours, deltalake)")
    p.add_argument("--big-only", action="store_true", help="only the --big case")
    p.add_argument("--timeout", type=float, default=None, help="per child process, seconds (default 900; quick 300)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(json.loads(a.worker))
    rows, n = (500_000, 200_000) if a.quick else (5_000_000, 2_000_000)
    big_rows, big_n = (2_000_000, 1_000_000) if a.quick else (20_000_000, 10_000_000)
    reps = a.reps or (1 if a.quick else 3)
    timeout = a.timeout or (300 if a.quick else 900)
    started, load0 = time.time(), os.getloadavg()[0]
    res = None if a.big_only else run(rows, n, reps, a.only, timeout)
    big = run_big(big_rows, big_n, timeout, a.only) if a.big or a.big_only else None
    shutil.rmtree(DATA / "work", ignore_errors=True)
    table = summarize(res, big)
    out = QUICK_RESULTS if a.quick else RESULTS
    if a.only or a.big_only:
        out = DATA / "results-only"
    print(write(table, res, big, reps, out, time.time() - started, load0))
    print(f"wrote {out}/big_merge.md, big_merge.csv ({time.time() - started:.0f} s)")
    ok = (res is None or res["checks"]["ok"]) and (big is None or big["checks"]["ok"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
