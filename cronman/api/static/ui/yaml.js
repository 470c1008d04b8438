// YAML for the job editor: parse() reads the YAML people write in job files
// for `cronman jobs apply` -- block mappings and sequences (also "- key: v"
// items and sequences not indented under their key), flow collections
// ([a, b], {k: v}, across lines), plain, single- and double-quoted scalars,
// | and > block scalars with chomping, comments -- and emit() writes it.
// Anchors, aliases, tags, directives, merge keys and a second document are
// refused with their line. What plain scalars mean: yaml-scalars.js; keys
// are always their text.

import { plainValue, quote } from "./yaml-scalars.js";

export { emit } from "./yaml-emit.js";

export class YamlError extends Error {
  constructor(line, message) {
    super(`line ${line}: ${message}`);
    this.line = line;
  }
}

const ESCAPES = { 0: "\0", a: "\x07", b: "\b", t: "\t", "\t": "\t", n: "\n", v: "\v", f: "\f",
  r: "\r", e: "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", N: "\x85", _: "\xa0",
  L: "\u2028", P: "\u2029" };
const HEX = { x: 2, u: 4, U: 8 };
const FLOW = ",[]{}";

// Own properties even for "__proto__", as JSON.parse makes them.
const put = (obj, key, value) => Object.defineProperty(obj, key,
  { value, enumerable: true, writable: true, configurable: true });

/** Folded (>) lines: a single break between two lines is a space; blank lines and
 * more-indented lines keep theirs. */
function fold(lines) {
  let out = "";
  let prev = null;
  let blank = 0;
  for (const line of lines) {
    if (line === "") { blank++; continue; }
    if (prev === null) out += "\n".repeat(blank);
    else if (/^[ \t]/.test(prev) || /^[ \t]/.test(line)) out += "\n".repeat(blank + 1);
    else out += blank ? "\n".repeat(blank) : " ";
    out += line;
    prev = line;
    blank = 0;
  }
  return out;
}

