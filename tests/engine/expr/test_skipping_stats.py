"""Data skipping on typed stats (a checkpoint's ``stats_parsed``) and on the stats JSON.

Tables are real logs: commits through ``OptimisticTransaction``, a checkpoint written by our writer
with ``delta.checkpoint.writeStatsAsStruct=true``, commits after it (files without typed stats), read
back by ``load_snapshot``. Every check runs twice: on ``snapshot.files`` (typed stats where the
checkpoint had them) and on the same files without the ``stats_parsed`` column (JSON only); both
must keep the same files and never drop one holding a matching row (decided by pyarrow filtering of
the real rows, or by the plain-Python SQL reference of ``sql_strategies``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_strategies import SCHEMA, predicates, rows, table_of

from airflow_delta_provider_apps.engine.actions import AddFile, Metadata, Protocol
from airflow_delta_provider_apps.engine.expr import evaluate, parse_predicate
from airflow_delta_provider_apps.engine.expr import nodes as n
from airflow_delta_provider_apps.engine.expr.skipping import skip_files, stats_table
from airflow_delta_provider_apps.engine.log.checkpoint import write_checkpoint
from airflow_delta_provider_apps.engine.log.snapshot import load_snapshot
from airflow_delta_provider_apps.engine.reader import read_files_batches
from airflow_delta_provider_apps.engine.schema import parse_ddl
from airflow_delta_provider_apps.engine.stats import collect_stats
from airflow_delta_provider_apps.engine.storage import storage_for
from airflow_delta_provider_apps.engine.txn import OptimisticTransaction

STRUCT_STATS = {"delta.checkpoint.writeStatsAsStruct": "true"}


# ---- building logs --------------------------------------------------------------------------------


def _create(root: str, schema, partition_by=(), configuration=None) -> None:
    txn = OptimisticTransaction(storage_for(root), root, None, operation="CREATE TABLE")
    txn.update_metadata(
        Metadata(
            id=Metadata.new_id(),
            schema_string=schema.to_json_string(),
            partition_columns=list(partition_by),
            configuration=dict(configuration or STRUCT_STATS),
            created_time=1_700_000_000_000,
        )
    )
    txn.update_protocol(Protocol(1, 2))
    txn.commit([])


def _commit(root: str, adds: list[AddFile]) -> None:
    snap = load_snapshot(storage_for(root), root)
    OptimisticTransaction(storage_for(root), root, snap, operation="WRITE").commit(adds)


def _checkpoint(root: str) -> None:
    write_checkpoint(storage_for(root), root, load_snapshot(storage_for(root), root))


def _add(path: str, stats: str | None, partition_values=None) -> AddFile:
    return AddFile(
        path=path,
        partition_values=dict(partition_values or {}),
        size=100,
        modification_time=1_700_000_000_000,
        data_change=True,
        stats=stats,
    )


def _both(files: pa.Table) -> list[pa.Table]:
    """The files as the snapshot has them (typed stats) and with the JSON stats only."""
    assert "stats_parsed" in files.column_names
    return [files, files.drop(["stats_parsed"])]


def _json_broken(files: pa.Table) -> pa.Table:
    """``files`` with unparseable JSON stats wherever typed stats exist."""
    stats = pc.if_else(files.column("stats_parsed").is_valid(), pa.scalar("not json"), files.column("stats"))
    return files.set_column(files.schema.get_field_index("stats"), "stats", stats)


def _kept(files: pa.Table, schema, partition_columns, text: str) -> set[str]:
    result = skip_files(files, schema, partition_columns, parse_predicate(text, schema))
    return set(result.files.column("path").to_pylist())


def _kept_both(files, schema, partition_columns, text) -> set[str]:
    typed, json_only = (_kept(f, schema, partition_columns, text) for f in _both(files))
    assert typed == json_only, text
    return typed


# ---- real data files, our checkpoint with writeStatsAsStruct --------------------------------------

WIDE = parse_ddl(
    "id BIGINT, name STRING, ts TIMESTAMP, ntz TIMESTAMP_NTZ, amount DECIMAL(10,2), f FLOAT, day DATE, p STRING"
)
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
LONG = "x" * 40  # longer than the 32-character stats prefix


def _wide_rows(k: int) -> pa.Table:
    """File ``k``: 5 rows with values that differ per file (sub-millisecond timestamps, long strings)."""
    ids = [k * 10 + j for j in range(5)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if j == 4 else f"{LONG}{k:02d}{j}" if k % 2 else f"n{k:02d}{j}" for j in range(5)]),
            "ts": pa.array(
                [T0 + dt.timedelta(seconds=k, microseconds=123_456 + j) for j in range(5)], pa.timestamp("us", "UTC")
            ),
            "ntz": pa.array(
                [(T0 + dt.timedelta(minutes=k, microseconds=999_999)).replace(tzinfo=None)] * 5, pa.timestamp("us")
            ),
            "amount": pa.array([decimal.Decimal(f"{k}.{j}5") for j in range(5)], pa.decimal128(10, 2)),
            "f": pa.array([k + j / 10 for j in range(5)], pa.float32()),
            "day": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=k)] * 5, pa.date32()),
        }
    )


def _write_data(root: str, k: int) -> AddFile:
    data = _wide_rows(k)
    part = "a" if k % 3 else "b"
    rel = f"p={part}/part-{k:03d}-{uuid.uuid4()}.parquet"
    os.makedirs(os.path.join(root, f"p={part}"), exist_ok=True)
    pq.write_table(data, os.path.join(root, rel))
    stats = collect_stats(WIDE, data, partition_columns=["p"])
    return _add(rel, stats, {"p": part})


@pytest.fixture(scope="module")
def wide_table(tmp_path_factory):
    """12 files in a checkpoint with typed stats, then 4 files added by JSON commits."""
    root = str(tmp_path_factory.mktemp("wide") / "t")
    _create(root, WIDE, ["p"])
    _commit(root, [_write_data(root, k) for k in range(6)])
    _commit(root, [_write_data(root, k) for k in range(6, 12)])
    _checkpoint(root)
    for k in range(12, 16):
        _commit(root, [_write_data(root, k)])
    return root


WIDE_PREDICATES = [
    ("id = 33", pc.field("id") == 33),
    ("id > 150", pc.field("id") > 150),
    ("id BETWEEN 42 AND 61", (pc.field("id") >= 42) & (pc.field("id") <= 61)),
    (f"name = '{LONG}033'", pc.field("name") == f"{LONG}033"),
    (f"name > '{LONG}07'", pc.field("name") > f"{LONG}07"),
    ("name < 'n03'", pc.field("name") < "n03"),
    ("name IS NULL", pc.field("name").is_null()),
    ("name IS NOT NULL AND id < 3", pc.field("name").is_valid() & (pc.field("id") < 3)),
    (
        "ts = TIMESTAMP'2026-01-01 12:00:05.123458'",
        pc.field("ts") == pa.scalar(T0 + dt.timedelta(seconds=5, microseconds=123_458), pa.timestamp("us", "UTC")),
    ),
    (
        "ts > TIMESTAMP'2026-01-01 12:00:09.123459'",
        pc.field("ts") > pa.scalar(T0 + dt.timedelta(seconds=9, microseconds=123_459), pa.timestamp("us", "UTC")),
    ),
    (
        "ts > TIMESTAMP'2026-01-01 12:00:09.124'",
        pc.field("ts") > pa.scalar(T0 + dt.timedelta(seconds=9, microseconds=124_000), pa.timestamp("us", "UTC")),
    ),
    (
        "ntz >= TIMESTAMP_NTZ'2026-01-01 12:13:00.999999'",
        pc.field("ntz") >= pa.scalar(dt.datetime(2026, 1, 1, 12, 13, 0, 999_999), pa.timestamp("us")),
    ),
    ("amount = 7.25", pc.field("amount") == pa.scalar(decimal.Decimal("7.25"), pa.decimal128(10, 2))),
    ("amount < 2.05", pc.field("amount") < pa.scalar(decimal.Decimal("2.05"), pa.decimal128(10, 2))),
    ("f < 3.1", pc.field("f").cast(pa.float64()) < 3.1),
    ("f >= 14.3", pc.field("f").cast(pa.float64()) >= 14.3),
    ("day = DATE'2026-01-09'", pc.field("day") == pa.scalar(dt.date(2026, 1, 9), pa.date32())),
    ("p = 'b' AND id > 100", (pc.field("p") == "b") & (pc.field("id") > 100)),
    (
        "id = 3 OR day > DATE'2026-01-14'",
        (pc.field("id") == 3) | (pc.field("day") > pa.scalar(dt.date(2026, 1, 14), pa.date32())),
    ),
]


@pytest.mark.parametrize("text,arrow_filter", WIDE_PREDICATES, ids=[p[0] for p in WIDE_PREDICATES])
def test_checkpoint_typed_stats_never_drop_a_matching_file(wide_table, text, arrow_filter):
    snap = load_snapshot(storage_for(wide_table), wide_table)
    files = snap.files
    parsed = files.column("stats_parsed")
    assert parsed.null_count == 4 and files.num_rows == 16  # 12 from the checkpoint, 4 from JSON commits
    kept = _kept_both(files, snap.schema, ["p"], text)
    matching = set()
    for path, rows_ in zip(
        files.column("path").to_pylist(),
        read_files_batches(snap.storage, snap.table_root, files, snap.schema, ["p"]),
    ):
        if rows_.filter(arrow_filter).num_rows:
            matching.add(path)
    assert matching <= kept, text
    if text in ("id = 33", "day = DATE'2026-01-09'"):
        assert kept == matching and len(kept) == 1  # the stats are precise enough to keep one file


def test_typed_stats_equal_parsed_json(wide_table):
    snap = load_snapshot(storage_for(wide_table), wide_table)
    cols = [c for c in parse_predicate(" AND ".join(f"{f.name} IS NULL" for f in WIDE.fields[:-1]), WIDE).walk()]
    cols = [c for c in cols if isinstance(c, n.Column)]
    typed, json_only = (stats_table(f, cols) for f in _both(snap.files))
    assert typed.equals(json_only)
    # the typed rows really came from stats_parsed: the JSON of a checkpoint row no longer matters
    broken = _json_broken(snap.files)
    assert stats_table(broken, cols).equals(typed)
    assert stats_table(broken.drop(["stats_parsed"]), cols) is None


def test_checkpoint_without_json_stats_still_skips(tmp_path):
    root = str(tmp_path / "t")
    _create(root, WIDE, ["p"], {**STRUCT_STATS, "delta.checkpoint.writeStatsAsJson": "false"})
    _commit(root, [_write_data(root, k) for k in range(4)])
    _checkpoint(root)
    _commit(root, [_write_data(root, 4)])
    snap = load_snapshot(storage_for(root), root)
    assert snap.files.column("stats_parsed").null_count == 1
    assert _kept_both(snap.files, WIDE, ["p"], "id >= 20 AND id < 32") == {
        p for p in snap.files.column("path").to_pylist() if "part-002" in p or "part-003" in p
    }


# ---- random data, random predicates --------------------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.lists(rows, min_size=1, max_size=6), min_size=1, max_size=6),
    st.integers(1, 6),
    st.lists(predicates(), min_size=1, max_size=4),
    st.booleans(),
)
def test_random_predicates_typed_and_json_agree(tmp_path_factory, chunks, n_checkpointed, preds, partitioned):
    """Files in a checkpoint with typed stats and files from later commits: skipping on either form
    keeps the same files, and never drops one holding a row the SQL reference says matches."""
    root = str(tmp_path_factory.mktemp("rand") / "t")
    part_cols = ["p"] if partitioned else []
    _create(root, SCHEMA, part_cols)
    matches = {}
    adds = []
    for k, chunk in enumerate(chunks):
        pval = chunk[0]["p"]
        if partitioned:
            chunk = [dict(r, p=pval) for r in chunk]
        data = table_of(chunk)
        stats = collect_stats(SCHEMA, data.drop(["p"]) if partitioned else data, partition_columns=part_cols)
        pv = {"p": None if pval is None else str(pval)} if partitioned else {}
        adds.append(_add(f"f{k}.parquet", stats, pv))
        matches[f"f{k}.parquet"] = chunk
    cut = min(n_checkpointed, len(adds))  # at least one file in the checkpoint
    _commit(root, adds[:cut])
    _checkpoint(root)
    for a in adds[cut:]:
        _commit(root, [a])
    files = load_snapshot(storage_for(root), root).files
    for text, reference in preds:
        kept = _kept_both(files, SCHEMA, part_cols, text)
        for path, chunk in matches.items():
            if any(reference(r) is True for r in chunk):
                assert path in kept, (text, path, chunk)


@st.composite
def _in_lists(draw):
    """``col IN (...)`` over one column: up to 40 values (duplicates, NULL and NaN possible)."""
    from sql_strategies import LITS, sql_lit

    col = draw(st.sampled_from(list(LITS)))
    vals = draw(st.lists(LITS[col], min_size=1, max_size=40))
    texts = [sql_lit(col, v) for v in vals] + (["NULL"] if draw(st.booleans()) else [])
    return col, texts


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(rows, min_size=1, max_size=6), min_size=1, max_size=8), st.lists(_in_lists(), max_size=4))
def test_in_lists_skip_exactly_as_the_or_of_their_equalities(tmp_path_factory, chunks, in_lists):
    """IN is skipped as a set (a binary search per file, not one comparison per value): it keeps
    exactly the files Delta's definition keeps, the OR of one equality per value."""
    root = str(tmp_path_factory.mktemp("in") / "t")
    _create(root, SCHEMA, ["p"])
    adds = []
    for k, chunk in enumerate(chunks):
        pval = chunk[0]["p"]
        chunk = [dict(r, p=pval) for r in chunk]
        stats = collect_stats(SCHEMA, table_of(chunk).drop(["p"]), partition_columns=["p"])
        adds.append(_add(f"f{k}.parquet", stats, {"p": None if pval is None else str(pval)}))
    _commit(root, adds[: len(adds) // 2 + 1])
    _checkpoint(root)
    _commit(root, adds[len(adds) // 2 + 1 :] or [])
    files = load_snapshot(storage_for(root), root).files
    for col, texts in in_lists:
        as_set = _kept_both(files, SCHEMA, ["p"], f"{col} IN ({', '.join(texts)})")
        as_or = _kept_both(files, SCHEMA, ["p"], " OR ".join(f"{col} = {t}" for t in texts))
        assert as_set == as_or, (col, texts)


@pytest.mark.parametrize(
    "column,values",
    [
        ("id", [str(k) for k in range(-50, 2000, 7)]),
        ("name", [f"'n{k:03d}'" for k in range(0, 400, 3)] + [f"'{LONG}'"]),
        ("ts", [f"TIMESTAMP'2026-01-{d:02d} 12:00:0{k}'" for d in range(1, 28) for k in range(3)]),
        ("ntz", [f"TIMESTAMP_NTZ'2026-01-{d:02d} 12:00:00'" for d in range(1, 28)]),
        ("amount", [f"{k}.25" for k in range(0, 60, 2)]),
        ("f", ["1.5", "3.1", "14.3", "99.0"]),
        ("day", [f"DATE'2026-01-{d:02d}'" for d in range(2, 30, 3)]),
        ("p", ["'a'", "'c'", "'zz'"]),
    ],
)
def test_in_lists_of_every_stats_type_skip_as_their_equalities(wide_table, column, values):
    files = load_snapshot(storage_for(wide_table), wide_table).files
    kept = []
    for chosen in (values[:1], values[:5], values):
        as_set = _kept_both(files, WIDE, ["p"], f"{column} IN ({', '.join(chosen)})")
        assert as_set == _kept_both(files, WIDE, ["p"], " OR ".join(f"{column} = {v}" for v in chosen))
        kept.append(len(as_set))
    assert kept[0] < files.num_rows, "one value skips some files"  # the comparison is not vacuous


# ---- edge cases, hand-written stats ---------------------------------------------------------------

EDGE = parse_ddl("s STRING, ts TIMESTAMP, ntz TIMESTAMP_NTZ, x BIGINT")


def _edge_files(tmp_path, stats_rows: list[str | None]) -> pa.Table:
    """A snapshot's files whose stats are ``stats_rows``, all in a checkpoint with typed stats."""
    root = str(tmp_path / "edge")
    _create(root, EDGE)
    _commit(root, [_add(f"f{k}", s) for k, s in enumerate(stats_rows)])
    _checkpoint(root)
    files = load_snapshot(storage_for(root), root).files
    assert files.column("stats_parsed").null_count == sum(s is None for s in stats_rows)
    return files.take(pc.sort_indices(files.column("path")))


def _stats(lo: dict, hi: dict, *, records=3, nulls=None, tight=None) -> str:
    import json

    d = {"numRecords": records, "minValues": lo, "maxValues": hi, "nullCount": nulls or dict.fromkeys(lo, 0)}
    if tight is not None:
        d["tightBounds"] = tight
    return json.dumps(d)


def _minmax(column: str, lo, hi, **kw) -> str:
    return _stats({column: lo}, {column: hi}, nulls={column: kw.pop("nulls", 0)}, **kw)


def test_truncated_string_maxima_are_not_upper_bounds(tmp_path):
    long_value = "c" * 32 + "zzz"  # stats keep a 32-character prefix
    emoji_value = "k\U0001f600"  # its second character sorts above the U+FFFD tie-breaker
    files = _edge_files(
        tmp_path,
        [
            _minmax("s", "c" * 32, "c" * 32 + "\ufffd"),  # f0: our writer / delta-spark: prefix + tie-breaker
            _minmax("s", "c" * 32, "c" * 32),  # f1: a writer that cut the max without tie-breaker
            _minmax("s", "k", "k\ufffd"),  # f2: a cut after one character, tie-breaker below the cut char
            _minmax("s", "a", "b"),  # f3: exact short bounds
        ],
    )
    assert _kept_both(files, EDGE, [], f"s = '{long_value}'") == {"f0", "f1"}
    assert _kept_both(files, EDGE, [], f"s > '{'c' * 32}'") == {"f0", "f1", "f2"}
    assert _kept_both(files, EDGE, [], f"s > '{'c' * 32}' AND s < 'd'") == {"f0", "f1"}
    assert _kept_both(files, EDGE, [], f"s = '{emoji_value}'") == {"f2"}
    assert _kept_both(files, EDGE, [], "s > 'l'") == set()  # a cut max still bounds by its prefix
    assert _kept_both(files, EDGE, [], "s = 'ba'") == set()  # exact maxima keep their precision
    assert _kept_both(files, EDGE, [], "s = 'b'") == {"f3"}


def test_millisecond_timestamp_maxima_are_widened(tmp_path):
    files = _edge_files(
        tmp_path,
        [
            # f0: max written as .123: the true max may be anything up to .123999
            _stats(
                {"ts": "2026-01-01T12:00:00.000Z", "ntz": "2026-01-01T12:00:00.000"},
                {"ts": "2026-01-01T12:00:00.123Z", "ntz": "2026-01-01T12:00:00.123"},
            ),
            # f1: far later
            _stats(
                {"ts": "2026-01-02T00:00:00.000Z", "ntz": "2026-01-02T00:00:00.000"},
                {"ts": "2026-01-02T00:00:00.000Z", "ntz": "2026-01-02T00:00:00.000"},
            ),
        ],
    )
    assert _kept_both(files, EDGE, [], "ts = TIMESTAMP'2026-01-01 12:00:00.123999'") == {"f0"}
    assert _kept_both(files, EDGE, [], "ts > TIMESTAMP'2026-01-01 12:00:00.1235'") == {"f0", "f1"}
    assert (
        _kept_both(files, EDGE, [], "ts >= TIMESTAMP'2026-01-01 12:00:00.124' AND ts < TIMESTAMP'2026-01-01 13:00:00'")
        == set()
    )
    assert _kept_both(files, EDGE, [], "ntz = TIMESTAMP_NTZ'2026-01-01 12:00:00.123999'") == {"f0"}
    assert (
        _kept_both(
            files, EDGE, [], "ntz BETWEEN TIMESTAMP_NTZ'2026-01-01 12:00:00.124' AND TIMESTAMP_NTZ'2026-01-01 13:00:00'"
        )
        == set()
    )
    # != never skips on a widened max: min = max = v does not mean every value is v
    assert _kept_both(files, EDGE, [], "ts != TIMESTAMP'2026-01-02 00:00:00'") == {"f0", "f1"}
    assert _kept_both(files, EDGE, [], "ts < TIMESTAMP'2026-01-02 00:00:00'") == {"f0"}


def test_wide_bounds_keep_min_max_but_not_null_counts(tmp_path):
    files = _edge_files(
        tmp_path,
        [
            _minmax("x", 1, 10, records=3, nulls=3, tight=False),  # f0: nullCount says "all null", unreliable
            _minmax("x", 1, 10, records=3, nulls=3, tight=True),  # f1: tight: really all null
            _minmax("x", 1, 10, records=3, nulls=0, tight=False),  # f2
        ],
    )
    assert _kept_both(files, EDGE, [], "x IS NOT NULL") == {"f0", "f2"}
    assert _kept_both(files, EDGE, [], "x > 10") == set()  # min/max of wide stats still bound
    assert _kept_both(files, EDGE, [], "x = 5") == {"f0", "f1", "f2"}
    assert _kept_both(files, EDGE, [], "x IS NULL") == {"f0", "f1"}


def test_missing_stats_keep_the_file(tmp_path):
    files = _edge_files(
        tmp_path,
        [
            None,  # f0: no stats at all
            '{"numRecords": 3}',  # f1: no column stats
            _minmax("s", "a", "b"),  # f2: stats for another column only
            _minmax("x", 1, 2),  # f3: bounds rule it out
        ],
    )
    for text in ("x = 100", "x IS NULL", "x IS NOT NULL AND x > 5", "NOT (x <= 50)"):
        kept = _kept_both(files, EDGE, [], text)
        assert {"f0", "f1", "f2"} <= kept and "f3" not in kept, text


# ---- the conformance corpus: checkpoints written by other engines with stats_parsed ---------------

CORPUS_TABLES = [
    (
        "delta-rs/checkpoint-v2-table",
        ["id > 30", "name = 'Mallory' AND id < 12", "created_at < TIMESTAMP'2025-08-09 14:45:00'"],
    ),
    (
        "delta-kernel-rs/app-txn-checkpoint",
        ["value > 5", "id = 'B' AND value < 2", "modified = '2021-02-02' OR value = 1"],
    ),
]


@pytest.mark.parametrize("table,texts", CORPUS_TABLES, ids=[t for t, _ in CORPUS_TABLES])
def test_corpus_checkpoints_with_stats_parsed(conformance_root, table, texts):
    root = str(conformance_root / table)
    snap = load_snapshot(storage_for(root), root)
    files = snap.files
    assert files.column("stats_parsed").null_count < files.num_rows  # the checkpoint's typed stats were kept
    parts = list(snap.metadata.partition_columns)
    for text in texts:
        expr = parse_predicate(text, snap.schema)
        kept = _kept_both(files, snap.schema, parts, text)
        assert _kept(_json_broken(files), snap.schema, parts, text) == kept  # decided by the typed stats
        for path, rows_ in zip(
            files.column("path").to_pylist(),
            read_files_batches(snap.storage, snap.table_root, files, snap.schema, parts),
        ):
            if pc.any(pc.fill_null(evaluate(expr, rows_), False)).as_py():
                assert path in kept, (table, text, path)


# ---- column mapping: typed stats under physical names ----------------------------------------------


def test_column_mapping_typed_stats_use_physical_names(tmp_path):
    """A checkpoint (as delta-spark writes it) whose stats_parsed is keyed by physical names."""
    import json

    import pyarrow.json as pajson

    from airflow_delta_provider_apps.engine.actions import serialize_actions
    from airflow_delta_provider_apps.engine.log.checkpoint import build_checkpoint_table
    from airflow_delta_provider_apps.engine.schema import StructType

    def field(name, type_, cid):
        md = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"}
        return {"name": name, "type": type_, "nullable": True, "metadata": md}

    schema = StructType.from_json({"type": "struct", "fields": [field("id", "long", 1), field("name", "string", 2)]})
    root = str(tmp_path / "cm")
    os.makedirs(os.path.join(root, "_delta_log"))

    def write_commit(version, actions):  # by hand: this engine does not write column-mapped tables
        with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "wb") as f:
            f.write(serialize_actions(actions))

    metadata = Metadata(
        id=Metadata.new_id(),
        schema_string=schema.to_json_string(),
        partition_columns=[],
        configuration={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"},
        created_time=1_700_000_000_000,
    )
    stats = [
        _stats({"col-1": 0, "col-2": "a"}, {"col-1": 9, "col-2": "c"}),
        _stats({"col-1": 10, "col-2": "d"}, {"col-1": 19, "col-2": "f"}),
    ]
    write_commit(0, [Protocol(2, 5), metadata] + [_add(f"f{k}", s) for k, s in enumerate(stats)])
    snap = load_snapshot(storage_for(root), root)
    table, _ = build_checkpoint_table(snap)
    # add stats_parsed (physical names) to the add struct, parsed from the same JSON
    bounds = pa.struct([("col-1", pa.int64()), ("col-2", pa.string())])
    stats_type = pa.struct(
        [
            ("numRecords", pa.int64()),
            ("minValues", bounds),
            ("maxValues", bounds),
            ("nullCount", pa.struct([("col-1", pa.int64()), ("col-2", pa.int64())])),
        ]
    )
    add = table.column("add").combine_chunks()
    raw = [json.loads(s) if s else None for s in add.field("stats").to_pylist()]
    lines = "\n".join(json.dumps(r or {}) for r in raw).encode()
    parsed_t = pajson.read_json(
        pa.py_buffer(lines), parse_options=pajson.ParseOptions(explicit_schema=pa.schema(list(stats_type)))
    )
    parsed = pa.StructArray.from_arrays(
        [parsed_t.column(f.name).combine_chunks() for f in stats_type],
        fields=list(stats_type),
        mask=pc.is_null(add.field("stats")),
    )
    new_add = pa.StructArray.from_arrays(
        [add.field(i) for i in range(add.type.num_fields)] + [parsed],
        fields=list(add.type) + [pa.field("stats_parsed", stats_type)],
        mask=pc.invert(add.is_valid()),
    )
    table = table.set_column(table.schema.get_field_index("add"), "add", new_add)
    pq.write_table(table, os.path.join(root, "_delta_log", f"{snap.version:020d}.checkpoint.parquet"))
    write_commit(1, [_add("f2", _stats({"col-1": 20, "col-2": "g"}, {"col-1": 29, "col-2": "h"}))])

    files = load_snapshot(storage_for(root), root).files
    assert files.column("stats_parsed").null_count == 1 and files.num_rows == 3
    broken = _json_broken(files)  # so only the typed stats can decide for the checkpoint's files
    for text, want in [
        ("id = 15", {"f1"}),
        ("name > 'e' AND id < 25", {"f1", "f2"}),
        ("id >= 20 OR name = 'b'", {"f0", "f2"}),
    ]:
        assert _kept_both(files, schema, [], text) == want
        assert _kept(broken, schema, [], text) == want


# ---- columns under the binder's widening casts ----------------------------------------------------
# ``f < 0.5`` on a FLOAT column is ``CAST(f AS DOUBLE) < 0.5``, ``sh IN (1, 2)`` on a SMALLINT casts sh
# to INT, ``i < 2.5`` casts i to DECIMAL: the column's stats bound the cast values, so they skip too.

CASTS = parse_ddl("f FLOAT, sh SMALLINT, i INT, l BIGINT, m DECIMAL(10,2)")
CAST_LITERALS = {
    "f": ["0.5", "1.25D", "-3", "2.5F", "1E1", "CAST('NaN' AS DOUBLE)"],
    "sh": ["1", "40000", "2.5", "-7L", "3.0D", "32767S"],
    "i": ["2.5", "10000000000", "-2147483648", "7Y", "1E3"],
    "l": ["2.5", "9007199254740993.0", "9223372036854775807", "-1.5D", "3"],
    "m": ["1", "1.005", "-99999999.99", "2.5D", "100000000000"],
}
_CAST_VALUES = {
    "f": st.floats(-10, 10, width=32, allow_nan=False) | st.sampled_from([0.5, 2.5, -3.0]),
    "sh": st.integers(-40, 40) | st.sampled_from([-32768, 32767, 1, 3]),
    "i": st.integers(-5, 5) | st.sampled_from([-(2**31), 2**31 - 1, 1000]),
    "l": st.integers(-5, 5) | st.sampled_from([2**53 + 1, 2**53, 2**63 - 1, -(2**63)]),
    "m": st.decimals(-10, 10, places=2, allow_nan=False) | st.sampled_from([decimal.Decimal("1.00")]),
}
_ARROW = {c.name: c.type.to_arrow() for c in CASTS.fields}


@st.composite
def cast_predicates(draw):
    col = draw(st.sampled_from(list(CAST_LITERALS)))
    if draw(st.booleans()):
        op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "!=", "<=>"]))
        return f"{col} {op} {draw(st.sampled_from(CAST_LITERALS[col]))}"
    values = draw(st.lists(st.sampled_from(CAST_LITERALS[col]), min_size=1, max_size=3))
    return f"{col} IN ({', '.join(values)})"


@settings(
    max_examples=int(os.environ.get("CAST_SKIPPING_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(st.lists(st.fixed_dictionaries(_CAST_VALUES), min_size=1, max_size=5), min_size=1, max_size=5),
    st.lists(cast_predicates(), min_size=1, max_size=4),
)
def test_widening_casts_skip_and_never_drop_a_matching_file(tmp_path_factory, chunks, texts):
    """Skipping through a widening cast never drops a file holding a row the evaluator says matches."""
    root = str(tmp_path_factory.mktemp("casts") / "t")
    _create(root, CASTS)
    tables = {}
    for k, chunk in enumerate(chunks):
        data = pa.table({c: pa.array([r[c] for r in chunk], _ARROW[c]) for c in _ARROW})
        tables[f"f{k}.parquet"] = data
        _commit(root, [_add(f"f{k}.parquet", collect_stats(CASTS, data))])
    _checkpoint(root)  # typed stats beside the JSON ones
    files = load_snapshot(storage_for(root), root).files
    for text in texts:
        try:
            pred = parse_predicate(text, CASTS)
        except Exception:  # e.g. a literal out of the column's range: refused before any skipping
            continue
        kept = _kept_both(files, CASTS, [], text)
        for path, data in tables.items():
            try:
                hit = evaluate(pred, data)
            except Exception:  # an ANSI error on some row: that file must be read
                hit = pa.array([True])
            if pc.any(pc.fill_null(hit, False)).as_py():
                assert path in kept, (text, path, data.to_pylist())


@pytest.mark.parametrize(
    "text, kept",
    [
        ("f < 0.5", ["low"]),  # CAST(f AS DOUBLE) < 0.5
        ("sh IN (1, 2)", ["low"]),  # CAST(sh AS INT) IN (1, 2)
        ("i > 2.5", ["high"]),  # CAST(i AS DECIMAL(11,1)) > 2.5
        ("l = 20000000000.0D", ["high"]),  # CAST(l AS DOUBLE)
        ("m > 5", ["high"]),  # CAST(m AS DECIMAL(12,2)) > 5.00
    ],
)
def test_widening_casts_now_skip_files(tmp_path, text, kept):
    root = str(tmp_path / "t")
    _create(root, CASTS)
    for name, (f, sh, i, l_, m) in {
        "low": (0.25, 1, 1, 1, decimal.Decimal("1.00")),
        "high": (8.5, 30, 9, 2 * 10**10, decimal.Decimal("9.00")),
    }.items():
        data = pa.table(
            {
                "f": pa.array([f], pa.float32()),
                "sh": pa.array([sh], pa.int16()),
                "i": pa.array([i], pa.int32()),
                "l": pa.array([l_], pa.int64()),
                "m": pa.array([m], pa.decimal128(10, 2)),
            }
        )
        _commit(root, [_add(f"{name}.parquet", collect_stats(CASTS, data))])
    _checkpoint(root)
    files = load_snapshot(storage_for(root), root).files
    assert _kept_both(files, CASTS, [], text) == {f"{k}.parquet" for k in kept}
