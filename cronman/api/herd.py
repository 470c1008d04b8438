"""The herd forecast: fires per second ahead, worked out from the jobs'
schedules (``cronman.schedules``), per namespace and per destination, and
the seconds where a limit's rate would hold fires back.

Fire times are the nominal ones (no jitter, no exclusion calendar); jobs
sharing a schedule (the top-of-the-hour herd: one cron expression, many
jobs) have their times worked out once, and the jobs are read as lean rows
(each distinct JSON text decoded once). A limit's rate is played second by
second: fires beyond it wait for the next seconds (``waiting``). A
concurrency cap depends on how long runs take, which a forecast cannot
know: it is not played.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cronman.limits import Limit, LimitIndex, target_host
from cronman.schedules import IntervalSchedule, JobTimes, parse_schedule
from cronman.timeutil import format_rfc3339, from_ms

TOP_BREAKDOWN = 5  # namespaces and hosts listed per second


class HerdRow(Protocol):
    """What the forecast reads of a job: a live one's lean row
    (``models.JobRow``), or a job proposed (``forecast_proposal``)."""

    @property
    def id(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def schedule(self) -> str: ...  # JSON text
    @property
    def target(self) -> str: ...  # JSON text
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def paused(self) -> bool: ...
    @property
    def created_at(self) -> datetime: ...


class TooManyFires(Exception):
    """The range holds more fire times than the forecast counts."""


@dataclass
class Herd:
    """Fires per second over a range (seconds as Unix seconds)."""

    from_ms: int
    to_ms: int
    jobs: int = 0
    fires: int = 0
    per_second: Counter[int] = field(default_factory=Counter)
    # Fires per second of each namespace, of each host, of each limit.
    by_namespace: dict[str, Counter[int]] = field(default_factory=dict)
    by_host: dict[str, Counter[int]] = field(default_factory=dict)
    by_limit: dict[str, Counter[int]] = field(default_factory=dict)

    @staticmethod
    def breakdown(counts: dict[str, Counter[int]], seconds: set[int]
                  ) -> dict[int, Counter[str]]:
        """Per second of ``seconds``: its counts by name."""
        out: dict[int, Counter[str]] = {s: Counter() for s in seconds}
        for name, per_second in counts.items():
            for second in seconds:
                n = per_second.get(second)
                if n:
                    out[second][name] = n
        return out

    @staticmethod
    def totals(counts: dict[str, Counter[int]]) -> Counter[str]:
        return Counter({name: sum(c.values()) for name, c in counts.items()})

    def add(self, seconds: list[int] | Counter[int], namespace: str, host: str,
            names: tuple[str, ...]) -> None:
        """Count ``seconds`` (a fire each, or a count each) for one kind of job."""
        for counts, key in ((self.by_namespace, namespace), (self.by_host, host)):
            got = counts.get(key)
            if got is None:
                got = counts[key] = Counter()
            got.update(seconds)
        for name in names:
            self.by_limit.setdefault(name, Counter()).update(seconds)


_Member = tuple[str, str, tuple[str, ...]]  # (namespace, host, limit names)


def _fire_seconds(times: JobTimes, from_ms: int, to_ms: int, budget: int) -> list[int]:
    """The second of each fire time in ``[from_ms, to_ms)``, at most
    ``budget`` + 1 of them."""
    schedule = times.schedule
    if (isinstance(schedule, IntervalSchedule) and times.start_at is None
            and times.end_at is None):
        first = schedule.next_ms_after(from_ms - 1)
        if first is None or first >= to_ms:
            return []
        stop = min(to_ms, first + (budget + 1) * schedule.every_ms)
        return [ms // 1000 for ms in range(first, stop, schedule.every_ms)]
    out: list[int] = []
    ms = times.next_fire_ms_after(from_ms - 1)
    while ms is not None and ms < to_ms and len(out) <= budget:
        out.append(ms // 1000)
        ms = times.next_fire_ms_after(ms)
    return out


def count_fires(rows: Iterable[HerdRow], limits: LimitIndex, from_ms: int, to_ms: int, *,
                max_fires: int, labelled: Mapping[str, frozenset[str]] | None = None) -> Herd:
    """Every fire time in ``[from_ms, to_ms)`` of the live, unpaused jobs
    (lean rows: their JSON as text, each distinct text decoded once;
    ``labelled``: the ids of the jobs carrying each label a limit matches);
    ``TooManyFires`` past ``max_fires``."""
    herd = Herd(from_ms, to_ms)
    groups: dict[tuple[str, Any, Any], tuple[HerdRow, Counter[_Member]]] = {}
    targets: dict[str, tuple[dict[str, Any], str]] = {}
    matched: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
    labelled = labelled or {}
    for row in rows:
        if row.paused:
            continue
        herd.jobs += 1
        key = (row.schedule, row.start_at, row.end_at)
        group = groups.get(key)
        if group is None:
            group = groups[key] = (row, Counter())
        target = targets.get(row.target)
        if target is None:
            decoded = json.loads(row.target)
            target = targets[row.target] = (decoded, target_host(decoded) or "?")
        labels = tuple(label for label, ids in labelled.items() if row.id in ids)
        names = matched.get((row.namespace, row.target, labels))
        if names is None:
            names = matched[(row.namespace, row.target, labels)] = tuple(
                lim.name for lim in limits.matching(
                    row.namespace, target[0], dict(lbl.split(":", 1) for lbl in labels)))
        group[1][(row.namespace, target[1], names)] += 1
    _refuse_early(groups, from_ms, to_ms, max_fires)
    for first, members in groups.values():
        schedule = json.loads(first.schedule)
        weight = sum(members.values())
        if schedule.get("kind") == "after":  # fired by its upstreams, not by a time
            herd.jobs -= weight
            continue
        times = JobTimes(parse_schedule(schedule, job_id=first.id, created_at=first.created_at),
                         job_id=first.id, start_at=first.start_at, end_at=first.end_at,
                         jitter=None)
        seconds = _fire_seconds(times, from_ms, to_ms, (max_fires - herd.fires) // weight)
        herd.fires += len(seconds) * weight
        if herd.fires > max_fires:
            raise TooManyFires(f"more than {max_fires} fires in the range")
        if not seconds:
            continue
        if weight == 1:  # most jobs: counted element by element, in C
            ((namespace, host, names),) = members
            herd.per_second.update(seconds)
            herd.add(seconds, namespace, host, names)
            continue
        once = Counter(seconds)
        herd.per_second.update(Counter({s: k * weight for s, k in once.items()}))
        for (namespace, host, names), n in members.items():
            herd.add(once if n == 1 else Counter({s: k * n for s, k in once.items()}),
                     namespace, host, names)
    return herd


def _refuse_early(groups: Mapping[Any, tuple[HerdRow, Counter[_Member]]], from_ms: int,
                  to_ms: int, max_fires: int) -> None:
    """``TooManyFires`` at once when the plain interval jobs alone hold more
    than ``max_fires`` fire times (counted arithmetically, none listed)."""
    total = 0
    for first, members in groups.values():
        if first.start_at is not None or first.end_at is not None:
            continue
        schedule = json.loads(first.schedule)
        if schedule.get("kind") != "interval":
            continue
        every_ms = int(round(float(schedule["every"]) * 1000))
        total += sum(members.values()) * max(0, (to_ms - from_ms) // max(1, every_ms))
        if total > max_fires:
            raise TooManyFires(f"more than {max_fires} fires in the range")


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
    busiest = heapq.nsmallest(top, herd.per_second.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen = {s for s, _ in busiest}
    namespaces = herd.breakdown(herd.by_namespace, chosen)
    hosts = herd.breakdown(herd.by_host, chosen)
    seconds = [{"at": format_rfc3339(from_ms(s * 1000)), "fires": n,
                "namespaces": dict(namespaces[s].most_common(TOP_BREAKDOWN)),
                "hosts": dict(hosts[s].most_common(TOP_BREAKDOWN))}
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
        "namespaces": dict(herd.totals(herd.by_namespace).most_common()),
        "hosts": dict(herd.totals(herd.by_host).most_common(100)),
        "limits": summary,
        "held": held[:max_held],
        "held_truncated": len(held) > max_held,
    }
