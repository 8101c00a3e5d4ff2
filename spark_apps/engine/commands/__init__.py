"""Commands: one module per Delta operation, each documenting its algorithm at the top.

* :mod:`.create_table` - CREATE TABLE [IF NOT EXISTS] [AS SELECT]
* :mod:`.write` - WRITE (append; overwrite later)

Commands import pyspark only lazily (through :mod:`airflow_delta_provider_apps.engine.spark`), so importing this
package never starts or needs Spark.
"""
