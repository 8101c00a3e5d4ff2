"""DELETE on tables written by other Delta engines (the conformance corpus, 40 tables), in-process on a copy.

Every table ends in one of three ways, and which one is pinned per table, so a table can never drift
silently from "compared" to "skipped":

* **deleted and compared** (32 tables, deletion-vector tables included: their DELETEs merge new
  rows into the vectors delta-spark wrote; on a table with the change data feed, each DELETE's
  changes are exactly the rows it deleted): for each column whose values can be written as a SQL literal
  (numbers, strings, dates, booleans, decimals; partition columns included: conditions on them alone
  take the metadata-only path), a fresh copy goes through a sequence of DELETEs whose conditions are
  NULL on some rows: ``c NOT IN (v, NULL)`` (never TRUE: nothing deleted, nothing committed), ``NOT (c
  <= v) OR c = NULL``, ``c IN (v, NULL)``, ``c != v`` (NULL ``c`` stays), ``c <=> NULL``. After each one
  the rows equal the rows read before it minus those where the condition is TRUE, computed
  independently with pyarrow's three-valued (Kleene) kernels from a hand translation of the SQL (never
  with our evaluator); the metrics count the deleted rows. Where delta-rs reads the original table
  exactly as we do, it must also read the result as we do.
* **refused up front** (by design): the table uses a writer feature this engine does not
  implement (the preview name ``liquid``). The error names a feature
  the table's protocol or metadata really has; nothing is written (the folder is byte for byte the
  same) and the rows read afterwards equal the rows before.
* **not readable** (3 tables: the corpus ships their logs without data files, or with a gap in the log;
  their rows cannot be read by anyone, so there is nothing to compare rows with): a DELETE that needs
  the data fails with the same clear error as reading and writes nothing; where the log is sound, a
  DELETE of a whole table (metadata only) removes exactly the files the log lists as live.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conformance_location import manifest_tables
from outside_readers import deltalake_scan

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import (
    DataFileMissingError,
    LogCorruptedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

TABLES = manifest_tables()  # collection time; the tables are read through conformance_root

# the tables that cannot be compared row by row, and why (every other table must be deleted from and
# compared: a table moving between these groups fails the test)
REFUSED = {  # a writer feature this engine does not implement
    "delta-rs/table_with_liquid_clustering",
}
UNREADABLE = {  # log-replay fixtures: the corpus has no data files for them / a gap in the log
    "delta-golden/checkpoint": DataFileMissingError,
    "delta-golden/delete-re-add-same-file-different-transactions": DataFileMissingError,
    "delta-golden/versions-not-contiguous": LogCorruptedError,
}

_INTEGRAL = {"byte", "short", "integer", "long"}
_SAFE_STRING = re.compile(r"[A-Za-z0-9 _.:-]*")


# ---- helpers ---------------------------------------------------------------------------------------


def _counter(t: pa.Table) -> Counter:
    return Counter(repr(sorted(r.items())) for r in t.to_pylist(maps_as_pydicts="lossy"))


def _fingerprint(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _copy(src: Path, tmp_path, name="t") -> Path:
    root = tmp_path / name
    shutil.copytree(src, root)
    return root


def _literal(type_name: str, v) -> str | None:
    """``v`` as a Spark SQL literal of the column's type (None: not written as a literal here)."""
    if type_name == "boolean":
        return "true" if v else "false"
    if type_name in _INTEGRAL:
        return str(v)
    if type_name in ("float", "double"):
        return repr(float(v)) if math.isfinite(v) else None
    if type_name.startswith("decimal"):
        return format(v, "f")
    if type_name == "string":
        return f"'{v}'" if _SAFE_STRING.fullmatch(v) else None
    if type_name == "date":
        return f"DATE '{v.isoformat()}'"
    return None  # binary, timestamps, nested types


def _column(table: pa.Table, name: str, type_name: str) -> pa.Array:
    col = table.column(name).combine_chunks()
    return col.cast(pa.float64()) if type_name == "float" else col  # compare float32 as the double it is


def _scalar(col: pa.Array, v) -> pa.Scalar:
    return pa.scalar(v).cast(col.type)


