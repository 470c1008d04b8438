"""The max-rate scenario: per system, the highest rate every fire of which
arrives once and on time, found by climbing a ladder of rates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cronman_bench.harness import PhaseOutcome, run_phase, steady_window
from cronman_bench.report import dig
from cronman_bench.scenarios import (
    ScenarioParams,
    _param,
    _phase_or_error,
    _systems,
    past_anchors,
)
from cronman_bench.systems import BenchOptions, System


def trial_verdict(result: dict[str, Any], limit_ms: int) -> str:
    """``pass``, ``fail`` (a fire missed or arrived twice, or p99 over the limit)
    or ``error`` (the trial could not run: a process exited, set-up failed)."""
    if "error" in result:
        return "error"
    d = result.get("delivery") or {}
    p99 = dig(d, "lateness.p99_ms")
    ok = (d.get("missed") == 0 and d.get("duplicated_pairs") == 0 and p99 is not None
          and p99 <= limit_ms)
    return "pass" if ok else "fail"


def rate_ladder(start: float, step: float, limit: float) -> list[int]:
    """Rates from ``start`` up to ``limit``, each ``step`` times the last,
    rounded to two significant figures (250, 310, 390, 490, 610, ...)."""
    if step <= 1:
        raise ValueError("the rate step must be more than 1")
    rates: list[int] = []
    r = float(start)
    while r <= limit * 1.0001:
        digits = max(0, len(str(int(r))) - 2)
        v = max(1, int(round(r, -digits)))
        if not rates or v > rates[-1]:
            rates.append(v)
        r *= step
    return rates


@dataclass
class SearchOutcome:
    """The highest rate that passed, and how the search ended."""

    highest: int | None
    first_failure: int | None = None  # the rate that stopped the search
    error_at: int | None = None  # a trial that could not run stopped it
    capped: bool = False  # every rate up to the top of the range passed
    below_start: bool = False  # the start rate failed; found by halving


def search_highest(trial: Callable[[int], str], start: float, limit: float, step: float
                   ) -> SearchOutcome:
    """Climb the rate ladder until the first rate that does not pass.

    Every rate up to the one reported passed; the first that failed ends the
    search (no retry, no bisection: "sustained" means every lower step held).
    If the start rate fails, rates halve until one passes (down to 1/s).
    """
    last: int | None = None
    for rate in rate_ladder(start, step, limit):
        verdict = trial(rate)
        if verdict == "pass":
            last = rate
            continue
        if verdict == "error":
            return SearchOutcome(last, error_at=rate)
        if last is not None:
            return SearchOutcome(last, first_failure=rate)
        # The start rate failed: halve until a rate passes.
        lower = rate // 2
        while lower >= 1:
            verdict = trial(lower)
            if verdict == "pass":
                return SearchOutcome(lower, first_failure=rate, below_start=True)
            if verdict == "error":
                return SearchOutcome(None, first_failure=rate, error_at=lower)
            rate, lower = lower, lower // 2
        return SearchOutcome(None, first_failure=rate)
    return SearchOutcome(last, capped=last is not None)


def max_rate(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Per system: the highest rate with 0 missed, 0 duplicated and p99 within the limit.

    Trials climb a ladder of rates (``start_rate`` times ``rate_step`` per
    step, up to ``max_rate``) and stop at the first that fails; the answer is
    the last that passed. Every trial is a fresh phase (new database, Redis,
    processes, receiver) with J = rate x every jobs.
    """
    every = int(_param("max-rate", params, "every"))
    duration = float(_param("max-rate", params, "duration"))
    peers = _param("max-rate", params, "peers")
    limit = opts.p99_limit_ms
    ladder = rate_ladder(params.start_rate, params.rate_step, params.max_rate)
    opts.echo(f"max-rate: trials of {duration:.0f} s (after a {opts.warmup:.0f} s warm-up), "
              f"jobs every {every} s, rates {', '.join(f'{r:,}' for r in ladder[:8])}"
              f"{', ...' if len(ladder) > 8 else ''} up to {ladder[-1]:,}/s; pass = 0 missed, "
              f"0 duplicated, p99 <= {limit} ms; each system stops at its first failure")
    systems: dict[str, Any] = {}

    def partial() -> dict[str, Any]:
        return {"scenario": "max-rate", "partial": True, "systems": systems}

    for name, build in _systems(opts, peers, "maxrate"):
        trials: list[dict[str, Any]] = []
        systems[name] = {"trials": trials}

        def trial(rate: int, name: str = name, build: Callable[[], System] = build,
                  trials: list[dict[str, Any]] = trials) -> str:
            jobs = max(1, rate * every)
            opts.echo(f"  [{name}] trial {len(trials) + 1} at {jobs / every:,.0f} fires/s "
                      f"({jobs:,} jobs)")
            o = _phase_or_error(name, build, opts, lambda s: run_phase(
                s, past_anchors(jobs, every), steady_window(opts.warmup, duration), opts,
                label=f"maxrate-{name}-{jobs / every:.0f}"))
            res = o.result if isinstance(o, PhaseOutcome) else o
            verdict = trial_verdict(res, limit)
            t = {"rate_per_s": jobs / every, "verdict": verdict,
                 "fires_per_s": dig(res, "delivery.fires_per_s"),
                 "p99_ms": dig(res, "delivery.lateness.p99_ms"),
                 "max_ms": dig(res, "delivery.lateness.max_ms"),
                 "missed": dig(res, "delivery.missed"),
                 "duplicated_pairs": dig(res, "delivery.duplicated_pairs"),
                 "cpu_ms_per_fire": dig(res, "cost.cpu_ms_per_fire"),
                 "error": res.get("error"), "phase": res}
            trials.append(t)
            opts.echo(f"  [{name}] {jobs / every:,.0f} fires/s: {verdict.upper()} "
                      f"(p99 {t['p99_ms']} ms, missed {t['missed']}, "
                      f"duplicated {t['duplicated_pairs']})")
            if opts.checkpoint is not None:
                opts.checkpoint(partial())
            return verdict

        found = search_highest(trial, params.start_rate, params.max_rate, params.rate_step)
        systems[name].update({
            "highest_sustained_per_s": found.highest, "at_least": found.capped or (
                found.error_at is not None),
            "first_failure_per_s": found.first_failure, "error_at_per_s": found.error_at,
            "below_start": found.below_start, "capped_by_range": found.capped})
    figures: dict[str, Any] = {f"{n}.highest_sustained_per_s": s["highest_sustained_per_s"]
                               for n, s in systems.items()}
    base = systems.get("cronman", {})
    for n, s in systems.items():
        other = s["highest_sustained_per_s"]
        if n != "cronman" and base.get("highest_sustained_per_s") and other:
            ratio = round(base["highest_sustained_per_s"] / other, 2)
            # A lower bound on either side makes the ratio a bound, or unknown.
            exact = not base["at_least"] and not s["at_least"]
            figures[f"cronman/{n}.highest_sustained"] = ratio
            figures[f"cronman/{n}.ratio_kind"] = "exact" if exact else (
                ">=" if base["at_least"] and not s["at_least"] else
                "<=" if s["at_least"] and not base["at_least"] else "unknown")
    return {"scenario": "max-rate",
            "params": {"every_s": every, "trial_s": duration, "warmup_s": opts.warmup,
                       "p99_limit_ms": limit, "start_rate": params.start_rate,
                       "rate_step": params.rate_step, "max_rate": params.max_rate,
                       "ladder": ladder, "nodes": opts.nodes, "replicas": opts.replicas,
                       "peers": list(peers)},
            "systems": systems, "figures": figures,
            "table": _max_rate_table(systems, figures, limit)}


