"""Which other readers read a table with each feature we write (issue 40 item 6): the claims behind the
README's reader table and the task log's reader warnings (``features.OUTSIDE_READER_REFUSALS``), measured.

For each feature a table is created with it (and the change data feed), written twice and the feature put
to use (a deletion vector, a V2 checkpoint, a widened column, a renamed mapped column, a clustering
OPTIMIZE...). Then each reader is tried: deltalake 1.6.6 (``to_pyarrow_table`` as "read", its
``QueryBuilder`` as "query", ``load_cdf``, a ``write_deltalake`` append), delta-kernel-rs, DuckDB's
``delta_scan`` and, where it is installed (it is not in the test extra), Polars' ``read_delta``. What a reader refuses must be exactly what we claim; what it reads must equal our rows
(our change rows for ``load_cdf``; after a deltalake append, our read holds the appended row).

``python tests/interop/test_reader_support.py`` measures again and prints the README's table.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script too

from outside_readers import duckdb_table, kernel_table, sorted_rows

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.features import OUTSIDE_READER_REFUSALS
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

pytestmark = pytest.mark.interop

SCHEMA = "id BIGINT, p INT"
#: feature -> (table properties, schema, the step that puts the feature to use)
FEATURES: dict[str, tuple[dict, str, str | None]] = {
    "(none)": ({}, SCHEMA, None),
    "appendOnly": ({"delta.appendOnly": "true"}, SCHEMA, None),
    "changeDataFeed": ({}, SCHEMA, "delete"),
    "checkConstraints": ({"delta.constraints.positive": "id >= 0"}, SCHEMA, None),
    "generatedColumns": ({}, SCHEMA + ", g BIGINT GENERATED ALWAYS AS (id * 2)", None),
    "identityColumns": ({}, "k BIGINT GENERATED ALWAYS AS IDENTITY, " + SCHEMA, None),
    "timestampNtz": ({}, SCHEMA + ", t TIMESTAMP_NTZ", None),
    "columnMapping": ({"delta.columnMapping.mode": "name"}, SCHEMA, "rename"),
    "deletionVectors": ({"delta.enableDeletionVectors": "true"}, SCHEMA, "delete"),
    "v2Checkpoint": ({"delta.checkpointPolicy": "v2"}, SCHEMA, "checkpoint"),
    "typeWidening": ({"delta.enableTypeWidening": "true"}, SCHEMA, "widen"),
    "inCommitTimestamp": ({"delta.enableInCommitTimestamps": "true"}, SCHEMA, None),
    "rowTracking": ({"delta.enableRowTracking": "true"}, SCHEMA, "delete"),
    "clustering": ({}, SCHEMA, "optimize"),
    "vacuumProtocolCheck": ({"delta.feature.vacuumProtocolCheck": "supported"}, SCHEMA, None),
    # the appends leave q out: it takes its default
    "allowColumnDefaults": ({"delta.feature.allowColumnDefaults": "supported"}, SCHEMA + ", q INT DEFAULT 3", None),
    "collations": ({}, SCHEMA + ", s STRING COLLATE UTF8_LCASE", None),
    # the appends leave v out (NULL variants); its values: tests/engine/commands/test_variant_table.py
    "variantType": ({}, SCHEMA + ", v VARIANT", None),
}
DELTALAKE_OPERATIONS = ("read", "query", "load_cdf", "append")


def build(root: str, feature: str) -> DeltaTable:
    properties, schema, use = FEATURES[feature]
    cluster_by = ["id"] if feature == "clustering" else None
    create_table(
        root, schema=schema, properties={**properties, "delta.enableChangeDataFeed": "true"}, cluster_by=cluster_by
    )
    t = DeltaTable(None, root)
    for ids in ([1, 2, 3], [4, 5]):
        rows = {"id": pa.array(ids, pa.int64()), "p": pa.array([i % 2 for i in ids], pa.int32())}
        if "TIMESTAMP_NTZ" in schema:
            rows["t"] = pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us"))
        append_arrow(root, pa.table(rows))
    if use == "delete":
        t.delete("id = 2")
    elif use == "rename":
        t.rename_column("p", "q")
    elif use == "checkpoint":
        t.checkpoint()
        append_arrow(root, pa.table({"id": pa.array([6], pa.int64()), "p": pa.array([0], pa.int32())}))
    elif use == "widen":
        t.change_column_type("p", "BIGINT")
    elif use == "optimize":
        t.optimize()
    return t


def _ours(t: DeltaTable) -> tuple[list[str], list[tuple]]:
    table = read_snapshot_table(t.snapshot())
    return table.column_names, sorted_rows(table, table.column_names)


def _tried(read) -> bool:
    """True when the reader did it; False when it refused (raised). Rows that differ from ours are not
    a refusal: the test fails."""
    try:
        read()
    except AssertionError:
        raise
    except Exception:
        return False
    return True


def measure(root: str, t: DeltaTable) -> dict[str, bool]:
    """Which readers read the table (and deltalake's operations), each checked against our rows."""
    import deltalake
    from deltalake import QueryBuilder

    columns, ours = _ours(t)
    got: dict[str, bool] = {}

    def same(name: str, table) -> None:
        assert sorted_rows(pa.table(table), columns) == ours, name

    got["delta-kernel-rs"] = _tried(lambda: same("kernel", kernel_table(root, columns)))
    got["DuckDB"] = _tried(lambda: same("duckdb", duckdb_table(root, columns)))
    got["read"] = _tried(lambda: same("to_pyarrow_table", deltalake.DeltaTable(root).to_pyarrow_table(columns=columns)))
    select = ", ".join(f'"{c}"' for c in columns)
    got["query"] = _tried(
        lambda: same(
            "query", QueryBuilder().register("t", deltalake.DeltaTable(root)).execute(f"SELECT {select} FROM t")
        )
    )
    change_columns = ["id", "_change_type", "_commit_version"]
    our_changes = sorted_rows(t.changes(0).read_all(), change_columns)

    def load_cdf():
        theirs = pa.table(deltalake.DeltaTable(root).load_cdf(starting_version=0).read_all())
        assert sorted_rows(theirs, change_columns) == our_changes, "load_cdf"

    got["load_cdf"] = _tried(load_cdf)
    one = read_snapshot_table(t.snapshot()).slice(0, 1)

    def append():
        deltalake.write_deltalake(root, _deltalake_form(one), mode="append")
        # an append deltalake committed must read back right
        assert _ours(t)[1] == sorted(
            ours + sorted_rows(one, columns), key=lambda r: tuple((v is not None, v) for v in r)
        )

    try:  # Polars is not in the test extra: checked where it is installed
        import polars
    except ImportError:
        polars = None
    if polars is not None:
        got["Polars"] = _tried(lambda: same("polars", polars.read_delta(root).select(columns).to_arrow()))
    got["append"] = _tried(append)
    return got


def _deltalake_form(table: pa.Table) -> pa.Table:
    """``table`` as deltalake 1.6.6 takes it: a variant's struct with ``metadata`` first (it does not cast
    Spark's field order, ours)."""
    for i, field in enumerate(table.schema):
        t = field.type
        if pa.types.is_struct(t) and {t.field(j).name for j in range(t.num_fields)} == {"value", "metadata"}:
            arr = table.column(i).combine_chunks()
            fields = [pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)]
            theirs = pa.StructArray.from_arrays(
                [arr.field("metadata"), arr.field("value")],
                fields=fields,
                mask=arr.is_null() if arr.null_count else None,
            )
            table = table.set_column(i, field.name, theirs)
    return table


