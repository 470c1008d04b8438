// Pieces the views share: error display, the loaded state, action buttons.

import { api } from "../api.js";
import { h } from "../dom.js";

/** The statuses a run ends in. */
export const FINAL = new Set(["succeeded", "failed", "skipped", "lost"]);

let paths = null;

/**
 * Whether this API serves ``method`` on ``path`` (as its OpenAPI document
 * names it): an action the console offers only where the API has it.
 */
export async function hasApiPath(path, method) {
  if (!paths) {
    paths = api("openapi.json").then((doc) => doc.paths || {}).catch(() => ({}));
  }
  const found = (await paths)[path];
  return Boolean(found && found[method]);
}

export function errorBox(err) {
  const hint = err && err.status === 401 ? " Paste an API token above." :
    err && err.status === 403 ? " This token does not reach it." : "";
  return h("div", { class: "error-box", role: "alert",
                    text: `${(err && err.message) || err}${hint}` });
}

/** Mark the view loaded (tests and first-paint measures wait for it). */
export function loaded(root, ok = true) {
  root.dataset.state = ok ? "ready" : "error";
  if (ok && !loaded.marked) {
    loaded.marked = true;
    performance.mark("cronman:first-view");
  }
}

/**
 * A button that confirms, calls ``action``, reports, then calls ``after``:
 * shown only when the token may write (a read-only token sees none).
 */
export function actionButton(ctx, label,
                             { title, text, okLabel, action, done, after, danger, small }) {
  if (!ctx.session.canWrite) return null;
  const button = h("button", { class: "btn" + (danger ? " danger" : "") + (small ? " small" : ""),
                               type: "button",
                               text: label, dataset: { action: label.toLowerCase() } });
  button.addEventListener("click", async () => {
    if (!(await ctx.confirm(title, text, okLabel || label, danger))) return;
    button.disabled = true;
    try {
      const result = await action();
      ctx.toast(typeof done === "function" ? done(result) : (done || `${label}: done`));
      if (after) await after(result);
    } catch (err) {
      ctx.toast(`${label} failed: ${err.message}`, true);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
