"""The chaos checker on hand-made histories: each outcome, each flag, the
bounds near faults, lost API writes, and what a violation prints."""

from __future__ import annotations

from cronman_bench.receiver import Arrival
from tests.chaos.checker import (
    AT_MOST_ONCE_TWICE,
    DIFFERENT_RUNS,
    DOCUMENTED_LOSS,
    EARLY,
    LATE,
    MISSED,
    ONCE,
    REPEATED_ATTEMPT,
    SAME_RUN,
    STEADY,
    Bounds,
    Fault,
    LogLine,
    RunRow,
    Write,
    check,
    check_writes,
    describe,
    parse_log,
    report,
)

T0 = 1_790_000_000_000  # a whole second, wall ms
WINDOW = (T0, T0 + 60_000)
BOUNDS = Bounds(early_ms=100, late_ms=1_000, late_by_kind={"pause": 8_000},
                after_ms={"pause": 5_000}, before_ms=1_000)


def arrival(job: str, fire_ms: int, late_ms: int, run: str | None = None,
            attempt: int = 1) -> Arrival:
    return Arrival(arrived_ms=fire_ms + late_ms, job_id=job, scheduled_ms=fire_ms,
                   run_id=run or f"run-{job}-{fire_ms}", attempt=attempt)


def row(job: str, fire_ms: int, status: str = "succeeded", error: str | None = None
        ) -> RunRow:
    return RunRow(job, fire_ms, f"run-{job}-{fire_ms}", status, 1, error, "n1")


def outcome_of(arrivals, rows=(), faults=(), fire=("a", T0 + 1000)):
    result = check([fire], arrivals, rows, list(faults), WINDOW, BOUNDS)
    [v] = result.verdicts
    return v


def test_each_outcome():
    f = T0 + 1000
    assert outcome_of([arrival("a", f, 5)]).outcome == ONCE
    assert outcome_of([arrival("a", f, 5), arrival("a", f, 900, attempt=2)]).outcome == SAME_RUN
    assert outcome_of([arrival("a", f, 5), arrival("a", f, 9, run="other")]
                      ).outcome == DIFFERENT_RUNS
    # Two first attempts of one run: two nodes sent it, or a re-delivery
    # numbered as the first try.
    assert outcome_of([arrival("a", f, 5), arrival("a", f, 7000)]).outcome == REPEATED_ATTEMPT
    assert outcome_of([]).outcome == MISSED
    assert outcome_of([], [row("a", f, "succeeded")]).outcome == MISSED  # no error: silent
    assert outcome_of([], [row("a", f, "lost")]).outcome == MISSED  # a status but no error
    # Recorded lost with its reason: documented for an at_most_once job only.
    lost = [row("a", f, "lost", "lease expired; at_most_once")]
    [v] = check([("a", f)], [], lost, [], WINDOW, BOUNDS, at_most_once={"a"}).verdicts
    assert v.outcome == DOCUMENTED_LOSS
    assert outcome_of([], lost).outcome == MISSED  # an at_least_once run must come again
    assert outcome_of([], [row("a", f, "skipped", "neither backend reachable")]
                      ).outcome == DOCUMENTED_LOSS
    assert outcome_of([], [row("a", f + 1000, "lost", "x")]).outcome == MISSED  # another fire's


def test_early_and_late_flags_and_violations():
    f = T0 + 1000
    on_time = outcome_of([arrival("a", f, -100)])
    assert on_time.flags == () and on_time.violations == []
    early = outcome_of([arrival("a", f, -101)])
    assert early.flags == (EARLY,) and early.violations == [EARLY]
    late = outcome_of([arrival("a", f, 1001)])
    assert late.flags == (LATE,) and late.violations == [LATE]
    # Lateness is the first arrival's: a re-delivery later is no late fire.
    assert outcome_of([arrival("a", f, 10), arrival("a", f, 9000, attempt=2)]).flags == ()
    assert outcome_of([]).violations == [MISSED]
    assert outcome_of([arrival("a", f, 5), arrival("a", f, 6)]).violations == [REPEATED_ATTEMPT]


def test_an_at_most_once_fire_may_arrive_once_or_be_recorded_lost_never_twice():
    f = T0 + 1000
    fire = [("amo", f)]
    twice = [arrival("amo", f, 5), arrival("amo", f, 7000, attempt=2)]
    [v] = check(fire, twice, [], [], WINDOW, BOUNDS, at_most_once={"amo"}).verdicts
    assert v.outcome == SAME_RUN and v.violations == [AT_MOST_ONCE_TWICE]
    [v] = check(fire, twice, [], [], WINDOW, BOUNDS).verdicts  # at_least_once: allowed
    assert v.violations == []
    lost = [row("amo", f, "lost", "lost: the node running it stopped; at_most_once")]
    [v] = check(fire, [], lost, [], WINDOW, BOUNDS, at_most_once={"amo"}).verdicts
    assert v.outcome == DOCUMENTED_LOSS and v.violations == []


