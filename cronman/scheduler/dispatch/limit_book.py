"""Keeps the limits (and the namespaces' quotas, as limits) current on a node,
and answers which of them hold a job's fires.

Read at start and every ``poll_interval`` (the sync poll, 2 s by default):
a limit made, changed or deleted holds the fires of every node within a
poll. A job's limits are worked out once per job version and kept until the
limits change. A node holds no labels of its jobs: a label limit holds the
jobs the database says carry the label, read with the limits (a label
given to a job takes effect within a poll).
"""

from __future__ import annotations

import logging

from cronman.coordination.limit_counters import LimitSpec
from cronman.errors import StoreUnavailable
from cronman.limits import Limit, LimitIndex
from cronman.models import Job
from cronman.scheduler.runtime.lifecycle import Lifecycle, Pool
from cronman.scheduler.runtime.ratelog import RateLimitedLog
from cronman.store.base import LimitStore

log = logging.getLogger(__name__)

_CACHE_MAX = 100_000


def spec_of(limit: Limit) -> LimitSpec:
    """The counters' form of a limit (the whole of it, for every node together)."""
    rate = limit.rate or 0.0
    return LimitSpec(name=limit.name, count=limit.count, window_ms=limit.window_ms,
                     burst=limit.burst or 0, per_ms=rate / 1000.0,
                     concurrency=limit.concurrency or 0)


def fair_share(spec: LimitSpec, members: int) -> LimitSpec:
    """One node's share of a limit among ``members`` live nodes: never more
    than the whole, and at least one start and one slot (else nothing would
    run where there are more nodes than slots)."""
    n = max(1, members)
    if n == 1:
        return spec
    return LimitSpec(name=spec.name, count=max(1, spec.count // n) if spec.count else 0,
                     window_ms=spec.window_ms,
                     burst=max(1, spec.burst // n) if spec.burst else 0,
                     per_ms=spec.per_ms / n,
                     concurrency=max(1, spec.concurrency // n) if spec.concurrency else 0)


class AwayMembers:
    """How many nodes share each limit while its counters are away: the most
    live members seen since they stopped answering. The membership lives in
    Redis too: one that comes back empty lists the nodes again one by one as
    they beat, and a share of that partial view (the whole, on the first
    node back) would be more than this node's while the others still count
    on theirs."""

    def __init__(self) -> None:
        self._most = 0

    def seen(self, members: int) -> int:
        """Note the membership's size now; the most since the counters went away."""
        self._most = max(self._most, members, 1)
        return self._most

    def back(self) -> None:
        """The counters answer again: the next absence counts from its own view."""
        self._most = 0


class LimitBook:
    """The limits in force on this node, read from ``store``."""

    def __init__(self, store: LimitStore, *, pool: Pool, lifecycle: Lifecycle,
                 poll_interval: float) -> None:
        self._store = store
        self._pool = pool
        self._lifecycle = lifecycle
        self._poll = poll_interval
        self._ratelog = RateLimitedLog(log)
        self._index = LimitIndex(())
        self._held: tuple[Limit, ...] = ()
        self._specs: dict[str, LimitSpec] = {}
        self._by_job: dict[str, tuple[int, tuple[Limit, ...]]] = {}
        self._labelled: dict[str, frozenset[str]] = {}  # label -> ids of jobs carrying it

    def __len__(self) -> int:
        return len(self._index)

    def update(self, limits: list[Limit],
               labelled: dict[str, frozenset[str]] | None = None) -> None:
        """Hold ``limits`` from now on; ``labelled``: the jobs carrying each
        label a limit matches."""
        held = tuple(sorted(limits, key=lambda lim: lim.name))
        labelled = labelled or {}
        if held == self._held and labelled == self._labelled:
            return
        self._held = held
        self._labelled = labelled
        self._index = LimitIndex(held)
        self._specs = {lim.name: spec_of(lim) for lim in held}
        self._by_job.clear()

    def limits_of(self, job: Job) -> tuple[Limit, ...]:
        """The limits ``job``'s fires are held to, by name."""
        if not self._specs:
            return ()
        hit = self._by_job.get(job.id)
        if hit is not None and hit[0] == job.version:
            return hit[1]
        labels = dict(job.labels)
        for label, ids in self._labelled.items():
            if job.id in ids:
                key, _, value = label.partition(":")
                labels[key] = value
        found = self._index.matching(job.namespace, job.target, labels)
        if len(self._by_job) >= _CACHE_MAX:
            self._by_job.clear()
        self._by_job[job.id] = (job.version, found)
        return found

    def spec(self, name: str) -> LimitSpec | None:
        return self._specs.get(name)

    async def reload(self) -> None:
        limits = await self._pool(self._store.all_limits)
        labels = sorted({lim.value for lim in limits if lim.kind == "label"})
        self.update(limits, await self._pool(self._store.labelled_jobs, labels)
                    if labels else {})

    async def load(self) -> None:
        """The first read; a database that cannot answer now is read again by ``run``."""
        try:
            await self.reload()
        except StoreUnavailable as exc:
            log.error("cannot read the limits: %s", exc)

    async def run(self) -> None:
        while not await self._lifecycle.sleep(self._poll):
            try:
                await self.reload()
                self._ratelog.clear("limits")
            except StoreUnavailable as exc:
                self._ratelog.error("limits", "cannot read the limits: %s", exc)
