"""The change data feed in Spark: read as a DataFrame, and a silver table's changes merged into a gold
table through the apps' source options, each version's changes exactly once."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}

# the newest change per key, without pre-images: what a silver-to-gold MERGE applies
LATEST = (
    "SELECT id, v, _change_type FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY _commit_version DESC, "
    "CASE _change_type WHEN 'update_postimage' THEN 0 WHEN 'insert' THEN 0 ELSE 1 END) AS rn FROM source "
    "WHERE _change_type != 'update_preimage') WHERE rn = 1"
)
CLAUSES = [
    {"when": "matched", "then": "delete", "condition": "source._change_type = 'delete'"},
    {"when": "matched", "then": "update", "set": {"v": "source.v"}},
    {
        "when": "not_matched",
        "then": "insert",
        "values": {"id": "source.id", "v": "source.v"},
        "condition": "source._change_type != 'delete'",
    },
]


def _merge(spark, capsys, silver: str, gold: str) -> dict:
    spec = {
        "table_uri": gold,
        "source": silver,
        "source_format": "delta",
        "source_options": {"readChangeFeed": "true"},
        "source_query": LATEST,
        "predicate": "target.id = source.id",
        "clauses": CLAUSES,
    }
    code = cli.main(["merge", "--spec-json", json.dumps(spec)], spark=spark)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0, last
    return json.loads(last)


def _rows(t: DeltaTable) -> list:
    return sorted((r["id"], r["v"]) for r in t.to_df().collect())


def test_a_silver_tables_changes_reach_gold_exactly_once(spark, tmp_path, capsys):
    silver_uri, gold_uri = str(tmp_path / "silver"), str(tmp_path / "gold")
    silver = DeltaTable.create(spark, silver_uri, schema="id BIGINT, v STRING", properties=CDF)
    gold = DeltaTable.create(spark, gold_uri, schema="id BIGINT, v STRING")
    silver.append(spark.createDataFrame([(i, f"a{i}") for i in range(6)], "id BIGINT, v STRING"))  # v1
    silver.update({"v": "concat(v, '!')"}, "id IN (1, 2)")  # v2
    silver.delete("id = 2 OR id = 5")  # v3
    # the DataFrame of the changes equals the Arrow stream of them
    df_rows = sorted(tuple(r) for r in silver.changes_df(1).collect())
    arrow = pa.table(silver.changes(1))
    assert df_rows == sorted(
        (r["id"], r["v"], r["_change_type"], r["_commit_version"], r["_commit_timestamp"].replace(tzinfo=None))
        for r in arrow.to_pylist()
    )
    assert [c for c in silver.changes_df(1, 1, columns=["v"]).columns] == [
        "v",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    ]

    first = _merge(spark, capsys, silver_uri, gold_uri)
    assert first["changes"]["startingVersion"] == 0 and first["changes"]["endingVersion"] == 3
    assert _rows(gold) == _rows(silver) == [(0, "a0"), (1, "a1!"), (3, "a3"), (4, "a4")]
    # nothing new: an empty source, no commit
    again = _merge(spark, capsys, silver_uri, gold_uri)
    assert (again["changes"]["startingVersion"], again["committed"]) == (4, False)
    assert gold.version() == first["version"]
    silver.upsert(spark.createDataFrame([(0, "b0"), (9, "b9")], "id BIGINT, v STRING"), ["id"])  # v4
    third = _merge(spark, capsys, silver_uri, gold_uri)
    assert (third["changes"]["startingVersion"], third["changes"]["endingVersion"]) == (4, 4)
    assert _rows(gold) == _rows(silver)
    app = f"delta-changes:{silver.snapshot().metadata.id}"
    assert gold.snapshot().set_transactions[app].version == 4


def test_replace_where_on_a_data_column_records_its_deletes_and_inserts(spark, tmp_path):
    """A data condition rewrites the files it touches (their deleted rows go to change files), so the
    rows written go there too: the commit's changes are exactly the replaced rows and the new ones."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v STRING", properties=CDF)
    t.append(spark.createDataFrame([(i, "old" if i % 2 else "keep") for i in range(6)], "id BIGINT, v STRING"))
    res = t.overwrite(
        spark.createDataFrame([(10, "old"), (11, "old")], "id BIGINT, v STRING"), replace_where="v = 'old'"
    )
    got = sorted((r["id"], r["v"], r["_change_type"]) for r in pa.table(t.changes(res["version"])).to_pylist())
    assert got == [
        (1, "old", "delete"),
        (3, "old", "delete"),
        (5, "old", "delete"),
        (10, "old", "insert"),
        (11, "old", "insert"),
    ]
    with open(f"{root}/_delta_log/{res['version']:020d}.json") as f:
        actions = [json.loads(line) for line in f]
    adds = [a for a in actions if "add" in a]
    assert res["metrics"]["numFiles"] == len(adds)  # change files are not data files
    assert sorted((r["id"], r["v"]) for r in t.to_df().collect()) == [
        (0, "keep"),
        (2, "keep"),
        (4, "keep"),
        (10, "old"),
        (11, "old"),
    ]


def test_replace_where_with_merge_schema_adds_the_column_to_the_change_rows(spark, tmp_path):
    """The rerunnable daily load after a schema change, through Spark: ``replace_where`` on a data
    column with ``merge_schema`` adds the source's new column in the same commit; the replaced rows
    are deletes with it NULL, the written rows inserts with their values, in change files of the new
    schema; Spark's reading of the feed, ours and deltalake's ``load_cdf`` agree with the model."""
    root = str(tmp_path / "t")
    t = DeltaTable.create(spark, root, schema="id BIGINT, v STRING", properties=CDF)
    t.append(spark.createDataFrame([(i, "old" if i % 2 else "keep") for i in range(6)], "id BIGINT, v STRING"))
    res = t.overwrite(
        spark.createDataFrame([(10, "old", "web"), (11, "old", None)], "id BIGINT, v STRING, channel STRING"),
        replace_where="v = 'old'",
        merge_schema=True,
    )
    version = res["version"]
    expected = [
        (1, "old", None, "delete"),
        (3, "old", None, "delete"),
        (5, "old", None, "delete"),
        (10, "old", "web", "insert"),
        (11, "old", None, "insert"),
    ]
    ours = sorted((r["id"], r["v"], r["channel"], r["_change_type"]) for r in pa.table(t.changes(version)).to_pylist())
    assert ours == expected
    assert sorted(tuple(r)[:4] for r in t.changes_df(version).collect()) == expected
    deltalake = pytest.importorskip("deltalake")
    theirs = pa.table(deltalake.DeltaTable(root).load_cdf(starting_version=version))
    assert sorted((r["id"], r["v"], r["channel"], r["_change_type"]) for r in theirs.to_pylist()) == expected
    with open(f"{root}/_delta_log/{version:020d}.json") as f:
        actions = [json.loads(line) for line in f]
    schema = json.loads(next(a["metaData"] for a in actions if "metaData" in a)["schemaString"])
    assert [c["name"] for c in schema["fields"]] == ["id", "v", "channel"]
    cdc = [a["cdc"]["path"] for a in actions if "cdc" in a]
    assert cdc and {tuple(pq.read_schema(f"{root}/{p}").names) for p in cdc} == {("id", "v", "channel", "_change_type")}
    assert sorted(tuple(r) for r in t.to_df().collect()) == [
        (0, "keep", None),
        (2, "keep", None),
        (4, "keep", None),
        (10, "old", "web"),
        (11, "old", None),
    ]
