"""The per-fire tallies scrape exactly as prometheus_client's own metrics do."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from cronman.observability.tallies import Spread, Tally

BUCKETS = (0.001, 0.01, 0.1, 1.0, 30.0)


def _lines(registry: CollectorRegistry) -> list[str]:
    """The exposition's sample lines, without the ``_created`` ones (only
    prometheus_client's own metrics keep a creation time)."""
    return [line for line in generate_latest(registry).decode().splitlines()
            if line and not line.startswith("#") and "_created" not in line]


def test_a_tally_and_a_spread_expose_what_prometheus_metrics_would():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fires = Tally("x_fires", "fires", ("origin",), registry=ours)
    ref_fires = Counter("x_fires", "fires", ("origin",), registry=theirs)
    plain = Tally("x_plain", "plain", registry=ours)
    ref_plain = Counter("x_plain", "plain", registry=theirs)
    late = Spread("x_late", "late", ("ns",), buckets=BUCKETS, registry=ours)
    ref_late = Histogram("x_late", "late", ("ns",), buckets=BUCKETS, registry=theirs)
    whole = Spread("x_whole", "whole", buckets=BUCKETS, registry=ours)
    ref_whole = Histogram("x_whole", "whole", buckets=BUCKETS, registry=theirs)
    # Values on bucket bounds, between them, above the last one, and zero.
    for v in (0.0, 0.001, 0.005, 0.01, 0.5, 1.0, 29.9, 30.0, 31.0, 1e6):
        for ns in ("a", "b") if v < 1 else ("a",):
            late.labels(ns).observe(v)
            ref_late.labels(ns).observe(v)
        whole.observe(v)
        ref_whole.observe(v)
    for origin, n in (("schedule", 3), ("trigger", 1)):
        for _ in range(n):
            fires.labels(origin).inc()
            ref_fires.labels(origin).inc()
    plain.inc(2.5)
    ref_plain.inc(2.5)
    assert _lines(ours) == _lines(theirs)
    assert ours.get_sample_value("x_late_count", {"ns": "b"}) == 5
    assert ours.get_sample_value("x_late_bucket", {"ns": "a", "le": "0.01"}) == 4


def test_labels_are_checked_and_their_series_kept():
    registry = CollectorRegistry()
    tally = Tally("y_total_things", "things", ("kind",), registry=registry)
    assert tally.labels("a") is tally.labels("a")
    with pytest.raises(ValueError, match="expected labels"):
        tally.labels("a", "b")
    # A label given as a non-string is counted under its text, in one series.
    tally.labels(5).inc()  # type: ignore[arg-type]
    tally.labels("5").inc()
    assert registry.get_sample_value("y_total_things_total", {"kind": "5"}) == 2


def test_a_name_cannot_be_registered_twice():
    registry = CollectorRegistry()
    Tally("z_fires", "fires", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("z_fires", "fires", registry=registry)
