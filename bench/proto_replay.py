"""Prototype: a faster file reconciliation for ``spark_apps/engine/log/replay.py`` (H1's module,
not edited here), proven on the bench tables: ``python -m bench.proto_replay [--case ID]``.

It swaps exactly two internals of the current replay and keeps everything else (listing,
checkpoint read, JSON parsing, normalisation):

1. ``_add_struct_rows`` (checkpoint sources only): the checkpoint's ``add`` column is mostly
   valid rows in a few long runs (a delta-rs checkpoint: one run of 100k adds next to the
   protocol/metaData rows). Instead of ``arr.filter(is_valid)`` (a full copy of ~40 MB of paths
   and stats strings) it takes zero-copy ``slice``\\ s of the valid runs when there are at most
   ``MAX_SOURCE_RUNS`` of them.
2. ``_reconcile_files``: a checkpoint is already reconciled (one action per (path, dvId)), and
   every JSON commit after it is newer. So:

   * dedup (group_by max order) only the JSON sources' keys (small: ~1k rows here);
   * drop a checkpoint row iff its key occurs in ANY JSON commit (``is_in`` against that small
     key set: hashing 101k strings, no group_by over them, no ``is_in`` on order numbers);
   * apply the drop to the *normalised* table with zero-copy run slices when the kept rows form
     at most ``MAX_RUNS`` runs, else one ``filter``;
   * JSON sources are filtered by winning order as before (they are small).

   Keys are ``path`` alone when no source has a deletion vector, else ``path + "\\x00" + dvId``.
   Same rules as the original: the newest action per (path, dvId) wins, adds are live files and
   removes tombstones.
The script loads every open case's table with the original and with the patched replay,
checks the results are equal (same rows, compared sorted by path), checks ``partition_values``
against the generator's ground truth (the ``dt=<value>/`` directory of each path), and prints
both timings (wall and process CPU, interleaved runs, medians).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_RUNS = 256          # zero-copy slices of a normalised table (cheap per run)
MAX_SOURCE_RUNS = 16    # separate sources per valid run of a checkpoint column (each normalised)


def _valid_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of the runs of True in ``mask``."""
    m = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(m[1:] != m[:-1])
    starts, ends = edges[0::2], edges[1::2]
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def _select_rows(t: pa.Table, keep: pa.Array) -> pa.Table:
    """Rows of ``t`` where ``keep``: zero-copy slices when they form few runs, else a filter."""
    mask = keep.to_numpy(zero_copy_only=False).astype(bool, copy=False)
    runs = _valid_runs(mask)
    if len(runs) <= MAX_RUNS:
        return pa.concat_tables([t.slice(s, n) for s, n in runs]) if runs else t.slice(0, 0)
    return t.filter(keep)


