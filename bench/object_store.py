"""Object-store bench: commits and appends on an S3 server on loopback (moto, the tests' server),
ours beside our own local-disk numbers and beside deltalake on the same server
(``python -m bench.object_store [--quick]``; ``make bench`` runs it after the maintenance bench).

Cases (issue 18, item 6), each the median of ``--reps`` timed runs after one untimed run, one engine
after the other, each on a table of its own:

* **small commit**: open the table and append 100 rows in this process (ours ``append_arrow``,
  deltalake ``write_deltalake(mode="append")``): one data file, one commit with the store's
  conditional create (our first commit per bucket also pays the one-time probe, outside the timer);
* **1M-row append**: 1,000,000 rows (int64, float64, string; ~20 MB of parquet) in one call;
* **open**: the latest snapshot of a 50-commit table (ours ``load_snapshot``, deltalake
  ``DeltaTable``).

moto is a Python server, slower than S3 per request: the ratios to deltalake on the same server are
what carry over, not the absolute times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent / "tests"))


def _median_ms(fn, reps: int) -> float:
    fn()  # untimed: connection pools, imports, the probe
    xs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.object_store")
    ap.add_argument("--quick", action="store_true", help="fewer reps, 200k rows instead of 1M")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    reps = a.reps or (3 if a.quick else 7)
    rows = 200_000 if a.quick else 1_000_000

    import deltalake
    import numpy as np
    import pyarrow as pa
    from object_store_servers import S3Server

    from airflow_delta_provider_apps.engine.commands.create_table import create_table
    from airflow_delta_provider_apps.engine.commands.write import append_arrow
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for

    server = S3Server()
    os.environ.update(server.env())
    options = {**server.env(), "conditional_put": "etag"}
    local = tempfile.mkdtemp(prefix="bench-objstore-")
    rng = np.random.default_rng(5)
    small = pa.table({"id": np.arange(100, dtype="int64"), "v": rng.random(100), "s": ["x"] * 100})
    big = pa.table(
        {
            "id": np.arange(rows, dtype="int64"),
            "v": rng.random(rows),
            "s": pa.array([f"name-{i % 1000}" for i in range(rows)]),
        }
    )
    rows_out = []
    try:

        def tables(tag: str) -> tuple[str, str, str]:
            bucket = server.new_bucket()
            ours_s3, theirs_s3 = f"s3://{bucket}/ours_{tag}", f"s3://{bucket}/theirs_{tag}"
            ours_local = os.path.join(local, f"ours_{tag}")
            for root in (ours_s3, ours_local):
                append_arrow_create(root, small)
            deltalake.write_deltalake(theirs_s3, small, storage_options=options)
            return ours_s3, theirs_s3, ours_local

        def append_arrow_create(root, data):
            create_table(root, schema="id BIGINT, v DOUBLE, s STRING")
            append_arrow(root, data)

        for name, data, n in (
            ("small commit (open + 100 rows + commit)", small, reps),
            (f"{rows:,}-row append", big, max(3, reps // 2)),
        ):
            ours_s3, theirs_s3, ours_local = tables("c" if data is small else "a")
            t_ours = _median_ms(lambda r=ours_s3, d=data: append_arrow(r, d), n)
            t_theirs = _median_ms(
                lambda r=theirs_s3, d=data: deltalake.write_deltalake(r, d, mode="append", storage_options=options), n
            )
            t_local = _median_ms(lambda r=ours_local, d=data: append_arrow(r, d), n)
            rows_out.append((name, t_ours, t_theirs, t_local))
            # deltalake reads every row we appended (the setup's 100, the untimed run and the timed ones)
            expected = small.num_rows + (n + 1) * data.num_rows
            got = deltalake.DeltaTable(ours_s3, storage_options=options).to_pyarrow_table().num_rows
            assert got == expected, (name, got, expected)

        ours_s3, theirs_s3, ours_local = tables("open")
        for _ in range(49):
            append_arrow(ours_s3, small)
            append_arrow(ours_local, small)
            deltalake.write_deltalake(theirs_s3, small, mode="append", storage_options=options)
        t_ours = _median_ms(lambda: load_snapshot(storage_for(ours_s3), ours_s3).files.num_rows, reps)
        t_theirs = _median_ms(
            lambda: deltalake.DeltaTable(theirs_s3, storage_options=options).get_add_actions().num_rows, reps
        )
        t_local = _median_ms(lambda: load_snapshot(storage_for(ours_local), ours_local).files.num_rows, reps)
        rows_out.append(("open, 50 commits (no checkpoint)", t_ours, t_theirs, t_local))
    finally:
        server.stop()
        shutil.rmtree(local, ignore_errors=True)

    lines = [
        "# Object stores: S3 (moto on loopback) beside local disk and deltalake",
        "",
        f"Median of {reps} runs (appends of {rows:,} rows: {max(3, reps // 2)}), one untimed run first; see bench/object_store.py.",
        "",
        "| case | ours on S3 (ms) | deltalake on S3 (ms) | ours / deltalake | ours on local disk (ms) | S3 / local |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, o, t, loc in rows_out:
        lines.append(f"| {name} | {o:.1f} | {t:.1f} | {o / t:.2f}x | {loc:.1f} | {o / loc:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("object_store.md" if not a.quick else "object_store-quick.md")).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
