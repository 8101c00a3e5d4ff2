"""The operations measured, one implementation per engine (``ours`` / ``deltalake``).

Each operation factory takes ``(path, args)`` and returns ``(setup, run)``: ``setup()`` runs
*outside* the timer before every sample and returns the state handed to ``run(state)``, which is
what is timed. ``run`` returns a small value (file count, version) that the runner compares
across engines, so a wrong answer cannot hide behind a fast time.

Imports of either engine happen inside the factories so a missing module of ours turns into an
"not available" row (:class:`Unavailable`) instead of a crash, and so import time is not
counted in any sample (the worker reports it separately).

What each operation includes:

* ``open``: ours = ``load_snapshot(storage_for(p), p, version=v)`` + ``snap.files.num_rows``;
  deltalake = ``DeltaTable(p, version=v)`` + ``dt.get_add_actions().num_rows`` (arrow, like ours;
  ``len(dt.file_uris())`` would add the cost of one Python string per file).
* ``latest_version``: ours = ``listing.latest_version`` (listing only); deltalake =
  ``DeltaTable(p).version()``: 1.6.6 has no cheaper public way (``without_files=True`` is
  deprecated and ignored, loading always materialises the active files).
* ``commit_log_only``: ours = one ``AddFile`` (no data file written) committed through
  ``OptimisticTransaction`` on a snapshot loaded in ``setup``; deltalake = ``write_deltalake(dt,
  1 row batch, mode="append")`` on a ``DeltaTable`` loaded in ``setup`` (it also writes the parquet
  file: not like for like, reported for what it is).
* ``commit_parquet``: ours = write one small parquet file with pyarrow + its stats JSON + commit;
  deltalake = the same ``write_deltalake`` call; snapshot / ``DeltaTable`` loaded in ``setup``.
* ``confine_paths``: ours only, the share of ``open`` that checks every path of the snapshot's files
  and tombstones stays in the table root (``paths.confine_file_table``), on a snapshot loaded in
  ``setup``; deltalake has no separate step to compare (its object-store layer resolves each path).
* ``open_commit_parquet``: like ``commit_parquet`` but opening the table is inside the timer
  (ours: ``load_snapshot`` + write + commit; deltalake: ``write_deltalake(path, ...)``).
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid
from collections.abc import Callable
from typing import Any

ENGINES = ("ours", "deltalake")
SMALL_ROWS = 100


class Unavailable(Exception):
    """Our module for this operation does not exist (yet)."""


def _ours(modname: str):
    import importlib

    try:
        return importlib.import_module(modname)
    except ImportError as e:
        raise Unavailable(f"{modname} not importable ({e})") from None


def small_batch(seq: int):
    """A ``SMALL_ROWS``-row arrow table in the bench schema, all rows in one partition."""
    import pyarrow as pa

    n = SMALL_ROWS
    base = seq * n
    dt = _dt.date(2026, 1, 1) + _dt.timedelta(days=seq % 100)
    ts0 = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)
    return pa.table(
        {
            "id": pa.array(range(base, base + n), pa.int64()),
            "value": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            "name": pa.array([f"name_{i:05d}" for i in range(n)], pa.string()),
            "ts": pa.array([ts0 + _dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
            "dt": pa.array([dt] * n, pa.date32()),
        }
    )


# --------------------------------------------------------------------------------------------
# ours


def _ours_storage(path: str):
    storage = _ours("airflow_delta_provider_apps.engine.storage")
    return storage.storage_for(path)


def ours_open(path: str, args: dict):
    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    version = args.get("version")

    def run(_):
        snap = snapshot.load_snapshot(_ours_storage(path), path, version=version)
        return {"files": snap.files.num_rows, "version": snap.version}

    return (lambda: None), run


def ours_confine_paths(path: str, args: dict):
    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    paths = _ours("airflow_delta_provider_apps.engine.paths")

    def setup():
        return snapshot.load_snapshot(_ours_storage(path), path)

    def run(snap):
        paths.confine_file_table(snap.table_root, snap.files)
        paths.confine_file_table(snap.table_root, snap.tombstones, kind="removed file")
        return {"files": snap.files.num_rows, "version": snap.version}

    return setup, run


def rs_no_separate_step(path: str, args: dict):
    raise Unavailable("deltalake has no separate step: its object-store layer resolves each path")


def ours_latest_version(path: str, args: dict):
    listing = _ours("airflow_delta_provider_apps.engine.log.listing")
    if not hasattr(listing, "latest_version"):
        raise Unavailable("airflow_delta_provider_apps.engine.log.listing.latest_version not defined")

    def run(_):
        return {"version": listing.latest_version(_ours_storage(path), path)}

    return (lambda: None), run


def _ours_commit(storage, path: str, snap, add) -> int:
    """Blind-append commit of one AddFile through our OptimisticTransaction; returns the version."""
    txn_mod = _ours("airflow_delta_provider_apps.engine.txn")
    OptimisticTransaction = getattr(txn_mod, "OptimisticTransaction", None)
    if OptimisticTransaction is None:
        OptimisticTransaction = _ours("airflow_delta_provider_apps.engine.txn.transaction").OptimisticTransaction
    txn = OptimisticTransaction(
        storage, path, snap, operation="WRITE", operation_parameters={"mode": "Append", "partitionBy": "[]"}
    )
    result = txn.commit([add], {"numFiles": 1, "numOutputRows": SMALL_ROWS, "numOutputBytes": add.size})
    return getattr(result, "version", result)


def _ours_stats_json(table, snap) -> str:
    stats_mod = _ours("airflow_delta_provider_apps.engine.stats")
    collector_cls = getattr(stats_mod, "StatsCollector", None)
    if collector_cls is None:
        raise Unavailable("airflow_delta_provider_apps.engine.stats.StatsCollector not defined")
    return _stats_via_collector(stats_mod, collector_cls, table, snap)


def _stats_via_collector(stats_mod, collector_cls, table, snap) -> str:
    kwargs = {}
    if hasattr(stats_mod, "stats_config_from_properties"):
        kwargs = stats_mod.stats_config_from_properties(snap.metadata.configuration)
    c = collector_cls(snap.schema, partition_columns=snap.partition_columns, **kwargs)
    c.update(table)
    return c.to_json()


def _ours_write_parquet(storage, path: str, snap, seq: int):
    """Write one small parquet file like our writer does; return its AddFile."""
    import pyarrow.parquet as pq

    actions = _ours("airflow_delta_provider_apps.engine.actions")
    table = small_batch(seq)
    dt = table.column("dt")[0].as_py().isoformat()
    data = table.drop_columns(["dt"])
    rel = f"dt={dt}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    full = storage.join(path, rel)
    with storage.open_output_stream(full) as sink:
        pq.write_table(data, sink, compression="snappy")
    info = storage.file_info(full)
    stats = _ours_stats_json(data, snap)
    return actions.AddFile(
        path=rel,
        partition_values={"dt": dt},
        size=info.size,
        modification_time=info.mtime_ms,
        data_change=True,
        stats=stats,
    )


def ours_commit_log_only(path: str, args: dict):
    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    actions = _ours("airflow_delta_provider_apps.engine.actions")
    _ours("airflow_delta_provider_apps.engine.txn")
    storage = _ours_storage(path)
    counter = iter(range(10**9))

    def setup():
        return snapshot.load_snapshot(storage, path)

    def run(snap):
        i = next(counter)
        add = actions.AddFile(
            path=f"dt=2026-01-01/part-00000-{uuid.uuid4()}.c000.snappy.parquet",
            partition_values={"dt": "2026-01-01"},
            size=2048,
            modification_time=1767225600000 + i,
            data_change=True,
            stats='{"numRecords":100,"minValues":{"id":0,"value":0.0,"name":"name_00000",'
            '"ts":"2026-01-01T00:00:00.000Z"},"maxValues":{"id":99,"value":49.5,'
            '"name":"name_00099","ts":"2026-01-01T00:01:39.000Z"},'
            '"nullCount":{"id":0,"value":0,"name":0,"ts":0}}',
        )
        return {"version": _ours_commit(storage, path, snap, add)}

    return setup, run


def ours_commit_parquet(path: str, args: dict):
    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    _ours("airflow_delta_provider_apps.engine.txn")
    _ours("airflow_delta_provider_apps.engine.stats")
    storage = _ours_storage(path)
    counter = iter(range(10**9))

    def setup():
        return snapshot.load_snapshot(storage, path)

    def run(snap):
        add = _ours_write_parquet(storage, path, snap, next(counter))
        return {"version": _ours_commit(storage, path, snap, add)}

    return setup, run


def ours_open_commit_parquet(path: str, args: dict):
    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    _ours("airflow_delta_provider_apps.engine.txn")
    _ours("airflow_delta_provider_apps.engine.stats")
    counter = iter(range(10**9))

    def run(_):
        storage = _ours_storage(path)
        snap = snapshot.load_snapshot(storage, path)
        add = _ours_write_parquet(storage, path, snap, next(counter))
        return {"version": _ours_commit(storage, path, snap, add)}

    return (lambda: None), run


# --------------------------------------------------------------------------------------------
# deltalake (delta-rs)


def _no_checkpoint_hook():
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def rs_open(path: str, args: dict):
    from deltalake import DeltaTable

    version = args.get("version")

    def run(_):
        dt = DeltaTable(path, version=version)
        # the file list as arrow (no Python object per file, like ours); file_uris() would add
        # ~100 ms of Python string building at 101k files
        return {"files": dt.get_add_actions(flatten=False).num_rows, "version": dt.version()}

    return (lambda: None), run


def rs_latest_version(path: str, args: dict):
    from deltalake import DeltaTable

    def run(_):
        # deltalake 1.6.6 ignores (and warns about) without_files: loading always materialises
        # the active files, so this is its full open
        return {"version": DeltaTable(path).version()}

    return (lambda: None), run


def rs_commit_preloaded(path: str, args: dict):
    from deltalake import DeltaTable, write_deltalake

    counter = iter(range(10**9))
    hook = _no_checkpoint_hook()

    def setup():
        return DeltaTable(path)

    def run(dt):
        write_deltalake(dt, small_batch(next(counter)), mode="append", post_commithook_properties=hook)
        return {"version": dt.version()}

    return setup, run


def rs_open_commit(path: str, args: dict):
    from deltalake import write_deltalake

    counter = iter(range(10**9))
    hook = _no_checkpoint_hook()

    def run(_):
        write_deltalake(path, small_batch(next(counter)), mode="append", post_commithook_properties=hook)
        return {}

    return (lambda: None), run


# --------------------------------------------------------------------------------------------
# correctness checks (run after the timed samples, never timed)


def _verify(paths, dts) -> dict:
    """Digest of the sorted paths (compared across engines) and the files whose partition value
    disagrees with the ``dt=<value>/`` directory the generator put them in (ground truth)."""
    import hashlib

    import pyarrow as pa
    import pyarrow.compute as pc

    paths = pa.chunked_array([paths]) if isinstance(paths, pa.Array) else paths
    dts = pc.cast(dts, pa.string())
    from_path = pc.utf8_slice_codeunits(paths, 3, 13)
    bad = pc.invert(pc.fill_null(pc.equal(from_path, dts), False))
    n_bad = pc.sum(bad).as_py() or 0
    sample = pc.filter(dts, bad).slice(0, 3).to_pylist() if n_bad else []
    digest = hashlib.sha1("\n".join(sorted(paths.to_pylist())).encode()).hexdigest()[:16]
    return {"paths_digest": digest, "bad_partition_values": n_bad, "bad_sample": sample}


def ours_open_verify(path: str, args: dict) -> dict:
    import pyarrow.compute as pc

    snapshot = _ours("airflow_delta_provider_apps.engine.log.snapshot")
    snap = snapshot.load_snapshot(_ours_storage(path), path, version=args.get("version"))
    files = snap.files
    dts = pc.list_element(pc.map_lookup(files.column("partition_values"), "dt", "all"), 0)
    return _verify(files.column("path"), dts)


def rs_open_verify(path: str, args: dict) -> dict:
    import pyarrow as pa
    from deltalake import DeltaTable

    dt = DeltaTable(path, version=args.get("version"))
    t = pa.table(dt.get_add_actions(flatten=True))
    return _verify(t.column("path"), t.column("partition.dt"))


VERIFY = {"open": {"ours": ours_open_verify, "deltalake": rs_open_verify}}


OPS: dict[str, dict[str, Callable[[str, dict], tuple[Callable[[], Any], Callable[[Any], dict]]]]] = {
    "open": {"ours": ours_open, "deltalake": rs_open},
    "latest_version": {"ours": ours_latest_version, "deltalake": rs_latest_version},
    "confine_paths": {"ours": ours_confine_paths, "deltalake": rs_no_separate_step},
    "commit_log_only": {"ours": ours_commit_log_only, "deltalake": rs_commit_preloaded},
    "commit_parquet": {"ours": ours_commit_parquet, "deltalake": rs_commit_preloaded},
    "open_commit_parquet": {"ours": ours_open_commit_parquet, "deltalake": rs_open_commit},
}

# ops that write into the table (the runner gives each engine its own scratch copy)
MUTATING = {"commit_log_only", "commit_parquet", "open_commit_parquet"}

os.environ.setdefault("RUST_LOG", "error")
