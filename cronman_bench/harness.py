"""One measured phase: a system under a workload, watched from the receiver.

A phase starts a receiver, lets the system create the workload and start its
processes, waits out a warm-up, measures a window (counters of PostgreSQL and
Redis, CPU of every process by kind and the nodes' metrics are read at both
ends, and at any marks a scenario asks for in between), drains late
arrivals, stops everything it started (by PID) and turns the receiver's log
into figures. The systems are in ``cronman_bench.systems``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cronman.timeutil import now_ms
from cronman_bench.cost import CpuMeter, Snapshot, per_fire, with_children
from cronman_bench.nodemetrics import Scrape
from cronman_bench.procs import BenchError, Usage
from cronman_bench.receiver import LogTail, Receiver
from cronman_bench.report import SteadyWatch, Tally, percentile
from cronman_bench.systems import BenchOptions, System
from cronman_bench.workload import Jobs

PROBE_EVERY_S = 5.0  # the nodes' metrics are scraped this often (and at every mark)


def ceil_second(ms: int) -> int:
    return -(-ms // 1000) * 1000


@dataclass
class Mark:
    """What the meters said at one moment of a phase (a scenario's phase boundary)."""

    at_ms: int
    cpu: Snapshot
    probe: dict[str, Scrape | None]
    counters: dict[str, int]

# (workload, start-up time, first arrival or None, now) -> the window, or None
# while it cannot be fixed yet. Every time is Unix ms.
WindowOf = Callable[[Jobs, int, "int | None", int], "tuple[int, int] | None"]


def steady_window(warmup: float, duration: float) -> WindowOf:
    """Measure ``duration`` seconds, starting ``warmup`` seconds after the
    first callback arrived (start-up costs differ between systems: importing,
    loading jobs; the same warm-up after each system's first fire is fair)."""
    def window(_w: Jobs, started_ms: int, first_ms: int | None,
               now: int) -> tuple[int, int] | None:
        if first_ms is None:
            return None
        ws = ceil_second(max(first_ms + int(warmup * 1000), now + 500))
        return ws, ws + int(duration * 1000)
    return window


def fixed_window(start_ms: Callable[[Jobs, int], int], duration_ms: int) -> WindowOf:
    """A window known from the start (a herd's instant, a cold start)."""
    def window(w: Jobs, started_ms: int, _first: int | None,
               _now: int) -> tuple[int, int] | None:
        ws = start_ms(w, started_ms)
        return ws, ws + duration_ms
    return window


@dataclass
class PhaseOutcome:
    """A finished phase: its JSON-able result and the tally behind it."""

    result: dict[str, Any]
    tally: Tally
    workload: Jobs
    started_ms: int  # when the system's processes were launched
    killed: dict[str, Any] | None = None
    ready_ms: int = 0  # when starting them returned (APScheduler: jobs added)
    prepared_ms: int = 0  # when the jobs had all been created
    # Per process: when it said it had loaded its jobs (cronman: the node's log).
    loaded_ms: dict[str, int | None] = field(default_factory=dict)
    meters: Meters | None = None


MarksOf = Callable[[Jobs, int, int], Sequence[int]]


class Meters:
    """CPU by process kind, the nodes' metrics and service counters, read at
    the window's ends, at a scenario's marks and (metrics) every few seconds."""

    def __init__(self, system: System, receiver: Receiver) -> None:
        self.system = system
        self.cpu = CpuMeter()
        for kind, source in system.cpu_sources():
            self.cpu.add(kind, source)
        proc = receiver.proc
        self.cpu.add("receiver", with_children(lambda: [proc.pid] if proc else []))
        self.marks: list[Mark] = []
        self.pending: list[int] = []  # mark times not taken yet (Unix ms)
        self.probes: list[tuple[int, dict[str, Scrape | None]]] = []
        self.window_start: Mark | None = None
        self.window_end: Mark | None = None
        self._next_probe = 0.0

    def mark(self) -> Mark:
        at = now_ms()
        probe = self.system.probe()
        if probe:
            self.probes.append((at, probe))
        return Mark(at, self.cpu.snapshot(), probe, self.system.counters())

    def tick(self, now: int) -> None:
        """Sample CPU; take due marks; scrape the nodes when it is time."""
        self.cpu.sample()
        while self.pending and self.pending[0] <= now:
            self.pending.pop(0)
            self.marks.append(self.mark())
        if time.monotonic() >= self._next_probe:
            self._next_probe = time.monotonic() + PROBE_EVERY_S
            probe = self.system.probe()
            if probe:
                self.probes.append((now, probe))

    def cpu_between(self, a: Mark, b: Mark) -> dict[str, float]:
        return self.cpu.between(a.cpu, b.cpu)


def run_phase(
    system: System,
    make_workload: Callable[[int], Jobs],
    window_of: WindowOf,
    opts: BenchOptions,
    *,
    label: str,
    kill_after_s: float | None = None,
    settle_after_kill_s: float = 0.0,
    drain_max: float | None = None,
    drain_idle: float | None = None,
    finish_when_complete: bool = False,
    end_when_steady_s: float | None = None,
    marks_of: MarksOf | None = None,
) -> PhaseOutcome:
    """Run one system through one workload and measure it from the receiver.

    ``kill_after_s``: SIGKILL one process that long into the window; the
    drain then lasts at least ``settle_after_kill_s`` after the kill (runs of
    the killed node come back after their lease, later than any other fire,
    and re-deliveries of fires that had already arrived must be counted too).
    ``end_when_steady_s``: end the window early, once every process has
    loaded and steady state (``steady_after``) has held that long (a cold
    start); the window's length is then a maximum. ``marks_of``: moments
    (Unix ms, from the workload and the window) at which the meters are read
    too (a scenario's phase boundaries).
    """
    echo = opts.echo
    receiver = Receiver(opts.workdir / f"{label}-nginx").start()
    timings: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        w = make_workload(now_ms())
        keys = system.prepare(w, receiver.url)
        prepared_ms = now_ms()
        timings["prepare_s"] = round(time.monotonic() - t0, 2)
        t1 = time.monotonic()
        started_ms = now_ms()  # launch: "from start" means from here, for every system
        system.start()
        ready_ms = now_ms()
        timings["start_s"] = round(time.monotonic() - t1, 2)
        echo(f"  [{label}] {system.name}: {w.count:,} jobs, {w.rate:,.0f} fires/s asked")
        # Until the window is fixed, every arrival counts as outside it.
        tally = Tally(w, keys, _NEVER, _NEVER)
        outcome = _watch(system, receiver, tally, window_of, opts, label, started_ms,
                         kill_after_s, settle_after_kill_s,
                         drain_max if drain_max is not None else opts.drain_max,
                         drain_idle if drain_idle is not None else opts.drain_idle,
                         finish_when_complete, end_when_steady_s, marks_of)
        timings["phase_s"] = round(time.monotonic() - t0, 1)  # set-up to teardown
        outcome.result["timings"] = {**timings, **outcome.result.get("timings", {})}
        outcome.result["workload"] = w.to_dict()
        outcome.ready_ms = ready_ms
        outcome.prepared_ms = prepared_ms
        if outcome.tally.start_ms < prepared_ms:
            outcome.result["notes"].append(
                "the window opened before every job existed (fires due before a job was "
                "created are not owed by cronman, and show as missed): raise --lead")
        outcome.workload = w
        return outcome
    finally:
        try:
            system.teardown()
        finally:
            receiver.stop()
            if not opts.keep:
                receiver.cleanup()


_NEVER = 2**62


def _watch(system: System, receiver: Receiver, tally: Tally, window_of: WindowOf,
           opts: BenchOptions, label: str, started_ms: int, kill_after_s: float | None,
           settle_after_kill_s: float, drain_max: float, drain_idle: float,
           finish_when_complete: bool, end_when_steady_s: float | None,
           marks_of: MarksOf | None) -> PhaseOutcome:
    """Tick every second: sample, read the log, report; measure; drain.

    With ``finish_when_complete`` the measurement ends as soon as every owed
    fire arrived (a herd), else at the window's end.
    """
    echo = opts.echo
    tail = LogTail(receiver.log_path)
    ws = we = _NEVER
    expected = 0
    startup_deadline = started_ms + int(opts.startup_timeout * 1000)
    counters_start: dict[str, int] | None = None
    counters_end: dict[str, int] | None = None
    usage_start: dict[str, Usage | None] = {}
    usage_end: dict[str, Usage | None] = {}
    killed: dict[str, Any] | None = None
    measured_ms: tuple[int, int] = (ws, we)  # when the counters were read
    drain_started: float | None = None
    next_tick = time.monotonic() + 1.0
    tick_late: list[int] = []  # lateness of what arrived since the last progress line
    steady_watch: SteadyWatch | None = None
    ended_early = False
    meters = Meters(system, receiver)
    while True:
        # Wake at every second, and exactly at the window's ends and the kill.
        wake = next_tick
        marks = [ws] if counters_start is None else []
        if counters_end is None:
            marks.append(we)
        if kill_after_s is not None and killed is None:
            marks.append(ws + int(kill_after_s * 1000))
        marks.extend(meters.pending[:1])
        for mark in marks:
            ahead = (mark - now_ms()) / 1000
            if ahead >= 0:
                wake = min(wake, time.monotonic() + ahead)
        time.sleep(max(0.0, wake - time.monotonic()))
        ticked = time.monotonic() >= next_tick
        if ticked:
            next_tick += 1.0
        for p in system.processes:
            p.sample()
        now = now_ms()
        meters.tick(now)
        if ws == _NEVER:
            window = window_of(tally.w, started_ms, tally.first_arrival_ms, now)
            if window is not None:
                ws, we = window
                tally.set_window(ws, we)
                expected = tally.expected()
                if end_when_steady_s is not None:
                    steady_watch = SteadyWatch(tally, opts.p99_limit_ms, end_when_steady_s)
                if marks_of is not None:
                    meters.pending = sorted(m for m in marks_of(tally.w, ws, we) if m > now)
                echo(f"  [{label}] window {(ws - started_ms) / 1000:+.1f}s .. "
                     f"{(we - started_ms) / 1000:+.1f}s from start, {expected:,} fires owed")
            elif now > startup_deadline:
                raise BenchError(f"no callback arrived within {opts.startup_timeout:.0f} s "
                                 f"of start-up: {_log_tails(system)}")
        for a in tail.read():
            if tally.add(a) and steady_watch is not None:
                steady_watch.add(a)
            if a.lateness_ms is not None:
                tick_late.append(a.lateness_ms)
        now = now_ms()
        for p in system.processes:
            if p.exited() and p.killed_at is None:
                raise BenchError(f"{p.name} exited with {p.returncode} during the run: "
                                 f"{p.log_tail()}")
        if counters_start is None and now >= ws:
            meters.window_start = meters.mark()
            counters_start = meters.window_start.counters
            usage_start = {p.name: p.sample() for p in system.processes}
            measured_ms = (now, measured_ms[1])
        if (kill_after_s is not None and killed is None and counters_start is not None
                and now >= ws + kill_after_s * 1000):
            victim = system.kill_one()
            if victim is not None:
                killed = {"node": victim.name, "at_ms": int((victim.killed_at or 0) * 1000)}
                echo(f"  [{label}] SIGKILL {victim.name} (pid {victim.pid})")
        complete = ws != _NEVER and len(tally.pairs) >= expected
        if counters_end is None and counters_start is not None and (
                complete if finish_when_complete else now >= we):
            meters.window_end = meters.mark()
            counters_end = meters.window_end.counters
            usage_end = {p.name: p.usage for p in system.processes}
            measured_ms = (measured_ms[0], now)
        if drain_started is None and now >= we:
            drain_started = time.monotonic()
        if not ticked and not (complete and drain_started is not None):
            continue
        tick_late.sort()
        phase = "start" if ws == _NEVER else (
            "warm-up" if now < ws else ("measure" if now < we else "drain"))
        loaded = system.ready_ms()
        if (steady_watch is not None and not ended_early and now < we and loaded
                and None not in loaded.values() and int(now / 1000) % 5 == 0):
            end = steady_watch.end_ms(now, max(v for v in loaded.values() if v is not None))
            if end is not None:
                ended_early = True
                we = end
                tally.set_window(ws, we)
                expected = tally.expected()
                echo(f"  [{label}] every process loaded and steady for "
                     f"{end_when_steady_s:.0f} s: the window ends at "
                     f"{(we - started_ms) / 1000:+.1f}s from start, {expected:,} fires owed")
        echo(f"  [{label}] {phase:7s} {(now - started_ms) / 1000:6.1f}s  "
             f"received {len(tick_late):6,}/s  p99(1s) {_ms(percentile(tick_late, 99))}  "
             f"owed fires delivered {len(tally.pairs):,}/{expected:,}  "
             f"loaded {sum(v is not None for v in loaded.values())}/{len(loaded)}")
        tick_late = []
        if drain_started is not None:
            idle_since = max(tally.last_new_pair_ms or 0, we)
            idle = now - idle_since > drain_idle * 1000
            settling = killed is not None and now < killed["at_ms"] + settle_after_kill_s * 1000
            if ((complete or idle) and not settling) or (
                    time.monotonic() - drain_started > drain_max):
                break
    if counters_end is None:  # finish_when_complete, and it never completed
        meters.window_end = meters.mark()
        counters_end = meters.window_end.counters
        usage_end = {p.name: p.usage for p in system.processes}
        measured_ms = (measured_ms[0], now_ms())
    # Final samples, then stop the processes and read the rest of the log.
    for p in system.processes:
        p.sample()
    loaded_ms = system.ready_ms()
    usage_final = {p.name: p.usage for p in system.processes}
    system.teardown()
    receiver.stop()
    for a in tail.read():
        tally.add(a)
    assert counters_start is not None and counters_end is not None
    delivery = tally.summary(expected)
    result = {
        "system": system.name,
        "label": label,
        "window": {"start_ms": ws, "end_ms": we,
                   "start_after_launch_s": round((ws - started_ms) / 1000, 3),
                   "ended_when_steady": ended_early},
        "delivery": delivery,
        "cost": _cost(system, tally, measured_ms, usage_start, usage_end, usage_final,
                      counters_start, counters_end, meters),
        "notes": list(getattr(system, "notes", [])),
    }
    result["loaded_after_launch_s"] = {
        name: None if ms is None else round((ms - started_ms) / 1000, 2)
        for name, ms in loaded_ms.items()}
    if killed is not None:
        result["killed"] = killed
    return PhaseOutcome(result=result, tally=tally, workload=tally.w, started_ms=started_ms,
                        killed=killed, loaded_ms=loaded_ms, meters=meters)


def _log_tails(system: System) -> str:
    return " | ".join(f"{p.name}: {p.log_tail(600)}" for p in system.processes)


def _ms(v: int | None) -> str:
    return f"{v:6,} ms" if v is not None else "     - ms"


def _cost(system: System, tally: Tally, measured_ms: tuple[int, int],
          usage_start: dict[str, Usage | None], usage_end: dict[str, Usage | None],
          usage_final: dict[str, Usage | None], c0: dict[str, int], c1: dict[str, int],
          meters: Meters) -> dict[str, Any]:
    """CPU, memory and service counters over the measured interval, per fire.

    "Per fire" divides by the callbacks (of any fire time) that arrived while
    the counters ran, which is the work done in that interval. ``cpu_ms_per_fire``
    is the system's own processes (as it always was); ``cpu_ms_per_fire_by_kind``
    splits every process that worked for it by kind, with ``total`` (all but
    the receiver).
    """
    fires = tally.arrivals_between(*measured_ms)
    procs: list[dict[str, Any]] = []
    cpu_window = 0.0
    for p in system.processes:
        u0, u1, uf = usage_start.get(p.name), usage_end.get(p.name), usage_final.get(p.name)
        cw = (u1.cpu_s - u0.cpu_s) if (u0 and u1) else None
        cpu_window += cw or 0.0
        procs.append({
            "name": p.name, "pid": p.pid,
            "cpu_s_window": None if cw is None else round(cw, 2),
            "cpu_s_total": None if uf is None else round(uf.cpu_s, 2),
            "peak_rss_mb": None if uf is None else round(uf.peak_rss_kb / 1024, 1),
            "killed": p.killed_at is not None,
        })
    out: dict[str, Any] = {
        "measured_s": round((measured_ms[1] - measured_ms[0]) / 1000, 2),
        "fires_in_window": fires,
        "processes": procs,
        "cpu_s_window": round(cpu_window, 2),
        "cpu_ms_per_fire": round(cpu_window * 1000 / fires, 3) if fires else None,
        "peak_rss_mb_max": max((float(p["peak_rss_mb"] or 0) for p in procs), default=None),
    }
    if meters.window_start is not None and meters.window_end is not None:
        by_kind = meters.cpu_between(meters.window_start, meters.window_end)
        out["cpu_s_by_kind"] = {k: round(v, 2) for k, v in by_kind.items()}
        out["cpu_ms_per_fire_by_kind"] = per_fire(by_kind, fires)
        out["processes_by_kind"] = {
            k: meters.cpu.processes(k, meters.window_start.cpu, meters.window_end.cpu)
            for k in by_kind}
        if meters.cpu.errors:
            out["cpu_meter_errors"] = meters.cpu.errors
    for key, per in (("pg_commits", "pg_commits_per_fire"),
                     ("redis_commands", "redis_commands_per_fire")):
        if key in c0 and key in c1:
            delta = c1[key] - c0[key]
            out[key] = delta
            out[per] = round(delta / fires, 3) if fires else None
    return out
