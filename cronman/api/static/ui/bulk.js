// Bulk actions: one API call per job or run, a few at a time, counted.
// (The API acts on one job per call; the console asks before it starts and
// reports how many succeeded and which failed.)

import { api } from "./api.js";

const AT_ONCE = 4;
const JOB_IDS_PER_SEARCH = 100;  // GET v1/runs takes at most 100 job ids

/** Call ``fn`` on each item, ``AT_ONCE`` at a time: {ok, failed: [{item, error}]}. */
export async function runAll(items, fn) {
  let next = 0;
  let ok = 0;
  const failed = [];
  async function worker() {
    while (next < items.length) {
      const item = items[next++];
      try {
        await fn(item);
        ok++;
      } catch (error) {
        failed.push({ item, error });
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, items.length) }, worker));
  return { ok, failed };
}

/** Every job the list's filter matches (all pages). */
export async function jobsMatching(params) {
  const out = [];
  let cursor = null;
  do {
    const page = await api("v1/jobs", { params: { ...params, limit: 1000, cursor } });
    out.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}

/** The failed and lost runs of ``jobIds`` since ``since`` (all pages). */
export async function failedRuns(jobIds, since) {
  const out = [];
  for (let i = 0; i < jobIds.length; i += JOB_IDS_PER_SEARCH) {
    let cursor = null;
    do {
      const page = await api("v1/runs", { params: {
        status: "failed,lost", since, job: jobIds.slice(i, i + JOB_IDS_PER_SEARCH).join(","),
        limit: 1000, cursor } });
      out.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor);
  }
  return out;
}

/** The calls behind each bulk action on jobs. */
export const JOB_ACTIONS = {
  pause: { label: "Pause", verb: "Paused",
           call: (job) => api(`v1/jobs/${encodeURIComponent(job.id)}/pause`, { method: "POST" }) },
  resume: { label: "Resume", verb: "Resumed",
            call: (job) => api(`v1/jobs/${encodeURIComponent(job.id)}/resume`, { method: "POST" }) },
  trigger: { label: "Trigger", verb: "Triggered",
             call: (job) => api(`v1/jobs/${encodeURIComponent(job.id)}/trigger`, { method: "POST" }) },
  delete: { label: "Delete", verb: "Deleted", danger: true,
            call: (job) => api(`v1/jobs/${encodeURIComponent(job.id)}`, { method: "DELETE" }) },
};

export const replayRun = (run) =>
  api(`v1/runs/${encodeURIComponent(run.id)}/replay`, { method: "POST" });

/** "Paused 11 of 12; failed: a (reason), …". */
export function report(verb, total, { ok, failed }, name) {
  const head = `${verb} ${ok} of ${total}`;
  if (!failed.length) return head;
  const some = failed.slice(0, 3).map((f) => `${name(f.item)} (${f.error.message})`).join(", ");
  return `${head}; failed: ${some}${failed.length > 3 ? ", …" : ""}`;
}
