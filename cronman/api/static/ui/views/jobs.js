// Jobs: a searchable, paginated list (name prefix, namespace, label, paused),
// in (namespace, name) order, with each job's last run, next fire and the
// strip of its recent runs; bulk actions on the selected jobs or on every job
// the filter matches (for a token that may write).

import { api } from "../api.js";
import { h, hashFor, scheduleText, statusBadge, table, timeCell, clear } from "../dom.js";
import { failedRuns, JOB_ACTIONS, jobsMatching, replayRun, report, runAll } from "../bulk.js";
import { strip } from "../history.js";
import { errorBox, loaded } from "./common.js";

const PAGE = 50;
const STRIP_CELLS = 20;
const RECENT_SINCE = "-7d";
const RECENT_LIMIT = 1000;
const REPLAY_SINCE = "-1h";

export function render(ctx) {
  const { root, params } = ctx;
  const state = {
    q: params.get("q") || "", namespace: params.get("namespace") || "",
    label: params.get("label") || "", paused: params.get("paused") || "",
    cursors: [null], page: 0,
  };
  const search = h("input", { type: "search", id: "job-search", value: state.q,
                              placeholder: "name starts with…", "aria-label": "name prefix" });
  const ns = h("input", { type: "text", id: "job-namespace", value: state.namespace,
                          placeholder: "namespace", "aria-label": "namespace", size: 12 });
  const label = h("input", { type: "text", id: "job-label", value: state.label,
                             placeholder: "label key:value", "aria-label": "label", size: 14 });
  const paused = h("select", { id: "job-paused", "aria-label": "paused" },
    h("option", { value: "", text: "paused or not" }),
    h("option", { value: "false", text: "active only", selected: state.paused === "false" }),
    h("option", { value: "true", text: "paused only", selected: state.paused === "true" }));
  const list = h("div", { id: "jobs-list" });
  const pager = h("div", { class: "pager" });
  const selected = new Map();  // job id -> job, kept across pages and refreshes
  let shown = [];
  const select = ctx.session.canWrite ? { selected, toggled: () => showCount() } : null;
  const bulk = ctx.session.canWrite ? bulkBar() : null;
  root.append(h("section", { class: "card" },
    h("h1", null, "Jobs", ctx.session.canWrite
      ? h("a", { class: "btn primary small", id: "job-new", href: "#/new", text: "New job" }) : null),
    h("div", { class: "row filters" }, search, ns, label, paused),
    bulk ? bulk.bar : null,
    list, pager));

  const filterParams = () => ({ sort: "name", name_prefix: state.q, namespace: state.namespace,
    paused: state.paused, label: state.label.includes(":") ? state.label : "" });

  function showCount() {
    if (!bulk) return;
    bulk.count.textContent = `${selected.size} selected`;
    bulk.page.checked = shown.length > 0 && shown.every((j) => selected.has(j.id));
  }

  function bulkBar() {
    const count = h("span", { id: "bulk-count", class: "muted", text: "0 selected" });
    const page = h("input", { type: "checkbox", id: "bulk-page" });
    const scope = h("select", { id: "bulk-scope", "aria-label": "which jobs" },
      h("option", { value: "selected", text: "the selected jobs" }),
      h("option", { value: "filter", text: "every job the filter matches" }));
    page.addEventListener("change", () => {
      for (const j of shown) {
        if (page.checked) selected.set(j.id, j);
        else selected.delete(j.id);
      }
      for (const box of list.querySelectorAll("input.pick")) box.checked = selected.has(box.value);
      showCount();
    });
    const buttons = [...Object.entries(JOB_ACTIONS).filter(([k]) => k !== "delete"),
      ["replay", { label: "Replay failed runs" }], ["delete", JOB_ACTIONS.delete]]
      .map(([key, a]) => h("button", { class: "btn small" + (a.danger ? " danger" : ""),
        type: "button", text: a.label, dataset: { action: `bulk-${key}` },
        onclick: () => act(key, scope.value) }));
    const bar = h("div", { class: "row bulk", id: "bulk" },
      h("label", { class: "checks" }, page, " this page"), count,
      h("span", { class: "muted", text: "· act on" }), scope, buttons);
    return { bar, count, page, scope };
  }

  async function act(key, scope) {
    let jobs;
    try {
      jobs = scope === "filter" ? await jobsMatching(filterParams()) : [...selected.values()];
    } catch (err) {
      ctx.toast(`Could not list the jobs: ${err.message}`, true);
      return;
    }
    if (!jobs.length) {
      ctx.toast("No job selected", true);
      return;
    }
    const names = jobs.slice(0, 5).map((j) => `${j.namespace}/${j.name}`).join(", ") +
      (jobs.length > 5 ? `, and ${jobs.length - 5} more` : "");
    const jobName = (j) => j.name;
    if (key === "replay") {
      const runs = await failedRuns(jobs.map((j) => j.id), REPLAY_SINCE).catch((err) => {
        ctx.toast(`Could not find the failed runs: ${err.message}`, true);
        return null;
      });
      if (!runs) return;
      if (!runs.length) {
        ctx.toast(`No failed or lost run in the last hour among ${jobs.length} job(s)`);
        return;
      }
      if (!(await ctx.confirm(`Replay ${runs.length} failed run(s)?`,
        `The failed and lost runs of the last hour of ${jobs.length} job(s): ${names}.`,
        `Replay ${runs.length}`))) return;
      const done = await runAll(runs, replayRun);
      ctx.toast(report("Replayed", runs.length, done, (r) => r.job_name || r.id), done.failed.length > 0);
    } else {
      const a = JOB_ACTIONS[key];
      if (!(await ctx.confirm(`${a.label} ${jobs.length} job(s)?`, `${names}.` +
        (key === "delete" ? " They stop firing and are removed; their history stays until it expires." : ""),
        `${a.label} ${jobs.length}`, Boolean(a.danger)))) return;
      const done = await runAll(jobs, a.call);
      ctx.toast(report(a.verb, jobs.length, done, jobName), done.failed.length > 0);
      if (key === "delete") for (const j of jobs) selected.delete(j.id);
    }
    showCount();
    load();
  }

  let seq = 0;
  let recent = new Map();
  // The strips: one search for the shown jobs' runs of the last week; a job
  // that has runs but got too few there (none that recent, or crowded out of
  // a full answer by busier jobs) is asked for its own last runs.
  async function loadRecent(jobs, mine) {
    if (!jobs.length) return;
    try {
      const runs = await api("v1/runs", { params: { job: jobs.map((j) => j.id).join(","),
        since: RECENT_SINCE, limit: RECENT_LIMIT } });
      if (mine !== seq) return;
      const found = new Map();
      for (const r of runs.items) {
        if (!found.has(r.job_id)) found.set(r.job_id, []);
        found.get(r.job_id).push(r);
      }
      const full = runs.items.length >= RECENT_LIMIT;
      const short = jobs.filter((j) => j.last_run &&
        (found.get(j.id) || []).length < (full ? STRIP_CELLS : 1));
      await Promise.all(short.map(async (j) => {
        const own = await api(`v1/jobs/${encodeURIComponent(j.id)}/runs`,
                              { params: { limit: STRIP_CELLS } });
        found.set(j.id, own.items);
      }));
      if (mine !== seq) return;
      recent = found;
      clear(list).append(jobsTable(jobs, recent, select));
    } catch (err) {
      if (mine === seq) ctx.toast(`recent runs: ${err.message}`, true);
    }
  }

  async function load() {
    const mine = ++seq;
    try {
      const page = await api("v1/jobs", { params: {
        sort: "name", with_last_run: "true", limit: PAGE, name_prefix: state.q,
        namespace: state.namespace, paused: state.paused,
        label: state.label.includes(":") ? state.label : "",
        cursor: state.cursors[state.page] } });
      if (mine !== seq) return;
      shown = page.items;
      clear(list).append(jobsTable(page.items, recent, select));
      showCount();
      loadRecent(page.items, mine);
      state.cursors[state.page + 1] = page.next_cursor;
      clear(pager).append(
        h("button", { class: "btn", type: "button", text: "‹ Previous", id: "jobs-prev",
                      disabled: state.page === 0, onclick: () => { state.page--; load(); } }),
        h("span", { class: "muted", text: `page ${state.page + 1}` }),
        h("button", { class: "btn", type: "button", text: "Next ›", id: "jobs-next",
                      disabled: !page.next_cursor, onclick: () => { state.page++; load(); } }));
      loaded(root);
    } catch (err) {
      if (mine !== seq) return;
      clear(list).append(errorBox(err));
      loaded(root, false);
    }
  }

  let debounce = null;
  function changed() {
    state.q = search.value.trim();
    state.namespace = ns.value.trim();
    state.label = label.value.trim();
    state.paused = paused.value;
    state.cursors = [null];
    state.page = 0;
    // Keep the filters in the address (a reload or a shared link shows the same list).
    history.replaceState(null, "", hashFor("jobs", { q: state.q, namespace: state.namespace,
      label: state.label, paused: state.paused }));
    load();
  }
  const soon = () => { clearTimeout(debounce); debounce = setTimeout(changed, 250); };
  search.addEventListener("input", soon);
  ns.addEventListener("input", soon);
  label.addEventListener("input", soon);
  paused.addEventListener("change", changed);
  load();
  ctx.every(15000, load);
  return { dispose: () => clearTimeout(debounce) };
}

