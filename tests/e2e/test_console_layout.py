"""The console's layout in headless Chromium at a desktop, a small laptop,
a tablet and a phone width, with every kind of job (some failing, one with
a very long name) and runs of every status: nothing is wider than the
viewport, no table cell is narrower than its longest word (long values end
in an ellipsis instead, the whole value in the tooltip and on focus), the
status is always on screen, a phone or tablet gets cards, not tables, no
"null" leaks into the page; a confirmation is red only for what destroys.
Screenshots are kept in test-artifacts/layout/ (WIDTH-VIEW.png).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.browser import artifact_dir
from tests.support.console import LONG_NAME, Console, goto, open_page, shot

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

WIDTHS = {1440: 900, 1024: 768, 768: 1024, 390: 844}
EVERY_STATUS = "failed,lost,retrying,running,claimed,succeeded,skipped"

# Problems of the page's layout, as readable strings (an empty list: none).
LAYOUT_JS = """() => {
  const out = [];
  const vw = window.innerWidth;
  if (document.documentElement.scrollWidth > vw + 1) {
    out.push(`page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
  }
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "");
  // Cut by an ancestor that hides its overflow (an ellipsised value): not wider.
  const clipped = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if ((o === "hidden" || o === "clip") && p.getBoundingClientRect().right <= vw + 1) return true;
    }
    return false;
  };
  for (const wrap of document.querySelectorAll(".table-wrap")) {
    if (wrap.scrollWidth > wrap.clientWidth + 1) out.push(`table scrolls sideways: ${wrap.id || wrap.parentElement.id}`);
  }
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height || el.closest("dialog:not([open])") || clipped(el)) continue;
    if (r.right > vw + 1 || r.left < -1) out.push(`wider than the viewport: ${name(el)} ${r.left}..${r.right}`);
  }
  const canvas = document.createElement("canvas").getContext("2d");
  for (const td of document.querySelectorAll("td")) {
    const style = getComputedStyle(td);
    if (style.display !== "table-cell" || td.closest("tr.empty")) continue;
    const v = td.querySelector(".v") || td;
    if (td.classList.contains("clip")) {
      if (v.textContent && v.title !== v.textContent) out.push(`clipped without its value: ${v.textContent}`);
      continue;
    }
    const room = td.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    for (const leaf of [v, ...v.querySelectorAll("*")]) {
      if ([...leaf.childNodes].every((n) => n.nodeType !== 3)) continue;
      canvas.font = getComputedStyle(leaf).font;
      for (const word of leaf.textContent.split(/\\s+/)) {
        const w = canvas.measureText(word).width;
        if (w > room + 1) out.push(`cell narrower than "${word}": ${room} < ${w}`);
      }
    }
  }
  // No value leaked as "null", "undefined" or "[object ...]" (JSON views aside).
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest("pre, textarea")) continue;
    const t = n.textContent.trim();
    if (t === "null" || t === "undefined" || t.includes("[object ")) out.push(`stray text: ${t}`);
  }
  for (const badge of document.querySelectorAll("main .status")) {
    const r = badge.getBoundingClientRect();
    if (!r.width || r.right > vw + 1) out.push(`status off screen: ${badge.textContent}`);
  }
  return out;
}"""


def views(console: Console) -> list[tuple[str, str, str]]:
    """(label, route, what to wait for) of every view."""
    job = lambda name: f"jobs/{console.jobs[name]['id']}"  # noqa: E731
    container = console.jobs["ops-container"]["id"]
    run = console.api("GET", f"/v1/jobs/{container}/runs")[1]["items"][0]["id"]
    table = "main tbody tr"
    return [("jobs", "jobs", "#jobs-list .strip"),
            ("runs", f"runs?status={EVERY_STATUS}&since=-1h", "#runs-list tbody tr:not(.empty)"),
            ("cluster", "cluster", "#cluster-agents tbody tr:not(.empty)"),
            ("queues", "queues", "#queues-list table"),
            ("plots", "plots", "svg.chart"),
            ("job-long", job(LONG_NAME), table), ("job-failing", job("search-broken"), table),
            ("job-container", job("ops-container"), table), ("job-sqs", job("sqs-export"), table),
            ("run-container", f"runs/{run}", "#run-result"),
            ("edit", f"{job(LONG_NAME)}/edit", "#f-name"), ("new", "new", "#f-name")]


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_view_fits_the_screen(console, browser, width):
    context, page, watch = open_page(browser, console, console.admin, width=width,
                                     height=WIDTHS[width])
    try:
        problems: dict[str, list[str]] = {}
        for label, view, ready in views(console):
            goto(page, console, view)
            page.wait_for_selector(ready)
            page.wait_for_timeout(200)
            shot(page, f"{width}-{label}", artifact_dir("layout"))
            found = page.evaluate(LAYOUT_JS)
            if found:
                problems[label] = found[:8]
            if width <= 900:  # a phone or a narrow tablet: cards, not tables
                assert page.evaluate("[...document.querySelectorAll('main thead')].every("
                                     "(t) => getComputedStyle(t).display === 'none')"), label
        assert problems == {}, problems
        watch.assert_clean()
    finally:
        context.close()


def test_long_values_are_ellipsised_with_the_whole_value_on_hover_and_focus(console, browser):
    context, page, watch = open_page(browser, console, console.admin, width=1440)
    try:
        goto(page, console, "jobs?q=quarterly")
        cell = page.locator("#jobs-list td.clip .v").first
        cell.wait_for()
        assert cell.get_attribute("title") == LONG_NAME
        clipped: Any = page.evaluate("(() => { const v = document.querySelector("
                                     "'#jobs-list td.clip .v'); return [v.scrollWidth, "
                                     "v.clientWidth]; })()")
        assert clipped[0] > clipped[1]  # it is cut, not wrapped
        cell.focus()
        assert page.evaluate("getComputedStyle(document.activeElement).whiteSpace") == "normal"
        watch.assert_clean()
    finally:
        context.close()


def test_only_destructive_confirmations_are_red(console, browser):
    context, page, watch = open_page(browser, console, console.admin)
    try:
        goto(page, console, f"jobs/{console.jobs['search-index-00']['id']}")
        seen = {}
        for action in ("pause", "trigger", "delete"):
            page.click(f"#job-actions button[data-action={action}]")
            page.wait_for_selector("dialog#confirm[open]")
            seen[action] = page.get_attribute("#confirm-ok", "class")
            page.click("#confirm-cancel")
        assert seen == {"pause": "primary", "trigger": "primary", "delete": "danger"}
        assert "danger" in page.get_attribute("#job-actions button[data-action=delete]", "class")
        assert "danger" not in page.get_attribute("#job-actions button[data-action=pause]",
                                                  "class")
        watch.assert_clean()
    finally:
        context.close()
