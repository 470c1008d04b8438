"""Creating and editing jobs in the console, in headless Chromium, checked
through the API: the API's own validation shown at the field its 400 names,
the JSON and YAML views and the form editing one definition (a YAML error
named at its line blocks the review), a diff before saving, and
the version check: a change saved by someone else meanwhile is shown (409),
not overwritten; kept on top of it, only this edit's change is written. A
read-only token gets no editor.
"""

from __future__ import annotations

import pytest

from tests.support.console import expect_error, goto, open_page, shot, until

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")


@pytest.fixture
def admin_page(browser, console):
    context, page, watch = open_page(browser, console, console.admin)
    yield page, watch
    watch.assert_clean()
    context.close()


def review_and_save(page) -> str:
    page.click("#job-review-button")
    page.wait_for_selector("#job-diff")
    diff = page.inner_text("#job-diff")
    page.click("#job-save")
    return diff


def test_create_a_job_with_the_apis_validation_at_the_field(console, admin_page):
    page, watch = admin_page
    goto(page, console, "jobs")
    page.click("#job-new")
    page.wait_for_selector("#job-json")
    page.fill("#f-name", "made-in-console")
    page.fill("#f-namespace", "ops")
    page.fill("#f-schedule-cron", "61 * * * *")
    page.fill("#f-target-url", console.jobs["ops-actions"]["target"]["url"])
    review_and_save(page)
    page.wait_for_selector("#f-schedule-cron[aria-invalid=true]")
    error = page.inner_text(".field-error[data-for='schedule.cron']")
    assert error.startswith("schedule.cron"), error
    assert console.api("GET", "/v1/jobs?name=made-in-console")[1]["items"] == []
    expect_error(watch, 400)
    shot(page, "edit-error", console.shots)
    page.fill("#f-schedule-cron", "*/5 * * * *")
    # The JSON view edits the same definition: a label added there is saved too.
    definition = page.input_value("#job-json")
    assert '"cron": "*/5 * * * *"' in definition
    page.fill("#job-json", definition.replace('"name": "made-in-console",',
                                              '"name": "made-in-console",\n'
                                              '  "labels": {"made": "console"},'))
    diff = review_and_save(page)
    assert '+ "name": "made-in-console",' in diff.replace("  ", " ") or \
        '"name": "made-in-console"' in diff
    page.wait_for_selector("#job-actions")
    made = console.api("GET", "/v1/jobs?name=made-in-console")[1]["items"]
    assert len(made) == 1 and made[0]["namespace"] == "ops"
    assert made[0]["schedule"]["cron"] == "*/5 * * * *" and made[0]["labels"] == {"made": "console"}
    assert page.url.endswith(f"#/jobs/{made[0]['id']}")
    console.api("DELETE", f"/v1/jobs/{made[0]['id']}")


YAML_JOB = """\
# made in the console's YAML view
name: made-in-yaml
namespace: ops
labels: {made: yaml, tier: %s}
schedule:
  kind: cron
  cron: "%s"    # quoted: a plain value cannot start with "*"
  timezone: Europe/Berlin
target:
  kind: http
  url: %s
  method: POST
  body: |
    line one
    line two
retry:
  max_attempts: 2
"""


