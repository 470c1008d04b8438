// One run: its times, status and attempt, its trace id when tracing is on;
// every attempt (status, times, node, result, error; the earlier ones kept by
// the API in earlier_attempts); the latest attempt's answer (HTTP status and
// the answer's first KiB, the SQS message id, a container's or a worker's exit
// code with stdout and stderr apart -- so far, while it runs); a
// worker run's worker, heartbeats and progress; why it waited or was skipped
// (its gate: a limit, a buffer, upstream runs, a calendar). Replay it when
// finished, cancel it while it runs -- a worker's or an http callback's run
// through its queue, a container run through its node -- when this API has
// POST /v1/runs/{id}/cancel. Refreshed every 2 s until the run ends.

import { api } from "../api.js";
import {
  append, clear, fmtMs, fmtRelative, h, resultText, statusBadge, table, timeCell,
} from "../dom.js";
import { gateView } from "../gate.js";
import { actionButton, errorBox, FINAL, hasApiPath, loaded } from "./common.js";

const CANCEL_PATH = "/v1/runs/{run_id}/cancel";

export function render(ctx) {
  const { root, path } = ctx;
  const runId = path[1];
  const head = h("section", { class: "card", id: "run-head" });
  const attempts = h("section", { class: "card", id: "run-attempts" });
  const attempt = h("section", { class: "card", id: "run-attempt" });
  const worker = h("section", { class: "card", id: "run-worker", hidden: true });
  const gate = h("section", { class: "card", id: "run-gate" });
  root.append(head, attempts, attempt, worker, gate);
  let run = null;
  let job = null;

  async function load() {
    try {
      run = await api(`v1/runs/${encodeURIComponent(runId)}`);
      if (!job || job.id !== run.job_id) {
        job = await api(`v1/jobs/${encodeURIComponent(run.job_id)}`).catch(() => null);
      }
      // A run with a work queue's item (a worker's, an http callback's) is cancelled
      // through its queue, a container run through its node (once: then it says so).
      const container = Boolean(job && job.target && job.target.kind === "container");
      const cancellable = !FINAL.has(run.status)
        && (Boolean(run.worker) || (container && !run.cancel_request))
        && await hasApiPath(CANCEL_PATH, "post");
      renderHead(cancellable);
      renderAttempts();
      renderAttempt();
      renderWorker();
      renderGate();
      loaded(root);
    } catch (err) {
      clear(head).append(h("h1", { text: "Run" }), errorBox(err));
      loaded(root, false);
    }
  }

  function renderHead(cancellable) {
    const id = encodeURIComponent(run.id);
    const maxAttempts = job && job.retry ? job.retry.max_attempts : null;
    clear(head).append(
      h("h1", null, h("span", { class: "name", title: run.id, text: `Run ${run.id}` }),
        statusBadge(run.status)),
      h("dl", { class: "facts" },
        h("dt", { text: "Job" }), h("dd", null, job
          ? h("a", { href: `#/jobs/${run.job_id}`, id: "run-job",
                     text: `${job.namespace}/${job.name}` })
          : run.job_id),
        h("dt", { text: "Scheduled for" }), h("dd", null, timeCell(run.scheduled_for)),
        h("dt", { text: "Attempt" }), h("dd", { id: "run-attempt-no",
          text: maxAttempts ? `${run.attempt} of at most ${maxAttempts}` : String(run.attempt) }),
        h("dt", { text: "Origin" }), h("dd", { text: run.origin }),
        h("dt", { text: "Node" }), h("dd", { text: run.node_id || "—" }),
        h("dt", { text: "Claimed" }), h("dd", null, timeCell(run.claimed_at)),
        h("dt", { text: "Started" }), h("dd", null, timeCell(run.started_at)),
        h("dt", { text: "Finished" }), h("dd", null, timeCell(run.finished_at)),
        run.next_attempt_at ? [h("dt", { text: "Next attempt" }),
          h("dd", null, timeCell(run.next_attempt_at))] : null,
        h("dt", { text: "Lateness" }), h("dd", { text: fmtMs(run.lateness_ms) }),
        h("dt", { text: "Duration" }), h("dd", { text: fmtMs(run.duration_ms) }),
        run.skipped_before ? [h("dt", { text: "Skipped before" }),
          h("dd", { text: `${run.skipped_before} missed fire(s) folded into this one` })] : null,
        run.cancel_request ? [h("dt", { text: "Cancel" }),
          h("dd", { id: "run-cancel", class: "bad", text: cancelText(run.cancel_request) })]
          : null,
        run.trace_id ? [h("dt", { text: "Trace id" }),
          h("dd", null, h("code", { id: "run-trace-id", text: run.trace_id }))] : null),
      h("div", { class: "actions", id: "run-actions" },
        FINAL.has(run.status) ? actionButton(ctx, "Replay", {
          title: "Replay this run?", text: `Dispatch run ${run.id} again, as a new attempt.`,
          action: () => api(`v1/runs/${id}/replay`, { method: "POST" }),
          done: "Replay requested", after: load }) : null,
        cancellable ? actionButton(ctx, "Cancel", {
          title: "Cancel this run?", danger: true, okLabel: "Cancel the run",
          text: run.worker ? `Ask the API to stop run ${run.id}; this page shows when it has ended.`
            : `Stop run ${run.id}: its container gets SIGTERM, then SIGKILL after a grace, ` +
              "and the run ends failed, not retried; this page shows when it has ended.",
          action: () => api(`v1/runs/${id}/cancel`, { method: "POST" }),
          done: "Cancel requested", after: load }) : null));
  }

  function renderAttempts() {
    const all = [...(run.earlier_attempts || []), {
      attempt: run.attempt, status: run.status, node_id: run.node_id, started_at: run.started_at,
      finished_at: run.finished_at, duration_ms: run.duration_ms, result: run.result,
      error: run.error, latest: true }];
    append(clear(attempts), [
      h("h2", { text: `Attempts (${all.length})` }),
      table([
        { title: "Attempt", cls: "num", cell: (a) => String(a.attempt) },
        { title: "Status", cell: (a) => statusBadge(a.latest || FINAL.has(a.status)
          || a.status === "retrying" ? a.status : "lost") },
        { title: "Node", cls: "opt", clip: true, cell: (a) => a.node_id || "—" },
        { title: "Started", cell: (a) => timeCell(a.started_at) },
        { title: "Finished", cls: "opt", cell: (a) => timeCell(a.finished_at) },
        { title: "Duration", cls: "num", cell: (a) => fmtMs(a.duration_ms) },
        { title: "Result", clip: true, cell: (a) => resultText(a.result) || "—" },
        { title: "Error", clip: true, cell: (a) => a.error
          || (a.latest || FINAL.has(a.status) || a.status === "retrying" ? "—"
            : "its end was never recorded (the lease ran out)") },
      ], all, "no attempt yet", { id: "run-attempts-table",
                                  rowAttrs: (a) => ({ dataset: { attempt: a.attempt } }) }),
      (run.earlier_attempts || []).map((a) => outputFold(a))]);
  }

  function renderAttempt() {
    const result = run.result || {};
    const live = FINAL.has(run.status) ? null
      : (run.worker && run.worker.output) || run.live_output || null;
    const logs = result.logs_tail || live || null;
    // append() (not Element.append) leaves out the parts a run lacks (null).
    append(clear(attempt), [
      h("h2", { text: `Attempt ${run.attempt}` }),
      h("dl", { class: "facts" },
        h("dt", { text: "Result" }), h("dd", { id: "run-result",
                                               text: resultText(run.result) || "—" }),
        result.agent_id ? [h("dt", { text: "Agent" }), h("dd", { text: result.agent_id })] : null,
        result.location ? [h("dt", { text: "Location" }), h("dd", { text: result.location })]
          : null,
        result.sequence_number ? [h("dt", { text: "Sequence number" }),
          h("dd", { text: result.sequence_number })] : null,
        h("dt", { text: "Error" }), h("dd", { id: "run-error", class: run.error ? "bad" : "",
                                              text: run.error || "—" })),
      result.response_snippet !== undefined ? h("div", null, h("h2", { text: "Answer (first KiB)" }),
        h("pre", { class: "log", id: "run-answer", text: result.response_snippet })) : null,
      logs ? streams(logs, live ? " so far" : "", "run") : null,
      !FINAL.has(run.status) ? h("p", { class: "muted", text:
        "Still running: this page refreshes every 2 s; a worker's output comes with its " +
        "heartbeats, a container's as its agent publishes it (every 2 s)." })
        : null]);
  }

  function renderWorker() {
    const w = run.worker;
    worker.hidden = !w;
    if (!w) return;
    const pct = typeof w.percent === "number" ? w.percent : null;
    append(clear(worker), [
      h("h2", { text: "Worker" }),
      h("dl", { class: "facts" },
        h("dt", { text: "Queue" }), h("dd", { text: w.queue }),
        h("dt", { text: "State" }), h("dd", { id: "run-worker-state", text: w.waiting_for
          ? `${w.state}: ${w.waiting_for}` : w.state }),
        h("dt", { text: "Worker" }), h("dd", { id: "run-worker-id", text: w.worker_id || "—" }),
        h("dt", { text: "Claimed" }), h("dd", null, timeCell(w.claimed_at)),
        h("dt", { text: "Last heartbeat" }), h("dd", { id: "run-worker-heartbeat",
          title: w.last_heartbeat || "", text: w.last_heartbeat
            ? `${fmtRelative(w.last_heartbeat)} (${w.heartbeats} this attempt)` : "—" }),
        h("dt", { text: "Lease until" }), h("dd", null, timeCell(w.lease_expires_at)),
        h("dt", { text: "Progress" }), h("dd", { id: "run-worker-progress" },
          pct !== null ? h("progress", { max: "100", value: String(pct) }) : null,
          `${pct !== null ? ` ${pct} % ` : ""}${w.progress || (pct === null ? "—" : "")}`),
        w.cancel_requested ? [h("dt", { text: "Cancel" }),
          h("dd", { id: "run-worker-cancel", class: "bad",
                    text: "asked: the worker is told on its next heartbeat" })] : null)]);
  }

  function renderGate() {
    const g = run.gate;
    clear(gate).append(h("h2", { text: "Gate" }));
    if (!g) {
      gate.append(h("p", { class: "muted", id: "run-gate-text", text:
        "nothing held this run back (no limit, buffer, dependency or calendar)" }));
      return;
    }
    append(gate, [h("p", { id: "run-gate-text" }, gateView(g) || "—"),
      upstreamRuns(g).length ? h("ul", { id: "run-upstream" }, upstreamRuns(g).map((u) =>
        h("li", null, h("a", { href: `#/runs/${u.run_id}`, text: `run ${u.run_id}` }),
          ` of job `, h("a", { href: `#/jobs/${u.job_id}`, text: u.job_id }),
          `, scheduled for `, timeCell(u.scheduled_for)))) : null,
      h("details", null, h("summary", { text: "as the API reports it" }),
        h("pre", { class: "json", text: JSON.stringify(g, null, 2) }))]);
  }

  load();
  ctx.every(2000, () => { if (run && !FINAL.has(run.status)) load(); });
  return null;
}

