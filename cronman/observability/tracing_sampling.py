"""A run's sampling decision made once, before any of its spans.

The SDK's sampler decides inside each ``start_span``; by then cronman has
built the span's attributes and contexts. For the samplers the SDK makes of
``OTEL_TRACES_SAMPLER`` (``always_on``, ``always_off``, ``traceidratio`` and
their ``parentbased_*`` forms) a run's spans all get the decision of its
``cronman.run`` span: they share its trace id, and under a parent-based
sampler the others are its children. ``run_sampler`` makes that decision a
plain function of the trace id (and of a remote parent's sampled flag), with
the SDK's own semantics: ``TraceIdRatioBased`` keeps a trace when the low 64
bits of its id are below the sampler's ``bound``. Imported only with
OpenTelemetry (``tracing_otel``).
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    StaticSampler,
    TraceIdRatioBased,
)

# (trace id, the remote parent's sampled flag or None for a root) -> sampled.
RunSampler = Callable[[int, bool | None], bool]

_LOW_64 = TraceIdRatioBased.TRACE_ID_LIMIT


def _always(keep: bool) -> RunSampler:
    def decide(trace_id: int, parent: bool | None) -> bool:
        return keep
    return decide


def _ratio(bound: int) -> RunSampler:
    def decide(trace_id: int, parent: bool | None) -> bool:
        return trace_id & _LOW_64 < bound
    return decide


def _parent_based(root: RunSampler, sampled: RunSampler, unsampled: RunSampler) -> RunSampler:
    def decide(trace_id: int, parent: bool | None) -> bool:
        if parent is None:
            return root(trace_id, None)
        return (sampled if parent else unsampled)(trace_id, parent)
    return decide


def _drops_all(sampler: Sampler) -> bool:
    return _static(sampler) is Decision.DROP


def _static(sampler: Sampler) -> Decision | None:
    """The decision of a sampler that always makes the same one."""
    if isinstance(sampler, StaticSampler) and \
            type(sampler).should_sample is StaticSampler.should_sample:
        return sampler.should_sample(None, 1, "cronman.run").decision
    return None


def run_sampler(sampler: Sampler) -> RunSampler | None:
    """``sampler``'s decision on a run as one function, or None when it is
    a sampler of another kind (the SDK then decides span by span, as ever).

    A parent-based sampler qualifies only when it drops a span whose local
    parent is not sampled (the SDK's default): then a run whose span is
    dropped has all its spans dropped."""
    static = _static(sampler)
    if static is not None:
        if static is Decision.RECORD_ONLY:
            return None  # recorded, never exported: left to the SDK
        return _always(static is Decision.RECORD_AND_SAMPLE)
    if isinstance(sampler, TraceIdRatioBased) and \
            type(sampler).should_sample is TraceIdRatioBased.should_sample:
        return _ratio(sampler.bound)
    if isinstance(sampler, ParentBased) and \
            type(sampler).should_sample is ParentBased.should_sample:
        # The SDK keeps its delegates private; they are what it decides with.
        if not _drops_all(sampler._local_parent_not_sampled):
            return None
        root = run_sampler(sampler._root)
        sampled = run_sampler(sampler._remote_parent_sampled)
        unsampled = run_sampler(sampler._remote_parent_not_sampled)
        if root is None or sampled is None or unsampled is None:
            return None
        return _parent_based(root, sampled, unsampled)
    return None
