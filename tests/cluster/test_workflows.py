"""Dependencies and triggers in a real 3-node cluster, a node SIGKILLed while
downstream runs are pending: exactly one downstream run per upstream success.

Upstream interval jobs fire every second; each has a downstream ``after`` job
(``any``), and two of them are joined by an ``all`` job. The downstream
callbacks take a while to answer, so the node killed (the one holding the most
downstream runs in flight at that moment, by their rows) has some pending. The
jobs are made through the API's own code in-process, on the cluster's
database. Once the upstreams are paused and every run has ended:

- every succeeded upstream run was consumed by exactly one run of each of
  its ``any`` jobs, and by exactly one run of the ``all`` job (with its
  partner's success), and every downstream run consumed upstream successes;
- every downstream run succeeded and reached the receiver under its run id
  (a repeat of a callback carries the same run id: the receiver dedupes).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, select

from cronman.config import Settings
from cronman.models import RunFilter
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.store.tables import trigger_events
from cronman.timeutil import parse_rfc3339, utcnow
from tests.cluster.harness import Cluster
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.counts_only, pytest.mark.postgres,
              pytest.mark.slow]

CHAINS = 12
DOWNSTREAM_DELAY = 0.8  # seconds the downstream receiver takes to answer
RUN_BEFORE_KILL = 6.0
RUN_AFTER_KILL = 12.0


def _all_runs(store, job_id: str) -> list:
    return store.runs.list_runs(job_id, RunFilter(since=utcnow() - timedelta(hours=1)),
                                1000, None).items


def test_one_downstream_run_per_upstream_success_through_a_node_kill(cluster: Cluster):
    store = open_store(cluster.database_url)
    app = make_app(Settings(database_url=cluster.database_url, allow_private_targets=True),
                     store=store)
    api = app.test_client()
    with Receiver() as rx:
        rx.reply("/down", status=204, delay=DOWNSTREAM_DELAY)
        rx.reply("/joined", status=204, delay=DOWNSTREAM_DELAY)
        cluster.start(3)

        def create(spec):
            resp = api.post("/v1/jobs", json=spec)
            assert resp.status_code == 201, resp.get_json()
            return resp.get_json()

        ups, downs = [], []
        for i in range(CHAINS):
            ups.append(create({"name": f"up-{i:02d}", "namespace": "wf",
                               "schedule": {"kind": "interval", "every": 1},
                               "target": {"kind": "http", "url": rx.url("/up")}}))
            downs.append(create({"name": f"down-{i:02d}", "namespace": "wf",
                                 "schedule": {"kind": "after", "jobs": [f"up-{i:02d}"],
                                              "mode": "any"},
                                 "retry": {"max_attempts": 5, "min_backoff": 0.2},
                                 "target": {"kind": "http", "url": rx.url("/down")}}))
        joined = create({"name": "joined", "namespace": "wf",
                         "schedule": {"kind": "after", "jobs": ["up-00", "up-01"]},
                         "target": {"kind": "http", "url": rx.url("/joined")}})
        down_ids = [d["id"] for d in downs] + [joined["id"]]

        rx.wait_for(3 * CHAINS, timeout=30, path="/down")
        time.sleep(RUN_BEFORE_KILL)
        cluster.assert_all_running()
        # Kill the node holding the most downstream runs in flight right now.
        held = Counter(r.node_id for runs in store.runs.in_flight_runs(down_ids).values()
                       for r in runs if r.node_id)
        assert held, "no downstream run in flight: nothing to kill under"
        victim, pending = held.most_common(1)[0]
        cluster.kill(victim)
        print(f"killed {victim} holding {pending} downstream runs in flight ({dict(held)})")
        time.sleep(RUN_AFTER_KILL)
        for up in ups:
            assert api.post(f"/v1/jobs/{up['id']}/pause").status_code == 200

        def settled() -> bool:
            if any(store.runs.in_flight_runs([u["id"] for u in ups] + down_ids).values()):
                return False
            return True

        wait_for(settled, 60, "every run ended (the killed node's swept)")
        time.sleep(1.0)

        succeeded = {u["id"]: [r for r in _all_runs(store, u["id"]) if r.status == "succeeded"]
                     for u in ups}
        ups_ok = {up_id: {r.id for r in runs} for up_id, runs in succeeded.items()}
        assert all(ups_ok.values())
        sent = {r.header("Cronman-Run-Id") for r in rx.requests_for("/down")}
        sent |= {r.header("Cronman-Run-Id") for r in rx.requests_for("/joined")}
        for up, down in zip(ups, downs, strict=True):
            runs = _all_runs(store, down["id"])
            assert all(r.status == "succeeded" and r.origin == "upstream" for r in runs), [
                (r.id, r.status, r.error) for r in runs if r.status != "succeeded"]
            consumed = Counter(u["run_id"] for r in runs for u in r.gate["upstream"])
            assert set(consumed) == ups_ok[up["id"]], up["name"]  # none lost, none foreign
            assert max(consumed.values()) == 1, up["name"]  # none twice
            assert {r.id for r in runs} <= sent
        runs = _all_runs(store, joined["id"])
        consumed = Counter(u["run_id"] for r in runs for u in r.gate["upstream"])
        assert max(consumed.values()) == 1
        pairs = [{u["job_id"] for u in r.gate["upstream"]} for r in runs]
        assert all(p == {ups[0]["id"], ups[1]["id"]} for p in pairs)
        # Every success of either upstream was heard once: consumed by a run
        # of the join, or still waiting for its partner -- and what waits is
        # never a complete set (that would have made a run). A success
        # recorded late (from the killed node's outcome mark, after the last
        # set) rightly waits, however early it finished.
        engine = create_engine(cluster.database_url)
        try:
            with engine.connect() as conn:
                pending = conn.execute(
                    select(trigger_events.c.upstream_id, trigger_events.c.upstream_run_id)
                    .where(trigger_events.c.downstream_id == joined["id"],
                           trigger_events.c.consumed_by.is_(None))).all()
        finally:
            engine.dispose()
        waiting = {run_id for _, run_id in pending}
        assert not waiting & set(consumed)
        assert not {ups[0]["id"], ups[1]["id"]} <= {up_id for up_id, _ in pending}
        # The join hears the successes written once it existed: an upstream
        # made before it may have succeeded already (on a slow machine the
        # jobs between take seconds to make). A run due a second after the
        # join was made was written after it.
        heard_from = parse_rfc3339(joined["created_at"]) + timedelta(seconds=1)
        for up in ups[:2]:
            heard = {r.id for r in succeeded[up["id"]] if r.scheduled_for >= heard_from}
            assert heard, up["name"]
            assert heard <= set(consumed) | waiting, up["name"]
        cluster.assert_all_running()
        assert cluster.log_count("Traceback") == 0
    store.close()
