"""The PySpark data source over Spark Connect: register ships the package to the server's Python
workers once per session; one write and one read through it (the write read back by delta-kernel-rs),
and a catalog table made with CREATE TABLE ... LOCATION read by name."""

from __future__ import annotations

import uuid

import pytest
from outside_readers import kernel_table, sorted_rows

from airflow_delta_provider_apps.datasource import register
from airflow_delta_provider_apps.engine.spark.session import connect_session

pytestmark = pytest.mark.spark


def test_read_and_write_over_connect(connect_server, tmp_path):
    root = str(tmp_path / "t")
    session = connect_session(connect_server.url)
    try:
        uploads = []
        add = session.addArtifacts
        session.addArtifacts = lambda *a, **k: uploads.append(a) or add(*a, **k)  # pass-through counter
        assert register(session) == ["airflow_delta", "delta"]
        assert register(session) == ["airflow_delta", "delta"]
        assert len(uploads) == 1  # the second register found its marker: no second upload of the zip
        df = session.createDataFrame([(i, f"s{i}") for i in range(20)], "id long, s string")
        df.write.format("delta").mode("append").save(root)
        df.filter("id < 5").write.format("delta").mode("overwrite").option("replaceWhere", "id < 5").save(root)
        assert sorted_rows(kernel_table(root), ["id", "s"]) == [(i, f"s{i}") for i in range(20)]
        back = session.read.format("delta").load(root).filter("id >= 15")
        assert sorted(r.id for r in back.collect()) == [15, 16, 17, 18, 19]
        assert session.read.format("delta").option("versionAsOf", 0).load(root).count() == 20
        name = f"ds_connect_{uuid.uuid4().hex[:8]}"  # the server's catalog is shared by its sessions
        session.sql(f"CREATE TABLE {name} USING delta LOCATION '{root}'")
        try:
            assert session.sql(f"SELECT count(*) AS n FROM {name} WHERE id < 5").collect()[0].n == 5
        finally:
            session.sql(f"DROP TABLE IF EXISTS {name}")
    finally:
        session.stop()
