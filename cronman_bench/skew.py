"""The ``skew`` scenario: one node's clock off, under a steady load.

N nodes (3) at R fires/s (1,000); node ``bench-1`` runs under libfaketime
(Debian's ``faketime``: ``LD_PRELOAD`` of libfaketimeMT, ``FAKETIME=+2s``):
its wall clock is off by the offset, its monotonic clock is right. One phase
per offset (``--skews``, default +2s, +30s, -30s), after a baseline phase
with every clock right, whose p99 is the "normal p99".

Per offset: early fires (any arrival before the scheduled time minus 50 ms),
fires later than the baseline's p99, missed, doubled; what the skewed node
reports (``cronman_clock_offset_seconds``, ``cronman_clock_skewed``, the
last value and the range seen during the window); early claims and starts
refused and takeovers, summed over the nodes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from cronman_bench import nodemetrics
from cronman_bench.harness import PhaseOutcome, run_phase, steady_window
from cronman_bench.procs import BenchError
from cronman_bench.report import dig
from cronman_bench.scenarios import ScenarioParams, _param, past_anchors
from cronman_bench.slices import EARLY_BOUND_MS, early_late
from cronman_bench.systems import BenchOptions, CronmanSystem

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
SKEWED_NODE = "bench-1"
DEFAULT_SKEWS = ("+2s", "+30s", "-30s")


def faketime_env(offset: str) -> dict[str, str]:
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset, "FAKETIME_DONT_RESET": "1"}


def skew(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    if not os.path.exists(FAKETIME_LIB):
        raise BenchError(f"{FAKETIME_LIB} is missing: install Debian's faketime "
                         "(ops/setup --dev does)")
    if opts.nodes < 2:
        raise BenchError("the skew scenario needs at least 2 nodes")
    rate = int(params.rate or 1000)
    duration = float(_param("skew", params, "duration"))
    skews = params.skews or DEFAULT_SKEWS
    opts.echo(f"skew: {rate:,} fires/s on {opts.nodes} nodes, {duration:.0f} s per phase; "
              f"{SKEWED_NODE}'s clock off by {', '.join(skews)} (after a baseline)")
    phases: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    normal_p99: int | None = None
    for offset in ("none", *skews):
        phase_opts = replace(opts, node_env={} if offset == "none" else {
            SKEWED_NODE: faketime_env(offset)})
        label = f"skew-{offset}"
        try:
            o = run_phase(CronmanSystem(phase_opts, label), past_anchors(rate, 1),
                          steady_window(opts.warmup, duration), phase_opts, label=label)
        except BenchError as exc:
            opts.echo(f"  [{label}] failed: {exc}")
            phases.append({"system": "cronman", "skew": offset, "error": str(exc)})
            continue
        res = o.result
        res["skew"] = skew_figures(o, offset, normal_p99)
        if offset == "none":
            normal_p99 = dig(res, "delivery.lateness.p99_ms")
        else:
            for k in ("early", "late_beyond_normal_p99", "missed", "doubled",
                      "skewed_node_offset_s"):
                figures[f"{offset}.{k}"] = res["skew"][k]
        phases.append(res)
    return {"scenario": "skew",
            "params": {"rate_per_s": rate, "duration_s": duration, "skews": list(skews),
                       "skewed_node": SKEWED_NODE, "nodes": opts.nodes,
                       "early_bound_ms": EARLY_BOUND_MS, "normal_p99_ms": normal_p99},
            "phases": phases, "figures": figures, "table": skew_table(phases)}


def skew_figures(o: PhaseOutcome, offset: str, normal_p99: int | None) -> dict[str, Any]:
    t = o.tally
    assert o.meters is not None
    m = o.meters
    in_window = [(at, p) for at, p in m.probes if t.start_ms <= at <= t.end_ms + 1000]
    offsets = nodemetrics.gauges(in_window, nodemetrics.CLOCK_OFFSET).get(SKEWED_NODE, [])
    skewed = nodemetrics.gauges(in_window, nodemetrics.CLOCK_SKEWED).get(SKEWED_NODE, [])
    a, b = m.window_start, m.window_end
    counters: dict[str, Any] = {}
    if a is not None and b is not None:
        for key, name in (("early_claims", nodemetrics.EARLY_CLAIMS),
                          ("early_starts", nodemetrics.EARLY_STARTS),
                          ("double_fires_metric", nodemetrics.DOUBLE_FIRES)):
            counters[key] = int(nodemetrics.counter_delta(a.probe, b.probe, name)
                                .get("all", 0))
        counters["takeovers_by_reason"] = {k: int(v) for k, v in nodemetrics.counter_delta(
            a.probe, b.probe, nodemetrics.TAKEOVERS, "reason").items() if v}
    d = o.result["delivery"]
    values = [v for _, v in offsets]
    return {
        "offset": offset,
        **early_late(t, t.start_ms, t.end_ms, normal_p99),
        "normal_p99_ms": normal_p99,
        "missed": d["missed"], "doubled": d["doubled_pairs"],
        "skewed_node_offset_s": round(values[-1], 3) if values else None,
        "skewed_node_offset_range_s": [round(min(values), 3), round(max(values), 3)]
        if values else None,
        "skewed_node_stepped_out": bool(skewed and skewed[-1][1] >= 1),
        **counters,
    }


def skew_table(phases: list[dict[str, Any]]) -> str:
    head = ("clock of bench-1", "owed", "early", "late > normal p99", "missed", "doubled",
            "p99 ms", "offset seen s", "stepped out", "early claims/starts", "takeovers")
    rows: list[tuple[str, ...]] = [head]
    for p in phases:
        if "error" in p:
            rows.append((p["skew"], "error: " + str(p["error"])[:50], *[""] * 9))
            continue
        s = p["skew"]
        rows.append((
            s["offset"], f"{p['delivery']['expected']:,}", f"{s['early']:,}",
            "-" if s["normal_p99_ms"] is None else f"{s['late_beyond_normal_p99']:,}",
            f"{s['missed']:,}", f"{s['doubled']:,}",
            str(dig(p, "delivery.lateness.p99_ms")),
            "-" if s["skewed_node_offset_s"] is None else f"{s['skewed_node_offset_s']:+.3f}",
            "yes" if s["skewed_node_stepped_out"] else "no",
            f"{s.get('early_claims', '-')}/{s.get('early_starts', '-')}",
            ", ".join(f"{k} {v}" for k, v in s.get("takeovers_by_reason", {}).items()) or "0"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(len(head))).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