def patch(replay) -> contextlib.AbstractContextManager:
    """Context manager that swaps in the faster internals of ``replay`` (module object)."""
    FileSource, child, LogCorruptedError = replay._FileSource, replay._child, replay.LogCorruptedError

    original_add_struct_rows = replay._add_struct_rows

    def add_struct_rows(col, kind, coll, from_json, order_base):
        if from_json:  # JSON sources are small and filtered again at reconcile: keep as is
            return original_add_struct_rows(col, kind, coll, from_json, order_base)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        pos = 0
        for arr in chunks:
            n = len(arr)
            order_np = order_base[pos: pos + n]
            pos += n
            if n == 0 or pa.types.is_null(arr.type) or arr.null_count == n:
                continue
            p = child(arr, "path")
            if p is None:
                raise LogCorruptedError(
                    f"A '{kind}' action has no 'path'", "the path field is required",
                    "repair the log; the table was written by a non-conforming writer")
            if arr.null_count or p.null_count:
                keep = arr.is_valid()
                if p.null_count:
                    keep = pc.and_(keep, p.is_valid())
                keep_np = keep.to_numpy(zero_copy_only=False)
                runs = _valid_runs(keep_np)
                if len(runs) <= MAX_SOURCE_RUNS:
                    for s, k in runs:
                        coll.sources.append(FileSource(kind, arr.slice(s, k),
                                                       pa.array(order_np[s: s + k]), from_json))
                    continue
                arr = arr.filter(keep)
                order_np = order_np[keep_np]
            coll.sources.append(FileSource(kind, arr, pa.array(order_np), from_json))

    def keys_of(s, with_dv: bool) -> pa.Array:
        p = child(s.rows, "path")
        p = p.cast(pa.string()) if p.type != pa.string() else p
        if not with_dv:
            return p
        dv = pc.fill_null(replay.dv_unique_ids(child(s.rows, "deletionVector"), len(s.rows)), "")
        return pc.binary_join_element_wise(p, dv, "\x00")

    def has_dv(s) -> bool:
        dv = child(s.rows, "deletionVector")
        return dv is not None and not pa.types.is_null(dv.type) and dv.null_count < len(dv)

    def reconcile_files(sources, partition_keys):
        if not sources:
            return replay.empty_files(), replay.empty_tombstones()
        js = [s for s in sources if s.from_json]
        cps = [s for s in sources if not s.from_json]
        with_dv = any(has_dv(s) for s in sources)
        adds, removes = [], []

        def emit(s, rows, keep=None):
            schema = replay.FILE_SCHEMA if s.kind == "add" else replay.REMOVE_SCHEMA
            t = replay.normalize_file_actions(
                rows, schema,
                partition_keys=partition_keys if (s.from_json and s.kind == "add") else None)
            if keep is not None:
                t = _select_rows(t, keep)
            (adds if s.kind == "add" else removes).append(t)

        if js:
            jkeys = pa.chunked_array([keys_of(s, with_dv) for s in js], pa.string())
            orders = pa.chunked_array([s.order for s in js], pa.int64())
            winners = (pa.table({"k": jkeys, "o": orders}).group_by(["k"])
                       .aggregate([("o", "max")]).column("o_max").combine_chunks())
            json_key_set = pc.unique(jkeys.combine_chunks()) if cps else None
            for s in cps:
                gone = pc.is_in(keys_of(s, with_dv), value_set=json_key_set)
                emit(s, s.rows, None if gone.true_count == 0 else pc.invert(gone))
            for s in js:
                mask = pc.is_in(s.order, value_set=winners)
                emit(s, s.rows if mask.false_count == 0 else s.rows.filter(mask))
        else:
            for s in cps:
                emit(s, s.rows)
        files = pa.concat_tables(adds) if adds else replay.empty_files()
        tombs = pa.concat_tables(removes) if removes else replay.empty_tombstones()
        return files, tombs

    @contextlib.contextmanager
    def cm():
        saved = replay._add_struct_rows, replay._reconcile_files
        replay._add_struct_rows, replay._reconcile_files = add_struct_rows, reconcile_files
        try:
            yield
        finally:
            replay._add_struct_rows, replay._reconcile_files = saved

    return cm()


def _canon(t: pa.Table, drop_pv: bool = False) -> pa.Table:
    t = t.combine_chunks()
    if drop_pv and "partition_values" in t.column_names:
        t = t.drop_columns(["partition_values"])
    return t.take(pc.sort_indices(t.column("path")))


def _bad_pv(files: pa.Table) -> int:
    """Files whose ``dt`` partition value differs from the ``dt=<value>/`` dir (ground truth)."""
    if files.num_rows == 0:
        return 0
    dts = pc.list_element(pc.map_lookup(files.column("partition_values"), "dt", "all"), 0)
    same = pc.equal(pc.utf8_slice_codeunits(files.column("path"), 3, 13), dts)
    return files.num_rows - (pc.sum(pc.fill_null(same, False)).as_py() or 0)


