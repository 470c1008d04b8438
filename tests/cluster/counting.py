"""Counting fires at the receiver against what the workload owes.

The fires owed in a window come from the job definitions alone
(``Workload.expected``); the arrivals from the receiver's log. Each owed
(job, fire time) must arrive, and arrive once. Two arrivals of one fire are
told apart by their ``Cronman-Attempt``:

- a second first attempt means two nodes both dispatched the fire: a
  **double fire**, never allowed;
- a later attempt after an earlier one is a **re-delivery** of the same run
  (same ``Cronman-Run-Id``): the lease sweeper re-dispatched a run whose node
  died mid-flight (``at_least_once``), or a retry after a failed attempt.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cronman_bench.receiver import Arrival
from cronman_bench.workload import Workload


@dataclass
class Tally:
    """Owed fires of a window against what arrived."""

    window: tuple[int, int]
    expected: int = 0
    arrived: int = 0  # owed fires that arrived at least once
    missing: list[tuple[int, int]] = field(default_factory=list)  # (job index, fire ms)
    double_fires: list[tuple[int, int, int]] = field(default_factory=list)  # + first attempts
    redeliveries: list[tuple[int, int, list[int]]] = field(default_factory=list)  # + attempts
    unexpected: list[Arrival] = field(default_factory=list)  # not a fire time of its job
    # First arrival of each owed fire: (fire ms, lateness ms).
    first_lateness: list[tuple[int, int]] = field(default_factory=list)
    # Owed fires whose first arrival was a later attempt (the sweeper sent it:
    # its node died after starting it): (job index, fire ms, lateness ms).
    redispatched_first: list[tuple[int, int, int]] = field(default_factory=list)

    def lateness(self, lo_ms: int | None = None, hi_ms: int | None = None,
                 first_attempts_only: bool = False) -> list[int]:
        """Sorted first-arrival lateness of the fires due in [lo, hi)
        (``first_attempts_only``: leave out fires first sent by the sweeper)."""
        skip = ({(t, late) for _i, t, late in self.redispatched_first}
                if first_attempts_only else set())
        return sorted(late for t, late in self.first_lateness
                      if (lo_ms is None or t >= lo_ms) and (hi_ms is None or t < hi_ms)
                      and (t, late) not in skip)

    def summary(self) -> str:
        lat = self.lateness()
        return (f"expected {self.expected}, arrived {self.arrived}, missing {len(self.missing)}, "
                f"double fires {len(self.double_fires)}, re-deliveries {len(self.redeliveries)}, "
                f"unexpected {len(self.unexpected)}, first sent by the sweeper "
                f"{len(self.redispatched_first)}; lateness p50 {pct(lat, 50)} ms, "
                f"p99 {pct(lat, 99)} ms, max {lat[-1] if lat else None} ms")


def pct(sorted_values: Sequence[int], p: float) -> int | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * len(sorted_values))) - 1))
    return sorted_values[k]


def tally(w: Workload, job_ids: Sequence[str], arrivals: Iterable[Arrival],
          start_ms: int, end_ms: int) -> Tally:
    """Compare the fires owed in [start_ms, end_ms) with ``arrivals``."""
    index = {job_id: i for i, job_id in enumerate(job_ids)}
    got: dict[tuple[int, int], list[Arrival]] = defaultdict(list)
    t = Tally(window=(start_ms, end_ms))
    for a in arrivals:
        i = index.get(a.job_id)
        if i is None or a.scheduled_ms is None:
            t.unexpected.append(a)
            continue
        if start_ms <= a.scheduled_ms < end_ms:
            got[(i, a.scheduled_ms)].append(a)
    owed = set()
    for key in w.expected(start_ms, end_ms):
        owed.add(key)
        t.expected += 1
        seen = got.get(key)
        if not seen:
            t.missing.append(key)
            continue
        t.arrived += 1
        seen.sort(key=lambda a: a.arrived_ms)
        t.first_lateness.append((key[1], seen[0].arrived_ms - key[1]))
        if seen[0].attempt > 1:
            t.redispatched_first.append((key[0], key[1], seen[0].arrived_ms - key[1]))
        firsts = sum(1 for a in seen if a.attempt <= 1)
        if firsts > 1:
            t.double_fires.append((key[0], key[1], firsts))
        if any(a.attempt > 1 for a in seen):
            t.redeliveries.append((key[0], key[1], [a.attempt for a in seen]))
    for key, seen in got.items():
        if key not in owed:
            t.unexpected.extend(seen)
    t.missing.sort(key=lambda k: k[1])
    return t


def describe_missing(t: Tally, job_ids: Sequence[str], limit: int = 10) -> str:
    lines = [f"job {job_ids[i]} (#{i}) at {ms}" for i, ms in t.missing[:limit]]
    more = len(t.missing) - limit
    if more > 0:
        lines.append(f"... and {more} more")
    return "\n".join(lines)
