"""``GcPauseWatch``: each collection's duration, by generation, while it watches."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Histogram

from cronman.observability.gc_pauses import GC_PAUSE_BUCKETS, GcPauseWatch


def counts(registry: CollectorRegistry) -> dict[str, float]:
    return {s.labels["generation"]: s.value
            for m in registry.collect() for s in m.samples if s.name.endswith("_count")}


def test_collections_are_observed_by_generation_while_watched() -> None:
    registry = CollectorRegistry()
    watch = GcPauseWatch(Histogram("pauses", "test", ("generation",),
                                   buckets=GC_PAUSE_BUCKETS, registry=registry))
    watch.start()
    watch.start()  # once only
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        watch.stop()
    gc.collect(2)  # not watched any more
    seen = counts(registry)
    assert seen["0"] >= 1
    assert seen["2"] == 2
    sums = {s.labels["generation"]: s.value
            for m in registry.collect() for s in m.samples if s.name.endswith("_sum")}
    assert sums["2"] > 0
