"""Counters and histograms for the per-fire path: plain numbers, no locks.

prometheus_client's metrics take a lock for every increment and check, per
call, that the metric may be observed; a fire bumped about ten of them,
about a tenth of a node's event-loop CPU at 1,000 fires/s. These keep plain
numbers instead, written by one thread (the scheduler's event loop) and
read by the scrape: a scrape may see one observation in a histogram's sum
and not yet in its count, never a torn number. They are exposed under the
same names, labels and types as prometheus_client's own.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class TallyChild:
    """One counter series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class SpreadChild:
    """One histogram series: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


C = TypeVar("C", "TallyChild", "SpreadChild")


class _Family(Collector, Generic[C]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry | None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], C] = {}
        self._lookup: dict[tuple[object, ...], C] = {}
        self._unlabelled: C | None = None if self.labelnames else self._new_series()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: object) -> C:
        """The series of ``values`` (as label strings), made on first use."""
        child = self._lookup.get(values)
        if child is None:
            key = tuple(str(v) for v in values)
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
            child = self._lookup[values] = self._children.setdefault(key, self._new_series())
        return child

    def _new_series(self) -> C:
        raise NotImplementedError

    def describe(self) -> list[Metric]:
        """The family without samples: the registry refuses a name taken twice."""
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError


class Tally(_Family[TallyChild]):
    """A counter (``<name>_total``), optionally labelled; ``labels`` returns
    the series to ``inc`` (keep it: the lookup is the costly part)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry | None) -> None:
        super().__init__(name, documentation, labelnames, registry)

    def _new_series(self) -> TallyChild:
        return TallyChild()

    def inc(self, amount: float = 1) -> None:
        assert self._unlabelled is not None, f"{self.name} has labels"
        self._unlabelled.inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        if self._unlabelled is not None:
            family.add_metric((), self._unlabelled.value)
        for key, child in list(self._children.items()):
            family.add_metric(key, child.value)
        yield family


class Spread(_Family[SpreadChild]):
    """A histogram with the given bucket bounds, optionally labelled; ``labels``
    returns the series to ``observe``."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry | None) -> None:
        self._bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        super().__init__(name, documentation, labelnames, registry)

    def _new_series(self) -> SpreadChild:
        return SpreadChild(self._bounds)

    def observe(self, value: float) -> None:
        assert self._unlabelled is not None, f"{self.name} has labels"
        self._unlabelled.observe(value)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        series: list[tuple[tuple[str, ...], SpreadChild]] = list(self._children.items())
        if self._unlabelled is not None:
            series.insert(0, ((), self._unlabelled))
        edges = [_le(b) for b in self._bounds] + ["+Inf"]
        for key, child in series:
            counts, total = list(child.counts), child.sum
            cumulative, buckets = 0, []
            for edge, n in zip(edges, counts, strict=True):
                cumulative += n
                buckets.append((edge, cumulative))
            family.add_metric(key, buckets, total)
        yield family


def _le(bound: float) -> str:
    """A bucket bound as prometheus_client writes it (``0.5``, ``1.0``, ``1e+08``)."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
