"""StallWatch: a node says it is stalled only when its dispatch stops moving
while fires wait -- never for being busy, however late."""

from __future__ import annotations

from cronman.scheduler.pulse import STALL_MS, StallWatch

LATE = 10 * STALL_MS  # the oldest waiting fire was due this long ago


def test_a_node_that_keeps_claiming_or_starting_is_not_stalled():
    watch = StallWatch()
    for step in range(50):
        now = 1_000_000 + step * 500
        assert not watch.stalled(now - LATE, now, moves=step, saturated=False)


def test_a_node_whose_slots_are_all_taken_waits_on_its_targets_and_is_not_stalled():
    watch = StallWatch()
    for step in range(50):
        now = 1_000_000 + step * 500
        assert not watch.stalled(now - LATE, now, moves=7, saturated=True)


def test_no_move_for_longer_than_the_deadline_while_fires_wait_is_a_stall():
    watch = StallWatch()
    start = 1_000_000
    assert not watch.stalled(start - LATE, start, moves=7, saturated=False)
    assert not watch.stalled(start - LATE, start + STALL_MS, moves=7, saturated=False)
    assert watch.stalled(start - LATE, start + STALL_MS + 1, moves=7, saturated=False)
    # One move and it is progressing again.
    assert not watch.stalled(start - LATE, start + STALL_MS + 2, moves=8, saturated=False)


def test_an_idle_node_with_nothing_due_is_not_stalled():
    watch = StallWatch()
    start = 1_000_000
    for step in range(10):
        now = start + step * STALL_MS
        assert not watch.stalled(now - 1, now, moves=0, saturated=False)
