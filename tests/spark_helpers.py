"""Helpers shared by tests/spark and tests/interop (imported by module name from tests/; no fixtures here)."""

from __future__ import annotations

import datetime
import json
import os
from decimal import Decimal

import pyarrow as pa


def log_actions(table_root, version: int) -> list[dict]:
    """The JSON actions of one commit file."""
    path = os.path.join(str(table_root), "_delta_log", f"{version:020d}.json")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def commit_info(table_root, version: int) -> dict:
    return next(a["commitInfo"] for a in log_actions(table_root, version) if "commitInfo" in a)


def data_files_on_disk(table_root) -> set[str]:
    """Relative paths of every parquet file under the table root (outside _delta_log)."""
    out = set()
    root = str(table_root)
    for d, _, files in os.walk(root):
        if "_delta_log" in d.split(os.sep):
            continue
        for f in files:
            if f.endswith(".parquet"):
                out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def _norm(v):
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.UTC)
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, Decimal):
        return ("dec", str(v.normalize()) if v == v else "NaN")
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list):
        # maps arrive as lists of (key, value) tuples
        return tuple(_norm(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_norm(x) for x in v)
    return v


def rows(data, schema: pa.Schema | None = None) -> list:
    """Rows of an Arrow table (or anything with __arrow_c_stream__) as a sorted multiset of tuples.

    With ``schema`` the table is first cast to it (same column order and types on both sides).
    """
    if not isinstance(data, pa.Table):
        data = pa.table(data)
    if schema is not None:
        data = data.select(schema.names).cast(schema)
    out = [tuple(_norm(r[c]) for c in data.column_names) for r in data.to_pylist()]
    return sorted(out, key=repr)


def df_rows(df, schema: pa.Schema | None = None) -> list:
    """Rows of a pyspark DataFrame (through Arrow) as a sorted multiset."""
    return rows(df.toArrow(), schema)
