"""The operations that are more than one engine command, ``(params, spark) -> result dict``: the
reads (DESCRIBE DETAIL, DESCRIBE HISTORY, READ to a file) and the ones with a source to read first
(CREATE TABLE, WRITE, MERGE: :mod:`.sources`). Every other registry entry names its command and runs
through the generic runner (:mod:`.dispatch`).

Each shapes its result as the app protocol says (docs/design.md, :mod:`.results`):
``{"status": "ok", "operation", "table_uri", "version", "skipped", "metrics", ...}``.
Parameters arrive coerced by :func:`airflow_delta_provider_apps.operations.check_params`; ``spark`` is a SparkSession
or None for operations that do not need one (:attr:`~airflow_delta_provider_apps.operations.Operation.needs_spark`).
"""

from __future__ import annotations

from .engine.commit_identity import TxnIdentity
from .engine.errors import InvalidArgumentError
from .results import from_command, ok
from .sources import Source, read_source_spec


def _table(spark, params: dict):
    from .engine import DeltaTable

    return DeltaTable.for_path(spark, params["table_uri"])


def _txn(params: dict) -> dict:
    return TxnIdentity.of(params).options()


# --------------------------------------------------------------------------------------------------
# runners


def describe(params: dict, spark=None) -> dict:
    detail = _table(None, params).detail()
    return ok("DESCRIBE DETAIL", params["table_uri"], detail["version"], detail=detail)


def history(params: dict, spark=None) -> dict:
    t = _table(None, params)
    hist = t.history(limit=params.get("limit"))
    version = hist[0]["version"] if hist else t.version()
    return ok("DESCRIBE HISTORY", params["table_uri"], version, history=hist)


def create_table(params: dict, spark=None) -> dict:
    from .engine import DeltaTable

    uri = params["table_uri"]
    kept = spark is None and params.get("if_not_exists")  # settled by the log: a kept table's source is not read
    source = None if kept else read_source_spec(spark, params)
    if source is not None and source.feed is not None:
        raise InvalidArgumentError(
            "A change feed source cannot create a table",
            "the new table could not record which versions it consumed",
            "create the table first, then write or merge the changes into it",
        )
    source_df = source.df if source is not None else None
    t = DeltaTable.create(
        spark,
        uri,
        schema=params.get("schema"),
        partition_by=params.get("partition_by"),
        cluster_by=params.get("cluster_by"),
        properties=params.get("properties"),
        description=params.get("description"),
        name=params.get("name"),
        if_not_exists=bool(params.get("if_not_exists")),
        source_df=source_df,
        target_file_size=params.get("target_file_size"),
        **_txn(params),
    )
    # the command's own fields: created, and committed (False when IF NOT EXISTS kept the table)
    return from_command(t.last_result, uri)


def write(params: dict, spark=None) -> dict:
    uri = params["table_uri"]
    t = _table(spark, params)
    src = read_source_spec(spark, params)
    df, fed = src.df, {"watermark": src.watermark}
    if src.feed is not None and (params.get("rerun") or "apply") == "replace":
        raise InvalidArgumentError(
            "A change feed source cannot be appended with on_rerun='replace'",
            "replacing the earlier run's output would drop the changes it consumed, which the next run "
            "would not read again",
            "use on_rerun='apply' (each version's changes are read once anyway)",
        )
    if (params.get("mode") or "append") == "overwrite":
        r = t.overwrite(
            df,
            replace_where=params.get("replace_where"),
            overwrite_schema=bool(params.get("overwrite_schema")),
            partition_overwrite_mode=params.get("partition_overwrite_mode") or "static",
            merge_schema=bool(params.get("merge_schema")),
            target_file_size=params.get("target_file_size"),
            **_txn(params),
            **fed,
        )
    else:
        r = t.append(
            df,
            merge_schema=bool(params.get("merge_schema")),
            target_file_size=params.get("target_file_size"),
            on_rerun=params.get("rerun") or "apply",
            **_txn(params),
            **fed,
        )
    return from_command(r, uri, **_feed(src))


def merge(params: dict, spark=None) -> dict:
    t = _table(spark, params)
    src = read_source_spec(spark, params, arrow_if_small=True)
    df, fed = src.df, {"watermark": src.watermark}
    merge_schema = bool(params.get("merge_schema"))
    if params.get("key_columns"):
        keys = params["key_columns"]
        r = t.upsert(df, keys, dedupe_by=params.get("dedupe_by"), merge_schema=merge_schema, **_txn(params), **fed)
    else:
        b = t.merge(
            df,
            params["predicate"],
            source_alias=params.get("source_alias") or "source",
            target_alias=params.get("target_alias") or "target",
            merge_schema=merge_schema,
        )
        for c in params.get("clauses") or []:
            b = b.clause(**c)
        r = b.execute(**_txn(params), **fed)
    return from_command(r, params["table_uri"], source_read=src.read, **_feed(src))


def _feed(src: Source) -> dict:
    """The result's ``changes`` field: the change feed range a command read (none for other sources)."""
    return {"changes": src.feed} if src.feed is not None else {}


def read(params: dict, spark=None) -> dict:
    from .engine.spark.scan import to_dataframe
    from .engine.storage import normalize_table_uri

    output = params.get("output")
    if not output:
        raise InvalidArgumentError("read needs an output location", "--output is missing", "pass --output PATH.parquet")
    t = _table(spark, params)
    snap = t.snapshot(version=params.get("version"), timestamp=params.get("timestamp"))
    if params.get("version") is not None or params.get("timestamp") is not None:
        from .engine.commands.vacuum import check_time_travel

        check_time_travel(snap)  # files VACUUM deleted: an error naming the version and that VACUUM
    rows = _write_output(to_dataframe(spark, snap), output)
    return ok(
        "READ",
        params["table_uri"],
        snap.version,
        metrics={"numOutputRows": rows, "numFiles": int(snap.num_files)},
        output=normalize_table_uri(output),
    )


def _write_output(df, output: str) -> int:
    import pyarrow.parquet as pq

    from .engine.storage import normalize_table_uri, storage_for

    path = normalize_table_uri(output)
    storage = storage_for(path)
    table = df.toArrow()
    with storage.open_output_stream(path) as sink:
        pq.write_table(table, sink, compression="snappy")
    return table.num_rows
