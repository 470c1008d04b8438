"""CPU of a run's spans in one process: what tracing adds to a node per fire.

    .venv/bin/python ops/bench/tracing_spans_cpu.py --runs 20000 --rounds 3

The node's calls for one fire (``begin`` with its claim, ``attempt_started``
with the carrier for the receiver, ``log_ids`` for the attempt's log
records, ``attempt_ended``, ``ended``, ``updates_written``) on
``OtelRunTraces``, exporting over OTLP/HTTP to a real receiver on loopback
(``cronman_bench/otlp_sink.py``, its own process), with the SDK's batch
processor at its defaults; alternating rounds of 1 % and
100 % (``parentbased_traceidratio`` 0.01, ``parentbased_always_on``). CPU is
this process's (every thread: the exporter's too) per run; tracing off costs
the one ``is None`` check per step and is not measured. Not the end-to-end
figure (``cronman bench --scenario tracing``): no database, Redis or target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

SAMPLERS = {"1%": ("parentbased_traceidratio", "0.01"), "100%": ("parentbased_always_on", "")}


def one_mode(mode: str, runs: int, endpoint: str) -> float:
    """CPU ms per run for one sampler, in a fresh process (the SDK reads its env once)."""
    sampler, arg = SAMPLERS[mode]
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": arg}
    out = subprocess.run([sys.executable, __file__, "--child", str(runs)], env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def child(runs: int) -> None:
    from cronman.observability.tracing_otel import OtelRunTraces

    traces = OtelRunTraces("cronman-bench")
    at = datetime.now(UTC)
    ids = [str(uuid.uuid4()) for _ in range(runs)]
    cpu0 = time.process_time()
    for run_id in ids:
        now = time.time_ns()
        run = traces.begin(run_id=run_id, job_id="j", job_name="job", namespace="ns",
                           origin="schedule", scheduled_for=at, claimed=(now, now + 1000, 100))
        run.attempt_started(1, "http", 3)
        run.log_ids()
        run.attempt_ended("succeeded", None)
        run.ended("succeeded")
        traces.updates_written([run_id], now, time.time_ns())
    traces.shutdown()  # the export of what is left counts too
    print(f"{(time.process_time() - cpu0) * 1000 / runs:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from cronman_bench.otlp_sink import read_log
    from cronman_bench.procs import free_port, wait_port

    work = Path(tempfile.mkdtemp(prefix="tracing-cpu-"))
    port, log = free_port(), work / "otlp.log"
    sink = subprocess.Popen([sys.executable, "-m", "cronman_bench.otlp_sink", "--port",
                             str(port), "--log", str(log)], cwd=Path(__file__).parents[2])
    try:
        wait_port("127.0.0.1", port, 30)
        found: dict[str, list[float]] = {m: [] for m in SAMPLERS}
        print(f"load before: {os.getloadavg()}")
        for _ in range(args.rounds):
            for mode in SAMPLERS:
                found[mode].append(one_mode(mode, args.runs, f"http://127.0.0.1:{port}"))
        print(f"load after: {os.getloadavg()}")
        _, spans = read_log(log, 0, 2**62)
        for mode, values in found.items():
            print(f"{mode:>5}: CPU ms per run, median {statistics.median(values):.4f} "
                  f"(runs {', '.join(f'{v:.4f}' for v in values)})")
        print(f"spans received: {spans:,}")
    finally:
        sink.terminate()
        sink.wait(timeout=10)


if __name__ == "__main__":
    main()
