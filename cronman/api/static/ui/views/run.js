// One run: its times, status and attempt, the attempt's answer (HTTP status
// and the answer's first KiB, the SQS message id, a container's exit code and
// its stdout and stderr apart), why it waited or was skipped (its gate), the
// error; replay it when finished, cancel it while it runs (when this API has
// POST /v1/runs/{id}/cancel). Refreshed every 2 s until the run ends.

import { api } from "../api.js";
import { append, clear, fmtMs, gateText, h, resultText, statusBadge, timeCell } from "../dom.js";
import { actionButton, errorBox, FINAL, hasApiPath, loaded } from "./common.js";

const CANCEL_PATH = "/v1/runs/{run_id}/cancel";

export function render(ctx) {
  const { root, path } = ctx;
  const runId = path[1];
  const head = h("section", { class: "card", id: "run-head" });
  const attempt = h("section", { class: "card", id: "run-attempt" });
  const gate = h("section", { class: "card", id: "run-gate" });
  root.append(head, attempt, gate);
  let run = null;
  let job = null;

  async function load() {
    try {
      run = await api(`v1/runs/${encodeURIComponent(runId)}`);
      if (!job || job.id !== run.job_id) {
        job = await api(`v1/jobs/${encodeURIComponent(run.job_id)}`).catch(() => null);
      }
      const cancellable = !FINAL.has(run.status) && await hasApiPath(CANCEL_PATH, "post");
      renderHead(cancellable);
      renderAttempt();
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
          h("dd", { text: `${run.skipped_before} missed fire(s) folded into this one` })] : null),
      h("div", { class: "actions", id: "run-actions" },
        FINAL.has(run.status) ? actionButton(ctx, "Replay", {
          title: "Replay this run?", text: `Dispatch run ${run.id} again, as a new attempt.`,
          action: () => api(`v1/runs/${id}/replay`, { method: "POST" }),
          done: "Replay requested", after: load }) : null,
        cancellable ? actionButton(ctx, "Cancel", {
          title: "Cancel this run?", danger: true, okLabel: "Cancel the run",
          text: `Ask the API to stop run ${run.id}; this page shows when it has ended.`,
          action: () => api(`v1/runs/${id}/cancel`, { method: "POST" }),
          done: "Cancel requested", after: load }) : null));
  }

  function renderAttempt() {
    const result = run.result || {};
    const logs = result.logs_tail || null;
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
      logs ? h("div", { class: "grid2 logs" },
        h("div", null, h("h2", { text: "stdout" }),
          h("pre", { class: "log", id: "run-stdout", text: logs.stdout || "" })),
        h("div", null, h("h2", { text: "stderr" }),
          h("pre", { class: "log err", id: "run-stderr", text: logs.stderr || "" }))) : null,
      !FINAL.has(run.status) ? h("p", { class: "muted", text:
        "Still running: this page refreshes every 2 s; a container's output comes when it ends." })
        : null]);
  }

  function renderGate() {
    const g = run.gate;
    clear(gate).append(h("h2", { text: "Gate" }));
    if (!g) {
      gate.append(h("p", { class: "muted", id: "run-gate-text",
                           text: "nothing held this run back (no dependency, no calendar)" }));
      return;
    }
    append(gate, [h("p", { id: "run-gate-text", text: gateText(g) || "—" }),
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

/** The upstream runs a gate names: consumed (``upstream``) or found fresh (``depends_on``). */
function upstreamRuns(gate) {
  return [...(gate.upstream || []), ...(gate.depends_on || [])]
    .filter((u) => u && typeof u === "object" && u.run_id);
}
