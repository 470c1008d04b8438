"""A run's detail in headless Chromium at 1440×900 and 390×844: every attempt
of a retried run with its answer; a worker run's worker, heartbeats,
progress and its stdout and stderr apart, tailing while it runs; cancel from
the page (checked through the API), neither cancel nor replay for a
read-only token; a running container's output as its agent publishes it, and
its cancel from the page (its command stopped); the Queues view; the trace
id when the API traces. Nothing
wider than the viewport, no console error, no request off loopback.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.e2e.test_console_layout import LAYOUT_JS
from tests.support.api import running_api
from tests.support.console import Console, confirm, goto, open_page, shot, until
from tests.support.processes import Processes, processes_with
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")

SIZES = [(1440, 900), (390, 844)]
QUEUE = "console-e2e"
# A command that reports progress, then writes a line to each stream every 0.3 s.
LOOP = ("echo 'CRONMAN_PROGRESS 40 copying rows'; i=0; while true; do i=$((i+1)); "
        "echo out-$i; echo err-$i >&2; sleep 0.3; done")


def made(console: Console, spec: dict[str, Any]) -> dict[str, Any]:
    status, job = console.api("POST", "/v1/jobs", {"namespace": "ops", **spec})
    assert status == 201, job
    return job


def trigger(console: Console, job: dict[str, Any]) -> str:
    status, run = console.api("POST", f"/v1/jobs/{job['id']}/trigger")
    assert status == 202, run
    return str(run["id"])


def run_of(console: Console, run_id: str) -> dict[str, Any]:
    return console.api("GET", f"/v1/runs/{run_id}")[1]


def fits(page: Any) -> None:
    assert page.evaluate(LAYOUT_JS) == []


@pytest.fixture(scope="module")
def retried(console):
    """A run that failed three times (an HTTP 500 each time, 2 s apart)."""
    job = made(console, {
        "name": "retried-thrice", "schedule": {"kind": "interval", "every": 86400},
        "target": {"kind": "http", "url": console.jobs["search-broken"]["target"]["url"]},
        "retry": {"max_attempts": 3, "min_backoff": 2, "max_backoff": 2}})
    run_id = trigger(console, job)
    run = wait_for(lambda: (lambda r: r if r["status"] == "failed" else None)(
        run_of(console, run_id)), 40, "the third failure")
    yield run
    console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}" for w, _ in SIZES])
def test_a_retried_runs_page_shows_every_attempt(console, browser, retried, size):
    run = retried
    assert run["attempt"] == 3
    earlier = run["earlier_attempts"]
    assert [(a["attempt"], a["status"], a["result"]["http_status"]) for a in earlier] == [
        (1, "retrying", 500), (2, "retrying", 500)], earlier
    assert all(a["started_at"] and a["node_id"] for a in earlier)
    context, page, watch = open_page(browser, console, console.admin, width=size[0],
                                     height=size[1])
    try:
        goto(page, console, f"runs/{run['id']}")
        page.wait_for_selector("#run-attempts-table tbody tr")
        rows = page.locator("#run-attempts-table tbody tr")
        assert rows.evaluate_all("(rs) => rs.map((r) => r.dataset.attempt)") == ["1", "2", "3"]
        texts = rows.all_inner_texts()
        assert all("HTTP 500" in t for t in texts), texts
        assert ["retrying" in t for t in texts] == [True, True, False], texts
        assert "failed" in texts[2]
        assert page.inner_text("h2:has-text('Attempts')") == "Attempts (3)"
        # Each earlier attempt's answer is one click away.
        folds = page.locator("details.attempt-output")
        assert folds.count() == 2
        folds.first.locator("summary").click()
        assert '"the ledger database is down"' in folds.first.locator("pre").inner_text()
        assert page.locator("#run-trace-id").count() == 0  # this API does not trace
        shot(page, f"{size[0]}-run-attempts", console.shots)
        fits(page)
        watch.assert_clean()
    finally:
        context.close()


@pytest.fixture(scope="module")
def worker_run(console, tmp_path_factory):
    """A worker run held by a ``cronman worker`` whose command writes to both
    streams until it is cancelled."""
    job = made(console, {
        "name": "worker-tail", "schedule": {"kind": "interval", "every": 86400},
        "target": {"kind": "worker", "queue": QUEUE, "payload": {"table": "t1"},
                   "heartbeat_timeout": 3, "timeout": 300},
        "retry": {"max_attempts": 1}})
    with Processes(tmp_path_factory.mktemp("console-worker")) as procs:
        procs.start("console-worker", [
            "worker", "--queue", QUEUE, "--namespace", "ops", "--url", console.base,
            "--worker-id", "console-w1", "--wait", "1", "--kill-after", "1", "--",
            "sh", "-c", LOOP], {"CRONMAN_TOKEN": console.admin})
        run_id = trigger(console, job)
        wait_for(lambda: (run_of(console, run_id).get("worker") or {}).get("output"), 30,
                 "the worker's first output")
        yield run_id
    console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


def test_a_read_only_token_sees_neither_cancel_nor_replay(console, browser, worker_run):
    context, page, watch = open_page(browser, console, console.viewer)
    try:
        goto(page, console, f"runs/{worker_run}")
        page.wait_for_selector("#run-worker-id")
        assert page.locator("button[data-action]").count() == 0
        watch.assert_clean()
    finally:
        context.close()


def test_the_queues_view_shows_depth_wait_and_workers(console, browser, worker_run):
    for width, height in SIZES:
        context, page, watch = open_page(browser, console, console.admin, width=width,
                                         height=height)
        try:
            goto(page, console, "queues")
            row = page.locator(f"#queues-list tr[data-queue='ops/{QUEUE}']")
            row.wait_for()
            cells = row.locator("td").all_inner_texts()
            assert cells[:3] == [f"ops/{QUEUE}", "0", "1"], cells
            worker = page.locator("#queues-workers tr[data-worker='console-w1']")
            assert "1 of 1" in worker.inner_text()
            assert "ago" in worker.inner_text() or "now" in worker.inner_text()
            listed = console.api("GET", "/v1/queues?namespace=ops")[1]["items"]
            assert any(q["queue"] == QUEUE and q["held"] == 1 for q in listed), listed
            shot(page, f"{width}-queues", console.shots)
            fits(page)
            watch.assert_clean()
        finally:
            context.close()


def test_a_worker_runs_page_tails_its_output_and_cancels(console, browser, worker_run):
    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        goto(page, console, f"runs/{worker_run}")
        page.wait_for_selector("#run-worker-id")
        assert page.inner_text("#run-worker-id") == "console-w1"
        assert page.inner_text("#run-worker-state") == "held"
        assert "40 % copying rows" in page.inner_text("#run-worker-progress")
        until(page, "document.querySelector('#run-stdout') !== null")
        first = page.inner_text("#run-stdout")
        assert "out-" in first and "err-" not in first, first
        assert "err-" in page.inner_text("#run-stderr")
        assert "out-" not in page.inner_text("#run-stderr")
        beats = page.inner_text("#run-worker-heartbeat")
        # The page follows the run: newer lines and heartbeats come without a reload.
        until(page, "document.querySelector('#run-stdout') && document.querySelector("
                    f"'#run-stdout').innerText !== {first!r}", 20)
        until(page, f"document.querySelector('#run-worker-heartbeat').innerText !== {beats!r}")
        shown = run_of(console, worker_run)["worker"]
        assert shown["heartbeats"] >= 2 and shown["output"]["stdout"].rstrip().endswith(
            tuple(f"out-{i}" for i in range(1, 10_000))), shown
        shot(page, "390-run-worker", console.shots)
        fits(page)
        page.click("#run-actions button[data-action=cancel]")
        confirm(page)
        ended = wait_for(lambda: (lambda r: r if r["status"] == "failed" else None)(
            run_of(console, worker_run)), 30, "the cancelled run's end")
        assert "cancel" in ended["error"], ended
        assert ended["result"]["exit_code"] != 0 and "out-" in ended["result"]["logs_tail"][
            "stdout"], ended
        until(page, "document.querySelector('#run-head .status') && "
                    "document.querySelector('#run-head .status').innerText === 'failed'", 20)
        assert page.locator("#run-actions button[data-action=cancel]").count() == 0
        assert page.locator("#run-actions button[data-action=replay]").count() == 1
        assert page.locator("#run-worker").is_hidden()
        watch.assert_clean()
    finally:
        context.close()


def test_the_trace_id_shows_when_the_api_traces(console, browser, retried):
    from cronman.observability.tracing_otel import trace_id_of
    from tests.support.otlp import OtlpReceiver

    with OtlpReceiver() as otlp, running_api(console.database_url, extra_env={
            **console.env, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint}) as base:
        traced = Console(base, console.admin, console.viewer, console.jobs)
        assert traced.api("GET", f"/v1/runs/{retried['id']}")[1]["trace_id"] == format(
            trace_id_of(retried["id"]), "032x")
        context, page, watch = open_page(browser, traced, console.admin)
        try:
            goto(page, traced, f"runs/{retried['id']}")
            page.wait_for_selector("#run-trace-id")
            assert page.inner_text("#run-trace-id") == format(trace_id_of(retried["id"]), "032x")
            watch.assert_clean()
        finally:
            context.close()


def test_a_running_containers_page_tails_its_output(console, browser):
    """The agent publishes a running container's tails every 2 s; the page
    follows them, stdout and stderr apart, and offers Cancel while it runs."""
    job = made(console, {
        "name": "container-tail", "schedule": {"kind": "interval", "every": 86400},
        "retry": {"max_attempts": 1},
        "target": {"kind": "container", "image": "unused", "selector": {"kind": "host"},
                   "timeout": 60, "command": [
                       "sh", "-c", "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo out-$i; "
                       "echo err-$i >&2; sleep 0.25; done"]}})
    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        run_id = trigger(console, job)
        live = wait_for(lambda: run_of(console, run_id).get("live_output"), 30,
                        "the container's first published output")
        assert live["agent_id"] == "e2e-agent-1" and "out-" in live["stdout"], live
        assert "err-" in live["stderr"] and "out-" not in live["stderr"], live
        goto(page, console, f"runs/{run_id}")
        page.wait_for_selector("#run-stdout")
        first = page.inner_text("#run-stdout")
        assert "out-" in first and "err-" not in first
        assert page.inner_text("h2:has-text('stdout')") == "stdout so far"
        until(page, f"document.querySelector('#run-stdout') && document.querySelector("
                    f"'#run-stdout').innerText !== {first!r}", 20)
        assert page.locator("#run-actions button[data-action=cancel]").count() == 1
        fits(page)
        shot(page, "390-run-container-live", console.shots)
        ended = wait_for(lambda: (lambda r: r if r["status"] == "succeeded" else None)(
            run_of(console, run_id)), 40, "the container's end")
        assert "live_output" not in ended
        assert ended["result"]["logs_tail"]["stdout"].rstrip().endswith("out-60")
        until(page, "document.querySelector('#run-stdout') && "
                    "document.querySelector('#run-stdout').innerText.trim().endsWith('out-60')",
              20)
        watch.assert_clean()
    finally:
        context.close()
        console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")


def test_a_long_container_run_is_cancelled_from_its_page(console, browser):
    """Cancel on a running container's page: the node stops the command at
    its next lease renewal, the run ends failed with who cancelled it, and
    the page follows it there (Replay instead of Cancel)."""
    sleep = ["sleep", f"3600.{uuid.uuid4().int % 10**6:06d}"]  # found by its command line
    job = made(console, {
        "name": "container-long", "schedule": {"kind": "interval", "every": 86400},
        "target": {"kind": "container", "image": "unused", "selector": {"kind": "host"},
                   "timeout": 7200, "command": sleep}})
    context, page, watch = open_page(browser, console, console.admin, width=390, height=844)
    try:
        run_id = trigger(console, job)
        wait_for(lambda: processes_with(sleep), 30, "the run's command")
        goto(page, console, f"runs/{run_id}")
        page.wait_for_selector("#run-actions button[data-action=cancel]")
        page.click("#run-actions button[data-action=cancel]")
        confirm(page)
        # Asked: the page says so (and offers no second cancel) until the node acts.
        until(page, "document.querySelector('#run-head .status') && (document.querySelector("
                    "'#run-cancel') !== null || document.querySelector('#run-head .status')"
                    ".innerText === 'failed')", 20)
        ended = wait_for(lambda: (lambda r: r if r["status"] == "failed" else None)(
            run_of(console, run_id)), 40, "the cancelled run's end")
        assert ended["error"].startswith("cancelled by token e2e-admin (exit code "), ended
        assert ended["attempt"] == 1 and ended["result"]["agent_id"] == "e2e-agent-1"
        assert not processes_with(sleep)
        until(page, "document.querySelector('#run-head .status') && "
                    "document.querySelector('#run-head .status').innerText === 'failed'", 20)
        assert page.locator("#run-actions button[data-action=cancel]").count() == 0
        assert page.locator("#run-actions button[data-action=replay]").count() == 1
        assert "cancelled by token e2e-admin" in page.inner_text("#run-error")
        fits(page)
        watch.assert_clean()
    finally:
        context.close()
        console.api("DELETE", f"/v1/jobs/{job['id']}?force=true")
