"""The Delta view end to end (issue 42): a real api-server (and dag-processor, which registers the
DAG's table asset) on SQLite serves the plugin, declared in the provider info; headless Chromium
(Debian's package) opens the page and the test reads what it shows.

* A week of a pipeline's runs (tests/airflow/dags/delta_test_view_week.py: land a day's file, create,
  upsert, OPTIMIZE on Sunday) with ``dag.test()`` on 7 logical dates, in the DB the api-server reads:
  each history row links to the task instance that committed it (the XCom of that task instance
  names the version; the link's task instance exists in the api-server's REST API, and its "Delta
  table" link opens that version), each asset event to its version; Airflow's asset page shows each
  event's ``delta_view`` as a link (Chromium driven over its DevTools pipe); the size histogram
  against the files deltalake lists.
* 400 small appends (in process, through the engine): the page advises OPTIMIZE, naming as many small
  files as deltalake lists; after OPTIMIZE it does not.
* Errors through the server: a bad URI is a 400 (problem, cause, fix), a location without a table a
  404, a store that does not answer a 504 within ``[delta] ui_deadline_seconds``.

It takes a screenshot of the week (the docs': DELTA_VIEW_SCREENSHOT=docs/images/delta-view.png)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from conftest import HERE, REPO
from deployment import Deployment

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.table_view import SIZE_BINS, SMALL_FILE_BYTES

pytestmark = pytest.mark.airflow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: the docs' screenshot is taken again with DELTA_VIEW_SCREENSHOT=docs/images/delta-view.png
SCREENSHOT = os.environ.get("DELTA_VIEW_SCREENSHOT")

DAG_ID = "delta_test_view_week"
#: the week's logical dates: Monday 2026-11-16 to Sunday 2026-11-22 (OPTIMIZE runs on Sunday)
WEEK = """
import json, sys
from datetime import UTC, datetime, timedelta
sys.path.insert(0, {example_dags!r})
from run_demo import run_dag
for day in range(7):
    date = datetime(2026, 11, 16, tzinfo=UTC) + timedelta(days=day)
    print(json.dumps(run_dag({dag_id!r}, date, run_after=date), default=str))