function jobsTable(jobs, recent, select) {
  return table([
    { title: "Name", clip: true, cls: "wide", cell: (j) => h("a", { href: `#/jobs/${j.id}`, text: j.name,
                                           class: "job-link" }) },
    { title: "Namespace", clip: true, cls: "narrow", cell: (j) => j.namespace },
    { title: "Schedule", cls: "opt narrow", clip: true, cell: (j) => scheduleText(j.schedule) },
    { title: "Target", cls: "opt", cell: (j) => (j.target && j.target.kind) || "—" },
    { title: "Last run", cell: (j) => j.last_run
      ? h("span", null, statusBadge(j.last_run.status), " ", timeCell(j.last_run.scheduled_for))
      : h("span", { class: "muted", text: "never" }) },
    { title: "Next fire", cell: (j) => timeCell(j.next_fire_at) },
    { title: "State", cell: (j) => statusBadge(j.paused ? "paused" : "active") },
    { title: "Recent runs", cell: (j) => recent.has(j.id) || recent.size
      ? strip(recent.get(j.id) || [], STRIP_CELLS) : "" },
    select ? { title: "", cell: (j) => h("input", {
      type: "checkbox", class: "pick", value: j.id, checked: select.selected.has(j.id),
      "aria-label": `select ${j.name}`, onchange: (event) => {
        if (event.target.checked) select.selected.set(j.id, j);
        else select.selected.delete(j.id);
        select.toggled();
      } }) } : null,
  ].filter(Boolean), jobs, "no jobs match");
}
