// A job's history at a glance: its last runs as a strip of coloured cells
// (oldest left, each linking to its run), and their success rate and
// duration percentiles.

import { fmtMs, fmtTime, h } from "./dom.js";

const ENDED = new Set(["succeeded", "failed", "lost"]);

/** The strip of ``runs`` (newest first, as the API lists them), at most ``count``. */
export function strip(runs, count = 20) {
  const shown = runs.slice(0, count).reverse();
  if (!shown.length) return h("span", { class: "strip empty muted", text: "no runs" });
  return h("span", { class: "strip", role: "list",
                     "aria-label": `last ${shown.length} run(s), oldest first` },
    shown.map((r) => h("a", {
      class: "cell " + r.status, role: "listitem", href: `#/runs/${r.id}`,
      title: `${r.status} · ${fmtTime(r.scheduled_for)}` +
        (r.duration_ms !== null && r.duration_ms !== undefined ? ` · ${fmtMs(r.duration_ms)}` : ""),
      dataset: { status: r.status } })));
}

/** The nearest-rank percentile ``p`` (0..100) of sorted ``values``. */
export function percentile(sorted, p) {
  if (!sorted.length) return null;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1];
}

/** Success rate over the runs that ended (skipped ones aside) and duration p50/p95. */
export function summary(runs) {
  const ended = runs.filter((r) => ENDED.has(r.status));
  const ok = ended.filter((r) => r.status === "succeeded").length;
  const durations = runs.map((r) => r.duration_ms).filter((d) => d !== null && d !== undefined)
    .sort((a, b) => a - b);
  return { ended: ended.length, succeeded: ok,
           rate: ended.length ? ok / ended.length : null,
           p50: percentile(durations, 50), p95: percentile(durations, 95) };
}

/** "95 % of 40 succeeded · duration p50 12 ms, p95 80 ms". */
export function summaryText(s) {
  if (!s.ended) return "no finished run yet";
  const rate = `${Math.round((s.rate * 1000)) / 10} % of ${s.ended} succeeded`;
  return s.p50 === null ? rate : `${rate} · duration p50 ${fmtMs(s.p50)}, p95 ${fmtMs(s.p95)}`;
}
