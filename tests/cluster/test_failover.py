"""Failover with real processes and real SIGKILLs (SPEC §6).

A cluster of scheduler nodes fires 2,000 interval jobs every 5 s (400
fires/s) at a local nginx receiver; nodes are SIGKILLed by PID mid-run and
restarted under the same node id. Every (job, fire time) owed in the
measured window must arrive, and no fire may be dispatched twice; a kill must
not make fires later than the steady state by a second or more (the job's
other replica fires it).
"""

from __future__ import annotations

import pytest

from cronman.scheduler.node import CLAIM_LEAD
from cronman_bench.workload import Workload
from tests.cluster.counting import describe_missing, pct
from tests.cluster.harness import Cluster, Fires
from tests.cluster.scenario import AROUND_MS, Outcome, run_scenario

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

MAX_EXTRA_LATENESS_MS = 1000
MAX_SWEPT_PER_KILL = 10
MAX_REPEATED_PER_KILLED_NODE = 20


def check_no_loss_no_double(cluster: Cluster, fires: Fires, out: Outcome) -> None:
    t = out.tally
    assert not t.double_fires, f"fired twice (two first attempts): {t.double_fires[:10]}"
    assert not t.unexpected, f"arrivals that are no fire time: {t.unexpected[:5]}"
    assert not t.missing, (f"{len(t.missing)} fires never arrived:\n"
                           f"{describe_missing(t, fires.job_ids)}")
    assert cluster.log_count("double fire:") == 0
    assert out.metrics["cronman_double_fires_total"] == 0


def check_redeliveries(cluster: Cluster, out: Outcome, rate: float) -> None:
    """Only fires due around a kill arrive as a later attempt (same run id,
    sent by the lease sweeper: ``at_least_once``), never as two first attempts.

    A fire arrives twice only when its node was killed after sending it and
    before its outcome mark reached Redis (``outcome_marks``: a 2 ms batch
    and a round trip after the node reads the answer), that is, in flight
    at the kill instant. Every other run the node had finished but not
    written (the result writer flushes every quarter second: 25-45 runs per
    kill at this rate) the sweeper records from its mark instead of sending
    it again. Answers take 1-3 ms on an idle machine: 0-2 such fires per
    killed node. On this shared 2-core machine the receiver and the nodes
    wait for a CPU at times, answers then take up to ~0.1 s, and a node
    sends up to ~130 fires/s: ``MAX_REPEATED_PER_KILLED_NODE`` is about
    0.15 s of them.

    Fires the killed node had claimed and not sent, and that its replica could
    not take over (killed too), arrive once, first from the sweeper: at most
    the ``CLAIM_LEAD`` of fires a node claims ahead of their due time."""
    kills = out.events.get("kill", [])
    killed = max(1, sum(len(n.killed_at_ms) for n in cluster.nodes.values()))
    for _job, fire_ms, attempts in out.tally.redeliveries:
        assert attempts.count(1) <= 1, attempts
        assert any(k - 2000 <= fire_ms <= k + 1000 for k in kills), (
            f"a fire due at {fire_ms}, away from every kill, was delivered {attempts}")
    repeated = [r for r in out.tally.redeliveries if len(r[2]) > 1]
    swept = out.tally.redispatched_first
    print(f"per killed node ({killed}): arrived twice {len(repeated) / killed:.2f}, "
          f"first sent by the sweeper {len(swept) / killed:.2f}")
    assert len(repeated) <= MAX_REPEATED_PER_KILLED_NODE * killed, (
        f"{len(repeated)} fires arrived more than once: {repeated[:10]}")
    assert len(swept) <= int(rate * CLAIM_LEAD + 1) * killed, swept[:10]


def check_kill_lateness(out: Outcome) -> None:
    """Fires due around a kill are sent by the job's other replica (or the
    restarted node) less than a second later than the steady state's worst.
    The exception is the handful the killed node had marked started but not
    yet sent (a window of milliseconds): nobody can tell whether they went
    out, so the lease sweeper sends them again, a lease later
    (``at_least_once``)."""
    kills = out.events["kill"]
    steady = out.steady(kills)
    base = steady[-1] if steady else 0
    for k in kills:
        near = out.tally.lateness(k - 1000, k + AROUND_MS, first_attempts_only=True)
        assert near, "no fire due around the kill"
        extra = near[-1] - base
        assert extra < MAX_EXTRA_LATENESS_MS, (
            f"a kill made fires {extra} ms later than the steady state's worst ({base} ms): "
            f"p99 {pct(near, 99)} max {near[-1]} ms")
    swept = out.tally.redispatched_first
    for _job, fire_ms, _late in swept:
        assert any(k - 2000 <= fire_ms <= k + 1000 for k in kills), (fire_ms, kills)
    assert len(swept) <= MAX_SWEPT_PER_KILL * len(kills), (
        f"{len(swept)} fires first sent by the sweeper: {swept[:10]}")


def _kills(cluster: Cluster, schedule: list[tuple[float, list[str]]], restart_after_s: float):
    actions = []
    for offset, ids in schedule:
        actions.append((offset, "kill", lambda ids=ids: [cluster.kill(i) for i in ids]))
        actions.append((offset + restart_after_s, "restart",
                        lambda ids=ids: [cluster.restart(i, wait=False) for i in ids]))
    return actions


def _rate(fires: Fires) -> float:
    w: Workload | None = fires.workload
    return 0.0 if w is None else w.rate


def test_sigkill_one_of_three_and_restart(cluster, fires):
    """3 nodes, 400 fires/s; one SIGKILLed mid-run and restarted 3 s later.

    Every job fires once in the 6 s before the kill and twice after its
    restart: the steady state is seen before and after, and the sweeper's
    redeliveries (a lease after the kill) fall inside the window."""
    out = run_scenario(cluster, fires, nodes=3, window_s=20,
                       actions=_kills(cluster, [(6.0, ["n2"])], 3.0))
    print(out.describe("one of three"))
    check_no_loss_no_double(cluster, fires, out)
    check_redeliveries(cluster, out, _rate(fires))
    check_kill_lateness(out)


@pytest.mark.soak
def test_soak_sigkill_every_20s_for_3_minutes(cluster, fires):
    """The 3-minute chaos run: a node SIGKILLed every 20 s, in turn, restarted 5 s later."""
    schedule = [(10.0 + 20 * k, [f"n{1 + k % 3}"]) for k in range(9)]
    out = run_scenario(cluster, fires, nodes=3, window_s=180,
                       actions=_kills(cluster, schedule, 5.0), settle_s=10.0)
    print(out.describe("soak"))
    check_no_loss_no_double(cluster, fires, out)
    check_redeliveries(cluster, out, _rate(fires))
    check_kill_lateness(out)


def test_two_of_five_killed_at_once(cluster, fires):
    """5 nodes; two SIGKILLed together, so some jobs lose both owners until the
    membership notices: no fire lost (late within the misfire grace is
    allowed), none dispatched twice."""
    out = run_scenario(cluster, fires, nodes=5, window_s=20,
                       actions=_kills(cluster, [(6.0, ["n2", "n4"])], 6.0))
    print(out.describe("two of five"))
    check_no_loss_no_double(cluster, fires, out)
    check_redeliveries(cluster, out, _rate(fires))
    late = out.tally.lateness()
    assert late[-1] < 300_000, "later than the misfire grace"
