// Runs across jobs: failures and lost runs by default, filterable by status,
// time (relative to now), namespace, job and target kind; newest first.

import { api } from "../api.js";
import {
  clear, fmtMs, h, hashFor, resultText, runLink, statusBadge, table,
} from "../dom.js";
import { gateView } from "../gate.js";
import { replayRun, report, runAll } from "../bulk.js";
import { errorBox, FINAL, loaded } from "./common.js";

const STATUSES = ["failed", "lost", "retrying", "running", "claimed", "succeeded", "skipped"];
const WINDOWS = [["-15m", "last 15 min"], ["-1h", "last hour"], ["-6h", "last 6 h"],
                 ["-24h", "last 24 h"], ["-7d", "last 7 days"], ["", "all retained"]];
const KINDS = ["", "http", "sqs", "container"];
const PAGE = 100;

export function render(ctx) {
  const { root, params } = ctx;
  const chosen = new Set((params.get("status") || "failed,lost").split(",").filter(Boolean));
  const state = {
    since: params.has("since") ? params.get("since") : "-1h",
    namespace: params.get("namespace") || "", job: params.get("job") || "",
    kind: params.get("target_kind") || "", cursor: null, items: [],
  };
  const checks = h("span", { class: "checks", id: "run-statuses" }, STATUSES.map((s) =>
    h("label", null, h("input", { type: "checkbox", value: s, checked: chosen.has(s) }), " ", s)));
  const since = h("select", { id: "run-since", "aria-label": "since" }, WINDOWS.map(([v, t]) =>
    h("option", { value: v, text: t, selected: v === state.since })));
  const ns = h("input", { type: "text", id: "run-namespace", placeholder: "namespace",
                          value: state.namespace, size: 12, "aria-label": "namespace" });
  const kind = h("select", { id: "run-kind", "aria-label": "target kind" }, KINDS.map((k) =>
    h("option", { value: k, text: k || "any target", selected: k === state.kind })));
  const list = h("div", { id: "runs-list" });
  const replayAll = ctx.session.canWrite ? h("button", {
    class: "btn small", type: "button", id: "runs-replay", dataset: { action: "bulk-replay" },
    hidden: true, onclick: () => replayShown() }) : null;
  const more = h("div", { class: "pager" });
  root.append(h("section", { class: "card" },
    h("h1", { text: "Runs" }),
    h("div", { class: "row filters" }, checks),
    h("div", { class: "row filters" }, since, ns, kind,
      state.job ? h("span", { class: "muted", text: `job ${state.job}` }) : null, replayAll),
    list, more));

  let seq = 0;
  async function load(fresh) {
    const mine = ++seq;
    try {
      const page = await api("v1/runs", { params: {
        status: [...chosen].join(","), since: state.since, namespace: state.namespace,
        job: state.job, target_kind: state.kind, limit: PAGE,
        cursor: fresh ? null : state.cursor } });
      if (mine !== seq) return;
      state.items = fresh ? page.items : state.items.concat(page.items);
      state.cursor = page.next_cursor;
      clear(list).append(runsTable(state.items));
      showReplayAll();
      clear(more);
      if (state.cursor) {
        more.append(h("button", { class: "btn", type: "button", text: "Older runs",
                                  onclick: () => load(false) }));
      }
      loaded(root);
    } catch (err) {
      if (mine !== seq) return;
      clear(list).append(errorBox(err));
      loaded(root, false);
    }
  }

  // The failed and lost runs shown (all loaded pages), replayed in one go.
  const replayable = () => state.items.filter((r) => r.status === "failed" || r.status === "lost");
  function showReplayAll() {
    if (!replayAll) return;
    const n = replayable().length;
    replayAll.hidden = n === 0;
    replayAll.textContent = `Replay the ${n} failed or lost run(s) shown`;
  }

  async function replayShown() {
    const runs = replayable().filter((r) => FINAL.has(r.status));
    const jobs = new Set(runs.map((r) => r.job_id)).size;
    if (!(await ctx.confirm(`Replay ${runs.length} run(s)?`,
      `The failed and lost runs this filter shows, of ${jobs} job(s), each dispatched again.`,
      `Replay ${runs.length}`))) return;
    const done = await runAll(runs, replayRun);
    ctx.toast(report("Replayed", runs.length, done, (r) => r.job_name || r.id),
              done.failed.length > 0);
    load(true);
  }

  let debounce = null;
  function changed() {
    chosen.clear();
    for (const box of checks.querySelectorAll("input:checked")) chosen.add(box.value);
    state.since = since.value;
    state.namespace = ns.value.trim();
    state.kind = kind.value;
    history.replaceState(null, "", hashFor("runs", { status: [...chosen].join(","),
      since: state.since, namespace: state.namespace, job: state.job,
      target_kind: state.kind }));
    load(true);
  }
  checks.addEventListener("change", changed);
  since.addEventListener("change", changed);
  kind.addEventListener("change", changed);
  ns.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(changed, 300); });
  load(true);
  // Refresh the newest page only while no older page is shown.
  ctx.every(10000, () => { if (state.items.length <= PAGE) load(true); });
  return { dispose: () => clearTimeout(debounce) };
}

function runsTable(runs) {
  return table([
    { title: "Scheduled for", cell: (r) => runLink(r) },
    { title: "Job", clip: true, cell: (r) => h("a", { href: `#/jobs/${r.job_id}`,
                                          text: r.job_name || r.job_id }) },
    { title: "Namespace", cls: "opt narrow", clip: true, cell: (r) => r.namespace || "—" },
    { title: "Status", cell: (r) => statusBadge(r.status) },
    { title: "Attempt", cls: "num", cell: (r) => String(r.attempt) },
    { title: "Lateness", cls: "num opt", cell: (r) => fmtMs(r.lateness_ms) },
    { title: "Duration", cls: "num opt", cell: (r) => fmtMs(r.duration_ms) },
    { title: "Result", cls: "opt", cell: (r) => resultText(r.result) },
    { title: "Gate", cls: "opt narrow", clip: true, cell: (r) => gateView(r.gate) },
    { title: "Error", clip: true, cls: "wide", cell: (r) => r.error || "" },
  ], runs, "no runs match");
}
