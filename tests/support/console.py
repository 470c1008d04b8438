"""The operator console under test: a real API on PostgreSQL, a real scheduler
node and a process worker agent on Redis, jobs of every target kind (some
failing) — and the helpers that drive its pages in headless Chromium.

``console_cluster`` seeds it; the e2e package shares one (``tests/e2e/conftest.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronman.store import open_store
from tests.support.api import free_port, http, running_api
from tests.support.browser import PageWatch, artifact_dir
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

REPORTS = 30  # billing-report-NN
INDEXES = 28  # search-index-NN
DAILY = {"kind": "cron", "cron": "0 7 * * *", "timezone": "Europe/Berlin"}
READY = "main[data-state=ready]"
LONG_NAME = ("quarterly-reconciliation-of-the-intercompany-ledger-between-all-regional-"
             "subsidiaries-and-headquarters")
#: What the failing receiver answers (a run's page shows it).
FAIL_BODY = '{"error": "the ledger database is down"}'
#: The container job's command: a line on each stream, then exit 3.
CONTAINER_COMMAND = ["sh", "-c", "echo out-line; echo err-line >&2; exit 3"]


@dataclass
class Console:
    base: str
    admin: str
    viewer: str
    jobs: dict[str, dict[str, Any]]
    shots: Path = field(default_factory=lambda: artifact_dir("dashboard"))
    database_url: str = ""
    env: dict[str, str] = field(default_factory=dict)  # the Redis settings of its processes

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, data, _ = http(method, self.base + path, body, token=self.admin)
        return status, data


def seed_specs(rx: Receiver, refused: str) -> list[dict[str, Any]]:
    """The jobs: 30 + 28 daily HTTP jobs, two every second (one failing with a
    500), one refused, an SQS job, a container job, a very long name."""
    specs: list[dict[str, Any]] = [
        {"name": f"billing-report-{i:02d}", "namespace": "billing",
         "labels": {"team": "billing"}, "schedule": DAILY,
         "target": {"kind": "http", "url": rx.url("/ok"),
                    "headers": {"Authorization": "Bearer super-secret-value"}}}
        for i in range(REPORTS)]
    specs += [{"name": f"search-index-{i:02d}", "namespace": "search",
               "schedule": DAILY, "target": {"kind": "http", "url": rx.url("/ok")}}
              for i in range(INDEXES)]
    specs += [
        {"name": "billing-heartbeat", "namespace": "billing",
         "schedule": {"kind": "interval", "every": 1},
         "target": {"kind": "http", "url": rx.url("/ok")}},
        {"name": "search-broken", "namespace": "search",
         "schedule": {"kind": "interval", "every": 1},
         "target": {"kind": "http", "url": rx.url("/fail")},
         "retry": {"max_attempts": 1}},
        {"name": "search-refused", "namespace": "search",
         "schedule": {"kind": "interval", "every": 5},
         "target": {"kind": "http", "url": refused}, "retry": {"max_attempts": 1}},
        {"name": "ops-actions", "namespace": "ops", "schedule": DAILY,
         "target": {"kind": "http", "url": rx.url("/ok")}},
        {"name": "sqs-export", "namespace": "billing", "schedule": DAILY,
         "target": {"kind": "sqs", "queue_url": "http://127.0.0.1:9/000000000000/exports",
                    "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:9",
                    "body": "export"}},
        {"name": "ops-container", "namespace": "ops", "schedule": DAILY,
         "retry": {"max_attempts": 1},
         "target": {"kind": "container", "image": "unused", "command": CONTAINER_COMMAND,
                    "selector": {"kind": "host"}}},
        {"name": LONG_NAME, "namespace": "billing",
         "labels": {"cost-centre": "finance-and-controlling-emea"},
         "schedule": DAILY, "target": {"kind": "http", "url": rx.url("/ok")}},
    ]
    return specs


@contextmanager
def console_cluster(tmp: Path, redis_url: str) -> Iterator[Console]:
    """Everything above, up; yields once failed and succeeded runs exist."""
    prefix = f"cme2e-{uuid.uuid4().hex[:8]}"
    (tmp / "procs").mkdir(exist_ok=True)
    with migrated_pg_database("cronman_e2e") as url, Receiver() as rx, \
            Processes(tmp / "procs") as procs:
        store = open_store(url)
        try:
            admin, _ = store.tokens.create_token("e2e-admin", None)
            viewer, _ = store.tokens.create_token("e2e-viewer", None, read_only=True)
            store.host_policies.put("ops", {"process": True}, by=None)
        finally:
            store.close()
        rx.reply("/fail", status=500, body=FAIL_BODY)
        env = {"CRONMAN_REDIS_URL": redis_url, "CRONMAN_REDIS_KEY_PREFIX": prefix}
        refused = f"http://127.0.0.1:{free_port()}/gone"  # nothing listens there
        with running_api(url, workers=2, extra_env=env, startup_timeout=90) as base:
            status, made, _ = http("POST", base + "/v1/jobs/bulk",
                                   {"jobs": seed_specs(rx, refused)}, token=admin)
            assert status == 201, made
            jobs = {j["name"]: j for j in made["items"]}
            node = procs.scheduler(url, "e2e-node-1", redis_url=redis_url, wait=False,
                                   env={"CRONMAN_REDIS_KEY_PREFIX": prefix})
            node.wait_for_log("ready: owns", timeout=90)  # a busy machine starts slowly
            (tmp / "agent-state").mkdir(exist_ok=True)
            procs.agent("e2e-agent-1", redis_url=redis_url, runtime="process", env={
                **env, "CRONMAN_AGENT_LABELS": "kind=host",
                "CRONMAN_AGENT_STATE_DIR": str(tmp / "agent-state")})
            c = Console(base, admin, viewer, jobs, database_url=url, env=env)
            status, _ = c.api("POST", f"/v1/jobs/{jobs['ops-container']['id']}/trigger")
            assert status == 202
            wait_for(lambda: len(c.api("GET", "/v1/runs?status=failed&since=-5m")[1]["items"])
                     >= 3, 40, "failed runs of search-broken")
            wait_for(lambda: c.api("GET", "/v1/runs?status=succeeded&since=-5m")[1]["items"],
                     20, "succeeded runs")
            yield c


def open_page(browser: Any, console: Console, token: str, *, width: int = 1280,
              height: int = 900) -> tuple[Any, Any, PageWatch]:
    """A fresh browser context whose localStorage holds ``token`` before any
    script of the page runs."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_init_script(f"window.localStorage.setItem('cronman.token', '{token}');")
    page = context.new_page()
    watch = PageWatch().attach(page)
    return context, page, watch


