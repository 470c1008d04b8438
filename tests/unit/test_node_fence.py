"""Outcome writes fenced on the node holding the run (SQLite store, in-process
coordinator): a node whose run was taken from it cannot overwrite the record
its new holder wrote."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from cronman.callbacks import TargetRegistry
from cronman.callbacks.recording import RecordingTarget
from cronman.config import Settings
from cronman.coordination.memory import InProcessCoordinator
from cronman.models import RunFilter
from cronman.scheduler.node import SchedulerNode
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.store_data import job_spec


def test_a_run_replaced_from_another_node_keeps_its_record(tmp_path):
    """``replace`` on node A fails B's run in flight and takes its row; B's
    attempt answers later, and its outcome is no longer written over A's."""
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    store = open_store(url)
    jobs = store.jobs.create_jobs([
        job_spec(f"replace-{i}", schedule={"kind": "interval", "every": 1},
                 concurrency="replace") for i in range(16)])
    # Both nodes own every job, each the first owner of about half of them. a
    # starts alone and fires every job; b joins a moment later and fires its
    # half from then on: their next fires replace a's runs still in flight.
    coord = InProcessCoordinator(ttl=5.0)
    # Every attempt outlasts the next fire; the long lease keeps B's renewal
    # from noticing the replacement before its attempt answers.
    targets = {n: RecordingTarget("http", delay=1.5) for n in ("a", "b")}
    stores = {n: open_store(url) for n in ("a", "b")}
    nodes = [SchedulerNode(Settings(node_id=n, lease_seconds=60.0, heartbeat_ttl=5.0,
                                    replicas=2),
                           stores[n], coord if n == "a" else coord.handle(),
                           TargetRegistry([targets[n]]), registry=CollectorRegistry(),
                           run_maintenance=False) for n in ("a", "b")]

    async def main():
        tasks = [asyncio.create_task(nodes[0].main())]
        await asyncio.sleep(1.2)
        tasks.append(asyncio.create_task(nodes[1].main()))
        await asyncio.sleep(3.3)
        for n in nodes:
            n.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 20
    sent_by = {r.delivery.run_id: n for n, t in targets.items() for r in t.records}
    runs = [r for j in jobs for r in store.runs.list_runs(j.id, RunFilter(), 100, None).items]
    replaced = [r for r in runs if (r.error or "").startswith("replaced by run ")]
    remote = [r for r in replaced if sent_by.get(r.id) not in (None, r.node_id)]
    assert remote, [(r.status, r.node_id, sent_by.get(r.id), r.error) for r in runs]
    assert all(r.status == "failed" for r in replaced), [
        (r.status, r.node_id, sent_by.get(r.id)) for r in replaced]
    for s in (store, *stores.values()):
        s.close()
