"""``GcPauseWatch``: each collection's duration, by generation, while it watches."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Histogram

from cronman.observability.gc_pauses import GC_PAUSE_BUCKETS, GcPauseWatch


def samples(registry: CollectorRegistry, suffix: str) -> dict[str, float]:
    return {s.labels["generation"]: s.value
            for m in registry.collect() for s in m.samples if s.name.endswith(suffix)}


def test_collections_are_timed_while_watched_and_observed_on_flush() -> None:
    registry = CollectorRegistry()
    watch = GcPauseWatch(Histogram("pauses", "test", ("generation",),
                                   buckets=GC_PAUSE_BUCKETS, registry=registry))
    watch.start()
    watch.start()  # once only
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
        # Not observed from the collector's callback: only on flush.
        assert samples(registry, "_count") == {"0": 0, "1": 0, "2": 0}
    finally:
        watch.stop()
    gc.collect(2)  # not watched any more
    watch.flush()
    counts = samples(registry, "_count")
    assert counts["0"] >= 1
    assert counts["2"] == 2
    assert samples(registry, "_sum")["2"] > 0
    watch.flush()  # nothing new
    assert samples(registry, "_count") == counts
