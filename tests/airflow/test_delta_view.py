"""The Delta view end to end (issue 42): a real api-server (and dag-processor, which registers the
DAG's table asset) on SQLite serves the plugin, declared in the provider info; headless Chromium
(Debian's package) opens the page and the test reads what it shows for a table with a known history:
60 small appends by a DAG's task instances (the history links to them), the size histogram against
the files deltalake lists, an asset event linked to its version, the OPTIMIZE advice, gone after
OPTIMIZE. It takes a screenshot (the README's: DELTA_VIEW_SCREENSHOT=docs/images/delta-view.png)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest
from deployment import Deployment

from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.table_view import SIZE_BINS
from airflow_delta_provider_apps.engine.txn.transaction import commit_provenance

pytestmark = pytest.mark.airflow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: the README's screenshot is taken again with DELTA_VIEW_SCREENSHOT=docs/images/delta-view.png
SCREENSHOT = os.environ.get("DELTA_VIEW_SCREENSHOT")

DAG = """
from airflow.sdk import DAG
from airflow_delta_provider.operators.delta import DeltaDeleteOperator

with DAG("orders_pipeline", schedule=None):
    DeltaDeleteOperator(task_id="purge", table_uri={table!r}, predicate="id < 0", execution="local")
"""


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


def _page(url: str) -> _Dom:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dom = _Dom()
    dom.feed(out.stdout)
    return dom


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_page_shows_history_files_events_and_advice(tmp_path):
    import deltalake

    table = str(tmp_path / "lake" / "orders")
    create_table(table, schema="id BIGINT, note STRING", name="orders")
    for day in range(60):  # a pipeline's small appends, each by a task instance
        run_id = f"scheduled__2026-11-{day % 28 + 1:02d}T00:00:00+00:00"
        with commit_provenance({"dag_id": "orders_pipeline", "task_id": "load", "run_id": run_id, "map_index": -1}):
            append_arrow(table, pa.table({"id": [day, day + 100], "note": [f"day {day}"] * 2}))

    d = Deployment(
        tmp_path / "home",
        tmp_path,
        "orders_pipeline",
        DAG.format(table=table),
        # the provider info's plugins load when providers are discovered at start (the installed
        # airflow.plugins entry point loads it otherwise)
        AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
    )
    d.background = ["dag-processor"]  # registers the DAG's asset; nothing runs
    try:
        d.start()
        d.wait(lambda: d.query("SELECT count(*) FROM asset_active WHERE uri = ?", "file://" + table)[0][0], "asset")
        asset_id = d.query("SELECT id FROM asset WHERE uri = ?", "file://" + table)[0][0]
        con = sqlite3.connect(d.home / "airflow.db", timeout=60)
        with con:  # an asset event as the operators write it (its extra leads with the version)
            con.execute(
                "INSERT INTO asset_event (asset_id, extra, source_dag_id, source_task_id, source_run_id, "
                "source_map_index, timestamp) VALUES (?, ?, 'orders_pipeline', 'load', "
                "'scheduled__2026-11-05T00:00:00+00:00', -1, '2026-11-05 00:00:00.000000')",
                (asset_id, json.dumps({"version": 42, "operation": "WRITE", "rows_written": 2})),
            )
        con.close()
        base = f"http://127.0.0.1:{d.port}"
        d.wait(lambda: _up(base + "/delta-view/api/tables"), "the plugin's app")
        plugins = json.load(urllib.request.urlopen(base + "/api/v2/plugins"))["plugins"]
        view = next(p for p in plugins if p["name"] == "delta_view")
        assert view["external_views"][0]["href"] == "delta-view/"

        dom = _page(base + "/delta-view/")
        sections = dom.having("table")
        assert [s[1].get("data-uri") for s in sections if s[0] == "section"] == [table]
        sizes = pa.table(deltalake.DeltaTable(table).get_add_actions(flatten=True)).column("size_bytes").to_pylist()
        assert dom.having("file-count")[0][2].startswith(f"{len(sizes)} files, ")
        bars = [e[1] for e in dom.elements if e[0] == "rect"]
        lows = (0, *SIZE_BINS)
        assert [int(b["data-files"]) for b in bars] == [
            sum(1 for s in sizes if lows[i] <= s < (SIZE_BINS[i] if i < len(SIZE_BINS) else float("inf")))
            for i in range(len(lows))
        ]
        advice = [(e[1].get("data-kind"), e[2]) for e in dom.elements if e[0] == "li" and e[1].get("data-kind")]
        assert ("optimize", "60 files under 8 MiB: run OPTIMIZE DeltaOptimizeOperator") in advice
        # the history links each version to the task instance that wrote it
        rows = {int(e[1]["data-version"]): e for e in dom.having("commit")}
        assert sorted(rows)[-1] == 60 and len(rows) == 50
        links = [e[1]["href"] for e in dom.elements if e[0] == "a" and "ti" in (e[1].get("class") or "").split()]
        assert "/dags/orders_pipeline/runs/scheduled__2026-11-05T00%3A00%3A00%2B00%3A00/tasks/load" in links
        # the asset event links to its version's row
        (event,) = dom.having("event-version")
        target = event[1]["href"].lstrip("#")
        assert event[2] == "v42" and any(
            e[1].get("id") == target and e[1].get("data-version") == "42" for e in dom.elements
        )

        shot = Path(SCREENSHOT).resolve() if SCREENSHOT else tmp_path / "delta-view.png"
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1280,1500",
                "--virtual-time-budget=20000",
                f"--screenshot={shot}",
                base + "/delta-view/",
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )

        DeltaTable(None, table).optimize()
        dom = _page(base + "/delta-view/?table=" + table)
        kinds = [e[1].get("data-kind") for e in dom.elements if e[0] == "li" and e[1].get("data-kind")]
        assert "optimize" not in kinds
        assert dom.having("file-count")[0][2].startswith("1 files, ")
        assert re.search(r"Last OPTIMIZE: v61", dom.having("last-optimize")[0][2])
    finally:
        d.stop()


def _up(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=5).status == 200
    except OSError:
        return False
