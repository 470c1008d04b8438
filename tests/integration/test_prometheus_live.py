"""The shipped rules in a real Prometheus scraping running cronman processes:
a ``cronman standalone`` (a recording rule produces a value, and the
failure-rate alert goes pending for a job whose receiver refuses every
connection), and a cluster of ``cronman api`` and two ``cronman scheduler``
nodes on PostgreSQL and Redis (the recording rules sum both nodes' series,
and a node SIGKILLed sets off the alerts about a node gone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cluster.harness import Cluster, node_env
from tests.support.api import http, running_api
from tests.support.dashboards import DASHBOARD
from tests.support.dashboards import queries as dashboard_queries
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.prometheus import PrometheusServer
from tests.support.receiver import Receiver
from tests.support.redis_servers import redis_servers

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


# The alerts about a node gone wait 2 minutes before firing; the cluster test
# loads a copy of the rules with their ``for:`` this short instead.
NODE_GONE_ALERTS = ("CronmanSchedulerNodeGone", "CronmanTargetDown")
SHORT_FOR = "3s"
CLUSTER_JOBS = 12  # enough that each of two nodes owns some (rendezvous hashing)


def rules_with_short_for(path: Path, alerts: tuple[str, ...], wait: str) -> Path:
    """A copy of the shipped rules beside ``path`` whose ``alerts`` wait ``wait``."""
    doc = yaml.safe_load(RULES.read_text())
    found = [rule for group in doc["groups"] for rule in group["rules"]
             if rule.get("alert") in alerts]
    assert sorted(r["alert"] for r in found) == sorted(alerts)
    for rule in found:
        rule["for"] = wait
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.postgres
@pytest.mark.redis
def test_rules_evaluate_on_a_scraped_cluster_and_a_killed_node_alerts(tmp_path):
    env = node_env()
    with migrated_pg_database("cronman_prom") as db, redis_servers(1) as [redis], \
            Receiver() as rx, Processes(tmp_path) as procs:
        cluster = Cluster(procs, db, redis.url, env)
        nodes = cluster.start(2, wait=False)  # the processes start side by side
        with running_api(db, extra_env={**env, "CRONMAN_REDIS_URL": redis.url},
                         startup_timeout=60) as api:
            for node in nodes:
                cluster.wait_ready(node)
            for i in range(CLUSTER_JOBS):
                status, body, _ = http("POST", f"{api}/v1/jobs", {
                    "name": f"tick-{i}", "namespace": "web",
                    "schedule": {"kind": "interval", "every": 1},
                    "target": {"kind": "http", "url": rx.url("/hook")},
                })
                assert status == 201, body
            node_addr = {n.node_id: f"127.0.0.1:{n.metrics_port}" for n in nodes}
            rules = rules_with_short_for(tmp_path / "cronman.rules.yml", NODE_GONE_ALERTS,
                                         SHORT_FOR)
            with PrometheusServer(tmp_path, {"cronman-api": [api.removeprefix("http://")],
                                             "cronman-scheduler": sorted(node_addr.values())},
                                  rule_files=[rules]) as prom:
                prom.wait(prom.targets_up, 20, "the API and both nodes scraped")

                def per_node_and_sum():
                    per = prom.query('sum by (instance) (rate(cronman_fires_total[1m])) > 0')
                    total = prom.query("cronman:fires:rate1m").get("")
                    # The rule was evaluated a moment before: close, not equal.
                    if len(per) == 2 and total == pytest.approx(sum(per.values()), rel=0.1):
                        return per, total
                    return None

                rates, total = prom.wait(per_node_and_sum, 40,
                                         "fires from both nodes, summed by the rule")
                assert set(rates) == {f"instance={a}" for a in node_addr.values()}, rates
                # About one fire a job a second, from both nodes.
                assert max(rates.values()) < total < 2 * CLUSTER_JOBS, (rates, total)
                assert prom.query('namespace:cronman_fires:rate5m{namespace="web"} > 0')
                assert prom.wait(lambda: prom.query("cronman:live_nodes:max == 2"), 10,
                                 "both nodes in the membership") == {"": 2.0}
                assert prom.query("cronman_live_nodes") == {
                    f"instance={a},job=cronman-scheduler": 2.0 for a in node_addr.values()}
                assert not [a for a in prom.alerts()
                            if a["labels"]["alertname"] in NODE_GONE_ALERTS]

                cluster.kill("n2")

                def alerting(name):
                    def firing():
                        return [a for a in prom.alerts() if a["labels"]["alertname"] == name
                                and a["state"] == "firing"]
                    return firing

                [down] = prom.wait(alerting("CronmanTargetDown"), 20,
                                   "CronmanTargetDown firing")
                assert down["labels"]["instance"] == node_addr["n2"]
                assert down["labels"]["job"] == "cronman-scheduler"
                # The survivor's view of the membership drops from 2 to 1.
                [gone] = prom.wait(alerting("CronmanSchedulerNodeGone"), 20,
                                   "CronmanSchedulerNodeGone firing")
                assert gone["labels"]["instance"] == node_addr["n1"]
                assert float(gone["value"]) == 1.0
                assert gone["annotations"]["runbook_url"] == \
                    "docs/operations.md#cronmanschedulernodegone"
                assert prom.query("cronman:live_nodes:max") == {"": 1.0}
            cluster.assert_all_running()
        assert rx.requests_for("/hook")
