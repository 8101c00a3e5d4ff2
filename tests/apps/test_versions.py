"""The pyspark Python code and the Spark jars it launches must be the same release.

The apache-spark provider depends on pyspark-client, which installs into the same pyspark/ folder
as pyspark; `make install` removes both and re-installs pyspark last. These tests catch a mixed install.
"""

import importlib.metadata as md

from airflow_delta_provider_apps.versions import pyspark_versions


def test_pyspark_python_matches_jars():
    v = pyspark_versions()
    assert v["jars"] is not None, "no spark-core jar: pyspark-client replaced pyspark"
    assert v["num_core_jars"] == 1
    assert v["python"] == v["jars"]


def test_installed_pyspark_is_whole_and_in_the_declared_range():
    # `make test` runs at the pinned 4.3.0, `make test-compat` at the lowest declared 4.0.x
    version = md.version("pyspark")
    assert version == pyspark_versions()["python"]
    assert version.startswith(("4.0.", "4.3.0")), version


def test_pyspark_client_files_do_not_shadow_pyspark():
    # pyspark-client is removed by `make install`; if it is present its RECORD must not own pyspark/ files
    try:
        files = md.files("pyspark-client") or []
    except md.PackageNotFoundError:
        return
    assert not [f for f in files if str(f).startswith("pyspark/")], "pyspark-client owns files in pyspark/"
