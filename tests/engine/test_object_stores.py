"""Object-store plumbing without a cloud: which store a URI names and how its paths map, and GCS's
conditional create as it goes on the wire (no GCS emulator installs from a package registry: a small
HTTP server plays the XML API's part, honouring ``x-goog-if-generation-match: 0`` as GCS does)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from airflow_delta_provider_apps.engine import object_stores
from airflow_delta_provider_apps.engine.errors import StorageError
from airflow_delta_provider_apps.engine.storage import ObjectStoreStorage, PyArrowStorage, storage_for


@pytest.mark.parametrize(
    "uri, kind, bucket_url, key, fs_path",
    [
        ("s3://lake/t/_delta_log/0.json", "s3", "s3://lake", "t/_delta_log/0.json", "lake/t/_delta_log/0.json"),
        ("s3a://lake/t", "s3", "s3://lake", "t", "lake/t"),
        ("gs://lake/a/b", "gcs", "gs://lake", "a/b", "lake/a/b"),
        ("az://box/t/x.parquet", "azure", "az://box", "t/x.parquet", "box/t/x.parquet"),
        (
            "abfss://box@acct.dfs.core.windows.net/t/x",
            "azure",
            "abfss://box@acct.dfs.core.windows.net",
            "t/x",
            "box/t/x",
        ),
    ],
)
def test_uris_name_their_store_bucket_and_key(uri, kind, bucket_url, key, fs_path):
    assert object_stores.store_kind(uri) == kind
    assert object_stores.bucket_of(uri) == (kind, bucket_url, key)
    assert object_stores.fs_path(uri) == fs_path


def test_object_stores_get_conditional_commits_and_other_schemes_keep_the_opt_in(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert type(storage_for("s3://lake/t")) is ObjectStoreStorage
    assert object_stores.store_kind("hdfs://nn/t") is None and object_stores.store_kind("/data/t") is None
    st = storage_for("file:///tmp/x")
    assert not isinstance(st, ObjectStoreStorage)
    monkeypatch.setenv("DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT", "true")
    assert storage_for("s3://lake/t").allow_unsafe_put_if_absent is True
    monkeypatch.delenv("DELTA_ALLOW_UNSAFE_PUT_IF_ABSENT")
    unsafe = PyArrowStorage("mock://")
    assert unsafe.allow_unsafe_put_if_absent is False


class _FakeGcs:
    """GCS's XML API for PUT and DELETE, in memory: a PUT with ``x-goog-if-generation-match: 0`` of an
    existing object gets 412, as on GCS."""

    def __init__(self):
        self.requests: list[tuple[str, str, str | None]] = []
        objects: dict[str, bytes] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, headers: dict | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_PUT(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                match = self.headers.get("x-goog-if-generation-match")
                fake.requests.append(("PUT", unquote(self.path), match))
                if match == "0" and self.path in objects:
                    return self._reply(412)
                objects[self.path] = body
                self._reply(200, {"ETag": '"e1"', "x-goog-generation": "1"})

            def do_DELETE(self):
                fake.requests.append(("DELETE", unquote(self.path), None))
                objects.pop(self.path, None)
                self._reply(204)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def point_at_me(self, tmp_path, monkeypatch) -> None:
        """object_store's documented way to send GCS requests to a local server without OAuth."""
        account = tmp_path / "sa.json"
        keys = {"gcs_base_url": self.url, "disable_oauth": True, "client_email": "", "private_key": ""}
        account.write_text(json.dumps({**keys, "private_key_id": ""}))
        monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", str(account))


def test_gcs_commit_is_a_put_with_if_generation_match_zero(tmp_path, monkeypatch):
    fake = _FakeGcs()
    try:
        fake.point_at_me(tmp_path, monkeypatch)
        uri = "gs://bkt/t/_delta_log/00000000000000000000.json"
        object_stores.create_object(uri, b'{"commitInfo":{}}\n')
        with pytest.raises(FileExistsError):
            object_stores.create_object(uri, b"a racing writer's commit\n")
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    puts = [(p, m) for method, p, m in fake.requests if method == "PUT"]
    # the probe twice (the second refused), then the commit twice (the second refused): all create-only
    assert [m for _, m in puts] == ["0", "0", "0", "0"]
    assert "conditional" in puts[0][0] and puts[2][0].endswith("00000000000000000000.json")
    assert any(method == "DELETE" and "conditional" in p for method, p, _ in fake.requests)


def test_a_gcs_endpoint_that_ignores_the_precondition_is_refused(tmp_path, monkeypatch):
    """The same fake, told to ignore the precondition: the probe notices before any commit is written."""
    fake = _FakeGcs()
    handler = fake.server.RequestHandlerClass
    original = handler.do_PUT

    def ignore_precondition(self):
        del self.headers["x-goog-if-generation-match"]
        return original(self)

    handler.do_PUT = ignore_precondition
    try:
        fake.point_at_me(tmp_path, monkeypatch)
        with pytest.raises(StorageError, match="ignores conditional writes"):
            object_stores.create_object("gs://bkt/t/_delta_log/00000000000000000000.json", b"x")
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    assert not any(p.endswith(".json") and "conditional" not in p for m, p, _ in fake.requests if m == "PUT")
