"""The kill scenario: steady load on a cluster, one node SIGKILLed mid-window;
the extra lateness, and what was lost or sent twice around the kill."""

from __future__ import annotations

from typing import Any

from cronman_bench.harness import PhaseOutcome, run_phase, steady_window
from cronman_bench.procs import BenchError
from cronman_bench.report import dig, format_table, lateness_summary
from cronman_bench.scenarios import ScenarioParams, _param, past_anchors
from cronman_bench.systems import BenchOptions, CronmanSystem

KILL_MARGIN_S = 5.0  # fires due this long before the kill may be in flight on the victim


def kill(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Steady load; one node is SIGKILLed mid-window: extra lateness, lost, doubled.

    Fires are split by fire time: *steady* (due before kill - 5 s), *around
    the kill* (kill - 5 s to kill + heartbeat TTL + 5 s: in flight on the
    victim, or owned by it until the others saw it gone) and *after*. The
    drain lasts until lease + TTL + 10 s after the kill, so runs the victim
    had started come back through the sweeper and are counted.
    """
    jobs, every = int(_param("kill", params, "jobs")), int(_param("kill", params, "every"))
    duration = float(_param("kill", params, "duration"))
    kill_at = params.kill_at if params.kill_at is not None else duration / 2
    if opts.nodes < 2:
        raise BenchError("the kill scenario needs at least 2 nodes")
    if not 0 < kill_at < duration:
        raise BenchError(f"--kill-at ({kill_at:g} s) must lie inside the window "
                         f"(0 .. {duration:g} s)")
    settle = opts.lease_seconds + opts.heartbeat_ttl + 10
    opts.echo(f"kill: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
              f"{duration:.0f} s measured, one of {opts.nodes} nodes SIGKILLed "
              f"{kill_at:.0f} s into it; drain until {settle:.0f} s after the kill "
              f"(lease {opts.lease_seconds:g} s + heartbeat TTL {opts.heartbeat_ttl:g} s + 10 s)")
    system = CronmanSystem(opts, "kill-cronman")
    o = run_phase(system, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
                  label="kill-cronman", kill_after_s=kill_at, settle_after_kill_s=settle,
                  drain_max=max(opts.drain_max, settle + 30))
    res = o.result
    figures: dict[str, Any] = {}
    if o.killed is None:
        res["notes"].append("no node was killed (the window ended first)")
    else:
        res["kill"] = kill_figures(o, opts.heartbeat_ttl, system)
        k = res["kill"]
        seg = k["segments"]
        steady_p99 = dig(seg, "steady.lateness.p99_ms")
        around_p99 = dig(seg, "around_kill.lateness.p99_ms")
        figures = {
            "lost": res["delivery"]["missed"],
            "doubled": res["delivery"]["doubled_pairs"],
            "redelivered": res["delivery"]["redelivered_pairs"],
            "redeliveries": res["delivery"]["redeliveries"],
            "first_sent_by_sweeper": res["delivery"]["first_by_later_attempt"],
            "p99_steady_ms": steady_p99,
            "p99_around_kill_ms": around_p99,
            "extra_p99_ms": (around_p99 - steady_p99)
            if steady_p99 is not None and around_p99 is not None else None,
            "max_around_kill_ms": dig(seg, "around_kill.lateness.max_ms"),
            "p99_after_ms": dig(seg, "after.lateness.p99_ms"),
            "survivors_saw_it_gone_after_s": k["survivors_saw_it_gone_after_s"],
        }
        res["kill"]["figures"] = figures
    table = format_table([res], extra_rows=(
        ("lost (missed)", "kill.figures.lost", "{:,}"),
        ("doubled", "kill.figures.doubled", "{:,}"),
        ("redelivered pairs", "kill.figures.redelivered", "{:,}"),
        ("first sent by the sweeper", "kill.figures.first_sent_by_sweeper", "{:,}"),
        ("p99 steady (before kill - 5 s), ms", "kill.segments.steady.lateness.p99_ms", "{:,}"),
        ("p99 around kill, ms", "kill.segments.around_kill.lateness.p99_ms", "{:,}"),
        ("extra p99 around kill, ms", "kill.figures.extra_p99_ms", "{:,}"),
        ("max around kill, ms", "kill.segments.around_kill.lateness.max_ms", "{:,}"),
        ("p99 after (TTL + 5 s on), ms", "kill.segments.after.lateness.p99_ms", "{:,}"),
        ("survivors saw it gone after, s", "kill.survivors_saw_it_gone_text", "{}"),
    ))
    return {"scenario": "kill",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                       "kill_at_s": kill_at, "nodes": opts.nodes, "replicas": opts.replicas,
                       "heartbeat_ttl_s": opts.heartbeat_ttl,
                       "lease_s": opts.lease_seconds, "settle_after_kill_s": settle},
            "phases": [res], "figures": figures, "table": table}


def kill_figures(o: PhaseOutcome, heartbeat_ttl: float, system: CronmanSystem
                 ) -> dict[str, Any]:
    """Per segment of fire times: owed, missed, lateness, doubled, redelivered."""
    assert o.killed is not None
    t, k, victim = o.tally, o.killed["at_ms"], o.killed["node"]
    lo = max(t.start_ms, k - int(KILL_MARGIN_S * 1000))
    hi = min(t.end_ms, k + int((heartbeat_ttl + 5) * 1000))
    segments = {"steady": (t.start_ms, lo), "around_kill": (lo, hi), "after": (hi, t.end_ms)}
    out: dict[str, Any] = {}
    for name, (a, b) in segments.items():
        late = t.lateness(a, b)
        owed = t.w.expected_count(a, b) if b > a else 0
        out[name] = {"from_s": round((a - t.start_ms) / 1000, 1),
                     "to_s": round((b - t.start_ms) / 1000, 1),
                     "expected": owed, "missed": owed - len(late),
                     "lateness": lateness_summary(late), **t.kinds(a, b)}
    gone: dict[str, float | None] = {}
    for name, log in system.logs.items():
        if name != victim:
            seen = log.left_after(victim, k)
            gone[name] = None if seen is None else round((seen - k) / 1000, 1)
    return {"node": victim, "at_s": round((k - t.start_ms) / 1000, 1), "segments": out,
            "survivors_saw_it_gone_after_s": gone,
            "survivors_saw_it_gone_text": " / ".join(
                "-" if v is None else f"{v:.1f}" for v in gone.values())}
