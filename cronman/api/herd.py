"""The herd forecast: fires per second ahead, worked out from the jobs'
schedules (``cronman.schedules``), per namespace and per destination, and
the seconds where a limit's rate would hold fires back.

Fire times are the nominal ones (no jitter, no exclusion calendar); jobs
sharing a schedule (the top-of-the-hour herd: one cron expression, many
jobs) have their times worked out once. A limit's rate is played second by
second: fires beyond it wait for the next seconds (``waiting``). A
concurrency cap depends on how long runs take, which a forecast cannot
know: it is not played.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cronman.limits import Limit, LimitIndex, target_host
from cronman.models import Job
from cronman.schedules import job_times
from cronman.timeutil import format_rfc3339, from_ms

TOP_BREAKDOWN = 5  # namespaces and hosts listed per second


class TooManyFires(Exception):
    """The range holds more fire times than the forecast counts."""


@dataclass
class Herd:
    """Fires per second over a range."""

    from_ms: int
    to_ms: int
    jobs: int = 0
    fires: int = 0
    per_second: Counter[int] = field(default_factory=Counter)
    by_namespace: dict[int, Counter[str]] = field(default_factory=dict)
    by_host: dict[int, Counter[str]] = field(default_factory=dict)
    by_limit: dict[str, Counter[int]] = field(default_factory=dict)
    namespaces: Counter[str] = field(default_factory=Counter)
    hosts: Counter[str] = field(default_factory=Counter)


def count_fires(jobs: Iterable[Job], limits: LimitIndex, from_ms: int, to_ms: int, *,
                max_fires: int) -> Herd:
    """Every fire time in ``[from_ms, to_ms)`` of the live, unpaused ``jobs``;
    ``TooManyFires`` past ``max_fires``."""
    herd = Herd(from_ms, to_ms)
    groups: dict[tuple[str, Any, Any], tuple[Job, Counter[tuple[str, str, tuple[str, ...]]]]] = {}
    for job in jobs:
        if job.paused or job.deleted_at is not None or job.schedule.get("kind") == "after":
            continue
        herd.jobs += 1
        key = (json.dumps(job.schedule, sort_keys=True), job.start_at, job.end_at)
        if job.schedule.get("kind") == "interval" and "anchor" not in job.schedule:
            key = (job.id, job.start_at, job.end_at)  # anchored at its creation
        group = groups.get(key)
        if group is None:
            group = groups[key] = (job, Counter())
        host = target_host(job.target) or "?"
        names = tuple(lim.name for lim in limits.matching(job.namespace, job.target,
                                                          job.labels))
        group[1][(job.namespace, host, names)] += 1
    for first, members in groups.values():
        times = job_times(first)
        weight = sum(members.values())
        ms = times.next_fire_ms_after(from_ms - 1)
        while ms is not None and ms < to_ms:
            herd.fires += weight
            if herd.fires > max_fires:
                raise TooManyFires(f"more than {max_fires} fires in the range")
            second = ms // 1000
            herd.per_second[second] += weight
            ns_counts = herd.by_namespace.setdefault(second, Counter())
            host_counts = herd.by_host.setdefault(second, Counter())
            for (namespace, host, names), n in members.items():
                ns_counts[namespace] += n
                host_counts[host] += n
                for name in names:
                    herd.by_limit.setdefault(name, Counter())[second] += n
            ms = times.next_fire_ms_after(ms)
    for second in herd.per_second:
        herd.namespaces.update(herd.by_namespace[second])
        herd.hosts.update(herd.by_host[second])
    return herd


def hold_back(limit: Limit, arrivals: Counter[int], to_second: int) -> list[dict[str, Any]]:
    """The seconds where ``limit``'s rate holds fires back: arriving that
    second, allowed, and waiting at its end (what was held, carried on)."""
    if limit.rate is None or not arrivals:
        return []
    allowed = limit.count * 1000 / limit.window_ms
    out: list[dict[str, Any]] = []
    waiting = 0.0

    def note(second: int, arriving: int) -> None:
        out.append({"at": format_rfc3339(from_ms(second * 1000)), "limit": limit.name,
                    "arriving": arriving, "allowed": round(allowed, 3),
                    "waiting": int(round(waiting))})

    def drain(second: int, until: int) -> None:
        nonlocal waiting
        while waiting > 0 and second < until:
            waiting = max(0.0, waiting - allowed)
            if waiting > 0:
                note(second, 0)
            second += 1

    prev: int | None = None
    for second in sorted(arrivals):
        if prev is not None:
            drain(prev + 1, second)
        waiting = max(0.0, waiting + arrivals[second] - allowed)
        if waiting > 0:
            note(second, arrivals[second])
        prev = second
    if prev is not None:
        drain(prev + 1, to_second)
    return out


def forecast_json(herd: Herd, limits: LimitIndex, *, top: int, max_held: int = 1000
                  ) -> dict[str, Any]:
    """The forecast's answer: the busiest ``top`` seconds (with their
    namespaces and hosts), the totals, and the seconds limits hold fires back."""
    busiest = sorted(herd.per_second.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    seconds = [{"at": format_rfc3339(from_ms(s * 1000)), "fires": n,
                "namespaces": dict(herd.by_namespace[s].most_common(TOP_BREAKDOWN)),
                "hosts": dict(herd.by_host[s].most_common(TOP_BREAKDOWN))}
               for s, n in busiest]
    held: list[dict[str, Any]] = []
    summary = []
    by_name = {lim.name: lim for lim in limits.limits}
    to_second = (herd.to_ms + 999) // 1000 + 86_400  # a backlog may outlast the range
    for name, arrivals in sorted(herd.by_limit.items()):
        limit = by_name.get(name)
        if limit is None:
            continue
        rows = hold_back(limit, arrivals, to_second)
        summary.append({"name": name, "fires": sum(arrivals.values()),
                        "peak_per_second": max(arrivals.values()),
                        "rate": limit.rate, "seconds_held": len(rows),
                        "max_waiting": max((r["waiting"] for r in rows), default=0)})
        held.extend(rows)
    held.sort(key=lambda r: (-r["waiting"], r["at"]))
    peak = busiest[0] if busiest else None
    return {
        "from": format_rfc3339(from_ms(herd.from_ms)), "to": format_rfc3339(from_ms(herd.to_ms)),
        "jobs": herd.jobs, "fires": herd.fires,
        "peak": None if peak is None else {"at": format_rfc3339(from_ms(peak[0] * 1000)),
                                           "fires": peak[1]},
        "seconds": seconds,
        "namespaces": dict(herd.namespaces.most_common()),
        "hosts": dict(herd.hosts.most_common(100)),
        "limits": summary,
        "held": held[:max_held],
        "held_truncated": len(held) > max_held,
    }
