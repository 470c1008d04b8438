"""One measured phase: a system under a workload, watched from the receiver.

A phase starts a receiver, lets the system create the workload and start its
processes, waits out a warm-up, measures a window (counters of PostgreSQL and
Redis and CPU of every process are read at both ends), drains late arrivals,
stops everything it started (by PID) and turns the receiver's log into
figures. Two systems are provided: ``CronmanSystem`` (N ``cronman scheduler``
nodes on a scratch database and a private redis-server) and ``PeerSystem``
(APScheduler in one process, see ``cronman.bench.peer``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cronman.bench.nodelog import NodeLog
from cronman.bench.peer import peer_argv, peer_key
from cronman.bench.procs import BenchError, ManagedProcess, Usage
from cronman.bench.receiver import LogTail, Receiver
from cronman.bench.report import SteadyWatch, Tally, percentile
from cronman.bench.services import DEFAULT_ADMIN_URL, PrivateRedis, ScratchDatabase
from cronman.bench.workload import Workload, create_cronman_jobs
from cronman.config import DEFAULT_HEARTBEAT_TTL, DEFAULT_LEASE_SECONDS
from cronman.timeutil import now_ms

Echo = Callable[[str], None]


@dataclass
class BenchOptions:
    """Settings shared by every phase of a benchmark run."""

    nodes: int = 3
    replicas: int = 2
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    warmup: float = 5.0
    drain_max: float = 60.0
    drain_idle: float = 5.0
    startup_timeout: float = 120.0  # start-up until the first callback
    admin_url: str = DEFAULT_ADMIN_URL
    keep: bool = False
    p99_limit_ms: int = 100
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cronman-bench-")))
    echo: Echo = print
    node_argv: list[str] | None = None  # how to start a node (default: the cronman command)
    # Called with a scenario's partial result (max-rate after each trial), to save it.
    checkpoint: Callable[[dict[str, Any]], None] | None = None


def ceil_second(ms: int) -> int:
    return -(-ms // 1000) * 1000


def cronman_command() -> list[str]:
    exe = Path(sys.executable).with_name("cronman")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from cronman.cli import main; main()"]


class System(Protocol):
    name: str
    processes: list[ManagedProcess]

    def prepare(self, w: Workload, url: str) -> list[str]:
        """Create state and the workload's jobs; return the job keys by index."""

    def start(self) -> None:
        """Start the processes; return once they run."""

    def counters(self) -> dict[str, int]:
        """Cumulative counters of the shared services (commits, commands)."""

    def kill_one(self) -> ManagedProcess | None:
        """SIGKILL one process (the kill scenario); None if not applicable."""

    def ready_ms(self) -> dict[str, int | None]:
        """Per process: when it said it had loaded its jobs (Unix ms), None until then
        (cronman: the node's ready line, or its last ownership change after it)."""

    def teardown(self) -> None:
        """Stop what is still running and remove scratch state."""


class CronmanSystem:
    """N scheduler nodes on a scratch PostgreSQL database and a private Redis."""

    name = "cronman"

    def __init__(self, opts: BenchOptions, tag: str) -> None:
        self.opts = opts
        self.tag = tag
        self.db = ScratchDatabase(opts.admin_url)
        self.redis = PrivateRedis()
        self.processes: list[ManagedProcess] = []
        self.logs: dict[str, NodeLog] = {}
        self.notes: list[str] = []
        self._torn_down = False

    def prepare(self, w: Workload, url: str) -> list[str]:
        from cronman.store.migrate import upgrade

        echo = self.opts.echo
        self.db.create()
        upgrade(self.db.url)
        self.redis.start()
        t0 = time.monotonic()
        last = [t0]

        def progress(n: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0 or n == w.count:
                last[0] = now
                echo(f"  [{self.tag}] created {n:,}/{w.count:,} jobs "
                     f"({n / max(now - t0, 1e-6):,.0f}/s)")

        return create_cronman_jobs(self.db.url, w, url, self.tag, progress=progress)

    def node_env(self, node_id: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "CRONMAN_DATABASE_URL": self.db.url,
            "CRONMAN_REDIS_URL": self.redis.url,
            "CRONMAN_REPLICAS": str(min(self.opts.replicas, self.opts.nodes)),
            "CRONMAN_HEARTBEAT_TTL": str(self.opts.heartbeat_ttl),
            "CRONMAN_LEASE_SECONDS": str(self.opts.lease_seconds),
            "CRONMAN_ALLOW_PRIVATE_TARGETS": "true",
            "CRONMAN_NODE_ID": node_id,
        })
        return env

    def start(self) -> None:
        argv = self.opts.node_argv or cronman_command()
        for n in range(1, self.opts.nodes + 1):
            node_id = f"bench-{n}"
            proc = ManagedProcess(
                node_id, [*argv, "scheduler", "--node-id", node_id],
                log_path=self.opts.workdir / f"{self.tag}-{node_id}.log",
                env=self.node_env(node_id),
            )
            self.processes.append(proc)
            self.logs[node_id] = NodeLog(proc.log_path, proc.log_offset)
        time.sleep(0.5)
        for p in self.processes:
            if p.exited():
                raise BenchError(f"{p.name} exited with {p.returncode}: {p.log_tail()}")

    def counters(self) -> dict[str, int]:
        return {"pg_commits": self.db.xact_commit(),
                "redis_commands": self.redis.total_commands()}

    def kill_one(self) -> ManagedProcess | None:
        victim = next((p for p in self.processes if not p.exited()), None)
        if victim is not None:
            victim.kill()
        return victim

    def ready_ms(self) -> dict[str, int | None]:
        for log in self.logs.values():
            log.read()
        return {name: log.loaded_ms for name, log in self.logs.items()}

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        for p in self.processes:
            p.stop()
        self.redis.stop()
        if self.opts.keep:
            self.notes.append(f"kept database {self.db.name}")
            self.opts.echo(f"  [{self.tag}] kept database {self.db.url}")
        else:
            self.db.drop()


