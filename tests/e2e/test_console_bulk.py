"""Bulk actions on the jobs list, in headless Chromium, checked through the
API: on the selected jobs or on every job the filter matches, with the count
in the confirmation (red only for delete): pause, resume, trigger, replay the
failed runs of the last hour, delete. A read-only token sees no selection and
no bulk action.
"""

from __future__ import annotations

import pytest

from tests.support.console import goto, open_page, until
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")


@pytest.fixture
def admin_page(browser, console):
    context, page, watch = open_page(browser, console, console.admin)
    yield page, watch
    watch.assert_clean()
    context.close()


def filtered(page, console, q: str, count: int) -> None:
    goto(page, console, f"jobs?q={q}")
    until(page, f"document.querySelectorAll('#jobs-list input.pick').length === {count}")


def bulk(page, action: str) -> tuple[str, str]:
    """Click a bulk action and confirm it: the dialog's title and OK button class."""
    page.click(f"#bulk button[data-action=bulk-{action}]")
    page.wait_for_selector("dialog#confirm[open]")
    seen = page.inner_text("#confirm-title"), page.get_attribute("#confirm-ok", "class")
    page.click("#confirm-ok")
    return seen


def test_pause_and_resume_a_selection_and_a_filter(console, admin_page):
    page, watch = admin_page
    names = [f"billing-report-2{i}" for i in range(10)]
    ids = [console.jobs[n]["id"] for n in names]
    filtered(page, console, "billing-report-2", 10)
    page.check(f"#jobs-list input.pick[value='{ids[0]}']")
    page.check(f"#jobs-list input.pick[value='{ids[1]}']")
    assert page.inner_text("#bulk-count") == "2 selected"
    assert bulk(page, "pause") == ("Pause 2 job(s)?", "primary")
    wait_for(lambda: [console.api("GET", f"/v1/jobs/{i}")[1]["paused"] for i in ids[:3]]
             == [True, True, False], 10, "two paused, the third not")
    page.check("#bulk-page")
    assert page.inner_text("#bulk-count") == "10 selected"
    page.select_option("#bulk-scope", "filter")
    assert bulk(page, "resume") == ("Resume 10 job(s)?", "primary")
    wait_for(lambda: not any(console.api("GET", f"/v1/jobs/{i}")[1]["paused"] for i in ids),
             10, "all ten resumed")
    page.select_option("#bulk-scope", "selected")
    page.uncheck("#bulk-page")
    assert page.inner_text("#bulk-count") == "0 selected"


def test_trigger_a_selection_and_replay_the_failed_runs_of_a_filter(console, admin_page):
    page, watch = admin_page
    job = console.jobs["search-index-20"]
    filtered(page, console, "search-index-20", 1)
    page.check("#bulk-page")
    assert bulk(page, "trigger") == ("Trigger 1 job(s)?", "primary")
    wait_for(lambda: any(r["origin"] == "trigger" for r in console.api(
        "GET", f"/v1/jobs/{job['id']}/runs")[1]["items"]), 15, "the triggered run")
    broken = console.jobs["search-broken"]["id"]
    failed = console.api("GET", f"/v1/runs?status=failed,lost&since=-1h&job={broken}"
                                "&limit=1000")[1]["items"]
    filtered(page, console, "search-broken", 1)
    page.select_option("#bulk-scope", "filter")
    title, cls = bulk(page, "replay")
    assert title.startswith("Replay ") and cls == "primary"
    assert int(title.split()[1]) >= len(failed) > 0
    wait_for(lambda: console.api("GET", f"/v1/runs/{failed[-1]['id']}")[1]["origin"]
             == "replay", 20, "the oldest failed run replayed")


def test_delete_every_job_a_filter_matches(console, admin_page):
    page, watch = admin_page
    url = console.jobs["ops-actions"]["target"]["url"]
    made = [console.api("POST", "/v1/jobs", {
        "name": f"bulk-gone-{i}", "namespace": "ops", "schedule": {"kind": "interval", "every": 3600},
        "target": {"kind": "http", "url": url}})[1] for i in range(3)]
    filtered(page, console, "bulk-gone-", 3)
    page.select_option("#bulk-scope", "filter")
    assert bulk(page, "delete") == ("Delete 3 job(s)?", "danger")
    wait_for(lambda: all(console.api("GET", f"/v1/jobs/{j['id']}")[0] == 404 for j in made),
             10, "all three deleted")
    until(page, "document.querySelectorAll('#jobs-list tr.empty').length === 1")


def test_a_read_only_token_has_no_bulk_action(console, browser):
    context, page, watch = open_page(browser, console, console.viewer)
    try:
        goto(page, console, "jobs")
        page.wait_for_selector("#jobs-list tbody tr")
        assert page.locator("#bulk").count() == 0
        assert page.locator("#jobs-list input.pick").count() == 0
        watch.assert_clean()
    finally:
        context.close()


def test_replay_the_failed_runs_the_runs_filter_shows(console, admin_page):
    page, watch = admin_page
    refused = console.jobs["search-refused"]["id"]
    goto(page, console, f"runs?status=failed&since=-1h&job={refused}")
    page.wait_for_selector("#runs-replay:not([hidden])")
    shown = len(page.locator("#runs-list tbody tr:not(.empty)").all())
    oldest = page.locator("#runs-list a.run-link").last.get_attribute("href").split("/")[-1]
    title, cls = bulk_button(page, "#runs-replay")
    assert title == f"Replay {shown} run(s)?" and cls == "primary"
    wait_for(lambda: console.api("GET", f"/v1/runs/{oldest}")[1]["origin"] == "replay",
             20, "the shown runs replayed")


def bulk_button(page, selector: str) -> tuple[str, str]:
    page.click(selector)
    page.wait_for_selector("dialog#confirm[open]")
    seen = page.inner_text("#confirm-title"), page.get_attribute("#confirm-ok", "class")
    page.click("#confirm-ok")
    return seen
