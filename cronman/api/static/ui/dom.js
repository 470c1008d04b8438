// DOM building and formatting helpers. Everything is built with DOM calls
// (textContent; no HTML parsing of strings), so no API value ever becomes markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/**
 * A table: columns are {title, cls, clip, cell(row) -> node|string}. Each cell
 * carries its column's title (``data-label``: a phone shows each row as a card
 * of label / value lines). A ``clip`` column ellipsises long values, the full
 * value in its tooltip and shown whole while focused.
 */
export function table(columns, rows, emptyText, { id, rowAttrs } = {}) {
  const head = h("tr", null, columns.map((c) => h("th", {
    class: [c.cls, c.clip ? "clip" : null].filter(Boolean).join(" ") || null, text: c.title })));
  const body = h("tbody");
  if (!rows.length) {
    body.append(h("tr", { class: "empty" },
      h("td", { colspan: columns.length, text: emptyText || "nothing here" })));
  }
  for (const row of rows) {
    body.append(h("tr", rowAttrs ? rowAttrs(row) : null, columns.map((c) => {
      const cls = [c.cls, c.clip ? "clip" : null].filter(Boolean).join(" ") || null;
      const value = h("span", { class: "v" }, c.cell(row));
      const text = value.textContent;
      if (c.clip && text) {
        value.title = text;
        value.tabIndex = 0;
      } else if (text.length > 24) {
        value.title = text;
      }
      return h("td", { class: cls, dataset: { label: c.title } }, value);
    })));
  }
  return h("div", { class: "table-wrap", id }, h("table", null, h("thead", null, head), body));
}

export function statusBadge(status) {
  if (!status) return h("span", { class: "muted", text: "—" });
  return h("span", { class: "status " + status, text: status });
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

/** "2026-11-24 07:00:03" in UTC (the API's zone), or "—". */
export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

/** "3 min ago" / "in 2 h" relative to now. */
export function fmtRelative(iso, now = Date.now()) {
  if (!iso) return "";
  const diff = (new Date(iso).getTime() - now) / 1000;
  const abs = Math.abs(diff);
  let text;
  if (abs < 1) return "now";
  if (abs < 60) text = `${Math.round(abs)} s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)} min`;
  else if (abs < 86400) text = `${(abs / 3600).toFixed(abs < 36000 ? 1 : 0)} h`;
  else text = `${(abs / 86400).toFixed(abs < 864000 ? 1 : 0)} d`;
  return diff < 0 ? `${text} ago` : `in ${text}`;
}

/** A run's scheduled time, linking to the run's page. */
export function runLink(run) {
  return h("a", { href: `#/runs/${run.id}`, class: "run-link" }, timeCell(run.scheduled_for));
}

/** A time cell: UTC time, the relative form as its tooltip. */
export function timeCell(iso) {
  if (!iso) return h("span", { class: "muted", text: "—" });
  return h("time", { datetime: iso, title: `${iso} (${fmtRelative(iso)})`, text: fmtTime(iso) });
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined) return "—";
  if (Math.abs(ms) < 1000) return `${ms} ms`;
  if (Math.abs(ms) < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${(ms / 60000).toFixed(1)} min`;
}

export function fmtNumber(n, digits = 0) {
  if (n === null || n === undefined) return "—";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits });
}

/** A short summary of a schedule. */
export function scheduleText(schedule) {
  if (!schedule) return "—";
  if (schedule.kind === "cron") {
    return `cron ${schedule.cron}` + (schedule.timezone && schedule.timezone !== "UTC"
      ? ` (${schedule.timezone})` : "");
  }
  if (schedule.kind === "interval") return `every ${schedule.every} s`;
  if (schedule.kind === "once") return `once at ${fmtTime(schedule.at)}`;
  if (schedule.kind === "after") {
    const n = (schedule.jobs || []).length;
    return `after ${schedule.mode === "any" ? "any" : "all"} of ${n} job${n === 1 ? "" : "s"}`;
  }
  return schedule.kind || "—";
}

export function resultText(result) {
  if (!result) return "";
  if (result.http_status !== undefined) return `HTTP ${result.http_status}`;
  if (result.message_id !== undefined) return `message ${result.message_id}`;
  if (result.exit_code !== undefined) return `exit ${result.exit_code}`;
  return JSON.stringify(result);
}

/** The hash route: "#/jobs/ID?q=x" -> {path: ["jobs", "ID"], params}. */
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#\/?/, "");
  const [path, query] = raw.split("?", 2);
  return { path: path.split("/").filter(Boolean).map(decodeURIComponent),
           params: new URLSearchParams(query || "") };
}

export function hashFor(path, params) {
  const query = params ? new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString() : "";
  return "#/" + path + (query ? "?" + query : "");
}