class PeerSystem:
    """APScheduler in one process (memory or SQLAlchemy job store)."""

    def __init__(self, kind: str, opts: BenchOptions, tag: str) -> None:
        self.name = kind
        self.opts = opts
        self.tag = tag
        self.db = ScratchDatabase(opts.admin_url, prefix="cronman_benchcli_aps") \
            if kind == "apscheduler-sqlalchemy" else None
        self.processes: list[ManagedProcess] = []
        self._argv: list[str] = []
        self._count = 0
        self._ready_at: int | None = None
        self.notes: list[str] = []
        self._torn_down = False

    def prepare(self, w: Workload, url: str) -> list[str]:
        if self.db is not None:
            self.db.create()
        self._count = w.count
        ready = self.opts.workdir / f"{self.tag}.ready"
        ready.unlink(missing_ok=True)
        self._ready = ready
        self._argv = peer_argv(self.name, w, url, self.db.url if self.db else None, ready)
        return [peer_key(i) for i in range(w.count)]

    def ready_ms(self) -> dict[str, int | None]:
        """The peer is ready once its jobs are added and the scheduler started."""
        return {self.name: self._ready_at}

    def start(self) -> None:
        proc = ManagedProcess(self.name, self._argv,
                              log_path=self.opts.workdir / f"{self.tag}.log")
        self.processes.append(proc)
        deadline = time.monotonic() + 60 + self._count / 500
        last_echo = time.monotonic()
        while not self._ready.exists():
            if proc.exited():
                raise BenchError(f"{self.name} exited with {proc.returncode}: {proc.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} did not schedule its jobs in time")
            if time.monotonic() - last_echo > 2:
                last_echo = time.monotonic()
                self.opts.echo(f"  [{self.tag}] adding {self._count:,} jobs to APScheduler ...")
            proc.sample()
            time.sleep(0.1)
        try:
            self._ready_at = int(float(self._ready.read_text().split()[0]) * 1000)
        except (IndexError, ValueError):  # caught between the file's creation and its write
            self._ready_at = now_ms()

    def counters(self) -> dict[str, int]:
        return {"pg_commits": self.db.xact_commit()} if self.db is not None else {}

    def kill_one(self) -> ManagedProcess | None:
        return None

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        for p in self.processes:
            p.stop()
        if self.db is not None:
            if self.opts.keep:
                self.opts.echo(f"  [{self.tag}] kept database {self.db.url}")
            else:
                self.db.drop()


# (workload, start-up time, first arrival or None, now) -> the window, or None
# while it cannot be fixed yet. Every time is Unix ms.
WindowOf = Callable[[Workload, int, "int | None", int], "tuple[int, int] | None"]


def steady_window(warmup: float, duration: float) -> WindowOf:
    """Measure ``duration`` seconds, starting ``warmup`` seconds after the
    first callback arrived (start-up costs differ between systems: importing,
    loading jobs; the same warm-up after each system's first fire is fair)."""
    def window(_w: Workload, started_ms: int, first_ms: int | None,
               now: int) -> tuple[int, int] | None:
        if first_ms is None:
            return None
        ws = ceil_second(max(first_ms + int(warmup * 1000), now + 500))
        return ws, ws + int(duration * 1000)
    return window


