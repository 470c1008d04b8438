// A line diff (longest common subsequence) of two texts, for the job
// editor's review before saving and for a concurrent change.

import { h } from "./dom.js";

/** [{op: " " | "-" | "+", line}] turning ``before`` into ``after``. */
export function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push({ op: " ", line: a[i] }); i++; j++; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) out.push({ op: "+", line: b[j++] });
    else out.push({ op: "-", line: a[i++] });
  }
  return out;
}

/** The diff as a <pre>: changed lines marked, unchanged ones beyond 2 lines of context folded. */
export function diffView(before, after, id) {
  const lines = lineDiff(before, after);
  const near = lines.map((_, k) => lines.slice(Math.max(0, k - 2), k + 3).some((l) => l.op !== " "));
  const pre = h("pre", { class: "diff", id });
  let folded = false;
  lines.forEach((l, k) => {
    if (!near[k]) {
      if (!folded) pre.append(h("span", { class: "fold", text: "…" }));
      folded = true;
      return;
    }
    folded = false;
    pre.append(h("span", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "same",
                           text: `${l.op} ${l.line}` }));
  });
  if (!lines.some((l) => l.op !== " ")) pre.textContent = "no change";
  return pre;
}
