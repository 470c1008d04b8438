"""Why a run waited, in headless Chromium against the console cluster: a run
a namespace limit held shows the limit, how long it waited and what the
limit had used then, on its page and in the Runs list (ellipsised there,
the whole text its tooltip); a fire a ``buffer_one`` job kept while a run
of it was in flight shows the run it was buffered behind, a link to that
run's page. Nothing wider than the viewport, no console error.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_console_layout import LAYOUT_JS
from tests.support.console import Console, goto, open_page, shot
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

NAMESPACE = "gates-e2e"
LIMIT = "gates-slow"  # one start every 2 s for a job that fires every second


def runs_of(console: Console, job: dict[str, Any]) -> list[dict[str, Any]]:
    return console.api("GET", f"/v1/jobs/{job['id']}/runs?limit=200")[1]["items"]


def fmt_ms(ms: int) -> str:
    """As the console writes a duration (``dom.js`` ``fmtMs``)."""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


@pytest.fixture
def limited(console: Console):
    """A job every second held by a namespace limit of one start every 2 s."""
    status, limit = console.api("POST", "/v1/limits", {
        "name": LIMIT, "match": {"namespace": NAMESPACE}, "rate": 0.5})
    assert status == 201, limit
    url = console.jobs["billing-heartbeat"]["target"]["url"]
    status, job = console.api("POST", "/v1/jobs", {
        "name": "limited", "namespace": NAMESPACE, "schedule": {"kind": "interval", "every": 1},
        "target": {"kind": "http", "url": url}})
    assert status == 201, job
    yield job
    console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")
    console.api("DELETE", f"/v1/limits/{LIMIT}")


@pytest.fixture
def buffered(console: Console):
    """A ``buffer_one`` container job every 2 s whose runs take 5 s."""
    status, job = console.api("POST", "/v1/jobs", {
        "name": "buffered", "namespace": "ops", "schedule": {"kind": "interval", "every": 2},
        "concurrency": "buffer_one", "retry": {"max_attempts": 1},
        "target": {"kind": "container", "image": "unused", "selector": {"kind": "host"},
                   "timeout": 60, "command": ["sleep", "5"]}})
    assert status == 201, job
    yield job
    console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


def test_a_run_held_by_a_limit_shows_the_limit_and_its_wait(console, browser, limited,
                                                             tmp_path):
    def held() -> dict[str, Any] | None:
        done = [r for r in runs_of(console, limited) if r["status"] == "succeeded"
                and ((r["gate"] or {}).get("limit") or {}).get("waited_ms", 0) > 0]
        return done[0] if done else None
    run = wait_for(held, 40, "a run that waited on the limit, then succeeded")
    limit = run["gate"]["limit"]
    assert limit["name"] == LIMIT and limit["reason"].startswith(f"waiting on limit {LIMIT}: ")
    detail = limit["reason"].split(": ", 1)[1]  # "1 of 1 starts in the last 2 s"
    words = f"held by limit {LIMIT} {fmt_ms(limit['waited_ms'])} ({detail})"

    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        goto(page, console, f"runs/{run['id']}")
        page.wait_for_selector("#run-gate-text .gate")
        assert page.inner_text("#run-gate-text") == words
        assert page.evaluate(LAYOUT_JS) == []
        shot(page, "390-run-limit", console.shots)
        watch.assert_clean()
    finally:
        context.close()

    context, page, watch = open_page(browser, console, console.admin, width=1440, height=900)
    try:
        goto(page, console, f"runs?status=succeeded&namespace={NAMESPACE}&since=-15m")
        cell = page.locator(f"#runs-list tr:has(a[href='#/runs/{run['id']}']) "
                            "td[data-label=Gate] .v")
        cell.wait_for()
        assert cell.inner_text() == words
        # Ellipsised in the table: the whole text is its tooltip, and shows on focus.
        assert cell.get_attribute("title") == words
        assert cell.evaluate("(v) => v.scrollWidth > v.clientWidth")
        cell.focus()
        assert cell.evaluate("(v) => getComputedStyle(v).whiteSpace") == "normal"
        assert page.evaluate(LAYOUT_JS) == []
        shot(page, "1440-runs-limit", console.shots)
        watch.assert_clean()
    finally:
        context.close()


def test_a_buffered_run_shows_the_run_it_was_buffered_behind(console, browser, buffered,
                                                              tmp_path):
    def kept() -> dict[str, Any] | None:
        for r in runs_of(console, buffered):
            gate = r["gate"] or {}
            behind = (gate.get("buffered") or {}).get("behind") or gate.get("buffered_behind")
            if r["status"] != "skipped" and behind:
                return r
        return None
    run = wait_for(kept, 40, "a fire kept in the buffer")
    gate = run["gate"]
    [blocker] = (gate.get("buffered") or {}).get("behind") or gate["buffered_behind"]
    blocker_run = console.api("GET", f"/v1/runs/{blocker}")[1]
    assert blocker_run["job_id"] == buffered["id"]

    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        goto(page, console, f"runs/{run['id']}")
        link = page.locator(f"#run-gate-text a[data-run='{blocker}']")
        link.wait_for()
        text = page.inner_text("#run-gate-text")
        assert text.startswith("buffered behind run of "), text
        assert link.inner_text() == "run of " + blocker_run["scheduled_for"].replace(
            "T", " ").removesuffix("Z").split(".")[0]
        assert page.evaluate(LAYOUT_JS) == []
        shot(page, "390-run-buffered", console.shots)
        link.click()
        page.wait_for_selector(f"#run-head .name[title='{blocker}']")
        assert page.url.endswith(f"#/runs/{blocker}")
        watch.assert_clean()
    finally:
        context.close()

    context, page, watch = open_page(browser, console, console.admin, width=1440, height=900)
    try:
        goto(page, console, f"jobs/{buffered['id']}")
        cell = page.locator(f"#job-runs tr:has(a[href='#/runs/{run['id']}']) "
                            "td[data-label=Gate] .v")
        cell.wait_for()
        assert cell.inner_text().startswith("buffered behind run of ")
        assert cell.get_attribute("title") == cell.inner_text()
        assert page.evaluate(LAYOUT_JS) == []
        shot(page, "1440-job-buffered", console.shots)
        watch.assert_clean()
    finally:
        context.close()