/** A run's stdout and stderr side by side (``id`` prefixes the blocks' ids). */
function streams(logs, note, id) {
  return h("div", { class: "grid2 logs" },
    h("div", null, h("h2", { text: `stdout${note}` }),
      h("pre", { class: "log", id: `${id}-stdout`, text: logs.stdout || "" })),
    h("div", null, h("h2", { text: `stderr${note}` }),
      h("pre", { class: "log err", id: `${id}-stderr`, text: logs.stderr || "" })));
}

/** An earlier attempt's answer or output, folded (null when it has neither). */
function outputFold(a) {
  const result = a.result || {};
  if (result.response_snippet === undefined && !result.logs_tail) return null;
  return h("details", { class: "attempt-output", dataset: { attempt: a.attempt } },
    h("summary", { text: `Attempt ${a.attempt}: ${resultText(a.result)}` }),
    result.response_snippet !== undefined
      ? h("pre", { class: "log", text: result.response_snippet }) : null,
    result.logs_tail ? streams(result.logs_tail, "", `run-attempt-${a.attempt}`) : null);
}

/** A container run's cancel, asked: who, when, why, and what comes next. */
function cancelText(asked) {
  return `asked by ${asked.by} ${fmtRelative(asked.at)}`
    + (asked.reason ? ` (${asked.reason})` : "")
    + ": its node stops the container at its next lease renewal";
}

/** The upstream runs a gate names: consumed (``upstream``) or found fresh (``depends_on``). */
function upstreamRuns(gate) {
  return [...(gate.upstream || []), ...(gate.depends_on || [])]
    .filter((u) => u && typeof u === "object" && u.run_id);
}
