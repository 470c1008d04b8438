"""Container runs run only what both their namespace's grant and the worker
agent's own host policy allow, whatever a run's stored definition (or the
message handing it over) asks: root, the host's network, the process runtime.
The scheduler node checks the grant before placing; the agent checks both
(in-process agents, real containerd and Redis; a private PostgreSQL for the
database outage)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from cronman.config import Settings
from cronman.coordination.agents import DONE, PLACED
from cronman.coordination.agents_redis import RedisAgentDirectory
from cronman.host_policy import UNRESTRICTED, HostPolicy
from cronman.worker_agent.runtimes.process import ProcessRuntime
from tests.agent.harness import delivery, wait_until
from tests.agent.test_placement import run_rig
from tests.support import pg_server

REFUSED = "refused by the host policy of worker agent"
BY_GRANT = "refused by the host policy of namespace"
HOST_AND_NONE = frozenset({"none", "host"})
#: Spellings of uid or gid 0 the runtimes run as root (``parse_user``).
ROOT_SPELLINGS = ("root", "0:0", "+0", "-0", "0_0", "65534:+0")
ROOT_SH = ["sh", "-c", "id -u; id -g"]


async def forge(rig, agent_id, namespace, *, host_policy=None, **target):
    """A start message handed straight to the agent (a forged one, or from an
    older node): the agent's recorded outcome."""
    run = delivery(ROOT_SH, namespace=namespace, **target)
    message = {"kind": "start", "run_id": run.run_id, "attempt": 1, "job_id": "job",
               "scheduled_for": "2026-01-01T00:00:00Z", "namespace": namespace,
               "target": run.target, "timeout": 10}
    if host_policy is not None:
        message["host_policy"] = host_policy
    directory = RedisAgentDirectory(rig.settings)
    try:
        assert directory.place(agent_id, run.run_id, 1, 1.0, 64, message, 5000,
                               60000) == PLACED

        def done():
            (found,) = directory.placements([run.run_id])
            return found is not None and found.state == DONE

        await wait_until(done, 10, "the forged run's outcome")
        outcome = directory.take(run.run_id)
    finally:
        directory.close()
    assert outcome is not None
    return outcome


def test_a_containerd_agent_refuses_root_and_the_host_network(containerd, namespace,
                                                              redis_url):
    async def body(rig):
        agent = await rig.start_agent("a")
        # The namespace's grant allows anything (an admin wrote the job): the
        # agent's own policy still refuses, every spelling of uid or gid 0.
        target = rig.target(grants=lambda ns: UNRESTRICTED)
        for user in ROOT_SPELLINGS:
            out = await target.deliver(delivery(ROOT_SH, user=user))
            assert not out.ok and not out.retryable, (user, out)
            assert f"{REFUSED} a: target.user" in out.error, (user, out)
            assert "logs_tail" not in out.result
        out = await target.deliver(delivery(["ls", "/sys/class/net"], network="host"))
        assert not out.ok and f"{REFUSED} a: target.network" in out.error, out
        # A user the runtimes cannot read is refused (by the node, before placing).
        out = await target.deliver(delivery(ROOT_SH, user="alice"))
        assert not out.ok and not out.retryable and "target.user" in out.error, out
        assert await rig.runtime().list({"cronman.agent": "a"}) == []  # nothing ever started
        # No user named: not root.
        out = await target.deliver(delivery(["id", "-u"]))
        assert out.ok and out.result["logs_tail"]["stdout"] == "65534\n", out
        assert agent.reported == len(ROOT_SPELLINGS) + 2
        # A message handed straight to it, with a grant that allows root: refused.
        for user in ROOT_SPELLINGS:
            outcome = await forge(rig, "a", "default", host_policy=UNRESTRICTED.to_dict(),
                                  user=user)
            assert not outcome["ok"] and f"{REFUSED} a: target.user" in outcome["error"], (
                user, outcome)

    run_rig(containerd, namespace, redis_url, body)


