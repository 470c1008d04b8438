// The cluster: scheduler nodes (heartbeat age, overloaded or not, owned jobs,
// fires, lock wins and losses), worker agents, the membership changes of the last hour,
// and the database member the API writes to (under Patroni it moves on a failover).

import { api } from "../api.js";
import { clear, fmtNumber, h, table, timeCell } from "../dom.js";
import { errorBox, loaded } from "./common.js";

export function render(ctx) {
  const { root } = ctx;
  const summary = h("p", { class: "muted", id: "cluster-summary" });
  const database = h("p", { class: "muted", id: "cluster-database" });
  const nodes = h("div", { id: "cluster-nodes" });
  const agents = h("div", { id: "cluster-agents" });
  const events = h("div", { id: "cluster-events" });
  root.append(
    h("section", { class: "card" }, h("h1", { text: "Cluster" }), summary, database,
      h("h2", { text: "Scheduler nodes" }), nodes),
    h("section", { class: "card" }, h("h2", { text: "Worker agents" }), agents),
    h("section", { class: "card" }, h("h2", { text: "Membership changes, last hour" }), events));

  async function load() {
    try {
      const [cluster, changes] = await Promise.all([
        api("v1/cluster"), api("v1/cluster/events", { params: { since: "-1h" } })]);
      const fires = cluster.nodes.reduce((n, node) => n + (node.fires_last_minute || 0), 0);
      summary.textContent = `${cluster.nodes.length} node(s), ${cluster.agents.length} agent(s), ` +
        `${cluster.replicas} replicas per job, ${fmtNumber(fires)} fires in the last minute`;
      clear(database).append(...databaseLine(cluster.database_member));
      clear(nodes).append(nodesTable(cluster.nodes));
      clear(agents).append(agentsTable(cluster.agents));
      clear(events).append(eventsTable(changes.items));
      loaded(root);
    } catch (err) {
      clear(nodes).append(errorBox(err));
      loaded(root, false);
    }
  }
  load();
  ctx.every(3000, load);
  return null;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  return `${Number(seconds).toFixed(1)} s`;
}

function databaseLine(member) {
  if (!member) return ["Database: no connection yet"];
  return ["Database written to: ", h("code", { text: member.member }), " since ",
    timeCell(member.since)];
}

function nodesTable(nodes) {
  return table([
    { title: "Node", clip: true, cell: (n) => n.id },
    { title: "Address", cls: "opt narrow", clip: true, cell: (n) => n.address || "—" },
    { title: "Started", cls: "opt", cell: (n) => timeCell(n.started_at) },
    { title: "Heartbeat age", cls: "num", cell: (n) => age(n.heartbeat_age_s) },
    { title: "State", cell: (n) => n.state === "overloaded"
      ? `overloaded: ${age(n.behind_ms / 1000)} behind, ${fmtNumber(n.backlog)} waiting` +
        (n.held_back ? `, ${fmtNumber(n.held_back)} held back` : "")
      : "ok" },
    { title: "Busy", cls: "num opt", cell: (n) => `${n.saturation_pct || 0} %` },
    { title: "Owned jobs", cls: "num", cell: (n) => fmtNumber(n.owned_jobs) },
    { title: "Fires last minute", cls: "num", cell: (n) => fmtNumber(n.fires_last_minute) },
    { title: "Lock wins", cls: "num", cell: (n) => fmtNumber(n.lock_wins) },
    { title: "Lock losses", cls: "num", cell: (n) => fmtNumber(n.lock_losses) },
  ], nodes, "no scheduler node is live");
}

/** "used / capacity" of one of an agent's resources. */
function usage(used, capacity, unit = "") {
  if (capacity === null || capacity === undefined) return "—";
  return `${fmtNumber(used, 2)} / ${fmtNumber(capacity, 2)}${unit}`;
}

function agentsTable(agents) {
  return table([
    { title: "Agent", clip: true, cell: (a) => a.id },
    { title: "Address", cls: "opt narrow", clip: true, cell: (a) => a.address || "—" },
    { title: "Runtime", cell: (a) => a.runtime || "—" },
    { title: "Labels", cls: "narrow", clip: true, cell: (a) => a.labels || "—" },
    { title: "Heartbeat age", cls: "num", cell: (a) => age(a.heartbeat_age_s) },
    { title: "CPU used", cls: "num", cell: (a) => usage(a.cpu_used, a.cpu) },
    { title: "Memory used", cls: "num", cell: (a) => usage(a.memory_mb_used, a.memory_mb, " MB") },
    { title: "Slots used", cls: "num", cell: (a) => usage(a.slots_used, a.slots) },
    { title: "Running", cls: "num", cell: (a) => fmtNumber(a.running) },
    { title: "Started", cls: "opt", cell: (a) => timeCell(a.started_at) },
  ], agents, "no worker agent is live");
}

function eventsTable(items) {
  return table([
    { title: "When", cell: (e) => timeCell(e.at) },
    { title: "Node", clip: true, cell: (e) => e.node_id },
    { title: "Change", cell: (e) => h("span", { class: "kind " + e.kind, text: e.kind }) },
    { title: "Address", cls: "opt", cell: (e) => e.address || "—" },
    { title: "Process started", cls: "opt", cell: (e) => timeCell(e.started_at) },
  ], items, "no membership change in the last hour");
}
