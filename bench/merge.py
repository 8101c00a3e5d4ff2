"""MERGE bench: our engine (Spark local[2]) beside deltalake on copies of the same deltalake-written files.

``python -m bench.merge [--quick] [--reps N] [--only SUBSTR ...]`` (``make bench`` runs it after the
data-plane bench). Cases (issue 15, item 8):

* on the data-plane table (5M rows, 20 ``dt`` partitions, every file spanning the whole id range):
  merge 50k rows (half updates, half inserts), plain, with conditions on both clauses and keyed by
  16-character hex strings (a copy of the table with that key column); an upsert into one partition; an insert-only merge;
  a matched-only delete merge; NOT MATCHED BY SOURCE limited to one partition (sync one day);
* the 50k-row upsert (int key, string key, conditional clauses) as ``DeltaMergeOperator`` runs it: the
  app's merge with ``source=`` a Parquet file Spark wrote (:func:`operator_merge`), through Spark
  (this process's local[2] session), over Spark Connect (a ``spark_connect`` task: the engine in this
  process as the client of a local[2] Connect server on loopback started by the bench, its shared
  session warm) and without Spark (``execution="local"``), deltalake reading the same file inside its
  timed call;
* on tables clustered by ``id`` (files of 250k consecutive ids, written by deltalake): an upsert of 1
  row (must touch 1 file), and the same 50k-row merge (updates inside one file's id range, inserts
  beyond the last id) at 1M / 5M / 20M target rows: its cost must follow the touched files, not the
  table's size.

Each repetition runs on a fresh copy (data files hard-linked: Delta never changes a data file in
place; the log copied), the engines alternating, after one untimed warm-up merge each; medians are reported with the files each engine
read and rewrote, and both engines' row counts and sums of ``id``, ``v`` and ``n`` after the merge are
checked equal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from . import dataplane as dp

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "merge"
RESULTS = HERE / "results"
FILE_ROWS = 250_000


def fresh_copy(src: str, dst: Path) -> str:
    """``src`` at ``dst``: data files hard-linked (never modified in place), ``_delta_log`` copied."""
    shutil.rmtree(dst, ignore_errors=True)

    def link(s, d):
        if "_delta_log" in Path(s).parts:
            return shutil.copy2(s, d)
        os.link(s, d)
        return d

    shutil.copytree(src, dst, copy_function=link)
    return str(dst)


def clustered(rows: int) -> str:
    """A deltalake-written table of ``rows`` rows, ids 0..rows-1 in files of FILE_ROWS consecutive ids."""
    import deltalake
    import numpy as np

    path = DATA / f"clustered_{rows}"
    if (path / "done").exists():
        return str(path / "t")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for start in range(0, rows, FILE_ROWS):
        ids = np.arange(start, min(rows, start + FILE_ROWS), dtype=np.int64)
        deltalake.write_deltalake(str(path / "t"), _clustered_rows(ids), mode="append")
    (path / "done").write_text("ok")
    return str(path / "t")


def _clustered_rows(ids):
    import numpy as np
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array((ids * 2654435761 % 1_000_000) / 1e6, pa.float64()),
            "s": pa.array(np.char.add("s", (ids % 1000).astype(str)), pa.string()),
            "n": pa.array(ids % 100, pa.int64()),
        }
    )


def hex_keys(ids):
    """16-character hex keys, one per id (the id's 64-bit multiplicative hash): string keys spread over
    every file, as UUID or hashed business keys are."""
    import numpy as np
    import pyarrow as pa

    hashed = np.asarray(ids, dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return pa.array(np.char.mod("%016x", hashed).astype(object), pa.string())


def string_keyed(base: str) -> str:
    """A deltalake-written copy of the table at ``base`` with a ``key`` string column (:func:`hex_keys`
    of its ids) first, partitioned the same way (cached)."""
    import deltalake

    path = DATA / f"string_keyed_{Path(base).parent.name}"
    if (path / "done").exists():
        return str(path / "t")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    dt = deltalake.DeltaTable(base)
    table = dt.to_pyarrow_table()
    table = table.add_column(0, "key", hex_keys(table.column("id").to_numpy()))
    deltalake.write_deltalake(str(path / "t"), table, partition_by=dt.metadata().partition_columns)
    (path / "done").write_text("ok")
    return str(path / "t")


def column_sums(table: str) -> tuple:
    """The row count and the sums of the numeric columns (``v`` rounded) of a table as deltalake
    reads it: what an upsert that updated or inserted other rows than deltalake's would change."""
    import deltalake
    import pyarrow.compute as pc

    t = deltalake.DeltaTable(table).to_pyarrow_dataset().to_table(columns=["id", "v", "n"])
    return t.num_rows, pc.sum(t["id"]).as_py(), round(pc.sum(t["v"]).as_py() or 0.0, 3), pc.sum(t["n"]).as_py()


def parquet_source(df, name: str) -> str:
    """``df`` written once by Spark as one Parquet file (a folder), as an upstream job leaves a source."""
    path = DATA / "sources" / name
    df.coalesce(1).write.mode("overwrite").parquet(str(path))
    return str(path)


def operator_merge(spark, table: str, source: str, predicate: str, clauses: list, *, connect: str = "") -> dict:
    """The MERGE as ``DeltaMergeOperator`` runs it (the app's merge with its parameter checks, in this
    process on ``spark``: what a task under spark-submit runs; ``spark`` None: ``execution="local"``,
    no Spark; ``connect``: a Connect server's ``sc://`` address, as a ``spark_connect`` task runs it,
    the apps' bundle on the server's shared session), ``source`` a Parquet file; the result with its
    metrics also at the top level."""
    from airflow_delta_provider_apps.cli import run_checked

    params = {
        "source": source,
        "source_format": "parquet",
        "predicate": predicate,
        "clauses": [{"when": w, "then": t, "condition": c} for w, t, c in clauses],
    }
    if connect:
        from airflow_delta_provider.hooks.bundle import build_app_bundle
        from airflow_delta_provider_apps.connect import ConnectRun

        r = ConnectRun(connect, pyfiles=(build_app_bundle().zip_path,)).run("merge", table, params)
    else:
        r = run_checked("merge", table, params, spark_factory=None if spark is None else lambda: spark)
    return {**r["metrics"], **r}


def run(rows: int, reps: int, only: list[str] | None, scale: list[int]) -> list[dict]:
    import deltalake
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from airflow_delta_provider_apps.engine import DeltaTable

    spark = dp._session()
    work = DATA / "work"
    results: list[dict] = []
    connect_state: dict = {}  # the Connect server (started for the first Connect case), and whether it is warm

    def wanted(label: str) -> bool:
        return not only or any(o in label for o in only)

    def connect_url() -> str:
        if "server" not in connect_state:
            from airflow_delta_provider_apps.connect_server import ConnectServer

            connect_state["server"] = ConnectServer()
        return connect_state["server"].url

    def case(
        label,
        base,
        source_df,
        source_arrow,
        predicate,
        clauses,
        ours_base=None,
        key=None,
        source_file=None,
        local=False,
        connect=False,
    ):
        """Time one merge for both engines (alternating, each on a fresh copy of ``base``; ours on a
        copy of ``ours_base`` when given: the same files with deletion vectors enabled). With
        ``source_file`` (``source_df`` written as Parquet) ours runs as the merge operator does (the
        app's merge with ``source=`` the file: :func:`operator_merge`) and deltalake reads the file
        too, inside the timed call; ``local``: without Spark (``execution="local"``: in this process);
        ``connect``: over Spark Connect (the bench's server; its first case warms it untimed).
        ``key``: the row's name for other benches (bench/one_machine.py)."""
        if not wanted(label):
            return
        h = {}
        url = connect_url() if connect else ""

        def ours():
            if source_file is not None:
                return operator_merge(None if local else spark, h["ours"], source_file, predicate, clauses, connect=url)
            b = DeltaTable.for_path(spark, h["ours"]).merge(source_df, predicate)
            for when, then, cond in clauses:
                b = b.clause(when=when, then=then, condition=cond)
            return b.execute()

        def theirs():
            if source_file is not None:
                t = pq.read_table(source_file)
                source = t.cast(dp._rs_schema(t.schema))
            else:
                source = source_arrow
            b = deltalake.DeltaTable(h["rs"]).merge(
                source=source, predicate=predicate, source_alias="source", target_alias="target"
            )
            for when, then, cond in clauses:
                method = getattr(b, f"when_{when}_{then}")
                b = method(predicate=cond) if cond else method()
            return b.execute()

        mine = ours_base or base
        if not results or (connect and not connect_state.get("warm")):
            # warm: the session's first merge starts Spark's Python workers (a Connect server's: its session)
            h.update(ours=fresh_copy(mine, work / "ours"), rs=fresh_copy(base, work / "rs"))
            ours(), theirs()
            connect_state["warm"] = connect_state.get("warm") or connect
        times, outs = dp._alternating(
            {
                "ours": (ours, lambda: h.update(ours=fresh_copy(mine, work / "ours"))),
                "rs": (theirs, lambda: h.update(rs=fresh_copy(base, work / "rs"))),
            },
            reps,
        )
        m, r = outs["ours"], outs["rs"]
        n_ours = DeltaTable.for_path(spark, h["ours"]).to_df().count()
        n_rs = deltalake.DeltaTable(h["rs"]).to_pyarrow_dataset().count_rows()
        assert n_ours == n_rs, (label, n_ours, n_rs)
        sums = {k: column_sums(h[k]) for k in ("ours", "rs")}  # updated values show in the sums
        assert sums["ours"] == sums["rs"], (label, sums)
        vectors = (
            f"; {m.get('numTargetDeletionVectorsAdded', 0)} deletion vectors written, no file rewritten"
            if ours_base and not m["numTargetFilesRemoved"]
            else ""
        )
        note = (
            f"{m['numTargetRowsUpdated']} updated, {m['numTargetRowsDeleted']} deleted, "
            f"{m['numTargetRowsInserted']} inserted; ours read {m['numTargetFilesAfterSkipping']}/"
            f"{m['numTargetFilesBeforeSkipping']} files, rewrote {m['numTargetFilesRemoved']}; deltalake "
            f"scanned {r.get('num_target_files_scanned')}, rewrote {r.get('num_target_files_removed')}; "
            f"{n_ours} rows after{vectors}"
        )
        print(f"{label}: ours {times['ours']:.2f} s, deltalake {times['rs']:.2f} s ({note})", flush=True)
        results.append(
            {
                "case": label,
                "key": key or "",
                "rows_after": n_ours,
                "source_read": m.get("source_read", ""),
                "ours_s": times["ours"],
                "deltalake_s": times["rs"],
                "ours_vs_deltalake": times["ours"] / times["rs"],
                "files_read": m["numTargetFilesAfterSkipping"],
                "files_total": m["numTargetFilesBeforeSkipping"],
                "files_rewritten": m["numTargetFilesRemoved"],
                "note": note,
            }
        )

    def both(df):
        df = df.cache()
        df.count()
        arrow = df.toArrow()
        return df, arrow.cast(dp._rs_schema(arrow.schema))

    upsert = [("matched", "update_all", None), ("not_matched", "insert_all", None)]
    on_day = "target.id = source.id AND target.dt = source.dt"

    # ---- the data-plane table: every file spans the whole id range
    base = dp.build(spark, rows)["rs"]
    half = max(1, rows // 200)
    updates = dp._rows_df(spark, 0, rows).filter("id % 199 = 7").limit(half).withColumn("v", F.col("v") + 1)
    inserts = dp._rows_df(spark, 2 * rows, half)
    src, src_a = both(updates.unionByName(inserts))
    case(f"merge {2 * half} rows (half updates, half inserts) into {rows}", base, src, src_a, on_day, upsert)
    # the same merge as the merge operator runs it, its source a Parquet file (issue 44 item 2)
    src_file = parquet_source(src, "upsert")
    case(
        f"merge {2 * half} rows into {rows}, int key, as the merge operator runs it (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        upsert,
        key="operator_int",
        source_file=src_file,
    )
    case(
        f"merge {2 * half} rows into {rows}, int key, as the merge operator runs it over Spark Connect (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        upsert,
        key="operator_int_connect",
        connect=True,
        source_file=src_file,
    )
    case(
        f"merge {2 * half} rows into {rows}, int key, as the merge operator runs it without Spark (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        upsert,
        key="operator_int_local",
        local=True,
        source_file=src_file,
    )
    from .deletion_vectors import enable_deletion_vectors  # that module imports this one's helpers

    dv_base = fresh_copy(base, DATA / "dv_base")
    enable_deletion_vectors(dv_base)
    case(
        "the same merge with deletion vectors (ours; deltalake rewrites)",
        base,
        src,
        src_a,
        on_day,
        upsert,
        ours_base=dv_base,
    )
    # the same two merges run as Spark joins (a source over the collection cap takes that path)
    spark.conf.set("spark.airflowDelta.merge.maxSourceBytes", "1")
    try:
        case("the same merge as a Spark join (copy-on-write)", base, src, src_a, on_day, upsert)
        case(
            "the same merge as a Spark join with deletion vectors (ours; deltalake rewrites)",
            base,
            src,
            src_a,
            on_day,
            upsert,
            ours_base=dv_base,
        )
    finally:
        spark.conf.unset("spark.airflowDelta.merge.maxSourceBytes")
    # the same upsert with conditions on both clauses (each evaluated per matched pair / lone row)
    conditional = [("matched", "update_all", "source.v > target.v"), ("not_matched", "insert_all", "source.n < 50")]
    case(f"conditional upsert of {2 * half} rows (update if newer, insert some)", base, src, src_a, on_day, conditional)
    case(
        f"conditional upsert of {2 * half} rows, as the merge operator runs it (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        conditional,
        key="operator_conditional",
        source_file=src_file,
    )
    case(
        f"conditional upsert of {2 * half} rows, as the merge operator runs it over Spark Connect (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        conditional,
        key="operator_conditional_connect",
        connect=True,
        source_file=src_file,
    )
    case(
        f"conditional upsert of {2 * half} rows, as the merge operator runs it without Spark (Parquet source)",
        base,
        src,
        src_a,
        on_day,
        conditional,
        key="operator_conditional_local",
        local=True,
        source_file=src_file,
    )
    # the same upsert keyed by a 16-character hex string instead of a long (ids hashed: every file spans them)
    if wanted("string keys") or wanted("by string keys, as the merge operator"):
        k_a = src_a.add_column(0, "key", hex_keys(src_a.column("id").to_numpy()))
        k_src, k_a = both(spark.createDataFrame(k_a))
        on_key = "target.key = source.key AND target.dt = source.dt"
        keyed = string_keyed(base)
        case(f"upsert of {2 * half} rows by string keys", keyed, k_src, k_a, on_key, upsert)
        k_file = parquet_source(k_src, "string_keys")
        for how, title in (("", ""), ("connect", " over Spark Connect"), ("local", " without Spark")):
            case(
                f"upsert of {2 * half} rows by string keys, as the merge operator runs it{title} (Parquet source)",
                keyed,
                k_src,
                k_a,
                on_key,
                upsert,
                key="operator_string" + (f"_{how}" if how else ""),
                local=how == "local",
                connect=how == "connect",
                source_file=k_file,
            )
    day = "DATE '2026-01-05'"
    d_src, d_a = both(updates.unionByName(inserts).filter(f"dt = {day}"))
    case("upsert into one partition of 20", base, d_src, d_a, on_day, upsert)
    i_src, i_a = both(inserts)
    case("insert-only merge", base, i_src, i_a, "target.id = source.id", [("not_matched", "insert_all", None)])
    u_src, u_a = both(updates)
    case(f"matched-only delete merge ({half} rows)", base, u_src, u_a, on_day, [("matched", "delete", None)])
    # sync one day: its rows with 1% gone and 1% changed; rows of that day missing from the source go
    day_rows = dp._rows_df(spark, 0, rows).filter(f"dt = {day}")
    sync = day_rows.filter("id % 97 != 3").withColumn(
        "v", F.when(F.col("id") % 89 == 5, F.col("v") + 1).otherwise(F.col("v"))
    )
    s_src, s_a = both(sync)
    case(
        "NOT MATCHED BY SOURCE limited to one partition (sync one day)",
        base,
        s_src,
        s_a,
        on_day,
        [
            ("matched", "update_all", "source.v != target.v"),
            ("not_matched", "insert_all", None),
            ("not_matched_by_source", "delete", f"target.dt = {day}"),
        ],
    )

    # ---- clustered tables: cost follows the touched files
    def clustered_source(total: int, n: int):
        ids = np.concatenate([np.arange(0, FILE_ROWS, FILE_ROWS // n)[:n], np.arange(total, total + n)])
        t = _clustered_rows(ids)
        t = t.set_column(1, "v", pa.array(np.asarray(t.column("v")) + 1.0))
        return spark.createDataFrame(t.to_pandas()).cache(), t

    for total in scale:
        base_c = clustered(total)
        if total == rows:
            one_df, one_a = clustered_source(total, 1)
            one_df = one_df.limit(1).cache()
            one_a = one_a.slice(0, 1)
            one_df.count()
            case(
                f"upsert 1 row into {total} rows clustered by id",
                base_c,
                one_df,
                one_a,
                "target.id = source.id",
                upsert,
            )
        c_df, c_a = clustered_source(total, half // 2)
        c_df.count()
        case(
            f"merge {2 * (half // 2)} rows into {total} rows clustered by id",
            base_c,
            c_df,
            c_a,
            "target.id = source.id",
            upsert,
        )
    if "server" in connect_state:
        connect_state["server"].stop()
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return results


def save(results: list[dict], rows: int, reps: int, out: Path) -> None:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    lines = [
        "# MERGE bench (`python -m bench.merge`)",
        "",
        f"Ours: Spark local[2], warm session; deltalake {_rs_version()}; median of {reps}, engines alternating, "
        f"each on a fresh copy of the same deltalake-written files. Load average at the end: {load[0]:.1f}.",
        "",
        "| case | ours | deltalake | ours / deltalake | files read (ours) | files rewritten (ours) | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['case']} | {r['ours_s']:.2f} s | {r['deltalake_s']:.2f} s | {r['ours_vs_deltalake']:.2f}x | "
            f"{r['files_read']}/{r['files_total']} | {r['files_rewritten']} | {r['note']} |"
        )
    (out / "merge.md").write_text("\n".join(lines) + "\n")
    with open(out / "merge.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0]) if results else ["case"])
        w.writeheader()
        w.writerows(results)
    print("\n".join(lines))


def _rs_version() -> str:
    import deltalake

    return deltalake.__version__


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_ROWS", 5_000_000)))
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    p.add_argument("--quick", action="store_true", help="200k rows, one repetition")
    p.add_argument("--only", nargs="*", default=None, help="cases whose title contains one of these")
    a = p.parse_args(argv)
    rows, reps = (200_000, 1) if a.quick else (a.rows, a.reps)
    scale = [rows // 5, rows, rows * 4]
    started = time.time()
    results = run(rows, reps, a.only, scale)
    out = RESULTS if not a.quick else DATA / "results-quick"
    if results and not a.only:
        save(results, rows, reps, out)
    elif results:
        save(results, rows, reps, DATA / "results-only")
    print(f"({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