def test_an_agent_whose_operator_allows_root_runs_it(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("a", policy=HostPolicy(root=True, networks=frozenset({"none"})))
        target = rig.target(grants=lambda ns: UNRESTRICTED)
        out = await target.deliver(delivery(["id", "-u"], user="root"))
        assert out.ok and out.result["logs_tail"]["stdout"] == "0\n", out
        out = await target.deliver(delivery(["true"], network="host"))
        assert not out.ok and f"{REFUSED} a: target.network" in out.error

    run_rig(containerd, namespace, redis_url, body)


def test_root_granted_to_one_namespace_is_not_granted_to_every_other(containerd, namespace,
                                                                     redis_url):
    """An agent allows root and the host's network for the one namespace
    granted them: another namespace's stored root job (written before its
    grant was narrowed, or straight to the database) runs nowhere."""
    granted = {"ops": HostPolicy(root=True, networks=HOST_AND_NONE)}

    async def body(rig):
        agent = await rig.start_agent("a", policy=HostPolicy(root=True, networks=HOST_AND_NONE))
        target = rig.target(grants=lambda ns: granted.get(ns, HostPolicy()))
        out = await target.deliver(delivery(ROOT_SH, namespace="ops", user="root",
                                            network="host"))
        assert out.ok and out.result["logs_tail"]["stdout"] == "0\n0\n", out
        for extra, field in (({"user": "root"}, "user"), ({"user": "65534:0"}, "user"),
                             ({"network": "host"}, "network")):
            out = await target.deliver(delivery(ROOT_SH, namespace="beta", **extra))
            assert not out.ok and not out.retryable, out
            assert f"{BY_GRANT} 'beta' (its grant): target.{field}" in out.error, out
        assert agent.reported == 1  # the node refused them: nothing was placed
        # Handed straight to the agent: it checks the grant the message carries...
        outcome = await forge(rig, "a", "beta", host_policy=HostPolicy().to_dict(), user="root")
        assert not outcome["ok"] and "target.user: namespace 'beta', by its grant" in (
            outcome["error"]), outcome
        outcome = await forge(rig, "a", "beta", host_policy=HostPolicy().to_dict(),
                              network="host")
        assert not outcome["ok"] and "target.network: namespace 'beta'" in outcome["error"]
        # ...and a message that carries none grants nothing, even a non-root run.
        outcome = await forge(rig, "a", "beta")
        assert not outcome["ok"] and f"{REFUSED} a: the message carries no host policy of " \
            "namespace 'beta'" in outcome["error"], outcome
        assert "logs_tail" not in outcome["result"]
        assert await rig.runtime().list({"cronman.agent": "a"}) == []

    run_rig(containerd, namespace, redis_url, body)


@pytest.mark.skipif(not pg_server.available(),
                    reason="no PostgreSQL server binaries to start a private one")
def test_a_database_outage_keeps_each_namespaces_own_grant(containerd, namespace, redis_url):
    """The grants cannot be read (the database is down): a namespace keeps the
    last grant read for it -- narrower than the default here -- and one never
    read fails its attempt retryable; none gets the operator's default."""
    from cronman.processes.grants import store_grants
    from cronman.store import open_store
    from cronman.store.host_policies import CACHE_SECONDS
    from cronman.store.migrate import upgrade

    with pg_server.private_postgres() as pg:
        url = pg.create_database(f"grants{uuid.uuid4().hex[:8]}")
        upgrade(url)
        store = open_store(url)
        store.host_policies.put("ops", {"networks": ["none"]}, by=None)
        operator = Settings(host_policy='{"networks": ["none", "host"]}')
        lax = operator.host_policy_default
        assert lax == HostPolicy(networks=HOST_AND_NONE)

        async def body(rig):
            await rig.start_agent("a", policy=lax)
            target = rig.target(grants=store_grants(store, lax), settings=operator)
            out = await target.deliver(delivery(["true"], namespace="ops"))
            assert out.ok, out
            out = await target.deliver(delivery(["true"], namespace="ops", network="host"))
            assert not out.ok and f"{BY_GRANT} 'ops'" in out.error, out
            pg.stop("immediate")
            await asyncio.sleep(CACHE_SECONDS + 0.2)  # past the store's cache
            out = await target.deliver(delivery(["true"], namespace="ops", network="host"))
            assert not out.ok and not out.retryable and f"{BY_GRANT} 'ops'" in out.error, out
            out = await target.deliver(delivery(["true"], namespace="ops"))
            assert out.ok, out
            out = await target.deliver(delivery(["true"], namespace="beta", network="host"))
            assert not out.ok and out.retryable, out
            assert "cannot read the host policy of namespace 'beta'" in out.error, out

        try:
            run_rig(containerd, namespace, redis_url, body)
        finally:
            store.close()


def test_a_process_agent_runs_only_granted_namespaces(containerd, namespace, redis_url):
    granted = {"ops": HostPolicy(process=True)}

    async def body(rig):
        await rig.start_agent("p", runtime=ProcessRuntime())
        target = rig.target(placement_timeout=1.0,
                            grants=lambda ns: granted.get(ns, HostPolicy()))
        out = await target.deliver(delivery(["id", "-u"], namespace="ops"))
        assert out.ok and out.result["logs_tail"]["stdout"] != "0\n", out
        out = await target.deliver(delivery(["id", "-u"], namespace="beta"))
        assert not out.ok and "no worker agent" in out.error, out
        assert "process runtime" in out.error and "'beta'" in out.error
        # A start message handed straight to the agent that says nothing of a
        # grant (forged, or from an older node) is refused by the agent itself,
        # and so is one that claims a grant but asks for root.
        outcome = await forge(rig, "p", "beta")
        assert f"{REFUSED} p: the message carries no host policy of namespace 'beta'" in (
            outcome["error"]), outcome
        outcome = await forge(rig, "p", "beta", host_policy={"process": True}, user="root")
        assert f"{REFUSED} p: target.user" in outcome["error"], outcome
        outcome = await forge(rig, "p", "beta", host_policy={"process": False})
        assert "which the host policy of namespace 'beta'" in outcome["error"], outcome
        assert "logs_tail" not in outcome["result"]

    run_rig(containerd, namespace, redis_url, body)
