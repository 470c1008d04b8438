// The job graph: a job's upstream and downstream jobs (``depends_on`` and
// ``after`` edges, a few levels each way), drawn as SVG in layers (upstream
// left, downstream right), each node coloured by its last run's status and
// linking to its job.

import { api } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const LEVELS = 3;  // levels walked each way
const MOST = 40;   // nodes at most
const NODE_W = 180;
const NODE_H = 34;
const GAP_X = 60;
const GAP_Y = 14;

function s(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/** {nodes: Map id -> {id, layer, job|null, edge}, edges: [{from, to, kind}]} around ``jobId``. */
export async function loadGraph(job) {
  const nodes = new Map([[job.id, { id: job.id, layer: 0, job }]]);
  const edges = [];
  const seen = new Set();
  async function walk(id, layer, way) {
    if (Math.abs(layer) >= LEVELS || nodes.size >= MOST) return;
    const deps = await api(`v1/jobs/${encodeURIComponent(id)}/dependencies`);
    const next = [];
    for (const e of way < 0 ? deps.upstream || [] : deps.downstream || []) {
      const from = way < 0 ? e.job_id : id;
      const to = way < 0 ? id : e.job_id;
      const key = `${from}>${to}`;
      if (!seen.has(key)) {
        seen.add(key);
        edges.push({ from, to, kind: e.kind });
      }
      if (!nodes.has(e.job_id) && nodes.size < MOST) {
        nodes.set(e.job_id, { id: e.job_id, layer: layer + way, edge: e, job: null });
        if (!e.deleted && e.name) next.push(e.job_id);
      }
    }
    await Promise.all(next.map((n) => walk(n, layer + way, way)));
  }
  await Promise.all([walk(job.id, 0, -1), walk(job.id, 0, 1)]);
  // Each node's last run (GET v1/jobs/{id} carries it).
  await Promise.all([...nodes.values()].filter((n) => !n.job && n.edge && n.edge.name && !n.edge.deleted)
    .map(async (n) => { n.job = await api(`v1/jobs/${encodeURIComponent(n.id)}`).catch(() => null); }));
  return { nodes, edges };
}

const label = (n) => n.job ? `${n.job.namespace}/${n.job.name}`
  : n.edge && n.edge.name ? `${n.edge.namespace}/${n.edge.name}` : "(not visible to this token)";

function fit(text, most = 24) {
  return text.length > most ? text.slice(0, most - 1) + "…" : text;
}

/** The graph as an SVG element (scaled to its box's width). */
export function graphSvg({ nodes, edges }, focusId) {
  const layers = new Map();
  for (const n of nodes.values()) {
    if (!layers.has(n.layer)) layers.set(n.layer, []);
    layers.get(n.layer).push(n);
  }
  const order = [...layers.keys()].sort((a, b) => a - b);
  const tallest = Math.max(...[...layers.values()].map((l) => l.length));
  const width = order.length * NODE_W + (order.length - 1) * GAP_X + 20;
  const height = tallest * NODE_H + (tallest - 1) * GAP_Y + 20;
  const at = new Map();
  order.forEach((layer, col) => {
    const list = layers.get(layer).sort((a, b) => label(a).localeCompare(label(b)));
    const top = (height - (list.length * NODE_H + (list.length - 1) * GAP_Y)) / 2;
    list.forEach((n, row) => at.set(n.id, { x: 10 + col * (NODE_W + GAP_X),
                                            y: top + row * (NODE_H + GAP_Y) }));
  });
  const svg = s("svg", { class: "graph", id: "job-graph-svg", viewBox: `0 0 ${width} ${height}`,
                         width, height, role: "img",
                         "aria-label": "upstream and downstream jobs" });
  svg.append(s("defs", {}), s("title", {}, "job graph"));
  const marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                               markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.append(s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }));
  svg.firstChild.append(marker);
  for (const e of edges) {
    const a = at.get(e.from);
    const b = at.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    const path = s("path", { class: "edge " + e.kind, "marker-end": "url(#arrow)",
                             d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
                             "data-from": e.from, "data-to": e.to });
    path.append(s("title", {}, e.kind === "after" ? "fired after" : "depends on"));
    svg.append(path);
  }
  for (const n of nodes.values()) {
    const { x, y } = at.get(n.id);
    const status = n.job ? (n.job.last_run ? n.job.last_run.status : "never") : "unknown";
    const g = s("a", { href: `#/jobs/${n.id}`, class: "node " + status +
                       (n.id === focusId ? " focus" : ""), "data-job": n.id,
                       "data-status": status });
    g.append(s("title", {}, `${label(n)} — last run: ${status}`));
    g.append(s("rect", { x, y, width: NODE_W, height: NODE_H, rx: 5 }));
    g.append(s("circle", { cx: x + 12, cy: y + NODE_H / 2, r: 5, class: "dot" }));
    g.append(s("text", { x: x + 24, y: y + 14 }, fit(label(n))));
    g.append(s("text", { x: x + 24, y: y + 27, class: "sub" }, status));
    svg.append(g);
  }
  return svg;
}
