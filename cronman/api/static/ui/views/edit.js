// Create or edit a job: a form for the common fields and the definition as
// JSON or YAML (all edit the same definition), reviewed as a diff before saving.
// The API validates: a 400 is shown at the field it names. An edit is a PUT
// carrying the version it was read at, so a concurrent change is a 409: it
// is shown (what changed, against yours), never overwritten.

import { api } from "../api.js";
import { diffView } from "../diff.js";
import { definitionPanel } from "../definition.js";
import { clear, h } from "../dom.js";
import { errorBox, loaded } from "./common.js";

// Answer-only keys: the editor leaves them out of the definition it shows.
const COMPUTED = ["id", "version", "created_at", "updated_at", "next_fire_at", "last_run"];
const SCHEDULES = {
  cron: () => ({ kind: "cron", cron: "0 * * * *", timezone: "UTC" }),
  interval: () => ({ kind: "interval", every: 60 }),
  once: () => ({ kind: "once", at: new Date(Date.now() + 3600000).toISOString().slice(0, 19) + "Z" }),
  after: () => ({ kind: "after", jobs: [], mode: "all" }),
};
const TARGETS = {
  http: () => ({ kind: "http", url: "" }),
  sqs: () => ({ kind: "sqs", queue_url: "", region: "" }),
  container: () => ({ kind: "container", image: "", command: [] }),
};
// [field, label, input type, shown when (field=value)]
const FIELDS = [
  ["name", "Name", "text"],
  ["namespace", "Namespace", "text"],
  ["schedule.kind", "Schedule", Object.keys(SCHEDULES)],
  ["schedule.cron", "Cron", "text", "schedule.kind=cron"],
  ["schedule.timezone", "Time zone", "text", "schedule.kind=cron"],
  ["schedule.every", "Every (s)", "number", "schedule.kind=interval"],
  ["schedule.at", "At (RFC 3339)", "text", "schedule.kind=once"],
  ["schedule.jobs", "After jobs (comma-separated)", "list", "schedule.kind=after"],
  ["target.kind", "Target", Object.keys(TARGETS)],
  ["target.url", "URL", "text", "target.kind=http"],
  ["target.method", "Method", "text", "target.kind=http"],
  ["target.queue_url", "Queue URL", "text", "target.kind=sqs"],
  ["target.region", "Region", "text", "target.kind=sqs"],
  ["target.image", "Image", "text", "target.kind=container"],
  ["retry.max_attempts", "Max attempts", "number"],
];

const getPath = (obj, path) => path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);

function setPath(obj, path, value) {
  const keys = path.split(".");
  let o = obj;
  for (const k of keys.slice(0, -1)) {
    if (typeof o[k] !== "object" || o[k] === null) o[k] = {};
    o = o[k];
  }
  const last = keys[keys.length - 1];
  if (value === undefined) delete o[last];
  else o[last] = value;
}

