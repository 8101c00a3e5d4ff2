"""DELETE and UPDATE on tables written by other Delta engines (the conformance corpus): the rows equal
an independent computation on what we read before, or the command is refused up front, naming the
feature, with the table untouched. Never a silent wrong answer. (Runs in-process on a copy.)"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pyarrow as pa
import pytest
from conformance_location import CONFORMANCE, HOW_TO_GET_IT

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.errors import DeltaError, UnsupportedFeatureError
from airflow_delta_provider_apps.engine.expr import parse_predicate, true_mask
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

TABLES = json.loads((CONFORMANCE / "manifest.json").read_text())["tables"] if CONFORMANCE else []


def _first_column(schema, partition_columns):
    for f in schema.fields:
        if f.type.name in ("long", "integer", "short", "byte", "string", "date", "double"):
            if f.name not in partition_columns:
                return f
    return None


def _counter(t: pa.Table) -> Counter:
    return Counter(repr(sorted(r.items())) for r in t.to_pylist(maps_as_pydicts="lossy"))


@pytest.mark.parametrize("entry", TABLES or [None], ids=[t["dir"] for t in TABLES] or ["no-corpus"])
def test_delete_on_a_table_written_elsewhere(tmp_path, entry):
    if entry is None:
        pytest.skip(HOW_TO_GET_IT)
    root = tmp_path / "t"
    shutil.copytree(CONFORMANCE / entry["table_root"], root)
    t = DeltaTable.for_path(None, str(root))
    try:
        snap = t.snapshot()
        before = read_snapshot_table(snap)
    except DeltaError:
        pytest.skip("not readable by design (see the conformance read tests)")
    col = _first_column(snap.schema, list(snap.metadata.partition_columns))
    if col is None:
        pytest.skip("no plain column to delete by")
    predicate = f"`{col.name}` IS NOT NULL AND `{col.name}` = `{col.name}`"
    version = snap.version
    try:
        t.delete(predicate)
    except UnsupportedFeatureError as e:
        assert t.version() == version  # refused up front, nothing written
        assert "feature" in str(e).lower() or "support" in str(e).lower()
        return
    mask = true_mask(parse_predicate(predicate, snap.schema), before)
    expected = before.filter(pa.compute.invert(mask))
    assert _counter(read_snapshot_table(t.snapshot())) == _counter(expected)
