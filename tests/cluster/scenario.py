"""A timed chaos scenario on a real cluster, measured at the receiver.

``run_scenario`` starts the nodes, then creates the jobs (the nodes hear of
them through the change feed, so no start-up catch-up lands in the window),
waits for a warm-up, measures a window during which timed actions run
(SIGKILL a node, restart Redis, stop the database...), lets stragglers land,
stops everything and tallies the arrivals against the fires owed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cronman.timeutil import now_ms
from tests.cluster.counting import Tally, pct, tally
from tests.cluster.harness import Cluster, Fires

JOBS = 2000
EVERY_S = 5  # 2,000 jobs every 5 s: 400 fires/s
WARMUP_S = 5
SETTLE_S = 4.0  # after the window: room for stragglers
AROUND_MS = 5000  # fires due this long after an event are "around" it


@dataclass
class Outcome:
    tally: Tally
    start_ms: int
    end_ms: int
    events: dict[str, list[int]] = field(default_factory=dict)  # name -> wall ms
    metrics: dict[str, float] = field(default_factory=dict)  # summed over live nodes

    def at(self, name: str) -> int:
        return self.events[name][0]

    def lateness_around(self, at_ms: int, before_ms: int = 1000,
                        after_ms: int = AROUND_MS) -> list[int]:
        return self.tally.lateness(at_ms - before_ms, at_ms + after_ms)

    def steady(self, around: list[int], after_ms: int = AROUND_MS) -> list[int]:
        """Lateness of fires due away from every listed event."""
        return sorted(late for at, late in self.tally.first_lateness
                      if all(not (e - 1000 <= at < e + after_ms) for e in around))

    def describe(self, name: str) -> str:
        t = self.tally
        lines = [f"[{name}] {t.summary()}"]
        everything = sorted(ms for times in self.events.values() for ms in times)
        steady = self.steady(everything)
        lines.append(f"[{name}] away from events: p50 {pct(steady, 50)} p99 {pct(steady, 99)} "
                     f"max {steady[-1] if steady else None} ms ({len(steady)} fires)")
        for ev, times in self.events.items():
            for ms in times:
                near = self.tally.lateness(ms - 1000, ms + AROUND_MS, first_attempts_only=True)
                lines.append(f"[{name}] {ev} at +{(ms - self.start_ms) / 1000:.1f} s: fires due "
                             f"[-1 s, +{AROUND_MS // 1000} s), first attempts: "
                             f"p50 {pct(near, 50)} p99 "
                             f"{pct(near, 99)} max {near[-1] if near else None} ms "
                             f"({len(near)} fires)")
        return "\n".join(lines)


Action = Callable[[], None]


def sleep_until(ms: int, cluster: Cluster) -> None:
    while True:
        left = ms - now_ms()
        if left <= 0:
            return
        cluster.assert_all_running()
        time.sleep(min(0.2, left / 1000))


def run_scenario(cluster: Cluster, fires: Fires, *, nodes: int, window_s: float,
                 actions: list[tuple[float, str, Action]], jobs: int = JOBS,
                 every_s: int = EVERY_S, settle_s: float = SETTLE_S) -> Outcome:
    """Run ``actions`` (offset seconds into the window, event name, callable)."""
    cluster.start(nodes)
    w = fires.create_jobs(cluster.database_url, jobs, every_s)
    start = (now_ms() // 1000 + WARMUP_S) * 1000
    end = start + int(window_s * 1000)
    out = Outcome(tally=None, start_ms=start, end_ms=end)  # type: ignore[arg-type]
    for offset, name, action in sorted(actions, key=lambda a: a[0]):
        sleep_until(start + int(offset * 1000), cluster)
        out.events.setdefault(name, []).append(now_ms())
        action()
    sleep_until(end, cluster)
    for node in cluster.running():
        cluster.wait_ready(node)
    time.sleep(settle_s)
    for name in ("cronman_double_fires_total", "cronman_fence_losses_total",
                 "cronman_lock_losses_total", "cronman_runs_recovered_total",
                 "cronman_fires_not_dispatched_total"):
        out.metrics[name] = cluster.metric_total(name)
    cluster.stop_all()
    fires.stop()
    out.tally = tally(w, fires.job_ids, fires.arrivals(), start, end)
    return out
