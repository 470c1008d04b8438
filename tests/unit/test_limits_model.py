"""The limits' pure parts: matching jobs, a node's fair share and the
members it is counted over, the forecast's
count of fires and its play of a limit's rate."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

from cronman.api.herd import count_fires, hold_back
from cronman.coordination.limit_counters import LimitSpec
from cronman.limits import Limit, LimitIndex, Quota, parse_limit, quota_limit
from cronman.models import JobRow
from cronman.scheduler.dispatch.limit_book import AwayMembers, fair_share

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def row(i: int, schedule: dict, url: str = "http://billing.internal/x", ns: str = "pay",
        paused: bool = False) -> JobRow:
    return JobRow(id=f"job-{i:04d}", namespace=ns, name=f"j{i}", version=1,
                  schedule=json.dumps(schedule), target=json.dumps({"kind": "http", "url": url}),
                  retry="{}", misfire="{}", delivery="at_least_once", concurrency="allow",
                  priority=0, start_at=None, end_at=None, jitter=None, paused=paused,
                  dead_letter=None, created_at=T0, change_seq=0, last_fire_at=None,
                  skipped_pending=0)


def test_a_job_is_held_by_every_limit_matching_one_of_its_keys():
    index = LimitIndex([
        parse_limit({"name": "billing", "match": {"host": "Billing.Internal."}, "rate": 5}),
        parse_limit({"name": "team", "match": {"label": "team:pay"}, "concurrency": 3}),
        parse_limit({"name": "queue", "match": {"queue_url": "https://sqs/q"}, "rate": 1}),
        quota_limit(Quota("pay", concurrent_runs=9)),
    ])
    http = {"kind": "http", "url": "https://BILLING.internal:8443/hook"}
    assert [x.name for x in index.matching("pay", http, {"team": "pay"})] == [
        "billing", "quota:pay", "team"]
    assert [x.name for x in index.matching("ops", http, {"team": "ops"})] == ["billing"]
    assert [x.name for x in index.matching("ops", {"kind": "sqs", "queue_url": "https://sqs/q"},
                                           {})] == ["queue"]


def test_rates_count_whole_starts_in_windows_of_a_second_or_more():
    assert (Limit("a", "host", "h", rate=100).count, Limit("a", "host", "h", rate=100)
            .window_ms) == (100, 1000)
    assert (Limit("a", "host", "h", rate=0.5).count, Limit("a", "host", "h", rate=0.5)
            .window_ms) == (1, 2000)
    assert Limit("a", "host", "h", rate=2.5).count == 2


def test_a_fair_share_is_never_more_than_the_whole_nor_less_than_one():
    spec = LimitSpec("x", count=100, window_ms=1000, burst=10, per_ms=0.1, concurrency=20)
    three = fair_share(spec, 3)
    assert (three.count, three.burst, three.concurrency) == (33, 3, 6)
    assert abs(three.per_ms - 0.1 / 3) < 1e-12
    assert fair_share(spec, 1) == spec
    many = fair_share(LimitSpec("y", concurrency=2), 5)
    assert many.concurrency == 1 and many.count == 0


def test_a_share_while_redis_is_away_is_of_the_most_members_seen_since():
    away = AwayMembers()
    assert away.seen(3) == 3
    # Redis back empty: the membership comes back one node at a time, while
    # this node's counters still back off -- its share does not grow.
    assert away.seen(1) == 3 and away.seen(2) == 3
    away.back()
    assert away.seen(2) == 2  # the next outage counts from its own view
    assert AwayMembers().seen(0) == 1


def test_the_forecast_counts_each_fire_and_plays_the_rate():
    hourly = {"kind": "cron", "cron": "0 * * * *", "timezone": "UTC"}
    every = {"kind": "interval", "every": 30, "anchor": "2026-12-01T09:00:10Z"}
    rows = [row(i, hourly) for i in range(250)]
    rows += [row(1000 + i, every, url="http://other/x", ns="ops") for i in range(3)]
    rows.append(row(2000, hourly, paused=True))
    limits = LimitIndex([parse_limit({"name": "billing", "match": {"host": "billing.internal"},
                                      "rate": 100})])
    start = int(T0.timestamp() * 1000) - 60_000
    herd = count_fires(rows, limits, start, start + 180_000, max_fires=10_000)
    top = int(T0.timestamp())
    assert herd.jobs == 253 and herd.fires == 250 + 3 * 6
    assert herd.per_second[top] == 250
    assert herd.by_host["billing.internal"][top] == 250
    assert herd.per_second[top + 10] == 3
    held = hold_back(limits.limits[0], herd.by_limit["billing"], top + 100)
    assert [(r["arriving"], r["waiting"]) for r in held] == [(250, 150), (0, 50)]


def test_a_backlog_carries_over_the_seconds_between_arrivals():
    limit = parse_limit({"name": "slow", "match": {"host": "h"}, "rate": 2})
    held = hold_back(limit, Counter({10: 5, 12: 3}), 100)
    assert [(r["at"][-9:-1], r["arriving"], r["waiting"]) for r in held] == [
        ("00:00:10", 5, 3), ("00:00:11", 0, 1), ("00:00:12", 3, 2)]