def test_create_a_job_in_the_yaml_view(console, admin_page):
    page, watch = admin_page
    goto(page, console, "jobs")
    page.click("#job-new")
    page.wait_for_selector("#job-json")
    page.click("#job-format-yaml")
    page.wait_for_selector("#job-yaml")
    assert page.is_hidden("#job-json")
    assert "schedule:\n  kind: cron\n" in page.input_value("#job-yaml")
    # The choice is remembered: the editor opens on YAML from now on.
    goto(page, console, "new")
    page.wait_for_selector("#job-yaml")
    assert page.get_attribute("#job-format-yaml", "aria-pressed") == "true"
    # A text that does not parse says where, and nothing can be reviewed or switched.
    page.fill("#job-yaml", "name: x\nschedule:\n  kind: cron\n  cron: &c '0 3 * * *'\n")
    assert page.inner_text("#job-yaml-error") == \
        "not YAML: line 4: anchors and aliases are not supported"
    assert page.is_disabled("#job-review-button") and page.is_disabled("#job-format-json")
    shot(page, "edit-yaml-error", console.shots)
    # Pasted YAML fills the form; the API's 400 lands at the form's field.
    url = console.jobs["ops-actions"]["target"]["url"]
    page.fill("#job-yaml", YAML_JOB % ('"1"', "61 * * * *", url))
    assert page.input_value("#f-name") == "made-in-yaml"
    assert page.input_value("#f-target-url") == url
    diff = review_and_save(page)
    assert "+ name: made-in-yaml" in diff and "+   cron: 61 * * * *" in diff, diff
    page.wait_for_selector("#f-schedule-cron[aria-invalid=true]")
    assert page.inner_text(".field-error[data-for='schedule.cron']").startswith("schedule.cron")
    expect_error(watch, 400)
    # The form edits the YAML's definition, and JSON shows the same one.
    page.fill("#f-schedule-cron", "*/5 * * * *")
    assert 'cron: "*/5 * * * *"\n' in page.input_value("#job-yaml")
    page.click("#job-format-json")
    assert '"cron": "*/5 * * * *"' in page.input_value("#job-json")
    assert '"body": "line one\\nline two\\n"' in page.input_value("#job-json")
    page.click("#job-format-yaml")
    # A field the form lacks: the API's message under the YAML view.
    page.fill("#job-yaml", YAML_JOB % ("1", "*/5 * * * *", url))
    review_and_save(page)
    page.wait_for_selector("#job-yaml-error:not([hidden])")
    assert page.inner_text("#job-yaml-error").startswith("labels.tier"), \
        page.inner_text("#job-yaml-error")
    expect_error(watch, 400)
    assert console.api("GET", "/v1/jobs?name=made-in-yaml")[1]["items"] == []
    page.fill("#job-yaml", YAML_JOB % ('"1"', "*/5 * * * *", url))
    review_and_save(page)
    page.wait_for_selector("#job-actions")
    [made] = console.api("GET", "/v1/jobs?name=made-in-yaml")[1]["items"]
    assert made["namespace"] == "ops" and made["labels"] == {"made": "yaml", "tier": "1"}
    assert made["schedule"] == {"kind": "cron", "cron": "*/5 * * * *", "timezone": "Europe/Berlin"}
    assert made["target"]["method"] == "POST" and made["target"]["body"] == "line one\nline two\n"
    assert made["retry"]["max_attempts"] == 2
    assert page.url.endswith(f"#/jobs/{made['id']}")
    console.api("DELETE", f"/v1/jobs/{made['id']}")


def test_edit_shows_a_concurrent_change_instead_of_overwriting_it(console, admin_page):
    page, watch = admin_page
    job = console.jobs["search-index-05"]
    path = f"/v1/jobs/{job['id']}"
    goto(page, console, f"jobs/{job['id']}")
    page.click("#job-edit")
    until(page, "document.querySelector('#f-schedule-cron') && "
                "document.querySelector('#f-schedule-cron').value === '0 7 * * *'")
    page.fill("#f-schedule-cron", "30 6 * * *")
    # Meanwhile, someone else labels the job.
    status, theirs = console.api("PATCH", path, {"labels": {"owner": "someone-else"}})
    assert status == 200
    page.click("#job-review-button")
    diff = page.inner_text("#job-diff")
    assert "30 6 * * *" in diff and "0 7 * * *" in diff
    page.click("#job-save")
    page.wait_for_selector("#job-conflict .error-box")
    assert f"version {job['version']} → {theirs['version']}" in page.inner_text("#job-conflict")
    assert "someone-else" in page.inner_text("#job-conflict-theirs")
    expect_error(watch, 409)
    shot(page, "edit-conflict", console.shots)
    now = console.api("GET", path)[1]
    assert now["labels"] == {"owner": "someone-else"} and now["schedule"]["cron"] == "0 7 * * *"
    # Kept on top of the current version: only this edit's change is written.
    page.click("#job-rebase")
    diff = review_and_save(page)
    assert "someone-else" not in diff and "30 6 * * *" in diff
    page.wait_for_selector("#job-actions")
    now = console.api("GET", path)[1]
    assert now["labels"] == {"owner": "someone-else"} and now["schedule"]["cron"] == "30 6 * * *"
    assert now["version"] == theirs["version"] + 1


def test_a_read_only_token_gets_no_editor(console, browser):
    context, page, watch = open_page(browser, console, console.viewer)
    try:
        goto(page, console, "jobs")
        assert page.locator("#job-new").count() == 0
        goto(page, console, f"jobs/{console.jobs['search-index-06']['id']}")
        assert page.locator("#job-edit").count() == 0
        page.goto(f"{console.base}/#/new")
        page.wait_for_selector("main[data-state=error]")
        assert "may not change jobs" in page.inner_text("main")
        watch.assert_clean()
    finally:
        context.close()
