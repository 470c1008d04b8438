// The work queues of the token's namespaces (GET /v1/queues): each queue's
// depth, runs held and oldest wait, and the workers seen on it (last
// heartbeat, runs held of their slots). Refreshed every 3 s.

import { api } from "../api.js";
import { clear, fmtNumber, fmtRelative, h, table, timeCell } from "../dom.js";
import { errorBox, loaded } from "./common.js";

const PAGE = 500;

export function render(ctx) {
  const { root } = ctx;
  const summary = h("p", { class: "muted", id: "queues-summary" });
  const queues = h("div", { id: "queues-list" });
  const workers = h("div", { id: "queues-workers" });
  root.append(
    h("section", { class: "card" }, h("h1", { text: "Queues" }), summary, queues),
    h("section", { class: "card" }, h("h2", { text: "Workers" }), workers));

  async function load() {
    try {
      const items = await allQueues();
      const depth = items.reduce((n, q) => n + q.depth, 0);
      const held = items.reduce((n, q) => n + q.held, 0);
      summary.textContent = `${items.length} queue(s): ${fmtNumber(depth)} run(s) waiting, ` +
        `${fmtNumber(held)} held by workers`;
      clear(queues).append(queuesTable(items));
      clear(workers).append(workersTable(items));
      loaded(root);
    } catch (err) {
      clear(queues).append(errorBox(err));
      loaded(root, false);
    }
  }
  load();
  ctx.every(3000, load);
  return null;
}

async function allQueues() {
  const items = [];
  let cursor = null;
  do {
    const page = await api("v1/queues", { params: { limit: PAGE, cursor: cursor || undefined } });
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < 10 * PAGE);
  return items;
}

function wait(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  return seconds < 120 ? `${Number(seconds).toFixed(1)} s` : `${Math.round(seconds / 60)} min`;
}

function queuesTable(items) {
  return table([
    { title: "Queue", clip: true, cell: (q) => `${q.namespace}/${q.queue}` },
    { title: "Depth", cls: "num", cell: (q) => fmtNumber(q.depth) },
    { title: "Held", cls: "num", cell: (q) => fmtNumber(q.held) },
    { title: "Oldest wait", cls: "num", cell: (q) => wait(q.oldest_wait_s) },
    { title: "Workers", cls: "num", cell: (q) => String(q.workers.length) },
  ], items, "no work queue has had a run yet",
  { rowAttrs: (q) => ({ dataset: { queue: `${q.namespace}/${q.queue}` } }) });
}

function workersTable(items) {
  const rows = items.flatMap((q) => q.workers.map((w) => ({ ...w, q })));
  return table([
    { title: "Worker", clip: true, cell: (w) => w.id },
    { title: "Queue", clip: true, cell: (w) => `${w.q.namespace}/${w.q.queue}` },
    { title: "Last heartbeat", cell: (w) => h("span", { title: w.last_seen,
                                                       text: fmtRelative(w.last_seen) }) },
    { title: "Runs held", cls: "num", cell: (w) => `${w.held} of ${w.slots}` },
    { title: "Seen at", cls: "opt", cell: (w) => timeCell(w.last_seen) },
  ], rows, "no worker seen in the last 10 minutes",
  { rowAttrs: (w) => ({ dataset: { worker: w.id } }) });
}
