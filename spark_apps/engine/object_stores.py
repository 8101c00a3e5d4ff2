"""Object stores (S3 and S3-compatible servers, GCS, Azure Blob / ADLS Gen2): which store a URI
names, its ``pyarrow.fs`` filesystem, and the conditional create that makes commits safe there.

Two libraries, each for what it does best:

* ``pyarrow.fs`` is the data plane: parquet reads and writes inside Spark tasks, listings (one
  paginated LIST), deletes. It ships with pyarrow, which every executor has, so a stock pyspark
  without hadoop-aws reads and writes these tables.
* ``obstore`` (the Python binding of the Rust ``object_store`` crate that delta-rs commits through)
  is the commit plane: ``put(mode="create")`` is a create-only PUT with each store's own
  precondition (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``, Azure ``If-None-Match: *``), so
  two writers of one log version are mutually exclusive with no lock service. pyarrow.fs has no
  create-only write.

Credentials and endpoints come from the environment's default chain in both libraries (the standard
``AWS_*``, ``GOOGLE_*`` and ``AZURE_*`` variables, instance roles, workload identity). The provider
turns an Airflow connection into those variables for the app's process (see docs/object-stores.md).

A store that ignores the precondition would make every commit silently unsafe, so before the first
commit to a bucket, a process checks it: it creates a probe object twice under the table's
``_delta_log/`` and requires the second create to be refused (then deletes the probe).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import ParseResult, urlparse

from .errors import InvalidArgumentError, StorageError


@dataclass(frozen=True)
class ObjectStore:
    """Everything the engine knows about one kind of object store; a new store is one record in
    :data:`STORES` (and, for Airflow connections, one converter in the provider's
    ``storage_connections``).

    :param kind: the store's name (``s3``, ``gcs``, ``azure``)
    :param schemes: the URI schemes that name it
    :param env: the variables its default credential chain reads (a change of any builds new clients)
    :param endpoint_env: the variables that point it at another endpoint (an emulator, an
        S3-compatible server), first set wins
    :param connection_types: the Airflow connection types that describe it
    :param hadoop_schemes: the schemes Spark's own Hadoop filesystems read it by (hadoop-aws, ...)
    :param bucket_url: ``(parsed URI) -> (bucket URL as obstore takes it, pyarrow.fs bucket name)``
    :param filesystem: ``(parsed URI) -> pyarrow.fs filesystem`` from the settings in effect
    :param obstore_config: ``(endpoint) -> (client options, store config)`` from the settings in effect
    """

    kind: str
    schemes: tuple[str, ...]
    env: tuple[str, ...]
    endpoint_env: tuple[str, ...]
    connection_types: tuple[str, ...]
    hadoop_schemes: tuple[str, ...]
    bucket_url: Callable[[ParseResult], tuple[str, str]]
    filesystem: Callable[[ParseResult], Any]
    obstore_config: Callable[[str | None], tuple[dict, dict]]

    def endpoint(self) -> str | None:
        return next((v for name in self.endpoint_env if (v := _get(name))), None)


# Settings given for one block of work (an Airflow connection's credentials in a worker or the
# triggerer, where many tasks share one process): they take precedence over the process environment
# and never leak into it. A ContextVar, so concurrent tasks and threads each see their own.
_OVERRIDE: ContextVar[Mapping[str, str] | None] = ContextVar("delta_storage_settings", default=None)


@contextmanager
def storage_settings(env: Mapping[str, str] | None) -> Iterator[None]:
    """Inside the block, object stores use ``env`` (the standard variables, e.g. ``AWS_ACCESS_KEY_ID``)
    over the process environment. ``None`` or empty: no change."""
    if not env:
        yield
        return
    token = _OVERRIDE.set({**(_OVERRIDE.get() or {}), **env})
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _get(name: str) -> str | None:
    override = _OVERRIDE.get()
    if override and override.get(name):
        return override[name]
    return os.environ.get(name)


def credential_env() -> dict[str, str]:
    """The object-store variables in effect (every store's), to hand to executors."""
    return {name: value for store in STORES for name in store.env if (value := _get(name))}


def store_of(uri: str) -> ObjectStore | None:
    """The :class:`ObjectStore` an object-store URI names, else ``None``."""
    return _BY_SCHEME.get(urlparse(uri).scheme.lower()) if "://" in uri else None


def store_kind(uri: str) -> str | None:
    """``"s3"``, ``"gcs"`` or ``"azure"`` for an object-store URI, else ``None``."""
    store = store_of(uri)
    return store.kind if store else None


def _env_key(store: ObjectStore) -> tuple:
    return tuple(_get(name) for name in store.env)


def _known(uri: str) -> ObjectStore:
    store = store_of(uri)
    if store is None:
        raise InvalidArgumentError(
            f"'{uri}' is not an object-store URI",
            "its scheme is not one of " + ", ".join(_BY_SCHEME),
            "use s3://, gs:// or abfss://",
        )
    return store


def bucket_of(uri: str) -> tuple[str, str, str]:
    """``(kind, bucket URL, key)`` of a location: the bucket (or Azure container) as a URL that
    obstore accepts and the object key inside it."""
    store = _known(uri)
    p = urlparse(uri)
    return store.kind, store.bucket_url(p)[0], p.path.lstrip("/")


# ---- the data plane: pyarrow.fs

_FS_LOCK = threading.Lock()
_FS_CACHE: dict[tuple, object] = {}


def fs_path(uri: str) -> str:
    """The path pyarrow.fs uses for an object-store location: ``bucket/key`` (Azure: ``container/key``)."""
    p = urlparse(uri)
    return (_known(uri).bucket_url(p)[1] + "/" + p.path.lstrip("/")).rstrip("/")


def pyarrow_filesystem(uri: str):
    """The ``pyarrow.fs`` filesystem for an object-store location: one cached client per bucket and
    credential set (building an S3 client may resolve the bucket's region with a request)."""
    store = _known(uri)
    p = urlparse(uri)
    key = (store.kind, p.netloc, _env_key(store))
    with _FS_LOCK:
        fs = _FS_CACHE.get(key)
    if fs is None:
        try:
            fs = store.filesystem(p)
        except Exception as e:  # pyarrow raises several types here
            raise InvalidArgumentError(
                f"Cannot open storage for '{uri}'",
                str(e),
                "check the URI and the store's credentials (see the docs' object-stores page, docs/object-stores.md)",
            ) from None
        with _FS_LOCK:
            _FS_CACHE[key] = fs
    return fs


def _parse_connection_string(s: str) -> dict[str, str]:
    out = {}
    for part in s.split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


# ---- S3 (and S3-compatible servers)


def _s3_bucket(p: ParseResult) -> tuple[str, str]:
    return f"s3://{p.netloc}", p.netloc


def _s3_filesystem(p: ParseResult):
    """Explicit settings when any are given (an override or the standard variables), else pyarrow's
    own default chain (profile, instance role, web identity)."""
    import pyarrow.fs as pafs

    key_id, endpoint = _get("AWS_ACCESS_KEY_ID"), S3.endpoint()
    if not (key_id or endpoint):
        return pafs.FileSystem.from_uri(f"s3://{p.netloc}")[0]
    kwargs: dict = {}
    if key_id:
        kwargs.update(
            access_key=key_id, secret_key=_get("AWS_SECRET_ACCESS_KEY"), session_token=_get("AWS_SESSION_TOKEN")
        )
    region = _get("AWS_REGION") or _get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    if endpoint:
        e = urlparse(endpoint if "://" in endpoint else "https://" + endpoint)
        kwargs.update(endpoint_override=e.netloc + e.path.rstrip("/"), scheme=e.scheme)
    return pafs.S3FileSystem(**kwargs)


def _s3_obstore(endpoint: str | None) -> tuple[dict, dict]:
    config: dict = {}
    for name, key in (
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
        ("AWS_SESSION_TOKEN", "session_token"),
    ):
        if _get(name):
            config[key] = _get(name)
    region = _get("AWS_REGION") or _get("AWS_DEFAULT_REGION")
    if region:
        config["region"] = region
    if endpoint:
        config["endpoint"] = endpoint
    return {}, config


# ---- Google Cloud Storage


def _gcs_bucket(p: ParseResult) -> tuple[str, str]:
    return f"gs://{p.netloc}", p.netloc


def _gcs_filesystem(p: ParseResult):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(f"gs://{p.netloc}")[0]


def _gcs_obstore(endpoint: str | None) -> tuple[dict, dict]:
    config: dict = {}
    if _get("GOOGLE_SERVICE_ACCOUNT"):
        config["service_account"] = _get("GOOGLE_SERVICE_ACCOUNT")
    if _get("GOOGLE_APPLICATION_CREDENTIALS"):
        config["application_credentials"] = _get("GOOGLE_APPLICATION_CREDENTIALS")
    if endpoint:
        config["base_url"] = endpoint.rstrip("/")
    return {}, config


# ---- Azure Blob Storage / ADLS Gen2


def _azure_bucket(p: ParseResult) -> tuple[str, str]:
    scheme = p.scheme.lower()
    if scheme in ("abfs", "abfss"):
        # abfss://<container>@<account>.dfs.core.windows.net/<key>
        container, _, host = p.netloc.partition("@")
        return f"{scheme}://{container}@{host}", container
    # az://<container>/<key> (the account from AZURE_STORAGE_ACCOUNT_NAME or the emulator)
    return f"az://{p.netloc}", p.netloc


def _azure_account(p: ParseResult | None = None) -> tuple[str | None, str | None, dict[str, str]]:
    """(account, key, parsed connection string) from the settings in effect (and an abfss URI's host)."""
    conn = _parse_connection_string(_get("AZURE_STORAGE_CONNECTION_STRING") or "")
    account = _get("AZURE_STORAGE_ACCOUNT_NAME") or conn.get("AccountName")
    if p is not None and p.scheme.lower() in ("abfs", "abfss") and "@" in p.netloc:
        account = p.netloc.partition("@")[2].split(".", 1)[0] or account
    return account, _get("AZURE_STORAGE_ACCOUNT_KEY") or conn.get("AccountKey"), conn


def _azure_emulated() -> bool:
    return (_get("AZURE_STORAGE_USE_EMULATOR") or "").lower() in ("1", "true")


def _azure_filesystem(p: ParseResult):
    import pyarrow.fs as pafs

    account, key, conn = _azure_account(p)
    kwargs: dict = {"account_name": account}
    if key:
        kwargs["account_key"] = key
    endpoint = conn.get("BlobEndpoint")
    if _azure_emulated() and not endpoint:
        endpoint = f"http://127.0.0.1:10000/{account}"
    if endpoint:
        e = urlparse(endpoint)
        kwargs.update(
            blob_storage_authority=e.netloc,
            blob_storage_scheme=e.scheme,
            dfs_storage_authority=e.netloc,
            dfs_storage_scheme=e.scheme,
        )
    return pafs.AzureFileSystem(**kwargs)


def _azure_obstore(endpoint: str | None) -> tuple[dict, dict]:
    client_options: dict = {}
    config: dict = {}
    account, key, conn = _azure_account()
    if _azure_emulated():
        config["use_emulator"] = True
        client_options["allow_http"] = True
    if account:
        config["account_name"] = account
    if key:
        config["account_key"] = key
    if _get("AZURE_STORAGE_SAS_TOKEN"):
        config["sas_key"] = _get("AZURE_STORAGE_SAS_TOKEN")
    if conn.get("BlobEndpoint"):
        config["endpoint"] = conn["BlobEndpoint"]
    return client_options, config


S3 = ObjectStore(
    kind="s3",
    schemes=("s3", "s3a"),  # s3a:// (Hadoop's name) is the same object
    env=(
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_ALLOW_HTTP",
    ),
    endpoint_env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    connection_types=("aws", "s3"),
    hadoop_schemes=("s3a",),
    bucket_url=_s3_bucket,
    filesystem=_s3_filesystem,
    obstore_config=_s3_obstore,
)
GCS = ObjectStore(
    kind="gcs",
    schemes=("gs", "gcs"),  # gcs:// is pyarrow's alias
    env=("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT", "STORAGE_EMULATOR_HOST"),
    endpoint_env=("STORAGE_EMULATOR_HOST",),
    connection_types=("google_cloud_platform", "gcp", "gcs"),
    hadoop_schemes=("gs",),
    bucket_url=_gcs_bucket,
    filesystem=_gcs_filesystem,
    obstore_config=_gcs_obstore,
)
AZURE = ObjectStore(
    kind="azure",
    schemes=("az", "azure", "abfs", "abfss"),
    env=(
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
    ),
    endpoint_env=(),  # the connection string's BlobEndpoint, or the emulator's
    connection_types=("wasb", "adls", "azure_data_lake", "azure"),
    hadoop_schemes=("abfs", "abfss", "wasb", "wasbs"),
    bucket_url=_azure_bucket,
    filesystem=_azure_filesystem,
    obstore_config=_azure_obstore,
)

#: every object store the engine reads and commits to
STORES: tuple[ObjectStore, ...] = (S3, GCS, AZURE)
_BY_SCHEME = {scheme: store for store in STORES for scheme in store.schemes}
#: URI scheme -> store kind
KINDS = {scheme: store.kind for scheme, store in _BY_SCHEME.items()}
#: the schemes Spark's own Hadoop filesystems may read object stores by
HADOOP_SCHEMES = tuple(scheme for store in STORES for scheme in store.hadoop_schemes)


def store_for_connection_type(conn_type: str) -> ObjectStore | None:
    """The store an Airflow connection type describes (``aws`` -> S3), else ``None``."""
    return next((store for store in STORES if conn_type.lower() in store.connection_types), None)


# ---- the commit plane: obstore's create-only put

_STORE_LOCK = threading.Lock()
_STORES: dict[tuple, object] = {}
_VERIFIED: set[tuple] = set()


def _store(store: ObjectStore, bucket_url: str):
    key = (bucket_url, _env_key(store))
    with _STORE_LOCK:
        client = _STORES.get(key)
    if client is not None:
        return client, key
    from obstore.store import from_url  # a dependency of the provider

    endpoint = store.endpoint()
    client_options, config = store.obstore_config(endpoint)
    if (config.get("endpoint") or endpoint or "").startswith("http://"):
        client_options["allow_http"] = True
    try:
        client = from_url(bucket_url, config=config or None, client_options=client_options or None)
    except Exception as e:
        raise InvalidArgumentError(
            f"Cannot open '{bucket_url}' for commits", str(e), "check the URI and the store's credentials"
        ) from None
    with _STORE_LOCK:
        _STORES[key] = client
    return client, key


def create_object(uri: str, data: bytes) -> None:
    """Create ``uri`` with ``data`` only if no object is there (the store's own precondition);
    ``FileExistsError`` when one is. Checks once per bucket and process that the store honours it."""
    _, bucket_url, key = bucket_of(uri)
    store, store_key = _store(_known(uri), bucket_url)
    if store_key not in _VERIFIED:
        _verify_conditional_create(store, bucket_url, key.rsplit("/", 1)[0])
        with _STORE_LOCK:
            _VERIFIED.add(store_key)
    _create(store, uri, key, data)


def _create(store, uri: str, key: str, data: bytes) -> None:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        obstore.put(store, key, data, mode="create")
    except (AlreadyExistsError, PreconditionError):
        raise FileExistsError(uri) from None
    except Exception as e:
        raise StorageError(
            f"Cannot write '{uri}'", _short(e), "check the store's credentials and endpoint, then retry"
        ) from None


def list_after(uri: str, start_after: str) -> tuple[list[str], list[int], list[int]]:
    """The objects directly under the "directory" ``uri`` whose name sorts after ``start_after``:
    names, sizes, modification times in ms. One listing that starts at that key on the server
    (S3's ``start-after``, GCS's ``startOffset``), so a writer asking for the commits after the
    ones it read does not list the whole log. The names are filtered here too: not every store or
    emulator honours the start key (Azurite lists from the beginning)."""
    import obstore

    _, bucket_url, key = bucket_of(uri)
    store, _ = _store(_known(uri), bucket_url)
    prefix = key.rstrip("/") + "/"
    names: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    try:
        for chunk in obstore.list(store, prefix, offset=prefix + start_after, chunk_size=1000):
            for meta in chunk:
                name = meta["path"][len(prefix) :]
                if "/" in name or name <= start_after:  # deeper (_sidecars/...), or before the key
                    continue
                names.append(name)
                sizes.append(int(meta["size"]))
                mtimes.append(int(meta["last_modified"].timestamp() * 1000))
    except Exception as e:
        raise StorageError(
            f"Cannot list '{uri}'", _short(e), "check the store's credentials and endpoint, then retry"
        ) from None
    return names, sizes, mtimes


def _verify_conditional_create(store, bucket_url: str, directory: str) -> None:
    """Create one probe object twice: a store that lets the second create through ignores
    conditional writes, and a commit there could overwrite a concurrent writer's commit."""
    import obstore

    probe = f"{directory}/.conditional-create-probe-{uuid.uuid4().hex}"
    where = f"{bucket_url}/{probe}"
    _create(store, where, probe, b"1")
    try:
        try:
            _create(store, where, probe, b"2")
        except FileExistsError:
            return
        raise StorageError(
            f"Cannot commit to '{bucket_url}' safely: the store ignores conditional writes",
            "a create-only PUT of an existing object succeeded, so two writers of one log version could "
            "overwrite each other's commit",
            "use a store or S3-compatible server that supports conditional writes (If-None-Match), or, if "
            "only one writer ever commits to this table, set DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT=true",
        )
    finally:
        try:
            obstore.delete(store, probe)
        except Exception:  # a leftover probe is a hidden file that readers and VACUUM ignore
            pass


def _short(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:400] if text else type(e).__name__