def goto(page: Any, console: Console, view: str) -> None:
    page.goto(f"{console.base}/#/{view}")
    page.wait_for_selector(READY, timeout=15_000)


def shot(page: Any, name: str, where: Path | None = None) -> None:
    page.screenshot(path=str((where or artifact_dir("dashboard")) / f"{name}.png"),
                    full_page=True)


def until(page: Any, js: str, timeout: float = 15.0) -> Any:
    """Poll ``js`` in the page until it is truthy. (Not ``wait_for_function``:
    it compiles its predicate with eval, which the dashboard's CSP forbids.)"""
    return wait_for(lambda: page.evaluate(js), timeout, js, interval=0.1)


def rows(page: Any, selector: str) -> list[str]:
    """The table's rows, each its cells' text joined by tabs. (A row's own
    innerText has the tabs only while the row is laid out: during a re-render
    the cells' texts run together.)"""
    return page.locator(f"{selector} tbody tr:not(.empty)").evaluate_all(
        "trs => trs.map(tr => [...tr.cells].map(td => td.innerText.trim()).join('\\t'))")


def expect_error(watch: PageWatch, status: int) -> None:
    """The API answered ``status`` on purpose: the browser logged it as an error."""
    text = f"status of {status} "
    assert any(text in e for e in watch.errors), watch.errors
    watch.errors[:] = [e for e in watch.errors if text not in e]


def confirm(page: Any) -> None:
    page.wait_for_selector("dialog#confirm[open]")
    page.click("#confirm-ok")
    page.wait_for_selector("dialog#confirm:not([open])", state="attached")
