"""The apps' command line, log-only operations (no Spark): run in-process via ``cli.main(argv)``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from txn_helpers import append, create_table

from airflow_delta_provider_apps import cli


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr().out.strip().splitlines()
    return code, out[-1] if out else ""


def test_describe_conformance_tables_match_manifest(conformance_root, conformance_manifest, capsys):
    checked = 0
    for entry in conformance_manifest["tables"]:
        root = conformance_root / entry["table_root"]
        code, last = _run(["describe", "--table-uri", str(root)], capsys)
        if entry["expected_kind"] == "error":
            assert code == 1 and last.startswith("DELTA_ERROR "), (entry["name"], last)
            continue
        assert code == 0, (entry["name"], last)
        res = json.loads(last)
        assert res["status"] == "ok" and res["operation"] == "DESCRIBE DETAIL"
        d = res["detail"]
        assert res["version"] == d["version"] == entry["latest_version"], entry["name"]
        assert d["partition_columns"] == entry["partition_columns"], entry["name"]
        p = entry["protocol"]
        assert (d["protocol"]["min_reader_version"], d["protocol"]["min_writer_version"]) == (
            p["minReaderVersion"],
            p["minWriterVersion"],
        ), entry["name"]
        checked += 1
    assert checked >= 35


def test_describe_and_history_output(conformance_root, capsys):
    root = conformance_root / "dat" / "basic_partitioned" / "delta"
    code, last = _run(["describe", "--table-uri", str(root)], capsys)
    assert code == 0
    res = json.loads(last)
    assert set(res) >= {"status", "operation", "table_uri", "version", "skipped", "metrics", "detail"}
    d = res["detail"]
    assert d["version"] == 1 and d["partition_columns"] == ["letter"]
    assert d["protocol"] == {
        "min_reader_version": 1,
        "min_writer_version": 2,
        "reader_features": None,
        "writer_features": None,
    }
    assert [f["name"] for f in d["schema"]["fields"]] == ["letter", "number", "a_float"]
    assert d["num_files"] == 6 and d["size_in_bytes"] > 0

    code, last = _run(["history", "--table-uri", str(root)], capsys)
    assert code == 0
    res = json.loads(last)
    assert res["operation"] == "DESCRIBE HISTORY" and res["version"] == 1
    assert [h["version"] for h in res["history"]] == [1, 0]
    assert all("operation" in h and "timestamp" in h for h in res["history"])

    code, last = _run(["history", "--table-uri", str(root), "--limit", "1"], capsys)
    assert [h["version"] for h in json.loads(last)["history"]] == [1]


def test_spec_json_and_explicit_flags(conformance_root, capsys, tmp_path):
    root = conformance_root / "dat" / "basic_append" / "delta"
    result = tmp_path / "out" / "result.json"
    spec = json.dumps({"table_uri": "/nonexistent", "limit": 5})
    # the explicit --table-uri wins over the spec's table_uri
    code, last = _run(["history", "--spec-json", spec, "--table-uri", str(root), "--result-uri", str(result)], capsys)
    assert code == 0
    assert json.loads(result.read_text()) == json.loads(last)
    code, last = _run(["history", "--spec-json", json.dumps({"table_uri": str(root), "limit": 1})], capsys)
    assert code == 0 and len(json.loads(last)["history"]) == 1


def test_missing_table_error_line_exit_code_and_result_file(tmp_path, capsys):
    result = tmp_path / "result.json"
    code, last = _run(["describe", "--table-uri", str(tmp_path / "nope"), "--result-uri", str(result)], capsys)
    assert code == 1
    assert last.startswith("DELTA_ERROR TableNotFoundError: ")
    assert "Cause:" in last and "Fix:" in last
    res = json.loads(result.read_text())
    assert res["status"] == "error" and res["error_class"] == "TableNotFoundError" and res["retryable"] is False
    assert res["message"] in last and res["problem"] and res["fix"]


@pytest.mark.parametrize(
    "argv, error_class",
    [
        (["frobnicate", "--table-uri", "x"], "InvalidArgumentError"),
        (["describe"], "InvalidArgumentError"),
        (["history", "--table-uri", "x", "--limit", "many"], "InvalidArgumentError"),
        (["describe", "--table-uri", "x", "--spec-json", "{not json"], "InvalidArgumentError"),
        (["write", "--table-uri", "x", "--mode", "append", "--source-option", "novalue"], "InvalidArgumentError"),
    ],
)
def test_bad_command_lines_are_one_line_exit_1(argv, error_class, capsys):
    code, last = _run(argv, capsys)
    assert code == 1
    assert last.startswith(f"DELTA_ERROR {error_class}: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["delete", "--predicate", ""],
        ["delete", "--predicate", "   "],
        ["update", "--predicate", "", "--spec-json", '{"updates": {"id": "1"}}'],
        ["write", "--mode", "overwrite", "--replace-where", " ", "--source", "/x.parquet"],
    ],
)
def test_an_empty_predicate_is_refused_before_spark_and_the_table_is_unchanged(argv, tmp_path, capsys):
    root = str(tmp_path / "t")
    create_table(root)
    append(root, [1, 2])
    before = sorted(str(p) for p in (tmp_path / "t").rglob("*"))
    code, last = _run([argv[0], "--table-uri", root, *argv[1:]], capsys)
    assert code == 1
    assert last.startswith("DELTA_ERROR InvalidArgumentError: ") and "predicate is empty" in last
    assert sorted(str(p) for p in (tmp_path / "t").rglob("*")) == before


def test_create_table_checkpoint_and_cleanup_without_spark(tmp_path, capsys):
    root = str(tmp_path / "t")
    code, last = _run(
        [
            "create-table",
            "--table-uri",
            root,
            "--schema",
            "id BIGINT, p STRING",
            "--partition-by",
            "p",
            "--property",
            "delta.appendOnly=true",
            "owner=me",
            "--description",
            "d",
            "--name",
            "n",
        ],
        capsys,
    )
    assert code == 0, last
    res = json.loads(last)
    assert (res["operation"], res["version"], res["skipped"]) == ("CREATE TABLE", 0, False)
    code, last = _run(["create-table", "--table-uri", root, "--schema", "id BIGINT", "--if-not-exists"], capsys)
    assert code == 0 and json.loads(last)["skipped"] is True
    code, last = _run(["create-table", "--table-uri", root, "--schema", "id BIGINT"], capsys)
    assert code == 1 and last.startswith("DELTA_ERROR TableAlreadyExistsError: ")
    code, last = _run(["describe", "--table-uri", root], capsys)
    d = json.loads(last)["detail"]
    assert d["configuration"] == {"delta.appendOnly": "true", "owner": "me"}
    assert (d["partition_columns"], d["description"], d["name"]) == (["p"], "d", "n")
    code, last = _run(["checkpoint", "--table-uri", root, "--cleanup"], capsys)
    assert code == 0, last
    res = json.loads(last)
    assert res["operation"] == "CHECKPOINT" and res["version"] == 0
    m = res["metrics"]
    # the DeltaCheckpointOperator's XCom: version, actions, bytes, duration
    assert m["numActions"] == 2 and m["numAddFiles"] == 0  # protocol + metaData, empty table
    assert m["sizeInBytes"] > 0 and m["executionTimeMs"] >= 0 and m["numParts"] == 1
    assert all(isinstance(v, int) for v in res["metrics"].values())  # Delta-style names, numbers only
    assert res["last_checkpoint_updated"] is True and res["checkpoint_files"][0].endswith(".checkpoint.parquet")
    assert res["cleanup"]["operation"] == "CLEANUP METADATA" and "numDeletedFiles" in res["cleanup"]["metrics"]
    assert (tmp_path / "t" / "_delta_log" / "00000000000000000000.checkpoint.parquet").exists()
    code, last = _run(["cleanup-metadata", "--table-uri", root], capsys)
    assert code == 0 and json.loads(last)["operation"] == "CLEANUP METADATA"


def test_log_only_cli_never_imports_pyspark(conformance_root, tmp_path):
    """`python -m airflow_delta_provider_apps describe` in a fresh process: works, and pyspark is never imported."""
    root = conformance_root / "dat" / "basic_append" / "delta"
    code = (
        f"import sys, runpy; sys.argv = ['airflow_delta_provider_apps', 'describe', '--table-uri', {str(root)!r}];\n"
        "try:\n    runpy.run_module('airflow_delta_provider_apps', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'pyspark' not in sys.modules, 'pyspark was imported'\n"
        "import airflow_delta_provider_apps.engine\nassert 'pyspark' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["version"] == 1


def test_main_runs_as_a_file_by_path(tmp_path, conformance_root):
    """spark-submit runs __main__.py by path, from a copy of the package outside any install."""
    import airflow_delta_provider_apps

    pkg = tmp_path / "bundle" / "airflow_delta_provider_apps"
    shutil.copytree(airflow_delta_provider_apps.__path__[0], pkg, ignore=shutil.ignore_patterns("__pycache__"))
    root = conformance_root / "dat" / "basic_append" / "delta"
    out = subprocess.run(
        [sys.executable, str(pkg / "__main__.py"), "describe", "--table-uri", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["detail"]["num_files"] == 2
