"""Checks that need no Spark, run before an operation is submitted (a spark-submit costs 10-15 s).

:func:`preflight` takes an operation's rendered parameters and raises the same
:class:`~airflow_delta_provider_apps.engine.errors.DeltaError` the app would raise, in the user's words, for what is
knowable from the table's log and the local file system:

* the table exists (every operation but ``create-table``), or, for ``create-table`` without
  ``if_not_exists``, does not;
* the DDL parses and the partition columns are in it (``create-table`` with a schema);
* predicates (``predicate``, ``replace_where``) and UPDATE's ``updates`` bind to the table schema;
* a local source exists, and a write's source (local parquet, csv, json or Delta) matches the table
  schema (csv and json: their column names, e.g. a headerless csv read with ``header`` true);
* MERGE: the ON condition, the clauses (order, conditions, assignments, casts, NOT NULL) or the
  upsert's key columns bind exactly as the app binds them, against the table's schema and the
  source's, when the source's schema is known here (a local Delta table, or local parquet, csv or json
  files without partition directories, and no ``source_query``; csv and json by their column names);
  otherwise the app checks them.

Remote tables and sources are checked by the app itself (reading them here would need their
credentials on the Airflow worker). The Airflow operators call this through :mod:`airflow_delta_provider_apps.protocol`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .engine.errors import InvalidArgumentError, TableAlreadyExistsError, TableNotFoundError

__all__ = ["preflight"]


def _local(uri: str) -> bool:
    from .engine.storage import is_local

    return is_local(uri)


def preflight(operation: str, params: Mapping) -> None:
    """Raise the error the app would raise, for what can be known without Spark (see module rules)."""
    from .engine.log.listing import latest_version
    from .engine.storage import normalize_table_uri, storage_for, table_location

    table = table_location(params.get("table_uri"))
    source = params.get("source")
    if source and _local(str(source)) and not os.path.exists(normalize_table_uri(str(source))):
        raise InvalidArgumentError(
            f"Source '{source}' not found",
            "no file or directory at that path on this machine",
            "check source= (for a path only the cluster sees, use a URI such as hdfs:// or s3://)",
        )
    if not _local(table):
        return
    version = latest_version(storage_for(table), table)
    if operation == "create-table":
        if version is not None and not params.get("if_not_exists"):
            raise TableAlreadyExistsError(
                f"Cannot create the table at '{table}': a Delta table is already there",
                f"its transaction log is at version {version}",
                "pass if_not_exists=True to keep it, or pick another table_uri",
            )
        schema = params.get("schema")
        if schema is not None and version is None:
            from .engine.schema import parse_schema

            parsed = parse_schema(schema)
            missing = [c for c in params.get("partition_by") or [] if parsed.find(c) is None]
            if missing:
                raise InvalidArgumentError(
                    f"Partition column(s) {', '.join(missing)} are not in the schema",
                    f"the schema has columns {', '.join(parsed.names)}",
                    "name columns of the schema in partition_by=",
                )
        return
    if version is None:
        raise TableNotFoundError(
            f"No Delta table at '{table}'",
            "there is no _delta_log directory with a commit or checkpoint file",
            "check table_uri, or create the table first (DeltaCreateTableOperator)",
        )
    if operation == "merge":
        _check_merge(params, storage_for(table), table)
        return
    if operation == "write" and not params.get("overwrite_schema"):
        _check_source_schema(params, storage_for(table), table)
    conditions = {k: params.get(k) for k in ("predicate", "replace_where") if params.get(k) is not None}
    if not conditions and not params.get("updates"):
        return
    from .engine.expr import bind_assignments, parse_predicate
    from .engine.log.snapshot import load_snapshot

    schema = load_snapshot(storage_for(table), table).schema
    for name, text in conditions.items():
        try:
            parse_predicate(str(text), schema)
        except InvalidArgumentError as e:
            raise type(e)(f"{name}: {e.problem}", e.cause, e.fix) from None
    if params.get("updates"):
        try:
            bind_assignments(dict(params["updates"]), schema)
        except InvalidArgumentError as e:
            raise type(e)(f"updates: {e.problem}", e.cause, e.fix) from None


#: csv and json sources larger than this are not read here (the app checks them)
_TEXT_SOURCE_BYTES = 64 << 20


def _text_source_names(path: str, fmt: str, options: Mapping) -> list[str] | None:
    """The column names Spark will read from a local csv or json source (a file, or a folder of them
    without partition directories), from the files themselves: csv's header line (``header`` is
    true unless the options say otherwise; else ``_c0``, ``_c1``, ...), json's keys (JSON Lines
    unless ``multiLine``; sorted, as Spark's inference orders them). None when not knowable here."""
    import csv

    if os.path.isfile(path):
        files = [path]
    else:  # Spark skips files and folders named _* or .*
        base = Path(path)
        found = (p for p in base.rglob("*") if p.is_file())
        files = sorted(str(p) for p in found if not any(q.startswith((".", "_")) for q in p.relative_to(base).parts))
    if not files or any("=" in os.path.relpath(f, path) for f in files if f != path):
        return None
    if sum(os.path.getsize(f) for f in files) > _TEXT_SOURCE_BYTES:
        return None
    opts = {str(k).lower(): str(v) for k, v in (options or {}).items()}
    try:
        return _read_text_names(files, fmt, opts)
    except (OSError, ValueError, csv.Error):  # not text this reader understands: the app reads it
        return None


