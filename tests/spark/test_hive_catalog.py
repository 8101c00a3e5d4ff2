"""The Hive metastore catalog (issue 41 item 2) through Spark's own Hive client, each in a process of
its own (a Hive-enabled session; the shared test session has none): an embedded Derby metastore. The entry is delta-spark's: an external
table of provider ``delta`` at the table's location, no columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("hive_catalog_child.py")


def _run_child(work: Path, spark_conf: dict) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(work), json.dumps(spark_conf)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _check(out: dict, work: Path) -> None:
    location = "file:" + str(work / "orders")
    assert out["create"] == {"catalog": "hive_metastore", "table": "silver.orders", "action": "created", "version": 0}
    assert out["tables"] == ["orders"]
    for entry in (out["entry"], out["entry_after"], out["entry_final"]):
        # delta-spark's form: provider delta at the location, external, the schema left to the log
        assert (entry["provider"], entry["location"], entry["table_type"], entry["columns"]) == (
            "delta",
            location,
            "EXTERNAL",
            [],
        )
    assert out["schema_changes"] == [{"change": "added", "column": "channel", "type": "string"}]
    assert (out["resync"]["action"], out["resync"]["version"]) == ("unchanged", 2)
    assert out["taken"] == "Catalog table silver.orders (hive_metastore) already exists and is another table"


def test_hive_metastore_entry_in_embedded_derby(tmp_path):
    conf = {
        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={tmp_path}/metastore;create=true",
        "spark.ui.enabled": "false",
    }
    _check(_run_child(tmp_path, conf), tmp_path)
