"""The ``tracing`` scenario: CPU per fire with tracing off, on at 1 %, on at 100 %.

``--rounds`` (3) rounds of three steady phases at ``--rate`` (1,000) fires/s
on N nodes, one per mode, ``--duration`` (30) s measured each. The order
rotates by one each round (off, 1 %, 100 %; then 1 %, 100 %, off; then
100 %, off, 1 %; ...: ``round_order``), so a drift of the machine's load
over the run falls on each mode alike instead of always on the last. Tracing is configured the
standard way, in each node's environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` to
a real OTLP/HTTP receiver on loopback (``otlp_sink``, a process of its own,
new per phase), ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with
``OTEL_TRACES_SAMPLER_ARG=0.01`` or ``parentbased_always_on``; the SDK's
batch processor at its defaults. Off: no OTEL_* variable, nothing of
OpenTelemetry imported.

Per phase: the steady figures (delivered, lateness, CPU per fire by process
kind: the OTLP receiver's apart, never in ``total``) and the spans started
during the window that reached the receiver (per second, per fire). Figures: per
mode the median over the rounds of the nodes' CPU ms per fire and of all but
the receivers', each as a ratio to off.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from cronman_bench.cost import PidSource
from cronman_bench.harness import PhaseOutcome, run_phase, steady_window
from cronman_bench.otlp_sink import read_log
from cronman_bench.procs import BenchError, ManagedProcess, free_port, wait_port
from cronman_bench.report import dig
from cronman_bench.scenarios import ScenarioParams, _param, past_anchors
from cronman_bench.systems import BenchOptions, CronmanSystem

# (mode, the nodes' sampler settings; None: tracing off)
MODES: tuple[tuple[str, dict[str, str] | None], ...] = (
    ("off", None),
    ("1%", {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.01"}),
    ("100%", {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}),
)
MODE_NAMES = tuple(name for name, _ in MODES)
OTLP_KIND = "otlp_receiver"


def round_order(modes: Sequence[str], round_no: int) -> list[str]:
    """The modes in the order round ``round_no`` (from 1) runs them: rotated
    left by one per round, so each takes each place in turn."""
    shift = (round_no - 1) % len(modes) if modes else 0
    return [*modes[shift:], *modes[:shift]]


class TracedCronmanSystem(CronmanSystem):
    """Cronman's nodes, exporting their traces to an OTLP receiver of their own."""

    def __init__(self, opts: BenchOptions, tag: str, sampler: dict[str, str] | None) -> None:
        super().__init__(opts, tag)
        self.sampler = sampler
        self.sink: ManagedProcess | None = None
        self.sink_log = opts.workdir / f"{tag}-otlp.log"
        self.sink_port = 0

    def node_env(self, node_id: str) -> dict[str, str]:
        env = super().node_env(node_id)
        if self.sampler is not None:
            env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.sink_port}",
                        "OTEL_SERVICE_NAME": "cronman-bench", **self.sampler})
        return env

    def start(self) -> None:
        if self.sampler is not None:
            self._start_sink()
        super().start()

    def _start_sink(self) -> None:
        import sys

        self.sink_port = free_port()
        self.sink = ManagedProcess(
            "otlp-sink", [sys.executable, "-m", "cronman_bench.otlp_sink", "--port",
                          str(self.sink_port), "--log", str(self.sink_log)],
            log_path=self.opts.workdir / f"{self.tag}-otlp-sink.out")
        wait_port("127.0.0.1", self.sink_port, 30, self.sink)

    def cpu_sources(self) -> list[tuple[str, PidSource]]:
        sink = self.sink
        return [*super().cpu_sources(),
                (OTLP_KIND, lambda: [sink.pid] if sink is not None and not sink.exited()
                 else [])]

    def teardown(self) -> None:
        super().teardown()
        if self.sink is not None:
            self.sink.stop()