def _pick(table: pa.Table, name: str, type_name: str):
    """A value of the column to compare with: the lower median of its distinct literal-friendly values."""
    values = sorted({v for v in table.column(name).to_pylist() if v is not None and _literal(type_name, v)})
    return values[(len(values) - 1) // 2] if values else None


NULL_BOOL = pa.scalar(None, pa.bool_())

# (SQL template, pyarrow reference: (column, value scalar) -> three-valued mask), applied in this order
STEPS = [
    # never TRUE: c = v gives FALSE, anything else NULL
    ("{c} NOT IN ({v}, NULL)", lambda c, v: pc.if_else(pc.equal(c, v), False, NULL_BOOL)),
    # TRUE where c > v; NULL where c <= v (FALSE OR NULL) or c is NULL
    ("NOT ({c} <= {v}) OR {c} = NULL", lambda c, v: pc.or_kleene(pc.invert(pc.less_equal(c, v)), NULL_BOOL)),
    # TRUE where c = v, NULL elsewhere
    ("{c} IN ({v}, NULL)", lambda c, v: pc.if_else(pc.equal(c, v), True, NULL_BOOL)),
    # NULL where c is NULL: those rows stay
    ("{c} != {v}", lambda c, v: pc.not_equal(c, v)),
    # never NULL
    ("{c} <=> NULL", lambda c, v: pc.is_null(c)),
]


def _deltalake_rows(root) -> Counter | None:
    try:
        return _counter(deltalake_scan(str(root)))
    except Exception:  # delta-rs cannot read this table (a feature, a type): no cross-check
        return None


# ---- the test ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", TABLES or [None], ids=[t["dir"] for t in TABLES] or ["no-corpus"])
def test_delete_on_a_table_written_elsewhere(tmp_path, conformance_root, entry):
    name = entry["dir"]
    src = conformance_root / entry["table_root"]
    if name in UNREADABLE:
        _unreadable(tmp_path, src, UNREADABLE[name])
    elif name in REFUSED:
        _refused(tmp_path, src)
    else:
        _deleted_and_compared(tmp_path, entry, src)


def _deleted_and_compared(tmp_path, entry, original: Path):
    snap = DeltaTable.for_path(None, str(original)).snapshot()
    partition_columns = set(snap.metadata.partition_columns or [])
    before_all = read_snapshot_table(snap)
    theirs_agree = _deltalake_rows(original) == _counter(before_all)
    # every top-level column with a value that can be written as a literal (partition columns too)
    columns = [(f.name, f.type.name) for f in snap.schema.fields if _pick(before_all, f.name, f.type.name) is not None]
    if before_all.num_rows:
        assert columns, "no column of this table can be written as a literal: the test cannot delete from it"
    steps_run = deleted_total = null_steps = 0
    for col_name, type_name in columns:
        root = _copy(original, tmp_path, f"t-{col_name}")
        t = DeltaTable.for_path(None, str(root))
        for template, reference in STEPS:
            before = read_snapshot_table(t.snapshot())
            v = _pick(before, col_name, type_name)
            if v is None and "{v}" in template:
                continue
            sql = template.format(c=f"`{col_name}`", v=_literal(type_name, v) if v is not None else "")
            col = _column(before, col_name, type_name)
            mask = reference(col, _scalar(col, v) if v is not None else None)
            deleted = pc.fill_null(mask, False)
            expected = before.filter(pc.invert(deleted))
            n_deleted = before.num_rows - expected.num_rows
            version = t.version()
            result = t.delete(sql)
            where = (entry["dir"], sql, "partition column" if col_name in partition_columns else "data column")
            assert _counter(read_snapshot_table(t.snapshot())) == _counter(expected), where
            if n_deleted == 0:
                assert result["committed"] is False and t.version() == version, where
            else:
                m = result["metrics"]
                assert t.version() == version + 1, where
                # left out only when unmeasured: a metadata-only delete of files the writer gave no stats
                assert m.get("numDeletedRows", n_deleted) == n_deleted, (where, m)
                assert "numDeletedRows" in m or m["numAddedFiles"] == 0, (where, m)
                if t.snapshot().properties.enable_change_data_feed:
                    feed = pa.table(t.changes(t.version())).select(before.column_names)
                    assert _counter(feed) == _counter(before.filter(deleted)), where
            steps_run += 1
            deleted_total += n_deleted
            null_steps += mask.null_count > 0
        if theirs_agree:
            assert _deltalake_rows(root) == _counter(read_snapshot_table(t.snapshot())), (entry["dir"], col_name)
    if before_all.num_rows:  # the sequence really ran, deleted rows, and met NULL conditions
        assert steps_run >= 4 and deleted_total > 0 and null_steps > 0, (steps_run, deleted_total, null_steps)


def _refused(tmp_path, src: Path):
    root = _copy(src, tmp_path)
    t = DeltaTable.for_path(None, str(root))
    snap = t.snapshot()
    before = read_snapshot_table(snap)
    features = set(snap.protocol.writer_features or []) | set(snap.protocol.reader_features or [])
    if (snap.metadata.configuration or {}).get("delta.columnMapping.mode", "none") != "none":
        features.add("columnMapping")
    fingerprint = _fingerprint(root)
    col = snap.schema.fields[0].name
    with pytest.raises(UnsupportedFeatureError) as e:
        t.delete(f"`{col}` IS NULL OR `{col}` IS NOT NULL")
    named = re.findall(r"feature '(\w+)'", str(e.value))
    assert named and set(named) <= features, (str(e.value), features)
    assert _fingerprint(root) == fingerprint  # refused before anything was written
    assert t.version() == snap.version
    assert _counter(read_snapshot_table(t.snapshot())) == _counter(before)


def _unreadable(tmp_path, src: Path, error):
    root = _copy(src, tmp_path)
    t = DeltaTable.for_path(None, str(root))
    fingerprint = _fingerprint(root)
    try:
        snap = t.snapshot()
    except error as e:  # the log itself is refused: so is every DELETE
        with pytest.raises(error) as d:
            t.delete("intCol IS NULL")
        assert str(d.value) == str(e)
        assert _fingerprint(root) == fingerprint
        return
    with pytest.raises(error):
        read_snapshot_table(snap)
    # a DELETE that must read the data fails as reading does, writing nothing
    for sql in ("intCol IS NULL", "intCol NOT IN (1, NULL)", "intCol = 1"):
        with pytest.raises(error, match="missing"):
            t.delete(sql)
        assert _fingerprint(root) == fingerprint, sql
    # a DELETE of the whole table needs only the log: it removes exactly the live files
    live = sorted(snap.files.column("path").to_pylist())
    assert live
    result = t.delete()
    assert result["metrics"]["numRemovedFiles"] == len(live) and result["metrics"]["numAddedFiles"] == 0
    with open(root / "_delta_log" / f"{result['version']:020d}.json") as f:
        removed = sorted(a["remove"]["path"] for a in map(json.loads, f) if "remove" in a)
    assert removed == live
    assert t.snapshot().files.num_rows == 0
    assert read_snapshot_table(t.snapshot()).num_rows == 0


def test_the_tables_set_apart_are_in_the_corpus(conformance_root):
    dirs = {t["dir"] for t in TABLES}
    assert REFUSED | set(UNREADABLE) <= dirs
    assert len(dirs - REFUSED - set(UNREADABLE)) == 36  # deleted from and compared row by row
