// Plots of the run history: fires per second, lateness p50/p99 and failures,
// over the last hour (refreshed every 10 s) and the last 24 hours (every minute).

import { api } from "../api.js";
import { clear, h } from "../dom.js";
import { chart, firstData } from "../charts.js";
import { errorBox, loaded } from "./common.js";

const WINDOWS = [
  { id: "1h", title: "Last hour", since: "-1h", step: 30, refresh: 10000 },
  { id: "24h", title: "Last 24 hours", since: "-24h", step: 600, refresh: 60000 },
];

export function render(ctx) {
  const { root, params } = ctx;
  const ns = h("input", { type: "text", id: "plot-namespace", placeholder: "all namespaces",
                          value: params.get("namespace") || "", size: 14,
                          "aria-label": "namespace" });
  root.append(h("section", { class: "card" }, h("h1", { text: "Plots" }),
    h("div", { class: "row filters" }, h("label", { for: "plot-namespace", text: "Namespace" }), ns,
      h("span", { class: "muted", text: "times in UTC; from the run history" }))));
  const panels = WINDOWS.map((w) => {
    const body = h("div", { class: "charts", id: `plots-${w.id}` });
    const note = h("p", { class: "muted" });
    root.append(h("section", { class: "card" }, h("h2", { text: w.title }), note, body));
    return { ...w, body, note, data: null };
  });

  async function load(panel) {
    try {
      panel.data = await api("v1/stats/runs", { params: {
        since: panel.since, step: panel.step, namespace: ns.value.trim() } });
      draw(panel);
      loaded(root);
    } catch (err) {
      clear(panel.body).append(errorBox(err));
      loaded(root, false);
    }
  }

  function draw(panel) {
    const data = panel.data;
    if (!data) return;
    const step = data.step_seconds * 1000;
    const x1 = Date.parse(data.until);
    // Zoomed to the data: from a step before the first one holding any.
    const since = Date.parse(data.since);
    const first = firstData(data.buckets, ["fires", "failures", "lateness_p50_ms"]);
    const x0 = first === null ? since : Math.max(since, first - step);
    const pts = (key) => data.buckets.map((b) => [Date.parse(b.t), b[key]])
      .filter(([t]) => t >= x0);
    const total = data.buckets.reduce((n, b) => n + b.fires, 0);
    const failed = data.buckets.reduce((n, b) => n + b.failures, 0);
    panel.note.textContent = `${total} fires, ${failed} failures; ${data.step_seconds} s per step` +
      (x0 > since ? `; from ${new Date(x0).toISOString().slice(11, 16)} UTC, the first data` : "") +
      ". Lateness counts scheduled fires only (triggered, replayed, backfilled runs are left out).";
    const width = panel.body.clientWidth > 700 ? (panel.body.clientWidth - 28) / 3
      : panel.body.clientWidth || 600;
    clear(panel.body).append(
      figure("Fires per second", chart({ series: [{ name: "fires/s", cls: "fires",
        points: pts("fires_per_s") }], x0, x1, step, width, title: "fires per second" })),
      figure("Lateness p50 / p99", chart({ series: [
        { name: "p50", cls: "p50", points: pts("lateness_p50_ms") },
        { name: "p99", cls: "p99", points: pts("lateness_p99_ms") }],
        x0, x1, step, unit: "ms", width, title: "lateness" }),
        h("div", { class: "legend" }, h("span", null, h("i", { class: "p50" }), "p50"),
          h("span", null, h("i", { class: "p99" }), "p99"))),
      figure("Failures", chart({ series: [{ name: "failures", kind: "bar",
        points: pts("failures") }], x0, x1, step, width, title: "failures" })));
  }

  let debounce = null;
  ns.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => panels.forEach(load), 400);
  });
  for (const panel of panels) {
    load(panel);
    ctx.every(panel.refresh, () => load(panel));
  }
  return {
    dispose: () => clearTimeout(debounce),
    resized: () => panels.forEach(draw),
  };
}

/** A chart with its caption, and a line naming the values of the step under the pointer. */
function figure(title, svg, extra) {
  const readout = h("div", { class: "readout muted", text: "\u00a0" });
  const show = (event) => {
    const band = event.target;
    if (band.classList && band.classList.contains("hover")) readout.textContent = band.dataset.values;
  };
  svg.addEventListener("mouseover", show);
  svg.addEventListener("click", show);
  return h("figure", { class: "chart" }, h("figcaption", { text: title }), svg, extra || null,
    readout);
}