def tracing(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    return run_tracing(opts, rate=int(params.rate or 1000),
                       duration=float(_param("tracing", params, "duration")),
                       rounds=params.rounds)


def run_tracing(opts: BenchOptions, *, rate: int, duration: float, rounds: int,
                modes: Sequence[str] = MODE_NAMES) -> dict[str, Any]:
    _require_sdk()
    opts.echo(f"tracing: {rate:,} fires/s on {opts.nodes} node(s), {duration:.0f} s per "
              f"phase; {rounds} round(s) of {', '.join(modes)}, the order rotated each round")
    samplers = dict(MODES)
    phases: list[dict[str, Any]] = []
    orders = [round_order(modes, round_no) for round_no in range(1, rounds + 1)]
    for round_no, order in enumerate(orders, start=1):
        for mode in order:
            label = f"tracing-{mode.replace('%', 'pct')}-{round_no}"
            system = TracedCronmanSystem(opts, label, samplers[mode])
            try:
                o = run_phase(system, past_anchors(rate, 1), steady_window(opts.warmup, duration),
                              opts, label=label)
            except BenchError as exc:
                opts.echo(f"  [{label}] failed: {exc}")
                phases.append({"system": "cronman", "tracing": mode, "round": round_no,
                               "error": str(exc)})
                continue
            o.result["tracing"] = {"mode": mode, "round": round_no,
                                   **_spans(system, o)}
            phases.append(o.result)
            if opts.checkpoint is not None:
                opts.checkpoint({"scenario": "tracing", "phases": phases})
    figures = tracing_figures(phases, modes)
    return {"scenario": "tracing",
            "params": {"rate_per_s": rate, "duration_s": duration, "rounds": rounds,
                       "modes": list(modes), "orders": orders, "nodes": opts.nodes,
                       "samplers": {m: samplers[m] for m in modes}},
            "phases": phases, "figures": figures, "table": tracing_table(figures, modes)}


def _require_sdk() -> None:
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
        import opentelemetry.proto  # noqa: F401
    except ImportError as exc:
        raise BenchError("the tracing scenario needs the tracing extra "
                         "(pip install 'cronman[tracing]')") from exc


def _spans(system: TracedCronmanSystem, o: PhaseOutcome) -> dict[str, Any]:
    """The spans started during the window that reached the receiver."""
    start, end = o.tally.start_ms, o.tally.end_ms
    requests, spans = read_log(system.sink_log, start, end)
    seconds = max(end // 1000 - -(-start // 1000), 1)
    fires = dig(o.result, "delivery.fires_per_s")
    per_s = spans / seconds
    return {"exports": requests, "spans": spans, "spans_per_s": round(per_s, 1),
            "spans_per_fire": round(per_s / fires, 3) if fires else None}


def tracing_figures(phases: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode, medians over the rounds; ratios to off."""
    out: dict[str, Any] = {}
    keys = (("cpu_ms_per_fire", "cost.cpu_ms_per_fire"),
            ("all_but_receivers_ms_per_fire", "cost.cpu_ms_per_fire_by_kind.total"),
            ("otlp_receiver_ms_per_fire", f"cost.cpu_ms_per_fire_by_kind.{OTLP_KIND}"),
            ("fires_per_s", "delivery.fires_per_s"),
            ("p99_ms", "delivery.lateness.p99_ms"),
            ("spans_per_fire", "tracing.spans_per_fire"))
    for mode in modes:
        mine = [p for p in phases if "error" not in p and dig(p, "tracing.mode") == mode]
        row: dict[str, Any] = {"phases": len(mine)}
        for name, key in keys:
            values = [v for p in mine if isinstance(v := dig(p, key), int | float)]
            row[name] = round(statistics.median(values), 3) if values else None
            row[f"{name}_runs"] = values
        out[mode] = row
    base = out.get("off", {})
    for mode in modes:
        for name in ("cpu_ms_per_fire", "all_but_receivers_ms_per_fire"):
            a, b = out[mode].get(name), base.get(name)
            out[mode][f"{name}_vs_off"] = round(a / b, 3) if a and b else None
    return out


def tracing_table(figures: dict[str, Any], modes: Sequence[str]) -> str:
    head = ("tracing", "phases", "fires/s", "p99 ms", "nodes CPU ms/fire", "x off",
            "all but receivers ms/fire", "x off", "OTLP receiver ms/fire", "spans/fire")

    def fmt(value: Any, spec: str = "{:,.3f}") -> str:
        return "-" if value is None else spec.format(value)

    rows = [head]
    for mode in modes:
        f = figures[mode]
        rows.append((mode, str(f["phases"]), fmt(f["fires_per_s"], "{:,.0f}"),
                     fmt(f["p99_ms"], "{:,.0f}"), fmt(f["cpu_ms_per_fire"]),
                     fmt(f["cpu_ms_per_fire_vs_off"], "{:.2f}"),
                     fmt(f["all_but_receivers_ms_per_fire"]),
                     fmt(f["all_but_receivers_ms_per_fire_vs_off"], "{:.2f}"),
                     fmt(f["otlp_receiver_ms_per_fire"]), fmt(f["spans_per_fire"], "{:.2f}")))
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(len(head))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
