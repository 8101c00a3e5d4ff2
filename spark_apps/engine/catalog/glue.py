"""The AWS Glue Data Catalog through boto3: a Delta table as Athena reads a native Delta table.

The entry is an ``EXTERNAL_TABLE`` with the parameters Athena and Glue's crawler use for Delta
(``table_type=DELTA``, ``spark.sql.sources.provider=delta``), the location in the storage descriptor
and in its SerDe ``path`` parameter (Spark's data-source tables read it there), and the columns of
the Delta schema as Hive types (partition columns as partition keys). Readers of Delta (Athena,
Spark) take the schema from the log; the columns are for the catalog's other users (Lake Formation,
views, column lists), so each sync rewrites them to the committed schema.

A missing database is created (as ``CREATE TABLE`` in a fresh catalog would need it first).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import InvalidArgumentError, StorageError
from . import Catalog, CatalogEntry

__all__ = ["GlueCatalog"]

#: the table parameters of a native Delta table (Athena's "Querying Delta Lake tables")
DELTA_PARAMETERS = {"table_type": "DELTA", "spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"}


class GlueCatalog(Catalog):
    """``GlueCatalog(region_name=..., endpoint_url=..., catalog_id=...)`` or ``GlueCatalog(client=...)``;
    other keyword arguments (credentials, profile) go to :func:`boto3.session.Session`."""

    kind: ClassVar[str] = "glue"

    def __init__(
        self,
        *,
        client: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        catalog_id: str | None = None,
        **session_kwargs: Any,
    ) -> None:
        if client is None:
            try:
                import boto3
            except ImportError:
                raise InvalidArgumentError(
                    "The Glue catalog needs boto3",
                    "boto3 is not installed here",
                    "pip install 'airflow-delta-provider[glue]'",
                ) from None
            session = boto3.session.Session(region_name=region_name, **session_kwargs)
            client = session.client("glue", endpoint_url=endpoint_url or None)
        self.client = client
        self._catalog = {"CatalogId": catalog_id} if catalog_id else {}

    def sync(self, entry: CatalogEntry) -> dict:
        existing = self._get(entry.database, entry.table)
        table_input = self._table_input(entry)
        try:
            if existing is None:
                self._ensure_database(entry.database)
                self.client.create_table(**self._catalog, DatabaseName=entry.database, TableInput=table_input)
                return self._result(entry, "created")
            self._refuse_other_table(
                entry,
                existing.get("StorageDescriptor", {}).get("Location"),
                _provider(existing.get("Parameters") or {}),
            )
            if _same(existing, table_input):
                return self._result(entry, "unchanged")
            self.client.update_table(**self._catalog, DatabaseName=entry.database, TableInput=table_input)
            return self._result(entry, "updated")
        except self.client.exceptions.ClientError as e:
            raise _glue_error(entry, e) from None

    def describe(self, database: str, table: str) -> dict | None:
        t = self._get(database, table)
        if t is None:
            return None
        sd = t.get("StorageDescriptor") or {}
        params = t.get("Parameters") or {}
        return {
            "location": sd.get("Location"),
            "provider": _provider(params),
            "columns": [(c["Name"], c["Type"]) for c in (*sd.get("Columns", []), *t.get("PartitionKeys", []))],
            "parameters": params,
        }

    def _get(self, database: str, table: str) -> dict | None:
        try:
            return self.client.get_table(**self._catalog, DatabaseName=database, Name=table)["Table"]
        except self.client.exceptions.EntityNotFoundException:
            return None
        except self.client.exceptions.ClientError as e:
            raise _glue_error(None, e, f"{database}.{table}") from None

    def _ensure_database(self, database: str) -> None:
        try:
            self.client.create_database(**self._catalog, DatabaseInput={"Name": database})
        except self.client.exceptions.AlreadyExistsException:
            pass

    @staticmethod
    def _table_input(entry: CatalogEntry) -> dict:
        def columns(cols):
            return [{"Name": n, "Type": t, **({"Comment": c} if c else {})} for n, t, c in cols]

        out = {
            "Name": entry.table,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": dict(DELTA_PARAMETERS),
            "StorageDescriptor": {
                "Columns": columns(entry.columns),
                "Location": entry.location,
                "SerdeInfo": {"Parameters": {"path": entry.location}},
            },
            "PartitionKeys": columns(entry.partition_columns),
        }
        if entry.description:
            out["Description"] = entry.description
        return out


def _provider(params: dict) -> str | None:
    p = params.get("spark.sql.sources.provider") or params.get("table_type")
    return p.lower() if p else None


def _same(existing: dict, table_input: dict) -> bool:
    """The stored entry already says what ``table_input`` says (no update needed)."""
    sd, want = existing.get("StorageDescriptor") or {}, table_input["StorageDescriptor"]
    return (
        sd.get("Columns", []) == want["Columns"]
        and sd.get("Location") == want["Location"]
        and existing.get("PartitionKeys", []) == table_input["PartitionKeys"]
        and all((existing.get("Parameters") or {}).get(k) == v for k, v in table_input["Parameters"].items())
        and existing.get("Description") == table_input.get("Description")
    )


def _glue_error(entry: CatalogEntry | None, e: Exception, name: str | None = None) -> Exception:
    """Glue's refusal as an engine error: access and validation problems are the caller's to fix;
    throttling and service errors may pass on a retry."""
    err = getattr(e, "response", {}).get("Error", {})
    code, message = err.get("Code", type(e).__name__), err.get("Message", str(e))
    what = f"Syncing catalog table {entry.name if entry else name} in AWS Glue failed"
    if code in ("AccessDeniedException", "InvalidInputException", "ValidationException"):
        return InvalidArgumentError(what, f"{code}: {message}", "check the Glue connection's region and permissions")
    return StorageError(what, f"{code}: {message}", "the task's retry syncs again")