def _max_rate_table(systems: dict[str, Any], figures: dict[str, Any], limit: int) -> str:
    def shown(s: dict[str, Any]) -> str:
        v = s["highest_sustained_per_s"]
        text = "none" if v is None else f"{'>= ' if s['at_least'] else ''}{v:,}"
        if s["first_failure_per_s"] is not None:
            text += f" (failed at {s['first_failure_per_s']:,})"
        if s["error_at_per_s"] is not None:
            text += f" (trial at {s['error_at_per_s']:,} could not run: see JSON)"
        if s["capped_by_range"]:
            text += " (top of the range: raise --max-rate)"
        return text

    rows = [(n, shown(s)) for n, s in systems.items()]
    for n in systems:
        key = f"cronman/{n}.highest_sustained"
        if key in figures:
            kind = figures[f"cronman/{n}.ratio_kind"]
            rows.append((f"cronman/{n}", {"exact": "", ">=": ">= ", "<=": "<= "}.get(
                kind, "? ") + f"{figures[key]:,.2f}x"))
    rows.append(("", ""))
    for n, s in systems.items():
        for t in s["trials"]:
            rows.append((f"  {n} {t['rate_per_s']:,.0f}/s",
                         f"{t['verdict']}: p99 {t['p99_ms']} ms, max {t['max_ms']} ms, "
                         f"missed {t['missed']}, duplicated {t['duplicated_pairs']}"))
    width = max(len(r[0]) for r in rows) + 2
    head = (f"{'system':<{width}}highest sustained fires/s (every lower step passed: "
            f"0 missed, 0 duplicated, p99 <= {limit} ms)")
    return "\n".join([head, *(f"{a:<{width}}{b}".rstrip() for a, b in rows)])
