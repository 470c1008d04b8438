"""The dashboard in headless Chromium against a real ``cronman api`` on
PostgreSQL, with a real ``cronman scheduler`` node (Redis) firing real jobs
at a local receiver: each view loads real data, the search narrows the list,
the action buttons change the job (checked through the API), a read-only
token sees no buttons; no console error and no request off loopback, ever.
Screenshots go to test-artifacts/dashboard/ (gitignored).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from cronman.timeutil import utcnow
from tests.support.browser import PageWatch
from tests.support.console import (
    DAILY,
    READY,
    confirm,
    goto,
    open_page,
    rows,
    shot,
    until,
)
from tests.support.databases import PG_HOST, PG_PORT
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def admin_page(browser, console):
    context, page, watch = open_page(browser, console, console.admin)
    yield page, watch
    watch.assert_clean()
    context.close()


def test_jobs_view_lists_real_jobs_and_the_search_narrows_it(console, admin_page):
    page, watch = admin_page
    goto(page, console, "jobs")
    first = rows(page, "#jobs-list")
    assert len(first) == 50  # a page
    assert first[0].startswith("billing-heartbeat")  # (namespace, name) order
    shot(page, "jobs")
    page.click("#jobs-next")
    until(page, "document.querySelector('#jobs-prev') && "
                           "!document.querySelector('#jobs-prev').disabled")
    total = len(console.jobs)
    until(page, f"document.querySelectorAll('#jobs-list tbody tr').length === "
                           f"{total - 50}")
    page.fill("#job-search", "search-index-1")
    until(page, "[...document.querySelectorAll('#jobs-list tbody tr')].length === 10")
    narrowed = rows(page, "#jobs-list")
    assert all(r.startswith("search-index-1") for r in narrowed), narrowed
    status, via_api = console.api("GET", "/v1/jobs?sort=name&name_prefix=search-index-1")
    assert len(narrowed) == len(via_api["items"]) == 10
    shot(page, "jobs-search")
    # The search is kept in the address.
    assert "q=search-index-1" in page.url
    page.fill("#job-search", "")
    page.fill("#job-label", "team:billing")
    until(page, "[...document.querySelectorAll('#jobs-list tbody tr')].length === 30")
    # Last run and next fire come with each job.
    page.fill("#job-label", "")
    page.fill("#job-search", "search-broken")
    until(page, "document.querySelectorAll('#jobs-list tbody tr').length === 1 && "
                "document.querySelector('#jobs-list tbody tr td').innerText === 'search-broken'")
    # Name, namespace, schedule, target, last run (status and time), next fire, state.
    cells = rows(page, "#jobs-list")[0].split("\t")
    assert cells[:4] == ["search-broken", "search", "every 1 s", "http"]
    assert re.match(r"(failed|claimed|running) \d{4}-\d\d-\d\d ", cells[4]), cells
    assert re.match(r"\d{4}-\d\d-\d\d ", cells[5]) and cells[6] == "active"


def test_job_page_shows_definition_redacted_next_fires_and_runs(console, admin_page):
    page, watch = admin_page
    job = console.jobs["billing-heartbeat"]
    goto(page, console, f"jobs/{job['id']}")
    page.wait_for_selector("#job-runs tbody tr:not(.empty)")
    page.click("#job-definition-fold summary")  # folded below the runs
    definition = page.inner_text("#job-definition")
    assert '"name": "billing-heartbeat"' in definition
    report = console.jobs["billing-report-00"]
    goto(page, console, f"jobs/{report['id']}")
    page.click("#job-definition-fold summary")
    definition = page.inner_text("#job-definition")
    assert "super-secret-value" not in definition and "Bear…" in definition
    assert len(page.locator("#next-fires li").all()) == 5
    shot(page, "job-daily")
    goto(page, console, f"jobs/{job['id']}")
    page.wait_for_selector("#job-runs tbody tr:not(.empty)")
    runs = rows(page, "#job-runs")
    done = [r.split("\t") for r in runs if "\tsucceeded\t" in r]
    assert done, runs
    # scheduled for, status, attempt, lateness, duration, origin, node, result
    assert done[0][3].endswith("ms") and done[0][4].endswith("ms") and done[0][7] == "HTTP 204"
    shot(page, "job")


def test_actions_change_the_job(console, admin_page):
    page, watch = admin_page
    job = console.jobs["ops-actions"]
    path = f"/v1/jobs/{job['id']}"
    goto(page, console, f"jobs/{job['id']}")
    # Cancelled: nothing changes.
    page.click("#job-actions button[data-action=pause]")
    page.wait_for_selector("dialog#confirm[open]")
    page.click("#confirm-cancel")
    assert console.api("GET", path)[1]["paused"] is False
    page.click("#job-actions button[data-action=pause]")
    confirm(page)
    wait_for(lambda: console.api("GET", path)[1]["paused"] is True, 10, "paused")
    page.wait_for_selector("#job-actions button[data-action=resume]")
    page.click("#job-actions button[data-action=resume]")
    confirm(page)
    wait_for(lambda: console.api("GET", path)[1]["paused"] is False, 10, "resumed")
    page.wait_for_selector("#job-actions button[data-action=pause]")
    page.click("#job-actions button[data-action=trigger]")
    confirm(page)

    def finished_trigger() -> dict[str, Any] | None:
        items = console.api("GET", f"{path}/runs")[1]["items"]
        done = [r for r in items if r["origin"] == "trigger" and r["status"] == "succeeded"]
        return done[0] if done else None

    run = wait_for(finished_trigger, 20, "the triggered run to succeed")
    page.wait_for_selector("#job-runs button[data-action=replay]", timeout=15_000)
    shot(page, "job-actions")
    page.click("#job-runs button[data-action=replay]")
    confirm(page)
    wait_for(lambda: console.api("GET", f"/v1/runs/{run['id']}")[1]["attempt"]
             > run["attempt"], 15, "the replay")
    assert console.api("GET", f"/v1/runs/{run['id']}")[1]["origin"] == "replay"
    page.click("#job-actions button[data-action=delete]")
    confirm(page)
    wait_for(lambda: console.api("GET", path)[0] == 404, 10, "deleted")
    page.wait_for_url(re.compile(r"#/jobs$"))
    page.wait_for_selector(READY)


def test_runs_view_shows_failures_across_jobs_and_filters(console, admin_page):
    page, watch = admin_page
    goto(page, console, "runs")
    page.wait_for_selector("#runs-list tbody tr:not(.empty)")
    failures = rows(page, "#runs-list")
    assert failures and all("failed" in r for r in failures), failures
    assert any("search-broken" in r and "500" in r for r in failures), failures
    shot(page, "runs")
    page.uncheck("#run-statuses input[value=failed]")
    page.uncheck("#run-statuses input[value=lost]")
    page.check("#run-statuses input[value=succeeded]")
    until(page, "document.querySelector('#runs-list tbody').innerText"
                           ".includes('billing-heartbeat')")
    page.select_option("#run-kind", "sqs")
    page.wait_for_selector("#runs-list tbody tr.empty")
    assert "status=succeeded" in page.url and "target_kind=sqs" in page.url


def test_cluster_view_shows_the_node_and_its_membership_change(console, admin_page):
    page, watch = admin_page
    goto(page, console, "cluster")
    page.wait_for_selector("#cluster-nodes tbody tr:not(.empty)")
    nodes = rows(page, "#cluster-nodes")
    assert len(nodes) == 1 and nodes[0].startswith("e2e-node-1")
    cells = page.locator("#cluster-nodes tbody tr:not(.empty) td").all_inner_texts()
    assert "ok" in [c.strip() for c in cells], cells  # live and keeping up: not overloaded
    events = rows(page, "#cluster-events")
    assert any("e2e-node-1" in e and "joined" in e for e in events), events
    assert "1 node(s)" in page.inner_text("#cluster-summary")
    # The database member this API writes to (host:port as libpq connected), since when.
    page.wait_for_selector("#cluster-database code")
    assert page.inner_text("#cluster-database code") == f"{PG_HOST}:{PG_PORT}"
    assert page.get_attribute("#cluster-database time", "datetime")
    shot(page, "cluster")


def test_plots_view_draws_live_charts(console, admin_page):
    page, watch = admin_page
    goto(page, console, "plots")
    until(page, "document.querySelectorAll('svg.chart').length === 6")
    fires = page.locator("#plots-1h svg.chart path.line.fires").first.get_attribute("d")
    assert fires and "L" in fires  # a drawn line, not the empty placeholder
    assert page.locator("#plots-1h svg.chart rect.bar").count() >= 1  # failures
    first = page.inner_text("#plots-1h figure:first-child")
    shot(page, "plots")
    # It refreshes on its own (every 10 s for the last hour).
    requests_before = sum("v1/stats/runs" in u for u in watch.requests)
    until(page, f"performance.getEntriesByType('resource').filter(e => "
                f"e.name.includes('v1/stats/runs')).length > {requests_before}", 15)
    assert first


def test_narrow_screen(console, browser):
    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        for view in ("jobs", "runs", "cluster", "plots",
                     f"jobs/{console.jobs['billing-heartbeat']['id']}"):
            goto(page, console, view)
            page.wait_for_timeout(300)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, (view, overflow)
            shot(page, f"narrow-{view.split('/')[0]}" + ("-job" if "/" in view else ""))
        watch.assert_clean()
    finally:
        context.close()


def test_read_only_token_sees_no_action_buttons(console, browser):
    context, page, watch = open_page(browser, console, console.viewer)
    try:
        job = console.jobs["billing-heartbeat"]
        goto(page, console, f"jobs/{job['id']}")
        page.wait_for_selector("#job-runs tbody tr:not(.empty)")
        assert page.locator("button[data-action]").count() == 0
        assert "read-only" in page.inner_text("#who")
        shot(page, "read-only-job")
        goto(page, console, "jobs")
        assert len(rows(page, "#jobs-list")) == 50  # it reads everything
        watch.assert_clean()
    finally:
        context.close()


def test_token_form_and_api_docs(console, browser):
    """Paste a token into the form; /docs renders the OpenAPI document offline."""
    context = browser.new_context()
    page = context.new_page()
    watch = PageWatch().attach(page)
    try:
        page.goto(f"{console.base}/#/cluster")
        page.wait_for_selector("main[data-state=error]")
        assert "token" in page.inner_text("main").lower()
        page.fill("#token", console.admin)
        page.click("#token-form button[type=submit]")
        page.wait_for_selector(READY)
        assert page.evaluate("localStorage.getItem('cronman.token')") == console.admin
        # Without a token the API answered 401 (the browser logs each as an error).
        unexpected = [e for e in watch.errors if "401" not in e]
        assert unexpected == []
        watch.errors.clear()
        page.goto(f"{console.base}/docs")
        page.wait_for_selector(".swagger-ui .info .title", timeout=20_000)
        assert "cronman" in page.inner_text(".swagger-ui .info .title")
        page.get_by_text("/v1/stats/runs", exact=True).wait_for()
        shot(page, "docs")
        watch.assert_clean()
    finally:
        context.close()


def test_job_page_shows_dependencies_and_why_runs_were_gated(console, admin_page):
    page, watch = admin_page
    rx_url = console.jobs["ops-actions"]["target"]["url"]
    _, up = console.api("POST", "/v1/jobs", {
        "name": "wf-up", "namespace": "ops", "schedule": {"kind": "interval", "every": 1},
        "target": {"kind": "http", "url": rx_url}})
    _, down = console.api("POST", "/v1/jobs", {
        "name": "wf-down", "namespace": "ops",
        "schedule": {"kind": "after", "jobs": ["wf-up"], "mode": "any"},
        "target": {"kind": "http", "url": rx_url}})
    today = utcnow().date()
    console.api("POST", "/v1/calendars", {"namespace": "ops", "name": "freeze", "dates": [
        (today + timedelta(days=d)).isoformat() for d in (-1, 0, 1)]})
    _, frozen = console.api("POST", "/v1/jobs", {
        "name": "wf-frozen", "namespace": "ops", "calendars": ["freeze"],
        "schedule": {"kind": "interval", "every": 1}, "target": {"kind": "http", "url": rx_url}})
    goto(page, console, f"jobs/{down['id']}")
    page.wait_for_selector("#job-upstream a")
    assert "ops/wf-up (after)" in page.inner_text("#job-upstream")
    assert "fired by its upstream jobs" in page.inner_text("main")
    until(page, "[...document.querySelectorAll('#job-runs tbody tr')].some("
                "(r) => r.innerText.includes('after 1 upstream run(s)'))", timeout=20)
    shot(page, "job-downstream")
    goto(page, console, f"jobs/{up['id']}")
    page.wait_for_selector("#job-downstream a")
    assert "ops/wf-down (after)" in page.inner_text("#job-downstream")
    goto(page, console, f"jobs/{frozen['id']}")
    until(page, "[...document.querySelectorAll('#job-runs tbody tr')].some("
                "(r) => r.innerText.includes('excluded by calendar freeze'))", timeout=20)
    assert "skipped: calendar freeze" in page.inner_text("#next-fires")
    shot(page, "job-calendar")
    for job in (down, up, frozen):
        console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


def test_job_page_shows_the_policies_state(console, admin_page):
    page, watch = admin_page
    status, job = console.api("POST", "/v1/jobs", {
        "name": "guarded", "namespace": "policies", "schedule": DAILY,
        "target": {"kind": "http", "url": "http://127.0.0.1:9/ok"},
        "pause_after_failures": 2, "max_runs": 5, "concurrency": "buffer_one"})
    assert status == 201, job
    status, _ = console.api("POST", f"/v1/jobs/{job['id']}/pause",
                            {"note": "vendor maintenance"})
    assert status == 200
    goto(page, console, f"jobs/{job['id']}")
    page.wait_for_selector("#job-actions button[data-action=resume]")
    facts = page.inner_text("dl.facts")
    assert "vendor maintenance" in facts and "5 of 5" in facts
    assert "0 (pauses at 2)" in facts
    assert page.inner_text("h1 .status") == "paused"
    shot(page, "job-policies")
    console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")
