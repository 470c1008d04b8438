"""``cronman bench``: the reproducible side-by-side benchmark (see ops/bench/README.md).

The command attaches itself to cronman's CLI group; the group imports this
module only when ``bench`` is called or listed (``cronman.cli.group``).
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import click

from cronman.cli.group import RET_ERROR, cli

_SCENARIO_CHOICES = ("steady", "max-rate", "herd", "million", "kill", "overload",
                     "priority-herd", "skew", "patroni-failover", "chaos", "work-queue",
                     "limits", "limit-accuracy", "tracing", "all")
_PEER_CHOICES = ("apscheduler-memory", "apscheduler-sqlalchemy", "apscheduler4-postgres",
                 "none")


def _parse_peers(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    for n in names:
        if n not in _PEER_CHOICES:
            raise click.BadParameter(f"unknown peer {n!r} (choose from "
                                     f"{', '.join(_PEER_CHOICES)})", param_hint="--peer")
    return tuple(n for n in names if n != "none")


def _parse_faults(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from cronman_bench.limit_accuracy import FAULTS

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    for n in names:
        if n not in FAULTS:
            raise click.BadParameter(f"unknown fault {n!r} (choose from {', '.join(FAULTS)})",
                                     param_hint="--faults")
    return names or None


@cli.command("bench")
@click.option("--scenario", type=click.Choice(_SCENARIO_CHOICES), default="steady",
              show_default=True, help="What to measure (see above).")
@click.option("--nodes", type=click.IntRange(1, 32), default=3, show_default=True,
              help="cronman scheduler nodes (kill: at least 2).")
@click.option("--replicas", type=click.IntRange(1, 8), default=2, show_default=True,
              help="CRONMAN_REPLICAS for the nodes.")
@click.option("--jobs", type=click.IntRange(1, 10_000_000), default=None,
              help="J, the number of jobs (defaults: steady 1,000, herd 50,000, million "
                   "1,000,000, kill 1,000; max-rate: rate x every per trial).")
@click.option("--every", type=click.IntRange(1, 86_400), default=None,
              help="S, seconds between fires of each job (defaults: 1; million 3,600).")
@click.option("--duration", type=click.FloatRange(1, 86_400), default=None,
              help="T, seconds measured (defaults: steady 60, max-rate 20 per trial, "
                   "kill 120; million: at most 600 from launch, it ends 30 s after steady "
                   "state).")
@click.option("--warmup", type=click.FloatRange(0, 3600), default=5.0, show_default=True,
              help="steady, max-rate, kill: seconds from each system's first callback to "
                   "the measured window.")
@click.option("--peer", "peer", default=None, metavar="LIST",
              help="Comma-separated: apscheduler-memory, apscheduler-sqlalchemy (3.x), "
                   "apscheduler4-postgres (4.x, --peer-processes processes sharing its "
                   "PostgreSQL data store), none. Defaults: steady all three; max-rate memory "
                   "and 4.x; herd both 3.x; million and overload memory; kill, "
                   "priority-herd, skew none.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Where to write the results (default "
                                 "bench-results/bench-<scenario>-<time>.json; rewritten "
                                 "after every scenario and max-rate trial).")
@click.option("--database-url", envvar="CRONMAN_BENCH_DATABASE_URL", default=None,
              help="A PostgreSQL server to make scratch databases on "
                   "(postgresql+psycopg2://user@host:port/db) [env CRONMAN_BENCH_DATABASE_URL; "
                   "default the local test server].")
@click.option("--heartbeat-ttl", type=click.FloatRange(1, 600), default=30.0,
              show_default=True, help="CRONMAN_HEARTBEAT_TTL for the nodes.")
@click.option("--lease-seconds", type=click.FloatRange(1, 3600), default=30.0,
              show_default=True, help="CRONMAN_LEASE_SECONDS for the nodes.")
@click.option("--p99-limit", type=click.IntRange(1, 60_000), default=100, show_default=True,
              help="max-rate, million: the p99 lateness (ms) that counts as on time.")
@click.option("--start-rate", type=click.FloatRange(1, 1e6), default=250.0, show_default=True,
              help="max-rate: the first rate tried (fires/s).")
@click.option("--rate-step", type=click.FloatRange(1.01, 10), default=1.25,
              show_default=True, help="max-rate: each rate tried is this times the last "
                                      "(rounded to 2 significant figures).")
@click.option("--max-rate", "max_rate_", type=click.FloatRange(1, 1e6), default=16_000.0,
              show_default=True, help="max-rate: the highest rate tried (fires/s).")
@click.option("--lead", type=click.FloatRange(1, 3600), default=None,
              help="herd: seconds from job creation to the herd's instant (default 20 + J/1000; "
                   "SQLAlchemy peer 20 + J/400).")
@click.option("--kill-at", type=click.FloatRange(0.1, 86_400), default=None,
              help="kill: seconds into the window when the node is SIGKILLed "
                   "(default: half of --duration).")
@click.option("--drain", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
              help="Longest wait for late arrivals after the window (herd at least 300, "
                   "kill at least lease + TTL + 40).")
@click.option("--rate", type=click.FloatRange(1, 1e6), default=None,
              help="overload: the knee in fires/s (default: probed per system with short "
                   "max-rate trials); skew: the steady rate (default 1,000); "
                   "limit-accuracy: the limit's starts a second (default 100).")
@click.option("--phase-seconds", type=click.FloatRange(5, 3600), default=60.0,
              show_default=True, help="overload: length of the knee, 2x and 3x phases.")
@click.option("--recover-seconds", type=click.FloatRange(5, 7200), default=180.0,
              show_default=True, help="overload: length of the last phase, back at the knee.")
@click.option("--probe-duration", type=click.FloatRange(2, 600), default=10.0,
              show_default=True, help="overload: seconds per knee-probe trial.")
@click.option("--grace", type=click.IntRange(1, 604_800), default=None,
              help="overload: the jobs' misfire grace in s (default: the job default, 300).")
@click.option("--high-jobs", type=click.IntRange(1, 10_000_000), default=1000,
              show_default=True, help="priority-herd: high-priority jobs in the herd.")
@click.option("--steady-jobs", type=click.IntRange(0, 10_000_000), default=100,
              show_default=True, help="priority-herd: jobs every second in the other "
                                      "namespace (0: none).")
@click.option("--skews", default=None, metavar="LIST",
              help="skew: comma-separated libfaketime offsets of one node "
                   "(default +2s,+30s,-30s).")
@click.option("--minutes", type=click.FloatRange(0.5, 1440), default=None,
              help="chaos: minutes of faults measured (default 3).")
@click.option("--seed", type=click.IntRange(0, 2**31), default=None,
              help="chaos: the seed of the nemesis' fault schedule (default 39).")
@click.option("--database", "chaos_database", type=click.Choice(("postgresql", "patroni")),
              default="postgresql", show_default=True,
              help="chaos: the run's database: a scratch database of the machine's "
                   "PostgreSQL, or a test-started Patroni cluster (3 members, synchronous "
                   "mode; as root) whose primary the nemesis also fails over.")
@click.option("--claimers", type=click.IntRange(1, 256), default=None,
              help="work-queue: waiting claimers (threads, one process each) for the "
                   "fire-to-claim phase (default 4).")
@click.option("--kills", type=click.IntRange(1, 100), default=None,
              help="work-queue: workers SIGKILLed while they hold a run (default 5).")
@click.option("--claim-spin", is_flag=True,
              help="work-queue: claimers claim again at once after an empty answer that "
                   "came early (no long-poll to spare), instead of the client Worker's "
                   "pause.")
@click.option("--runs", type=click.IntRange(1, 50), default=None,
              help="limits: alternating pairs of runs, none and 100 limits (default 3); "
                   "limit-accuracy: rounds of the --faults (default 1).")
@click.option("--concurrency", "limit_concurrency", type=click.IntRange(1, 100_000),
              default=None, help="limit-accuracy: the limit's requests at once (default 20).")
@click.option("--answer-ms", type=click.IntRange(0, 60_000), default=None,
              help="limit-accuracy: the receiver answers each request this late "
                   "(default 200).")
@click.option("--faults", default=None, metavar="LIST",
              help="limit-accuracy: comma-separated, one phase each, in turn: none, "
                   "node-killed, redis-restarted, redis-away (default none).")
@click.option("--claim-max", type=click.IntRange(1, 100), default=None,
              help="work-queue: runs one claim call takes at most (default 10; 1: one run "
                   "a call, the answer without `max`).")
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="tracing: rounds of the three phases (off, 1 %, 100 %).")
@click.option("--peer-processes", type=click.IntRange(1, 16), default=3, show_default=True,
              help="APScheduler 4: scheduler processes sharing its data store.")
@click.option("--keep", is_flag=True, help="Keep scratch databases and receiver logs.")
def bench_command(scenario: str, nodes: int, replicas: int, jobs: int | None,
                  every: int | None, duration: float | None, warmup: float, peer: str | None,
                  json_path: Path | None, database_url: str | None, heartbeat_ttl: float,
                  lease_seconds: float, p99_limit: int, start_rate: float, rate_step: float,
                  max_rate_: float, lead: float | None, kill_at: float | None, drain: float,
                  rate: float | None, phase_seconds: float, recover_seconds: float,
                  probe_duration: float, grace: int | None, high_jobs: int, steady_jobs: int,
                  skews: str | None, minutes: float | None, seed: int | None,
                  chaos_database: str, claimers: int | None, kills: int | None,
                  claim_spin: bool, runs: int | None, limit_concurrency: int | None,
                  answer_ms: int | None, faults: str | None, claim_max: int | None,
                  rounds: int,
                  peer_processes: int, keep: bool) -> None:
    """Benchmark cronman against APScheduler on this machine, measured at a receiver.

    Uses the running PostgreSQL (scratch databases, dropped afterwards), a
    private redis-server and nginx receiver on random loopback ports, N
    scheduler nodes, then (alone, after cronman) the same workload on
    APScheduler 3.x. Every figure comes from the receiver's log: lateness is
    arrival (nginx clock) minus Cronman-Scheduled-For; a fire is a
    (job, fire time) pair, missed when it never arrived, duplicated when it
    arrived twice. Prints progress every second, a table at the end, and
    writes JSON. Method and run times: ops/bench/README.md.

    \b
    Scenarios:
      steady    J jobs every S s (J/S fires/s) for T s: lateness p50..max,
                missed, duplicated, CPU and memory, PG commits and Redis
                commands per fire; cronman and each peer, with ratios.
      max-rate  per system, trials of T s at rising rates (--start-rate,
                x --rate-step, up to --max-rate; J = rate x S): stops at the
                first rate that misses or duplicates a fire or has
                p99 > --p99-limit, reports the last rate that passed, and the
                cronman/peer ratio.
      herd      J jobs due in the same second (--lead s after creation):
                time until the last callback arrives.
      million   J jobs every S s (1,000,000 every 3,600 s) created before the
                nodes start; from launch until steady state has held 30 s
                (at most T s): seconds until every node has loaded and every
                fire is on time (steady state), missed before/after, peak
                RSS per process.
      kill      steady load on N >= 2 nodes; one node is SIGKILLed at
                --kill-at: lost, doubled (two first attempts), redelivered
                (same run, later attempt), fires first sent by the sweeper,
                p99 lateness steady vs around the kill.
      overload  a steady rate at the knee (--rate, or probed), then 2x and 3x
                the knee for --phase-seconds each (jobs whose start_at/end_at
                windows open and close at the boundaries), then the knee again
                for --recover-seconds: per phase delivered/s, lateness overall
                and per priority (5 % of the jobs high), takeovers by reason
                (node metrics), doubled; recovery time.
      priority-herd  J low (20,000) and --high-jobs high-priority jobs due in
                one second in one namespace, --steady-jobs every second in
                another: lateness per priority, the order, the steady
                namespace's lateness during the herd.
      skew      N nodes at --rate (1,000) fires/s, one node's clock off by each
                of --skews (libfaketime), after a baseline: early, late beyond
                the baseline p99, missed, doubled, the offset it reports.
      chaos     the fault suite (tests/chaos, from a source checkout): N
                nodes, the API and the receiver under the nemesis' seeded
                faults (--seed) for --minutes, J steady jobs every S s
                (1,500 every 5) and a herd of J/3 every 10 s: per fault
                kind, faults applied, fires owed, each outcome, extra
                lateness p99/max; --database patroni: on a Patroni cluster,
                its primary failed over too; not part of 'all'.
      work-queue  worker runs through cronman api (gunicorn) and N nodes, raw
                claim loops as the workers: fire -> claim p50/p99 at --rate
                (200) runs/s by --claimers waiting claimers; claims/s draining
                --jobs (10,000) queued runs; those runs held, heartbeating
                every 10 s: heartbeat p99, API CPU; SIGKILL of a worker ->
                its run re-queued (--kills times).
      limits    the extra CPU per fire of 100 label limits defined (never
                holding a fire) against none: J (1,000) jobs every S (1) s,
                --runs (3) alternating pairs of T (30) s, each from scratch:
                nodes' + Redis CPU ms per fire, the pairs' ratios, medians,
                the load average.
      limit-accuracy  a herd of J (1,000) jobs on N nodes held to one limit
                (--rate 100/s, --concurrency 20) at a receiver answering after
                --answer-ms (200), under each of --faults in turn (none,
                node-killed, redis-restarted, redis-away), --runs rounds: the
                receiver's max per second and in flight against the limit,
                the share of the rate used while fires waited, delivered,
                doubled, the order (raised priority first).
      tracing   N nodes at --rate (1,000) fires/s, --rounds (3) rounds of
                tracing off, on at 1 % (parentbased_traceidratio 0.01) and
                on at 100 %, exporting to a real OTLP/HTTP receiver on
                loopback, T (30) s each: CPU per fire, medians per mode and
                ratios to off, spans received per fire; not part of 'all'.
      all       every scenario in turn, each with its defaults (not
                patroni-failover, chaos, tracing).
    """
    from cronman_bench.procs import BenchError
    from cronman_bench.report import machine_info, write_json
    from cronman_bench.runners import RUNNERS, SCENARIOS
    from cronman_bench.scenarios import ScenarioParams
    from cronman_bench.services import DEFAULT_ADMIN_URL, ensure_postgres
    from cronman_bench.systems import BenchOptions

    # SIGTERM ends the run as Ctrl-C does: through the teardowns, which stop
    # the processes and drop the scratch databases (by default Python would
    # end at once and leave them behind).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    admin_url = database_url or DEFAULT_ADMIN_URL
    started = time.strftime("%Y%m%dT%H%M%S")
    out_path = json_path or Path("bench-results") / f"bench-{scenario}-{started}.json"
    done: list[dict[str, object]] = []
    payload: dict[str, object] = {
        "command": "cronman bench " + " ".join(sys.argv[2:]),
        "started_at": started,
        "machine": machine_info(),
        "settings": {"nodes": nodes, "replicas": replicas, "heartbeat_ttl_s": heartbeat_ttl,
                     "lease_s": lease_seconds, "warmup_s": warmup, "p99_limit_ms": p99_limit},
        "scenarios": done,
    }

    def checkpoint(partial: dict[str, object]) -> None:
        write_json(out_path, {**payload, "scenarios": [*done, partial]})

    opts = BenchOptions(nodes=nodes, replicas=replicas, heartbeat_ttl=heartbeat_ttl,
                        lease_seconds=lease_seconds, warmup=warmup, drain_max=drain,
                        admin_url=admin_url, keep=keep, p99_limit_ms=p99_limit,
                        echo=click.echo, checkpoint=checkpoint,
                        peer_processes=peer_processes)
    params = ScenarioParams(jobs=jobs, every=every, duration=duration,
                            peers=_parse_peers(peer), start_rate=start_rate,
                            rate_step=rate_step, max_rate=max_rate_, lead=lead,
                            kill_at=kill_at, rate=rate, phase_seconds=phase_seconds,
                            recover_seconds=recover_seconds, probe_duration=probe_duration,
                            grace=grace, high_jobs=high_jobs, steady_jobs=steady_jobs,
                            skews=tuple(x.strip() for x in skews.split(",") if x.strip())
                            if skews else None, minutes=minutes, seed=seed,
                            database=chaos_database,
                            claimers=claimers, kills=kills, claim_spin=claim_spin, runs=runs,
                            claim_max=claim_max, rounds=rounds,
                            limit_concurrency=limit_concurrency, answer_ms=answer_ms,
                            faults=_parse_faults(faults))
    try:
        ensure_postgres(admin_url)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from exc
    chosen = SCENARIOS if scenario == "all" else (scenario,)
    tables: list[tuple[str, str]] = []
    failed = False
    for name in chosen:
        try:
            result = RUNNERS[name](opts, params)
        except BenchError as exc:
            click.echo(f"{name}: failed: {exc}", err=True)
            result = {"scenario": name, "error": str(exc)}
            failed = True
        except Exception as exc:  # noqa: BLE001 - keep the other scenarios' results
            click.echo(f"{name}: failed:\n{traceback.format_exc()}", err=True)
            result = {"scenario": name, "error": repr(exc)}
            failed = True
        done.append(result)
        if "table" in result:
            tables.append((name, result["table"]))
        write_json(out_path, payload)
        click.echo(f"{name}: results written to {out_path}")
    click.echo("")
    for name, table in tables:
        click.echo(f"== {name} ==")
        click.echo(table)
        click.echo("")
    click.echo(f"results written to {out_path}")
    if keep or failed:
        click.echo(f"work files (logs) in {opts.workdir}")
    else:
        shutil.rmtree(opts.workdir, ignore_errors=True)
    if failed:
        raise SystemExit(RET_ERROR)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
