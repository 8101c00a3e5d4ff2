"""SparkSession creation for the apps and the tests (one place for the settings we rely on)."""

from __future__ import annotations

DEFAULT_CONF = {
    # Arrow batches flow through mapInArrow for reading and writing data files.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
}


def build_session(app_name: str = "delta-engine", master: str | None = None, conf: dict | None = None):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