def claimed(feature: str, polars: bool) -> dict[str, bool]:
    """What we claim (``OUTSIDE_READER_REFUSALS``): kernel reads everything, DuckDB all but what it is
    said to refuse; Polars when ``polars`` (it is installed)."""
    refusals = OUTSIDE_READER_REFUSALS.get(feature, {})
    refused = refusals.get("deltalake", ())
    duckdb = "read" not in refusals.get("DuckDB", ())
    out = {"delta-kernel-rs": True, "DuckDB": duckdb, **{op: op not in refused for op in DELTALAKE_OPERATIONS}}
    if polars:
        out["Polars"] = "read" not in refusals.get("Polars", ())
    return out


@pytest.mark.parametrize("feature", list(FEATURES))
def test_other_readers_read_or_refuse_as_we_claim(tmp_path, feature):
    pytest.importorskip("deltalake")
    pytest.importorskip("delta_kernel_rust_sharing_wrapper")
    pytest.importorskip("duckdb_extension_delta")
    root = str(tmp_path / "t")
    t = build(root, feature)
    assert feature == "(none)" or feature in _protocol_features(t), feature  # the case has the feature
    got = measure(root, t)
    assert got == claimed(feature, "Polars" in got)


def test_every_feature_we_warn_of_is_measured_with_the_versions_the_warnings_name():
    """A warning names the reader versions the claims were measured with: an upgrade of deltalake (or
    of Polars where installed) fails here until the claims are measured again."""
    from importlib.metadata import version

    from airflow_delta_provider_apps.engine.features import OUTSIDE_READER_VERSIONS

    assert set(OUTSIDE_READER_REFUSALS) <= set(FEATURES)
    assert version("deltalake") == OUTSIDE_READER_VERSIONS["deltalake"]
    assert version("duckdb") == OUTSIDE_READER_VERSIONS["DuckDB"]
    try:
        import polars
    except ImportError:
        return
    assert polars.__version__ == OUTSIDE_READER_VERSIONS["Polars"]


def _protocol_features(t: DeltaTable) -> set[str]:
    from airflow_delta_provider_apps.engine.features import protocol_features

    return protocol_features(t.snapshot().protocol)


def readme_table(results: dict[str, dict[str, bool]]) -> str:
    """The README's table from measured results (the versions are the installed ones; Polars must be)."""
    from importlib.metadata import version

    def deltalake_cell(got: dict[str, bool]) -> str:
        refused = [op for op in DELTALAKE_OPERATIONS if not got[op]]
        if not refused:
            return "yes"
        if "read" not in refused:
            return f"reads; no {', '.join(refused)}"
        return "no" + (f" ({', '.join(refused)}; `QueryBuilder` reads)" if got["query"] else f" ({', '.join(refused)})")

    def yes(ok: bool) -> str:
        return "yes" if ok else "no"

    head = (
        f"| Feature | ours | deltalake {version('deltalake')} | Polars {version('polars')} | "
        f"delta-kernel-rs ({version('delta-kernel-rust-sharing-wrapper')}) | DuckDB {version('duckdb')} `delta_scan` "
        "| Spark + delta-spark 4.x |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for feature, got in results.items():
        name = "none (a plain table)" if feature == "(none)" else f"`{feature}`"
        cells = [name, "yes", deltalake_cell(got), yes(got["Polars"]), yes(got["delta-kernel-rs"]), yes(got["DuckDB"])]
        lines.append("| " + " | ".join([*cells, "yes"]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    measured = {}
    for name in FEATURES:
        root = os.path.join(tempfile.mkdtemp(), "t")
        measured[name] = measure(root, build(root, name))
        assert measured[name] == claimed(name, "Polars" in measured[name]), (name, measured[name])
    print(readme_table(measured))
