#!/usr/bin/env python3
"""Membership at scale, simulated: rendezvous ownership of many jobs over many nodes.

    .venv/bin/python ops/bench/membership_sim.py                       # 3,10,50,100 nodes, 10M jobs
    .venv/bin/python ops/bench/membership_sim.py --nodes 3,100 --sample 100000

Pure Python, no servers. It uses the code the nodes run
(``cronman.coordination.ownership``: BLAKE2b job and node hashes, the bulk
``owned_mask`` / ``ranks`` a node computes on every membership change) on a
sample of ``--sample`` job ids, and extrapolates linearly to ``--jobs``
(each job costs the same; the cost per job is measured, not assumed). Per
node count it reports:

- the CPU a node spends computing its ownership of every live job (what
  ``JobTable.set_members`` does on each membership change), and that over
  the cluster;
- how evenly the jobs spread (owned per node: min / max against the mean);
- what moves on a join and on a leave: jobs whose owner set changes, whose
  first owner changes, and how many jobs each surviving node loads from the
  database on a leave (at ``--load-rate`` jobs/s, the rate a survivor was
  measured reading a dead node's share);
- the memory of the compact records a node keeps of the jobs it does not
  own (id and 64-bit hash, measured with tracemalloc on the sample);
- the coordinator's load from membership alone: each node's pulse every
  ``PULSE_INTERVAL`` reads every peer's (one ``pulse.lua`` call of N + 1
  keys), and a heartbeat every TTL/5;
- with the per-fire costs measured by the benches (``--redis-per-fire``,
  ``--pg-commits-per-fire``) and this machine's limits (``--redis-ops``,
  ``--pg-commits``, measured with redis-benchmark and pgbench: see
  ops/bench/README.md), the fire rate at which each backend runs out.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import tracemalloc
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cronman.config import DEFAULT_HEARTBEAT_TTL  # noqa: E402
from cronman.coordination.ownership import Ownership, job_hash  # noqa: E402
from cronman.scheduler.claim.pulse import PULSE_INTERVAL  # noqa: E402

# Measured on this machine (ops/bench/README.md, issue 43 item 4): a survivor
# read a dead node's 333,000 jobs in ~17 s.
LOAD_RATE = 20_000


def job_ids(n: int, seed: int) -> list[str]:
    """Job ids shaped like cronman's (36-character UUID text)."""
    rnd = random.Random(seed)
    return [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(n)]


def node_ids(n: int) -> list[str]:
    return [f"node-{i:03d}" for i in range(1, n + 1)]


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    """The best of ``repeat`` CPU times of ``fn()`` (CPU, not wall: the
    machine is shared; the best: the run least disturbed by it)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def owners_of(hashes: array[int], nodes: list[str], replicas: int
              ) -> tuple[list[frozenset[int]], list[int]]:
    """Per job: its owner set (node indices) and its first owner, from each
    node's ``ranks`` (the bulk path the nodes use)."""
    n = len(hashes)
    sets: list[set[int]] = [set() for _ in range(n)]
    first = [-1] * n
    for k, node in enumerate(nodes):
        ranks = Ownership(nodes, node, replicas).ranks(hashes)
        for i, r in enumerate(ranks):
            if r < replicas:
                sets[i].add(k)
                if r == 0:
                    first[i] = k
    return [frozenset(s) for s in sets], first