def fixed_window(start_ms: Callable[[Workload, int], int], duration_ms: int) -> WindowOf:
    """A window known from the start (a herd's instant, a cold start)."""
    def window(w: Workload, started_ms: int, _first: int | None,
               _now: int) -> tuple[int, int] | None:
        ws = start_ms(w, started_ms)
        return ws, ws + duration_ms
    return window


@dataclass
class PhaseOutcome:
    """A finished phase: its JSON-able result and the tally behind it."""

    result: dict[str, Any]
    tally: Tally
    workload: Workload
    started_ms: int  # when the system's processes were launched
    killed: dict[str, Any] | None = None
    ready_ms: int = 0  # when starting them returned (APScheduler: jobs added)
    # Per process: when it said it had loaded its jobs (cronman: the node's log).
    loaded_ms: dict[str, int | None] = field(default_factory=dict)


def run_phase(
    system: System,
    make_workload: Callable[[int], Workload],
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
) -> PhaseOutcome:
    """Run one system through one workload and measure it from the receiver.

    ``kill_after_s``: SIGKILL one process that long into the window; the
    drain then lasts at least ``settle_after_kill_s`` after the kill (runs of
    the killed node come back after their lease, later than any other fire,
    and re-deliveries of fires that had already arrived must be counted too).
    ``end_when_steady_s``: end the window early, once every process has
    loaded and steady state (``steady_after``) has held that long (a cold
    start); the window's length is then a maximum.
    """
    echo = opts.echo
    receiver = Receiver(opts.workdir / f"{label}-nginx").start()
    timings: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        w = make_workload(now_ms())
        keys = system.prepare(w, receiver.url)
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
                         finish_when_complete, end_when_steady_s)
        timings["phase_s"] = round(time.monotonic() - t0, 1)  # set-up to teardown
        outcome.result["timings"] = {**timings, **outcome.result.get("timings", {})}
        outcome.result["workload"] = w.to_dict()
        outcome.ready_ms = ready_ms
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
           finish_when_complete: bool, end_when_steady_s: float | None) -> PhaseOutcome:
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
    while True:
        # Wake at every second, and exactly at the window's ends and the kill.
        wake = next_tick
        marks = [ws] if counters_start is None else []
        if counters_end is None:
            marks.append(we)
        if kill_after_s is not None and killed is None:
            marks.append(ws + int(kill_after_s * 1000))
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
        if ws == _NEVER:
            window = window_of(tally.w, started_ms, tally.first_arrival_ms, now)
            if window is not None:
                ws, we = window
                tally.set_window(ws, we)
                expected = tally.expected()
                if end_when_steady_s is not None:
                    steady_watch = SteadyWatch(tally, opts.p99_limit_ms, end_when_steady_s)
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
            counters_start = system.counters()
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
            counters_end = system.counters()
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
        counters_end = system.counters()
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
                      counters_start, counters_end),
        "notes": list(getattr(system, "notes", [])),
    }
    result["loaded_after_launch_s"] = {
        name: None if ms is None else round((ms - started_ms) / 1000, 2)
        for name, ms in loaded_ms.items()}
    if killed is not None:
        result["killed"] = killed
    return PhaseOutcome(result=result, tally=tally, workload=tally.w, started_ms=started_ms,
                        killed=killed, loaded_ms=loaded_ms)


def _log_tails(system: System) -> str:
    return " | ".join(f"{p.name}: {p.log_tail(600)}" for p in system.processes)


def _ms(v: int | None) -> str:
    return f"{v:6,} ms" if v is not None else "     - ms"


def _cost(system: System, tally: Tally, measured_ms: tuple[int, int],
          usage_start: dict[str, Usage | None], usage_end: dict[str, Usage | None],
          usage_final: dict[str, Usage | None], c0: dict[str, int], c1: dict[str, int]
          ) -> dict[str, Any]:
    """CPU, memory and service counters over the measured interval, per fire.

    "Per fire" divides by the callbacks (of any fire time) that arrived while
    the counters ran, which is the work done in that interval.
    """
    fires = tally.arrivals_between(*measured_ms)
    procs = []
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
        "peak_rss_mb_max": max((p["peak_rss_mb"] or 0 for p in procs), default=None),
    }
    for key, per in (("pg_commits", "pg_commits_per_fire"),
                     ("redis_commands", "redis_commands_per_fire")):
        if key in c0 and key in c1:
            delta = c1[key] - c0[key]
            out[key] = delta
            out[per] = round(delta / fires, 3) if fires else None
    return out
