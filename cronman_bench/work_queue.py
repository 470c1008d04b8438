"""The work-queue scenario (``cronman bench --scenario work-queue``): worker runs
end to end, through real processes on loopback.

One set-up serves four phases: a scratch PostgreSQL database, a private
redis-server, ``cronman api`` under gunicorn (``--api-workers`` processes, 4
threads each) and N ``cronman scheduler`` nodes; the workers are
``cronman_bench.work_claimer`` processes (raw claim loops through the light
client's calls). Every latency is measured at the claimer, against the run's
``scheduled_for``, on the one clock of this machine.

1. **fire → claim**: ``rate`` interval jobs every second with worker targets,
   their anchors spread over the second, claimed by ``claimers`` waiting
   threads (claim, then report ``succeeded``); over a window of ``duration``
   s after a warm-up: claim time − scheduled time p50/p99, the claim rate
   reached, runs never claimed, empty (204) claims per second.
2. **claims per second**: ``held`` jobs due at one instant fill a queue;
   ``holders`` threads claim it empty (no long-poll: there is work) and keep
   what they took.
3. **held runs heartbeating**: those ``held`` runs, each heartbeated every
   ``hb_period`` s (spread evenly): the heartbeat call's p50/p99, the rate
   reached, the lag behind the schedule, and the CPU of the API's processes
   (gunicorn master and workers) and of PostgreSQL's backends.
4. **SIGKILL → re-queue**: ``kills`` times, a holder claims one run of a job
   with ``heartbeat_timeout`` ``kill_hb_timeout``, heartbeats every third of
   it, and is SIGKILLed; the time until the API shows the run re-queued.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cronman.client import BULK_MAX, NO_RETRY, CronmanClient
from cronman.errors import CronmanError
from cronman.timeutil import format_rfc3339, from_ms
from cronman_bench.cost import children_of
from cronman_bench.jobs import ApiServer
from cronman_bench.procs import BenchError, ManagedProcess, read_usage
from cronman_bench.report import percentile
from cronman_bench.scenarios import ScenarioParams
from cronman_bench.systems import BenchOptions, CronmanSystem

NAMESPACE = "bench"
API_THREADS = 4  # cronman api's default threads per worker
NODES_READY_WAIT = 120


@dataclass
class WorkQueueParams:
    """The work-queue scenario's sizes (the smoke test shrinks them)."""

    rate: int = 200
    duration: int = 30
    warmup: float = 5.0
    claimers: int = 4
    held: int = 10_000
    holders: int = 64
    hb_period: float = 10.0
    hb_seconds: float = 30.0
    kills: int = 5
    kill_hb_timeout: int = 6
    api_workers: int = 2
    claim_wait: float = 20.0
    spin: bool = False  # claimers claim again at once after an early 204 (no pause)
    claim_max: int = 10  # runs a claim call takes at most (1: one run a call)
    drain: float = 30.0  # s after the window for its runs to be claimed
    lead: float = 5.0  # s from job creation to the window's warm-up (nodes see new jobs)
    hold_lead: float | None = None  # s to the held runs' instant (default 10 + held / 250)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pct(values: Iterable[float]) -> dict[str, Any]:
    v = sorted(values)
    return {"count": len(v), "p50": percentile(v, 50), "p99": percentile(v, 99),
            "max": v[-1] if v else None}


def _per_call(claims: list[dict[str, Any]]) -> float | None:
    """Runs per claim call, over the calls these claims came in."""
    calls = sum(1 / e.get("batch", 1) for e in claims)
    return round(len(claims) / calls, 2) if calls else None


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a SIGKILL
            continue
    return out