def compact_record_bytes(ids: list[str]) -> float:
    """Bytes per entry of ``JobTable.others`` (job id -> 64-bit hash)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    # Fresh strings and ints, as rows read from the database make them.
    others = {i.encode().decode(): job_hash(i) for i in ids}
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del others
    return used / len(ids)


def simulate(n_nodes: int, ids: list[str], hashes: array[int], jobs: int, replicas: int,
             load_rate: float) -> dict[str, float]:
    scale = jobs / len(ids)
    nodes = node_ids(n_nodes)
    me = Ownership(nodes, nodes[0], replicas)
    mask_s = timed(lambda: me.owned_mask(hashes))
    sets, _first = owners_of(hashes, nodes, replicas)
    owned = [0] * n_nodes
    for s in sets:
        for k in s:
            owned[k] += 1
    joined = nodes + [f"node-{n_nodes + 1:03d}"]
    new_ranks = Ownership(joined, joined[-1], replicas).ranks(hashes)
    join_moved = sum(1 for r in new_ranks if r < replicas)
    join_first = sum(1 for r in new_ranks if r == 0)
    # A leave: node-001 goes; each job it owned gains one new owner among the rest.
    leaving = 0
    left_sets, _ = owners_of(hashes, nodes[1:], replicas)
    gained_by: list[int] = [0] * n_nodes
    for old, new in zip(sets, left_sets, strict=True):
        if 0 in old:
            leaving += 1
            for k in new:
                if k + 1 not in old:
                    gained_by[k + 1] += 1
    survivors = gained_by[1:]
    mean_owned = statistics.mean(owned)
    return {
        "nodes": n_nodes,
        "mask_s_per_node": mask_s * scale,
        "mask_us_per_job": mask_s * 1e6 / len(ids),
        "mask_s_cluster": mask_s * scale * n_nodes,
        "owned_per_node": mean_owned * scale,
        "owned_min_ratio": min(owned) / mean_owned,
        "owned_max_ratio": max(owned) / mean_owned,
        "join_moved_pct": 100.0 * join_moved / len(ids),
        "join_first_pct": 100.0 * join_first / len(ids),
        "leave_moved_pct": 100.0 * leaving / len(ids),
        "leave_gain_per_survivor": (statistics.mean(survivors) if survivors else 0.0) * scale,
        "leave_gain_max": (max(survivors) if survivors else 0) * scale,
        "leave_load_s": (max(survivors) if survivors else 0) * scale / load_rate,
        "others_per_node": (len(ids) - owned[0]) * scale,
    }


def membership_redis_ops(n_nodes: int, heartbeat_ttl: float) -> float:
    """Commands per second a cluster's pulses and heartbeats cost Redis (one
    shard): per pulse TIME, SET and a GET per peer inside one script call
    (which counts as a command too); per heartbeat about 3."""
    pulses = n_nodes / PULSE_INTERVAL * (n_nodes + 2)
    beats = n_nodes / (heartbeat_ttl / 5) * 3
    return pulses + beats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000_000)
    ap.add_argument("--sample", type=int, default=200_000, help="job ids actually hashed")
    ap.add_argument("--nodes", default="3,10,50,100")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--load-rate", type=float, default=LOAD_RATE,
                    help="jobs/s a node reads from the database when it gains them")
    ap.add_argument("--heartbeat-ttl", type=float, default=DEFAULT_HEARTBEAT_TTL)
    ap.add_argument("--redis-per-fire", type=float, default=6.7,
                    help="Redis commands per fire (steady bench; the herd's is higher)")
    ap.add_argument("--pg-commits-per-fire", type=float, default=0.055)
    ap.add_argument("--pg-us-per-fire", type=float, default=138.0,
                    help="PostgreSQL CPU µs per fire (claim, cursor, result rows)")
    ap.add_argument("--redis-ops", type=float, default=None,
                    help="Redis commands/s this machine's server sustains (redis-benchmark)")
    ap.add_argument("--pg-commits", type=float, default=None,
                    help="PostgreSQL commits/s this machine sustains (pgbench)")
    ap.add_argument("--pg-cores", type=float, default=2.0)
    args = ap.parse_args()

    ids = job_ids(args.sample, args.seed)
    hash_s = timed(lambda: [job_hash(i) for i in ids], repeat=1)
    hashes = array("Q", (job_hash(i) for i in ids))
    per_record = compact_record_bytes(ids)
    print(f"{args.jobs:,} jobs (extrapolated from {args.sample:,} hashed), "
          f"{args.replicas} replicas; job hash {hash_s * 1e6 / len(ids):.2f} µs "
          f"(once per job loaded); a compact record of a job not owned {per_record:.0f} B")
    print()
    print("| nodes | ownership of all jobs, per node (CPU s) | µs per job | cluster CPU s "
          "per change | owned per node (min / max of mean) | join: jobs moved / first owner "
          "moved | leave: jobs moved | leave: loaded per survivor (max), s at load rate | "
          "records of jobs not owned, per node (MB) |")
    print("| ---: | ---: | ---: | ---: | --- | --- | ---: | --- | ---: |")
    rows = []
    counts = [int(x) for x in args.nodes.split(",")]
    if min(counts) <= args.replicas:
        raise SystemExit("every node count must exceed --replicas (else every node owns "
                         "every job and nothing moves)")
    for n in counts:
        r = simulate(n, ids, hashes, args.jobs, args.replicas, args.load_rate)
        rows.append(r)
        print(f"| {n} | {r['mask_s_per_node']:.2f} | {r['mask_us_per_job']:.3f} | "
              f"{r['mask_s_cluster']:.1f} | {r['owned_per_node']:,.0f} "
              f"({r['owned_min_ratio']:.3f} / {r['owned_max_ratio']:.3f}) | "
              f"{r['join_moved_pct']:.2f} % / {r['join_first_pct']:.2f} % | "
              f"{r['leave_moved_pct']:.2f} % | {r['leave_gain_max']:,.0f}, "
              f"{r['leave_load_s']:.1f} s | {r['others_per_node'] * per_record / 1e6:,.0f} |")
    print()
    print("Coordinator load from membership alone (pulses every "
          f"{PULSE_INTERVAL * 1000:.0f} ms reading every peer, heartbeats every "
          f"{args.heartbeat_ttl / 5:.0f} s):")
    for r in rows:
        n = int(r["nodes"])
        ops = membership_redis_ops(n, args.heartbeat_ttl)
        line = f"  {n:>4} nodes: {ops:,.0f} Redis commands/s"
        if args.redis_ops:
            left = args.redis_ops - ops
            line += (f" ({100 * ops / args.redis_ops:.1f} % of {args.redis_ops:,.0f}/s); "
                     f"left for fires: {max(0.0, left) / args.redis_per_fire:,.0f} fires/s "
                     f"at {args.redis_per_fire} commands per fire")
        print(line)
    print()
    print("Where the fire rate stops (one Redis shard, one PostgreSQL primary):")
    if args.redis_ops:
        print(f"  Redis: {args.redis_ops:,.0f} commands/s / {args.redis_per_fire} per fire = "
              f"{args.redis_ops / args.redis_per_fire:,.0f} fires/s")
    if args.pg_commits:
        print(f"  PostgreSQL commits: {args.pg_commits:,.0f}/s / {args.pg_commits_per_fire} "
              f"per fire = {args.pg_commits / args.pg_commits_per_fire:,.0f} fires/s")
    print(f"  PostgreSQL CPU: {args.pg_cores:g} cores / {args.pg_us_per_fire:g} µs per fire = "
          f"{args.pg_cores * 1e6 / args.pg_us_per_fire:,.0f} fires/s")


if __name__ == "__main__":
    main()
