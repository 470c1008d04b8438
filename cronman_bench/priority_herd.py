"""The ``priority-herd`` scenario: priorities and namespaces under saturation.

Namespace ``herd``: L low-priority (0) and H high-priority (10) jobs, all due
at the same instant T (default 20,000 and 1,000). Namespace ``steady``: S
jobs every second (default 100), running before, through and after the herd.
The window holds the fires due in [T - 10 s, T + duration).

Per priority of the herd: p50/p99/max lateness and the last arrival; the
order: how many low fires arrived before the last high one (and before the
high p99). Fairness: the steady namespace's lateness for fires due before T
(its normal) and while the herd was being delivered (from T until the herd's
last arrival).
"""

from __future__ import annotations

from typing import Any

from cronman_bench.harness import PhaseOutcome, ceil_second, fixed_window, run_phase
from cronman_bench.herd import HERD_EVERY_S
from cronman_bench.report import dig, lateness_summary
from cronman_bench.scenarios import (
    ScenarioParams,
    _param,
    _phase_or_error,
    _systems,
)
from cronman_bench.systems import BenchOptions, System
from cronman_bench.workload import Mix, Workload

HIGH_PRIORITY = 10
BEFORE_S = 10  # the window opens this long before the herd: the steady namespace's normal


def herd_jobs(low: int, high: int, steady: int, now: int, lead_s: float) -> Mix:
    due = ceil_second(now + int(lead_s * 1000))
    groups = [Workload(low, HERD_EVERY_S * 1000, due, spread=False, namespace="herd",
                       name="low"),
              Workload(high, HERD_EVERY_S * 1000, due, spread=False, namespace="herd",
                       name="high", priority=HIGH_PRIORITY)]
    if steady:
        groups.append(Workload(steady, 1000, (now // 1000) * 1000 - 1000, namespace="steady",
                               name="steady"))
    return Mix(tuple(groups))


def priority_herd(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    low = int(_param("priority-herd", params, "jobs"))
    high = int(params.high_jobs)
    steady = int(params.steady_jobs)
    duration = float(_param("priority-herd", params, "duration"))
    peers = _param("priority-herd", params, "peers")
    opts.echo(f"priority-herd: {low:,} low and {high:,} high-priority jobs due in one second "
              f"(namespace herd), {steady:,} jobs every second in namespace steady; "
              f"{opts.nodes} node(s)")

    def lead_of(name: str) -> float:
        if params.lead is not None:
            return params.lead
        per_s = {"apscheduler-sqlalchemy": 400, "apscheduler4-postgres": 150}.get(name, 1000)
        return 20 + (low + high + steady) / per_s

    phases, figures = [], {}
    for name, build in _systems(opts, peers, "pherd"):
        lead = lead_of(name)
        def run(s: System, n: str = name, lead: float = lead) -> PhaseOutcome:
            return run_phase(
                s, lambda now: herd_jobs(low, high, steady, now, lead),
                fixed_window(lambda w, _st: _due(w) - BEFORE_S * 1000,
                             int((BEFORE_S + duration) * 1000)),
                opts, label=f"pherd-{n}", drain_max=max(opts.drain_max, 300),
                drain_idle=max(opts.drain_idle, 30))

        o = _phase_or_error(name, build, opts, run)
        if not isinstance(o, PhaseOutcome):
            phases.append(o)
            continue
        res = o.result
        res["priority_herd"] = herd_figures(o)
        if _due(o.workload) < o.ready_ms + 2000:
            res["notes"].append("the herd was due less than 2 s after start-up: raise --lead")
        ph = res["priority_herd"]
        for k in ("high.p99_ms", "low.p99_ms", "high.last_ms", "low_before_last_high",
                  "steady_during_herd.p99_ms"):
            figures[f"{name}.{k}"] = dig(ph, k)
        phases.append(res)
    return {"scenario": "priority-herd",
            "params": {"low_jobs": low, "high_jobs": high, "steady_jobs": steady,
                       "duration_s": duration, "nodes": opts.nodes, "peers": list(peers)},
            "phases": phases, "figures": figures, "table": herd_table(phases)}


def _due(w: Any) -> int:
    return int(w.parts[0].base_ms)


def herd_figures(o: PhaseOutcome) -> dict[str, Any]:
    t = o.tally
    due = _due(t.w)
    by_group: dict[str, list[int]] = {"low": [], "high": [], "steady": []}
    steady_before: list[int] = []
    steady_at: list[tuple[int, int]] = []  # (fire time, lateness)
    for (i, f), rec in t.pairs.items():
        g = t.w.local(i)[0]
        late = rec.first_ms - f
        if g.namespace == "herd":
            by_group[g.name].append(rec.first_ms)
        elif f < due:
            steady_before.append(late)
        else:
            steady_at.append((f, late))
    low_arr, high_arr = sorted(by_group["low"]), sorted(by_group["high"])
    herd_end = max(low_arr[-1:] + high_arr[-1:], default=due)
    last_high = high_arr[-1] if high_arr else None
    out: dict[str, Any] = {
        "due_ms": due,
        "low": _group(low_arr, due, t.w.parts[0].count),
        "high": _group(high_arr, due, t.w.parts[1].count),
        "herd_last_arrival_ms": herd_end - due,
        "low_before_last_high": None if last_high is None
        else sum(1 for a in low_arr if a < last_high),
        "steady_before_herd": lateness_summary(steady_before),
        "steady_during_herd": lateness_summary(v for f, v in steady_at if f < herd_end),
        "steady_after_herd": lateness_summary(v for f, v in steady_at if f >= herd_end),
    }
    hp99 = out["high"]["p99_ms"]
    out["low_before_high_p99"] = None if hp99 is None else sum(
        1 for a in low_arr if a - due < hp99)
    return out


def _group(arrivals: list[int], due: int, owed: int) -> dict[str, Any]:
    s = lateness_summary(a - due for a in arrivals)
    s.update({"owed": owed, "delivered": len(arrivals), "missed": owed - len(arrivals),
              "last_ms": s["max_ms"]})
    return s


def herd_table(phases: list[dict[str, Any]]) -> str:
    lines = []
    for p in phases:
        if "error" in p:
            lines.append(f"{p['system']}: error: {p['error']}")
            continue
        h = p["priority_herd"]
        lines.append(f"{p['system']}:")
        for name in ("high", "low"):
            g = h[name]
            lines.append(f"  {name:5s} {g['delivered']:,}/{g['owed']:,} delivered; lateness "
                         f"p50 {_n(g['p50_ms'])} ms, p99 {_n(g['p99_ms'])} ms, max "
                         f"{_n(g['max_ms'])} ms")
        lines.append(f"  order: {_n(h['low_before_last_high'])} low fires arrived before the "
                     f"last high one, {_n(h['low_before_high_p99'])} before the high p99")
        lines.append(f"  herd delivered {_n(h['herd_last_arrival_ms'])} ms after it was due")
        for name in ("before", "during", "after"):
            s = h[f"steady_{name}_herd"]
            lines.append(f"  steady namespace {name:6s} the herd: {s['count']:,} fires, "
                         f"p50 {_n(s['p50_ms'])} ms, p99 {_n(s['p99_ms'])} ms, max "
                         f"{_n(s['max_ms'])} ms")
        d = p["delivery"]
        lines.append(f"  missed {d['missed']:,}, doubled {d['doubled_pairs']:,}; CPU ms per "
                     f"fire (all but the receiver) "
                     f"{_n(dig(p, 'cost.cpu_ms_per_fire_by_kind.total'))}")
    return "\n".join(lines)


def _n(v: Any) -> str:
    return "-" if v is None else f"{v:,}"
