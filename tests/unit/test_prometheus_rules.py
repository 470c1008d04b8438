"""ops/prometheus/: the rule files load (promtool check rules), their tests on
recorded series pass (promtool test rules), every alert is exercised by
those tests and carries a runbook line and a section of docs/operations.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "cronman.rules.yml"
TESTS = sorted((ROOT / "ops" / "prometheus" / "tests").glob("*.yml"))
OPERATIONS = ROOT / "docs" / "operations.md"


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_checks_the_rules():
    out = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_rule_tests_pass():
    assert TESTS
    out = subprocess.run(["promtool", "test", "rules", *map(str, TESTS)], capture_output=True,
                         text=True, timeout=120, cwd=TESTS[0].parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_is_seen_firing_in_a_rule_test():
    fired: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check.get("exp_alerts"):
                    fired.add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts no test sees firing"


def test_every_alert_has_a_runbook_and_its_section():
    anchors = {_anchor(m) for m in re.findall(r"^#{2,4} (.+)$", OPERATIONS.read_text(),
                                              re.MULTILINE)}
    for alert in alerts():
        notes = alert["annotations"]
        assert notes.get("summary") and notes.get("runbook"), alert["alert"]
        assert notes["runbook_url"] == f"docs/operations.md#{alert['alert'].lower()}"
        assert alert["alert"].lower() in anchors, f"no section for {alert['alert']}"
        assert alert["labels"]["severity"] in ("warning", "critical")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")
