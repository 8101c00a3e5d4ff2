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
turns an Airflow connection into those variables for the app's process (see the README).

A store that ignores the precondition would make every commit silently unsafe, so before the first
commit to a bucket, a process checks it: it creates a probe object twice under the table's
``_delta_log/`` and requires the second create to be refused (then deletes the probe).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import urlparse

from .errors import InvalidArgumentError, StorageError

# URI scheme -> store kind. s3a:// (Hadoop's name) is the same S3 object; gcs:// is pyarrow's alias.
KINDS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
}

# The variables each kind's default chain reads (a change of any of them builds new clients).
_ENV = {
    "s3": (
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
    "gcs": ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT", "STORAGE_EMULATOR_HOST"),
    "azure": (
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
    ),
}


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
    """The object-store variables in effect (every kind's), to hand to executors."""
    return {name: value for names in _ENV.values() for name in names if (value := _get(name))}


def store_kind(uri: str) -> str | None:
    """``"s3"``, ``"gcs"`` or ``"azure"`` for an object-store URI, else ``None``."""
    return KINDS.get(urlparse(uri).scheme.lower()) if "://" in uri else None


def _env_key(kind: str) -> tuple:
    return tuple(_get(name) for name in _ENV[kind])


def _endpoint(kind: str) -> str | None:
    if kind == "s3":
        return _get("AWS_ENDPOINT_URL_S3") or _get("AWS_ENDPOINT_URL")
    if kind == "gcs":
        return _get("STORAGE_EMULATOR_HOST")
    return None


def bucket_of(uri: str) -> tuple[str, str, str]:
    """``(kind, bucket URL, key)`` of a location: the bucket (or Azure container) as a URL that
    obstore accepts and the object key inside it."""
    kind = store_kind(uri)
    if kind is None:
        raise InvalidArgumentError(
            f"'{uri}' is not an object-store URI",
            "its scheme is not one of " + ", ".join(KINDS),
            "use s3://, gs:// or abfss://",
        )
    p = urlparse(uri)
    scheme = p.scheme.lower()
    key = p.path.lstrip("/")
    if kind == "azure" and scheme in ("abfs", "abfss"):
        # abfss://<container>@<account>.dfs.core.windows.net/<key>
        container, _, host = p.netloc.partition("@")
        return kind, f"{scheme}://{container}@{host}", key
    if kind == "azure":
        # az://<container>/<key> (the account from AZURE_STORAGE_ACCOUNT_NAME or the emulator)
        return kind, f"az://{p.netloc}", key
    return kind, f"{'gs' if kind == 'gcs' else 's3'}://{p.netloc}", key


# ---- the data plane: pyarrow.fs

_FS_LOCK = threading.Lock()
_FS_CACHE: dict[tuple, object] = {}


def fs_path(uri: str) -> str:
    """The path pyarrow.fs uses for an object-store location: ``bucket/key`` (Azure: ``container/key``)."""
    p = urlparse(uri)
    bucket = p.netloc.partition("@")[0] if p.scheme.lower() in ("abfs", "abfss") else p.netloc
    return (bucket + "/" + p.path.lstrip("/")).rstrip("/")


def pyarrow_filesystem(uri: str):
    """The ``pyarrow.fs`` filesystem for an object-store location: one cached client per bucket and
    credential set (building an S3 client may resolve the bucket's region with a request)."""
    kind = store_kind(uri)
    key = (kind, urlparse(uri).netloc, _env_key(kind))
    with _FS_LOCK:
        fs = _FS_CACHE.get(key)
    if fs is None:
        fs = _new_filesystem(kind, uri)
        with _FS_LOCK:
            _FS_CACHE[key] = fs
    return fs


def _new_filesystem(kind: str, uri: str):
    import pyarrow.fs as pafs

    p = urlparse(uri)
    try:
        if kind == "s3":
            return _s3_filesystem(p.netloc)
        if kind == "gcs":
            return pafs.FileSystem.from_uri(f"gs://{p.netloc}")[0]
        return _azure_filesystem(uri)
    except Exception as e:  # pyarrow raises several types here
        raise InvalidArgumentError(
            f"Cannot open storage for '{uri}'",
            str(e),
            "check the URI and the store's credentials (see the README's object-store section)",
        ) from None


def _s3_filesystem(bucket: str):
    """Explicit settings when any are given (an override or the standard variables), else pyarrow's
    own default chain (profile, instance role, web identity)."""
    import pyarrow.fs as pafs

    key_id, endpoint = _get("AWS_ACCESS_KEY_ID"), _endpoint("s3")
    if not (key_id or endpoint):
        return pafs.FileSystem.from_uri(f"s3://{bucket}")[0]
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


def _azure_filesystem(uri: str):
    import pyarrow.fs as pafs

    conn = _parse_connection_string(_get("AZURE_STORAGE_CONNECTION_STRING") or "")
    p = urlparse(uri)
    account = _get("AZURE_STORAGE_ACCOUNT_NAME") or conn.get("AccountName")
    if p.scheme.lower() in ("abfs", "abfss") and "@" in p.netloc:
        account = p.netloc.partition("@")[2].split(".", 1)[0] or account
    kwargs: dict = {"account_name": account}
    key = _get("AZURE_STORAGE_ACCOUNT_KEY") or conn.get("AccountKey")
    if key:
        kwargs["account_key"] = key
    endpoint = conn.get("BlobEndpoint")
    if (_get("AZURE_STORAGE_USE_EMULATOR") or "").lower() in ("1", "true") and not endpoint:
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


def _parse_connection_string(s: str) -> dict[str, str]:
    out = {}
    for part in s.split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


# ---- the commit plane: obstore's create-only put

_STORE_LOCK = threading.Lock()
_STORES: dict[tuple, object] = {}
_VERIFIED: set[tuple] = set()


def _store(kind: str, bucket_url: str):
    key = (bucket_url, _env_key(kind))
    with _STORE_LOCK:
        store = _STORES.get(key)
    if store is not None:
        return store, key
    try:
        from obstore.store import from_url
    except ImportError:  # pragma: no cover - obstore is a dependency of the provider
        raise StorageError(
            f"Cannot commit to '{bucket_url}'",
            "the obstore package, which makes the store's conditional create, is not installed",
            "pip install airflow-delta-provider (it depends on obstore)",
        ) from None
    client_options, config = _obstore_config(kind)
    try:
        store = from_url(bucket_url, config=config or None, client_options=client_options or None)
    except Exception as e:
        raise InvalidArgumentError(
            f"Cannot open '{bucket_url}' for commits", str(e), "check the URI and the store's credentials"
        ) from None
    with _STORE_LOCK:
        _STORES[key] = store
    return store, key


def _obstore_config(kind: str) -> tuple[dict, dict]:
    """obstore's client options and store config from the settings in effect (explicit, so that an
    override applies; obstore would read only the process environment)."""
    client_options: dict = {}
    config: dict = {}
    endpoint = _endpoint(kind)
    if kind == "s3":
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
    elif kind == "gcs":
        if _get("GOOGLE_SERVICE_ACCOUNT"):
            config["service_account"] = _get("GOOGLE_SERVICE_ACCOUNT")
        if _get("GOOGLE_APPLICATION_CREDENTIALS"):
            config["application_credentials"] = _get("GOOGLE_APPLICATION_CREDENTIALS")
        if endpoint:
            config["base_url"] = endpoint.rstrip("/")
    else:
        conn = _parse_connection_string(_get("AZURE_STORAGE_CONNECTION_STRING") or "")
        account = _get("AZURE_STORAGE_ACCOUNT_NAME") or conn.get("AccountName")
        key = _get("AZURE_STORAGE_ACCOUNT_KEY") or conn.get("AccountKey")
        if (_get("AZURE_STORAGE_USE_EMULATOR") or "").lower() in ("1", "true"):
            config["use_emulator"] = True
            client_options["allow_http"] = True
        if account:
            config["account_name"] = account
        if key:
            config["account_key"] = key
        if _get("AZURE_STORAGE_SAS_TOKEN"):
            config["sas_key"] = _get("AZURE_STORAGE_SAS_TOKEN")
        if conn.get("BlobEndpoint"):
            endpoint = conn["BlobEndpoint"]
            config["endpoint"] = endpoint
    if endpoint and endpoint.startswith("http://"):
        client_options["allow_http"] = True
    return client_options, config


def create_object(uri: str, data: bytes) -> None:
    """Create ``uri`` with ``data`` only if no object is there (the store's own precondition);
    ``FileExistsError`` when one is. Checks once per bucket and process that the store honours it."""
    kind, bucket_url, key = bucket_of(uri)
    store, store_key = _store(kind, bucket_url)
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
