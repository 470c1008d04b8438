"""A run's page and each job's history at a glance, in headless Chromium
against the console cluster: a container run's exit code and its stdout and
stderr apart, an HTTP failure's status and answer, a workflow run's gate
and the upstream run it consumed; replay from the page (checked through the
API); the strips of coloured cells and the success rate on the jobs list
and the job page; a read-only token sees no action.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronman.timeutil import utcnow
from tests.support.console import FAIL_BODY, Console, confirm, goto, open_page, shot, until
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

CANCEL = "/v1/runs/{run_id}/cancel"


@pytest.fixture
def admin_page(browser, console):
    context, page, watch = open_page(browser, console, console.admin)
    yield page, watch
    watch.assert_clean()
    context.close()


def ended_run(console: Console, job: str, status: str, timeout: float = 30) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        items = console.api("GET", f"/v1/jobs/{console.jobs[job]['id']}/runs")[1]["items"]
        done = [r for r in items if r["status"] == status]
        return done[0] if done else None
    return wait_for(find, timeout, f"a {status} run of {job}")


def test_a_container_runs_page_shows_its_exit_code_and_both_streams_and_replays(
        console, admin_page):
    page, watch = admin_page
    run = ended_run(console, "ops-container", "failed")
    goto(page, console, f"jobs/{console.jobs['ops-container']['id']}")
    page.click(f"#job-runs a[href='#/runs/{run['id']}']")
    page.wait_for_selector("#run-stdout")
    assert page.url.endswith(f"#/runs/{run['id']}")
    assert page.inner_text("#run-result") == "exit 3"
    assert page.inner_text("#run-stdout").strip() == "out-line"
    assert page.inner_text("#run-stderr").strip() == "err-line"
    assert page.inner_text("#run-attempt-no") == f"{run['attempt']} of at most 1"
    assert "ops/ops-container" in page.inner_text("#run-job")
    assert "nothing held this run back" in page.inner_text("#run-gate-text")
    shot(page, "run-container", console.shots)
    # Cancel is offered exactly when the API has it (and only while the run runs).
    has_cancel = CANCEL in console.api("GET", "/openapi.json")[1]["paths"]
    assert page.locator("#run-actions button[data-action=cancel]").count() == 0
    page.click("#run-actions button[data-action=replay]")
    confirm(page)
    wait_for(lambda: console.api("GET", f"/v1/runs/{run['id']}")[1]["attempt"]
             > run["attempt"], 20, "the replay")
    assert console.api("GET", f"/v1/runs/{run['id']}")[1]["origin"] == "replay"
    # It follows the replay on its own until the run ends again.
    until(page, "document.querySelector('#run-attempt-no') && document.querySelector("
                f"'#run-attempt-no').innerText.startsWith('{run['attempt'] + 1} ')", 30)
    assert not has_cancel or page.locator("#run-actions button[data-action=cancel]").count() <= 1


def test_an_http_failures_page_shows_the_status_and_the_answer(console, admin_page):
    page, watch = admin_page
    run = ended_run(console, "search-broken", "failed")
    assert run["result"] == {"http_status": 500, "response_snippet": FAIL_BODY}, run
    goto(page, console, f"runs/{run['id']}")
    page.wait_for_selector("#run-answer")
    assert page.inner_text("#run-result") == "HTTP 500"
    assert page.inner_text("#run-answer") == FAIL_BODY
    assert "500" in page.inner_text("#run-error")
    refused = ended_run(console, "search-refused", "failed")
    goto(page, console, f"runs/{refused['id']}")
    assert page.inner_text("#run-error") == refused["error"]
    assert page.locator("#run-answer").count() == 0
    shot(page, "run-refused", console.shots)


def test_a_workflow_runs_page_names_its_gate_and_the_upstream_run(console, admin_page):
    page, watch = admin_page
    url = console.jobs["ops-actions"]["target"]["url"]
    _, up = console.api("POST", "/v1/jobs", {
        "name": "gate-up", "namespace": "ops", "schedule": {"kind": "interval", "every": 1},
        "target": {"kind": "http", "url": url}})
    _, down = console.api("POST", "/v1/jobs", {
        "name": "gate-down", "namespace": "ops",
        "schedule": {"kind": "after", "jobs": ["gate-up"], "mode": "any"},
        "target": {"kind": "http", "url": url}})
    try:
        def gated() -> dict[str, Any] | None:
            items = console.api("GET", f"/v1/jobs/{down['id']}/runs")[1]["items"]
            return next((r for r in items if (r.get("gate") or {}).get("upstream")), None)
        run = wait_for(gated, 30, "a run of gate-down after gate-up")
        upstream = run["gate"]["upstream"][0]
        goto(page, console, f"runs/{run['id']}")
        page.wait_for_selector("#run-upstream a")
        assert "after 1 upstream run(s)" in page.inner_text("#run-gate-text")
        page.click(f"#run-upstream a[href='#/runs/{upstream['run_id']}']")
        until(page, f"location.hash === '#/runs/{upstream['run_id']}' && "
                    "document.querySelector('main').dataset.state === 'ready'")
        assert "ops/gate-up" in page.inner_text("#run-job")
    finally:
        for job in (down, up):
            console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


def test_history_at_a_glance_on_the_jobs_list_and_the_job_page(console, admin_page):
    page, watch = admin_page
    goto(page, console, "jobs?q=search-")
    until(page, "document.querySelectorAll('#jobs-list .strip .cell').length > 0")
    broken = console.jobs["search-broken"]["id"]
    row = page.locator("#jobs-list tbody tr", has=page.locator(f"a[href='#/jobs/{broken}']"))
    statuses = row.locator(".strip .cell").evaluate_all("(cells) => cells.map("
                                                        "(c) => c.dataset.status)")
    assert len(statuses) >= 3 and set(statuses) <= {"failed", "claimed", "running"}, statuses
    never = console.jobs["search-index-00"]["id"]
    assert page.inner_text(f"#jobs-list tr:has(a[href='#/jobs/{never}']) .strip") == "no runs"
    shot(page, "jobs-strips", console.shots)
    goto(page, console, f"jobs/{broken}")
    page.wait_for_selector("#job-history .strip .cell")
    assert page.inner_text("#job-history-summary").startswith("0 % of ")
    heartbeat = console.jobs["billing-heartbeat"]["id"]
    goto(page, console, f"jobs/{heartbeat}")
    page.wait_for_selector("#job-history .strip .cell")
    summary = page.inner_text("#job-history-summary")
    assert summary.startswith("100 % of ") and "p50" in summary and "p95" in summary, summary
    # Runs come first; the definition is folded.
    order = page.evaluate("[...document.querySelectorAll('main section h2, main summary')]"
                          ".map((e) => e.innerText)")
    assert order.index("Runs") < order.index("Definition"), order
    assert page.get_attribute("#job-definition-fold", "open") is None
    # A cell is one click from its run.
    page.locator("#job-history .strip .cell.succeeded").last.click()
    page.wait_for_selector("#run-result")
    assert page.inner_text("#run-result") == "HTTP 204"


def test_a_read_only_token_sees_no_action_on_a_run(console, browser):
    context, page, watch = open_page(browser, console, console.viewer)
    try:
        run = ended_run(console, "search-broken", "failed")
        goto(page, console, f"runs/{run['id']}")
        page.wait_for_selector("#run-result")
        assert page.locator("button[data-action]").count() == 0
        watch.assert_clean()
    finally:
        context.close()


def test_the_job_graph_draws_upstream_and_downstream_with_their_last_runs(console, admin_page,
                                                                          tmp_path):
    page, watch = admin_page
    url = console.jobs["ops-actions"]["target"]["url"]

    def job(name: str, schedule: dict[str, Any], **extra: Any) -> dict[str, Any]:
        status, made = console.api("POST", "/v1/jobs", {
            "name": name, "namespace": "ops", "schedule": schedule,
            "target": {"kind": "http", "url": url}, **extra})
        assert status == 201, made
        return made

    every = {"kind": "interval", "every": 1}
    extract = job("graph-extract", every)
    load = job("graph-load", {"kind": "after", "jobs": ["graph-extract"], "mode": "any"})
    report = job("graph-report", {"kind": "interval", "every": 3600},
                 depends_on=[{"job": "graph-load", "within": 3600, "wait": 0}])
    made = [report, load, extract]
    try:
        wait_for(lambda: console.api("GET", f"/v1/jobs/{load['id']}")[1]["last_run"], 30,
                 "a run of graph-load")
        goto(page, console, f"jobs/{load['id']}")
        page.wait_for_selector("#job-graph-svg .node")
        nodes = page.locator("#job-graph-svg a.node").evaluate_all(
            "(ns) => ns.map((n) => [n.dataset.job, n.dataset.status, n.classList.contains('focus')])")
        by_id = {n[0]: n for n in nodes}
        assert set(by_id) == {extract["id"], load["id"], report["id"]}, nodes
        assert by_id[load["id"]][2] and not by_id[extract["id"]][2]
        for one in made:
            last = console.api("GET", f"/v1/jobs/{one['id']}")[1]["last_run"]
            assert by_id[one["id"]][1] in ({last["status"], "succeeded", "running", "claimed"}
                                           if last else {"never"}), (one["name"], nodes)
        edges = page.locator("#job-graph-svg path.edge").evaluate_all(
            "(es) => es.map((e) => [e.dataset.from, e.dataset.to, e.classList.contains('after')])")
        assert sorted(edges) == sorted([[extract["id"], load["id"], True],
                                        [load["id"], report["id"], False]]), edges
        # Upstream left of the job, downstream right of it.
        xs = {n: page.locator(f"#job-graph-svg a.node[data-job='{n}'] rect").get_attribute("x")
              for n in by_id}
        assert float(xs[extract["id"]]) < float(xs[load["id"]]) < float(xs[report["id"]])
        shot(page, "job-graph", console.shots)
        page.click(f"#job-graph-svg a.node[data-job='{report['id']}']")
        until(page, f"location.hash === '#/jobs/{report['id']}'")
    finally:
        for one in made:
            console.api("DELETE", f"/v1/jobs/{one['id']}?force=true")


def test_a_strip_shows_a_jobs_runs_older_than_a_week(console, admin_page):
    """The jobs list asks for a week of runs at once; a job whose runs are all
    older (here backfilled) still gets its strip."""
    page, watch = admin_page
    url = console.jobs["ops-actions"]["target"]["url"]
    status, old = console.api("POST", "/v1/jobs", {
        "name": "strip-old", "namespace": "ops", "target": {"kind": "http", "url": url},
        "schedule": {"kind": "cron", "cron": "0 7 * * *"}})
    assert status == 201, old
    try:
        now = utcnow()
        status, made = console.api("POST", f"/v1/jobs/{old['id']}/backfill", {
            "since": (now - timedelta(days=10)).isoformat(),
            "until": (now - timedelta(days=8)).isoformat()})
        assert status in (200, 201, 202), made
        wait_for(lambda: console.api("GET", f"/v1/jobs/{old['id']}")[1]["last_run"], 20,
                 "a backfilled run")
        goto(page, console, "jobs?q=strip-old")
        until(page, "document.querySelectorAll('#jobs-list .strip .cell').length >= 2")
        runs = console.api("GET", f"/v1/jobs/{old['id']}/runs")[1]["items"]
        assert page.locator("#jobs-list .strip .cell").count() == len(runs)
    finally:
        console.api("DELETE", f"/v1/jobs/{old['id']}?force=true")