"""
#: a deadline short enough to wait for, long enough for a loaded CI machine's reads
DEADLINE_SECONDS = 5


class _Dom(HTMLParser):
    """Elements as (tag, attrs, text) in document order (enough for the page's flat structure)."""

    def __init__(self):
        super().__init__()
        self.elements: list[list] = []
        self._open: list[list] = []

    def handle_starttag(self, tag, attrs):
        e = [tag, dict(attrs), ""]
        self.elements.append(e)
        if tag not in ("input", "br", "meta", "rect", "polyline"):
            self._open.append(e)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for e in self._open:
            e[2] += data

    def having(self, cls: str) -> list[list]:
        return [e for e in self.elements if cls in (e[1].get("class") or "").split()]


def _chromium(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def _page(url: str) -> _Dom:
    dom = _Dom()
    dom.feed(_chromium("--dump-dom", url).stdout)
    return dom


class _Browser:
    """Headless Chromium driven over its DevTools pipe (--remote-debugging-pipe: JSON messages ending
    in NUL on fds 3 and 4; no client library): open a page, evaluate JavaScript, click."""

    def __init__(self, chromium: str, profile: str, width: int = 1400, height: int = 1000):
        to_chrome_r, self._out = os.pipe()
        self._in, from_chrome_w = os.pipe()

        def fds():  # the child's fd 3 reads our commands, its fd 4 carries the answers
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            preexec_fn=fds,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id, self._session = b"", 0, None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable")

    def send(self, method: str, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self._session:
            msg["sessionId"] = self._session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._in], [], [], left)[0]:
                    raise TimeoutError(method)
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    raise EOFError("chromium closed its DevTools pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def eval(self, expression: str):
        return self.send("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not self.eval(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.5)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _view(base: str, table: str, version: int) -> str:
    return f"{base}/delta-view/?table={quote(table, safe='')}&version={version}"


def _sizes(table: str) -> list[int]:
    """Each live file's size, as deltalake lists them (an independent reader of the log)."""
    import deltalake

    return pa.table(deltalake.DeltaTable(table).get_add_actions(flatten=True)).column("size_bytes").to_pylist()


def _check_histogram(dom: _Dom, sizes: list[int]) -> None:
    assert dom.having("file-count")[0][2].startswith(f"{len(sizes)} files, ")
    bars = [int(e[1]["data-files"]) for e in dom.elements if e[0] == "rect"]
    highs = (*SIZE_BINS, float("inf"))
    lows = (0, *SIZE_BINS)
    assert bars == [sum(1 for s in sizes if lo <= s < hi) for lo, hi in zip(lows, highs, strict=True)]


def _advice(dom: _Dom) -> dict[str, str]:
    return {e[1]["data-kind"]: e[2] for e in dom.elements if e[0] == "li" and e[1].get("data-kind")}


class _Appends(threading.Thread):
    """``count`` small appends to a new table, each its own commit (another writer, in process)."""

    def __init__(self, table: str, count: int):
        super().__init__(daemon=True)
        self.table, self.count, self.result, self.stop = table, count, None, False

    def run(self):
        try:
            create_table(self.table, schema="id BIGINT, note STRING", name="clicks")
            for i in range(self.count):
                if self.stop:
                    return
                append_arrow(self.table, pa.table({"id": [i], "note": [f"click {i}"]}))
            self.result = self.count
        except Exception as e:  # the test reports it
            self.result = e


def _blackhole() -> socket.socket:
    """A TCP port that takes connections and never answers (an object store that hangs)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_a_week_of_runs_on_the_page(tmp_path):
    pytest.importorskip("deltalake")
    lake = tmp_path / "lake"
    table = str(lake / "orders")
    slow = _blackhole()
    clicks = str(lake / "clicks")
    appends = _Appends(clicks, 400)
    appends.start()
    store = {"conn_type": "aws", "login": "key", "password": "secret"}
    store["extra"] = {"endpoint_url": f"http://127.0.0.1:{slow.getsockname()[1]}", "region_name": "us-east-1"}
    d = Deployment(
        tmp_path / "home",
        tmp_path,
        DAG_ID,
        (HERE / "dags" / f"{DAG_ID}.py").read_text(),
        DELTA_TEST_ROOT=str(lake),
        # the provider info's plugins load when providers are discovered at start (the installed
        # airflow.plugins entry point loads it otherwise)
        AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__DELTA__UI_DEADLINE_SECONDS=str(DEADLINE_SECONDS),
        # the view reads s3:// tables through this connection: a store that never answers
        AIRFLOW__DELTA__UI_STORAGE_CONN_ID="slow_store",
        AIRFLOW_CONN_SLOW_STORE=json.dumps(store),
    )
    d.background = ["dag-processor"]  # registers the DAG's asset; the test runs the DAG itself
    try:
        d.start()
        d.wait(lambda: d.query("SELECT count(*) FROM asset_active WHERE uri = ?", "file://" + table)[0][0], "asset")

        # a week of runs, in the DB the api-server reads (no Spark: every task runs in the worker)
        code = WEEK.format(example_dags=str(REPO / "example_dags"), dag_id=DAG_ID)
        with open(d.home / "week.log", "w") as log:
            week = subprocess.run(
                [sys.executable, "-c", code], env=d.env, stdout=subprocess.PIPE, stderr=log, text=True, timeout=600
            )
        runs = [json.loads(line) for line in week.stdout.splitlines() if line.startswith("{")]
        assert week.returncode == 0 and len(runs) == 7, (d.home / "week.log").read_text()[-3000:]
        assert all(r["state"] == "success" for r in runs), runs
        # which task instance committed which version: their XComs (the operators' results)
        committed = {
            x["version"]: (r["run_id"], task_id)
            for r in runs
            for task_id, t in r["tasks"].items()
            if isinstance(x := t["xcom"], dict) and x.get("committed")
        }
        assert sorted(committed) == list(range(9))  # create, 7 upserts, Sunday's OPTIMIZE
        assert [committed[v][1] for v in (0, 1, 7, 8)] == ["create", "load", "load", "compact"]

        base = f"http://127.0.0.1:{d.port}"
        d.wait(lambda: _get(base + "/delta-view/api/tables")[0] == 200, "the plugin's app")
        plugins = json.loads(_get(base + "/api/v2/plugins")[1])["plugins"]
        view = next(p for p in plugins if p["name"] == "delta_view")
        assert view["external_views"][0]["href"] == "delta-view/"

        dom = _page(base + "/delta-view/")
        assert [s[1].get("data-uri") for s in dom.having("table") if s[0] == "section"] == [table]
        _check_histogram(dom, _sizes(table))
        assert "optimize" not in _advice(dom)
        assert re.search(r"Last OPTIMIZE: v8", dom.having("last-optimize")[0][2])
        # each version links to the task instance that committed it ...
        rows = {int(e[1]["data-version"]): e for e in dom.having("commit")}
        assert sorted(rows) == list(range(9))
        links, row = {}, None
        for tag, attrs, _ in dom.elements:  # the task instance link of each history row
            if tag == "tr":
                row = int(attrs["data-version"]) if "commit" in (attrs.get("class") or "").split() else None
            elif tag == "a" and "ti" in (attrs.get("class") or "").split() and row is not None:
                links[row] = attrs["href"]
        assert links == {
            v: f"/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/{task_id}"
            for v, (run_id, task_id) in committed.items()
        }
        # ... which the api-server resolves: its UI route, and the task instance in its REST API
        for v, href in links.items():
            assert _get(base + href)[0] == 200, href
            dag, run, task = re.fullmatch(r"/dags/([^/]+)/runs/([^/]+)/tasks/([^/]+)", href).groups()
            status, body = _get(f"{base}/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}")
            assert status == 200, body
            ti = json.loads(body)
            assert (ti["task_id"], ti["dag_run_id"], ti["state"]) == (committed[v][1], committed[v][0], "success")
            # and back: the task instance's "Delta table" link opens the view at the version it committed
            status, body = _get(f"{base}/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/links")
            assert json.loads(body)["extra_links"]["Delta table"] == _view(base, table, v), body
        # the asset page shows each event's extra, whose delta_view opens the view at the event's version
        asset_id = d.query("SELECT id FROM asset WHERE uri = ?", "file://" + table)[0][0]
        status, body = _get(f"{base}/api/v2/assets/events?asset_id={asset_id}&limit=50")
        extras = [e["extra"] for e in json.loads(body)["asset_events"]]
        # one event per commit: the daily CREATE IF NOT EXISTS that kept the table announces none
        assert sorted(x["version"] for x in extras) == sorted(committed)
        assert all(x["committed"] for x in extras)
        for x in extras:
            assert x["delta_view"] == _view(base, table, x["version"])
        assert _get(extras[0]["delta_view"])[0] == 200
        # Airflow's asset page: the newest event's extra, unfolded, shows delta_view as a link
        browser = _Browser(CHROMIUM, str(tmp_path / "chromium"))
        try:
            browser.send("Page.navigate", url=f"{base}/assets/{asset_id}")
            fold = "document.querySelector('.monaco-editor .codicon-folding-collapsed')"
            browser.wait_for(f"{fold} !== null")
            x, y = browser.eval(f"(r => [r.x + r.width / 2, r.y + r.height / 2])({fold}.getBoundingClientRect())")
            browser.click(x, y)
            linked = "[...document.querySelectorAll('.monaco-editor .detected-link')].map(e => e.textContent).join('')"
            browser.wait_for(f"{linked}.includes('/delta-view/')")
            assert browser.eval(linked) in {x["delta_view"] for x in extras}
        finally:
            browser.close()
        # each asset event links to its version's row
        events = {e[2]: e[1]["href"].lstrip("#") for e in dom.having("event-version")}
        assert sorted(events) == sorted(f"v{v}" for v in committed)
        # the events of runs that changed nothing say so
        shown = sorted(e[2] for e in dom.having("event-operation"))
        assert shown == sorted(x["operation"] + ("" if x["committed"] else " (no commit)") for x in extras)
        for label, target in events.items():
            assert any(e[1].get("id") == target and f"v{e[1].get('data-version')}" == label for e in dom.elements)

        shot = Path(SCREENSHOT).resolve() if SCREENSHOT else tmp_path / "delta-view.png"
        _chromium("--hide-scrollbars", "--window-size=1280,1400", f"--screenshot={shot}", base + "/delta-view/")
        assert shot.stat().st_size > 10_000

        # errors through the server: problem, cause and fix, with the status that says which
        api = base + "/delta-view/api/table?uri="
        status, body = _get(api + quote("relative/orders"))
        detail = json.loads(body)["detail"]
        assert status == 400 and "relative path" in detail and "Cause:" in detail and "Fix:" in detail, body
        status, body = _get(api + quote(str(lake / "missing")))
        assert status == 404 and "No Delta table at" in json.loads(body)["detail"], body
        started = time.monotonic()
        status, body = _get(api + quote("s3://lake/orders"))
        waited = time.monotonic() - started
        assert status == 504 and "s3://lake/orders" in json.loads(body)["detail"], body
        assert DEADLINE_SECONDS - 0.5 <= waited < DEADLINE_SECONDS + 10, waited  # bounded, even on a busy machine
        slow.close()  # the reads left behind fail now: the api-server stops without waiting for them

        # 400 small appends (made while Airflow started): the page advises OPTIMIZE, for the small files
        # deltalake lists
        appends.join(timeout=600)
        assert appends.result == 400, appends.result
        dom = _page(base + "/delta-view/?table=" + clicks)
        sizes = _sizes(clicks)
        _check_histogram(dom, sizes)
        small = sum(1 for s in sizes if s < SMALL_FILE_BYTES)
        assert small == 400
        assert _advice(dom)["optimize"] == f"{small} files under 8 MiB: run OPTIMIZE DeltaOptimizeOperator"
        assert len(dom.having("commit")) == 50  # the newest 50 commits, whatever the table's age

        DeltaTable(None, clicks).optimize()
        dom = _page(base + "/delta-view/?table=" + clicks)
        assert "optimize" not in _advice(dom)
        assert dom.having("file-count")[0][2].startswith("1 files, ")
        assert re.search(r"Last OPTIMIZE: v401", dom.having("last-optimize")[0][2])
    finally:
        slow.close()
        appends.stop = True
        d.stop()
