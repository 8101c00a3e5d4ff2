"""Commands: one module per Delta operation, each documenting its algorithm at the top, all run
through one skeleton (:mod:`.base`: the gate, the transaction, read registration, commit or skip) and
returning one result type (:mod:`.result`: Delta's ``operationMetrics``, schema changes, reader warnings).

* :mod:`.create_table` - CREATE TABLE [IF NOT EXISTS] [AS SELECT]
* :mod:`.write` - WRITE (append, overwrite, ``replace_where``, dynamic partition overwrite)
* :mod:`.dml` - DELETE and UPDATE (files rewritten, or rows marked in deletion vectors)
* :mod:`.merge` - MERGE (its plan, source and strategies in :mod:`..merge`)
* :mod:`.optimize`, :mod:`.vacuum`, :mod:`.restore`
* :mod:`.properties` - SET TBLPROPERTIES, CLUSTER BY, constraints, rename / drop / change the type of a column
* :mod:`.checkpoint` - CHECKPOINT and log cleanup (no commit)
* :mod:`.describe` - DESCRIBE DETAIL, DESCRIBE HISTORY and READ (reads: no commit)
* :mod:`.reads` - what a command that reads data files reports when one is gone (a retryable conflict)

Commands never import pyspark: their data work goes through a data plane (:mod:`..plane`) that
:class:`~airflow_delta_provider_apps.engine.table.DeltaTable` hands them, so importing this package never
starts or needs Spark.
"""