class CpuMeter:
    """CPU seconds of a changing set of processes between ``start`` and ``stop``."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}

    def _read(self) -> dict[int, float]:
        out = {}
        for pid in self.pids():
            u = read_usage(pid)
            if u is not None:
                out[pid] = u.cpu_s
        return out

    def start(self) -> None:
        self.first = self._read()

    def stop(self) -> float:
        self.last = self._read()
        return sum(v - self.first.get(pid, 0.0) for pid, v in self.last.items())


def stop_all(procs: list[ManagedProcess]) -> None:
    """SIGTERM every process at once, then wait for each."""
    for p in procs:
        if not p.exited():
            p.popen.terminate()
    for p in procs:
        p.stop(timeout=10)


def worker_job(name: str, queue: str, schedule: dict[str, Any], *, hb_timeout: int = 300,
               end_ms: int | None = None, retry: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name, "namespace": NAMESPACE, "schedule": schedule,
        "target": {"kind": "worker", "queue": queue, "payload": {"job": name},
                   "heartbeat_timeout": hb_timeout, "timeout": 3600},
        "delivery": "at_least_once",
    }
    if end_ms is not None:
        spec["end_at"] = format_rfc3339(from_ms(end_ms))
    if retry is not None:
        spec["retry"] = retry
    return spec


def interval(every_s: int, anchor_ms: int) -> dict[str, Any]:
    return {"kind": "interval", "every": every_s, "anchor": format_rfc3339(from_ms(anchor_ms))}


class WorkBench:
    """The set-up the phases share, and the claimer processes they start."""

    def __init__(self, opts: BenchOptions, wp: WorkQueueParams, tag: str) -> None:
        self.opts = opts
        self.wp = wp
        self.tag = tag
        self.system = CronmanSystem(opts, tag)
        self.api: ApiServer | None = None
        self.client: CronmanClient | None = None
        self.procs: list[ManagedProcess] = []
        self._seq = 0

    def start(self) -> CronmanClient:
        from cronman.store.migrate import upgrade

        s = self.system
        s.db.create()
        upgrade(s.db.url)
        s.redis.start()
        self.api = ApiServer(s.db.url, self.opts.workdir, self.tag, workers=self.wp.api_workers,
                             env={"CRONMAN_REDIS_URL": s.redis.url}).start()
        s.start()
        # The phases' jobs are due a few seconds after they are made: the nodes
        # must be up by then (on a busy machine a node takes tens of seconds).
        deadline = time.monotonic() + NODES_READY_WAIT
        while any(t is None for t in s.ready_ms().values()):
            if time.monotonic() > deadline:
                raise BenchError(f"the nodes were not ready within {NODES_READY_WAIT} s")
            time.sleep(0.2)
        self.client = CronmanClient(self.api.url, retry=NO_RETRY, timeout=120)
        return self.client

    def api_pids(self) -> list[int]:
        if self.api is None or self.api.proc is None:
            return []
        return [self.api.proc.pid, *children_of(self.api.proc.pid)]

    def create(self, specs: list[dict[str, Any]]) -> list[str]:
        assert self.client is not None
        ids: list[str] = []
        for lo in range(0, len(specs), BULK_MAX):
            ids.extend(str(j["id"]) for j in self.client.create_jobs(specs[lo:lo + BULK_MAX]))
        return ids

    def claimer(self, queue: str, *args: str) -> tuple[ManagedProcess, Path]:
        assert self.api is not None
        self._seq += 1
        name = f"{queue}-{self._seq}"
        out = self.opts.workdir / f"{self.tag}-{name}.jsonl"
        proc = ManagedProcess(name, [
            sys.executable, "-m", "cronman_bench.work_claimer", "--api", self.api.url,
            "--queue", queue, "--namespace", NAMESPACE, "--name", name, "--out", str(out),
            *args], log_path=self.opts.workdir / f"{self.tag}-{name}.log",
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])}, inherit_env=True)
        self.procs.append(proc)
        return proc, out

    def depth(self, queue: str) -> tuple[int, int]:
        assert self.client is not None
        for q in self.client.queues(namespace=NAMESPACE):
            if q["queue"] == queue:
                return int(q["depth"]), int(q["held"])
        return 0, 0

    def teardown(self) -> None:
        for p in self.procs:
            p.stop(timeout=5)
        if self.client is not None:
            self.client.close()
        if self.api is not None:
            self.api.stop()
        self.system.teardown()


def fire_to_claim(b: WorkBench) -> dict[str, Any]:
    wp, echo = b.wp, b.opts.echo
    spin = ("--spin",) if wp.spin else ()
    claimers = [b.claimer("steady", "--threads", "1", "--wait", str(wp.claim_wait),
                          "--max", str(wp.claim_max), *spin) for _ in range(wp.claimers)]
    now = _now_ms()
    start_ms = (now // 1000) * 1000 + int((wp.warmup + wp.lead) * 1000)
    end_ms = start_ms + wp.duration * 1000
    base = (now // 1000) * 1000 - 1000
    specs = [worker_job(f"steady-{i:05d}", "steady", interval(1, base + i * 1000 // wp.rate),
                        end_ms=end_ms - 1) for i in range(wp.rate)]
    b.create(specs)
    if _now_ms() > start_ms - int(wp.warmup * 1000):
        echo("  [work-queue] job creation ate into the warm-up")
    echo(f"  [work-queue] fire→claim: {wp.rate} runs/s, {wp.claimers} waiting claimers, "
         f"window {wp.duration} s")
    while _now_ms() < start_ms:
        time.sleep(0.2)
    api_cpu, pg_cpu = CpuMeter(b.api_pids), CpuMeter(b.system.backends.pids)
    api_cpu.start()
    pg_cpu.start()
    load = _load()
    while _now_ms() < end_ms:
        time.sleep(0.2)
    api_s, pg_s = api_cpu.stop(), pg_cpu.stop()
    owed = wp.rate * wp.duration
    drain_until = time.monotonic() + wp.drain
    while time.monotonic() < drain_until:
        got = {e["run"] for _, out in claimers for e in _events(out)
               if e["ev"] == "claim" and start_ms <= e["sched"] < end_ms}
        if len(got) >= owed:
            break
        time.sleep(0.5)
    stop_all([p for p, _ in claimers])
    events = [e for _, out in claimers for e in _events(out)]
    claims = [e for e in events if e["ev"] == "claim" and start_ms <= e["sched"] < end_ms]
    first: dict[str, dict[str, Any]] = {}
    for e in sorted(claims, key=lambda e: e["t"]):
        first.setdefault(e["run"], e)
    in_window = [e for e in events if e["ev"] == "claim" and start_ms <= e["t"] < end_ms]
    empty = [e for e in events if e["ev"] == "empty" and start_ms <= e["t"] < end_ms]
    return {
        "rate_offered": wp.rate, "owed": owed, "claimed": len(first),
        "missed": owed - len(first),
        "claim_rate": round(len(in_window) / wp.duration, 1),
        "latency_ms": _pct(e["t"] - e["sched"] for e in first.values()),
        # the split: the node's hand-off to the queue (the run's started_at), then the claim
        "fire_to_handoff_ms": _pct(e["handoff"] - e["sched"] for e in first.values()
                                   if e.get("handoff") is not None),
        "handoff_to_claim_ms": _pct(e["t"] - e["handoff"] for e in first.values()
                                    if e.get("handoff") is not None),
        "claim_call_ms": _pct(e["ms"] for e in in_window),
        "runs_per_claim_call": _per_call(in_window),
        "empty_claims_per_s": round(len(empty) / wp.duration, 1),
        "errors": sum(1 for e in events if e["ev"] == "error"),
        "api_cpu_cores": round(api_s / wp.duration, 2),
        "pg_cpu_cores": round(pg_s / wp.duration, 2),
        "load_avg": load,
    }


def claims_and_heartbeats(b: WorkBench) -> tuple[dict[str, Any], dict[str, Any]]:
    wp, echo = b.wp, b.opts.echo
    now = _now_ms()
    lead_ms = int(1000 * (wp.hold_lead if wp.hold_lead is not None else 10 + wp.held / 250))
    due = ((now + lead_ms) // 1000) * 1000
    specs = [worker_job(f"hold-{i:06d}", "hold", interval(86_400, due - 86_400_000))
             for i in range(wp.held)]
    b.create(specs)
    if _now_ms() >= due:
        raise BenchError("creating the held runs' jobs outlasted their lead")
    echo(f"  [work-queue] {wp.held:,} jobs due at one instant; waiting for the queue to fill")
    deadline = time.monotonic() + (due - _now_ms()) / 1000 + 120 + wp.held / 100
    while (depth := b.depth("hold")[0]) < wp.held:
        if time.monotonic() > deadline:
            raise BenchError(f"the hold queue reached {depth} of {wp.held} runs")
        time.sleep(0.5)
    filled_s = (_now_ms() - due) / 1000
    procs = max(1, wp.holders // 4)
    threads = max(1, wp.holders // procs)
    per_proc = [wp.held // procs + (1 if n < wp.held % procs else 0) for n in range(procs)]
    load_claims = _load()
    holders = [b.claimer("hold", "--mode", "hold", "--threads", str(threads), "--wait", "0",
                         "--hold", str(n), "--period", str(wp.hb_period),
                         "--max", str(wp.claim_max)) for n in per_proc]
    deadline = time.monotonic() + 60 + wp.held / 50
    while True:
        done = sum(1 for _, out in holders
                   for e in _events(out) if e["ev"] == "all_held")
        if done >= len(holders):
            break
        if time.monotonic() > deadline or any(p.exited() for p, _ in holders):
            got = [e["t"] for _, out in holders for e in _events(out) if e["ev"] == "held"]
            rate = len(got) / max((max(got) - min(got)) / 1000, 1e-3) if got else 0.0
            stop_all([p for p, _ in holders])
            raise BenchError(f"the holders claimed {len(got)} of {wp.held} runs in time "
                             f"({rate:.1f}/s)")
        time.sleep(0.5)
    held = [e for _, out in holders for e in _events(out) if e["ev"] == "held"]
    t0, t1 = min(e["t"] for e in held), max(e["t"] for e in held)
    claims = {
        "runs": len(held), "claimers": procs * threads,
        "queue_filled_s_after_due": round(filled_s, 1),
        "claims_per_s": round(len(held) / max((t1 - t0) / 1000, 1e-3), 1),
        "claim_call_ms": _pct(e["ms"] for e in held), "runs_per_claim_call": _per_call(held),
        "load_avg": load_claims,
    }
    echo(f"  [work-queue] {len(held):,} runs claimed at {claims['claims_per_s']}/s; "
         f"heartbeating every {wp.hb_period:g} s")
    time.sleep(wp.hb_period)  # the first round starts at each holder's own pace
    start = _now_ms()
    api_cpu, pg_cpu = CpuMeter(b.api_pids), CpuMeter(b.system.backends.pids)
    api_cpu.start()
    pg_cpu.start()
    load = _load()
    time.sleep(wp.hb_seconds)
    api_s, pg_s = api_cpu.stop(), pg_cpu.stop()
    end = _now_ms()
    stop_all([p for p, _ in holders])
    beats = [e for _, out in holders for e in _events(out)
             if e["ev"] == "hb" and start <= e["t"] < end]
    ok = [e for e in beats if e["ok"]]
    secs = (end - start) / 1000
    heartbeats = {
        "held": len(held), "period_s": wp.hb_period,
        "offered_per_s": round(len(held) / wp.hb_period, 1),
        "reached_per_s": round(len(ok) / secs, 1),
        "failed": len(beats) - len(ok),
        "call_ms": _pct(e["ms"] for e in ok),
        "lag_ms": _pct(e["lag"] for e in ok),
        "api_cpu_cores": round(api_s / secs, 2), "pg_cpu_cores": round(pg_s / secs, 2),
        "api_processes": len(api_cpu.last), "load_avg": load,
    }
    return claims, heartbeats


def kill_to_requeue(b: WorkBench) -> dict[str, Any]:
    wp, echo = b.wp, b.opts.echo
    assert b.client is not None
    client = b.client
    period = max(1.0, wp.kill_hb_timeout / 3)
    ids = b.create([worker_job(f"kill-{k}", "kill", interval(86_400, _now_ms() - 3_600_000),
                               hb_timeout=wp.kill_hb_timeout,
                               retry={"max_attempts": 3, "min_backoff": 1, "max_backoff": 1})
                    for k in range(wp.kills)])
    samples: list[dict[str, Any]] = []
    load = _load()
    for k, job_id in enumerate(ids):
        proc, out = b.claimer("kill", "--mode", "hold", "--hold", "1", "--wait", "5",
                              "--period", str(period))
        client.trigger_job(job_id)
        deadline = time.monotonic() + 30
        while not any(e["ev"] == "hb" and e.get("ok") for e in _events(out)):
            if time.monotonic() > deadline or proc.exited():
                raise BenchError(f"kill {k}: the worker never held its run")
            time.sleep(0.05)
        # kill at a different point of the heartbeat period each time
        time.sleep(period * (k + 0.5) / max(1, wp.kills))
        proc.kill()
        killed = _now_ms()
        events = _events(out)
        run_id = next(e["run"] for e in events if e["ev"] == "held")
        expires = max(e["expires"] for e in events if e["ev"] == "hb" and e.get("ok"))
        requeued: int | None = None
        state = ""
        deadline = time.monotonic() + wp.kill_hb_timeout + 30
        while time.monotonic() < deadline:
            run: dict[str, Any] = dict(client.get_run(run_id))
            state = str((run.get("worker") or {}).get("state"))
            if run["attempt"] > 1 or run["status"] != "running" or state != "held":
                requeued = _now_ms()
                state = f"{run['status']}/attempt {run['attempt']}/{state}"
                break
            time.sleep(0.05)
        samples.append({"run": run_id, "killed_ms": killed, "lease_expires_ms": expires,
                        "requeued_ms": requeued, "state": state,
                        "kill_to_requeue_s": None if requeued is None
                        else round((requeued - killed) / 1000, 2),
                        "expiry_to_requeue_s": None if requeued is None
                        else round((requeued - expires) / 1000, 2)})
        echo(f"  [work-queue] kill {k + 1}/{wp.kills}: {samples[-1]['kill_to_requeue_s']} s "
             f"({state})")
        try:
            client.cancel_run(run_id, "bench: measured")
        except CronmanError:
            pass
    return {
        "kills": len(samples), "heartbeat_timeout_s": wp.kill_hb_timeout,
        "heartbeat_every_s": round(period, 2),
        "not_requeued": sum(1 for s in samples if s["requeued_ms"] is None),
        "kill_to_requeue_s": _pct(s["kill_to_requeue_s"] for s in samples
                                  if s["kill_to_requeue_s"] is not None),
        "expiry_to_requeue_s": _pct(s["expiry_to_requeue_s"] for s in samples
                                    if s["expiry_to_requeue_s"] is not None),
        "samples": samples, "load_avg": load,
    }


def work_queue(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """``--scenario work-queue``: ``--rate`` (200), ``--duration`` (30), ``--jobs``
    (held runs, 10,000), ``--claimers`` (4), ``--kills`` (5), ``--claim-spin``,
    ``--claim-max`` (10)."""
    wp = WorkQueueParams(
        rate=int(params.rate or 200), duration=int(params.duration or 30),
        warmup=opts.warmup, held=params.jobs or 10_000,
        claimers=params.claimers or WorkQueueParams.claimers,
        hb_seconds=max(float(params.duration or 30), 2 * WorkQueueParams.hb_period),
        kills=params.kills or WorkQueueParams.kills, spin=params.claim_spin,
        claim_max=params.claim_max or WorkQueueParams.claim_max)
    return run_work_queue(opts, wp)


def run_work_queue(opts: BenchOptions, wp: WorkQueueParams) -> dict[str, Any]:
    """Run the four phases on one set-up; the scenario's JSON-able result."""
    b = WorkBench(opts, wp, "wq")
    figures: dict[str, Any] = {}
    try:
        b.start()
        opts.echo(f"  [work-queue] api {b.api.url if b.api else ''}, {opts.nodes} node(s)")
        # A phase that cannot finish leaves its error, and the others still run.
        try:
            figures["fire_to_claim"] = fire_to_claim(b)
        except BenchError as exc:
            figures["fire_to_claim_error"] = str(exc)
        try:
            figures["claims"], figures["heartbeats"] = claims_and_heartbeats(b)
        except BenchError as exc:
            figures["claims_error"] = str(exc)
        try:
            figures["kill"] = kill_to_requeue(b)
        except BenchError as exc:
            figures["kill_error"] = str(exc)
    finally:
        b.teardown()
    return {"scenario": "work-queue", "params": asdict(wp), "figures": figures,
            "table": work_table(figures)}


