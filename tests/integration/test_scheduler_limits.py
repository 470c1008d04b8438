"""Limits carried out by a real ``cronman scheduler`` process without Redis
(its counters in memory): a herd at one receiver never sees more than the
limit's rate and concurrency, every fire arrives once, the runs say what
they waited on; fires that wait past their misfire grace go by their
policy."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.limits import parse_limit
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.databases import migrated_pg_database
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

HERD = 60
RATE = 20
CONCURRENCY = 4


@pytest.fixture
def env(tmp_path):
    with migrated_pg_database() as url, Receiver() as rx, Processes(tmp_path) as procs:
        store = open_store(url)
        try:
            yield url, rx, procs, store, make_app(Settings(database_url=url),
                                                  store=store).test_client()
        finally:
            store.close()


def test_a_herd_is_held_to_its_limit_and_waits_past_grace_go_by_the_misfire_policy(env):
    url, rx, procs, store, client = env
    rx.reply("/herd", status=204, delay=0.15)
    rx.reply("/slow", status=204)
    store.limits.create_limit(parse_limit({"name": "rx", "match": {"host": "127.0.0.1"},
                                           "rate": RATE, "concurrency": CONCURRENCY}), by=None)
    store.limits.create_limit(parse_limit({"name": "slowhost", "match": {"label": "lim:slow"},
                                           "rate": 1}), by=None)
    node = procs.scheduler(url, "lim-1", env={"CRONMAN_SYNC_POLL_INTERVAL": "0.5"})
    at = format_rfc3339((utcnow() + timedelta(seconds=3)).replace(microsecond=0))
    jobs = [{"name": f"herd-{i}", "schedule": {"kind": "once", "at": at},
             "target": {"kind": "http", "url": rx.url("/herd")},
             "priority": 0 if i < HERD - 5 else 5}
            for i in range(HERD)]
    jobs += [{"name": f"slow-{i}", "schedule": {"kind": "once", "at": at},
              "labels": {"lim": "slow"}, "misfire": {"policy": "skip", "grace": 1},
              "target": {"kind": "http", "url": rx.url("/slow").replace("127.0.0.1",
                                                                         "localhost")}}
             for i in range(5)]
    resp = client.post("/v1/jobs/bulk", json={"jobs": jobs})
    assert resp.status_code == 201, resp.get_json()
    ids = {j["name"]: j["id"] for j in resp.get_json()["items"]}

    def runs(name):
        return client.get(f"/v1/jobs/{ids[name]}/runs").get_json()["items"]

    wait_for(lambda: len(rx.requests_for("/herd")) >= HERD, 30, "the herd delivered",
             alive=lambda: node.running())
    wait_for(lambda: all(r["status"] in ("succeeded", "skipped")
                         for i in range(5) for r in runs(f"slow-{i}") or [{"status": "?"}]),
             15, "the slow ones ended")
    time.sleep(0.5)
    herd = rx.requests_for("/herd")
    firsts = Counter(r.header("Cronman-Job-Id") for r in herd)
    assert len(firsts) == HERD and max(firsts.values()) == 1
    in_flight, per_second = rx.max_in_flight_for("/herd"), rx.max_per_second("/herd")
    print(f"herd of {HERD}: max in flight {in_flight} (limit {CONCURRENCY}), "
          f"max per second {per_second} (limit {RATE})")
    assert in_flight == CONCURRENCY
    assert per_second <= RATE
    # The raised ones first: they were held in priority order.
    order = [r.header("Cronman-Job-Id") for r in sorted(herd, key=lambda r: r.arrived_at)]
    raised = {ids[f"herd-{i}"] for i in range(HERD - 5, HERD)}
    assert set(order[:CONCURRENCY + 5]) >= raised
    waited = [r for i in range(HERD) for r in runs(f"herd-{i}")
              if (r.get("gate") or {}).get("limit", {}).get("waited_ms")]
    assert len(waited) >= HERD - 2 * RATE, len(waited)
    assert all(r["gate"]["limit"]["name"] == "rx" for r in waited)
    slow = [r for i in range(5) for r in runs(f"slow-{i}")]
    skipped = [r for r in slow if r["status"] == "skipped"]
    assert len(slow) == 5 and len(skipped) >= 3, slow
    assert all("waited on slowhost past its misfire grace (1 s): misfire policy skip"
               in r["error"] for r in skipped), skipped
    assert len(rx.requests_for("/slow")) == 5 - len(skipped)
