"""Catalogs: a Delta table's name in a metastore, kept in sync by the task that changed the table.

A catalog entry is never part of a commit: after a commit has landed, the task that made it (a
CREATE TABLE, a registration, a commit with ``schema_changes``) syncs the entry. A failed sync leaves
the table as committed; syncing again is always safe (create the entry, or update it to the log).

One small interface (:class:`Catalog`), one module per catalog, looked up by kind in
:data:`CATALOGS` (imported only when used: boto3 and pyspark stay optional):

* ``hive_metastore``: Spark's own Hive client (:mod:`..spark.catalog`, needs a session with Hive
  support): an external table of provider ``delta`` at the table's location, as delta-spark writes it,
  with the log's schema as its columns and the location also under :data:`TABLE_KEY` (Spark hands a
  Python data source only a catalog table's schema: so ``spark.table`` reads through ours too).
* ``glue``: the AWS Glue Data Catalog through boto3 (:mod:`.glue`), the entry Athena reads as a native
  Delta table: ``table_type=DELTA``, ``spark.sql.sources.provider=delta``, the location, and the
  columns of the Delta schema as Hive types (Glue's own readers list them; they follow each sync).

Where the sync runs: a catalog that can sync through a Spark session (:meth:`Catalog.for_session`:
the Hive metastore) syncs inside the Spark app that made the commit, in the app's own session, when
the run's parameters carry its spec (``catalog``: :func:`sync_in_session`; the app's session is built
with :func:`session_conf`); otherwise the task syncs after the run (:func:`sync_catalog`).

The next catalog (Unity Catalog OSS's REST API) is one more module and one more line in
:data:`CATALOGS`. A catalog that owns commits (catalog-managed tables) would say so with
``owns_commits`` and take the commit itself; none does yet.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import import_module
from typing import ClassVar

from ..errors import InvalidArgumentError

__all__ = [
    "CATALOGS",
    "TABLE_KEY",
    "Catalog",
    "CatalogEntry",
    "catalog_class",
    "catalog_location",
    "catalog_spec",
    "entry_for",
    "hive_type",
    "parse_table_name",
    "session_conf",
    "sync_catalog",
    "sync_in_session",
    "syncs_in_session",
]

#: kind -> "module:Class", relative to the engine package
CATALOGS: dict[str, str] = {
    "hive_metastore": ".spark.catalog:HiveMetastoreCatalog",
    "glue": ".catalog.glue:GlueCatalog",
}

#: field metadata key (on a catalog table's first column) of the table's location and read options, as
#: JSON: Spark (4.0 to 4.3) hands a Python data source only the schema a catalog stores, never the
#: table's location or properties (``PythonDataSourceV2.getTable`` drops them), so the schema carries
#: them to the data source (``airflow_delta_provider_apps.datasource``)
TABLE_KEY = "airflow_delta.table"

# a database or table name both Hive and Glue accept (Glue lower-cases names; Hive is case-insensitive)
_NAME = re.compile(r"^[A-Za-z0-9_]{1,255}$")


@dataclass(frozen=True)
class CatalogEntry:
    """What a catalog records of a Delta table: its name, location and the log's columns."""

    database: str
    table: str
    location: str
    #: (name, Hive type, comment or None) of the data columns, then of the partition columns
    columns: list[tuple[str, str, str | None]] = field(default_factory=list)
    partition_columns: list[tuple[str, str, str | None]] = field(default_factory=list)
    description: str | None = None
    version: int | None = None
    #: the log's schema as Delta's JSON (the catalogs that store Spark's schema take it as it is)
    schema_json: str | None = None

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


