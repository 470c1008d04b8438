"""The console's YAML module (``ui/yaml.js``), loaded in headless Chromium
from the console's own origin: what it emits reads back as the same value,
both to it and to PyYAML (what ``cronman jobs apply`` reads job files with);
it reads what PyYAML writes, the console seed's job specs among them, and
hand-written job files; what it refuses is named with its line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from cronman.cli.output import to_yaml
from tests.support.console import LONG_NAME, goto, open_page, seed_specs
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

# Values are passed and returned as JSON text: a "__proto__" key stays a key.
RUN_JS = """async ([op, items]) => {
  const m = await import("/ui/yaml.js");
  return items.map((item) => {
    try {
      const out = op === "emit" ? m.emit(JSON.parse(item)) : JSON.stringify(m.parse(item));
      return { out };
    } catch (err) {
      return { error: err.message, line: err.line ?? null };
    }
  });
}"""

TRICKY_STRINGS = [
    "yes", "no", "on", "off", "Yes", "ON", "y", "n", "true", "False", "null", "Null", "~", "",
    " lead", "trail ", " both ", "a: b", "a:b", "ends:", "#hash", "a #b", "a#b", "-", "- x", "-c",
    "--verbose", "?", "?x", ":x", "12", "-7", "1.5", ".5", "1e3", "0o17", "0x1F", "012", "1_000",
    "1:30", ".inf", "-.inf", ".nan", "2026-01-01", "2026-11-13T04:13:22Z", "*/5 * * * *",
    "0 7 * * *", "&anchor", "*alias", "!tag", "%dir", "@at", "`tick", "|pipe", ">gt", "'single",
    '"double', "[x]", "{x}", "a, b", "a,b", "---", "...", "=", "<<", "tab\there", "line\nbreak",
    "ends with newline\n", "two newlines\n\n", "\nleading newline", " indented\nfirst line",
    "a\n  b\n\n  c  \n", "trail\n  ", "cr\r\nlf", "\x00\x01\x7f\x85", "\u2028\u2029\ufeff",
    "é ünïcødé ✓ 日本", "emoji 😀", 'quote " and \' and \\ backslash', "http://127.0.0.1:80/a?b=c#d",
    "word " * 40, LONG_NAME, "\t",
]
TRICKY_VALUES: list[Any] = [
    *TRICKY_STRINGS, 0, -1, 1.5, -0.25, 1e21, 5e-7, 2**53, True, False, None, [], {}, [[]], [{}],
    {"yes": "a key that looks like a boolean", "1": "numeric key",
     "a: b": "colon key", "__proto__": {"x": 1}, "-": [1, [2, [3, []]], {"d": None}]},
    [{"kind": "http", "headers": {"X-A": "1"}}, [["deep"]], {"list": [{"a": [1, {"b": []}]}]}],
    {"command": ["sh", "-c", "echo out; echo err >&2; exit 3"], "body": "line 1\nline 2\n"},
]

HAND_WRITTEN = """\
# billing export, applied with `cronman jobs apply -f`
---
name: nightly-export     # the job's name
namespace: 'billing'
"labels": {team: billing, "tier": "1"}
schedule:
  kind: cron
  cron: "0 3 * * *"
  timezone: Europe/Berlin
paused: false
priority: -3
jitter: 1.5
target:
  kind: http
  url: http://127.0.0.1:9/export?format=csv
  method: POST
  headers:
    Content-Type: application/json
    'X-Quote': "it's \\"quoted\\"\\t\\u00e9"
  body: |
    {"since": "yesterday",
     "rows": 100}
  # a comment between keys
retry:
  max_attempts: 3
notes: >-
  a folded paragraph
  that joins its lines

  and keeps a blank one
keep: |+
  kept

script: |-
  echo one
    echo indented
command: [sh, -c,
  'echo "a, b"', {x: [1, 2]}]
steps:
- name: first
  args: [--fast]
- name: second
  args:
    - --slow
    - - nested
      - list
-  plain: a long value
     that goes on
