"""The shipped rules in a real Prometheus scraping a running ``cronman
standalone``: a recording rule produces a value, and the failure-rate alert
goes pending for a job whose receiver refuses every connection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.api import http
from tests.support.dashboards import DASHBOARD
from tests.support.dashboards import queries as dashboard_queries
from tests.support.processes import Processes
from tests.support.prometheus import PrometheusServer
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.slow]

RULES = Path(__file__).resolve().parents[2] / "ops" / "prometheus" / "cronman.rules.yml"


def test_rules_evaluate_on_a_scraped_standalone(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(db)
        for name, ns, url in (("ok", "web", rx.url("/hook")),
                              ("refused", "billing", "http://127.0.0.1:9/nothing-listens")):
            status, body, _ = http("POST", f"{sa.url}/v1/jobs", {
                "name": name, "namespace": ns,
                "schedule": {"kind": "interval", "every": 1},
                "target": {"kind": "http", "url": url},
                "retry": {"max_attempts": 1},
            })
            assert status == 201, body
        address = sa.url.removeprefix("http://")
        with PrometheusServer(tmp_path, {"cronman-standalone": [address]},
                              rule_files=[RULES]) as prom:
            prom.wait(prom.targets_up, 20, "the standalone scraped")
            # Two jobs, one fire a second each (the first scrapes give rate()
            # little to go by: waited for).
            rate = prom.wait(lambda: prom.query("cronman:fires:rate1m > 1"), 40,
                             "cronman:fires:rate1m above 1")
            assert next(iter(rate.values())) < 4, rate

            ratios = prom.wait(
                lambda: prom.query('namespace:cronman_failure_ratio:rate5m{namespace="billing"}'
                                   " > 0.25"), 30, "billing's failure ratio")
            assert next(iter(ratios.values())) == pytest.approx(1.0, abs=0.35), ratios
            assert prom.query('namespace:cronman_failure_ratio:rate5m{namespace="web"}') \
                == {"namespace=web": 0.0}

            def failure_alert():
                return [a for a in prom.alerts()
                        if a["labels"]["alertname"] == "CronmanNamespaceFailureRate"]

            alert = prom.wait(failure_alert, 20, "CronmanNamespaceFailureRate pending")
            assert [a["labels"]["namespace"] for a in alert] == ["billing"]
            assert alert[0]["state"] in ("pending", "firing")
            assert alert[0]["annotations"]["runbook_url"] == \
                "docs/operations.md#cronmannamespacefailurerate"
            # The node is one member, seen through the standalone's own registry.
            assert prom.query("cronman:live_nodes:max") == {"": 1.0}
            assert prom.query("cronman_live_agents") == {
                f"instance={address},job=cronman-standalone": 1.0}
            assert prom.query('up{job="cronman-standalone"}') != {}
            # Every query of the dashboard is PromQL this Prometheus runs.
            for expr in dashboard_queries(json.loads(DASHBOARD.read_text())):
                if not expr.startswith("label_values("):
                    prom.api("query", query=expr.replace("$namespace", ".*"))
            assert not [a for a in prom.alerts()
                        if a["labels"]["alertname"] in ("CronmanTargetDown",
                                                        "CronmanFiresLate")]
        assert rx.requests_for("/hook")
