// The job editor's definition panel: the whole definition as JSON or as
// YAML (a switch, remembered in this browser), read and written as one
// object, so the form and either view edit the same definition. A text that
// does not parse shows why under the view, at its line for YAML, and reads
// as null until it is fixed; the switch waits for it too.

import { h } from "./dom.js";
import { emit, parse } from "./yaml.js";

const FORMAT_KEY = "cronman.editor.format";
const FORMATS = {
  json: { label: "JSON", read: JSON.parse, write: (def) => JSON.stringify(def, null, 2) },
  yaml: { label: "YAML", read: parse, write: emit },
};

function storedFormat() {
  try {
    return window.localStorage.getItem(FORMAT_KEY) === "yaml" ? "yaml" : "json";
  } catch {
    return "json"; // storage refused (a private window's policy): JSON, as before
  }
}

/**
 * The panel: ``element``; ``read()`` the definition or null; ``write(def)``;
 * ``text(def)`` in the format shown (for diffs); ``showError(message)`` under
 * the view shown. ``onEdit`` runs on each change of the text or the format.
 */
export function definitionPanel(onEdit) {
  let format = storedFormat();
  const views = {};
  const buttons = {};
  for (const [key, { label }] of Object.entries(FORMATS)) {
    const text = h("textarea", { id: `job-${key}`, class: "definition", spellcheck: "false",
                                 "aria-label": `definition (${label})`, rows: 22 });
    text.addEventListener("input", onEdit);
    views[key] = { text, error: h("p", { class: "field-error", id: `job-${key}-error`, hidden: true }) };
    buttons[key] = h("button", { class: "btn small", type: "button", id: `job-format-${key}`,
                                 text: label, onclick: () => choose(key) });
  }

  function shown() {
    for (const key of Object.keys(FORMATS)) {
      views[key].text.hidden = key !== format;
      views[key].error.hidden = true;
      buttons[key].setAttribute("aria-pressed", String(key === format));
    }
  }

  function showError(message) {
    const { error } = views[format];
    error.textContent = message;
    error.hidden = !message;
  }

  function read() {
    let def = null;
    try {
      def = FORMATS[format].read(views[format].text.value);
      if (def === null || typeof def !== "object" || Array.isArray(def)) {
        throw new Error("the definition must be an object of its fields (name, schedule, target…)");
      }
      showError("");
    } catch (err) {
      showError(`not ${FORMATS[format].label}: ${err.message}`);
      def = null;
    }
    for (const [key, button] of Object.entries(buttons)) button.disabled = !def && key !== format;
    return def;
  }

  function write(def) {
    views[format].text.value = FORMATS[format].write(def);
    read();
  }

  function choose(key) {
    const def = read();
    if (key === format || !def) return;
    format = key;
    try {
      window.localStorage.setItem(FORMAT_KEY, key);
    } catch {
      // not remembered; the switch still works
    }
    shown();
    write(def);
    onEdit();
  }

  shown();
  const element = h("div", { class: "definition-panel" },
    h("div", { class: "definition-head" }, h("h2", { text: "Definition" }),
      h("div", { class: "switch", role: "group", "aria-label": "definition format" },
        buttons.json, buttons.yaml)),
    Object.values(views).map((v) => [v.text, v.error]));
  return { element, read, write, showError, text: (def) => FORMATS[format].write(def) };
}