class Catalog:
    """A catalog that records Delta tables by name (one subclass per catalog)."""

    kind: ClassVar[str] = ""
    #: a catalog-managed table commits through its catalog (roadmap); these only record names
    owns_commits: ClassVar[bool] = False

    @classmethod
    def from_options(cls, **options) -> Catalog:
        """The catalog from a connection's options (the provider's catalog connections)."""
        return cls(**options)

    @classmethod
    def for_session(cls, spark, **options) -> Catalog | None:
        """The catalog through ``spark`` (a session already running: a Spark app's), or None when this
        catalog does not sync through a session or ``spark`` does not reach the catalog ``options``
        name; then the task syncs it (:meth:`from_options`)."""
        return None

    @classmethod
    def session_conf(cls, **options) -> dict[str, str]:
        """The Spark properties a session needs for :meth:`for_session` to take it ({}: none can)."""
        return {}

    def sync(self, entry: CatalogEntry) -> dict:
        """Create the entry, or bring an existing one of the same table up to ``entry``; refuse a name
        that holds another table (another location, or not a Delta table). Returns
        ``{"catalog", "table", "action": "created" | "updated" | "unchanged"}``."""
        raise NotImplementedError

    def describe(self, database: str, table: str) -> dict | None:
        """``{"location", "provider", "columns", "parameters"}`` of the entry, None when there is none."""
        raise NotImplementedError

    def _result(self, entry: CatalogEntry, action: str) -> dict:
        return {"catalog": self.kind, "table": entry.name, "action": action}

    def _refuse_other_table(self, entry: CatalogEntry, location: str | None, provider: str | None) -> None:
        """The name already holds a table that is not this one: nothing is changed."""
        if (provider or "").lower() != "delta" or _norm(location) != _norm(entry.location):
            raise InvalidArgumentError(
                f"Catalog table {entry.name} ({self.kind}) already exists and is another table",
                f"it is a {provider or 'non-Delta'} table at {location!r}, not the Delta table at {entry.location!r}",
                "choose another catalog_table name, or drop that entry first",
            )


def _norm(location: str | None) -> str:
    """Locations compared as catalogs store them (``file:/x`` and ``file:///x/`` are one place)."""
    loc = (location or "").rstrip("/")
    if loc.startswith("file:"):
        loc = "file:/" + loc[len("file:") :].lstrip("/")
    return loc


def catalog_class(kind: str) -> type[Catalog]:
    """The :class:`Catalog` subclass of ``kind`` (a key of :data:`CATALOGS`)."""
    target = CATALOGS.get(kind)
    if target is None:
        raise InvalidArgumentError(f"Unknown catalog kind {kind!r}", None, f"use one of {', '.join(sorted(CATALOGS))}")
    module, _, name = target.partition(":")
    return getattr(import_module(module, __package__.rpartition(".")[0]), name)


def parse_table_name(name: str) -> tuple[str, str]:
    """``"db.table"`` -> ``("db", "table")``: both parts required, letters, digits and ``_`` only."""
    parts = str(name or "").strip().split(".")
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
        raise InvalidArgumentError(
            f"Catalog table name {name!r} is not 'database.table'",
            "a catalog name has a database and a table, each of letters, digits and underscores",
            "pass catalog_table='my_db.my_table'",
        )
    return parts[0].lower(), parts[1].lower()


def hive_type(t) -> str:
    """A Delta type as a Hive column type (Spark's ``simpleString``, what Spark writes to a
    metastore): ``timestamp_ntz`` is Hive's zone-less ``timestamp``."""
    from ..schema.types import SIMPLE_NAMES

    return t.simple_string({**SIMPLE_NAMES, "timestamp_ntz": "timestamp"})


def catalog_location(table_uri: str) -> str:
    """The table's location as catalogs store it: a URI (a local path becomes ``file:/path``)."""
    from ..storage import table_location

    loc = table_location(table_uri)
    return loc if "://" in loc else "file:" + loc


