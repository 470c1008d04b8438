// What a plain (unquoted) YAML scalar means, for yaml.js and yaml-emit.js.
// The console reads YAML 1.2's core schema (JSON's types), but `cronman jobs
// apply` reads job files with PyYAML (YAML 1.1), and one text must not mean
// two definitions. Where they disagree: what PyYAML reads as text is text
// (1e3, 0o17, -.5: the API says at the field if a number was meant); what
// PyYAML reads as a boolean or number that YAML 1.2 reads otherwise (yes,
// no, on, off, 012, 1_000, 1:30, 0b1) is refused, to be written plainly
// (true, 90) or quoted. emit() quotes every string either could misread.

const OTHER = Symbol("something else"); // a YAML 1.1 value JSON cannot hold
const NULL = /^(?:~|null|Null|NULL)$/;
const CONTROL = /[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]/;

/** A plain scalar under YAML 1.2's core schema (undefined: .inf or .nan). */
function core(text) {
  if (text === "" || NULL.test(text)) return null;
  if (/^(?:true|True|TRUE)$/.test(text)) return true;
  if (/^(?:false|False|FALSE)$/.test(text)) return false;
  if (/^0o[0-7]+$/.test(text)) return parseInt(text.slice(2), 8);
  if (/^0x[0-9a-fA-F]+$/.test(text)) return parseInt(text.slice(2), 16);
  if (/^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$/.test(text)) return Number(text);
  if (/^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$/.test(text)) return undefined;
  return text;
}

/** The same plain scalar as PyYAML's SafeLoader resolves it (YAML 1.1). */
function pyyaml(text) {
  if (text === "" || NULL.test(text)) return null;
  if (/^(?:yes|Yes|YES|true|True|TRUE|on|On|ON)$/.test(text)) return true;
  if (/^(?:no|No|NO|false|False|FALSE|off|Off|OFF)$/.test(text)) return false;
  const sign = text[0] === "-" ? -1 : 1;
  const body = text.replace(/^[-+]/, "");
  const digits = body.replaceAll("_", "");
  if (/^0b[01_]+$/.test(body)) return sign * parseInt(digits.slice(2), 2);
  if (/^0x[0-9a-fA-F_]+$/.test(body)) return sign * parseInt(digits.slice(2), 16);
  if (/^0[0-7_]+$/.test(body)) return sign * parseInt(digits, 8);
  if (/^(?:0|[1-9][0-9_]*)$/.test(body)) return sign * Number(digits);
  if (/^[1-9][0-9_]*(?::[0-5]?[0-9])+$/.test(body)) { // sexagesimal: 1:30 is 90
    return sign * digits.split(":").reduce((total, part) => total * 60 + Number(part), 0);
  }
  if (/^[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?$/.test(body) ||
      /^\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?$/.test(text)) return sign * Number(digits);
  if (/^[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*$|^\.(?:inf|Inf|INF)$/.test(body) ||
      /^\.(?:nan|NaN|NAN)$/.test(text)) return OTHER;
  return text;
}

/** ``s`` double-quoted: JSON's escapes, and \u for what YAML may not hold raw. */
export const quote = (s) => JSON.stringify(s).replace(/[\x7f-\x9f\u2028\u2029\ufeff]/g,
  (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

/** A number as YAML both schemas read back as that number. */
export function number(n) {
  if (!Number.isFinite(n)) throw new Error(`${n} is not a JSON number`);
  const text = String(n);
  // PyYAML reads 1e+21 as text: its floats need a dot.
  return text.includes("e") && !text.includes(".") ? text.replace("e", ".0e") : text;
}

const scalarText = (v) => (v === null ? "null" : typeof v === "number" ? number(v) : String(v));

/** Whether ``s`` written bare reads back as the same string, here and in PyYAML. */
export function plainSafe(s) {
  return s !== "" && s === s.trim() && !CONTROL.test(s) &&
    !/^[,[\]{}#&*!|>'"%@`]|^[-?:](?:\s|$)|^(?:---|\.\.\.)|: | #|:$/.test(s) &&
    !/^\d{4}-\d\d?-\d\d?/.test(s) && // a timestamp to PyYAML
    s !== "<<" && s !== "=" && core(s) === s && pyyaml(s) === s;
}

/** {value} of a plain scalar, or {error} when JSON cannot hold it or PyYAML reads it otherwise. */
export function plainValue(text) {
  const value = core(text);
  if (value === undefined) return { error: `${text} is not a JSON number` };
  const old = pyyaml(text);
  if (old === value || typeof old === "string") return { value: old };
  const show = (v) => (v === OTHER ? "something else" : typeof v === "string" ? `the text ${quote(v)}`
    : scalarText(v));
  return { error: `${text} is ${show(value)} in YAML 1.2 but ${show(old)} in YAML 1.1 ` +
    `(cronman jobs apply): write ${old === OTHER ? "" : scalarText(old) + ", or "}` +
    `${quote(text)} for the text` };
}
