"""The agent directory contract, once, against Redis and the in-process twin."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cronman.config import Settings
from cronman.coordination.agents import (
    CANCELLED,
    DONE,
    FENCED,
    FULL,
    GONE,
    LIVE,
    LOST,
    OFFERED,
    PLACED,
    RENEWED,
    RUNNING,
    STOP,
    STOPPING,
    AgentInfo,
    Capacity,
)
from cronman.coordination.agents_memory import InProcessAgentDirectory
from cronman.coordination.agents_redis import RedisAgentDirectory


@pytest.fixture(params=["memory", "redis"])
def directory(request) -> Iterator[object]:
    if request.param == "memory":
        d = InProcessAgentDirectory()
    else:
        url = request.getfixturevalue("redis_url")
        prefix = f"t{time.monotonic_ns()}"
        d = RedisAgentDirectory(Settings(redis_url=url, redis_key_prefix=prefix))
    yield d
    d.close()


def agent(agent_id="a1", cpu=2.0, memory_mb=1024, slots=2, **labels) -> AgentInfo:
    return AgentInfo(id=agent_id, capacity=Capacity(cpu, memory_mb, slots), labels=labels,
                     runtime="containerd")


def start(run_id, attempt=1):
    return {"kind": "start", "run_id": run_id, "attempt": attempt}


def place(d, agent_id, run_id, attempt=1, cpu=1.0, mem=256, offer_ms=5000):
    return d.place(agent_id, run_id, attempt, cpu, mem, start(run_id, attempt), offer_ms, 60000)


def test_agents_heartbeat_with_capacity_and_reservations(directory):
    d = directory
    d.agent_heartbeat(agent(zone="a"), 2000)
    d.agent_heartbeat(agent("a2", cpu=4), 2000)
    assert [a.id for a in d.live_agents()] == ["a1", "a2"]
    assert place(d, "a1", "r1", cpu=1.5, mem=512) == PLACED
    a1 = d.live_agents()[0]
    assert a1.labels == {"zone": "a"} and a1.matches({"zone": "a"}) and not a1.matches({"z": "b"})
    assert a1.used == Capacity(1.5, 512, 1) and a1.free == Capacity(0.5, 512, 1)
    assert a1.last_heartbeat is not None
    assert place(d, "a1", "r2", cpu=1.0) == FULL  # 0.5 cores left
    assert place(d, "a1", "r2", cpu=0.5, mem=600) == FULL  # 512 MiB left
    assert place(d, "a1", "r2", cpu=0.5, mem=512) == PLACED
    assert place(d, "a1", "r3", cpu=0.0001, mem=1) == FULL  # no slot left
    assert place(d, "nobody", "r3") == GONE
    d.agent_leave("a2")
    assert [a.id for a in d.live_agents()] == ["a1"]
    assert place(d, "a2", "r3") == GONE


def test_the_life_of_a_placement(directory):
    d = directory
    d.agent_heartbeat(agent(), 5000)
    assert place(d, "a1", "r1") == PLACED
    assert place(d, "a1", "r1") == LIVE  # a live placement: adopt it, do not place again
    assert d.next_messages("a1", 1.0) == [start("r1")]
    assert d.next_messages("a1", 0.05) == []
    (p,) = d.placements(["r1"])
    assert (p.state, p.agent_id, p.attempt, p.live) == (OFFERED, "a1", 1, True)
    assert d.ack("a1", "r1", 1, 5000)
    assert not d.ack("a1", "r1", 1, 5000)  # once
    assert d.renew("a1", [("r1", 1), ("r9", 1)], 5000) == [RENEWED, FENCED]
    assert d.take("r1") is None  # not done yet
    assert d.finish("a1", "r1", 1, {"ok": True, "result": {"exit_code": 0}}, 60000)
    assert d.live_agents()[0].used == Capacity(0, 0, 0)
    (p,) = d.placements(["r1"])
    assert p.state == DONE and p.has_outcome and not p.live
    assert d.take("r1") == {"ok": True, "result": {"exit_code": 0}}
    assert d.take("r1") is None  # taken once
    assert d.placements(["never"]) == [None]


def test_stop_withdraws_an_offer_and_tells_a_running_agent(directory):
    d = directory
    d.agent_heartbeat(agent(), 5000)
    place(d, "a1", "r1")
    assert d.request_stop("r1", 1) == CANCELLED
    assert not d.ack("a1", "r1", 1, 5000)  # withdrawn: start nothing
    assert d.live_agents()[0].used.slots == 0
    place(d, "a1", "r2")
    d.next_messages("a1", 0.1)
    assert d.ack("a1", "r2", 1, 5000)
    assert d.request_stop("r2", 1) == STOPPING
    assert d.next_messages("a1", 1.0) == [{"kind": "stop", "run_id": "r2", "attempt": 1}]
    assert d.renew("a1", [("r2", 1)], 5000) == [STOP]
    assert d.finish("a1", "r2", 1, {"ok": False, "error": "stopped"}, 60000)
    assert d.take("r2")["error"] == "stopped"


def test_a_lapsed_lease_is_lost_and_a_later_attempt_fences_the_old_agent(directory):
    d = directory
    d.agent_heartbeat(agent(), 5000)
    d.agent_heartbeat(agent("a2"), 5000)
    place(d, "a1", "r1")
    assert d.ack("a1", "r1", 1, 1000)  # long enough that a loaded machine keeps it to the next lines
    assert d.mark_lost("r1", 1) is None  # the lease still runs
    assert place(d, "a2", "r1", attempt=2) == LIVE
    time.sleep(1.1)
    (p,) = d.placements(["r1"])
    assert p.state == RUNNING and not p.live
    assert d.mark_lost("r1", 1) == RUNNING
    assert d.mark_lost("r1", 1) is None
    assert d.placements(["r1"])[0].state == LOST
    assert d.live_agents()[0].used.slots == 0
    assert place(d, "a2", "r1", attempt=2) == PLACED
    assert place(d, "a1", "r1", attempt=1) == FENCED  # a stale node cannot go back
    # The first agent returns: fenced, and its outcome is dropped.
    assert d.renew("a1", [("r1", 1)], 5000) == [FENCED]
    assert not d.finish("a1", "r1", 1, {"ok": True}, 60000)
    assert d.ack("a2", "r1", 2, 5000)
    assert d.finish("a2", "r1", 2, {"ok": True, "result": {"agent_id": "a2"}}, 60000)
    assert d.take("r1")["result"] == {"agent_id": "a2"}


def test_an_offer_never_acknowledged_is_lost_as_offered(directory):
    d = directory
    d.agent_heartbeat(agent(), 5000)
    place(d, "a1", "r1", offer_ms=100)
    time.sleep(0.2)
    assert d.mark_lost("r1", 1) == OFFERED  # nothing was started
    assert not d.ack("a1", "r1", 1, 5000)


def test_an_agent_whose_heartbeat_lapsed_is_not_live(directory):
    d = directory
    d.agent_heartbeat(agent(), 500)
    assert [a.id for a in d.live_agents()] == ["a1"]
    time.sleep(0.6)
    assert d.live_agents() == []
    assert place(d, "a1", "r1") == GONE


def test_a_running_containers_output_is_kept_for_its_ttl_and_replaced(directory):
    d = directory
    assert d.output("r1") is None
    first = {"attempt": 1, "agent_id": "a1", "stdout": "one\n", "stderr": "", "at": "t"}
    d.put_output("r1", first, 300)
    assert d.output("r1") == first
    d.put_output("r1", {**first, "stdout": "one\ntwo\n"}, 300)
    assert d.output("r1")["stdout"] == "one\ntwo\n" and d.output("r2") is None
    time.sleep(0.4)
    assert d.output("r1") is None
