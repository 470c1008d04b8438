// Why a run waited or was skipped, in words an operator reads: its ``gate``
// as the API serializes it (cronman.api.serialize.run_json; the scheduler's
// dispatch gates write it). A limit's wait ("held by limit billing 840 ms
// (20 of 20 in flight)"), the runs a buffer held it behind (linked), the
// upstream runs it waited for or consumed, the calendar that skipped it.

import { append, fmtMs, fmtTime, h } from "./dom.js";

// A namespace's quota is carried out as a limit of this name (cronman.limits.QUOTA_PREFIX).
const QUOTA_PREFIX = "quota:";

/**
 * The gate in words: a span (with links to the runs it names) to put in a
 * table cell or a page, or "" when nothing held the run back.
 */
export function gateView(gate) {
  const parts = gateParts(gate);
  if (!parts.length) return "";
  const out = h("span", { class: "gate" });
  parts.forEach((part, i) => {
    if (i) out.append("; ");
    append(out, [part]);
  });
  return out;
}

function gateParts(gate) {
  if (!gate || typeof gate !== "object") return [];
  const parts = [];
  if (gate.limit) parts.push(limitWords(gate.limit));
  if (gate.buffered) {
    const b = gate.buffered;
    parts.push(["buffered behind ", runLinks(b.behind), b.policy ? ` (${b.policy})` : "",
      b.since ? `, waiting since ${fmtTime(b.since)}` : ""]);
  } else if (gate.buffered_behind && gate.buffered_behind.length) {
    parts.push(["buffered behind ", runLinks(gate.buffered_behind)]);
  }
  if (gate.upstream && gate.upstream.length) parts.push(`after ${gate.upstream.length} upstream run(s)`);
  if (gate.calendar) parts.push(`excluded by calendar ${gate.calendar}`);
  if (gate.waiting_for && gate.waited_ms === undefined && !gate.stale) {
    parts.push(`waiting for ${gate.waiting_for.length} upstream job(s) since ${fmtTime(gate.waiting_since)}`);
  }
  if (gate.waited_ms !== undefined) parts.push(`waited ${fmtMs(gate.waited_ms)} for upstream`);
  if (gate.stale && gate.stale.length) parts.push(`stale upstream: ${gate.stale.join(", ")}`);
  else if (gate.depends_on && gate.depends_on.length) parts.push(`${gate.depends_on.length} upstream(s) fresh`);
  return parts;
}

/** "held by limit billing 840 ms (20 of 20 in flight)", or "… since <time>: …" while it waits. */
function limitWords(limit) {
  const name = String(limit.name || "");
  const what = name.startsWith(QUOTA_PREFIX)
    ? `namespace ${name.slice(QUOTA_PREFIX.length)}'s quota` : `limit ${name}`;
  // The scheduler's reason reads "waiting on <what>: <in flight or rate at the time>".
  const reason = limit.reason ? String(limit.reason) : "";
  const prefix = `waiting on ${what}: `;
  const detail = reason.startsWith(prefix) ? reason.slice(prefix.length) : reason;
  if (limit.waited_ms !== undefined && limit.waited_ms !== null) {
    return `held by ${what} ${fmtMs(limit.waited_ms)}` + (detail ? ` (${detail})` : "");
  }
  return `held by ${what}` + (limit.since ? ` since ${fmtTime(limit.since)}` : "")
    + (detail ? `: ${detail}` : "");
}

/** Links to runs by id, each named by its scheduled time (a run id begins with it). */
function runLinks(ids) {
  const out = [];
  (ids || []).forEach((id, i) => {
    if (i) out.push(", ");
    const when = scheduledOf(String(id));
    out.push(h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "gate-run",
                      dataset: { run: id },
                      text: when ? `run of ${fmtTime(when)}` : `run ${id}` }));
  });
  return out;
}

/** The scheduled time a run id encodes (its first 48 bits, cronman.ids), or null. */
function scheduledOf(runId) {
  const hex = runId.replace(/-/g, "");
  if (!/^[0-9a-f]{32}$/i.test(hex) || hex[12] !== "8") return null;
  return new Date(parseInt(hex.slice(0, 12), 16)).toISOString();
}