/** The YAML ``text`` as JSON data; a YamlError names the line of what it cannot read. */
export function parse(text) {
  let s = text.replace(/^\ufeff/, "").replace(/\r\n?/g, "\n");
  const broken = !s.endsWith("\n"); // then a block scalar at the end has no final break
  if (broken) s += "\n";
  let p = 0;
  const fail = (message, at = p) => {
    throw new YamlError(s.slice(0, at).split("\n").length, message);
  };
  const col = (at = p) => at - (s.lastIndexOf("\n", at - 1) + 1);
  const ws = (c) => c === " " || c === "\t";
  const gap = (at) => ws(s[at]) || s[at] === "\n" || at >= s.length;
  const marker = (at = p) => col(at) === 0 && /^(?:---|\.\.\.)(?:[ \t\n]|$)/.test(s.slice(at, at + 4));
  const done = () => p >= s.length || marker();
  const dash = () => s[p] === "-" && gap(p + 1);

  function skipBlank() { // to the next line's content, past blank lines and comments
    for (;;) {
      while (ws(s[p])) p++;
      if (s[p] === "#") p = s.indexOf("\n", p);
      if (s[p] !== "\n") break;
      p++;
    }
    const indent = s.slice(p - col(), p);
    if (p < s.length && indent.includes("\t") && !indent.trim()) fail("a tab cannot indent: use spaces");
  }

  function lineEnd() { // only a comment may follow a value on its line
    while (ws(s[p])) p++;
    if (s[p] === "#" && ws(s[p - 1])) p = s.indexOf("\n", p);
    if (s[p] !== "\n") fail(`unexpected ${quote(s.slice(p, s.indexOf("\n", p)).slice(0, 30))}`);
  }

  function checkStart() {
    const ch = s[p];
    if ((ch === "&" || ch === "*") && /[\w-]/.test(s[p + 1])) {
      fail("anchors and aliases are not supported");
    }
    if (ch === "!") fail("tags are not supported");
    if ("&*@`%|>#".includes(ch) || FLOW.includes(ch) || ("-?:".includes(ch) && gap(p + 1))) {
      fail(`a value that starts with "${ch}" must be quoted`);
    }
  }

  function resolve(text, at) {
    const { value, error } = plainValue(text);
    if (error) fail(error, at);
    return value;
  }

  function scanLine(inFlow) { // a plain scalar's text on this line, without trailing spaces
    const start = p;
    let end = p;
    for (; s[p] !== "\n"; p++) {
      const ch = s[p];
      if (ch === ":" && (gap(p + 1) || (inFlow && FLOW.includes(s[p + 1])))) break;
      if ((ch === "#" && ws(s[p - 1])) || (inFlow && FLOW.includes(ch))) break;
      if (!ws(ch)) end = p + 1;
    }
    p = end;
    return s.slice(start, end);
  }

  function plain(parent, inFlow) { // next lines continue it, folded (in a block: more indented)
    const at = p;
    checkStart();
    let out = scanLine(inFlow);
    const next = /[ \t]*\n((?:[ \t]*\n)*)([ \t]*)/y;
    for (;;) {
      next.lastIndex = p;
      const m = next.exec(s);
      const q = m && p + m[0].length;
      if (!m || q >= s.length || "#\n".includes(s[q]) || marker(q) ||
          (!inFlow && (m[2].length <= parent || m[2].includes("\t")))) break;
      const end = p;
      p = q;
      if (!inFlow && keyAhead()) fail("bad indentation of a mapping key");
      const more = scanLine(inFlow);
      if (!more) { // "]", "," or "}" next: the scalar ended on the line before
        p = end;
        break;
      }
      const blank = m[1].split("\n").length - 1;
      out += (blank ? "\n".repeat(blank) : " ") + more;
    }
    return resolve(out, at);
  }

  function folding() { // a line break in a quoted scalar: a space, or the blank lines after it
    let blank = 0;
    for (p++; ; p++, blank++) {
      while (ws(s[p])) p++;
      if (s[p] !== "\n") break;
    }
    return blank ? "\n".repeat(blank) : " ";
  }

  function quoted() {
    const q = s[p];
    const at = p++;
    let out = "";
    let spaces = ""; // dropped when a line break follows them
    for (;;) {
      const ch = s[p];
      if (p >= s.length) fail(`this ${q === '"' ? "double" : "single"}-quoted string is not closed`, at);
      if (ch === " " || ch === "\t") { spaces += ch; p++; continue; }
      if (ch === "\n") { spaces = ""; out += folding(); continue; }
      out += spaces;
      spaces = "";
      if (ch === q && !(q === "'" && s[p + 1] === "'")) { p++; return out; }
      if (ch === "'" && q === "'") { out += "'"; p += 2; continue; }
      if (ch !== "\\" || q === "'") { out += ch; p++; continue; }
      const e = s[p + 1];
      if (e === "\n") { p++; const f = folding(); out += f === " " ? "" : f; continue; }
      if (HEX[e]) {
        const hex = s.slice(p + 2, p + 2 + HEX[e]);
        if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length < HEX[e] || parseInt(hex, 16) > 0x10ffff) {
          fail(`bad escape \\${e}${hex}`);
        }
        out += String.fromCodePoint(parseInt(hex, 16));
        p += 2 + HEX[e];
      } else if (Object.hasOwn(ESCAPES, e)) { out += ESCAPES[e]; p += 2; }
      else fail(`unknown escape \\${e}`);
    }
  }

  function blockScalar(parent) { // | or >, a chomping (- +) and an indentation indicator
    const folded = s[p++] === ">";
    let chomp = "";
    let indent = null;
    for (let i = 0; i < 2; i++) {
      if (!chomp && (s[p] === "-" || s[p] === "+")) chomp = s[p++];
      else if (indent === null && /[1-9]/.test(s[p])) indent = Math.max(parent, 0) + Number(s[p++]);
    }
    lineEnd();
    p++;
    const found = [];
    while (p < s.length) {
      const eol = s.indexOf("\n", p);
      const line = s.slice(p, eol);
      const sp = line.length - line.replace(/^ +/, "").length;
      if (indent === null && sp < line.length) {
        if (sp <= Math.max(parent, 0)) break; // PyYAML: at least 1 at the top
        indent = sp;
      }
      if (indent !== null && sp < indent && sp < line.length) break;
      found.push(indent !== null && line.length > indent ? line.slice(indent) : "");
      p = eol + 1;
    }
    let end = found.length;
    while (end > 0 && found[end - 1] === "") end--;
    const body = found.slice(0, end);
    let out = folded ? fold(body) : body.join("\n");
    const finalBreak = end > 0 && !(broken && p >= s.length && end === found.length) ? 1 : 0;
    if (chomp === "+") out += "\n".repeat(found.length - end + finalBreak);
    else if (chomp === "") out += "\n".repeat(finalBreak);
    skipBlank();
    return out;
  }

  function flowBlank(at, open) { // spaces, line breaks and comments inside [ ] or { }
    for (;;) {
      if (ws(s[p]) || s[p] === "\n") p++;
      else if (s[p] === "#" && gap(p - 1)) p = s.indexOf("\n", p);
      else break;
    }
    if (p >= s.length) fail(`this "${open}" is not closed`, at);
  }

  function flow() {
    const at = p;
    const open = s[p++];
    const close = open === "[" ? "]" : "}";
    const out = open === "[" ? [] : {};
    const item = () => {
      if (s[p] === "[" || s[p] === "{") return flow();
      if (s[p] === '"' || s[p] === "'") return quoted();
      return plain(-1, true);
    };
    for (;;) {
      flowBlank(at, open);
      if (s[p] === close) { p++; return out; }
      if (open === "[") {
        out.push(item());
        flowBlank(at, open);
        if (s[p] === ":") fail("a key: value inside [ ] must be written in { }");
      } else {
        const from = p;
        if (s[p] === "[" || s[p] === "{") fail("a key must be a string");
        const key = s[p] === '"' || s[p] === "'" ? quoted() : (checkStart(), scanLine(true));
        if (Object.hasOwn(out, key)) fail(`duplicate key ${quote(key)}`, from);
        flowBlank(at, open);
        let value = null;
        if (s[p] === ":") {
          p++;
          flowBlank(at, open);
          if (s[p] !== "," && s[p] !== close) value = item();
        }
        put(out, key, value);
      }
      flowBlank(at, open);
      if (s[p] === ",") p++;
      else if (s[p] !== close) fail(`expected "," or "${close}"`);
    }
  }

  function keyAhead() { // does the line start with "key:" here?
    const save = p;
    try {
      if (s[p] === '"' || s[p] === "'") {
        quoted();
        if (s.slice(save, p).includes("\n")) return false;
      } else if (s[p] === "[" || s[p] === "{") return false;
      else scanLine(false);
      while (ws(s[p])) p++;
      return s[p] === ":" && gap(p + 1);
    } catch {
      return false;
    } finally {
      p = save;
    }
  }

  function value(parent) { // a scalar or a flow collection on this line, then the next content
    if (s[p] === "|" || s[p] === ">") return blockScalar(parent);
    if (dash()) fail("a sequence cannot start on the line of its key");
    const v = s[p] === "[" || s[p] === "{" ? flow()
      : s[p] === '"' || s[p] === "'" ? quoted() : plain(parent, false);
    lineEnd();
    skipBlank();
    return v;
  }

  function mapping(c) {
    const out = {};
    for (;;) {
      if (!keyAhead()) {
        fail(`expected a key (name: value)${dash() ? ", found a sequence item" : ""}`);
      }
      const at = p;
      const key = s[p] === '"' || s[p] === "'" ? quoted() : (checkStart(), scanLine(false));
      if (key === "<<" && s[at] === "<") fail("merge keys (<<) are not supported", at);
      if (Object.hasOwn(out, key)) fail(`duplicate key ${quote(key)}`, at);
      p = s.indexOf(":", p) + 1;
      while (ws(s[p])) p++;
      let v = null;
      if (s[p] === "\n" || s[p] === "#") { // the value is on the lines below, or empty
        skipBlank();
        if (!done() && col() === c && dash()) v = sequence(c);
        else if (!done() && col() > c) v = node(c);
      } else v = value(c);
      put(out, key, v);
      if (done() || col() < c) return out;
      if (col() > c) fail("bad indentation");
    }
  }

  function sequence(c) {
    const out = [];
    while (!done() && col() === c && dash()) {
      p++;
      while (ws(s[p])) p++;
      if (s[p] === "\n" || s[p] === "#") {
        skipBlank();
        out.push(!done() && col() > c ? node(c) : null);
      } else out.push(node(c));
      if (!done() && col() > c) fail("bad indentation");
    }
    return out;
  }

  function node(parent) { // the block node at p; its column is its indentation
    if (dash()) return sequence(col());
    if (s[p] === "?" && gap(p + 1)) fail("complex keys (? key) are not supported");
    return keyAhead() ? mapping(col()) : value(parent);
  }

  skipBlank();
  if (s[p] === "%") fail("directives (%YAML, %TAG) are not supported");
  if (marker() && s[p] === "-") {
    p += 3;
    while (ws(s[p])) p++;
    if (s[p] === "\n" || s[p] === "#") skipBlank();
  }
  const result = done() ? null : node(-1);
  if (marker() && s[p] === ".") {
    p += 3;
    lineEnd();
    skipBlank();
  }
  if (p < s.length) fail(marker() ? "multiple documents are not supported" : "bad indentation");
  return result;
}
