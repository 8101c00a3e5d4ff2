"""The Hive metastore catalog (issue 41 item 2) through Spark's own Hive client, each in a process of
its own (a Hive-enabled session; the shared test session has none): an embedded Derby metastore, and a
metastore database that is a real PostgreSQL server (Debian's packages and JDBC driver, started here).
The entry is delta-spark's form: an external table of provider ``delta`` at the table's location; its
columns are the log's, so ``spark.table`` and ``SELECT`` read it through our data source, before and
after a ``merge_schema`` write."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from object_store_servers import free_port

CHILD = Path(__file__).with_name("hive_catalog_child.py")
APP_CHILD = Path(__file__).with_name("hive_catalog_app_child.py")


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
    columns = [("id", "bigint"), ("name", "string"), ("day", "date")]
    for entry, cols in ((out["entry"], columns), (out["entry_after"], [*columns, ("channel", "string")])):
        # delta-spark's form (provider delta at the location, external), the log's columns
        assert (entry["provider"], entry["location"], entry["table_type"]) == ("delta", location, "EXTERNAL")
        assert [tuple(c) for c in entry["columns"]] == cols
    assert out["entry_final"] == out["entry_after"]
    assert out["registered"] == ["airflow_delta", "delta"]
    # the name reads through our source (a Python scan of `delta`), by spark.table and by SQL
    before, after = out["read_before"], out["read_after"]
    assert before["columns"] == ["id", "name", "day"]
    assert before["rows"] == before["sql"] == [["1", "a", "2026-03-01"]]
    assert out["schema_changes"] == [{"change": "added", "column": "channel", "type": "string"}]
    assert (out["resync"]["action"], out["resync"]["version"]) == ("updated", 2)
    assert after["columns"] == ["id", "name", "day", "channel"]
    assert after["rows"] == after["sql"] == [["1", "a", "2026-03-01", "None"], ["2", "b", "2026-03-02", "web"]]
    for read in (before, after):
        assert "BatchScan delta[" in read["plan"] and "(Python)" in read["plan"], read["plan"]
    assert out["resync_again"] == "unchanged"
    assert out["taken"] == "Catalog table silver.orders (hive_metastore) already exists and is another table"


def test_hive_metastore_entry_in_embedded_derby(tmp_path):
    conf = {
        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={tmp_path}/metastore;create=true",
        "spark.ui.enabled": "false",
    }
    _check(_run_child(tmp_path, conf), tmp_path)


def test_hive_metastore_synced_in_the_spark_apps_session(tmp_path):
    """The sync runs where the session is: the task's CREATE TABLE goes to spark-submit because its
    Hive metastore sync needs Spark, the app syncs in its own session (built with Hive support and
    the connection's metastore settings) and returns ``catalog``; the worker starts no Spark."""
    conf = {"spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={tmp_path}/metastore;create=true"}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, str(APP_CHILD), str(tmp_path), json.dumps(conf)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["transport"] == "spark-submit"
    assert out["catalog"] == {"catalog": "hive_metastore", "table": "silver.orders", "action": "created", "version": 0}
    assert out["worker_spark"] is False


JDBC_DRIVER = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java


def _postgres_bin() -> str | None:
    """The folder of Debian's PostgreSQL server programs (initdb, pg_ctl), None when not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture
def postgres():
    """A PostgreSQL server of its own (a fresh cluster in a temporary folder, a free port), stopped after.
    initdb refuses root: as root the cluster belongs to Debian's ``postgres`` user."""
    bindir = _postgres_bin()
    if bindir is None or not os.path.isfile(JDBC_DRIVER):
        pytest.skip(
            "PostgreSQL or its JDBC driver is not installed (apt-get install postgresql libpostgresql-jdbc-java)"
        )
    as_user = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without Debian's postgres user: initdb refuses root")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: initdb refuses root")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = tempfile.mkdtemp(prefix="delta-metastore-pg-")  # not under pytest's tmp (0700: postgres can't enter)
    data, port = os.path.join(base, "data"), free_port()
    if as_user:
        shutil.chown(base, "postgres")

    def run(*cmd):
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    try:
        run(f"{bindir}/initdb", "-D", data, "-U", "hive", "--auth=trust", "--no-sync", "-E", "UTF8")
        server = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(f"{bindir}/pg_ctl", "-D", data, "-o", server, "-l", os.path.join(base, "log"), "-w", "start")
        yield f"jdbc:postgresql://127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _create_metastore_schema(url: str, work: Path) -> None:
    """The metastore's tables, made before Spark connects (left to DataNucleus's autoCreateAll, which
    creates them in the middle of Spark's first createTable, that createTable hung on PostgreSQL). Hive's own schema scripts are not in pyspark's jars; DataNucleus's SchemaTool makes the
    same tables from the mapping Hive's metastore runs on (``package.jdo`` in hive-metastore's jar),
    with Hive's identifier settings."""
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    (metastore_jar,) = glob.glob(os.path.join(jars, "hive-metastore-*.jar"))
    with zipfile.ZipFile(metastore_jar) as jar:
        (work / "package.jdo").write_bytes(jar.read("package.jdo"))
    (work / "datanucleus.properties").write_text(
        f"javax.jdo.option.ConnectionURL={url}\n"
        "javax.jdo.option.ConnectionDriverName=org.postgresql.Driver\n"
        "javax.jdo.option.ConnectionUserName=hive\n"
        "javax.jdo.option.ConnectionPassword=\n"
        "datanucleus.identifierFactory=datanucleus1\n"  # Hive's (HiveConf's defaults)
        "datanucleus.rdbms.useLegacyNativeValueStrategy=true\n"
    )
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    proc = subprocess.run(
        [java, "-cp", f"{jars}/*:{JDBC_DRIVER}", "org.datanucleus.store.schema.SchemaTool", "-create", "-api", "JDO"]
        + ["-props", "datanucleus.properties", "package.jdo"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "completed successfully" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_hive_metastore_entry_in_postgresql(tmp_path, postgres):
    _create_metastore_schema(postgres, tmp_path)
    conf = {
        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": postgres,
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionUserName": "hive",
        "spark.hadoop.datanucleus.schema.autoCreateAll": "false",  # the schema is made above
        "spark.hadoop.hive.metastore.schema.verification": "false",  # no VERSION row from Hive's scripts
        "spark.driver.extraClassPath": JDBC_DRIVER,
        "spark.ui.enabled": "false",
    }
    _check(_run_child(tmp_path, conf), tmp_path)
    # the entry is in PostgreSQL's tables, where any other metastore client finds it
    rows = subprocess.run(
        [
            "psql",
            postgres.replace("jdbc:", "").replace("127.0.0.1", "hive@127.0.0.1"),
            "-At",
            "-c",
            'SELECT d."NAME", t."TBL_NAME", t."TBL_TYPE", p."PARAM_VALUE" FROM "TBLS" t JOIN "DBS" d USING ("DB_ID") '
            'JOIN "TABLE_PARAMS" p USING ("TBL_ID") WHERE p."PARAM_KEY" = \'spark.sql.sources.provider\'',
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert rows == ["silver|orders|EXTERNAL_TABLE|delta"]