/** The definition as the editor shows it: the job without its answer-only keys. */
export function definitionOf(job) {
  const out = { ...job };
  for (const key of COMPUTED) delete out[key];
  return out;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** ``mine``'s changes to ``base`` (key by key, top level) applied to ``theirs``. */
export function rebase(base, mine, theirs) {
  const out = { ...theirs };
  for (const key of new Set([...Object.keys(base), ...Object.keys(mine)])) {
    if (same(base[key], mine[key])) continue;
    if (key in mine) out[key] = mine[key];
    else delete out[key];
  }
  return out;
}

export function render(ctx) {
  const { root, path, session } = ctx;
  const jobId = path[0] === "jobs" ? path[1] : null;
  const card = h("section", { class: "card", id: "job-editor" });
  root.append(card);
  if (!session.canWrite) {
    card.append(h("h1", { text: jobId ? "Edit job" : "New job" }),
      errorBox({ message: "This token may not change jobs." }));
    loaded(root, false);
    return null;
  }
  // base: the definition as read (null for a new job); def: the one being edited from.
  const state = { base: null, version: null, def: null };
  const inputs = new Map();
  const form = h("div", { class: "editor-fields" });
  const review = h("div", { id: "job-review" });
  const conflict = h("div", { id: "job-conflict" });
  const reviewButton = h("button", { class: "btn primary", type: "button", id: "job-review-button",
                                     text: "Review changes" });

  // A review shown is of the text as it was: any edit takes it away, so
  // Save never sends a definition other than the one reviewed.
  const definition = definitionPanel(() => {
    clear(review);
    if (current()) showFields();
  });
  const baseText = () => (state.base ? definition.text(state.base) : "");

  function current() {
    const def = definition.read();
    reviewButton.disabled = !def;
    return def;
  }

  function showFields() {
    const def = current() || state.def || {};
    for (const [field, { input, row }] of inputs) {
      const when = FIELDS.find((f) => f[0] === field)[3];
      row.hidden = Boolean(when) && String(getPath(def, when.split("=")[0])) !== when.split("=")[1];
      if (document.activeElement === input) continue;
      const value = getPath(def, field);
      if (input.type === "checkbox") input.checked = Boolean(value);
      else input.value = Array.isArray(value) ? value.join(", ") : value ?? "";
    }
  }

  function fieldChanged(field, type, input) {
    const def = current();
    if (!def) return;
    let value = input.value.trim();
    if (field === "schedule.kind" && SCHEDULES[value]) def.schedule = SCHEDULES[value]();
    else if (field === "target.kind" && TARGETS[value]) def.target = TARGETS[value]();
    else {
      if (type === "number") value = value === "" ? undefined : Number(value);
      else if (type === "list") value = value.split(",").map((s) => s.trim()).filter(Boolean);
      else if (value === "") value = undefined;
      setPath(def, field, value);
      if (field.startsWith("retry.") && def.retry && !Object.keys(def.retry).length) delete def.retry;
    }
    clear(review);
    definition.write(def);
    showFields();
  }

  for (const [field, label, type] of FIELDS) {
    const id = "f-" + field.replaceAll(".", "-");
    const input = Array.isArray(type)
      ? h("select", { id, dataset: { field } }, type.map((k) => h("option", { value: k, text: k })))
      : h("input", { id, type: type === "number" ? "number" : "text", dataset: { field } });
    input.addEventListener(Array.isArray(type) ? "change" : "input",
      () => fieldChanged(field, type, input));
    const row = h("div", { class: "field" }, h("label", { for: id, text: label }), input,
      h("span", { class: "field-error", hidden: true, dataset: { for: field } }));
    inputs.set(field, { input, row });
    form.append(row);
  }
  function clearErrors() {
    for (const el of card.querySelectorAll(".field-error[data-for]")) el.hidden = true;
    for (const { input } of inputs.values()) input.removeAttribute("aria-invalid");
    definition.showError("");
  }

  /** A 400's message at the field it names (or, for a field the form lacks, under the definition). */
  function showError(err) {
    const field = (err.field || "").replace(/^jobs\[0\]\./, "");
    const match = [...inputs.keys()].filter((f) => field === f || field.startsWith(f + ".") ||
      field.startsWith(f + "[")).sort((a, b) => b.length - a.length)[0];
    if (match && !inputs.get(match).row.hidden) {
      const { input, row } = inputs.get(match);
      input.setAttribute("aria-invalid", "true");
      const slot = row.querySelector(".field-error");
      slot.textContent = `${field}: ${err.message}`;
      slot.hidden = false;
      input.focus();
    } else {
      definition.showError(field ? `${field}: ${err.message}` : err.message);
    }
  }

  reviewButton.addEventListener("click", () => {
    clearErrors();
    const def = current();
    if (!def) return;
    clear(conflict);
    clear(review).append(h("h2", { text: jobId ? "Changes to save" : "The new job" }),
      diffView(baseText(), definition.text(def), "job-diff"),
      h("div", { class: "actions" },
        h("button", { class: "btn primary", type: "button", id: "job-save", text: "Save",
                      onclick: () => save(def) }),
        h("button", { class: "btn", type: "button", text: "Back to editing",
                      onclick: () => clear(review) })));
  });

  async function save(def) {
    try {
      const saved = jobId
        ? await api(`v1/jobs/${encodeURIComponent(jobId)}`, { method: "PUT",
          body: { ...def, version: state.version } })
        : await api("v1/jobs", { method: "POST", body: def });
      ctx.toast(jobId ? `Saved ${saved.name} (version ${saved.version})` : `Created ${saved.name}`);
      ctx.navigate(`#/jobs/${saved.id}`);
    } catch (err) {
      clear(review);
      if (err.status === 409 && err.field === "version") await showConflict(def);
      else if (err.status === 400 || err.status === 409 || err.status === 403) showError(err);
      else ctx.toast(`Save failed: ${err.message}`, true);
    }
  }

  /** Someone saved the job since it was read: what they changed, against this edit. */
  async function showConflict(mine) {
    const now = await api(`v1/jobs/${encodeURIComponent(jobId)}`);
    const theirs = definition.text(definitionOf(now));
    clear(conflict).append(h("div", { class: "error-box", role: "alert",
      text: `The job changed since you opened it (version ${state.version} → ${now.version}). ` +
        "Nothing was saved." }),
      h("h2", { text: "Their change (the version you opened → the current one)" }),
      diffView(baseText(), theirs, "job-conflict-theirs"),
      h("h2", { text: "Yours against the current version" }),
      diffView(theirs, definition.text(mine), "job-conflict-mine"),
      h("div", { class: "actions" },
        h("button", { class: "btn", type: "button", id: "job-rebase",
                      text: "Keep my edit, on top of the current version",
                      onclick: () => {
                        const merged = rebase(state.def, mine, definitionOf(now));
                        start(now);
                        definition.write(merged);
                        showFields();
                        clear(conflict);
                      } }),
        h("button", { class: "btn", type: "button", id: "job-reload",
                      text: "Discard mine, load the current version",
                      onclick: () => { start(now); clear(conflict); } })));
  }

  function start(job) {
    state.def = job ? definitionOf(job) : {
      name: "", namespace: (session.who && session.who.namespaces && session.who.namespaces[0]) ||
        "default", schedule: SCHEDULES.cron(), target: TARGETS.http() };
    state.version = job ? job.version : null;
    state.base = job ? state.def : null;
    definition.write(state.def);
    showFields();
  }

  card.append(
    h("h1", { text: jobId ? "Edit job" : "New job" }),
    h("div", { class: "grid2 editor" },
      h("div", null, h("h2", { text: "Fields" }), form),
      definition.element),
    h("div", { class: "actions" }, reviewButton,
      h("a", { class: "btn", href: jobId ? `#/jobs/${jobId}` : "#/jobs", text: "Cancel" })),
    review, conflict);

  (async () => {
    try {
      start(jobId ? await api(`v1/jobs/${encodeURIComponent(jobId)}`) : null);
      if (jobId) card.querySelector("h1").textContent = `Edit ${state.def.name}`;
      loaded(root);
    } catch (err) {
      card.append(errorBox(err));
      loaded(root, false);
    }
  })();
  return null;
}
