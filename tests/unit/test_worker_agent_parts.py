"""Pure parts of the worker agent: log tails, users, the OCI spec, chain ids,
agent labels, capacity, and the placement queue's priorities."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from cronman.config import Settings, parse_labels
from cronman.coordination.agents import AgentInfo, Capacity
from cronman.coordination.agents_memory import InProcessAgentDirectory
from cronman.logtail import LogTail
from cronman.worker_agent.runtime import ContainerSpec, RuntimeError_, parse_user
from cronman.worker_agent.runtimes.containerd_images import chain_ids
from cronman.worker_agent.runtimes.oci_spec import build_spec


def test_log_tail_keeps_the_last_bytes():
    tail = LogTail(8)
    tail.write(b"abc")
    tail.write(b"defghij")
    assert tail.text() == "cdefghij" and tail.total == 10
    tail.write(b"0123456789")
    assert tail.text() == "23456789"
    cut = LogTail(4)
    cut.write("xé!!".encode())  # 5 bytes: the é is cut in half
    assert cut.text() == "!!" or cut.text().endswith("!!")


@pytest.mark.parametrize(("user", "ids"), [
    (None, (65534, 65534)), ("root", (0, 0)), ("nobody", (65534, 65534)),
    ("1000", (1000, 1000)), ("1000:50", (1000, 50)),
])
def test_parse_user(user, ids):
    assert parse_user(user) == ids


def test_parse_user_refuses_names():
    with pytest.raises(RuntimeError_):
        parse_user("alice")


def test_oci_spec_limits_network_user_and_command():
    image = {"Entrypoint": ["/entry"], "Cmd": ["arg"], "Env": ["PATH=/bin", "A=image"],
             "WorkingDir": "/work"}
    spec = build_spec(ContainerSpec(name="c1", image="i", cpu=0.25, memory_mb=64,
                                    env={"A": "job"}), image, namespace="ns")
    assert spec["process"]["args"] == ["/entry", "arg"]
    assert spec["process"]["env"] == ["PATH=/bin", "A=job"]
    assert spec["process"]["user"] == {"uid": 65534, "gid": 65534}
    assert spec["process"]["cwd"] == "/work" and spec["process"]["noNewPrivileges"]
    resources = spec["linux"]["resources"]
    assert resources["memory"]["limit"] == 64 * 1024 * 1024
    assert resources["cpu"] == {"quota": 25000, "period": 100000}
    assert {"type": "network"} in spec["linux"]["namespaces"]
    assert spec["linux"]["cgroupsPath"] == "/cronman/ns/c1"
    assert "CAP_SYS_ADMIN" not in spec["process"]["capabilities"]["bounding"]
    host = build_spec(ContainerSpec(name="c2", image="i", command=["true"], network="host",
                                    user="root"), image, namespace="ns")
    assert host["process"]["args"] == ["true"]
    assert {"type": "network"} not in host["linux"]["namespaces"]
    assert host["process"]["user"] == {"uid": 0, "gid": 0}
    with pytest.raises(ValueError, match="no command"):
        build_spec(ContainerSpec(name="c3", image="i"), {}, namespace="ns")


def test_chain_ids_follow_the_oci_rule():
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    second = "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()
    assert chain_ids([a, b]) == [a, second]


def test_agent_labels_setting():
    assert parse_labels("zone=a, disk = ssd ,") == {"zone": "a", "disk": "ssd"}
    assert Settings(agent_labels="k=v").agent_label_map == {"k": "v"}
    with pytest.raises(ValueError, match="key=value"):
        Settings(agent_labels="novalue")
    with pytest.raises(ValueError, match="AGENT_CPU"):
        Settings(agent_cpu=0)


def test_capacity_holds_and_selector_matches():
    free = Capacity(1.0, 256, 1)
    assert free.holds(1.0, 256) and not free.holds(1.01, 1) and not free.holds(0.1, 257)
    assert not Capacity(4, 4096, 0).holds(0.1, 1)
    agent = AgentInfo(id="a", capacity=Capacity(2, 512, 2), labels={"zone": "a", "gpu": "1"},
                      used=Capacity(1, 256, 1))
    assert agent.free == Capacity(1, 256, 1)
    assert agent.matches({}) and agent.matches({"zone": "a"})
    assert not agent.matches({"zone": "a", "gpu": "0"})


def test_placer_places_higher_priority_first_and_keeps_room_for_it():
    from cronman.callbacks.container_placement import Placer, Request

    directory = InProcessAgentDirectory()
    directory.agent_heartbeat(AgentInfo(id="a", capacity=Capacity(2, 1024, 1)), 60_000)
    directory.agent_heartbeat(AgentInfo(id="b", capacity=Capacity(1, 1024, 4),
                                        labels={"small": "yes"}), 60_000)

    async def call(fn, *args):
        return fn(*args)

    async def main():
        loop = asyncio.get_running_loop()
        placer = Placer(directory, call, offer_ms=5000, keep_ms=60000, poll=0.05)

        def request(run_id, priority, cpu, selector=None):
            return Request(run_id, 1, priority, cpu, 64, selector or {}, {"run_id": run_id},
                           loop.create_future())

        # "big" needs 2 cores: only a fits. "low" fits anywhere.
        big = asyncio.ensure_future(placer.place(request("big", 5, 2.0)))
        low = asyncio.ensure_future(placer.place(request("low", 1, 0.5)))
        assert await asyncio.wait_for(big, 2) == ("placed", "a")
        assert await asyncio.wait_for(low, 2) == ("placed", "b")  # a's one slot went to the higher priority
        # a is full: "waits" stays queued and blocks a from the lower priority "later".
        waits = asyncio.ensure_future(placer.place(request("waits", 9, 2.0)))
        later = asyncio.ensure_future(placer.place(request("later", 0, 0.5)))
        assert await asyncio.wait_for(later, 2) == ("placed", "b")
        await asyncio.sleep(0.2)
        assert not waits.done()
        directory.finish("a", "big", 1, {"ok": True}, 60000)  # never acked: fenced, but
        directory.release("a", "big", 1)  # the reservation goes
        placer.kick()
        assert await asyncio.wait_for(waits, 2) == ("placed", "a")

    asyncio.run(main())
