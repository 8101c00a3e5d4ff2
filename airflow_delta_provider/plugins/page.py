"""The Delta view's page: one HTML document with its script and style inline (no build step, nothing
fetched from elsewhere). It asks the plugin's JSON endpoints (relative URLs: it works under any
api-server base path) and draws the size histogram and the size over time as inline SVG.

One section per table: the deployment's Delta assets, and the tables named by ``?table=URI``
(repeatable) or added with the form (kept in the browser's local storage). ``?version=N`` marks that
version. Task instances link to Airflow's own pages (``/dags/<dag>/runs/<run>/tasks/<task>``)."""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Delta tables</title>
<style>
  body { font: 14px/1.45 system-ui, sans-serif; margin: 16px; color: #1a202c; }
  h1 { font-size: 20px; margin: 0 0 12px; }
  h2 { font-size: 17px; margin: 0; }
  h3 { font-size: 14px; margin: 14px 0 6px; }
  section.table { border: 1px solid #cbd5e0; border-radius: 6px; padding: 12px 14px; margin: 0 0 16px; }
  .meta { color: #4a5568; font-size: 13px; }
  .grid { display: flex; flex-wrap: wrap; gap: 24px; }
  .card { min-width: 260px; }
  table { border-collapse: collapse; font-size: 13px; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #edf2f7; vertical-align: top; }
  tr.marked td { background: #fefcbf; }
  ul.advice { margin: 6px 0; padding-left: 18px; }
  ul.advice li { color: #9c4221; }
  .ok { color: #276749; }
  .error { color: #c53030; }
  .note { color: #975a16; background: #fffff0; padding: 4px 8px; }
  code { font-size: 12px; }
  form { margin: 0 0 14px; }
  input[type=text] { width: 420px; }
</style>
</head>
<body>
<h1>Delta tables</h1>
<form id="add"><input type="text" id="uri" placeholder="Add a table by URI: s3://bucket/table or /path/to/table">
<button>Add</button></form>
<div id="tables"><p class="meta" id="loading">Loading…</p></div>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const marked = params.get("version");
// Airflow's UI root: this page is served at <root>/delta-view/
const root = location.pathname.replace(/\/delta-view(\/.*)?$/, "");
const MiB = 1 << 20;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}
function size(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}
function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "never"; }
function pct(x) { return (100 * x).toFixed(1) + "%"; }
function tiLink(a) {
  if (!a || !a.dag_id) return "";
  const label = a.dag_id + " / " + a.task_id + (a.run_id ? " / " + a.run_id : "");
  if (!a.run_id) return label;
  let href = root + "/dags/" + encodeURIComponent(a.dag_id) + "/runs/" + encodeURIComponent(a.run_id) +
    "/tasks/" + encodeURIComponent(a.task_id);
  if (a.map_index !== undefined && a.map_index !== null && a.map_index >= 0) href += "/mapped/" + a.map_index;
  return el("a", {href, target: "_top", class: "ti"}, label);
}
function api(path) {
  return fetch("api/" + path, {credentials: "same-origin"}).then(async r => {
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.detail || r.statusText);
    return body;
  });
}

function histogram(files) {
  const bins = files.histogram, w = 360, h = 120, bw = w / bins.length;
  const max = Math.max(1, ...bins.map(b => b.files));
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "histogram"); svg.setAttribute("width", w); svg.setAttribute("height", h + 30);
  bins.forEach((b, i) => {
    const bh = Math.round((h - 14) * b.files / max);
    const r = document.createElementNS(svg.namespaceURI, "rect");
    Object.entries({x: i * bw + 4, y: h - bh, width: bw - 8, height: bh, fill: b.to && b.to <= files.small_file_bytes ? "#dd6b20" : "#3182ce",
      "data-files": b.files, "data-from": b.from, "data-to": b.to ?? ""}).forEach(([k, v]) => r.setAttribute(k, v));
    svg.append(r);
    const n = document.createElementNS(svg.namespaceURI, "text");
    n.setAttribute("x", i * bw + bw / 2); n.setAttribute("y", h - bh - 3); n.setAttribute("text-anchor", "middle");
    n.setAttribute("font-size", "11"); n.textContent = b.files; svg.append(n);
    const t = document.createElementNS(svg.namespaceURI, "text");
    t.setAttribute("x", i * bw + bw / 2); t.setAttribute("y", h + 14); t.setAttribute("text-anchor", "middle");
    t.setAttribute("font-size", "10"); t.textContent = b.to ? "<" + size(b.to).replace(".0", "") : "≥" + size(b.from).replace(".0", "");
    svg.append(t);
  });
  return svg;
}

function sizeChart(points) {
  const w = 360, h = 120;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "size-over-time"); svg.setAttribute("width", w); svg.setAttribute("height", h + 20);
  if (points.length < 2) return svg;
  const max = Math.max(1, ...points.map(p => p.bytes));
  const v0 = points[0].version, v1 = points[points.length - 1].version;
  const xy = points.map(p => [8 + (w - 16) * (p.version - v0) / Math.max(1, v1 - v0), 6 + (h - 12) * (1 - p.bytes / max)]);
  const line = document.createElementNS(svg.namespaceURI, "polyline");
  line.setAttribute("points", xy.map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#3182ce"); line.setAttribute("stroke-width", "2");
  svg.append(line);
  const t = document.createElementNS(svg.namespaceURI, "text");
  t.setAttribute("x", 8); t.setAttribute("y", h + 16); t.setAttribute("font-size", "10");
  t.textContent = "v" + v0 + " … v" + v1 + ", max " + size(max);
  svg.append(t);
  return svg;
}

function render(section, v, events) {
  section.replaceChildren();
  section.append(el("h2", {}, v.name || v.table_uri));
  section.append(el("div", {class: "meta"}, v.table_uri + " · version " + v.version + " · " + when(v.timestamp) +
    " · protocol " + v.protocol.min_reader_version + "/" + v.protocol.min_writer_version +
    (v.features.length ? " · features: " + v.features.join(", ") : "") +
    (v.partition_columns.length ? " · partitioned by " + v.partition_columns.join(", ") : "")));

  for (const n of v.notes || []) section.append(el("p", {class: "note"}, n));

  section.append(el("h3", {}, "Advice"));
  const advice = el("ul", {class: "advice"});
  for (const a of v.advice) advice.append(el("li", {"data-kind": a.kind}, a.message + " ", el("code", {}, a.operator)));
  if (!v.advice.length) advice.append(el("li", {class: "ok"}, "Nothing to do"));
  section.append(advice);

  const f = v.files, d = v.deletion_vectors, m = v.maintenance;
  const grid = el("div", {class: "grid"});
  const files = el("div", {class: "card files"}, el("h3", {}, "Files"),
    el("div", {class: "file-count"}, f.count + " files, " + size(f.bytes)),
    el("div", {class: "small-share"}, f.small_files + " under " + size(f.small_file_bytes) + " (" + pct(f.small_share) + ")"),
    histogram(f));
  const health = el("div", {class: "card health"}, el("h3", {}, "Health"),
    el("div", {class: "dv-share"}, "Rows deleted by vectors: " + d.deleted_rows + " of " + d.rows + " (" + pct(d.share) + ")"),
    el("div", {class: "last-checkpoint"}, "Last checkpoint: " + (m.last_checkpoint ? "v" + m.last_checkpoint.version + ", " + when(m.last_checkpoint.timestamp) : "none") +
      " (" + m.commits_since_checkpoint + " commits since)"),
    el("div", {class: "last-optimize"}, "Last OPTIMIZE: " + (m.last_optimize ? "v" + m.last_optimize.version + ", " + when(m.last_optimize.timestamp) : "not in the last " + m.history_window.commits + " commits")),
    el("div", {class: "last-vacuum"}, "Last VACUUM: " + (m.last_vacuum ? "v" + m.last_vacuum.version + ", " + when(m.last_vacuum.timestamp) : "not in the last " + m.history_window.commits + " commits")));
  const chart = el("div", {class: "card"}, el("h3", {}, "Size over time"), sizeChart(v.size_over_time));
  grid.append(files, health, chart);
  section.append(grid);

  if (v.schema_changes.length) {
    section.append(el("h3", {}, "Schema changes"));
    const ul = el("ul", {class: "schema-changes"});
    for (const c of v.schema_changes) ul.append(el("li", {}, el("a", {href: "#" + anchor(v, c.version)}, "v" + c.version), " " + (c.change || "") + " " + (c.column || "") + (c.from || c.to ? " " + (c.from || "") + " → " + (c.to || "") : "")));
    section.append(ul);
  }

  section.append(el("h3", {}, "History (newest " + v.history.length + " commits)"));
  const hist = el("table", {class: "history"}, el("tr", {}, ...["Version", "Time", "Operation", "Rows", "Files +/-", "Task instance"].map(t => el("th", {}, t))));
  for (const c of v.history) {
    const rows = Object.entries(c.rows).map(([k, n]) => k + " " + n).join(", ");
    const tr = el("tr", {id: anchor(v, c.version), class: "commit" + (String(c.version) === marked ? " marked" : ""), "data-version": c.version},
      el("td", {}, "v" + c.version), el("td", {}, when(c.timestamp)), el("td", {class: "operation"}, c.operation || ""),
      el("td", {}, rows), el("td", {}, "+" + c.added_files + " / -" + c.removed_files), el("td", {class: "task-instance"}, tiLink(c.airflow)));
    hist.append(tr);
  }
  section.append(hist);

  if (events && events.length) {
    section.append(el("h3", {}, "Asset events"));
    const ev = el("table", {class: "events"});
    for (const e of events) {
      const target = e.version === null || e.version === undefined ? "" : el("a", {href: "#" + anchor(v, e.version), class: "event-version"}, "v" + e.version);
      ev.append(el("tr", {}, el("td", {}, (e.timestamp || "").replace("T", " ").slice(0, 19)), el("td", {}, target),
        el("td", {class: "event-operation"}, (e.operation || "") + (e.committed === false ? " (no commit)" : "")), el("td", {}, tiLink({dag_id: e.dag_id, task_id: e.task_id, run_id: e.run_id, map_index: e.map_index}))));
    }
    section.append(ev);
  }
}
function anchor(v, version) { return "t" + btoa(unescape(encodeURIComponent(v.table_uri))).replace(/[^A-Za-z0-9]/g, "") + "-v" + version; }

function load(uri, label) {
  const section = el("section", {class: "table", "data-uri": uri}, el("h2", {}, label || uri), el("p", {class: "meta"}, "Reading the log…"));
  document.getElementById("tables").append(section);
  Promise.all([api("table?uri=" + encodeURIComponent(uri)), api("events?uri=" + encodeURIComponent(uri)).catch(() => ({events: []}))])
    .then(([v, e]) => {
      render(section, v, e.events);
      if (marked) { const row = section.querySelector("tr.marked"); if (row) row.scrollIntoView(); }
    })
    .catch(err => section.replaceChildren(el("h2", {}, label || uri), el("p", {class: "error"}, String(err.message || err))));
}

const added = JSON.parse(localStorage.getItem("deltaViewTables") || "[]");
document.getElementById("add").addEventListener("submit", ev => {
  ev.preventDefault();
  const uri = document.getElementById("uri").value.trim();
  if (!uri) return;
  if (!added.includes(uri)) { added.push(uri); localStorage.setItem("deltaViewTables", JSON.stringify(added)); }
  load(uri);
});
const seen = new Set();
api("tables").then(({tables}) => {
  document.getElementById("loading").remove();
  const wanted = params.getAll("table");
  for (const t of tables) {
    if (wanted.length && !wanted.includes(t.table_uri) && !wanted.includes(t.asset_uri)) continue;
    seen.add(t.table_uri); load(t.table_uri, t.name !== t.asset_uri ? t.name : null);
  }
  for (const u of [...wanted, ...added]) if (!seen.has(u) && !tables.some(t => t.asset_uri === u)) { seen.add(u); load(u); }
  if (!document.querySelector("section.table")) document.getElementById("tables").append(el("p", {class: "meta"}, "No Delta table yet: add one by URI."));
}).catch(err => { document.getElementById("loading").replaceWith(el("p", {class: "error"}, String(err.message || err))); });
</script>
</body>
</html>
"""
