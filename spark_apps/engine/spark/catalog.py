"""The Hive metastore through Spark's own Hive client (a classic session with Hive support).

The entry is an external table of provider ``delta`` at the table's location, the form delta-spark's
catalog writes, so delta-spark finds the table as its own (it reads the schema from the log and ignores
the catalog's). Its columns are the log's schema, the first one carrying the location under
:data:`..catalog.TABLE_KEY`: Spark hands a Python data source only a catalog table's schema (Spark 4.3's
``PythonDataSourceV2.getTable(schema, partitioning, properties)`` returns ``new PythonTable(this,
shortName, schema)``: the ``path`` that ``V2SessionCatalog.loadTable`` put in ``properties`` is dropped),
so ``spark.table("db.t")`` and ``SELECT * FROM db.t`` read through our data source registered as
``delta`` (delta-spark's ``UpdateCatalog`` keeps the schema in the catalog the same way). No partition
columns and no properties: the log holds those. A schema change (``merge_schema``, widening, a rename or
drop) updates the entry's columns after the commit.
The session's catalog stores it the way it stores every data-source table (``spark.sql.sources.provider``
and the schema in the table properties, the location as the SerDe ``path``).

The entry is built as Spark's own ``CatalogTable`` and handed to the session catalog through the
session's JVM (Spark's SQL would need a ``delta`` source in this session to store it): a classic
session only (over Spark Connect, sync from a classic session that reaches the same metastore).

A Spark app that commits syncs in its own session (:meth:`HiveMetastoreCatalog.for_session`) when
that session has Hive support and the metastore settings of the catalog connection (the app builds
it so: :meth:`HiveMetastoreCatalog.session_conf`); else the task syncs from a local session.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ..catalog import TABLE_KEY, Catalog, CatalogEntry
from ..errors import InvalidArgumentError

__all__ = ["HiveMetastoreCatalog"]


class HiveMetastoreCatalog(Catalog):
    """``HiveMetastoreCatalog(spark)`` for a session built with ``enableHiveSupport()``;
    ``HiveMetastoreCatalog.from_conf({...})`` builds (or reuses) such a session in this process."""

    kind: ClassVar[str] = "hive_metastore"

    def __init__(self, spark: Any) -> None:
        jsession = getattr(spark, "_jsparkSession", None)
        if jsession is None:
            raise InvalidArgumentError(
                "The Hive metastore catalog needs a classic Spark session",
                "this session has no JVM here (Spark Connect)",
                "sync from a classic session that reaches the same metastore",
            )
        if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
            raise InvalidArgumentError(
                "The Spark session has no Hive support",
                "spark.sql.catalogImplementation is not 'hive'",
                "build the session with SparkSession.builder.enableHiveSupport()",
            )
        self.spark = spark
        self._jvm = spark._jvm
        self._catalog = jsession.sessionState().catalog()

    @classmethod
    def from_conf(cls, conf: dict[str, str] | None = None) -> HiveMetastoreCatalog:
        """A local session with Hive support and ``conf`` (``spark.hadoop.hive.metastore.uris`` for a
        metastore server, or ``spark.hadoop.javax.jdo.option.*`` for its database)."""
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master("local[1]").appName("delta-catalog-sync").enableHiveSupport()
        for k, v in (conf or {}).items():
            builder = builder.config(k, str(v))
        return cls(builder.getOrCreate())

    @classmethod
    def from_options(cls, *, spark_conf: dict[str, str] | None = None) -> HiveMetastoreCatalog:
        return cls.from_conf(spark_conf)

    @classmethod
    def session_conf(cls, *, spark_conf: dict[str, str] | None = None) -> dict[str, str]:
        """Hive support and the metastore's settings (static: set before the session starts)."""
        return {**{str(k): str(v) for k, v in (spark_conf or {}).items()}, "spark.sql.catalogImplementation": "hive"}

    @classmethod
    def for_session(cls, spark, *, spark_conf: dict[str, str] | None = None) -> HiveMetastoreCatalog | None:
        """The metastore through ``spark`` when it is a classic session with Hive support whose
        settings are the metastore's (``spark_conf``'s Hadoop and Hive settings: the same metastore,
        not the session's own); None otherwise (a Spark Connect session, no Hive support, another
        metastore)."""
        if getattr(spark, "_jsparkSession", None) is None:
            return None
        wanted = cls.session_conf(spark_conf=spark_conf)
        # what names the metastore (others, e.g. the warehouse folder, Spark stores rewritten)
        keys = [k for k in wanted if k.startswith(("spark.hadoop.", "spark.sql.hive.", "spark.sql.catalogImpl"))]
        if any(spark.conf.get(k, None) != wanted[k] for k in keys):
            return None
        return cls(spark)

    def sync(self, entry: CatalogEntry) -> dict:
        ident = self._identifier(entry.database, entry.table)
        schema = self._schema(entry)
        if self._catalog.tableExists(ident):
            found = self.describe(entry.database, entry.table)
            self._refuse_other_table(entry, found["location"], found["provider"])
            stored = self._catalog.getTableMetadata(ident).schema()
            if json.loads(stored.json()) == json.loads(schema.json()):
                return self._result(entry, "unchanged")
            self._catalog.alterTableSchema(ident, schema)  # Spark's own ALTER TABLE path (drops too)
            return self._result(entry, "updated")
        if not self._catalog.databaseExists(entry.database):
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{entry.database}`")
        self._catalog.createTable(self._catalog_table(entry, ident, schema), False, False)
        return self._result(entry, "created")

    def describe(self, database: str, table: str) -> dict | None:
        ident = self._identifier(database, table)
        if not self._catalog.tableExists(ident):
            return None
        t = self._catalog.getTableMetadata(ident)
        location = t.storage().locationUri()
        provider = t.provider()
        return {
            "location": location.get().toString() if location.isDefined() else None,
            "provider": provider.get() if provider.isDefined() else None,
            "columns": [(f.name(), f.dataType().simpleString()) for f in t.schema().fields()],
            "parameters": dict(self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(t.properties())),
            "table_type": t.tableType().name(),
        }

    def _identifier(self, database: str, table: str):
        return self.spark._jsparkSession.sessionState().sqlParser().parseTableIdentifier(f"`{database}`.`{table}`")

    def _schema(self, entry: CatalogEntry):
        """Spark's schema of the entry: the log's (Delta's schema JSON is Spark's), the location and
        the read's options on the first column under :data:`TABLE_KEY` (read by our data source)."""
        schema = json.loads(entry.schema_json or '{"type": "struct", "fields": []}')
        if schema["fields"]:
            first = schema["fields"][0]
            first["metadata"] = {**first.get("metadata", {}), TABLE_KEY: json.dumps({"path": entry.location})}
        return self._jvm.org.apache.spark.sql.types.DataType.fromJson(json.dumps(schema))

    def _catalog_table(self, entry: CatalogEntry, ident, schema):
        """Spark's ``CatalogTable`` of the entry: identifier, type, storage, schema and provider, then
        Scala's defaults of every later parameter (``$lessinit$greater$default$N``: partition columns,
        owner, times, properties, ...). py4j calls a Scala constructor by position only: these five are
        its first five parameters in Spark 4.0 to 4.3 (the catalog tests build and read one back)."""
        pkg = self._jvm.org.apache.spark.sql.catalyst.catalog
        table = pkg.CatalogTable
        defaults = [getattr(table, f"$lessinit$greater$default${n}")() for n in range(6, 23)]
        some, none = self._jvm.scala.Some, self._jvm.scala.Option.empty()
        empty_map = defaults[12 - 6]  # the default of ``properties``: an empty immutable Map
        storage = pkg.CatalogStorageFormat(
            some(self._jvm.java.net.URI(entry.location)), none, none, none, False, empty_map, none
        )
        return table(
            ident,
            pkg.CatalogTableType.EXTERNAL(),
            storage,
            schema,
            some("delta"),
            *defaults,
        )
