"""The nemesis' plan: reproducible from its seed, node faults one at a time,
everything over before the window ends, each kind where it can apply."""

from __future__ import annotations

import time

from cronman.timeutil import now_ms
from tests.chaos import nemesis
from tests.chaos.nemesis import (
    END_MARGIN_S,
    JUMPS,
    KINDS,
    MAX_SKEW_S,
    NODE_KINDS,
    PARTITIONS,
    SERVICE_KINDS,
    Nemesis,
    Planned,
    faketime_env,
    plan,
)

NODES = ["n1", "n2", "n3"]


def make(seed: int, window_s: float = 75.0, **kw):
    kw.setdefault("clock_node", "n3")
    kw.setdefault("partition_node", "n2")
    return plan(seed, window_s, NODES, ttl_s=3.0, lease_s=6.0, **kw)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    assert make(39) == make(39)
    assert make(39) != make(40)


def test_node_faults_follow_one_another_and_all_end_in_time():
    for seed in range(30):
        for window in (75.0, 180.0):
            planned = make(seed, window)
            assert planned, seed
            assert all(p.at_s + p.duration_s <= window - END_MARGIN_S for p in planned)
            nodes = sorted((p for p in planned if p.kind in NODE_KINDS), key=lambda p: p.at_s)
            for a, b in zip(nodes, nodes[1:], strict=False):
                assert a.at_s + a.duration_s < b.at_s, (seed, a, b)
            assert all(p.target == "n3" for p in planned if p.kind.startswith("clock"))
            assert all(p.target == "n2" for p in planned if p.kind in PARTITIONS)
            assert {p.target for p in planned if p.kind in SERVICE_KINDS} <= {"api", "receiver",
                                                                           "agent", "worker"}


def test_pauses_straddle_the_ttl_the_lease_and_the_lock_ttl():
    planned = [p for seed in range(40) for p in make(seed, 180.0)]
    short = [p.duration_s for p in planned if p.kind == "pause_short"]
    long_ = [p.duration_s for p in planned if p.kind == "pause_long"]
    past = [p.duration_s for p in planned if p.kind == "pause_past_lock"]
    assert short and max(short) < 3.0
    assert long_ and min(long_) > 6.0
    assert past and min(past) > 120.0
    assert not [p for seed in range(40) for p in make(seed) if p.kind == "pause_past_lock"]


def test_kinds_that_cannot_apply_are_left_out():
    planned = [p for seed in range(20)
               for p in make(seed, clock_node=None, partition_node=None)]
    assert not [p for p in planned if p.kind.startswith("clock") or p.kind in PARTITIONS]
    only = [p for seed in range(20) for p in make(seed, kinds=("kill_node",))]
    assert only and {p.kind for p in only} == {"kill_node"}
    every = {p.kind for seed in range(60) for p in make(seed, 180.0)}
    assert every == set(KINDS)


def test_a_clock_fault_runs_the_node_under_libfaketime():
    env = faketime_env(-12.5)
    assert env["FAKETIME"] == "-12.500" and env["LD_PRELOAD"].endswith("libfaketimeMT.so.1")


def test_a_backend_fault_queued_behind_another_fault_waits_for_the_nodes_to_settle(
        monkeypatch):
    """A fault that came due while the one before it was under way used to
    start the instant that one ended: a Redis failover right after a database
    outage, while the nodes still held the run rows they kept through it."""
    monkeypatch.setattr(nemesis, "BACKEND_SETTLE_S", 0.3)

    class Recording(Nemesis):
        def _do(self, p):
            time.sleep(0.2 if p.kind == "pg_outage" else 0.0)
            return ""

    n = Recording(cluster=None, api=None, proxy=None)
    n.start([Planned("pg_outage", "postgresql", 0.0, 0.2),
             Planned("redis_failover", "redis", 0.05, 0.1),
             Planned("pause_short", "n1", 0.1, 0.1)], now_ms())
    n.join(timeout=10)
    outage, *rest = sorted(n.faults, key=lambda f: f.start_ms)
    assert outage.kind == "pg_outage" and len(rest) == 2
    first, second = rest
    assert first.start_ms - outage.end_ms >= 300
    assert second.start_ms - first.end_ms >= 300  # next to the failover too


def test_clock_jumps_step_the_clock_node_within_the_skew_bound_and_past_it():
    planned = [p for seed in range(80) for p in make(seed, 180.0) if p.kind in JUMPS]
    assert {p.target for p in planned} == {"n3"}
    ahead = [p.amount for p in planned if p.kind == "clock_jump_forward"]
    behind = [p.amount for p in planned if p.kind == "clock_jump_back"]
    assert ahead and all(a > 0 for a in ahead) and behind and all(b < 0 for b in behind)
    steps = [abs(a) for a in ahead + behind]
    assert any(s < MAX_SKEW_S for s in steps) and any(s > 2 * MAX_SKEW_S for s in steps)
    assert max(steps) <= 30.0
    assert all(4.0 <= p.duration_s <= 12.0 for p in planned)



def test_held_faults_are_undone_after_their_time():
    """A slow receiver, a database outage and a clock step are set for their
    length, then undone; what each did is said."""
    seen: list[tuple[str, float]] = []

    class Proxy:
        def set_delay(self, s: float) -> None:
            seen.append(("delay", s))

    class Outage:
        def begin(self) -> int:
            seen.append(("outage", 1))
            return 7

        def end(self) -> None:
            seen.append(("outage", 0))

    class Clock:
        def set(self, s: float) -> None:
            seen.append(("clock", s))

    n = nemesis.Nemesis(None, api=None, proxy=Proxy(), outage=Outage())  # type: ignore[arg-type]
    n.clock = Clock()  # type: ignore[assignment]
    said = [n._do(nemesis.Planned(kind, "x", 0.0, 0.01, amount))  # noqa: SLF001
            for kind, amount in (("slow_receiver", 2.0), ("pg_outage", 0.0),
                                 ("clock_jump_forward", 5.0))]
    assert seen == [("delay", 2.0), ("delay", 0.0), ("outage", 1), ("outage", 0),
                    ("clock", 5.0), ("clock", 0.0)]
    assert said[0] == "2.0 s per answer" and "7 open ones terminated" in said[1]
    assert "+5.0 s" in said[2]