def work_table(f: dict[str, Any]) -> str:
    lines = []
    if (fc := f.get("fire_to_claim")) is not None:
        lat = fc["latency_ms"]
        fh, hc = fc["fire_to_handoff_ms"], fc["handoff_to_claim_ms"]
        lines.append(f"fire→claim at {fc['rate_offered']}/s: p50 {lat['p50']} ms, p99 "
                     f"{lat['p99']} ms, max {lat['max']} ms (fire→hand-off p50 {fh['p50']} "
                     f"p99 {fh['p99']}, hand-off→claim p50 {hc['p50']} p99 {hc['p99']}); "
                     f"claims {fc['claim_rate']}/s, "
                     f"missed {fc['missed']} of {fc['owed']}, empty claims "
                     f"{fc['empty_claims_per_s']}/s, {fc['runs_per_claim_call']} runs a "
                     f"call; API {fc['api_cpu_cores']} cores, "
                     f"PostgreSQL {fc['pg_cpu_cores']} (load {fc['load_avg']})")
    if (c := f.get("claims")) is not None:
        lines.append(f"claims: {c['runs']:,} runs by {c['claimers']} claimers at "
                     f"{c['claims_per_s']}/s, call p50 {c['claim_call_ms']['p50']} ms p99 "
                     f"{c['claim_call_ms']['p99']} ms, {c['runs_per_claim_call']} runs a call "
                     f"(load {c['load_avg']})")
    if (h := f.get("heartbeats")) is not None:
        lines.append(f"heartbeats: {h['held']:,} held every {h['period_s']:g} s, "
                     f"{h['reached_per_s']}/s of {h['offered_per_s']}/s, call p50 "
                     f"{h['call_ms']['p50']} ms p99 {h['call_ms']['p99']} ms, lag p99 "
                     f"{h['lag_ms']['p99']} ms, failed {h['failed']}; API "
                     f"{h['api_cpu_cores']} cores, PostgreSQL {h['pg_cpu_cores']} "
                     f"(load {h['load_avg']})")
    if (k := f.get("kill")) is not None:
        kr, er = k["kill_to_requeue_s"], k["expiry_to_requeue_s"]
        lines.append(f"SIGKILL→re-queue ({k['kills']} kills, heartbeat_timeout "
                     f"{k['heartbeat_timeout_s']} s): p50 {kr['p50']} s, max {kr['max']} s; "
                     f"after the lease's expiry p50 {er['p50']} s, max {er['max']} s; "
                     f"not re-queued {k['not_requeued']} (load {k['load_avg']})")
    return "\n".join(lines)
