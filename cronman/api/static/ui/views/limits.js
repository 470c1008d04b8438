// Limits per destination (GET v1/limits, admin tokens): each limit's key, its
// rate, burst and concurrency, what holds on it now (slots in flight and
// starts in its window, cluster-wide; the attempts waiting on it) and who
// manages it. An admin token that may write gets the form to make or change
// one (a change names the version it read: 409 when another came first) and
// a delete; any other token sees the table, or the API's refusal.

import { api } from "../api.js";
import { clear, fmtNumber, h, table } from "../dom.js";
import { actionButton, errorBox, loaded } from "./common.js";

const KINDS = ["host", "queue_url", "label", "namespace"];
const FIELDS = [["name", "Name"], ["kind", "Match", KINDS], ["value", "Matches"],
  ["rate", "Rate (per second)", "number"], ["burst", "Burst", "number"],
  ["concurrency", "Concurrency", "number"]];

export function render(ctx) {
  const { root, session } = ctx;
  const summary = h("p", { class: "muted", id: "limits-summary" });
  const list = h("div", { id: "limits-list" });
  const admin = Boolean(session.who && session.who.admin && session.canWrite);
  root.append(h("section", { class: "card" }, h("h1", { text: "Limits" }), summary, list));
  const form = admin ? limitForm(ctx, () => load()) : null;
  if (form) root.append(form.card);

  async function load() {
    try {
      const { items } = await api("v1/limits");
      const waiting = items.reduce((n, lim) => n + (lim.waiting || 0), 0);
      summary.textContent = `${items.length} limit(s), ${fmtNumber(waiting)} attempt(s) ` +
        "waiting on them now; held cluster-wide (every node reads them each sync poll).";
      clear(list).append(limitsTable(ctx, items, form, load));
      loaded(root);
    } catch (err) {
      clear(list).append(errorBox(err));
      loaded(root, false);
    }
  }
  load();
  ctx.every(3000, load);
  return null;
}

function bounds(lim) {
  if (lim.rate === undefined || lim.rate === null) return "—";
  return `${fmtNumber(lim.rate, 2)}/s` + (lim.burst ? ` (burst ${fmtNumber(lim.burst)})` : "");
}

function limitsTable(ctx, items, form, reload) {
  const columns = [
    { title: "Name", clip: true, cell: (l) => l.name },
    { title: "Key", clip: true, cell: (l) => {
      const [[kind, value]] = Object.entries(l.match);
      return [h("span", { class: "muted", text: kind + " " }), value];
    } },
    { title: "Rate", cls: "num", cell: bounds },
    { title: "Concurrency", cls: "num", cell: (l) => l.concurrency ? fmtNumber(l.concurrency) : "—" },
    { title: "In flight", cls: "num", cell: (l) => l.usage ? fmtNumber(l.usage.in_flight) : "—" },
    { title: "Starts in window", cls: "num opt",
      cell: (l) => l.usage ? fmtNumber(l.usage.starts_in_window) : "—" },
    { title: "Waiting now", cls: "num", cell: (l) => fmtNumber(l.waiting || 0) },
    { title: "Managed by", cls: "opt", cell: (l) => l.managed_by || "by hand" },
  ];
  if (form) {
    columns.push({ title: "", cell: (l) => h("span", { class: "row" },
      h("button", { class: "btn small", type: "button", text: "Edit",
                    dataset: { action: "edit", limit: l.name }, onclick: () => form.edit(l) }),
      actionButton(ctx, "Delete", {
        title: `Delete limit ${l.name}?`, danger: true, small: true,
        text: "Its fires are no longer held to it (every node within a sync poll).",
        action: () => api(`v1/limits/${encodeURIComponent(l.name)}`, { method: "DELETE" }),
        done: `limit ${l.name} deleted`, after: reload })) });
  }
  return table(columns, items, "no limit is defined", {
    id: "limits-table", rowAttrs: (l) => ({ dataset: { limit: l.name } }) });
}

function limitForm(ctx, saved) {
  const inputs = new Map();
  const error = h("div", { class: "error-box", role: "alert", id: "limit-form-error", hidden: true });
  const title = h("h2", { id: "limit-form-title", text: "New limit" });
  const fields = h("div", { class: "editor-fields" });
  for (const [field, label, type] of FIELDS) {
    const id = `limit-${field}`;
    const input = Array.isArray(type)
      ? h("select", { id }, type.map((k) => h("option", { value: k, text: k })))
      // No min: the API's bounds are the rule, its 400 names the field.
      : h("input", { id, type: type === "number" ? "number" : "text",
                     step: type ? "any" : null });
    inputs.set(field, input);
    fields.append(h("div", { class: "field" }, h("label", { for: id, text: label }), input));
  }
  let editing = null;
  const save = h("button", { class: "btn primary", type: "submit", id: "limit-save", text: "Create" });
  const cancel = h("button", { class: "btn", type: "button", id: "limit-cancel", text: "Cancel",
                               hidden: true });
  const formEl = h("form", { id: "limit-form", autocomplete: "off" }, fields, error,
    h("div", { class: "actions" }, save, cancel));
  const card = h("section", { class: "card" }, title, formEl);

  function reset() {
    editing = null;
    for (const input of inputs.values()) input.value = "";
    inputs.get("kind").value = "host";
    inputs.get("name").disabled = false;
    title.textContent = "New limit";
    save.textContent = "Create";
    cancel.hidden = true;
    error.hidden = true;
  }

  function body() {
    const out = { name: inputs.get("name").value.trim(),
                  match: { [inputs.get("kind").value]: inputs.get("value").value.trim() } };
    for (const key of ["rate", "burst", "concurrency"]) {
      const raw = inputs.get(key).value;
      if (raw !== "") out[key] = Number(raw);
    }
    if (editing) {
      out.version = editing.version;
      if (editing.managed_by) out.managed_by = editing.managed_by;
    }
    return out;
  }

  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    save.disabled = true;
    try {
      const limit = body();
      if (editing) {
        await api(`v1/limits/${encodeURIComponent(editing.name)}`, { method: "PUT", body: limit });
        ctx.toast(`limit ${limit.name} saved`);
      } else {
        await api("v1/limits", { method: "POST", body: limit });
        ctx.toast(`limit ${limit.name} created`);
      }
      reset();
      await saved();
    } catch (err) {
      error.textContent = err.field ? `${err.field}: ${err.message}` : err.message;
      error.hidden = false;
    } finally {
      save.disabled = false;
    }
  });
  cancel.addEventListener("click", reset);
  reset();
  return {
    card,
    edit(limit) {
      editing = limit;
      const [[kind, value]] = Object.entries(limit.match);
      inputs.get("name").value = limit.name;
      inputs.get("name").disabled = true;
      inputs.get("kind").value = kind;
      inputs.get("value").value = value;
      for (const key of ["rate", "burst", "concurrency"]) {
        inputs.get(key).value = limit[key] === undefined || limit[key] === null ? "" : limit[key];
      }
      title.textContent = `Edit limit ${limit.name} (version ${limit.version})`;
      save.textContent = "Save";
      cancel.hidden = false;
      card.scrollIntoView({ block: "nearest" });
    },
  };
}
