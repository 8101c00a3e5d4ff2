"""Benchmark table generators: the same Delta logs for both engines, cached under ``bench/data``.

Rules:

* Only ``_delta_log/`` is written. Data-file paths are realistic but fake (no parquet files exist):
  opening a snapshot never reads data files, and an append never reads the existing ones.
* Logs look like a real writer's (Spark-style ordering): ``commitInfo`` first, then at v0
  ``protocol`` (1, 2) + ``metaData`` (5 columns, partitioned by ``dt``); every ``add`` has
  ``partitionValues``, ``size``, ``modificationTime``, ``dataChange`` and a ``stats`` *JSON string*
  with ``numRecords``/``minValues``/``maxValues``/``nullCount`` for the four data columns.
* Commit-file mtimes are set to the commit timestamp (one minute apart) so timestamp time travel
  would be consistent.
* Third-party checkpoints are written by delta-rs (``DeltaTable.create_checkpoint()``); our own
  checkpoint variant uses ``airflow_delta_provider_apps.engine.log.checkpoint`` when that module exists.
* Every table sets ``delta.checkpointInterval=1000000`` so neither engine writes a post-commit
  checkpoint during the commit-latency runs; the checkpoints the cases need are placed explicitly.
* A table is cached in ``bench/data/<kind>-<params>-g<GEN_VERSION>/`` and reused when its
  ``.complete`` marker exists; the marker is written last, so an interrupted run regenerates.
  Tables that benchmarks mutate (commits) are copied to a scratch directory first.

Generation is deterministic (seeded): the same parameters give byte-identical commits.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GEN_VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / "data"
BASE_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
COMMIT_STEP_MS = 60_000
N_PARTITIONS = 100

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "dt", "type": "date", "nullable": True, "metadata": {}},
    ],
}
PARTITION_COLUMNS = ["dt"]
TABLE_ID = "6f1b4a2e-4c1d-4c8e-9a55-3b1f0c2d7e11"
TABLE_CONFIGURATION = {"delta.checkpointInterval": "1000000"}


def _dates() -> list[str]:
    import datetime as _dt

    d0 = _dt.date(2026, 1, 1)
    return [(d0 + _dt.timedelta(days=i)).isoformat() for i in range(N_PARTITIONS)]


DATES = _dates()


def commit_ts(version: int) -> int:
    return BASE_TS_MS + version * COMMIT_STEP_MS


def _j(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class _LogWriter:
    """Writes commit files for one table, with deterministic ids and file names."""

    def __init__(self, root: Path, seed: int):
        self.root = root
        self.log = root / "_delta_log"
        self.log.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.file_counter = 0

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def new_add(self, version: int) -> tuple[str, dict]:
        """One realistic add action (as a JSON line) and the file's identity for later removes."""
        rng = self.rng
        self.file_counter += 1
        dt = DATES[self.file_counter % N_PARTITIONS]
        path = f"dt={dt}/part-{self.file_counter % 100000:05d}-{self._uuid()}.c000.snappy.parquet"
        n = rng.randint(50_000, 200_000)
        lo = rng.randint(0, 10**12)
        size = n * 24 + rng.randint(0, 4096)
        ts_lo = commit_ts(version) - 3_600_000
        stats = {
            "numRecords": n,
            "minValues": {
                "id": lo,
                "value": round(rng.uniform(-1e6, 0), 6),
                "name": f"name_{rng.randint(0, 99999):05d}",
                "ts": _iso(ts_lo),
            },
            "maxValues": {
                "id": lo + n * 3,
                "value": round(rng.uniform(0, 1e6), 6),
                "name": f"name_{rng.randint(100000, 999999):06d}",
                "ts": _iso(ts_lo + rng.randint(1, 3_600_000)),
            },
            "nullCount": {"id": 0, "value": rng.randint(0, 20), "name": rng.randint(0, 100), "ts": 0},
        }
        add = {
            "path": path,
            "partitionValues": {"dt": dt},
            "size": size,
            "modificationTime": commit_ts(version) - rng.randint(1000, 30_000),
            "dataChange": True,
            "stats": _j(stats),
        }
        return _j({"add": add}), {"path": path, "dt": dt, "size": size}

    def remove_line(self, version: int, f: dict) -> str:
        rm = {
            "path": f["path"],
            "deletionTimestamp": commit_ts(version) - 500,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {"dt": f["dt"]},
            "size": f["size"],
        }
        return _j({"remove": rm})

    def commit_info(self, version: int, operation: str, params: dict, metrics: dict, blind_append: bool) -> str:
        ci = {
            "timestamp": commit_ts(version),
            "operation": operation,
            "operationParameters": params,
            "readVersion": version - 1 if version > 0 else None,
            "isolationLevel": "Serializable",
            "isBlindAppend": blind_append,
            "operationMetrics": {k: str(v) for k, v in metrics.items()},
            "engineInfo": "bench-generator/1",
            "txnId": self._uuid(),
        }
        if ci["readVersion"] is None:
            del ci["readVersion"]
        return _j({"commitInfo": ci})

    def write_commit(self, version: int, lines: list[str]) -> None:
        p = self.log / f"{version:020d}.json"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        t = commit_ts(version) / 1000
        os.utime(p, (t, t))

    def v0(self) -> None:
        meta = {
            "id": TABLE_ID,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": _j(SCHEMA),
            "partitionColumns": PARTITION_COLUMNS,
            "configuration": TABLE_CONFIGURATION,
            "createdTime": commit_ts(0),
        }
        lines = [
            self.commit_info(
                0,
                "CREATE TABLE",
                {
                    "isManaged": "false",
                    "description": None,
                    "partitionBy": _j(PARTITION_COLUMNS),
                    "properties": _j(TABLE_CONFIGURATION),
                },
                {},
                True,
            ),
            _j({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
            _j({"metaData": meta}),
        ]
        self.write_commit(0, lines)

    def append_commit(self, version: int, n_adds: int, removes: list[dict] | None = None) -> list[dict]:
        """Write one commit with ``n_adds`` adds (and optional removes); returns the added files."""
        adds, files = [], []
        for _ in range(n_adds):
            line, f = self.new_add(version)
            adds.append(line)
            files.append(f)
        removes = removes or []
        if removes:
            op, params = "OPTIMIZE", {"predicate": "[]", "zOrderBy": "[]"}
            metrics = {"numRemovedFiles": len(removes), "numAddedFiles": n_adds}
        else:
            op, params = "WRITE", {"mode": "Append", "partitionBy": "[]"}
            metrics = {
                "numFiles": n_adds,
                "numOutputRows": n_adds * 100_000,
                "numOutputBytes": sum(f["size"] for f in files),
            }
        lines = [self.commit_info(version, op, params, metrics, not removes)]
        lines += [self.remove_line(version, f) for f in removes]
        lines += adds
        self.write_commit(version, lines)
        return files


def _iso(ms: int) -> str:
    import datetime as _dt

    d = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# ---------------------------------------------------------------------------------------------
# table kinds


@dataclass(frozen=True)
class TableSpec:
    """One cached table: ``kind`` + integer parameters (part of the cache key)."""

    kind: str
    params: tuple[tuple[str, int], ...]

    @property
    def key(self) -> str:
        key = f"{self.kind}-" + "-".join(f"{k}{v}" for k, v in self.params) + f"-g{GEN_VERSION}"
        if self.kind == "ckptours":  # our writer changes while we work: regenerate when it does
            key += "-" + _our_log_code_digest()
        return key

    def p(self, name: str) -> int:
        return dict(self.params)[name]


def _our_log_code_digest() -> str:
    import hashlib

    h = hashlib.sha1()
    log_dir = Path(__file__).resolve().parent.parent / "airflow_delta_provider_apps" / "engine" / "log"
    for name in ("checkpoint.py", "file_actions.py", "snapshot.py"):
        p = log_dir / name
        h.update(p.read_bytes() if p.exists() else b"-")
    return h.hexdigest()[:8]


def spec(kind: str, **params: int) -> TableSpec:
    return TableSpec(kind, tuple(params.items()))


def _build_json(ws: _LogWriter, s: TableSpec) -> None:
    """v0 + ``commits`` commits of ``adds`` adds each (no checkpoint)."""
    ws.v0()
    for v in range(1, s.p("commits") + 1):
        ws.append_commit(v, s.p("adds"))


def _checkpoint_rs(root: Path) -> None:
    import deltalake

    deltalake.DeltaTable(str(root)).create_checkpoint()


def checkpoint_ours_available() -> bool:
    try:
        from airflow_delta_provider_apps.engine.log import checkpoint  # noqa: F401
    except Exception:
        return False
    return True


def _checkpoint_ours(root: Path) -> None:
    from airflow_delta_provider_apps.engine.log import checkpoint as ck
    from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
    from airflow_delta_provider_apps.engine.storage import storage_for

    st = storage_for(str(root))
    snap = load_snapshot(st, str(root))
    ck.write_checkpoint(st, str(root), snap, now_ms=commit_ts(snap.version) + 1000)


def _build_ckpt_plus(ws: _LogWriter, s: TableSpec, checkpointer: Callable[[Path], None]) -> None:
    """``base_commits`` x ``base_adds`` adds, checkpoint at that version, then ``tail_commits``
    commits of ``tail_adds`` adds; every 10th tail commit also rewrites ``tail_adds`` checkpointed
    files (removes them and adds replacements), so the live count is
    ``base_commits*base_adds + tail_commits*tail_adds``."""
    ws.v0()
    base: list[dict] = []
    for v in range(1, s.p("base_commits") + 1):
        base += ws.append_commit(v, s.p("base_adds"))
    checkpointer(ws.root)
    v0 = s.p("base_commits")
    tail_adds = s.p("tail_adds")
    for i in range(1, s.p("tail_commits") + 1):
        v = v0 + i
        if i % 10 == 0 and len(base) >= tail_adds:
            victims = [base.pop(ws.rng.randrange(len(base))) for _ in range(tail_adds)]
            ws.append_commit(v, tail_adds * 2, removes=victims)
        else:
            ws.append_commit(v, tail_adds)


BUILDERS: dict[str, Callable[[_LogWriter, TableSpec], None]] = {
    "json": _build_json,
    "ckptrs": lambda ws, s: _build_ckpt_plus(ws, s, _checkpoint_rs),
    "ckptours": lambda ws, s: _build_ckpt_plus(ws, s, _checkpoint_ours),
}


def expected_files(s: TableSpec) -> int:
    if s.kind == "json":
        return s.p("commits") * s.p("adds")
    return s.p("base_commits") * s.p("base_adds") + s.p("tail_commits") * s.p("tail_adds")


def latest_version(s: TableSpec) -> int:
    if s.kind == "json":
        return s.p("commits")
    return s.p("base_commits") + s.p("tail_commits")


def ensure(s: TableSpec, *, log: Callable[[str], None] = print) -> Path:
    """Path of the cached table for ``s``, generating it when missing."""
    root = DATA_DIR / s.key
    marker = root / ".complete"
    if marker.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    import time

    t0 = time.perf_counter()
    log(f"  generating {s.key} ...")
    ws = _LogWriter(root, seed=hash_seed(s.key))
    BUILDERS[s.kind](ws, s)
    marker.write_text(json.dumps({"spec": s.key, "files": expected_files(s)}))
    log(f"  generated {s.key} in {time.perf_counter() - t0:.1f}s")
    return root


def hash_seed(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def scratch_copy(src: Path, name: str) -> Path:
    """A fresh copy of ``src`` (its ``_delta_log``) under ``bench/data/scratch/<name>``."""
    dst = DATA_DIR / "scratch" / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    shutil.copytree(src / "_delta_log", dst / "_delta_log")
    return dst
