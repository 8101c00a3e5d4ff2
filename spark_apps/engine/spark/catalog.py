"""The Hive metastore through Spark's own Hive client (a classic session with Hive support).

The entry is the one delta-spark's catalog writes (``CreateDeltaTableCommand.cleanupTableDefinition``):
an external table with provider ``delta`` at the table's location and an empty schema, no partition
columns and no properties: the log holds all of those. So delta-spark finds the table as its own
and a schema change needs no catalog update. (Our PySpark data source, registered as ``delta``, is
handed the catalog's empty schema by ``spark.table``: it does not read such an entry yet.)
The session's catalog stores it the way it stores every data-source table (``spark.sql.sources.provider``
in the table properties, the location as the SerDe ``path``).

Spark's SQL cannot write this entry (``CREATE TABLE ... USING delta`` needs a ``delta`` source and stores
that source's schema), so the entry is built as Spark's own ``CatalogTable`` and handed to the session
catalog, through the session's JVM: a classic session only (over Spark Connect, sync from a classic
session that reaches the same metastore).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..catalog import Catalog, CatalogEntry
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

    def sync(self, entry: CatalogEntry) -> dict:
        ident = self._identifier(entry.database, entry.table)
        if self._catalog.tableExists(ident):
            found = self.describe(entry.database, entry.table)
            self._refuse_other_table(entry, found["location"], found["provider"])
            return self._result(entry, "unchanged")  # delta-spark's entry holds nothing the log changes
        if not self._catalog.databaseExists(entry.database):
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{entry.database}`")
        self._catalog.createTable(self._catalog_table(entry, ident), False, False)
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

    def _catalog_table(self, entry: CatalogEntry, ident):
        """Spark's ``CatalogTable`` of delta-spark's entry; the fields delta-spark leaves at their
        defaults take Scala's defaults (``$lessinit$greater$default$N``: owner, times, ...)."""
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
            self._jvm.org.apache.spark.sql.types.StructType(),
            some("delta"),
            *defaults,
        )