def sync_catalog(kind: str, options: dict, name: str, table_uri: str, *, catalog: Catalog | None = None) -> dict:
    """Create or update ``name``'s entry in the catalog of ``kind`` (``catalog``, else built from
    ``options``) to the table's latest committed version: ``{"catalog", "table", "action", "version"}``."""
    from ..log.snapshot import load_snapshot
    from ..storage import storage_for, table_location

    parse_table_name(name)  # a bad name fails before the catalog is reached or the log read
    location = table_location(table_uri)
    snapshot = load_snapshot(storage_for(location), location)  # the table must be there
    catalog = catalog or catalog_class(kind).from_options(**options)
    entry = entry_for(name, table_uri, snapshot)
    return {**catalog.sync(entry), "version": entry.version}


def catalog_spec(spec) -> dict | None:
    """A run's ``catalog`` parameter, checked: ``{"kind", "table", "options", "always"}`` (JSON text
    accepted), None when there is none."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    if not isinstance(spec, dict) or not spec.get("kind") or not spec.get("table"):
        raise InvalidArgumentError(
            "The catalog parameter is not a catalog spec",
            f"got {spec!r}",
            'pass {"kind": "hive_metastore", "table": "db.table", "options": {...}, "always": false}',
        )
    catalog_class(spec["kind"])  # an unknown kind fails here
    parse_table_name(spec["table"])
    return {**spec, "options": dict(spec.get("options") or {}), "always": bool(spec.get("always"))}


def syncs_in_session(kind: str, options: dict) -> bool:
    """Whether the catalog of ``kind`` syncs through a Spark app's own session (:meth:`Catalog.for_session`)."""
    return bool(catalog_class(kind).session_conf(**options))


def session_conf(spec) -> dict[str, str]:
    """The Spark properties of an app's session that will sync the catalog of its ``catalog``
    parameter itself (:meth:`Catalog.session_conf`; {} without one)."""
    spec = catalog_spec(spec)
    return catalog_class(spec["kind"]).session_conf(**spec["options"]) if spec else {}


def sync_in_session(spec, table_uri: str, result: dict, spark) -> dict:
    """After the run's commit landed (in the Spark app): sync the catalog of its ``catalog`` parameter
    through the app's own session, when the run calls for it (``always``, or the commit changed the
    schema) and the session reaches that catalog. Returns ``result`` with ``catalog``: the sync's
    ``{"catalog", "table", "action", "version"}``, or ``{"catalog", "table", "error", "retryable"}``
    when it failed (the commit stands; the task fails retryably and its retry only syncs). Without
    ``catalog`` the task syncs after the run, as it does for every other catalog."""
    spec = catalog_spec(spec)
    if spec is None or spark is None or result.get("version") is None:
        return result
    if not (spec["always"] or result.get("schema_changes")):
        return result
    try:
        catalog = catalog_class(spec["kind"]).for_session(spark, **spec["options"])
        if catalog is None:  # e.g. a Spark Connect session, or one without Hive support
            return result
        synced = sync_catalog(spec["kind"], spec["options"], spec["table"], table_uri, catalog=catalog)
    except Exception as e:  # the commit stands: the task reports it and fails retryably
        from ..foreign import as_delta_error

        err = as_delta_error(e)
        synced = {"catalog": spec["kind"], "table": spec["table"], "error": err.one_line(), "retryable": True}
    return {**result, "catalog": synced}


def entry_for(name: str, table_uri: str, snapshot) -> CatalogEntry:
    """The entry of the table at ``table_uri`` as its ``snapshot`` (the committed version) has it."""
    database, table = parse_table_name(name)
    partitions = {c.lower() for c in snapshot.partition_columns}
    cols = [(f.name, hive_type(f.type), f.comment) for f in snapshot.schema.fields]
    return CatalogEntry(
        database=database,
        table=table,
        location=catalog_location(table_uri),
        columns=[c for c in cols if c[0].lower() not in partitions],
        # in the log's partition order, as Hive and Glue list partition keys
        partition_columns=[c for p in snapshot.partition_columns for c in cols if c[0].lower() == p.lower()],
        description=snapshot.metadata.description,
        version=snapshot.version,
        schema_json=snapshot.schema.to_json_string(),
    )
