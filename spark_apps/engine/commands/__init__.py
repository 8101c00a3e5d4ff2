"""Commands: one module per Delta operation, each documenting its algorithm at the top, all run
through one skeleton (:mod:`.base`: the gate, the transaction, read registration, commit or skip).

* :mod:`.create_table` - CREATE TABLE [IF NOT EXISTS] [AS SELECT]
* :mod:`.write` - WRITE (append, overwrite, ``replace_where``, dynamic partition overwrite)
* :mod:`.dml` - DELETE and UPDATE (files rewritten, or rows marked in deletion vectors)
* :mod:`.merge` - MERGE (its clause rules in :mod:`..merge_clauses`)
* :mod:`.optimize`, :mod:`.vacuum`, :mod:`.restore`, :mod:`.properties` (SET TBLPROPERTIES)
* :mod:`.checkpoint` - CHECKPOINT and log cleanup (no commit)

Commands import pyspark only lazily (through :mod:`airflow_delta_provider_apps.engine.spark`), so importing this
package never starts or needs Spark.
"""
