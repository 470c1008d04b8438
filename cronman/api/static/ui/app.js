// The dashboard: a hash router over the views, the token form, what the
// token allows (GET v1/whoami: a read-only token sees no action buttons),
// the auth state (/readyz, when the API reports it), confirmations and toasts.

import { api, getToken, setToken } from "./api.js";
import { clear, parseHash } from "./dom.js";
import * as clusterView from "./views/cluster.js";
import * as editView from "./views/edit.js";
import * as jobView from "./views/job.js";
import * as jobsView from "./views/jobs.js";
import * as limitsView from "./views/limits.js";
import * as plotsView from "./views/plots.js";
import * as queuesView from "./views/queues.js";
import * as runView from "./views/run.js";
import * as runsView from "./views/runs.js";

const $ = (id) => document.getElementById(id);
const session = { who: null, canWrite: false };
let current = null;
let timers = [];

function pickView(path) {
  const [first, second, third] = path;
  if (first === "new" || (first === "jobs" && second && third === "edit")) return editView;
  if (first === "jobs" && second) return jobView;
  if (first === "runs" && second) return runView;
  if (first === "runs") return runsView;
  if (first === "cluster") return clusterView;
  if (first === "queues") return queuesView;
  if (first === "plots") return plotsView;
  if (first === "limits") return limitsView;
  return jobsView;
}

function toast(message, bad = false) {
  const el = $("toast");
  el.textContent = message;
  el.className = bad ? "bad" : "";
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, bad ? 8000 : 3500);
}

/** Ask before an action; resolves true when confirmed (``danger``: a red button). */
function confirmAction(title, text, okLabel = "Confirm", danger = false) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = okLabel;
  // Only a destructive action's confirmation is red.
  $("confirm-ok").className = danger ? "danger" : "primary";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

function every(ms, fn) {
  const id = setInterval(() => { if (!document.hidden) fn(); }, ms);
  timers.push(id);
  return id;
}

function stopTimers() {
  for (const id of timers) clearInterval(id);
  timers = [];
}

function render() {
  const { path, params } = parseHash(window.location.hash);
  if (!path.length) {
    window.location.replace("#/jobs");
    return;
  }
  stopTimers();
  if (current && current.dispose) current.dispose();
  const root = clear($("view"));
  root.dataset.state = "loading";
  for (const link of document.querySelectorAll("#nav a[data-view]")) {
    link.classList.toggle("active", link.dataset.view === path[0]);
  }
  const view = pickView(path);
  current = view.render({
    root, path, params, session, every, toast,
    confirm: confirmAction,
    navigate: (hash) => { window.location.hash = hash; },
    reload: render,
  }) || null;
}

async function loadSession() {
  try {
    session.who = await api("v1/whoami");
    session.canWrite = Boolean(session.who.can_write);
    const who = session.who;
    const scope = who.namespaces ? who.namespaces.join(", ") : "all namespaces";
    $("who").textContent = (who.token ? who.token.name : "no token") +
      (who.read_only ? " · read-only" : "");
    $("who").title = `namespaces: ${scope}`;
  } catch (err) {
    session.who = null;
    session.canWrite = false;
    $("who").textContent = err.status === 401 ? "token needed" : "";
    $("who").title = err.message;
  }
}

async function showAuthState() {
  // /readyz tells whether /v1 calls need a token, and why (when the API reports it).
  try {
    const resp = await fetch("readyz", { headers: { Accept: "application/json" }, cache: "no-store" });
    const data = await resp.json();
    const auth = data.auth;
    $("auth").hidden = !auth;
    if (auth) {
      $("auth").textContent = "auth: " + auth.mode;
      $("auth").title = auth.reason || "";
      $("auth").className = "pill " + auth.mode;
    }
  } catch (err) {
    $("auth").textContent = "auth: unknown";
    $("auth").title = String(err);
    $("auth").className = "pill unknown";
  }
}

async function start() {
  $("token").value = getToken();
  $("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken($("token").value.trim());
    await loadSession();
    render();
  });
  $("forget").addEventListener("click", async () => {
    setToken("");
    $("token").value = "";
    await loadSession();
    render();
  });
  window.addEventListener("hashchange", render);
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (current && current.resized) current.resized(); }, 250);
  });
  showAuthState();
  await loadSession();
  render();
}

start();
