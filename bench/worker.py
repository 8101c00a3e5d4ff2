"""One measurement in a fresh process: ``python -m bench.worker '<json job>'``.

The job names an operation, an engine, a table path, op args, ``warmup`` and ``reps``. The worker:

1. imports the engine's modules and times that (``import_ms``, never part of a sample), ours with
   its bytecode up to date first, as installed (:func:`_bytecode_current`);
2. runs the operation once more than ``warmup + reps`` times, each time ``setup()`` outside the
   timer and ``run(state)`` inside it (``time.perf_counter``);
3. reports the first call as ``cold_ms`` (first call in a fresh process: lazy imports and
   initialisation, allocator growth, ...; the OS page cache is warm for both engines), drops
   ``warmup`` samples, keeps ``reps`` samples; CPU time of the process (all threads,
   ``time.process_time``) is recorded next to each wall-clock sample;
4. prints one JSON line: ``{"status": "ok", "cold_ms", "cold_cpu_ms", "samples_ms", "cpu_ms",
   "import_ms", "result"}``,
   or ``{"status": "unavailable", "reason"}`` / ``{"status": "error", "error"}``.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback


def _import_engine(engine: str) -> None:
    if engine == "deltalake":
        import deltalake  # noqa: F401
    else:
        import airflow_delta_provider_apps.engine

        try:
            import airflow_delta_provider_apps.engine.log.snapshot  # noqa: F401
        except ImportError:
            pass
    import pyarrow  # noqa: F401


def _bytecode_current() -> None:
    """Our package's bytecode brought up to date before the import is timed, as an installed wheel has
    it (pip compiles at install; deltalake's files in site-packages have theirs): a source file
    edited since its ``.pyc`` would otherwise be compiled again in every worker, inside the timed
    import, where ``PYTHONDONTWRITEBYTECODE`` is set (up to ~50 ms of a fresh process)."""
    import compileall
    import importlib.util
    import os

    spec = importlib.util.find_spec("airflow_delta_provider_apps")
    if spec is not None and spec.origin:
        compileall.compile_dir(os.path.dirname(spec.origin), quiet=2)


def run_job(job: dict) -> dict:
    from . import engines

    if job["engine"] != "deltalake":
        _bytecode_current()
    t0 = time.perf_counter()
    _import_engine(job["engine"])
    import_ms = (time.perf_counter() - t0) * 1000
    try:
        setup, run = engines.OPS[job["op"]][job["engine"]](job["path"], job.get("args") or {})
    except engines.Unavailable as e:
        return {"status": "unavailable", "reason": str(e)}
    samples, cpu_samples = [], []
    result = None
    cold_ms = cold_cpu_ms = None
    total = 1 + job["warmup"] + job["reps"]
    try:
        for i in range(total):
            state = setup()
            gc.collect()
            c = time.process_time()
            t = time.perf_counter()
            result = run(state)
            ms = (time.perf_counter() - t) * 1000
            cpu = (time.process_time() - c) * 1000
            del state
            if i == 0:
                cold_ms, cold_cpu_ms = ms, cpu
            elif i > job["warmup"]:
                samples.append(ms)
                cpu_samples.append(cpu)
    except engines.Unavailable as e:
        return {"status": "unavailable", "reason": str(e)}
    except Exception as e:  # reported as a row, not hidden
        return {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
    verify = engines.VERIFY.get(job["op"], {}).get(job["engine"])
    if verify is not None and job.get("verify", True):  # correctness, after the timed samples
        try:
            result = dict(result or {}, **verify(job["path"], job.get("args") or {}))
        except Exception as e:
            result = dict(result or {}, verify_error=f"{type(e).__name__}: {e}")
    return {
        "status": "ok",
        "cold_ms": cold_ms,
        "cold_cpu_ms": cold_cpu_ms,
        "samples_ms": samples,
        "cpu_ms": cpu_samples,
        "import_ms": import_ms,
        "result": result,
    }


def main() -> None:
    job = json.loads(sys.argv[1])
    out = run_job(job)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
