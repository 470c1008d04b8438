"""The console's Limits view in headless Chromium at 1440×900 and 390×844:
each limit's key, rate and concurrency, the attempts waiting on it now (a
job's fires held by a slow limit, counted from their runs) and who manages
it; an admin token makes, edits (the version it read) and deletes one
through the form, checked through the API, and sees a 400 name its field;
a read-only token sees the table and no action. Nothing is wider than the
viewport, no console error, no request off loopback.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_console_layout import LAYOUT_JS
from tests.support.console import Console, confirm, expect_error, goto, open_page, rows, shot, until
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

NAMESPACE = "limits-e2e"
SLOW = "e2e-slow"  # one start every 50 s: the job's fires wait on it


@pytest.fixture
def held_job(console: Console):
    """A job every second in its own namespace (no other test's fires are held)."""
    url = console.jobs["billing-heartbeat"]["target"]["url"]
    status, job = console.api("POST", "/v1/jobs", {
        "name": "held", "namespace": NAMESPACE, "schedule": {"kind": "interval", "every": 1},
        "target": {"kind": "http", "url": url}})
    assert status == 201, job
    yield job
    console.api("DELETE", f"/v1/jobs/{job['id']}")
    console.api("DELETE", f"/v1/limits/{SLOW}")


def fill(page, **values: str) -> None:
    for field, value in values.items():
        if field == "kind":
            page.select_option("#limit-kind", value)
        else:
            page.fill(f"#limit-{field}", value)


def test_an_admin_makes_edits_and_deletes_a_limit_and_sees_fires_wait_on_it(
        console, browser, held_job):
    context, page, watch = open_page(browser, console, console.admin, width=1440, height=900)
    goto(page, console, "limits")
    assert page.locator("#limit-form").count() == 1
    # Refused: the 400's field is named in the form.
    fill(page, name=SLOW, kind="namespace", value=NAMESPACE, rate="-1")
    page.click("#limit-save")
    page.wait_for_selector("#limit-form-error:not([hidden])")
    assert page.inner_text("#limit-form-error").startswith("rate: ")
    expect_error(watch, 400)
    fill(page, rate="0.02")
    page.click("#limit-save")
    page.wait_for_selector(f"#limits-table tr[data-limit='{SLOW}']")
    status, made = console.api("GET", f"/v1/limits/{SLOW}")
    assert status == 200 and (made["match"], made["rate"], made["version"]) == (
        {"namespace": NAMESPACE}, 0.02, 1), made
    # The nodes read it within a sync poll; the job's next fires wait on it.
    cell = f"#limits-table tr[data-limit='{SLOW}'] td[data-label='Waiting now']"
    until(page, f"Number((document.querySelector(\"{cell}\") || {{}}).innerText) >= 1", 40)
    assert console.api("GET", f"/v1/limits/{SLOW}")[1]["waiting"] >= 1
    [row] = [r for r in rows(page, "#limits-table") if SLOW in r]
    assert f"namespace {NAMESPACE}" in row and "0.02/s" in row and "by hand" in row
    assert page.evaluate(LAYOUT_JS) == []
    shot(page, "limits-1440", console.shots)

    page.click(f"#limits-table tr[data-limit='{SLOW}'] button[data-action=edit]")
    assert page.input_value("#limit-name") == SLOW and page.is_disabled("#limit-name")
    fill(page, concurrency="3")
    page.click("#limit-save")
    wait_for(lambda: console.api("GET", f"/v1/limits/{SLOW}")[1].get("concurrency") == 3, 10,
             "the edit")
    assert console.api("GET", f"/v1/limits/{SLOW}")[1]["version"] == 2

    page.click(f"#limits-table tr[data-limit='{SLOW}'] button[data-action=delete]")
    confirm(page)
    wait_for(lambda: console.api("GET", f"/v1/limits/{SLOW}")[0] == 404, 10, "the delete")
    page.wait_for_selector(f"#limits-table tr[data-limit='{SLOW}']", state="detached")
    watch.assert_clean()
    context.close()


def test_the_limits_view_fits_a_phone_and_a_read_only_token_sees_no_action(
        console, browser):
    status, _ = console.api("POST", "/v1/limits", {
        "name": "billing-host", "match": {"host": "billing.internal"}, "rate": 200,
        "burst": 20, "concurrency": 50})
    assert status == 201
    try:
        for token, width, height in ((console.viewer, 1440, 900), (console.admin, 390, 844),
                                     (console.viewer, 390, 844)):
            context, page, watch = open_page(browser, console, token, width=width,
                                             height=height)
            goto(page, console, "limits")
            [row] = [r for r in rows(page, "#limits-table") if "billing-host" in r]
            assert "200/s (burst 20)" in row and "50" in row
            read_only = token == console.viewer
            assert page.locator("#limit-form").count() == (0 if read_only else 1)
            assert page.locator("#limits-table button").count() == (0 if read_only else 2)
            assert page.evaluate(LAYOUT_JS) == [], (width, read_only)
            shot(page, f"limits-{width}-{'viewer' if read_only else 'admin'}", console.shots)
            watch.assert_clean()
            context.close()
    finally:
        console.api("DELETE", "/v1/limits/billing-host")
