"""Hostile logs through every entry point (issue: a commit naming ``../secret.parquet`` is read, copied, counted).

A table written by deltalake or by this engine gets one hand-written commit whose ``add`` names a real
parquet file OUTSIDE the table root, in one of the spellings of :data:`hostile_logs.SPELLINGS`
(``../``, ``%2E%2E/``, absolute, ``file:``, nested ``p=a/../../``, a bare ``..``). Reads aim it at
the "secret" file, mutations at the "victim" file (both sit next to the table root). Every entry point
must then refuse the table with :class:`LogCorruptedError` naming the path as written in the log
(the CLI: non-zero exit, that error on its last line) and must have written nothing: no outside row
returned, secret and victim unchanged (bytes, mtime), no new or changed file anywhere in the case
folder (table root, ``_delta_log``, next to the root).

Tables are prepared once per module and copied per case (``shutil.copytree``), so the Spark cost is
the entry point itself. Spark entry points run on fewer table/spelling pairs than the log-only ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile_logs import (
    FAKE_NUM_RECORDS,
    OUTSIDE_FILES,
    OUTSIDE_IDS,
    OUTSIDE_VALUES,
    SPELLINGS,
    TABLE_DIR,
    append_hostile_commit,
    hostile_path,
    latest_version,
    tree_changes,
    tree_state,
    write_outside_files,
)

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.errors import LogCorruptedError

pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE_SCAN_CONF = "spark.airflowDelta.nativeScan"  # read by engine/spark/scan.py (native_scan_applies)

TABLES = {  # name -> partitioned by p
    "engine-part": True,
    "engine-flat": False,
    "deltalake-part": True,
    "deltalake-flat": False,
}
BASE_ROWS = [(i, f"v{i}", "a" if i <= 3 else "b") for i in range(1, 7)]
SCHEMA_DDL = "id BIGINT, value STRING, p STRING"


def _base_arrow() -> pa.Table:
    ids, values, parts = zip(*BASE_ROWS, strict=True)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": pa.array(values, pa.string()), "p": pa.array(parts, pa.string())}
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, str]:
    """The four clean tables, written once (no Spark): by this engine and by deltalake."""
    from deltalake import write_deltalake

    base = tmp_path_factory.mktemp("hostile-prepared")
    out = {}
    for name, partitioned in TABLES.items():
        root = str(base / name)
        parts = ["p"] if partitioned else None
        rows = _base_arrow()
        if name.startswith("engine"):  # the engine's core writer, in this process (two commits)
            DeltaTable.create(None, root, schema=SCHEMA_DDL, partition_by=parts)
            append_arrow(root, rows.slice(0, 3))
            append_arrow(root, rows.slice(3))
        else:
            write_deltalake(root, rows.slice(0, 3), partition_by=parts)
            write_deltalake(root, rows.slice(3), partition_by=parts, mode="append")
        out[name] = root
    return out


@dataclass
class Case:
    dir: str  # the watched folder: table root, secret, victim, CLI inputs/outputs
    root: str
    path: str  # the hostile add.path, as written in the log
    partitioned: bool
    base_version: int  # the last clean version


def make_case(tmp_path, prepared, table: str, spelling: str, target: str, *, hostile: bool = True) -> Case:
    case = str(tmp_path)
    root = os.path.join(case, TABLE_DIR)
    shutil.copytree(prepared[table], root)
    write_outside_files(case)
    pq.write_table(  # the CLI write's source (one row matching the replace-where conditions below)
        pa.table({"id": pa.array([5], pa.int64()), "value": ["new"], "p": ["a"]}), os.path.join(case, "src.parquet")
    )
    partitioned = TABLES[table]
    base_version = latest_version(root)
    path = hostile_path(spelling, case, target, partitioned)
    if hostile:
        size = os.path.getsize(os.path.join(case, OUTSIDE_FILES[target]))
        append_hostile_commit(root, path, size=size, partitioned=partitioned)
    return Case(case, root, path, partitioned, base_version)


@contextmanager
def native_scan(spark, enabled: bool):
    before = spark.conf.get(NATIVE_SCAN_CONF, None)
    spark.conf.set(NATIVE_SCAN_CONF, "true" if enabled else "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(NATIVE_SCAN_CONF)
        else:
            spark.conf.set(NATIVE_SCAN_CONF, before)


# ------------------------------------------------------------------------------------------------
# entry points: fn(case, spark) -> rows (list of dicts), a command result (dict), or a CLI outcome


@dataclass
class CliOutcome:
    code: int
    last: str  # the last stdout line: the result JSON, or DELTA_ERROR <class>: <message>


def _rows(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def _overwrite_df(spark):
    return spark.createDataFrame([(5, "new", "a")], SCHEMA_DDL)


def _cli(argv, spark, capsys) -> CliOutcome:
    capsys.readouterr()
    code = cli.main(argv, spark=spark)
    lines = [ln for ln in capsys.readouterr().out.strip().splitlines() if ln.strip()]
    return CliOutcome(code, lines[-1] if lines else "")


def _subprocess(argv) -> CliOutcome:
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_delta_provider_apps", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    lines = [ln for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
    out_lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    # the error line is the last stdout line (stderr may carry a traceback before it)
    return CliOutcome(proc.returncode, out_lines[-1] if out_lines else (lines[-1] if lines else ""))


def _snapshot(c, spark, capsys):
    snap = DeltaTable.for_path(None, c.root).snapshot()
    return {"version": snap.version, "metrics": {"numFiles": int(snap.num_files)}}


def _arrow_read(c, spark, capsys):
    from airflow_delta_provider_apps.engine.reader import read_snapshot_table

    return read_snapshot_table(DeltaTable.for_path(None, c.root).snapshot()).to_pylist()


def _to_df(native: bool, predicate: str | None = None):
    def fn(c, spark, capsys):
        with native_scan(spark, native):
            return _rows(DeltaTable.for_path(spark, c.root).to_df(predicate=predicate))

    return fn


def _delete(predicate: str | None, with_spark: bool):
    def fn(c, spark, capsys):
        return DeltaTable.for_path(spark if with_spark else None, c.root).delete(predicate)

    return fn


def _update(with_spark: bool):
    def fn(c, spark, capsys):
        return DeltaTable.for_path(spark if with_spark else None, c.root).update({"value": "'x'"}, "id >= 0")

    return fn


def _overwrite(replace_where: str):
    def fn(c, spark, capsys):
        return DeltaTable.for_path(spark, c.root).overwrite(_overwrite_df(spark), replace_where=replace_where)

    return fn


def _checkpoint(c, spark, capsys):
    return DeltaTable.for_path(None, c.root).checkpoint()


def _cli_read(c, spark, capsys):
    return _cli(["read", "--table-uri", c.root, "--output", os.path.join(c.dir, "out.parquet")], spark, capsys)


def _cli_args(*args):
    def fn(c, spark, capsys):
        return _cli([args[0], "--table-uri", c.root, *[a.format(dir=c.dir) for a in args[1:]]], spark, capsys)

    return fn


def _cli_create_from_source(c, spark, capsys):
    copy = os.path.join(c.dir, "copy")
    return _cli(["create-table", "--table-uri", copy, "--source", c.root, "--source-format", "delta"], spark, capsys)


def _subprocess_args(*args):
    def fn(c, spark, capsys):
        return _subprocess([args[0], "--table-uri", c.root, *args[1:]])

    return fn


@dataclass(frozen=True)
class Entry:
    fn: object
    target: str  # "secret" (reads) or "victim" (mutations)
    spark: bool  # uses the SparkSession
    partitioned_only: bool = False


ENTRIES = {
    # no Spark: the log, the in-process Arrow reader and in-process DML
    "snapshot": Entry(_snapshot, "secret", False),
    "arrow-read": Entry(_arrow_read, "secret", False),
    "delete-all": Entry(_delete(None, False), "victim", False),
    "delete-partition": Entry(_delete("p = 'a'", False), "victim", False, partitioned_only=True),
    "delete-data-local": Entry(_delete("id = 777", False), "victim", False),
    "update-local": Entry(_update(False), "victim", False),
    "checkpoint": Entry(_checkpoint, "victim", False),
    # Spark reads
    "to_df-native": Entry(_to_df(True), "secret", True),
    "to_df-native-off": Entry(_to_df(False), "secret", True),
    "to_df-native-partition-pred": Entry(_to_df(True, "p = 'a'"), "secret", True, partitioned_only=True),
    # Spark DML
    "delete-data-spark": Entry(_delete("id = 777", True), "victim", True),
    "update-spark": Entry(_update(True), "victim", True),
    "overwrite-replace-where-data": Entry(_overwrite("id = 5"), "victim", True),
    "overwrite-replace-where-partition": Entry(_overwrite("p = 'a'"), "victim", True, partitioned_only=True),
    # the CLI in this process: cli.main(argv, spark=the shared session, or None for log-only operations)
    "cli-read": Entry(_cli_read, "secret", True),
    "cli-delete-all": Entry(_cli_args("delete"), "victim", False),
    "cli-delete-data": Entry(_cli_args("delete", "--predicate", "id = 777"), "victim", True),
    "cli-checkpoint": Entry(_cli_args("checkpoint"), "victim", False),
    "cli-describe": Entry(_cli_args("describe"), "victim", False),
    "cli-write-replace-where": Entry(
        _cli_args(
            "write",
            "--mode",
            "overwrite",
            "--source",
            "{dir}/src.parquet",
            "--source-format",
            "parquet",
            "--replace-where",
            "id = 5",
        ),
        "victim",
        True,
    ),
    "cli-create-table-from-delta-source": Entry(_cli_create_from_source, "secret", True),
    # the CLI as a real process (log-only operations: no JVM is started)
    "process-delete-all": Entry(_subprocess_args("delete"), "victim", False),
    "process-checkpoint": Entry(_subprocess_args("checkpoint"), "victim", False),
}

LOG_ONLY = [
    "snapshot",
    "arrow-read",
    "delete-all",
    "delete-partition",
    "delete-data-local",
    "update-local",
    "checkpoint",
]
ALL = [(t, s) for t in TABLES for s in SPELLINGS]

# Where each entry point runs: (table, spelling) pairs. The log-only entry points are cheap (no JVM): every
# table, every spelling. Spark entry points cost a job each, so their pairs are picked to cover what
# matters for them. The native scan takes relative paths of plain characters (``../``, nested, a bare
# ``..``, and absolute paths, which it joins to the root) on an unpartitioned table, and on a
# partitioned one only when a single partition is read (a partition predicate): a two-partition table
# with a file outside the partition folders is not scanned natively. Other spellings fall back to the
# Arrow path. Each Spark DML and CLI entry point runs once or twice, covering both writers and layouts.
PLAN = {
    **{e: ALL for e in LOG_ONLY},
    "to_df-native": [("engine-flat", s) for s in ("dotdot", "nested", "bare", "absolute")]
    + [("deltalake-flat", "dotdot")],
    "to_df-native-partition-pred": [("deltalake-part", s) for s in SPELLINGS] + [("engine-part", "dotdot")],
    "to_df-native-off": [("engine-part", "dotdot"), ("deltalake-flat", "nested")],
    "delete-data-spark": [("engine-part", "dotdot")],
    "update-spark": [("deltalake-flat", "dotdot")],
    "overwrite-replace-where-data": [("engine-flat", "dotdot")],
    "overwrite-replace-where-partition": [("deltalake-part", "nested")],
    "cli-read": [("engine-flat", "dotdot"), ("deltalake-part", "bare")],
    "cli-delete-all": [("deltalake-part", "dotdot")],
    "cli-delete-data": [("engine-part", "nested")],
    "cli-checkpoint": [("engine-flat", "file-uri")],
    "cli-describe": [("engine-part", "absolute")],
    "cli-write-replace-where": [("deltalake-flat", "dotdot")],
    "cli-create-table-from-delta-source": [("engine-flat", "nested")],
    "process-delete-all": [("deltalake-part", "dotdot")],
    "process-checkpoint": [("engine-flat", "bare")],
}
assert set(PLAN) == set(ENTRIES)


def _cases():
    return [
        pytest.param(e, t, s, id=f"{e}-{t}-{s}")
        for e, pairs in PLAN.items()
        for t, s in pairs
        if TABLES[t] or not ENTRIES[e].partitioned_only
    ]


def _describe_error(e: BaseException) -> str:
    from airflow_delta_provider_apps.engine.spark.session import delta_error_from

    inner = delta_error_from(e)
    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    if inner is not None:
        return f"{type(e).__name__} wrapping an executor {type(inner).__name__}: {inner.problem}"
    return f"{type(e).__name__}: {text}"


def _outside_rows(rows) -> list:
    return [r for r in rows if r.get("id") in OUTSIDE_IDS or r.get("value") in OUTSIDE_VALUES]


@pytest.mark.parametrize(("entry", "table", "spelling"), _cases())
def test_hostile_path_is_refused_and_nothing_is_read_or_written(
    entry, table, spelling, prepared, tmp_path, capsys, request
):
    spec = ENTRIES[entry]
    spark = request.getfixturevalue("spark") if spec.spark else None  # log-only cases start no JVM
    c = make_case(tmp_path, prepared, table, spelling, spec.target)
    outside = {k: os.stat(os.path.join(c.dir, f)) for k, f in OUTSIDE_FILES.items()}
    outside_bytes = {k: Path(c.dir, f).read_bytes() for k, f in OUTSIDE_FILES.items()}
    before = tree_state(c.dir)

    result, error = None, None
    try:
        result = spec.fn(c, spark, capsys)
    except Exception as e:  # judged below, with everything else
        error = e
    after = tree_state(c.dir)

    problems = []
    # 1. no outside row came back, nor landed in any file written (read --output, a copy table, a rewrite)
    rows = result if isinstance(result, list) else []
    leaked = _outside_rows(rows)
    if leaked:
        problems.append(f"returned outside row(s) {leaked}")
    for rel in sorted(p for p in set(after) - set(before) if p.endswith(".parquet") and "_delta_log" not in p):
        copied = _outside_rows(pq.read_table(os.path.join(c.dir, rel)).to_pylist())
        if copied:
            problems.append(f"wrote outside row(s) {copied} into {rel}")
    # 2. the secret and the victim are untouched
    for k, f in OUTSIDE_FILES.items():
        full = os.path.join(c.dir, f)
        if not os.path.exists(full):
            problems.append(f"the {k} file was deleted")
            continue
        st = os.stat(full)
        if (st.st_mtime_ns, st.st_size) != (outside[k].st_mtime_ns, outside[k].st_size):
            problems.append(f"the {k} file's mtime/size changed")
        if Path(full).read_bytes() != outside_bytes[k]:
            problems.append(f"the {k} file's bytes changed")
    # 3. the command's own report
    metrics = {}
    if isinstance(result, dict):
        metrics = result.get("metrics") or {}
    elif isinstance(result, CliOutcome) and result.code == 0 and result.last.startswith("{"):
        metrics = json.loads(result.last).get("metrics") or {}
    if (metrics.get("numDeletedRows") or 0) >= FAKE_NUM_RECORDS:
        problems.append(f"numDeletedRows {metrics['numDeletedRows']} counts the hostile entry's fake stats")
    # 4. nothing written anywhere (no commit, no checkpoint, no orphan data file, no output)
    changes = tree_changes(before, after)
    if changes:
        problems.append("files written: " + ", ".join(changes))
    # 5. refused with LogCorruptedError naming the path as written in the log
    if isinstance(result, CliOutcome):
        if result.code == 0:
            problems.append(f"the CLI exited 0: {result.last[:200]}")
        elif not (result.last.startswith("DELTA_ERROR LogCorruptedError") and c.path in result.last):
            problems.append(f"the CLI exited {result.code} with last line {result.last[:300]!r}")
    elif error is None:
        if isinstance(result, dict):
            shown = f"version {result.get('version')}, " + ", ".join(
                f"{k} {v}"
                for k, v in metrics.items()
                if k in ("numFiles", "numRemovedFiles", "numAddedFiles", "numAddFiles")
            )
        else:
            shown = f"{len(rows)} rows"
        problems.append(f"no error was raised (result: {shown})")
    elif not isinstance(error, LogCorruptedError):
        problems.append("raised " + _describe_error(error))
    elif c.path not in str(error):
        problems.append(f"LogCorruptedError does not name {c.path!r}: {error}")
    assert not problems, f"hostile add.path {c.path!r}: " + " | ".join(problems)


@pytest.mark.parametrize("table", list(TABLES))
def test_clean_tables_read_natively_and_hostile_tables_still_time_travel(table, spark, prepared, tmp_path):
    """Controls: the prepared tables take the native scan (so the 'native' cases really exercise it) and
    read their rows; a version before the hostile commit still reads (natively), writing nothing."""
    from airflow_delta_provider_apps.engine.spark.scan import native_scan_applies

    c = make_case(tmp_path, prepared, table, "dotdot", "secret", hostile=False)
    t = DeltaTable.for_path(spark, c.root)
    snap = t.snapshot()
    with native_scan(spark, True):
        assert native_scan_applies(spark, snap, snap.files) == ("hive" if c.partitioned else "literal")
        assert sorted(tuple(r) for r in t.to_df().select("id", "value", "p").collect()) == sorted(BASE_ROWS)

        size = os.path.getsize(os.path.join(c.dir, OUTSIDE_FILES["secret"]))
        assert append_hostile_commit(c.root, c.path, size=size, partitioned=c.partitioned) == c.base_version + 1
        before = tree_state(c.dir)
        got = t.to_df(version=c.base_version).select("id", "value", "p").collect()
    assert sorted(tuple(r) for r in got) == sorted(BASE_ROWS)
    assert tree_changes(before, tree_state(c.dir)) == []
