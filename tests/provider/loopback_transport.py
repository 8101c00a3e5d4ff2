"""A fourth transport, as a new contributor would add one (issue 43 item 2's measure): a remote
Delta service on loopback, reached over HTTP. The whole transport is this module; selecting it is
one registry line (``TRANSPORTS[LoopbackTransport.name] = LoopbackTransport``, in a test through
``monkeypatch.setitem``) and a connection of type ``delta_loopback``.

:class:`LoopbackService` is the remote side, a stand-in for a service such as Apache Livy: it runs
each submitted operation in its own thread through the bundled apps' in-process runner
(:func:`airflow_delta_provider_apps.protocol.run_in_process`, the real engine) and answers::

    POST /runs                {"operation", "table_uri", "params", "queue"} -> {"id"}
    GET  /runs/<id>           -> {"state": "QUEUED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "KILLED"}
    GET  /runs/<id>/result    -> {"result": {...}} or {"error": {"error_class", "message", "retryable"}}
    POST /runs/<id>/kill      -> {}
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airflow_delta_provider.exceptions import DeltaConfigurationError, app_error
from airflow_delta_provider.hooks.transport import RunState, Transport

ACTIVE = ("QUEUED", "RUNNING")


# -- the remote service ------------------------------------------------------------------------


class LoopbackService:
    """The remote Delta service on 127.0.0.1 (a free port). ``hold`` keeps new runs QUEUED until it
    is set (a run waiting for resources); ``requests`` records each (method, path)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.hold = threading.Event()
        self.hold.set()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                service.requests.append(("POST", self.path))
                parts = self.path.strip("/").split("/")
                if parts == ["runs"]:
                    run_id = service.submit(body["operation"], body["table_uri"], body["params"])
                    service.runs[run_id]["queue"] = body.get("queue")
                    self._send(200, {"id": run_id})
                elif len(parts) == 3 and parts[2] == "kill" and parts[1] in service.runs:
                    service.runs[parts[1]]["state"] = "KILLED"
                    self._send(200, {})
                else:
                    self._send(404, {})

            def do_GET(self):
                service.requests.append(("GET", self.path))
                parts = self.path.strip("/").split("/")
                run = service.runs.get(parts[1]) if len(parts) >= 2 else None
                if run is None:
                    self._send(404, {})
                elif len(parts) == 2:
                    self._send(200, {"state": run["state"]})
                else:
                    self._send(200, {k: run[k] for k in ("result", "error") if k in run})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def submit(self, operation: str, table_uri: str, params: dict) -> str:
        from airflow_delta_provider_apps.protocol import DeltaError, run_in_process

        run_id = uuid.uuid4().hex[:12]
        run = self.runs[run_id] = {"state": "QUEUED"}

        def work():
            self.hold.wait()
            if run["state"] == "KILLED":
                return
            run["state"] = "RUNNING"
            try:
                run["result"] = run_in_process(operation, table_uri, params)
                run["state"] = "SUCCEEDED"
            except DeltaError as e:
                run["error"] = {"error_class": type(e).__name__, "message": e.one_line(), "retryable": e.retryable}
                run["state"] = "FAILED"

        threading.Thread(target=work, daemon=True).start()
        return run_id

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


# -- the transport -----------------------------------------------------------------------------


def _call(url: str, body: dict | None = None) -> dict:
    """One JSON request (POST with a body); an unreachable service is an OSError (the trigger's
    unreachable timeout applies)."""
    data = None if body is None else json.dumps(body, default=str).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read() or b"{}")


@dataclass(frozen=True)
class LoopbackSettings:
    """What a ``delta_loopback`` connection and the transport's own option mean: the service's
    address, and the service queue runs go to (``loopback_queue``, default ``default``)."""

    url: str
    queue: str


class LoopbackTransport(Transport):
    """Runs go to the Delta service at the connection's host and port; they can always defer."""

    name = "loopback"
    conn_types = ("delta_loopback",)
    poll_interval = 0.05
    options = ("loopback_queue",)  # its own setting: an operator or the hook takes it as a keyword

    def __init__(self, hook) -> None:
        super().__init__(hook)
        self._handle: dict | None = None

    @classmethod
    def serves(cls, conn) -> bool:
        return conn.conn_type in cls.conn_types

    @classmethod
    def check_options(cls, options) -> None:
        queue = options.get("loopback_queue")
        if queue is not None and not (isinstance(queue, str) and queue.isidentifier()):
            raise DeltaConfigurationError(
                f"loopback_queue={queue!r} is not a queue name",
                "the loopback service names its queues with letters, digits and underscores",
                "pass a name such as 'etl'",
            )

    def settings(self) -> LoopbackSettings:
        conn = self.hook.get_conn()
        return LoopbackSettings(f"http://{conn.host}:{conn.port}", self.option("loopback_queue") or "default")

    def deferral_blocker(self) -> str | None:
        return None

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        handle = self.start(operation, table_uri, params)
        while (polled := self.poll(handle)).active:
            time.sleep(self.poll_interval)
        return self.finish(handle, polled.state, polled.succeeded)

    def start(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        url, queue = self.settings().url, self.settings().queue
        body = {"operation": operation, "table_uri": table_uri, "params": params, "queue": queue}
        run_id = _call(f"{url}/runs", body)["id"]
        self._handle = {"url": url, "run_id": run_id, "submitted_at": time.time()}
        return self._handle

    @classmethod
    def poll(cls, handle: dict) -> RunState:
        state = _call(f"{handle['url']}/runs/{handle['run_id']}")["state"]
        return RunState(state, active=state in ACTIVE, waiting=state == "QUEUED", succeeded=state == "SUCCEEDED")

    @classmethod
    def describe(cls, handle: dict) -> str:
        return f"loopback run {handle['run_id']}"

    def finish(self, handle: dict, state: str, succeeded: bool) -> dict:
        reply = _call(f"{handle['url']}/runs/{handle['run_id']}/result")
        if "error" in reply:
            error = reply["error"]
            raise app_error(error["error_class"], error["message"], retryable=error["retryable"])
        if not succeeded:
            raise app_error("LoopbackRunError", f"{self.describe(handle)} ended {state}", retryable=True)
        return reply["result"]

    def stop(self, handle: dict) -> str | None:
        try:
            _call(f"{handle['url']}/runs/{handle['run_id']}/kill", {})
        except OSError as e:
            return str(e)
        return None

    @property
    def application_url(self) -> str | None:
        return None if self._handle is None else f"{self._handle['url']}/runs/{self._handle['run_id']}"

    def kill(self) -> None:
        if self._handle is not None:
            self.stop(self._handle)