def test_a_fault_widens_the_late_bound_of_the_fires_around_it():
    pause = Fault("pause", "n2", T0 + 10_000, T0 + 14_000)  # 4 s
    assert BOUNDS.window(pause) == (T0 + 9_000, T0 + 19_000)
    assert BOUNDS.late_bound([pause]) == 13_000  # 1 s + 8 s + the pause's own length
    again = Fault("pause", "n1", T0 + 16_000, T0 + 17_000)
    assert BOUNDS.late_bound([pause, again]) == 22_000  # one after another: they add up
    assert BOUNDS.late_bound([Fault("unbounded", "x", 0, 50_000)]) == 1_000
    near = outcome_of([arrival("a", T0 + 11_000, 12_999)], faults=[pause],
                      fire=("a", T0 + 11_000))
    assert near.flags == () and near.bound_ms == 13_000 and near.kinds == {"pause"}
    too_late = outcome_of([arrival("a", T0 + 11_000, 13_001)], faults=[pause],
                          fire=("a", T0 + 11_000))
    assert too_late.flags == (LATE,)
    # Fires due before the window the fault opens, or after it, keep the steady bound.
    for fire_ms in (T0 + 8_999, T0 + 19_000):
        v = outcome_of([arrival("a", fire_ms, 1500)], faults=[pause], fire=("a", fire_ms))
        assert v.flags == (LATE,) and v.kinds == {STEADY}


def test_counts_table_and_extra_lateness_per_kind():
    pause = Fault("pause", "n2", T0 + 10_000, T0 + 12_000)
    owed = [("a", T0 + 1000 * k) for k in range(30)]
    arrivals = [arrival("a", t, 10) for _, t in owed if t != T0 + 20_000]
    arrivals = [a if a.scheduled_ms != T0 + 11_000 else arrival("a", T0 + 11_000, 3010)
                for a in arrivals]
    arrivals.append(arrival("a", T0 + 11_000, 5000, attempt=2))
    arrivals.append(arrival("zz", T0 + 500, 3))  # nobody owed it
    arrivals.append(arrival("a", T0 - 1000, 3))  # before the window: not judged
    rows = [row("a", T0 + 20_000, "failed", "HTTP 500 after 3 attempts")]
    result = check(owed, arrivals, rows, [pause], WINDOW, BOUNDS)
    assert [a.job_id for a in result.unexpected] == ["zz"] and not result.ok()
    everything = result.counts()
    assert (everything[ONCE], everything[SAME_RUN], everything[DOCUMENTED_LOSS]) == (28, 1, 1)
    near = result.counts("pause")  # fires due in [T0 + 9 s, T0 + 17 s)
    assert sum(near[o] for o in (ONCE, SAME_RUN, DOCUMENTED_LOSS)) == 8
    assert result.steady_median_ms() == 10
    assert result.extra_lateness("pause") == (3000, 3000)
    assert result.extra_lateness(STEADY) == (0, 0)
    apart = check(owed, arrivals, rows, [pause], WINDOW, BOUNDS, baseline_ms=4)
    assert apart.steady_median_ms() == 4 and apart.extra_lateness("pause") == (3006, 3006)
    table = result.table()
    assert table.splitlines()[0].split()[:3] == ["kind", "faults", "owed"]
    assert [ln.split()[:3] for ln in table.splitlines()[1:4]] == [
        ["pause", "1", "8"], [STEADY, "-", "22"], ["all", "-", "30"]]
    assert "arrivals that are no fire owed: 1" in table


def test_writes_answered_2xx_must_still_be_there():
    writes = [Write("create", "j1", 1, T0), Write("update", "j1", 3, T0 + 5),
              Write("create", "j2", 1, T0 + 7)]
    assert check_writes(writes, {"j1": 3, "j2": 1}) == []
    assert check_writes(writes, {"j1": 4, "j2": 2}) == []
    lost = check_writes(writes, {"j1": 2})
    assert len(lost) == 2
    assert "update of job j1 to version 3" in lost[0] and "at version 2" in lost[0]
    assert "create of job j2" in lost[1] and "gone" in lost[1]
    result = check([], [], [], [], WINDOW, BOUNDS, writes=writes, jobs_now={"j1": 3})
    assert not result.ok() and len(result.lost_writes) == 1
    assert check([], [], [], [], WINDOW, BOUNDS, writes=writes).ok()  # not checked


def test_log_lines_are_dated_and_a_violation_prints_what_is_around_it():
    text = ("2026-09-21 14:13:21,500 INFO cronman.scheduler: ready: owns 10 jobs\n"
            "2026-09-21 14:13:22,000 WARNING cronman.scheduler.recovery.sweeper: run r1 lost\n"
            "Traceback (most recent call last):\n"
            "2026-09-21 14:13:40,000 WARNING cronman.x: far away\n")
    lines = parse_log("n1", text)
    t = 1_790_000_000_000  # 2026-09-21T14:13:20Z
    assert [ln.at_ms - t for ln in lines] == [1500, 2000, 2000, 20_000]
    assert lines[2].text.startswith("Traceback")
    faults = [Fault("pause", "n2", t - 3000, t - 1000, "SIGSTOP"),
              Fault("kill_node", "n3", t + 30_000, t + 31_000)]
    v = outcome_of([], faults=[], fire=("job-x", t + 1000))
    v.row = RunRow("job-x", t + 1000, "r1", "lost", 1, None, "n1")
    text_out = describe(v, faults, lines + [LogLine("n2", t + 30_000, "about job-x")])
    assert text_out.startswith(f"{MISSED}: job job-x fire 2026-09-21T14:13:21Z")
    assert "never arrived" in text_out and "run row: r1 lost" in text_out
    assert "pause of n2" in text_out and "SIGSTOP" in text_out
    assert "kill_node" not in text_out  # 29 s after the fire
    assert "run r1 lost" in text_out and "about job-x" in text_out
    assert "ready: owns" not in text_out and "far away" not in text_out
    assert report(check([("job-x", t + 1000)], [], [], faults, (t, t + 60_000), BOUNDS),
                  lines).count(MISSED) >= 2
