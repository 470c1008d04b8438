"""``cronman bench``: the counts add up (a smoke run, not a performance test).

The end-to-end runs start real scheduler nodes (PostgreSQL scratch database,
private redis-server, nginx receiver) and, for steady, the APScheduler peers
(3.x with its memory job store, 4.x with its PostgreSQL data store) for a few
seconds each; they check only that every owed fire is either delivered or
missed, that each scenario's figures were read, and the cost split by kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from cronman_bench.max_rate import rate_ladder, search_highest, trial_verdict
from cronman_bench.nodelog import NodeLog
from cronman_bench.receiver import Arrival, parse_line
from cronman_bench.report import (
    SteadyWatch,
    Tally,
    format_table,
    percentile,
    steady_after,
)
from cronman_bench.tracing import MODE_NAMES, round_order
from cronman_bench.workload import Workload
from tests.support.databases import PG_ADMIN_DB, pg_url


def test_workload_owes_every_grid_time_in_the_window() -> None:
    w = Workload(count=4, every_ms=2000, base_ms=10_000)
    assert [w.anchor_ms(i) for i in range(4)] == [10_000, 10_500, 11_000, 11_500]
    owed = sorted(w.expected(11_000, 15_000))
    assert owed == [(0, 12_000), (0, 14_000), (1, 12_500), (1, 14_500),
                    (2, 11_000), (2, 13_000), (3, 11_500), (3, 13_500)]
    assert w.expected_count(11_000, 15_000) == 8 == w.rate * 4
    herd = Workload(count=3, every_ms=86_400_000, base_ms=50_000, spread=False)
    assert herd.expected_count(50_000, 51_000) == 3


def test_tally_counts_missed_duplicated_and_stray_arrivals() -> None:
    w = Workload(count=2, every_ms=1000, base_ms=0)  # job 0 at whole s, job 1 at .5 s
    t = Tally(w, ["a", "b"], 10_000, 12_000)
    for a in (
        Arrival(10_020, "a", 10_000, "r", 1),
        Arrival(10_030, "a", 10_000, "r", 2),   # duplicate (a retry)
        Arrival(10_600, "b", 10_500, "r", 1),
        Arrival(11_540, "b", 11_500, "r", 1),
        Arrival(9_010, "a", 9_000, "r", 1),     # before the window
        Arrival(11_100, "zz", 11_000, "r", 1),  # unknown job
        Arrival(11_120, "a", 11_300, "r", 1),   # not on job a's grid
    ):
        t.add(a)
    s = t.summary()
    assert s["expected"] == 4
    assert s["delivered_unique"] == 3 and s["missed"] == 1
    assert s["expected"] == s["delivered_unique"] + s["missed"]
    assert s["duplicated_pairs"] == 1 and s["duplicate_deliveries"] == 1
    assert s["redelivered_pairs"] == 1 and s["doubled_pairs"] == 0
    assert s["arrivals_outside_window"] == 1 and s["arrivals_stray"] == 2
    assert s["retries"] == 1
    assert s["lateness"]["p50_ms"] == 40 and s["lateness"]["max_ms"] == 100
    assert "missed" in format_table([{"system": "cronman", "delivery": s}])


def test_tally_tells_double_dispatches_from_redeliveries() -> None:
    w = Workload(count=4, every_ms=1000, base_ms=0)
    t = Tally(w, ["a", "b", "c", "d"], 10_000, 11_000)
    for a in (
        Arrival(10_010, "a", 10_000, "ra", 1),
        Arrival(10_020, "a", 10_000, "ra", 1),     # a second first attempt: doubled
        Arrival(10_260, "b", 10_250, "rb", 1),
        Arrival(40_000, "b", 10_250, "rb", 2),     # same run, later attempt: redelivered
        Arrival(40_100, "c", 10_500, "rc", 2),     # first sent by the sweeper
        Arrival(10_760, "d", 10_750, "rd", 1),
        Arrival(10_770, "d", 10_750, "rd2", 2),    # another run for the same fire: doubled
    ):
        t.add(a)
    s = t.summary()
    assert s["missed"] == 0 and s["duplicated_pairs"] == 3
    assert s["doubled_pairs"] == 2
    assert s["redelivered_pairs"] == 2 and s["redeliveries"] == 2
    assert s["first_by_later_attempt"] == 1
    assert t.kinds(10_000, 10_500)["doubled_pairs"] == 1


def test_steady_state_begins_when_every_later_fire_is_on_time() -> None:
    w = Workload(count=10, every_ms=1000, base_ms=0)
    keys = [f"j{i}" for i in range(10)]

    def tally(skip: tuple[int, int] | None = None) -> Tally:
        t = Tally(w, keys, 0, 20_000)
        for i, sched in w.expected(0, 20_000):
            if (i, sched) != skip:
                late = 500 if sched < 5000 else 5
                t.add(Arrival(sched + late, keys[i], sched, "r", 1))
        return t

    assert steady_after(tally(), 100) == 5.0
    assert steady_after(tally(skip=(3, 19_300)), 100) is None  # a late loss: never steady
    assert steady_after(tally(), 100, min_tail_s=16) is None  # too little steady time left


def test_steady_watch_ends_a_cold_start_once_steady_state_held() -> None:
    w = Workload(count=10, every_ms=1000, base_ms=0)
    keys = [f"j{i}" for i in range(10)]
    t = Tally(w, keys, 0, 600_000)
    watch = SteadyWatch(t, 100, hold_s=30, grace_ms=2000)
    for i, sched in w.expected(0, 60_000):
        a = Arrival(sched + (500 if sched < 5000 else 5), keys[i], sched, "r", 1)
        if t.add(a):
            watch.add(a)
    # On time from 5 s; the last process loaded at 20 s: 30 s later is 50 s.
    assert watch.end_ms(40_000, loaded_ms=20_000) is None
    assert watch.end_ms(52_500, loaded_ms=20_000) == 50_000
    assert watch.end_ms(52_500, loaded_ms=30_000) is None
    t.set_window(0, 50_000)  # narrowed: the pairs due later leave the tally
    s = t.summary()
    assert s["expected"] == s["delivered_unique"] == 500 and s["missed"] == 0
    assert steady_after(t, 100) == 5.0


def test_node_log_gives_ready_ownership_and_membership_times(tmp_path) -> None:
    log = tmp_path / "node.log"
    log.write_text("old run's lines are skipped\n")
    offset = log.stat().st_size
    with log.open("a") as fh:
        fh.write(
            "2026-01-02 03:04:05,100 INFO cronman.scheduler.node: scheduler node n1 ready: "
            "owns 10 of 10 live jobs (1 members, replicas 2)\n"
            "2026-01-02 03:04:06,200 INFO cronman.scheduler.node: membership changed: n1, n2\n"
            "2026-01-02 03:04:06,300 INFO cronman.scheduler.node: ownership: 0 jobs gained, "
            "4 dropped\n"
            "2026-01-02 03:04:09,000 INFO cronman.scheduler.node: membership chan")
    n = NodeLog(log, offset)
    n.read()
    assert n.owned_at_ready == 10 and n.jobs_at_ready == 10
    assert n.loaded_ms is not None and n.ready_ms is not None
    assert n.loaded_ms - n.ready_ms == 1200
    assert n.left_after("n3", n.ready_ms) == n.ready_ms + 1100
    assert n.left_after("n2", n.ready_ms) is None
    with log.open("a") as fh:  # the partial line completes
        fh.write("ged: n1\n")
    n.read()
    assert n.left_after("n2", n.ready_ms) == n.ready_ms + 3900


def test_log_line_and_percentiles() -> None:
    a = parse_line("1700000000.123 job-1 2023-11-14T22:13:20.1Z run-1 1 204")
    assert a is not None and a.lateness_ms == 23 and a.attempt == 1
    assert parse_line("garbage") is None
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([], 99) is None


def test_rate_ladder_rises_by_the_step_in_round_numbers() -> None:
    assert rate_ladder(250, 1.25, 1000) == [250, 310, 390, 490, 610, 760, 950]
    assert rate_ladder(100, 2, 800) == [100, 200, 400, 800]


def test_search_stops_at_the_first_failing_rate_and_reports_the_last_pass() -> None:
    tried: list[int] = []

    def trial(passing: Callable[[int], bool]) -> Callable[[int], str]:
        def run(rate: int) -> str:
            tried.append(rate)
            return "pass" if passing(rate) else "fail"
        return run

    found = search_highest(trial(lambda r: r <= 700 or r == 950), 250, 16_000, 1.25)
    # 760 fails: the search stops there although 950 would have passed.
    assert tried == [250, 310, 390, 490, 610, 760]
    assert found.highest == 610 and found.first_failure == 760 and not found.capped
    tried.clear()
    found = search_highest(trial(lambda r: r <= 62), 250, 16_000, 1.25)
    assert tried == [250, 125, 62] and found.highest == 62 and found.below_start
    assert found.first_failure == 125
    tried.clear()
    found = search_highest(trial(lambda r: True), 100, 200, 2)
    assert found.highest == 200 and found.capped
    errors = iter(["pass", "error"])
    found = search_highest(lambda r: next(errors), 100, 1000, 2)
    assert found.highest == 100 and found.error_at == 200 and found.first_failure is None


def test_trial_verdict_needs_every_fire_once_and_p99_within_the_limit() -> None:
    def phase(missed: int = 0, dup: int = 0, p99: int | None = 50) -> dict[str, Any]:
        return {"delivery": {"missed": missed, "duplicated_pairs": dup,
                             "lateness": {"p99_ms": p99}}}
    assert trial_verdict(phase(), 100) == "pass"
    assert trial_verdict(phase(p99=101), 100) == "fail"
    assert trial_verdict(phase(missed=1), 100) == "fail"
    assert trial_verdict(phase(dup=1), 100) == "fail"
    assert trial_verdict({"error": "bench-1 exited"}, 100) == "error"


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_smoke_run_counts_add_up(tmp_path) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-c", "from cronman.cli import main; main()", "bench",
            "--scenario", "steady", "--nodes", "1", "--replicas", "1", "--jobs", "20",
            "--every", "1", "--duration", "5", "--warmup", "3", "--drain", "10",
            "--peer", "apscheduler-memory,apscheduler4-postgres",
            "--database-url", pg_url(PG_ADMIN_DB),
            "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "fires/s delivered" in proc.stdout  # the table
    assert "measure" in proc.stdout  # progress lines
    result = json.loads(out.read_text())
    (scenario,) = result["scenarios"]
    phases = {p["system"]: p for p in scenario["phases"]}
    assert set(phases) == {"cronman", "apscheduler-memory", "apscheduler4-postgres"}
    for name, phase in phases.items():
        d = phase["delivery"]
        assert d["expected"] == 20 * 5, name
        assert d["expected"] == d["delivered_unique"] + d["missed"], name
        assert d["duplicated_pairs"] >= 0 and d["duplicate_deliveries"] >= d["duplicated_pairs"]
        assert d["delivered_unique"] > 0, name
        assert d["lateness"]["count"] == d["delivered_unique"], name
        procs = phase["cost"]["processes"]
        assert procs and all(p["cpu_s_total"] > 0 and p["peak_rss_mb"] > 0 for p in procs)
    assert "pg_commits_per_fire" in phases["cronman"]["cost"]
    # CPU per fire by process kind: the database backends of each system's own database.
    kinds = phases["cronman"]["cost"]["cpu_s_by_kind"]
    assert kinds["scheduler"] > 0 and kinds["postgresql"] > 0 and kinds["receiver"] >= 0
    assert phases["apscheduler4-postgres"]["cost"]["cpu_s_by_kind"]["postgresql"] > 0
    assert "postgresql" not in phases["apscheduler-memory"]["cost"]["cpu_s_by_kind"]
    assert phases["cronman"]["cost"]["redis_commands"] > 0


def test_mix_windows_priorities_and_job_definitions() -> None:
    from cronman_bench.overload import overload_jobs
    from cronman_bench.workload import Mix, cronman_definition, jobs_from_dict

    w, bounds = overload_jobs(100, now=1_000_000, lead_s=10, phase_s=5, recover_s=5,
                              grace_s=None)
    t0, t1, t2, t3, end = bounds
    assert (t0, t1, t2, t3, end) == (1_010_000, 1_015_000, 1_020_000, 1_025_000, 1_030_000)
    assert [w.rate_at(t) for t in (t0, t1, t2, t3)] == [100, 200, 300, 100]
    assert w.expected_count(t0, t1) == 500 and w.expected_count(t2, t3) == 1500
    assert w.count == 300
    high = [g for g in w.parts if g.priority]
    assert sum(g.count for g in high) == 15  # 5 % of every group
    # A job of the 3x group: its window is [t2, t3), end_at inclusive one ms before.
    i = next(i for i in range(w.count) if w.local(i)[0].name == "extra-b-high")
    spec = cronman_definition(w, i, "http://127.0.0.1:9/cb", "run")
    assert spec["priority"] == 10 and spec["namespace"] == "bench"
    assert spec["start_at"] == "1970-01-01T00:17:00Z"  # t2
    assert spec["end_at"] == "1970-01-01T00:17:04.999Z"  # t3 - 1 ms
    fires = list(w.fires_of(i, 0, 2_000_000))
    assert fires and t2 <= fires[0] and fires[-1] < t3 and len(fires) == 5
    assert w.on_grid(i, fires[0]) and not w.on_grid(i, fires[0] - 1000)
    again = jobs_from_dict(w.to_dict())
    assert isinstance(again, Mix) and again.expected_count(t0, end) == w.expected_count(t0, end)


def test_slices_recovery_and_herd_order() -> None:
    from cronman_bench.harness import PhaseOutcome
    from cronman_bench.priority_herd import herd_figures, herd_jobs
    from cronman_bench.slices import early_late, recovered_after

    w = Workload(count=10, every_ms=1000, base_ms=0)
    keys = [f"j{i}" for i in range(10)]
    t = Tally(w, keys, 0, 40_000)
    for i, f in w.expected(0, 40_000):
        # Behind by 5 s at 20 s, catching up by 1 s per second: on time from 25 s.
        late = max(5, 5000 - (f - 20_000)) if f >= 20_000 else 5
        t.add(Arrival(f + late, keys[i], f, "r", 1))
    assert recovered_after(t, 20_000, 40_000, 50) == 5.0
    assert recovered_after(t, 20_000, 30_000, 50) is None  # too little time left after it
    t.add(Arrival(30_000 - 100, keys[0], 30_000, "r2", 1))  # an early duplicate
    assert early_late(t, 0, 40_000, 1000)["early"] == 1

    mix = herd_jobs(low=6, high=2, steady=2, now=0, lead_s=10)
    due = 10_000
    ht = Tally(mix, [f"k{i}" for i in range(mix.count)], 0, 20_000)
    arrive = {0: 300, 1: 310, 2: 320, 3: 330, 4: 340, 5: 350, 6: 100, 7: 305}  # 7: high
    for i, ms in arrive.items():
        ht.add(Arrival(due + ms, f"k{i}", due, "r", 1))
    for i, f in mix.expected(0, 20_000):
        if i >= 8:
            ht.add(Arrival(f + (400 if due <= f < due + 1000 else 3), f"k{i}", f, "r", 1))
    o = PhaseOutcome(result={}, tally=ht, workload=mix, started_ms=0)
    h = herd_figures(o)
    assert h["high"]["max_ms"] == 305 and h["low"]["p50_ms"] == 320
    assert h["low_before_last_high"] == 1  # the low one at 300 ms
    assert h["steady_during_herd"]["max_ms"] == 400
    assert h["steady_before_herd"]["max_ms"] == 3


def test_cpu_meter_counts_processes_born_and_gone_between_snapshots() -> None:
    import os as _os
    import subprocess as _sp
    import time as _time

    from cronman_bench.cost import CpuMeter

    meter = CpuMeter()
    children: list[int] = []
    meter.add("scheduler", lambda: [_os.getpid()])
    meter.add("postgresql", lambda: list(children))
    a = meter.snapshot()
    busy = _sp.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                      "while time.process_time() - t < 0.3: pass\ntime.sleep(5)"])
    try:
        children.append(busy.pid)
        deadline = _time.monotonic() + 10
        spent = 0.0
        while spent < 0.25 and _time.monotonic() < deadline:
            _time.sleep(0.1)
            meter.sample()
            spent = meter.between(a, meter.snapshot())["postgresql"]
        b = meter.snapshot()
    finally:
        busy.kill()
        busy.wait()
    cpu = meter.between(a, b)
    assert 0.25 <= cpu["postgresql"] < 1.0  # born after a: all of its CPU counts
    assert cpu["scheduler"] >= 0.0
    assert meter.processes("postgresql", a, b) == 1


def test_node_metrics_parse_counters_by_label() -> None:
    from cronman_bench import nodemetrics

    text = ("# HELP cronman_fire_takeovers_total x\n# TYPE cronman_fire_takeovers_total counter\n"
            'cronman_fire_takeovers_total{reason="gone"} 3.0\n'
            'cronman_fire_takeovers_total{reason="stalled"} 1.0\n'
            "# HELP cronman_clock_offset_seconds y\n# TYPE cronman_clock_offset_seconds gauge\n"
            "cronman_clock_offset_seconds 2.01\n")
    after = {"n1": nodemetrics.parse(text)}
    before = {"n1": nodemetrics.parse(text.replace("3.0", "1.0"))}
    assert nodemetrics.counter_delta(before, after, nodemetrics.TAKEOVERS, "reason") == {
        "gone": 2.0, "stalled": 0.0}
    assert nodemetrics.gauges([(5, after)], nodemetrics.CLOCK_OFFSET) == {"n1": [(5, 2.01)]}


def test_node_metrics_read_gc_pauses_from_the_histogram_sum() -> None:
    from cronman_bench import nodemetrics

    text = ("# HELP cronman_gc_pause_seconds x\n# TYPE cronman_gc_pause_seconds histogram\n"
            'cronman_gc_pause_seconds_bucket{generation="0",le="0.001"} 4.0\n'
            'cronman_gc_pause_seconds_count{generation="0"} 5.0\n'
            'cronman_gc_pause_seconds_sum{generation="0"} 0.25\n'
            'cronman_gc_pause_seconds_count{generation="2"} 1.0\n'
            'cronman_gc_pause_seconds_sum{generation="2"} 0.5\n')
    after = {"n1": nodemetrics.parse(text), "n2": nodemetrics.parse(text)}
    before = {"n1": nodemetrics.parse(text.replace("0.25", "0.05")), "n2": None}
    # n1 grew by 0.2 s; n2 was not read before: counted from zero
    assert nodemetrics.counter_delta(before, after, nodemetrics.GC_PAUSE_SECONDS) == {
        "all": pytest.approx(0.2 + 0.75)}


def _bench(tmp_path: Any, *args: str, timeout: float = 300) -> dict[str, Any]:
    out = tmp_path / "bench.json"
    argv = [sys.executable, "-c", "from cronman.cli import main; main()", "bench", *args,
            "--database-url", pg_url(PG_ADMIN_DB), "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (scenario,) = json.loads(out.read_text())["scenarios"]
    assert "error" not in scenario, scenario
    return dict(scenario)


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_overload_smoke_run_has_every_phase(tmp_path) -> None:
    s = _bench(tmp_path, "--scenario", "overload", "--nodes", "2", "--rate", "20",
               "--phase-seconds", "5", "--recover-seconds", "12", "--lead", "12",
               "--drain", "10", "--peer", "none")
    (phase,) = s["phases"]
    ov = phase["overload"]
    assert ov["knee_per_s"] == 20
    per = ov["phases"]
    assert [per[p]["offered_per_s"] for p in ("knee", "2x", "3x", "back")] == [20, 40, 60, 20]
    for name, f in per.items():
        assert f["due"] == f["due_delivered"] + f["missed"], name
        assert f["due_delivered"] > 0, name
        assert isinstance(f["takeovers_by_reason"], dict), name  # read from the nodes
        assert f["gc_pause_s"] >= 0, name
        assert set(f["cpu_ms_per_fire_by_kind"]) >= {"scheduler", "postgresql", "redis",
                                                     "receiver", "total"}, name
        assert set(f["lateness_by_priority"]) <= {"0", "10"}, name
    assert "recovery_s" in ov and ov["recovered_limit_ms"] is not None
    assert "p99 high" in s["table"] and "GC s" in s["table"]


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_priority_herd_smoke_run_counts_both_priorities(tmp_path) -> None:
    s = _bench(tmp_path, "--scenario", "priority-herd", "--nodes", "2", "--jobs", "300",
               "--high-jobs", "30", "--steady-jobs", "10", "--duration", "8", "--lead", "12",
               "--drain", "10")
    (phase,) = s["phases"]
    h = phase["priority_herd"]
    assert h["low"]["owed"] == 300 and h["high"]["owed"] == 30
    for g in ("low", "high"):
        assert h[g]["delivered"] + h[g]["missed"] == h[g]["owed"]
    assert h["high"]["delivered"] > 0 and isinstance(h["low_before_last_high"], int)
    assert h["steady_before_herd"]["count"] > 0


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
                    reason="Debian's faketime is missing")
def test_bench_skew_smoke_run_reads_the_skewed_nodes_offset(tmp_path) -> None:
    s = _bench(tmp_path, "--scenario", "skew", "--nodes", "2", "--rate", "20",
               "--duration", "6", "--warmup", "4", "--skews=+2s", "--drain", "10")
    base, skewed = s["phases"]
    assert base["skew"]["offset"] == "none" and skewed["skew"]["offset"] == "+2s"
    assert skewed["skew"]["skewed_node_offset_s"] == pytest.approx(2.0, abs=0.3)
    assert skewed["skew"]["skewed_node_stepped_out"] is True
    assert abs(base["skew"]["skewed_node_offset_s"]) < 0.3
    assert skewed["delivery"]["expected"] == 20 * 6


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_limit_accuracy_smoke_run_reads_the_receivers_figures(tmp_path) -> None:
    s = _bench(tmp_path, "--scenario", "limit-accuracy", "--nodes", "2", "--jobs", "160",
               "--rate", "40", "--concurrency", "8", "--lead", "7", "--heartbeat-ttl", "3",
               "--lease-seconds", "6")
    (phase,) = s["phases"]
    assert phase["fault"] == "none" and phase["owed"] == 160
    assert phase["delivered"] + phase["missed"] == 160 and phase["delivered"] > 0, phase
    assert phase["doubled"] == 0 and not phase["timed_out"], phase
    assert 0 < phase["max_in_flight"] <= 8 and phase["max_per_second"] > 0, phase
    used = phase["rate_used"]  # 4 s of herd: at least a whole second waited in
    assert used["rate"] == 40 and used["seconds"] >= 1 and 0 < used["share"] <= 1.1, phase
    assert isinstance(phase["low_before_last_raised"], int)
    assert s["figures"]["none"]["delivered"] == phase["delivered"]
    assert "rate used" in s["table"]


def test_limit_figures_count_seconds_in_flight_and_the_rate_used_while_fires_wait() -> None:
    from cronman_bench.limit_figures import (
        max_in_any_second,
        max_in_flight,
        rate_used,
        waiting_spans,
    )

    assert max_in_any_second([0.0, 0.5, 0.99, 1.0, 1.2]) == 4  # (0.2, 1.2]: 0.5 .. 1.2
    assert max_in_flight([(0.0, 1.0), (0.5, 1.5), (1.0, 2.0)]) == 2  # 1.0: one ends first
    spans = waiting_spans([(0.0, 3), (0.5, 2), (1.0, 0), (1.5, 4), (2.0, 4), (4.0, 4),
                           (4.5, 1)])
    assert spans == [(0.0, 0.5), (1.5, 2.0), (4.0, 4.5)]  # 2.0 .. 4.0: a gap, not known
    arrivals = [i / 10 for i in range(60)]  # 10 a second over 6 s
    waited = waiting_spans([(t / 4, 1) for t in range(0, 25)])  # 0 .. 6 s
    assert rate_used(arrivals, 10, waited).to_dict() == {
        "seconds": 5, "arrivals": 50, "rate": 10, "share": 1.0}
    used = rate_used(arrivals, 20, waited, excluded=[(1.5, 2.5)])  # seconds 1 and 2 out
    assert (used.seconds, used.arrivals, used.share) == (3, 30, 0.5)
    assert rate_used([], 10, waited).share is None


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_work_queue_smoke_run_measures_every_phase(tmp_path) -> None:
    from cronman_bench.systems import BenchOptions
    from cronman_bench.work_queue import WorkQueueParams, run_work_queue

    opts = BenchOptions(nodes=1, replicas=1, admin_url=pg_url(PG_ADMIN_DB), workdir=tmp_path,
                        echo=lambda _line: None)
    wp = WorkQueueParams(rate=10, duration=3, warmup=1, lead=3, claimers=2, held=30,
                         holders=4, hb_period=1, hb_seconds=2, kills=1, kill_hb_timeout=2,
                         hold_lead=3, claim_wait=2, drain=3)
    f = run_work_queue(opts, wp)["figures"]
    fc = f["fire_to_claim"]
    assert fc["owed"] == 30 and fc["claimed"] + fc["missed"] == 30 and fc["claimed"] > 0
    assert fc["latency_ms"]["count"] == fc["claimed"] and fc["latency_ms"]["p50"] >= 0
    assert fc["fire_to_handoff_ms"]["count"] == fc["claimed"]
    assert f["claims"]["runs"] == 30 and f["claims"]["claims_per_s"] > 0
    hb = f["heartbeats"]
    assert hb["held"] == 30 and hb["reached_per_s"] > 0 and hb["call_ms"]["p99"] > 0
    assert hb["api_processes"] >= 2 and hb["api_cpu_cores"] > 0  # gunicorn master + workers
    (kill,) = f["kill"]["samples"]
    # re-queued after the lease ran out (the expiry runs each second), not before
    assert kill["requeued_ms"] is not None and kill["expiry_to_requeue_s"] > -0.2
    assert kill["kill_to_requeue_s"] <= 2 + 2 + 1


def test_tracing_rounds_rotate_the_order_of_the_modes() -> None:
    orders = [round_order(MODE_NAMES, r) for r in range(1, 5)]
    assert orders == [["off", "1%", "100%"], ["1%", "100%", "off"], ["100%", "off", "1%"],
                      ["off", "1%", "100%"]]
    for place in range(len(MODE_NAMES)):  # each mode in each place once per three rounds
        assert {order[place] for order in orders[:3]} == set(MODE_NAMES)
    assert round_order(["1%"], 2) == ["1%"] and round_order([], 1) == []


def test_bench_otlp_sink_counts_exported_spans_by_their_start(tmp_path) -> None:
    """The tracing scenario's receiver, fed by the SDK's own OTLP/HTTP exporter."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from cronman_bench.otlp_sink import read_log
    from cronman_bench.procs import ManagedProcess, free_port, wait_port

    port, log = free_port(), tmp_path / "otlp.log"
    sink = ManagedProcess("otlp-sink", [sys.executable, "-m", "cronman_bench.otlp_sink",
                                        "--port", str(port), "--log", str(log)],
                          log_path=tmp_path / "sink.out")
    try:
        wait_port("127.0.0.1", port, 10, sink)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
        tracer = provider.get_tracer("bench-test")
        second = 1_700_000_000
        for at in (second, second, second + 1, second + 2):
            tracer.start_span("s", start_time=at * 1_000_000_000 + 5).end()
        provider.shutdown()
    finally:
        sink.stop()
    assert read_log(log, second * 1000, (second + 3) * 1000) == (4, 4)
    # Whole seconds only: a window from mid-second drops that second's spans.
    assert read_log(log, second * 1000 + 1, (second + 2) * 1000)[1] == 1
