// JSON data as block YAML for the job editor's YAML view: mappings and
// sequences in blocks, [] and {} when empty, strings bare only where they
// read back as the same string (here and in PyYAML), multi-line strings as
// literal blocks, everything else double-quoted.

import { number, plainSafe, quote } from "./yaml-scalars.js";

/** A multi-line string as a literal block (| |- |+) whose content sits at ``at``. */
function literal(s, at) {
  const body = s.replace(/\n+$/, "");
  const tail = s.length - body.length;
  const pad = " ".repeat(at);
  return [tail === 0 ? "|-" : tail === 1 ? "|" : "|+",
    ...body.split("\n").map((line) => (line ? pad + line : "")),
    ...Array(Math.max(tail - 1, 0)).fill("")].join("\n");
}

/** A scalar or an empty collection, on the line of its key or dash (at column ``indent``). */
function inline(v, indent) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "boolean") return String(v);
  if (typeof v === "number") return number(v);
  if (Array.isArray(v)) return "[]";
  if (typeof v === "object") return "{}";
  const s = String(v);
  if (plainSafe(s)) return s;
  // A literal block holds tabs but no other control character, and cannot
  // start with a space (its indentation is read from its first line).
  const block = s.includes("\n") && /^\S/.test(s) &&
    !/[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]/.test(s);
  return block ? literal(s, indent + 2) : quote(s);
}

const nested = (v) => v !== null && typeof v === "object" && Object.keys(v).length > 0;

/** A non-empty mapping or sequence as block lines at column ``indent``. */
function lines(v, indent) {
  const pad = " ".repeat(indent);
  const out = [];
  const entries = Array.isArray(v) ? v.map((item) => [null, item]) : Object.entries(v);
  for (const [key, item] of entries) {
    const lead = pad + (key === null ? "- " : (plainSafe(key) ? key : quote(key)) + ":");
    if (!nested(item)) out.push(lead + (key === null ? "" : " ") + inline(item, indent));
    else if (key !== null) out.push(lead, ...lines(item, indent + 2));
    else { // "- " then the item's first line
      const sub = lines(item, indent + 2);
      out.push(lead + sub[0].slice(indent + 2), ...sub.slice(1));
    }
  }
  return out;
}

/** ``value`` (JSON data) as YAML, ending with a line break. */
export function emit(value) {
  return (nested(value) ? lines(value, 0) : [inline(value, 0)]).join("\n") + "\n";
}
