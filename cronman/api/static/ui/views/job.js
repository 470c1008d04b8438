// One job: its definition (secrets come redacted from the API), next fire
// times (and which an exclusion calendar skips), its upstream and downstream
// jobs, its runs (and why each waited or was skipped), and the actions
// pause / resume / trigger / replay / delete.

import { api } from "../api.js";
import {
  clear, fmtMs, h, resultText, runLink, scheduleText, statusBadge, table, timeCell,
} from "../dom.js";
import { gateView } from "../gate.js";
import { graphSvg, loadGraph } from "../graph.js";
import { strip, summary, summaryText } from "../history.js";
import { actionButton, errorBox, FINAL, loaded } from "./common.js";

const RUNS_PAGE = 50;
const HISTORY_CELLS = 50;
const GRAPH_EVERY_MS = 15000;

export function render(ctx) {
  const { root, path } = ctx;
  const jobId = path[1];
  const head = h("div");
  const facts = h("div");
  const deps = h("div", { id: "job-dependencies" });
  const runs = h("div", { id: "job-runs" });
  const more = h("div", { class: "pager" });
  const history = h("div", { class: "history", id: "job-history" });
  const graph = h("section", { class: "card", id: "job-graph", hidden: true });
  // Runs first; the definition folded below.
  root.append(h("section", { class: "card" }, head, history),
    h("section", { class: "card" }, h("h2", { text: "Runs" }), runs, more),
    graph,
    h("div", { class: "grid2" },
      h("section", { class: "card" }, h("h2", { text: "Next fire times (UTC)" }), facts,
        h("h2", { text: "Dependencies" }), deps),
      h("section", { class: "card" }, h("details", { id: "job-definition-fold" },
        h("summary", { text: "Definition" }),
        h("pre", { class: "json", id: "job-definition" })))));

  let job = null;
  let cursor = null;
  let shownRuns = [];

  async function loadJob() {
    try {
      const [j, next, edges] = await Promise.all([
        api(`v1/jobs/${encodeURIComponent(jobId)}`),
        api(`v1/jobs/${encodeURIComponent(jobId)}/next`, { params: { count: 5 } }),
        api(`v1/jobs/${encodeURIComponent(jobId)}/dependencies`),
      ]);
      job = j;
      renderHead();
      const skipped = new Map((next.excluded || []).map((e) => [e.fire_time, e.calendar]));
      clear(facts).append(next.fire_times.length
        ? h("ol", { id: "next-fires" }, next.fire_times.map((t) => h("li", null, timeCell(t),
          skipped.has(t) ? h("span", { class: "muted", text: ` skipped: calendar ${skipped.get(t)}` })
            : null)))
        : h("p", { class: "muted", text: job.paused ? "paused: no fire"
          : job.schedule.kind === "after" ? "fired by its upstream jobs" : "no more fires" }));
      clear(deps).append(dependencyList(job, edges));
      drawGraph(edges);
      const definition = { ...job };
      delete definition.last_run;
      root.querySelector("#job-definition").textContent = JSON.stringify(definition, null, 2);
      return true;
    } catch (err) {
      clear(head).append(h("h1", { text: "Job" }), errorBox(err));
      loaded(root, false);
      return false;
    }
  }

  let graphAt = 0;
  async function drawGraph(edges) {
    const linked = (edges.upstream || []).length || (edges.downstream || []).length;
    graph.hidden = !linked;
    if (!linked || Date.now() - graphAt < GRAPH_EVERY_MS) return;
    graphAt = Date.now();
    try {
      const svg = graphSvg(await loadGraph(job), job.id);
      clear(graph).append(h("h2", { text: "Job graph" }), h("div", { class: "graph-wrap" }, svg),
        h("p", { class: "graph-legend", text: "upstream left, downstream right; solid: depends_on, " +
          "dashed: after; the dot is each job's last run" }));
    } catch (err) {
      clear(graph).append(h("h2", { text: "Job graph" }), errorBox(err));
    }
  }

  const reload = async () => { if (await loadJob()) await loadRuns(true); };

  function renderHead() {
    const id = encodeURIComponent(job.id);
    clear(head).append(
      h("h1", null, h("span", { class: "name", title: job.name, text: job.name }), statusBadge(job.state || (job.paused ? "paused" : "active"))),
      h("dl", { class: "facts" },
        h("dt", { text: "Namespace" }), h("dd", { text: job.namespace }),
        h("dt", { text: "Id" }), h("dd", { text: job.id }),
        h("dt", { text: "Schedule" }), h("dd", { text: scheduleText(job.schedule) }),
        h("dt", { text: "Target" }), h("dd", { text: targetText(job.target) }),
        h("dt", { text: "Next fire" }), h("dd", null, timeCell(job.next_fire_at)),
        h("dt", { text: "Version" }), h("dd", { text: String(job.version) }),
        policyFacts(job)),
      h("div", { class: "actions", id: "job-actions" },
        job.paused
          ? actionButton(ctx, "Resume", {
            title: `Resume ${job.name}?`, text: "It fires again on its schedule.",
            action: () => api(`v1/jobs/${id}/resume`, { method: "POST" }),
            done: "Resumed", after: reload })
          : actionButton(ctx, "Pause", {
            title: `Pause ${job.name}?`, text: "It stops firing until resumed.",
            action: () => api(`v1/jobs/${id}/pause`, { method: "POST" }),
            done: "Paused", after: reload }),
        actionButton(ctx, "Trigger", {
          title: `Trigger ${job.name} now?`, text: "It fires once now, outside its schedule.",
          action: () => api(`v1/jobs/${id}/trigger`, { method: "POST" }),
          done: (run) => `Triggered: run ${run.id}`, after: reload }),
        ctx.session.canWrite ? h("a", { class: "btn", id: "job-edit", href: `#/jobs/${id}/edit`,
                                        text: "Edit" }) : null,
        actionButton(ctx, "Delete", {
          title: `Delete ${job.name}?`, danger: true, okLabel: "Delete",
          text: "The job stops firing and is removed. Its run history stays until it expires.",
          action: () => api(`v1/jobs/${id}`, { method: "DELETE" }),
          done: `Deleted ${job.name}`, after: () => ctx.navigate("#/jobs") })));
  }

  // What the job's policies keep: why it paused, its note, runs left, the buffer.
  function policyFacts(j) {
    const facts = [];
    const fact = (label, text) => facts.push(h("dt", { text: label }), h("dd", { text }));
    if (j.pause_reason) fact("Paused because", j.pause_reason);
    if (j.pause_note) fact("Note", j.pause_note);
    if (j.max_runs !== null && j.max_runs !== undefined) {
      fact("Runs left", `${j.runs_left} of ${j.max_runs}`);
    }
    if (j.pause_after_failures) {
      fact("Failed in a row", `${j.failure_streak} (pauses at ${j.pause_after_failures})`);
    }
    if (j.buffered) fact("Buffered fires", String(j.buffered));
    return facts;
  }

  async function loadRuns(fresh) {
    try {
      const page = await api(`v1/jobs/${encodeURIComponent(jobId)}/runs`, {
        params: { limit: RUNS_PAGE, cursor: fresh ? null : cursor } });
      shownRuns = fresh ? page.items : shownRuns.concat(page.items);
      cursor = page.next_cursor;
      clear(runs).append(runsTable(ctx, shownRuns, reload));
      clear(history).append(strip(shownRuns, HISTORY_CELLS),
        h("span", { class: "muted", id: "job-history-summary",
                    text: summaryText(summary(shownRuns)) }));
      clear(more);
      if (cursor) {
        more.append(h("button", { class: "btn", type: "button", text: "Older runs",
                                  onclick: () => loadRuns(false) }));
      }
      loaded(root);
    } catch (err) {
      clear(runs).append(errorBox(err));
      loaded(root, false);
    }
  }

  (async () => {
    if (await loadJob()) await loadRuns(true);
  })();
  ctx.every(5000, () => { if (job) { loadJob(); loadRuns(true); } });
  return null;
}

