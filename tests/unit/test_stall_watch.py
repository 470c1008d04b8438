"""StallWatch: a node says it is stalled only when its dispatch stops moving
while fires wait -- never for being busy, however late."""

from __future__ import annotations

from cronman.scheduler.claim.pulse import STALL_MS, STALL_MS_PER_HELD, StallWatch

LATE = 100 * STALL_MS  # the oldest waiting fire was due this long ago


def test_a_node_that_keeps_starting_attempts_is_not_stalled():
    watch = StallWatch()
    for step in range(50):
        now = 1_000_000 + step * 500
        assert not watch.stalled(now - LATE, now, starts=step, saturated=False, held=10)


def test_a_node_whose_slots_are_all_taken_waits_on_its_targets_and_is_not_stalled():
    watch = StallWatch()
    for step in range(50):
        now = 1_000_000 + step * 500
        assert not watch.stalled(now - LATE, now, starts=7, saturated=True, held=10)


def test_no_start_for_longer_than_the_deadline_while_fires_wait_is_a_stall():
    watch = StallWatch()
    start = 1_000_000
    assert not watch.stalled(start - LATE, start, starts=7, saturated=False, held=0)
    assert not watch.stalled(start - LATE, start + STALL_MS, starts=7, saturated=False, held=0)
    assert watch.stalled(start - LATE, start + STALL_MS + 1, starts=7, saturated=False, held=0)
    # One start and it is progressing again.
    assert not watch.stalled(start - LATE, start + STALL_MS + 2, starts=8, saturated=False,
                             held=0)


def test_the_deadline_grows_with_the_runs_a_node_holds():
    held = 5000
    extra = int(held * STALL_MS_PER_HELD)
    watch = StallWatch()
    start = 1_000_000
    assert not watch.stalled(start - LATE, start, starts=7, saturated=False, held=held)
    assert not watch.stalled(start - LATE, start + STALL_MS + extra, starts=7,
                             saturated=False, held=held)
    assert watch.stalled(start - LATE, start + STALL_MS + extra + 1, starts=7,
                         saturated=False, held=held)


def test_an_idle_node_with_nothing_due_is_not_stalled():
    watch = StallWatch()
    start = 1_000_000
    for step in range(10):
        now = start + step * STALL_MS
        assert not watch.stalled(now - 1, now, starts=0, saturated=False, held=0)


def test_an_idle_node_that_falls_behind_gets_its_deadline_from_the_first_waiting_fire():
    """A node idle before a herd has started nothing for minutes; the herd's
    instant, not its last start, is where its time without a start begins."""
    held = 3000
    extra = int(held * STALL_MS_PER_HELD)
    watch = StallWatch()
    start = 1_000_000
    for step in range(60):  # a minute with nothing due
        now = start + step * 1000
        assert not watch.stalled(now - 1, now, starts=0, saturated=False, held=0)
    due = start + 60_000  # the herd: nothing started since
    through = due - 1
    assert not watch.stalled(through, due + STALL_MS + 1, starts=0, saturated=False,
                             held=held)
    assert not watch.stalled(through, due + STALL_MS + extra, starts=0, saturated=False,
                             held=held)
    assert watch.stalled(through, due + STALL_MS + extra + 2, starts=0, saturated=False,
                         held=held)


def test_a_node_stuck_after_being_idle_is_still_found_stalled_at_the_deadline():
    watch = StallWatch()
    start = 1_000_000
    assert not watch.stalled(start - 1, start, starts=4, saturated=False, held=0)
    due = start + 30_000
    assert not watch.stalled(due - 1, due + STALL_MS, starts=4, saturated=False, held=0)
    assert watch.stalled(due - 1, due + STALL_MS + 2, starts=4, saturated=False, held=0)
