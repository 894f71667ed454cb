"""The web view's one page: the plan picture inline, and a small script that polls ``/api/progress``.

Everything it shows is drawn here, with no script, font or style sheet fetched from elsewhere:
the job graph is the server-drawn SVG (:mod:`slipstream.runtime.plan_svg`) whose operator boxes
the script annotates with live figures; throughput sparklines and the checkpoint chart are SVG
the script draws. After each update the script counts it in ``<body data-updates="N">``.
"""

from __future__ import annotations

from string import Template

PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>slipstream · $title</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2733; background: #f6f8fa; }
header { background: #14324a; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; }
header h1 { font-size: 18px; margin: 0; }
header .status { font-weight: 600; padding: 1px 8px; border-radius: 4px; background: #2c6e49; }
header .status.FAILED { background: #a4262c; } header .status.CANCELED { background: #8a6d1d; }
header .status.ended { background: #555; }
main { padding: 12px 20px; }
section { background: #fff; border: 1px solid #d8dee4; border-radius: 6px; margin-bottom: 14px; padding: 10px 14px; }
h2 { font-size: 15px; margin: 2px 0 8px; }
#graph { overflow-x: auto; }
svg#plan { width: 100%; height: auto; min-width: 1100px; }
svg#plan .operator rect { fill: #eef4fb; stroke: #3c6e99; stroke-width: 1.5; }
svg#plan .operator.sorted rect { fill: #fff5e0; stroke: #b7791f; }
svg#plan .operator.backpressured rect { stroke: #c53030; stroke-width: 3; }
svg#plan .operator.finished rect { fill: #eceff1; }
svg#plan .name { font-weight: 600; font-size: 13px; }
svg#plan .detail, svg#plan .badge { font-size: 11px; fill: #4a5968; }
svg#plan .badge { fill: #9c5f00; }
svg#plan .live { font-size: 11px; fill: #1f6f3f; font-family: ui-monospace, monospace; }
svg#plan .edge path { fill: none; stroke: #5b6b7b; stroke-width: 1.4; }
svg#plan .edge.blocking path { stroke-width: 4; stroke: #7a4b00; }
svg#plan .edge.feedback path { stroke-dasharray: 6 4; stroke: #6b3fa0; }
svg#plan .edge.chained path { stroke-dasharray: 2 3; }
svg#plan .edge-label { font-size: 9px; fill: #4a5968; }
svg#plan marker path { fill: #5b6b7b; }
svg#plan .scope rect { fill: #f3eefa; fill-opacity: 0.5; stroke: #6b3fa0; stroke-dasharray: 4 3; }
svg#plan .scope-label { font-size: 11px; fill: #6b3fa0; }
.legend span { margin-right: 16px; font-size: 12px; color: #4a5968; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: right; padding: 3px 8px; border-bottom: 1px solid #eef1f4; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
.bar { height: 16px; background: #e4e9ee; border-radius: 4px; overflow: hidden; width: 420px; display: inline-block;
       vertical-align: middle; }
.bar div { height: 100%; background: #3c8d5a; width: 0; }
.figures span { margin-right: 22px; }
svg.spark polyline { fill: none; stroke: #3c6e99; stroke-width: 1.5; }
svg#checkpoint-chart rect { fill: #3c6e99; }
.muted { color: #6a7784; }
</style>
</head>
<body data-updates="0">
<header><h1>$title</h1><span class="status" id="status">$status</span>
<span id="elapsed"></span><span class="muted">job $job_id</span></header>
<main>
<section id="graph"><h2>Job graph</h2>
<div class="legend"><span>thin: PIPELINED</span><span>thick: BLOCKING</span><span>dashed: FEEDBACK</span>
<span>dotted: chained in one task</span><span>orange: sorted backlog (FLIP-327)</span>
<span>purple boxes: loop scopes and iteration bodies</span><span>red outline: back-pressured</span></div>
$svg
</section>
<section id="backlog"><h2>Backlog</h2>
<div><span class="bar"><div id="backlog-bar"></div></span> <span id="backlog-fraction"></span></div>
<div class="figures"><span id="backlog-read"></span><span id="backlog-remaining"></span>
<span id="backlog-eta"></span><span id="switch"></span></div>
</section>
<section id="operators"><h2>Operators</h2>
<table><thead><tr><th>operator</th><th>p</th><th>phase</th><th>records in</th><th>records out</th>
<th>in/s</th><th>out/s</th><th>throughput</th><th>latency p50 / p99</th><th>watermark</th><th>back-pressured</th>
<th>spilled</th></tr></thead>
<tbody id="operator-rows"></tbody></table>
</section>
<section id="checkpoints"><h2>Checkpoints</h2>
<div id="checkpoint-summary"></div>
<svg id="checkpoint-chart" width="600" height="80"></svg>
<table><thead><tr><th>checkpoint</th><th>completed</th><th>duration</th><th>size</th></tr></thead>
<tbody id="checkpoint-rows"></tbody></table>
</section>
</main>
<script>
"use strict";
const REFRESH_MS = $refresh_ms;
const history = {};
let updates = 0;
const $$ = (id) => document.getElementById(id);
function num(x) { return x === null || x === undefined ? "" : Math.round(x).toLocaleString("en-US"); }
function bytes(b) {
  if (b === null || b === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + units[i];
}
function seconds(s) {
  if (s === null || s === undefined) return "";
  return s < 90 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}
function watermark(w) {
  if (w === null || w === undefined) return "";
  if (w >= 9.2e18) return "end of input";
  if (w > 1e11 && w < 1e14) return new Date(w).toISOString().replace("T", " ").replace(".000Z", "Z");
  return String(w);
}
function latency(l) {
  return l === null || l === undefined ? "" : l.p50.toFixed(1) + " / " + l.p99.toFixed(1) + " ms";
}
function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }
function sparkline(values) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", "120"); svg.setAttribute("height", "22");
  const top = Math.max(1, ...values);
  const points = values.map((v, i) => (i * 120 / Math.max(1, values.length - 1)).toFixed(1) + ","
                                       + (21 - 20 * v / top).toFixed(1)).join(" ");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points); svg.appendChild(line); return svg;
}
function showOperators(operators) {
  const rows = $$("operator-rows"); rows.textContent = "";
  for (const op of operators) {
    const series = history[op.uid] = (history[op.uid] || []).concat([op.records_out_per_second]).slice(-60);
    const tr = document.createElement("tr"); tr.dataset.uid = op.uid;
    const phase = op.backlog_phase ? op.backlog_phase + (op.batch_engine ? " (" + op.batch_engine + ")" : "")
                                   : (op.finished_subtasks === op.parallelism ? "finished" : "record by record");
    [op.name, op.parallelism, phase, num(op.records_in), num(op.records_out), num(op.records_in_per_second),
     num(op.records_out_per_second)].forEach((v) => tr.appendChild(cell(v)));
    const spark = cell(""); spark.appendChild(sparkline(series)); tr.appendChild(spark);
    const lat = cell(latency(op.latency)); lat.className = "latency"; tr.appendChild(lat);
    [watermark(op.watermark), op.back_pressured ? "yes" : "no", bytes(op.spilled_bytes)]
      .forEach((v) => tr.appendChild(cell(v)));
    rows.appendChild(tr);
    const box = document.querySelector('g.operator[data-uid="' + CSS.escape(op.uid) + '"]');
    if (box) {
      box.classList.toggle("backpressured", op.back_pressured);
      box.classList.toggle("finished", op.finished_subtasks === op.parallelism);
      const live = box.querySelector("text.live");
      live.textContent = num(op.records_out_per_second) + "/s out · " + num(op.records_out)
                         + (op.backlog_phase ? " · " + op.backlog_phase : "")
                         + (op.latency ? " · p99 " + op.latency.p99.toFixed(1) + " ms" : "");
    }
  }
}
function showBacklog(b) {
  $$("backlog-bar").style.width = ((b.fraction === null ? (b.active ? 0 : 1) : b.fraction) * 100).toFixed(1) + "%";
  $$("backlog-fraction").textContent = b.fraction === null ? (b.active ? "reading (total unknown)" : "done")
                                                          : (b.fraction * 100).toFixed(1) + " %";
  $$("backlog-read").textContent = "read " + num(b.records_read);
  $$("backlog-remaining").textContent = b.records_remaining === null ? "" : "remaining " + num(b.records_remaining);
  $$("backlog-eta").textContent = b.eta_seconds === null ? "" : "ETA " + seconds(b.eta_seconds);
  $$("switch").textContent = b.switched_after_seconds === null ? (b.active ? "not switched yet" : "")
                             : "switched to streaming after " + seconds(b.switched_after_seconds);
}
function showCheckpoints(p) {
  $$("checkpoint-summary").textContent = p.checkpoints_completed + " completed, " + p.checkpoints_failed
    + " failed, " + p.checkpoints_skipped + " skipped";
  const chart = $$("checkpoint-chart"); chart.textContent = "";
  const recent = p.checkpoints.slice(-60);
  const top = Math.max(1, ...recent.map((c) => c.duration_ms));
  recent.forEach((c, i) => {
    const bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const h = Math.max(1, 70 * c.duration_ms / top);
    bar.setAttribute("x", i * 10); bar.setAttribute("y", 75 - h); bar.setAttribute("width", 8);
    bar.setAttribute("height", h);
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = "checkpoint " + c.checkpoint_id + ": " + c.duration_ms.toFixed(1) + " ms";
    bar.appendChild(title); chart.appendChild(bar);
  });
  const rows = $$("checkpoint-rows"); rows.textContent = "";
  for (const c of p.checkpoints.slice(-10).reverse()) {
    const tr = document.createElement("tr");
    [c.checkpoint_id, new Date(c.completed_at * 1000).toISOString().substring(11, 19) + "Z",
     c.duration_ms.toFixed(1) + " ms", bytes(c.size_bytes)].forEach((v) => tr.appendChild(cell(v)));
    rows.appendChild(tr);
  }
}
async function refresh() {
  try {
    const response = await fetch("api/progress", {cache: "no-store"});
    const p = await response.json();
    $$("status").textContent = p.status; $$("status").className = "status " + p.status;
    $$("elapsed").textContent = "running for " + seconds(p.elapsed_seconds);
    showOperators(p.operators); showBacklog(p.backlog); showCheckpoints(p);
    document.body.dataset.updates = String(++updates);
  } catch (error) {
    $$("status").textContent = "ended (the job's process no longer answers)"; $$("status").className = "status ended";
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
""")
"""The page; ``$$`` in the script is ``$`` (the Template's escape)."""


__all__ = ["PAGE"]
