"""Real object-store servers on loopback for the tests, started and stopped by them.

* :class:`S3Server`: moto's standalone S3 server (it honours conditional writes: a create-only PUT of
  an existing key gets 412), one bucket per test.
* :class:`AzuriteServer`: Azure's own emulator (Blob API), from npm (``make test`` / ``make test-spark`` put it
  in ``.tools/azurite``), with its well-known development account; one container per test.
* :class:`LoopbackProxy`: a reverse proxy in front of it that records the requests and may drop
  headers; :func:`no_conditional_writes_proxy` drops the preconditions, i.e. an S3-compatible
  endpoint that ignores conditional writes, as older servers do.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


class S3Server:
    """``python -m moto.server`` on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, "moto's S3 server")

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard variables a client of this server needs (the default chain reads them)."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def new_bucket(self) -> str:
        name = f"lake-{uuid.uuid4().hex[:12]}"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("PUT", f"/{name}")
            r = conn.getresponse()
            r.read()
            assert r.status == 200, f"creating bucket {name}: HTTP {r.status}"
        finally:
            conn.close()
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        out = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    def stop(self) -> None:
        _stop(self._proc)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Azurite's documented development account (public: the emulator accepts only it).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> str | None:
    local = os.path.join(REPO, ".tools", "azurite", "node_modules", ".bin", "azurite-blob")
    return local if os.access(local, os.X_OK) else shutil.which("azurite-blob")


class AzuriteServer:
    """``azurite-blob`` on a free loopback port, its data in a temporary folder."""

    def __init__(self, binary: str) -> None:
        self.port = free_port()
        self._dir = tempfile.mkdtemp(prefix="azurite-")
        self._proc = subprocess.Popen(
            [
                binary,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                self._dir,
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, "Azurite")
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def env(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_CONNECTION_STRING": (
                f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint={self.endpoint};"
            )
        }

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            blob_storage_authority=f"127.0.0.1:{self.port}",
            blob_storage_scheme="http",
            dfs_storage_authority=f"127.0.0.1:{self.port}",
            dfs_storage_scheme="http",
        )

    def new_container(self) -> str:
        name = f"lake{uuid.uuid4().hex[:12]}"
        self.filesystem().create_dir(name)
        return name

    def keys(self, container: str, prefix: str = "") -> list[str]:
        import pyarrow.fs as pafs

        infos = self.filesystem().get_file_info(
            pafs.FileSelector(f"{container}/{prefix}".rstrip("/"), recursive=True, allow_not_found=True)
        )
        return sorted(i.path.split("/", 1)[1] for i in infos if i.type == pafs.FileType.File)

    def stop(self) -> None:
        _stop(self._proc)
        shutil.rmtree(self._dir, ignore_errors=True)


_PRECONDITIONS = frozenset({"if-none-match", "if-match"})
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class LoopbackProxy:
    """Forwards every request to ``upstream_port``, without the headers named in ``drop``; each
    request's ``(method, path, If-None-Match)`` is appended to ``self.requests``."""

    def __init__(self, upstream_port: int, *, drop: frozenset[str] = frozenset()) -> None:
        upstream = upstream_port
        requests: list[tuple[str, str, str | None]] = []
        self.requests = requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _body(self) -> bytes | None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def _forward(self) -> None:
                body = self._body()
                requests.append((self.command, self.path, self.headers.get("If-None-Match")))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in drop | _HOP}
                conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response(r.status)
                    for k, v in r.getheaders():
                        if k.lower() not in _HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                            self.send_header(k, v)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, *args) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def no_conditional_writes_proxy(upstream_port: int) -> LoopbackProxy:
    """An S3-compatible endpoint that ignores conditional writes, as older servers do."""
    return LoopbackProxy(upstream_port, drop=_PRECONDITIONS)


class S3Env:
    """One fresh bucket on the loopback S3 server, with the standard AWS variables set for this test."""

    def __init__(self, server, bucket: str):
        self.server, self.bucket = server, bucket
        self.env = server.env()

    def uri(self, name: str = "t") -> str:
        return f"s3://{self.bucket}/{name}"

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.keys(self.bucket, prefix)

    @property
    def deltalake_options(self) -> dict[str, str]:
        """What deltalake (delta-rs) needs for this server; it commits with S3's conditional put."""
        return {
            "AWS_ENDPOINT_URL": self.server.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "conditional_put": "etag",
        }


class AzureEnv:
    """One fresh container on Azurite, with AZURE_STORAGE_CONNECTION_STRING set for this test."""

    def __init__(self, server, container: str):
        self.server, self.container = server, container
        self.env = server.env()

    def uri(self, name: str = "t") -> str:
        return f"az://{self.container}/{name}"

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.keys(self.container, prefix)

    @property
    def deltalake_options(self) -> dict[str, str]:
        return {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "endpoint": self.server.endpoint,
            "allow_http": "true",
        }
