"""Retry, misfire and concurrency policies."""

from __future__ import annotations

import pytest

from cronman.scheduler import policies as p


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (7, 60.0), (500, 60.0)],
)
def test_retry_backoff_doubles_and_caps(attempt, expected):
    assert p.retry_backoff(attempt, 1, 60) == expected


def test_retry_backoff_fractional_min():
    assert p.retry_backoff(3, 0.25, 10) == 1.0


def test_next_retry_delay_until_max_attempts():
    retry = {"max_attempts": 3, "min_backoff": 1, "max_backoff": 60}
    assert p.next_retry_delay(1, retry) == 1.0
    assert p.next_retry_delay(2, retry) == 2.0
    assert p.next_retry_delay(3, retry) is None
    assert p.next_retry_delay(4, retry) is None


def test_next_retry_delay_not_retryable_fails_at_once():
    assert p.next_retry_delay(1, {"max_attempts": 5}, retryable=False) is None


def test_next_retry_delay_defaults_to_the_job_specs_retry():
    # The same default the API completes a job with (cronman.vocabulary).
    assert p.next_retry_delay(1, {}) == 1.0
    assert p.next_retry_delay(2, None) == 2.0
    assert p.next_retry_delay(3, {}) is None


def test_misfire_settings_defaults_and_grace_ms():
    assert p.misfire_settings(None) == ("fire_once", 300_000)
    assert p.misfire_settings({"policy": "skip", "grace": 2.5}) == ("skip", 2500)
    assert p.misfire_settings({"policy": "bogus", "grace": 0}) == ("fire_once", 0)


NOW = 1_000_000


# SPEC §3: grace is a threshold. A fire time late by no more than grace fires
# as usual under every policy; the policy decides only for older ones.


def test_fire_once_fires_the_latest_misfire_once_and_everything_within_grace():
    recent = [NOW - 5000, NOW - 4000, NOW - 3000]
    plan = p.plan_misfire(recent, older=10, now_ms=NOW, policy="fire_once", grace_ms=4500)
    assert plan.fire == [NOW - 5000, NOW - 4000, NOW - 3000]
    assert plan.skipped == 10
    assert plan.cursor_ms == NOW - 3000


def test_fire_once_fires_a_lone_misfire():
    plan = p.plan_misfire([NOW - 9000], older=0, now_ms=NOW, policy="fire_once", grace_ms=1000)
    assert plan.fire == [NOW - 9000]
    assert plan.skipped == 0
    assert plan.cursor_ms == NOW - 9000


def test_fire_all_fires_each_listed_misfire_and_everything_within_grace():
    recent = [NOW - 5000, NOW - 4000, NOW - 3000]
    plan = p.plan_misfire(recent, older=2, now_ms=NOW, policy="fire_all", grace_ms=4000)
    assert plan.fire == [NOW - 5000, NOW - 4000, NOW - 3000]
    assert plan.skipped == 2  # beyond the listing bound: counted


def test_grace_boundary_is_inclusive():
    plan = p.plan_misfire([NOW - 4000], older=0, now_ms=NOW, policy="skip", grace_ms=4000)
    assert plan.fire == [NOW - 4000]
    plan = p.plan_misfire([NOW - 4001], older=0, now_ms=NOW, policy="skip", grace_ms=4000)
    assert plan.fire == [] and plan.skipped == 1


def test_skip_fires_what_is_within_grace_and_counts_the_misfires():
    recent = [NOW - 70_000, NOW - 2000, NOW - 1000]
    plan = p.plan_misfire(recent, older=3, now_ms=NOW, policy="skip", grace_ms=60_000)
    assert plan.fire == [NOW - 2000, NOW - 1000]
    assert plan.skipped == 4
    assert plan.cursor_ms == NOW - 1000


def test_only_older_times_keep_their_cursor():
    plan = p.plan_misfire([], older=4, now_ms=NOW, policy="skip", grace_ms=10,
                          older_cursor_ms=NOW - 500)
    assert plan.fire == []
    assert plan.skipped == 4
    assert plan.cursor_ms == NOW - 500
    plan = p.plan_misfire([], older=4, now_ms=NOW, policy="fire_once", grace_ms=10,
                          older_cursor_ms=NOW - 500)
    assert plan.fire == [NOW - 500] and plan.skipped == 3


def test_concurrency_decisions():
    assert p.decide_concurrency("allow", ["r1"]).action == "dispatch"
    assert p.decide_concurrency("forbid", []).action == "dispatch"
    d = p.decide_concurrency("forbid", ["r1", "r2"])
    assert d.action == "skip"
    assert d.error == "previous run r1 still in flight"
    d = p.decide_concurrency("replace", ["r1"])
    assert d.action == "replace" and d.previous == ("r1",)
    assert d.error is None


@pytest.mark.parametrize(
    ("delivery", "status", "action"),
    [
        ("at_least_once", "claimed", "redispatch"),
        ("at_least_once", "running", "redispatch"),
        ("at_least_once", "retrying", "redispatch"),
        ("at_most_once", "claimed", "lost"),
        ("at_most_once", "running", "lost"),
        ("at_most_once", "retrying", "redispatch"),
    ],
)
def test_recovery_action(delivery, status, action):
    assert p.recovery_action(delivery, status) == action
