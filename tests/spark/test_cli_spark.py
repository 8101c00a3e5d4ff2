"""The apps' command line for the Spark operations (read, write, create-as-select), run in-process
with the shared session (``cli.main(argv, spark=spark)`` does not stop a session it was given)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_helpers import rows

from airflow_delta_provider_apps import cli
from airflow_delta_provider_apps.engine import DeltaTable

pytestmark = pytest.mark.spark


def _run(argv, capsys, spark):
    code = cli.main(argv, spark=spark)
    out = capsys.readouterr().out.strip().splitlines()
    return code, out[-1] if out else ""


def test_cli_create_as_select_write_and_read(spark, tmp_path, capsys):
    root = str(tmp_path / "t")
    csv = tmp_path / "src.csv"
    csv.write_text("id,name,score\n1,a,1.5\n2,b,2.5\n3,,3.5\n")
    pq_src = tmp_path / "src.parquet"
    pq.write_table(pa.table({"id": pa.array([4, 5], pa.int32()), "name": ["d", "e"], "score": [4.5, None]}), pq_src)
    json_src = tmp_path / "src.json"
    json_src.write_text('{"id": 6, "name": "f", "score": 6.5}\n{"id": 7, "name": "g"}\n')

    code, last = _run(
        [
            "create-table",
            "--table-uri",
            root,
            "--source",
            str(csv),
            "--source-format",
            "csv",
            "--partition-by",
            "name",
            "--description",
            "from csv",
        ],
        capsys,
        spark,
    )
    assert code == 0, last
    res = json.loads(last)
    assert (res["operation"], res["version"], res["skipped"]) == ("CREATE TABLE AS SELECT", 0, False)
    assert res["metrics"]["numOutputRows"] == 3 and isinstance(res["metrics"]["numFiles"], int)
    schema = DeltaTable.for_path(None, root).detail()["schema"]
    assert [(f["name"], f["type"]) for f in schema["fields"]] == [
        ("id", "integer"),
        ("name", "string"),
        ("score", "double"),
    ]

    spec = {
        "table_uri": root,
        "mode": "append",
        "source": str(pq_src),
        "source_format": "parquet",
        "app_id": "job",
        "app_version": 1,
        "user_metadata": "via spec",
    }
    code, last = _run(["write", "--spec-json", json.dumps(spec)], capsys, spark)
    assert code == 0, last
    res = json.loads(last)
    assert (res["operation"], res["version"], res["metrics"]["numOutputRows"]) == ("WRITE", 1, 2)
    code, last = _run(["write", "--spec-json", json.dumps(spec)], capsys, spark)
    assert code == 0 and json.loads(last)["skipped"] is True and json.loads(last)["version"] == 1

    # JSON infers id as bigint: appending it to the int column is refused (no silent narrowing) ...
    code, last = _run(
        ["write", "--table-uri", root, "--mode", "append", "--source", str(json_src), "--source-format", "json"],
        capsys,
        spark,
    )
    assert code == 1 and last.startswith("DELTA_ERROR SchemaMismatchError: ") and "'id'" in last
    # ... while the csv rows (int) append fine
    code, last = _run(
        ["write", "--table-uri", root, "--mode", "append", "--source", str(csv), "--source-format", "csv"],
        capsys,
        spark,
    )
    assert code == 0, last
    assert json.loads(last)["version"] == 2
    jroot = str(tmp_path / "j")
    assert (
        _run(["create-table", "--table-uri", jroot, "--schema", "id BIGINT, name STRING, score DOUBLE"], capsys, spark)[
            0
        ]
        == 0
    )
    code, last = _run(
        ["write", "--table-uri", jroot, "--mode", "append", "--source", str(json_src), "--source-format", "json"],
        capsys,
        spark,
    )
    assert code == 0, last
    assert [tuple(r) for r in DeltaTable.for_path(spark, jroot).to_df().orderBy("id").collect()] == [
        (6, "f", 6.5),
        (7, "g", None),
    ]

    out = tmp_path / "out" / "rows.parquet"
    code, last = _run(["read", "--table-uri", root, "--output", str(out)], capsys, spark)
    assert code == 0, last
    res = json.loads(last)
    assert res["version"] == 2 and res["metrics"]["numOutputRows"] == 8 and res["output"] == str(out)
    got = pq.read_table(out)
    assert got.column_names == ["id", "name", "score"]
    csv_rows = [(1, "a", 1.5), (2, "b", 2.5), (3, None, 3.5)]
    assert rows(got) == sorted(csv_rows * 2 + [(4, "d", 4.5), (5, "e", None)], key=repr)
    code, last = _run(["read", "--table-uri", root, "--output", str(out), "--version", "0"], capsys, spark)
    assert code == 0 and json.loads(last)["metrics"]["numOutputRows"] == 3
    assert pq.read_table(out).num_rows == 3

    # a Delta table as the source, with time travel
    copy = str(tmp_path / "copy")
    code, last = _run(
        ["create-table", "--table-uri", copy, "--schema", "id INT, name STRING, score DOUBLE"], capsys, spark
    )
    assert code == 0
    code, last = _run(
        [
            "write",
            "--table-uri",
            copy,
            "--mode",
            "append",
            "--source",
            root,
            "--source-format",
            "delta",
            "--source-option",
            "versionAsOf=1",
        ],
        capsys,
        spark,
    )
    assert code == 0, last
    assert json.loads(last)["metrics"]["numOutputRows"] == 5


def test_cli_errors_are_one_clear_line(spark, tmp_path, capsys):
    root = str(tmp_path / "t")
    assert _run(["create-table", "--table-uri", root, "--schema", "id BIGINT NOT NULL"], capsys, spark)[0] == 0
    result = tmp_path / "r.json"
    code, last = _run(
        [
            "write",
            "--table-uri",
            root,
            "--mode",
            "append",
            "--source",
            str(tmp_path / "missing"),
            "--source-format",
            "parquet",
            "--result-uri",
            str(result),
        ],
        capsys,
        spark,
    )
    assert code == 1 and last.startswith("DELTA_ERROR InvalidArgumentError: ") and "not found" in last
    assert json.loads(result.read_text())["error_class"] == "InvalidArgumentError"

    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["x"]}), src)
    code, last = _run(
        ["write", "--table-uri", root, "--mode", "append", "--source", str(src), "--source-format", "parquet"],
        capsys,
        spark,
    )
    assert code == 1 and last.startswith("DELTA_ERROR SchemaMismatchError: ")
    code, last = _run(
        ["write", "--table-uri", root, "--mode", "overwrite", "--source", str(src), "--source-format", "parquet"],
        capsys,
        spark,
    )
    assert code == 1 and last.startswith("DELTA_ERROR SchemaMismatchError: ")  # checked before any file
    code, last = _run(
        ["write", "--table-uri", root, "--mode", "append", "--source", str(src), "--source-format", "avro"],
        capsys,
        spark,
    )
    assert code == 1 and "source_format must be one of parquet, csv, json, delta, orc" in last
    assert DeltaTable.for_path(None, root).version() == 0

    # a data file deleted behind the log's back: the executor's DataFileMissingError comes back as itself
    data = tmp_path / "d"
    DeltaTable.create(spark, str(data), schema="id BIGINT").append(spark.range(5))
    for dirpath, _, files in os.walk(data):
        for f in files:
            if f.endswith(".parquet"):
                os.unlink(os.path.join(dirpath, f))
    code, last = _run(["read", "--table-uri", str(data), "--output", str(tmp_path / "o.parquet")], capsys, spark)
    assert code == 1 and last.startswith("DELTA_ERROR DataFileMissingError: "), last
