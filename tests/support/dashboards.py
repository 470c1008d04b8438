"""The Grafana dashboard's queries, and the series a PromQL expression names."""

from __future__ import annotations

import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "cronman.json"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}


def queries(dashboard: dict) -> list[str]:
    found = []

    def walk(panel: dict) -> None:
        found.extend(t["expr"] for t in panel.get("targets", []))
        for child in panel.get("panels", []):
            walk(child)

    for panel in dashboard["panels"]:
        walk(panel)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            found.append(var["query"]["query"])
    found.extend(a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a)
    return found


def series_names(expr: str) -> set[str]:
    """The series a PromQL expression selects (label_values(m, l) selects m)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\(\s*([\w:]+)\s*,\s*\w+\s*\)", r"\1", expr)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names
