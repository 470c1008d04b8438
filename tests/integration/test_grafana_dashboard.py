"""ops/grafana/cronman.json: every query (panels, variables, annotations)
names only series a running ``cronman standalone`` exports on /metrics, the
recording rules of ops/prometheus/ record, or Prometheus itself makes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.api import http
from tests.support.dashboards import DASHBOARD, queries, series_names
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "cronman.rules.yml"
PROMETHEUS_OWN = {"up", "ALERTS"}


def test_series_names_are_read_from_promql():
    assert series_names('sum by (le, instance) (rate(cronman_x_bucket{a="b(c)"}[5m])) '
                        '/ on (ns) (y:z > 0) or vector(0)') == {"cronman_x_bucket", "y:z"}
    assert series_names("label_values(cronman_n_total, namespace)") == {"cronman_n_total"}


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def test_every_query_names_an_exported_series(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = {name: expr for expr in queries(dashboard) for name in series_names(expr)}
    assert len(wanted) > 20

    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with Receiver() as rx, Processes(tmp_path) as procs:
        sa = procs.standalone(db)
        for name, url in (("ok", rx.url("/hook")), ("refused", "http://127.0.0.1:9/x")):
            status, body, _ = http("POST", f"{sa.url}/v1/jobs", {
                "name": name, "namespace": "shop",
                "schedule": {"kind": "interval", "every": 1},
                "target": {"kind": "http", "url": url}, "retry": {"max_attempts": 1}})
            assert status == 201, body

        def exported() -> set[str]:
            _, text, _ = http("GET", f"{sa.url}/metrics")
            return {re.split(r"[{ ]", line, maxsplit=1)[0]
                    for line in text.splitlines() if line and not line.startswith("#")}

        other = recorded_names() | PROMETHEUS_OWN
        # Labelled series appear with their first sample (a failure, a request):
        # waited for, then whatever is still missing is named.
        try:
            wait_for(lambda: set(wanted) <= exported() | other, 30, "every series exported")
        except AssertionError:
            pass
        known = exported() | other
    unknown = {name: expr for name, expr in wanted.items() if name not in known}
    assert unknown == {}, "queries naming series nobody exports"
    # Every rule, recording or alerting, is on exported series too (the audit
    # exporter's are not in a standalone: read from its metrics module).
    known |= audit_exporter_names()
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        assert series_names(rule["expr"]) <= known, rule


def audit_exporter_names() -> set[str]:
    """The sample names of ``cronman audit export``'s metrics (its families,
    also those with no sample yet)."""
    from prometheus_client import REGISTRY

    import cronman.audit.metrics  # noqa: F401 (registers them)

    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    return {family.name + suffix for family in REGISTRY.collect()
            if family.name.startswith("cronman_audit_") for suffix in suffixes[family.type]}
