"""A running node's clock stepped (SPEC §6), as NTP steps a host's clock:
ahead past ``CRONMAN_MAX_CLOCK_SKEW`` (1 s) and right again, behind and
right again, then ahead within the bound.

Three real nodes; one runs under the clock shim (``tests/support/clockshim``:
its wall clock moves the moment the test says, its monotonic clock and its
sleeps do not). While its clock is off the node must notice within a few
pulses, stop claiming and step out; its jobs' other owners fire them. No
fire may arrive before its due time, none may be missed, none sent under
two run ids; once its clock is right again the node claims again, and
within the bound it claims on, its offset corrected.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from sqlalchemy import create_engine, text

from cronman.timeutil import now_ms, to_ms
from tests.cluster.counting import describe_missing, tally
from tests.cluster.harness import Cluster, Fires
from tests.support import clockshim
from tests.support.waiting import wait_for

REASON = clockshim.unavailable()
pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(REASON is not None, reason=REASON or "")]

EARLY_BOUND_MS = 50
JUMP_S = 6.0  # well past the 1 s allowed
WITHIN_S = 0.7  # within it
NOTICE_S = 2.0  # the node says it is skewed this soon after a step (pulses every 0.1 s)


def _skewed(cluster: Cluster, node_id: str) -> float:
    return cluster.metrics(node_id).get("cronman_clock_skewed", -1.0)


def _claims(database_url: str, node_id: str) -> list[int]:
    """The due times (ms) of the runs ``node_id`` holds or held."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT scheduled_for FROM scheduled_jobs "
                                     "WHERE node_id = :n"), {"n": node_id}).all()
    finally:
        engine.dispose()
    return sorted(to_ms(r[0]) for r in rows)


def test_a_running_node_whose_clock_steps_fires_nothing_early_and_misses_nothing(
        cluster: Cluster, fires: Fires, tmp_path):
    clock = clockshim.Clock(tmp_path / "jumpy.offset")
    try:
        _run(cluster, fires, clock)
    finally:
        clock.close()


def _run(cluster: Cluster, fires: Fires, clock: clockshim.Clock) -> None:
    nodes = [cluster.start_node("n1", wait=False), cluster.start_node("n2", wait=False),
             cluster.start_node("jumpy", wait=False, env=clock.env())]
    for node in nodes:
        cluster.wait_ready(node)
    workload = fires.create_jobs(cluster.database_url, count=60, every_s=1)
    time.sleep(3)
    assert _skewed(cluster, "jumpy") == 0

    # (step, held for s): ahead past the bound, right again, behind, right
    # again, then ahead within the bound (corrected, the node claims on).
    spans: list[tuple[float, int, int]] = []  # (step, from, until): real ms
    for step, hold in ((JUMP_S, 4.0), (0.0, 4.0), (-JUMP_S, 4.0), (0.0, 4.0),
                       (WITHIN_S, 3.0), (0.0, 2.0)):
        at = now_ms()
        clock.set(step)
        if spans:
            spans[-1] = (*spans[-1][:2], at)
        spans.append((step, at, at))
        out = abs(step) > 1.0
        wait_for(lambda: _skewed(cluster, "jumpy") == int(out), NOTICE_S,  # noqa: B023
                 f"jumpy to say its clock is {'off' if out else 'within bounds'} after a "
                 f"{step:+.1f} s step")
        time.sleep(max(0.0, hold - (now_ms() - at) / 1000))
        cluster.assert_all_running()
        if step and not out:
            offset = cluster.metrics("jumpy")["cronman_clock_offset_seconds"]
            assert _skewed(cluster, "jumpy") == 0 and abs(offset - step) < 0.1, offset
    spans[-1] = (*spans[-1][:2], now_ms())

    end = now_ms() - 2000
    time.sleep(2)
    fires.stop()
    arrivals = fires.arrivals()
    detail = cluster.describe()
    # Nothing arrives early, whatever the node's clock says.
    early = [a for a in arrivals
             if a.scheduled_ms is not None and a.arrived_ms < a.scheduled_ms - EARLY_BOUND_MS]
    assert not early, (len(early), sorted(a.lateness_ms or 0 for a in early)[:5], detail)
    # Nothing missed, nothing doubled (a second first attempt, or two run ids).
    settled = workload.base_ms + 3000
    t = tally(workload, fires.job_ids, arrivals, settled, end)
    assert t.expected > 1000, t.summary()
    assert not t.double_fires and not t.unexpected, (t.summary(), detail)
    assert not t.missing, (describe_missing(t, fires.job_ids), detail)
    runs: dict[tuple[str, int], set[str]] = defaultdict(set)
    for a in arrivals:
        if a.scheduled_ms is not None:
            runs[(a.job_id, a.scheduled_ms)].add(a.run_id)
    doubled = {k: v for k, v in runs.items() if len(v) > 1}
    assert not doubled, (len(doubled), list(doubled.items())[:3])
    # While its clock was off the node claimed nothing due after it noticed
    # (plus the claim lead); before, within the bound and after, its share.
    claims = _claims(cluster.database_url, "jumpy")

    def claimed(lo: int, hi: int) -> list[int]:
        return [ms for ms in claims if lo <= ms < hi]

    for step, since, until in spans:
        if abs(step) > 1.0:
            during = claimed(since + int(NOTICE_S * 1000), until)
            assert not during, (step, len(during), since, until, detail)
        elif step:
            assert claimed(since + 1000, until), ("jumpy claimed nothing within the bound",
                                                  detail)
        elif until - since > 3500:  # (the last span is short)
            assert claimed(since + 2500, until), ("jumpy claimed nothing once right", detail)
    assert claimed(workload.base_ms, spans[0][1]), "jumpy claimed nothing before the step"
