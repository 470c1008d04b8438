"""A run's sampling decision made once agrees with what the SDK's sampler
decides for its ``cronman.run`` span, for every sampler ``OTEL_TRACES_SAMPLER``
names, as a root and under a remote parent sampled or not; other samplers
are left to the SDK."""

from __future__ import annotations

import random

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    AlwaysRecordSampler,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from cronman.observability.tracing_otel import trace_id_of
from cronman.observability.tracing_sampling import run_sampler

SAMPLERS = {
    "always_on": ALWAYS_ON, "always_off": ALWAYS_OFF,
    "parentbased_always_on": DEFAULT_ON, "parentbased_always_off": DEFAULT_OFF,
    "traceidratio 0.01": TraceIdRatioBased(0.01), "traceidratio 0.5": TraceIdRatioBased(0.5),
    "traceidratio 0": TraceIdRatioBased(0.0), "traceidratio 1": TraceIdRatioBased(1.0),
    "parentbased_traceidratio 0.01": ParentBasedTraceIdRatio(0.01),
    "parentbased_traceidratio 0.3": ParentBasedTraceIdRatio(0.3),
}


def _parent(trace_id: int, sampled: bool | None):
    if sampled is None:
        return None
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return trace.set_span_in_context(NonRecordingSpan(
        SpanContext(trace_id, 0x1234, is_remote=True, trace_flags=flags)))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_the_decision_is_the_sdks(name):
    sampler = SAMPLERS[name]
    decide = run_sampler(sampler)
    assert decide is not None
    rng = random.Random(42)
    trace_ids = [trace_id_of(f"run-{i}") for i in range(2000)]
    trace_ids += [rng.getrandbits(128) or 1 for _ in range(2000)]
    # Right at the ratio's bound: the low 64 bits decide, the high ones do not.
    if isinstance(sampler, TraceIdRatioBased):
        bound = sampler.bound
        trace_ids += [(7 << 64) | max(0, bound - 1), (7 << 64) | bound, bound]
    for trace_id in trace_ids:
        for parent in (None, True, False):
            sdk = sampler.should_sample(_parent(trace_id, parent), trace_id, "cronman.run")
            assert decide(trace_id, parent) == (sdk.decision is Decision.RECORD_AND_SAMPLE), (
                name, hex(trace_id), parent)


@pytest.mark.parametrize("sampler", [
    AlwaysRecordSampler(ALWAYS_OFF),
    StaticSampler(Decision.RECORD_ONLY),
    ParentBased(ALWAYS_OFF, local_parent_not_sampled=ALWAYS_ON),
    ParentBased(AlwaysRecordSampler(ALWAYS_OFF)),
], ids=["always_record", "record_only", "children_of_unsampled_kept", "custom_root"])
def test_other_samplers_are_left_to_the_sdk(sampler):
    assert run_sampler(sampler) is None