empty:
nothing: ~
...
"""

HAND_WRITTEN_VALUE = {
    "name": "nightly-export", "namespace": "billing",
    "labels": {"team": "billing", "tier": "1"},
    "schedule": {"kind": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin"},
    "paused": False, "priority": -3, "jitter": 1.5,
    "target": {"kind": "http", "url": "http://127.0.0.1:9/export?format=csv", "method": "POST",
               "headers": {"Content-Type": "application/json",
                           "X-Quote": "it's \"quoted\"\t\u00e9"},
               "body": '{"since": "yesterday",\n "rows": 100}\n'},
    "retry": {"max_attempts": 3},
    "notes": "a folded paragraph that joins its lines\nand keeps a blank one",
    "keep": "kept\n\n",
    "script": "echo one\n  echo indented",
    "command": ["sh", "-c", 'echo "a, b"', {"x": [1, 2]}],
    "steps": [{"name": "first", "args": ["--fast"]},
              {"name": "second", "args": ["--slow", ["nested", "list"]]},
              {"plain": "a long value that goes on"}],
    "empty": None, "nothing": None,
}

# (YAML, the line named, what the message says)
REFUSED = [
    ("name: a\nschedule:\n  kind: cron\n  cron: &c '0 3 * * *'\n", 4,
     "anchors and aliases are not supported"),
    ("a: 1\nb:\n  - x\n  - *a\n", 4, "anchors and aliases are not supported"),
    ("a: !!str 1\n", 1, "tags are not supported"),
    ("%YAML 1.2\n---\na: 1\n", 1, "directives"),
    ("a: 1\n---\nb: 2\n", 2, "multiple documents are not supported"),
    ("schedule:\n    kind: cron\n  cron: '0 3 * * *'\n", 3, "bad indentation"),
    ("name: a\n  namespace: b\n", 2, "bad indentation of a mapping key"),
    ("target:\n  kind: http\n url: x\n", 3, "bad indentation"),
    ("a:\n\tb: 1\n", 2, "a tab cannot indent"),
    ("a: 1\nb: [1, 2,\n  3\n", 2, 'this "[" is not closed'),
    ("a: 1\nb: 'open\n\nc: 2\n", 2, "single-quoted string is not closed"),
    ("a: 1\na: 2\n", 2, 'duplicate key "a"'),
    ("a: 1\npaused: yes\n", 2, 'write true, or "yes" for the text'),
    ("every: 1:30\n", 1, "90 in YAML 1.1"),
    ("cron: */5 * * * *\n", 1, 'a value that starts with "*" must be quoted'),
    ("base: {a: 1}\n<<: {b: 2}\n", 2, "merge keys"),
    ("? complex\n: key\n", 1, "complex keys"),
    ("x: .inf\n", 1, "not a JSON number"),
    ("a: b: c\n", 1, "unexpected"),
    ("- a\nb: c\n", 2, "bad indentation"),
    ('a: "\\q"\n', 1, "unknown escape"),
]


def run(page: Any, op: str, items: list[str]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = page.evaluate(RUN_JS, [op, items])
    return result


def emit_all(page: Any, values: list[Any]) -> list[str]:
    out = run(page, "emit", [json.dumps(v) for v in values])
    assert all("out" in r for r in out), [r for r in out if "out" not in r]
    return [r["out"] for r in out]


def parse_all(page: Any, texts: list[str]) -> list[Any]:
    out = run(page, "parse", texts)
    failed = [(t, r) for t, r in zip(texts, out, strict=True) if "out" not in r]
    assert failed == []
    return [json.loads(r["out"]) for r in out]


def utf16(value: Any) -> Any:
    """``value`` with JSON's surrogate pairs (\\ud83d\\ude00) joined, as a
    JavaScript string holds them; PyYAML keeps them as two code points."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    if isinstance(value, list):
        return [utf16(v) for v in value]
    if isinstance(value, dict):
        return {k: utf16(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def page(console, browser):
    context, page, watch = open_page(browser, console, console.admin)
    goto(page, console, "jobs")  # the console's origin: its CSP lets the module load
    yield page
    watch.assert_clean()
    context.close()


@pytest.fixture(scope="module")
def specs() -> list[dict[str, Any]]:
    with Receiver() as rx:
        return seed_specs(rx, "http://127.0.0.1:9/gone")


def test_what_it_emits_reads_back_the_same_here_and_in_pyyaml(page, specs):
    values = [*TRICKY_VALUES, {"": "empty key"}, {"values": TRICKY_VALUES}, *specs]
    texts = emit_all(page, values)
    assert parse_all(page, texts) == values
    # What the console shows may be pasted into a job file for `cronman jobs apply`.
    assert [yaml.safe_load(t) for t in texts] == values
    by_value = dict(zip(TRICKY_STRINGS, texts, strict=False))
    # Bare where that is safe, as people write it; quoted where PyYAML would read otherwise.
    assert by_value["0 7 * * *"] == "0 7 * * *\n" and by_value["-c"] == "-c\n"
    assert by_value["yes"] == '"yes"\n' and by_value["1:30"] == '"1:30"\n'
    assert by_value["line\nbreak"] == "|-\n  line\n  break\n"
    assert emit_all(page, [[], {}, {"a": [], "b": {}}]) == ["[]\n", "{}\n", "a: []\nb: {}\n"]


def test_it_reads_what_pyyaml_writes(page, specs):
    cases = []
    for spec in [*specs, {"values": TRICKY_VALUES}]:
        cases += [(yaml.safe_dump(spec), spec), (yaml.safe_dump(spec, width=24, indent=4), spec),
                  (yaml.safe_dump(spec, default_flow_style=True, width=40), spec)]
        # JSON is YAML too, read as PyYAML reads it: 1e+21 is text to YAML 1.1.
        text = json.dumps(spec, indent=2)
        cases.append((text, utf16(yaml.safe_load(text))))
        # cronman's -o yaml writes non-ASCII raw, and PyYAML the line separators
        # too, which YAML 1.1 reads as line breaks and YAML 1.2 does not.
        if not any(c in json.dumps(spec, ensure_ascii=False) for c in "\x85\u2028\u2029"):
            cases.append((to_yaml(spec), spec))
    assert parse_all(page, [t for t, _ in cases]) == [v for _, v in cases]
    for style in ("'", '"', "|", ">"):
        text = yaml.safe_dump(TRICKY_STRINGS, default_style=style)
        assert parse_all(page, [text]) == [TRICKY_STRINGS], style


def test_it_reads_a_hand_written_job_file(page):
    assert parse_all(page, [HAND_WRITTEN]) == [HAND_WRITTEN_VALUE]
    assert yaml.safe_load(HAND_WRITTEN) == HAND_WRITTEN_VALUE  # as `cronman jobs apply` reads it
    flow = '{"name": "j", "schedule": {kind: interval, every: 60}, "target": [1, 2.5, true, null]}'
    assert parse_all(page, [flow, "", "# only a comment\n"]) == [
        {"name": "j", "schedule": {"kind": "interval", "every": 60},
         "target": [1, 2.5, True, None]}, None, None]
    # Where PyYAML reads text and YAML 1.2 a number, text (the API then says
    # at the field that a number was wanted), as `cronman jobs apply` reads it.
    odd = "a: 1e3\nb: 0o17\nc: -.5\nd: 0x1F\ne: 007\n"
    assert parse_all(page, [odd]) == [yaml.safe_load(odd)] == [
        {"a": "1e3", "b": "0o17", "c": "-.5", "d": 31, "e": 7}]


def test_what_it_refuses_is_named_with_its_line(page):
    out = run(page, "parse", [text for text, _, _ in REFUSED])
    for (text, line, words), got in zip(REFUSED, out, strict=True):
        assert "error" in got, (text, got)
        assert got["line"] == line and got["error"].startswith(f"line {line}: "), (text, got)
        assert words in got["error"], (text, got)