def main(argv: list[str] | None = None) -> int:
    from . import cases as C
    from . import generate as g
    from spark_apps.engine.log import replay
    from spark_apps.engine.log.snapshot import load_snapshot
    from spark_apps.engine.storage import storage_for

    ap = argparse.ArgumentParser(prog="python -m bench.proto_replay")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--case", nargs="*", default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--conformance", default=None, metavar="DIR",
                    help="instead: compare original vs patched on every version of every table "
                         "of the conformance corpus (manifest.json in DIR)")
    a = ap.parse_args(argv)
    if a.conformance:
        return conformance(a.conformance)
    sizes = (C.Sizes.quick() if a.quick else C.Sizes()).with_env()
    cases = [c for c in C.build(sizes) if c.op == "open" and not c.needs_ours_checkpoint
             and (not a.case or c.id in a.case)]
    print(f"{'case':62s} {'current':>9s} {'patched':>9s} {'speed-up':>8s} "
          f"{'cpu cur':>8s} {'cpu new':>8s} {'cpu x':>6s}  same result"
          "  wrong partition values (current / patched)")
    for c in cases:
        path = str(g.ensure(c.table))
        v = c.args.get("version")

        def load():
            return load_snapshot(storage_for(path), path, version=v)

        def one(patched: bool):
            ctx = patch(replay) if patched else contextlib.nullcontext()
            with ctx:
                c = time.process_time()
                t = time.perf_counter()
                snap = load()
                _ = snap.files.num_rows
                return ((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000), snap

        # interleaved (alternating order) so both variants share the background load
        one(False)
        one(True)
        xs: dict[bool, list[float]] = {False: [], True: []}
        snaps = {}
        for i in range(a.reps):
            for patched in ((False, True) if i % 2 == 0 else (True, False)):
                ms, snaps[patched] = one(patched)
                xs[patched].append(ms)
        base_ms = float(np.median([x[0] for x in xs[False]]))
        new_ms = float(np.median([x[0] for x in xs[True]]))
        base_cpu = float(np.median([x[1] for x in xs[False]]))
        new_cpu = float(np.median([x[1] for x in xs[True]]))
        base_files, base_tombs = snaps[False].files, snaps[False].tombstones
        new_files, new_tombs = snaps[True].files, snaps[True].tombstones
        same = (_canon(base_files).equals(_canon(new_files))
                and _canon(base_tombs).equals(_canon(new_tombs)))
        print(f"{c.title[:62]:62s} {base_ms:9.1f} {new_ms:9.1f} {base_ms / new_ms:7.2f}x "
              f"{base_cpu:8.1f} {new_cpu:8.1f} {base_cpu / new_cpu:5.2f}x  "
              f"{str(same):11s}  {_bad_pv(base_files)} / {_bad_pv(new_files)}")
    return 0


def conformance(root: str) -> int:
    """Original vs patched replay on every version of every conformance table: same files and
    tombstones, or the same error class."""
    import json
    from pathlib import Path

    from spark_apps.engine.log import replay
    from spark_apps.engine.log.snapshot import load_snapshot
    from spark_apps.engine.storage import storage_for

    manifest = json.loads((Path(root) / "manifest.json").read_text())
    n_ok = n_diff = 0
    for t in manifest["tables"]:
        path = str((Path(root) / t["table_root"]).resolve())
        latest = t.get("latest_version")
        versions = list(range(0, (latest if isinstance(latest, int) else 0) + 1)) or [None]
        for v in versions:
            out = []
            for patched in (False, True):
                ctx = patch(replay) if patched else contextlib.nullcontext()
                with ctx:
                    try:
                        snap = load_snapshot(storage_for(path), path, version=v)
                        out.append((_canon(snap.files), _canon(snap.tombstones)))
                    except Exception as e:
                        out.append(type(e).__name__)
            same = (out[0] == out[1]) if isinstance(out[0], str) or isinstance(out[1], str) \
                else (out[0][0].equals(out[1][0]) and out[0][1].equals(out[1][1]))
            if same:
                n_ok += 1
            else:
                n_diff += 1
                print(f"DIFFERENT: {t['source']}/{t['name']} v{v}")
    print(f"conformance: {n_ok} (table, version) snapshots identical, {n_diff} different")
    return 1 if n_diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
