"""A cron schedule's smallest gap between fires, as the schedule floor reckons it:
exact over the whole cycle, checked against the fires themselves."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from cronman.api.schedule_floor import cron_smallest_gap
from cronman.schedules.cron import CronSchedule, parse_cron


def parse(expr: str) -> CronSchedule:
    return parse_cron({"kind": "cron", "cron": expr, "timezone": "UTC"}, job_id="job-1")


def fired_gap(schedule: CronSchedule, start: datetime, span: timedelta) -> float:
    """The smallest gap between consecutive fires in [start, start + span]."""
    fires: list[datetime] = []
    t: datetime | None = start - timedelta(microseconds=1)
    while t is not None and t <= start + span:
        t = schedule.next_after(t)
        if t is not None:
            fires.append(t)
    return min((b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False))


@pytest.mark.parametrize("expr, gap", [
    # Found in review: from :00, the first 16 fires are 3 s apart; :56 and :57 are 1 s.
    ("0-54/3,56,57 * * * * *", 1),
    ("*/3 * * * * *", 3), ("0-57/3 * * * * *", 3), ("0-54/3,58 * * * * *", 2),
    ("0,59 * * * * *", 1),  # :59, then :00 of the next minute
    ("30 * * * * *", 60), ("* * * * *", 60), ("0,1 * * * *", 60),
    ("0 0-58/2,59 * * * *", 60), ("0 0 * * * *", 3600), ("59 59 0,23 * * *", 3600),
    ("0 0 7 * * *", 86_400), ("0 7 * * 1", 86_400), ("@yearly", 86_400),
    ("0,59 0,59 0,23 * * *", 1),  # 23:59:59, then 00:00:00 of the next day
])
def test_the_smallest_gap_over_the_whole_cycle(expr, gap):
    assert cron_smallest_gap(parse(expr).expr) == gap


def test_it_agrees_with_the_fires_of_random_expressions():
    rng = random.Random(35)
    start = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday; UTC has no DST
    for _ in range(60):
        def pick(lo: int, hi: int, most: int) -> str:
            values = sorted(rng.sample(range(lo, hi + 1), rng.randint(1, most)))
            return ",".join(map(str, values))
        expr = f"{pick(0, 59, 6)} {pick(0, 59, 4)} {pick(0, 23, 3)} * * *"
        schedule = parse(expr)
        assert cron_smallest_gap(schedule.expr) == fired_gap(schedule, start,
                                                             timedelta(days=2)), expr
