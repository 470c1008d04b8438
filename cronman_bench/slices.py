"""Figures of one slice of a measured window: the overload scenario's phases,
a herd's priorities, the skew scenario's early and late fires.

Two clocks slice a window. *Fire time* (what was due in the slice): its
lateness, per priority, missed and doubled fires. *Arrival time* (what the
system pushed out while the slice ran): delivered fires per second, CPU per
fire, and the nodes' counters read at the slice's ends (takeovers by reason,
double fires). Everything here reads a finished ``PhaseOutcome``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cronman_bench import nodemetrics
from cronman_bench.cost import per_fire
from cronman_bench.harness import Mark, PhaseOutcome
from cronman_bench.report import Tally, _over_allowed, lateness_summary, percentile

EARLY_BOUND_MS = 50  # a fire arriving more than this before its time is early (SPEC §6)


def priority_of(t: Tally, i: int) -> int:
    return t.w.local(i)[0].priority


def group_name(t: Tally, i: int) -> str:
    g = t.w.local(i)[0]
    return f"{g.namespace}/{g.name}"


def lateness_by_priority(t: Tally, lo: int, hi: int) -> dict[str, dict[str, Any]]:
    """Lateness of the fires due in [lo, hi), per priority (keys are the priorities)."""
    got: dict[int, list[int]] = {}
    for (i, f), rec in t.pairs.items():
        if lo <= f < hi:
            got.setdefault(priority_of(t, i), []).append(rec.first_ms - f)
    return {str(p): lateness_summary(v) for p, v in sorted(got.items())}


def first_arrivals_between(t: Tally, lo: int, hi: int) -> int:
    """Owed fires (of any fire time in the window) whose first arrival fell in [lo, hi)."""
    return sum(1 for rec in t.pairs.values() if lo <= rec.first_ms < hi)


def slice_figures(o: PhaseOutcome, lo: int, hi: int, a: Mark | None, b: Mark | None
                  ) -> dict[str, Any]:
    """The figures of [lo, hi) of a phase; ``a``/``b``: the meters read at its ends."""
    t = o.tally
    seconds = (hi - lo) / 1000
    owed = t.w.expected_count(lo, hi)
    late = t.lateness(lo, hi)
    delivered = first_arrivals_between(t, lo, hi)
    out: dict[str, Any] = {
        "from_s": round((lo - t.start_ms) / 1000, 1), "to_s": round((hi - t.start_ms) / 1000, 1),
        "offered_per_s": round(t.w.rate_at(lo), 1),
        "delivered_per_s": round(delivered / seconds, 1) if seconds > 0 else None,
        "received_per_s": round(t.arrivals_between(lo, hi) / seconds, 1) if seconds else None,
        "due": owed, "due_delivered": len(late), "missed": owed - len(late),
        "lateness": lateness_summary(late),
        "lateness_by_priority": lateness_by_priority(t, lo, hi),
        **t.kinds(lo, hi),
    }
    if a is not None and b is not None and o.meters is not None:
        cpu = o.meters.cpu_between(a, b)
        out["cpu_s_by_kind"] = {k: round(v, 2) for k, v in cpu.items()}
        out["cpu_ms_per_fire_by_kind"] = per_fire(cpu, t.arrivals_between(a.at_ms, b.at_ms))
        if a.probe or b.probe:
            out["takeovers_by_reason"] = {k: int(v) for k, v in nodemetrics.counter_delta(
                a.probe, b.probe, nodemetrics.TAKEOVERS, "reason").items() if v}
            out["double_fires_metric"] = int(nodemetrics.counter_delta(
                a.probe, b.probe, nodemetrics.DOUBLE_FIRES).get("all", 0))
            out["misfires_skipped_metric"] = int(nodemetrics.counter_delta(
                a.probe, b.probe, nodemetrics.MISFIRES_SKIPPED).get("all", 0))
            out["gc_pause_s"] = round(nodemetrics.counter_delta(
                a.probe, b.probe, nodemetrics.GC_PAUSE_SECONDS).get("all", 0.0), 2)
        if o.meters.probes:
            out["max_backlog_seconds"] = _gauge_max(o.meters.probes, lo, hi,
                                                    nodemetrics.BACKLOG_SECONDS)
            out["max_backlog"] = _gauge_max(o.meters.probes, lo, hi, nodemetrics.BACKLOG)
            out["max_held_back"] = _gauge_max(o.meters.probes, lo, hi, nodemetrics.HELD_BACK)
    return out


def _gauge_max(probes: Iterable[tuple[int, Mapping[str, nodemetrics.Scrape | None]]],
               lo: int, hi: int, name: str) -> float | None:
    values = [v for node in nodemetrics.gauges(
        [(at, p) for at, p in probes if lo <= at < hi], name).values() for _, v in node]
    return round(max(values), 3) if values else None


def recovered_after(t: Tally, since_ms: int, until_ms: int, limit_ms: int,
                    min_tail_s: float = 10.0) -> float | None:
    """Seconds from ``since_ms`` until lateness is back under ``limit_ms``.

    The first second *b* (by fire time) from which every owed fire arrived and
    both the fires of *b* and all the fires from *b* to ``until_ms`` have
    p99 lateness within the limit, with at least ``min_tail_s`` left after it
    (``report.steady_after``'s rule, on a slice). None if it never recovered.
    """
    owed: dict[int, int] = {}
    for _i, f in t.w.expected(since_ms, until_ms):
        owed[(f - since_ms) // 1000] = owed.get((f - since_ms) // 1000, 0) + 1
    got: dict[int, list[int]] = {}
    for (_i, f), rec in t.pairs.items():
        if since_ms <= f < until_ms:
            got.setdefault((f - since_ms) // 1000, []).append(rec.first_ms - f)
    buckets = sorted(owed)
    n = over = 0
    complete = True
    ok_from: dict[int, bool] = {}
    complete_from: int | None = None
    for b in reversed(buckets):
        values = got.get(b, [])
        complete = complete and len(values) == owed[b]
        if complete:
            complete_from = b
        n += len(values)
        over += sum(1 for v in values if v > limit_ms)
        ok_from[b] = over <= _over_allowed(n)
    if complete_from is None:
        return None
    last = buckets[-1]
    for b in buckets:
        if b < complete_from:
            continue
        if last - b + 1 < min_tail_s:
            return None
        own = sorted(got.get(b, []))
        own_p99 = percentile(own, 99)
        if own_p99 is not None and own_p99 <= limit_ms and ok_from[b]:
            return float(b)
    return None


def early_late(t: Tally, lo: int, hi: int, late_ms: int | None) -> dict[str, int]:
    """Fires due in [lo, hi) that arrived early (before their time minus the
    bound, any arrival) or later than ``late_ms`` (first arrival)."""
    early = late = 0
    for (_i, f), rec in t.pairs.items():
        if not lo <= f < hi:
            continue
        if rec.first_ms < f - EARLY_BOUND_MS:
            early += 1
        elif late_ms is not None and rec.first_ms - f > late_ms:
            late += 1
    return {"early": early, "late_beyond_normal_p99": late}
