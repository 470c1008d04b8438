"""The ``chaos`` scenario: the fault suite's seeded run for N minutes.

Three scheduler nodes (``--nodes``) on a scratch database of the machine's
PostgreSQL and a private redis-server, the real API, the nginx receiver
behind the nemesis' proxy; a steady group of ``--jobs`` jobs every
``--every`` s and a herd (a third as many jobs due on the same second every
10 s); the nemesis' seeded plan (``--seed``) over ``--minutes``: pauses
shorter and longer than the heartbeat TTL, the lease and the fire lock's
TTL, SIGKILL + restart of a node, of the API, of ``cronman worker`` and of
the container agent (mid-run), a slow receiver, a node restarted with its
clock off, partitions of one node (in a network namespace) from Redis,
PostgreSQL, the receiver or all three, its links made slow or lossy, a
Redis Sentinel failover, a PostgreSQL outage; with ``--database patroni``
the database is on a test-started Patroni cluster (three members,
synchronous mode, every process given its multi-host URL) and its primary
is SIGKILLed too, a replica promoted, the old one back as a replica.
``worker`` jobs (``--worker-jobs``)
and container jobs (``--container-jobs``, root: a private containerd) run
beside the http ones and call the receiver from their commands. The suite's heartbeat TTL and lease (3 s and
6 s) are used, not the bench's.

The nemesis, the checker and the rig live with the tests
(``tests/chaos``): the scenario runs from a source checkout. Its table: per
fault kind, faults applied, fires owed near them, each outcome, the extra
lateness (beyond the steady median) p99/max; the violations follow.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from cronman_bench.patroni import unavailable as patroni_unavailable
from cronman_bench.procs import BenchError
from cronman_bench.scenarios import ScenarioParams
from cronman_bench.systems import BenchOptions

DEFAULT_MINUTES = 3.0
DEFAULT_SEED = 39
DEFAULT_JOBS = 1500
DEFAULT_EVERY = 5
HERD_EVERY_S = 10
WORKER_JOBS = 20  # every 5 s
CONTAINER_JOBS = 10  # every 10 s


def _suite() -> Any:
    """``tests.chaos.run`` of the checkout this package sits in."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "tests" / "chaos" / "run.py").is_file():
        raise BenchError("the chaos scenario runs from a source checkout (tests/chaos)")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("tests.chaos.run")


def _containerd_why() -> str | None:
    """Why no private containerd can run here (None: it can)."""
    why: str | None = importlib.import_module("tests.support.containerd").containerd_available()
    return why


def chaos(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    suite = _suite()
    patroni = params.database == "patroni"
    if patroni and (why := patroni_unavailable()):
        raise BenchError(f"--database patroni: {why}")
    minutes = params.minutes or DEFAULT_MINUTES
    seed = DEFAULT_SEED if params.seed is None else params.seed
    jobs = params.jobs or DEFAULT_JOBS
    every = params.every or DEFAULT_EVERY
    config = suite.ChaosConfig(seed=seed, window_s=minutes * 60, nodes=opts.nodes,
                               steady_jobs=jobs, steady_every_s=every,
                               herd_jobs=max(1, jobs // 3), herd_every_s=HERD_EVERY_S,
                               worker_jobs=WORKER_JOBS, container_jobs=CONTAINER_JOBS,
                               settle_s=20.0)
    opts.echo(f"chaos: seed {seed}, {minutes:g} min, {opts.nodes} nodes, "
              f"{config.rate:.0f} fires/s (herd of {config.herd_jobs} every {HERD_EVERY_S} s), "
              f"database {'on Patroni' if patroni else 'on the machine PostgreSQL'}")
    with suite.chaos_rig(opts.workdir / f"chaos-{seed}", worker=True,
                         agent=_containerd_why() is None, patroni=patroni) as rig:
        out = suite.run_chaos(rig, config, echo=opts.echo)
    result = out.result
    kinds = sorted({f.kind for f in result.faults})
    per_kind: dict[str, Any] = {}
    for kind in [*kinds, "steady"]:
        p99, top = result.extra_lateness(kind)
        per_kind[kind] = {"faults": sum(1 for f in result.faults if f.kind == kind),
                          "outcomes": result.counts(kind),
                          "extra_lateness_p99_ms": p99, "extra_lateness_max_ms": top}
    violations = len(result.violations)
    figures = {"fires_owed": len(result.verdicts), "violations": violations,
               "unexpected": len(result.unexpected), "lost_writes": len(result.lost_writes),
               "api_writes_acked": out.writes, **result.counts()}
    return {"scenario": "chaos",
            "params": {"seed": seed, "minutes": minutes, "nodes": opts.nodes,
                       "database": params.database,
                       "rate_per_s": round(config.rate, 1), "steady_jobs": jobs,
                       "every_s": every, "herd_jobs": config.herd_jobs,
                       "herd_every_s": HERD_EVERY_S,
                       "plan": [vars(p) if hasattr(p, "__dict__") else
                                {"kind": p.kind, "target": p.target, "at_s": p.at_s,
                                 "duration_s": p.duration_s, "amount": p.amount}
                                for p in out.planned]},
            "phases": [], "figures": figures, "per_kind": per_kind,
            "errors": out.errors, "table": out.report(limit=5)}
