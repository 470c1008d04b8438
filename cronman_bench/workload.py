"""The benchmark's workload: interval jobs in groups, and the fires they owe.

A ``Workload`` is one group: ``count`` jobs, job ``i`` firing at
``anchor_i + k * every`` (``k`` any integer) while its window is open
(``start_ms`` inclusive, ``end_ms`` exclusive; both optional). Anchors are
spread evenly across one interval (steady load) or all equal (a herd). A
group also carries what a job of it asks for besides its times: priority,
namespace, misfire policy and grace.

A ``Mix`` puts groups side by side (the overload phases: a base group plus
groups whose windows open and close at the phase boundaries; a herd of low
and high priority jobs; one namespace's herd next to another's steady jobs).
Both answer the same questions, so the rest of the benchmark takes either.

The fires a system owes in a window are computed from these definitions
alone, never from what the system reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from cronman.timeutil import format_rfc3339, from_ms

BENCH_NAMESPACE = "bench"


@dataclass(frozen=True, slots=True)
class Workload:
    """``count`` interval jobs every ``every_ms``; anchors from ``base_ms``.

    ``spread``: anchor_i = base + floor(i * every / count); otherwise every
    anchor is ``base_ms`` (all jobs due at the same instant). ``start_ms`` /
    ``end_ms`` bound the fire times (cronman: the job's ``start_at`` /
    ``end_at``; APScheduler: the trigger's start and end date).
    """

    count: int
    every_ms: int
    base_ms: int
    spread: bool = True
    # cronman's misfire policy for the jobs (None: the default, fire_once).
    misfire: str | None = None
    priority: int = 0
    namespace: str = BENCH_NAMESPACE
    start_ms: int | None = None
    end_ms: int | None = None
    name: str = "bench"  # job names are "<name>-<i>": unique per group in a namespace
    grace_s: int | None = None  # misfire grace (None: the job default)
    delivery: str | None = None  # cronman's delivery mode (None: at_least_once)
    max_attempts: int | None = None  # cronman's retry.max_attempts (None: the job default)
    shards: int = 0  # > 0: job j carries the label shard: j % shards (the limits scenario)
    # cronman's target as JSON text (None: a POST of the receiver's URL)
    target: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a workload needs at least one job")
        if self.every_ms < 1000 or self.every_ms % 1000:
            raise ValueError("every must be a whole number of seconds")
        if (self.start_ms is not None and self.end_ms is not None
                and self.end_ms <= self.start_ms):
            raise ValueError("a group's window must end after it starts")

    @property
    def parts(self) -> tuple[Workload, ...]:
        return (self,)

    @property
    def rate(self) -> float:
        """Fires per second the workload asks for while its window is open."""
        return self.count * 1000.0 / self.every_ms

    def rate_at(self, t_ms: int) -> float:
        """Fires per second asked for at ``t_ms`` (0 outside the window)."""
        if (self.start_ms is not None and t_ms < self.start_ms) or (
                self.end_ms is not None and t_ms >= self.end_ms):
            return 0.0
        return self.rate

    def part_of(self, i: int) -> int:
        """The index of job ``i``'s group (always 0 here)."""
        return 0

    def local(self, i: int) -> tuple[Workload, int]:
        """Job ``i``'s group and its index in it."""
        return self, i

    def anchor_ms(self, i: int) -> int:
        if not self.spread:
            return self.base_ms
        return self.base_ms + (i * self.every_ms) // self.count

    def _bounds(self, start_ms: int, end_ms: int) -> tuple[int, int]:
        lo = start_ms if self.start_ms is None else max(start_ms, self.start_ms)
        hi = end_ms if self.end_ms is None else min(end_ms, self.end_ms)
        return lo, hi

    def first_fire_ms(self, i: int, not_before_ms: int) -> int:
        """Job ``i``'s first grid time at or after ``not_before_ms``."""
        a, e = self.anchor_ms(i), self.every_ms
        return a + -((a - not_before_ms) // e) * e

    def fires_of(self, i: int, start_ms: int, end_ms: int) -> Iterator[int]:
        """Fire times (ms) of job ``i`` with start_ms <= t < end_ms, inside its window."""
        lo, hi = self._bounds(start_ms, end_ms)
        t = self.first_fire_ms(i, lo)
        while t < hi:
            yield t
            t += self.every_ms

    def on_grid(self, i: int, t_ms: int) -> bool:
        """Is ``t_ms`` a fire time of job ``i`` (its grid, inside its window)?"""
        if (t_ms - self.anchor_ms(i)) % self.every_ms:
            return False
        lo, hi = self._bounds(t_ms, t_ms + 1)
        return lo < hi

    def expected(self, start_ms: int, end_ms: int) -> Iterator[tuple[int, int]]:
        """Every (job index, fire time ms) owed in [start_ms, end_ms)."""
        for i in range(self.count):
            for t in self.fires_of(i, start_ms, end_ms):
                yield i, t

    def expected_count(self, start_ms: int, end_ms: int) -> int:
        return sum(1 for _ in self.expected(start_ms, end_ms))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update({"jobs": self.count, "every_s": self.every_ms / 1000,
                    "rate_per_s": round(self.rate, 3)})
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Workload:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Mix:
    """Several groups of jobs; job indices run through the groups in order."""

    groups: tuple[Workload, ...]
    _offsets: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a mix needs at least one group")
        names = [(g.namespace, g.name) for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError("each group of a mix needs its own name in its namespace")
        offsets, n = [], 0
        for g in self.groups:
            offsets.append(n)
            n += g.count
        object.__setattr__(self, "_offsets", tuple(offsets))

    @property
    def parts(self) -> tuple[Workload, ...]:
        return self.groups

    @property
    def count(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def rate(self) -> float:
        """The highest rate asked for at any time (at each group's window start)."""
        times = [g.start_ms for g in self.groups if g.start_ms is not None]
        return max([self.rate_at(t) for t in times] + [self.rate_at(-(2**62))])

    def rate_at(self, t_ms: int) -> float:
        return sum(g.rate_at(t_ms) for g in self.groups)

    def part_of(self, i: int) -> int:
        lo, hi = 0, len(self._offsets) - 1
        while lo < hi:  # the last offset <= i
            mid = (lo + hi + 1) // 2
            if self._offsets[mid] <= i:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def local(self, i: int) -> tuple[Workload, int]:
        p = self.part_of(i)
        return self.groups[p], i - self._offsets[p]

    def anchor_ms(self, i: int) -> int:
        g, j = self.local(i)
        return g.anchor_ms(j)

    def fires_of(self, i: int, start_ms: int, end_ms: int) -> Iterator[int]:
        g, j = self.local(i)
        return g.fires_of(j, start_ms, end_ms)

    def on_grid(self, i: int, t_ms: int) -> bool:
        g, j = self.local(i)
        return g.on_grid(j, t_ms)

    def expected(self, start_ms: int, end_ms: int) -> Iterator[tuple[int, int]]:
        for off, g in zip(self._offsets, self.groups, strict=True):
            for j, t in g.expected(start_ms, end_ms):
                yield off + j, t

    def expected_count(self, start_ms: int, end_ms: int) -> int:
        return sum(g.expected_count(start_ms, end_ms) for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.count, "rate_per_s": round(self.rate, 3),
                "groups": [g.to_dict() for g in self.groups]}


Jobs = Workload | Mix


def jobs_from_dict(d: dict[str, Any]) -> Jobs:
    """The inverse of ``to_dict`` (a group, or a mix of groups)."""
    if "groups" in d:
        return Mix(tuple(Workload.from_dict(g) for g in d["groups"]))
    return Workload.from_dict(d)


def dump_jobs(w: Jobs) -> str:
    return json.dumps(w.to_dict())


def cronman_definition(w: Jobs, i: int, url: str, run_label: str) -> dict[str, Any]:
    """The job definition (API JSON) of job ``i`` of the workload."""
    g, j = w.local(i)
    misfire: dict[str, Any] = {}
    if g.misfire:
        misfire["policy"] = g.misfire
    if g.grace_s is not None:
        misfire["grace"] = g.grace_s
    spec: dict[str, Any] = {
        "name": f"{g.name}-{j:07d}",
        "namespace": g.namespace,
        "schedule": {"kind": "interval", "every": g.every_ms // 1000,
                     "anchor": format_rfc3339(from_ms(g.anchor_ms(j)))},
        "target": (json.loads(g.target) if g.target else
                   {"kind": "http", "url": url, "method": "POST", "timeout": 10}),
        "labels": {"bench": run_label},
    }
    if g.shards:
        spec["labels"]["shard"] = str(j % g.shards)
    if misfire:
        spec["misfire"] = misfire
    if g.delivery:
        spec["delivery"] = g.delivery
    if g.max_attempts is not None:
        spec["retry"] = {"max_attempts": g.max_attempts}
    if g.priority:
        spec["priority"] = g.priority
    if g.start_ms is not None:
        spec["start_at"] = format_rfc3339(from_ms(g.start_ms))
    if g.end_ms is not None:  # end_at is inclusive; the group's end is not
        spec["end_at"] = format_rfc3339(from_ms(g.end_ms - 1))
    return spec


def index_of(keys: Sequence[str]) -> dict[str, int]:
    return {k: i for i, k in enumerate(keys)}
