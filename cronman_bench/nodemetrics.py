"""What a scheduler node's metrics say: scraped from ``--metrics-port``.

The receiver tells what arrived; some figures only a node knows: fires it
took over from another owner (and why), its backlog and saturation, the
offset of its clock to the reference and whether it stepped out for skew,
claims and starts refused for being early, time spent in the cyclic garbage
collector. A scrape is a plain dict
``{metric name: {label text: value}}`` (label text ``reason=stalled``, or
``""`` without labels); histograms' buckets are left out.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

Scrape = dict[str, dict[str, float]]

TAKEOVERS = "cronman_fire_takeovers_total"
DOUBLE_FIRES = "cronman_double_fires_total"
BACKLOG = "cronman_dispatch_backlog"
BACKLOG_SECONDS = "cronman_dispatch_backlog_seconds"
HELD_BACK = "cronman_fires_held_back"
SATURATION = "cronman_dispatch_saturation"
CLOCK_OFFSET = "cronman_clock_offset_seconds"
CLOCK_SKEWED = "cronman_clock_skewed"
EARLY_CLAIMS = "cronman_early_claims_total"
EARLY_STARTS = "cronman_early_starts_total"
MISFIRES_SKIPPED = "cronman_misfires_skipped_total"
GC_PAUSE_SECONDS = "cronman_gc_pause_seconds_sum"


def parse(text: str) -> Scrape:
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith("cronman_") or s.name.endswith(("_bucket", "_created")):
                continue
            label = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out.setdefault(s.name, {})[label] = float(s.value)
    return out


def scrape(port: int, timeout: float = 3.0) -> Scrape | None:
    """The node's metrics now, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=timeout) as resp:
            return parse(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None


def total(s: Scrape | None, name: str) -> float:
    return sum((s or {}).get(name, {}).values())


def by_label(s: Scrape | None, name: str, label: str) -> dict[str, float]:
    """Values of ``name`` summed per value of one label."""
    out: dict[str, float] = {}
    for text, v in (s or {}).get(name, {}).items():
        parts = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        key = parts.get(label, "")
        out[key] = out.get(key, 0.0) + v
    return out


def counter_delta(before: Mapping[str, Scrape | None], after: Mapping[str, Scrape | None],
                  name: str, label: str | None = None) -> dict[str, float]:
    """How much a counter grew between two scrapes of every node, summed over the
    nodes, per value of ``label`` (or under ``"all"``). A node that restarted or
    did not answer counts from zero, or not at all."""
    out: dict[str, float] = {}
    for node, b in after.items():
        a = before.get(node)
        now = by_label(b, name, label) if label else {"all": total(b, name)}
        then = by_label(a, name, label) if label else {"all": total(a, name)}
        for k, v in now.items():
            grown = v - then.get(k, 0.0)
            out[k] = out.get(k, 0.0) + (grown if grown >= 0 else v)
    return out


def gauges(scrapes: Iterable[tuple[int, Mapping[str, Scrape | None]]], name: str
           ) -> dict[str, list[tuple[int, float]]]:
    """A gauge's values over time, per node: ``{node: [(Unix ms, value), ...]}``."""
    out: dict[str, list[tuple[int, float]]] = {}
    for at, per_node in scrapes:
        for node, s in per_node.items():
            if s is not None and name in s:
                out.setdefault(node, []).append((at, total(s, name)))
    return out