def _read_text_names(files: list[str], fmt: str, opts: Mapping) -> list[str] | None:
    import csv
    import json

    if fmt == "csv":
        sep = opts.get("sep") or opts.get("delimiter") or ","
        with open(files[0], newline="", encoding=opts.get("encoding") or "utf-8") as f:
            first = next(csv.reader(f, delimiter=sep), None)
        if first is None:
            return None
        header = opts.get("header", "true").lower() == "true"
        return [c.strip() for c in first] if header else [f"_c{i}" for i in range(len(first))]
    keys: set[str] = set()
    for name in files:
        with open(name, encoding=opts.get("encoding") or "utf-8") as f:
            if opts.get("multiline", "false").lower() == "true":
                doc = json.load(f)
                records = doc if isinstance(doc, list) else [doc]
            else:
                records = (json.loads(line) for line in f if line.strip())
            for r in records:
                if isinstance(r, dict):
                    keys.update(r)
    return sorted(keys) or None


def _source_schema(params: Mapping, target=None):
    """The source's schema when knowable without Spark (see the module docstring), else None. A csv
    or json source's types are inferred by Spark only when it reads it: here its columns take the
    ``target`` table's type of the same name (string for others), enough to check names (ON, key
    columns, clauses, extra columns) without guessing types."""
    from .engine.log.snapshot import load_snapshot
    from .engine.schema import StructType
    from .engine.storage import normalize_table_uri, storage_for, table_location

    source, fmt = params.get("source"), str(params.get("source_format") or "").lower()
    if not source or params.get("source_query") or not _local(str(source)):
        return None
    if fmt == "delta":
        from .engine.values import parse_version

        where = table_location(str(source))
        options = params.get("source_options") or {}
        version = options.get("versionAsOf")
        version = parse_version(version, "versionAsOf") if version is not None else None
        schema = load_snapshot(storage_for(where), where, version=version).schema
        if str(options.get("readChangeFeed", "")).lower() == "true":  # the change feed's columns too
            from .engine.cdf import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
            from .engine.schema import PrimitiveType, StructField

            extra = ((CHANGE_TYPE, "string"), (COMMIT_VERSION, "long"), (COMMIT_TIMESTAMP, "timestamp"))
            schema = StructType([*schema.fields, *(StructField(n, PrimitiveType(t)) for n, t in extra)])
        return schema
    if fmt == "parquet":
        import pyarrow.dataset as ds

        path = normalize_table_uri(str(source))
        dataset = ds.dataset(path, format="parquet")
        if any("=" in os.path.relpath(f, path) for f in dataset.files):  # Spark types partition dirs itself
            return None
        return StructType.from_arrow(dataset.schema)
    if fmt in ("csv", "json") and target is not None:
        from .engine.schema import STRING, StructField

        names = _text_source_names(normalize_table_uri(str(source)), fmt, params.get("source_options") or {})
        if names is None:
            return None
        typed = {f.name.lower(): f.type for f in target.fields}
        return StructType([StructField(n, typed.get(n.lower(), STRING), True) for n in names])
    return None


def _check_source_schema(params: Mapping, storage, table: str) -> None:
    """A write's source against the table's schema (Delta's schema enforcement, as the app applies
    it) when the source's schema is known here. Timestamp columns are left to the app: how Spark
    reads a parquet timestamp (zone, precision) is not known from the file alone."""
    from .engine.log.snapshot import load_snapshot
    from .engine.schema import StructType
    from .engine.schema.compat import check_write_compatible
    from .engine.schema.widening import widenable

    snapshot = load_snapshot(storage, table)
    target, md = snapshot.schema, snapshot.metadata
    merge_schema = bool(params.get("merge_schema"))
    source_schema = _source_schema(params, target)
    if source_schema is None:
        return
    timestamps = {f.name.lower() for f in source_schema.fields if "timestamp" in getattr(f.type, "name", "")}
    keep = lambda fields: tuple(f for f in fields if f.name.lower() not in timestamps)  # noqa: E731
    check_write_compatible(
        StructType(keep(target.fields)) if timestamps else target,
        StructType(keep(source_schema.fields)),
        merge_schema=merge_schema,
        widen=widenable(target, snapshot.properties.enable_type_widening, md.partition_columns, merge_schema),
    )


def _check_merge(params: Mapping, storage, table: str) -> None:
    """Bind the merge as the app does (:func:`~.engine.merge.bind_plan`) when the source's
    schema is known here."""
    from .engine.commands.merge import clauses_from_specs
    from .engine.log.snapshot import load_snapshot
    from .engine.merge import bind_plan, evolved_schema, upsert_condition

    snapshot = load_snapshot(storage, table)
    target = snapshot.schema
    source_schema = _source_schema(params, target)
    if source_schema is None:
        return
    keys = params.get("key_columns")
    if keys:
        on = upsert_condition(target, source_schema.names, list(keys))
        specs = [{"when": "matched", "then": "update_all"}, {"when": "not_matched", "then": "insert_all"}]
        dedupe_by = params.get("dedupe_by")
        if dedupe_by is not None and source_schema.find(dedupe_by) is None:
            raise InvalidArgumentError(
                f"dedupe_by column '{dedupe_by}' is not in the source",
                f"the source has {', '.join(source_schema.names)}",
                "name a source column (e.g. an update timestamp)",
            )
        aliases = {"target_alias": "target", "source_alias": "source"}
    else:
        on, specs = params.get("predicate"), params.get("clauses")
        aliases = {
            "target_alias": params.get("target_alias") or "target",
            "source_alias": params.get("source_alias") or "source",
        }
    from .engine.schema.widening import widenable

    md = snapshot.metadata
    widen = widenable(
        target, snapshot.properties.enable_type_widening, md.partition_columns, bool(params.get("merge_schema"))
    )
    evolved = evolved_schema(target, source_schema, widen) if params.get("merge_schema") else target
    bind_plan(
        snapshot,
        source_schema,
        str(on),
        clauses_from_specs(specs),
        target_schema=evolved,
        merge_schema=bool(params.get("merge_schema")),
        **aliases,
    )
