// Jobs: a searchable, paginated list (name prefix, namespace, label, paused),
// in (namespace, name) order, with each job's last run and next fire.

import { api } from "../api.js";
import { h, hashFor, scheduleText, statusBadge, table, timeCell, clear } from "../dom.js";
import { errorBox, loaded } from "./common.js";

const PAGE = 50;

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
  root.append(h("section", { class: "card" },
    h("h1", { text: "Jobs" }),
    h("div", { class: "row filters" }, search, ns, label, paused),
    list, pager));

  let seq = 0;
  async function load() {
    const mine = ++seq;
    try {
      const page = await api("v1/jobs", { params: {
        sort: "name", with_last_run: "true", limit: PAGE, name_prefix: state.q,
        namespace: state.namespace, paused: state.paused,
        label: state.label.includes(":") ? state.label : "",
        cursor: state.cursors[state.page] } });
      if (mine !== seq) return;
      clear(list).append(jobsTable(page.items));
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

function jobsTable(jobs) {
  return table([
    { title: "Name", cell: (j) => h("a", { href: `#/jobs/${j.id}`, text: j.name,
                                           class: "job-link" }) },
    { title: "Namespace", cell: (j) => j.namespace },
    { title: "Schedule", cls: "opt", cell: (j) => scheduleText(j.schedule) },
    { title: "Target", cls: "opt", cell: (j) => (j.target && j.target.kind) || "—" },
    { title: "Last run", cell: (j) => j.last_run
      ? h("span", null, statusBadge(j.last_run.status), " ", timeCell(j.last_run.scheduled_for))
      : h("span", { class: "muted", text: "never" }) },
    { title: "Next fire", cell: (j) => timeCell(j.next_fire_at) },
    { title: "State", cell: (j) => statusBadge(j.paused ? "paused" : "active") },
  ], jobs, "no jobs match");
}
