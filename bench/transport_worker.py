"""One MERGE in a fresh process, for the transport bench (bench/transports.py), which measures this
process's tree from outside (bench/procmem.py).

``python -m bench.transport_worker '<job json>'``; job keys: ``engine`` (``spark-submit``,
``connect`` or ``deltalake``), ``table`` (the target's path), ``source`` (a Parquet file or
folder), ``predicate``, ``clauses`` (the provider's clause dicts: ``when``, ``then``, ``set``,
``values``, ``condition``), ``conn_id`` (the Airflow connection of the two Spark transports, from
an ``AIRFLOW_CONN_*`` variable the parent sets), ``spark_conf`` (the hook's, e.g. ``spark.driver.memory``).

* ``spark-submit`` / ``connect``: ``DeltaHook(conn_id).run("merge", table, source=..., source_format="parquet",
  predicate=..., clauses=...)``, exactly what a DeltaMergeOperator task does (a spark-submit
  application with its own driver JVM, or a Spark Connect client with the engine in this process);
* ``deltalake``: ``DeltaTable(table).merge(source=<a reader streaming the Parquet source>, ...)``
  with the same clauses (``streamed_exec`` left at its default, True).

Last stdout line: ``{"status": "ok", "seconds": <the call's wall time>, "result": {...}}`` or
``{"status": "error", "error": "<one line>"}``; the timer covers the call only (not the
interpreter's start or the imports).
"""

from __future__ import annotations

import json
import sys
import time


def _deltalake(job: dict) -> dict:
    import deltalake
    import pyarrow.dataset as ds

    reader = ds.dataset(job["source"], format="parquet").scanner().to_reader()
    b = deltalake.DeltaTable(job["table"]).merge(
        source=reader, predicate=job["predicate"], source_alias="source", target_alias="target"
    )
    for c in job["clauses"]:
        when, then, cond = c["when"], c["then"], c.get("condition")
        kw = {"predicate": cond} if cond else {}
        if then == "update":
            b = b.when_matched_update(updates=c["set"], **kw)
        elif then == "insert":
            b = b.when_not_matched_insert(updates=c["values"], **kw)
        else:
            b = getattr(b, f"when_{when}_{then}")(**kw)
    m = b.execute()
    return {"metrics": m}


def _hook(job: dict) -> dict:
    from airflow_delta_provider.hooks.delta import DeltaHook

    return DeltaHook(job["conn_id"], spark_conf=job.get("spark_conf") or None).run(
        "merge",
        job["table"],
        source=job["source"],
        source_format="parquet",
        predicate=job["predicate"],
        clauses=job["clauses"],
    )


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    if job["engine"] != "deltalake":
        import airflow_delta_provider.hooks.delta  # noqa: F401  (imports outside the timer)
    else:
        import deltalake  # noqa: F401
    t0 = time.perf_counter()
    try:
        result = _deltalake(job) if job["engine"] == "deltalake" else _hook(job)
    except BaseException as e:
        msg = " ".join(str(e).split())[:3000] or type(e).__name__
        print(
            json.dumps({"status": "error", "error": f"{type(e).__name__}: {msg}", "seconds": time.perf_counter() - t0})
        )
        return 1
    seconds = time.perf_counter() - t0
    print(json.dumps({"status": "ok", "seconds": seconds, "result": result}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
