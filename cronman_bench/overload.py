"""The ``overload`` scenario: the knee, 2x and 3x the knee, back to the knee.

The offered rate changes without touching the running system: every job is
created before the processes start, and the extra load comes from jobs whose
windows open and close at the phase boundaries (cronman: ``start_at`` /
``end_at``; APScheduler: the trigger's start and end date). With the knee K:

- base: K jobs every second, the whole run;
- extra A: K jobs every second, from the 2x phase to the drop back;
- extra B: K jobs every second, for the 3x phase.

Each of the three is 95 % priority 0 and 5 % priority 10 (``HIGH_SHARE``).
The phases (fire times): knee [t0, t1), 2x [t1, t2), 3x [t2, t3), back
[t3, t3 + recover). Per phase: offered and delivered fires/s (first arrivals
while the phase ran), lateness of the fires due in it, overall and per
priority, missed and doubled fires, the nodes' takeovers by reason (their
metrics, read at the boundaries), CPU per fire by process kind. Recovery:
seconds from t3 until lateness is back at the knee's normal p99 (see
``RECOVERED_FACTOR``).

The knee is ``--rate``, or found per system by a quick max-rate-style probe
(short trials up the rate ladder; the last rate that passed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cronman_bench.harness import PhaseOutcome, ceil_second, run_phase, steady_window
from cronman_bench.max_rate import search_highest, trial_verdict
from cronman_bench.procs import BenchError
from cronman_bench.report import dig
from cronman_bench.scenarios import (
    ScenarioParams,
    _param,
    _phase_or_error,
    _systems,
    past_anchors,
)
from cronman_bench.slices import recovered_after, slice_figures
from cronman_bench.systems import BenchOptions, System
from cronman_bench.workload import Jobs, Mix, Workload

HIGH_SHARE = 0.05
HIGH_PRIORITY = 10
PHASES = ("knee", "2x", "3x", "back")
# Recovered: from that second on, p99 within max(1.5 x the knee's p99, knee's p99 + 20 ms).
RECOVERED_FACTOR = 1.5
RECOVERED_SLACK_MS = 20
PROBE_WARMUP_S = 3.0


def _split(name: str, count: int, **kw: Any) -> list[Workload]:
    """``count`` jobs as a low and a high priority group (at least one high job)."""
    high = max(1, round(count * HIGH_SHARE))
    out = [Workload(count - high, 1000, name=f"{name}-low", **kw)] if count > high else []
    return [*out, Workload(high, 1000, name=f"{name}-high", priority=HIGH_PRIORITY, **kw)]


def overload_jobs(knee: int, now: int, lead_s: float, phase_s: float, recover_s: float,
                  grace_s: int | None) -> tuple[Mix, list[int]]:
    """The workload and the phase boundaries [t0, t1, t2, t3, end] (Unix ms)."""
    t0 = ceil_second(now + int(lead_s * 1000))
    t1, t2 = t0 + int(phase_s * 1000), t0 + int(2 * phase_s * 1000)
    t3 = t0 + int(3 * phase_s * 1000)
    end = t3 + int(recover_s * 1000)
    base = (now // 1000) * 1000 - 1000
    groups = [*_split("base", knee, base_ms=base, grace_s=grace_s),
              *_split("extra-a", knee, base_ms=base, start_ms=t1, end_ms=t3, grace_s=grace_s),
              *_split("extra-b", knee, base_ms=base, start_ms=t2, end_ms=t3, grace_s=grace_s)]
    return Mix(tuple(groups)), [t0, t1, t2, t3, end]


def find_knee(opts: BenchOptions, build: Callable[[], System], name: str,
              params: ScenarioParams) -> dict[str, Any]:
    """The highest rate passing a short steady trial (p99 within the limit, 0 missed,
    0 duplicated), climbing the max-rate ladder."""
    trials: list[dict[str, Any]] = []
    probe_opts = replace(opts, warmup=PROBE_WARMUP_S)

    def trial(rate: int) -> str:
        o = _phase_or_error(name, build, opts, lambda s: run_phase(
            s, past_anchors(rate, 1), steady_window(PROBE_WARMUP_S, params.probe_duration),
            probe_opts, label=f"knee-{name}-{rate}"))
        res = o.result if isinstance(o, PhaseOutcome) else o
        verdict = trial_verdict(res, opts.p99_limit_ms)
        trials.append({"rate_per_s": rate, "verdict": verdict,
                       "p99_ms": dig(res, "delivery.lateness.p99_ms"),
                       "missed": dig(res, "delivery.missed")})
        opts.echo(f"  [{name}] knee probe at {rate:,}/s: {verdict.upper()} "
                  f"(p99 {trials[-1]['p99_ms']} ms)")
        return verdict

    found = search_highest(trial, params.start_rate, params.max_rate, params.rate_step)
    return {"knee_per_s": found.highest, "trials": trials, "capped_by_range": found.capped}




def overload(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    phase_s = float(params.phase_seconds)
    recover_s = float(params.recover_seconds)
    peers = _param("overload", params, "peers")
    knee_text = f"{params.rate:,.0f}/s" if params.rate else "probed per system"
    opts.echo(f"overload: the knee, 2x, 3x ({phase_s:.0f} s each), then the knee again for "
              f"{recover_s:.0f} s; knee {knee_text}; {HIGH_SHARE:.0%} of the jobs at "
              f"priority {HIGH_PRIORITY}")
    phases: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    for name, build in _systems(opts, peers, "overload"):
        probe = None
        knee = int(params.rate) if params.rate else None
        if knee is None:
            probe = find_knee(opts, build, name, params)
            knee = probe["knee_per_s"]
            if knee is None:
                phases.append({"system": name, "error": "no rate passed the knee probe",
                               "knee_probe": probe})
                continue
        lead = params.lead if params.lead is not None else 20 + 3 * knee / 1000
        if name == "apscheduler4-postgres" and params.lead is None:
            lead = 20 + 3 * knee / 150  # it adds its schedules one by one
        bounds: list[int] = []

        def make(now: int, knee: int = knee, lead: float = lead,
                 bounds: list[int] = bounds) -> Mix:
            w, b = overload_jobs(knee, now, lead, phase_s, recover_s, params.grace)
            bounds[:] = b
            return w

        opts.echo(f"  [{name}] knee {knee:,}/s: offered {knee:,} / {2 * knee:,} / "
                  f"{3 * knee:,} / {knee:,} fires/s; phases start {lead:.0f} s after the jobs")
        def run(s: System, n: str = name, bounds: list[int] = bounds) -> PhaseOutcome:
            # The boundaries are fixed when the workload is made, before the window.
            def window(_w: Jobs, _st: int, _first: int | None, _now: int
                       ) -> tuple[int, int]:
                return bounds[0], bounds[4]

            return run_phase(s, make, window, opts, label=f"overload-{n}",
                             marks_of=lambda _w, _ws, _we: bounds[1:4],
                             drain_max=max(opts.drain_max, 120),
                             drain_idle=max(opts.drain_idle, 10))

        o = _phase_or_error(name, build, opts, run)
        if not isinstance(o, PhaseOutcome):
            phases.append(o)
            continue
        res = o.result
        res["overload"] = overload_figures(o, bounds, knee)
        res["overload"]["knee_probe"] = probe
        if probe and probe["capped_by_range"]:
            res["notes"].append("the knee probe passed every rate up to --max-rate: the knee "
                                "is at least that; raise --max-rate")
        if o.ready_ms > bounds[0] - 2000:
            res["notes"].append("the knee phase began less than 2 s after start-up: raise "
                                "--lead")
        for k in ("plateau_2x", "plateau_3x", "recovery_s", "takeovers_total",
                  "doubled_total"):
            figures[f"{name}.{k}"] = res["overload"][k]
        phases.append(res)
    return {"scenario": "overload",
            "params": {"rate_per_s": params.rate, "phase_s": phase_s, "recover_s": recover_s,
                       "high_share": HIGH_SHARE, "high_priority": HIGH_PRIORITY,
                       "grace_s": params.grace, "nodes": opts.nodes, "peers": list(peers)},
            "phases": phases, "figures": figures, "table": overload_table(phases)}


def overload_figures(o: PhaseOutcome, bounds: list[int], knee: int) -> dict[str, Any]:
    assert o.meters is not None
    m = o.meters
    marks = [m.window_start, *m.marks[:3], m.window_end]
    per: dict[str, Any] = {}
    for n, name in enumerate(PHASES):
        a = marks[n] if n < len(marks) else None
        b = marks[n + 1] if n + 1 < len(marks) else None
        per[name] = slice_figures(o, bounds[n], bounds[n + 1], a, b)
    knee_p99 = dig(per, "knee.lateness.p99_ms")
    limit = None if knee_p99 is None else max(int(knee_p99 * RECOVERED_FACTOR),
                                              knee_p99 + RECOVERED_SLACK_MS)
    recovery = None if limit is None else recovered_after(o.tally, bounds[3], bounds[4], limit)
    base = per["knee"]["delivered_per_s"] or 0
    return {
        "knee_per_s": knee, "phases": per,
        "plateau_2x": round(per["2x"]["delivered_per_s"] / base, 3) if base else None,
        "plateau_3x": round(per["3x"]["delivered_per_s"] / base, 3) if base else None,
        "recovered_limit_ms": limit, "recovery_s": recovery,
        "takeovers_total": sum(sum(p.get("takeovers_by_reason", {}).values())
                               for p in per.values()),
        "doubled_total": sum(p["doubled_pairs"] for p in per.values()),
    }


def overload_table(phases: list[dict[str, Any]]) -> str:
    head = ("system", "phase", "offered/s", "delivered/s", "p50 ms", "p99 ms", "p99 high",
            "p99 low", "missed", "doubled", "takeovers", "CPU ms/fire", "GC s")
    rows: list[tuple[str, ...]] = [head]
    summary: list[str] = []
    for p in phases:
        if "error" in p:
            summary.append(f"{p['system']}: error: {p['error']}")
            continue
        ov = p["overload"]
        for name in PHASES:
            f = ov["phases"][name]
            lat = f["lateness"]
            byp = f["lateness_by_priority"]
            take = f.get("takeovers_by_reason")
            rows.append((
                p["system"], name, _n(f["offered_per_s"]), _n(f["delivered_per_s"]),
                _n(lat["p50_ms"]), _n(lat["p99_ms"]),
                _n(dig(byp, f"{HIGH_PRIORITY}.p99_ms")), _n(dig(byp, "0.p99_ms")),
                _n(f["missed"]), _n(f["doubled_pairs"]),
                "-" if take is None else (", ".join(f"{k} {v}" for k, v in take.items())
                                          or "0"),
                _n(dig(f, "cpu_ms_per_fire_by_kind.total")), _n(f.get("gc_pause_s"))))
        summary.append(
            f"{p['system']}: knee {ov['knee_per_s']:,}/s; delivered at 2x {_n(ov['plateau_2x'])} "
            f"and at 3x {_n(ov['plateau_3x'])} of the knee's; recovered "
            f"{_n(ov['recovery_s'])} s after the drop (p99 <= {_n(ov['recovered_limit_ms'])} ms"
            f" from then on); takeovers {ov['takeovers_total']}, doubled {ov['doubled_total']}")
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(len(head))).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *summary])


def _n(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def check(params: ScenarioParams) -> None:
    if params.phase_seconds <= 0 or params.recover_seconds <= 0:
        raise BenchError("overload phases need a positive length")