function targetText(target) {
  if (!target) return "—";
  if (target.kind === "http") return `${target.method || "POST"} ${target.url}`;
  if (target.kind === "sqs") return `SQS ${target.queue_url}`;
  if (target.kind === "container") return `container ${target.image}`;
  return target.kind;
}

function edgeItem(e, job) {
  const label = e.name ? `${e.namespace}/${e.name}` : e.job_id;
  const rule = e.kind === "after" ? null : (job.depends_on || []).find((d) => d.job === e.job_id);
  return h("li", null,
    e.deleted ? h("s", { text: label }) : h("a", { href: `#/jobs/${e.job_id}`, text: label }),
    e.kind === "after" ? " (after)" : " (depends_on)",
    rule ? ` within ${rule.within} s, waits up to ${rule.wait} s` : "",
    e.deleted ? " — deleted" : "");
}

function dependencyList(job, edges) {
  const up = edges.upstream || [];
  const down = edges.downstream || [];
  const cals = job.calendars || [];
  if (!up.length && !down.length && !cals.length) {
    return h("p", { class: "muted", text: "no upstream or downstream jobs, no calendars" });
  }
  return h("dl", { class: "facts" },
    h("dt", { text: "Upstream" }), h("dd", null, up.length
      ? h("ul", { id: "job-upstream" }, up.map((e) => edgeItem(e, job))) : "—"),
    h("dt", { text: "Downstream" }), h("dd", null, down.length
      ? h("ul", { id: "job-downstream" }, down.map((e) => edgeItem(e, job))) : "—"),
    h("dt", { text: "Calendars" }), h("dd", { text: cals.length ? cals.join(", ") : "—" }));
}

function runsTable(ctx, runs, afterAction) {
  return table([
    { title: "Scheduled for", cell: (r) => runLink(r) },
    { title: "Status", cell: (r) => statusBadge(r.status) },
    { title: "Attempt", cls: "num", cell: (r) => String(r.attempt) },
    { title: "Lateness", cls: "num", cell: (r) => fmtMs(r.lateness_ms) },
    { title: "Duration", cls: "num", cell: (r) => fmtMs(r.duration_ms) },
    { title: "Origin", cls: "opt", cell: (r) => r.origin },
    { title: "Node", cls: "opt narrow", clip: true, cell: (r) => r.node_id || "—" },
    { title: "Result", cell: (r) => resultText(r.result) },
    { title: "Gate", cls: "narrow", clip: true, cell: (r) => gateView(r.gate) },
    { title: "Error", clip: true, cls: "wide", cell: (r) => r.error || "" },
    { title: "", cell: (r) => FINAL.has(r.status) ? actionButton(ctx, "Replay", {
      title: "Replay this run?", text: `Dispatch run ${r.id} again, as a new attempt.`,
      action: () => api(`v1/runs/${encodeURIComponent(r.id)}/replay`, { method: "POST" }),
      done: "Replay requested", after: afterAction, small: true }) : "" },
  ], runs, "no runs yet");
}
