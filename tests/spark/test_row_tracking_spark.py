"""Row tracking through Spark: MERGE file by file keeps stable row ids and commit versions (updated
rows keep their id, inserted rows get fresh ones), DELETE/UPDATE/OPTIMIZE in Spark tasks keep them, a
MERGE by join keeps them too; a property test of upserts (file by file and by join),
deletes, updates and OPTIMIZE against a plain-Python model; deltalake reads the same rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.row_tracking import high_water_mark, read_with_row_ids

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

TRACKED = {"delta.enableRowTracking": "true"}


def _ids(root: str) -> dict[int, tuple[int, int, str]]:
    """id -> (stable row id, row commit version, v)."""
    rows = read_with_row_ids(DeltaTable.for_path(None, root).snapshot()).to_pylist()
    assert len({r["row_id"] for r in rows}) == len(rows)  # stable ids unique in the version
    return {r["id"]: (r["row_id"], r["row_commit_version"], r["v"]) for r in rows}


def _theirs(root: str) -> dict[int, str]:
    dt = deltalake.DeltaTable(root)
    out = deltalake.QueryBuilder().register("t", dt).execute("SELECT id, v FROM t").read_all()
    return dict(zip(out.column("id").to_pylist(), out.column("v").to_pylist()))


def _table(tmp_path, ids, props=TRACKED) -> str:
    root = str(tmp_path / "t")
    DeltaTable.create(None, root, schema="id BIGINT, v STRING", properties=props)
    append_arrow(root, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}))
    return root


def _source(spark, rows):
    return spark.createDataFrame(rows, "id BIGINT, v STRING")


def test_merge_file_by_file_keeps_stable_ids(spark, tmp_path):
    root = _table(tmp_path, [1, 2, 3, 4])
    before = _ids(root)
    hwm = high_water_mark(DeltaTable.for_path(None, root).snapshot().domain_metadata)
    result = DeltaTable.for_path(spark, root).upsert(_source(spark, [(2, "new2"), (9, "new9")]), ["id"])
    assert result["strategy"] == "file_by_file"
    after = _ids(root)
    for k in (1, 3, 4):
        assert after[k] == before[k]
    assert after[2] == (before[2][0], result["version"], "new2")
    assert after[9][0] > hwm and after[9][1:] == (result["version"], "new9")
    assert _theirs(root) == {k: v[2] for k, v in after.items()}


def test_spark_tasks_keep_stable_ids(spark, tmp_path, file_tasks):
    """DELETE, UPDATE, OPTIMIZE and MERGE with their files rewritten in Spark tasks (not the driver's threads)."""
    root = _table(tmp_path, [1, 2, 3])
    append_arrow(root, pa.table({"id": pa.array([4, 5], pa.int64()), "v": ["v4", "v5"]}))
    t = DeltaTable.for_path(spark, root)
    before = _ids(root)
    t.delete("id = 1")
    result = t.update({"v": "'u'"}, "id = 4")
    t.optimize()
    after = _ids(root)
    assert after == {2: before[2], 3: before[3], 4: (before[4][0], result["version"], "u"), 5: before[5]}
    merged = t.upsert(_source(spark, [(3, "m")]), ["id"])  # file by file, in one Spark job
    assert merged["strategy"] == "file_by_file"
    after[3] = (after[3][0], merged["version"], "m")
    assert _ids(root) == after
    assert _theirs(root) == {k: v[2] for k, v in after.items()}
    assert t.to_df().columns == ["id", "v"]  # the materialized columns are no data columns
    assert sorted(r["id"] for r in t.to_df(predicate="v = 'm'").collect()) == [3]


def test_replace_where_on_a_data_column_keeps_the_other_rows_ids(spark, tmp_path):
    root = _table(tmp_path, [1, 2, 3])
    before = _ids(root)
    DeltaTable.for_path(spark, root).overwrite(_source(spark, [(3, "new")]), replace_where="id = 3")
    after = _ids(root)
    assert after[1] == before[1] and after[2] == before[2]
    assert after[3][0] > max(v[0] for v in before.values())  # a new row: a fresh id


def test_a_merge_by_join_keeps_stable_ids(spark, tmp_path):
    """ON without a key equality runs as a join: the copied rows keep their ids and commit versions,
    the updated row its id (its commit version the merge's), the inserted row a fresh id."""
    root = _table(tmp_path, [1, 2, 3])
    before = _ids(root)
    src = _source(spark, [(2, "x"), (7, "y")])
    result = (
        DeltaTable.for_path(spark, root)
        .merge(src, "target.id <= source.id AND target.id >= source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert result["strategy"] == "join"
    after = _ids(root)
    assert after[1] == before[1] and after[3] == before[3]  # copied: id and version kept
    assert after[2] == (before[2][0], result["version"], "x")  # updated: id kept
    assert after[7][0] > max(v[0] for v in before.values()) and after[7][1] == result["version"]
    assert _theirs(root) == {1: "v1", 2: "x", 3: "v3", 7: "y"}


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(st.integers(0, 12), min_size=1, max_size=4, unique=True)),
        st.tuples(st.just("delete"), st.integers(0, 12)),
        st.tuples(st.just("update"), st.integers(0, 12)),
        st.tuples(st.just("optimize"), st.just(0)),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, dvs=st.booleans(), join=st.booleans())
def test_property_stable_ids_through_merge_delete_update_optimize(spark, tmp_path_factory, ops, dvs, join):
    """``join``: the upserts run as Spark joins (the shipped source's limit set to zero)."""
    from airflow_delta_provider_apps.engine.merge import source as merge_rewrite

    limit = merge_rewrite.MAX_SOURCE_BYTES
    merge_rewrite.MAX_SOURCE_BYTES = 0 if join else limit
    try:
        _stable_ids_through(spark, tmp_path_factory, ops, dvs)
    finally:
        merge_rewrite.MAX_SOURCE_BYTES = limit


def _stable_ids_through(spark, tmp_path_factory, ops, dvs):
    root = _table(
        tmp_path_factory.mktemp("rt"), [0, 3, 6, 9], {**TRACKED, "delta.enableDeletionVectors": str(dvs).lower()}
    )
    model = {k: list(v) for k, v in _ids(root).items()}  # id -> [row id, row commit version, v]
    t = DeltaTable.for_path(spark, root)
    for op, arg in ops:
        if op == "upsert":
            result = t.upsert(_source(spark, [(k, f"m{k}") for k in arg]), ["id"])
            fresh = _ids(root)
            for k in arg:
                if k in model:  # updated: same id, the merge's version
                    model[k][1:] = [result["version"], f"m{k}"]
                else:  # inserted: a fresh id
                    model[k] = [fresh[k][0], result["version"], f"m{k}"]
        elif op == "delete":
            t.delete(f"id = {arg}")
            model.pop(arg, None)
        elif op == "update":
            result = t.update({"v": "concat(v, '!')"}, f"id = {arg}")
            if arg in model:
                model[arg][1:] = [result["version"], model[arg][2] + "!"]
        else:
            t.optimize()
        assert _ids(root) == {k: tuple(v) for k, v in model.items()}
    if not dvs:
        assert _theirs(root) == {k: v[2] for k, v in model.items()}
