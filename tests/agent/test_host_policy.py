"""Worker agents run only what their host policy allows, whatever a run's
stored definition (or the message handing it over) asks: root, the host's
network, the process runtime (in-process agents, real containerd and Redis)."""

from __future__ import annotations

from cronman.coordination.agents import DONE, PLACED
from cronman.coordination.agents_redis import RedisAgentDirectory
from cronman.host_policy import HostPolicy
from cronman.worker_agent.runtimes.process import ProcessRuntime
from tests.agent.harness import delivery, wait_until
from tests.agent.test_placement import run_rig

REFUSED = "refused by the host policy of worker agent"


def test_a_containerd_agent_refuses_root_and_the_host_network(containerd, namespace,
                                                              redis_url):
    async def body(rig):
        agent = await rig.start_agent("a")
        target = rig.target()
        # What a forged row hands over: the target as the database holds it.
        out = await target.deliver(delivery(["id", "-u"], user="root"))
        assert not out.ok and not out.retryable, out
        assert f"{REFUSED} a: target.user" in out.error and "logs_tail" not in out.result
        out = await target.deliver(delivery(["ls", "/sys/class/net"], network="host"))
        assert not out.ok and f"{REFUSED} a: target.network" in out.error, out
        out = await target.deliver(delivery(["id", "-u"], user="0:0"))
        assert not out.ok and "target.user" in out.error
        assert await rig.runtime().list({"cronman.agent": "a"}) == []  # nothing ever started
        # No user named: not root.
        out = await target.deliver(delivery(["id", "-u"]))
        assert out.ok and out.result["logs_tail"]["stdout"] == "65534\n", out
        assert agent.reported == 4

    run_rig(containerd, namespace, redis_url, body)


def test_an_agent_whose_operator_allows_root_runs_it(containerd, namespace, redis_url):
    async def body(rig):
        await rig.start_agent("a", policy=HostPolicy(root=True, networks=frozenset({"none"})))
        target = rig.target()
        out = await target.deliver(delivery(["id", "-u"], user="root"))
        assert out.ok and out.result["logs_tail"]["stdout"] == "0\n", out
        out = await target.deliver(delivery(["true"], network="host"))
        assert not out.ok and "target.network" in out.error

    run_rig(containerd, namespace, redis_url, body)


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
        directory = RedisAgentDirectory(rig.settings)
        for extra, why in (({}, "which the host policy of namespace 'beta'"),
                           ({"host_policy": {"process": True}, "user": "root"},
                            "target.user")):
            run = delivery(["id", "-u"], namespace="beta", user=extra.get("user"))
            message = {"kind": "start", "run_id": run.run_id, "attempt": 1, "job_id": "job",
                       "scheduled_for": "2026-01-01T00:00:00Z", "namespace": "beta",
                       "target": run.target, "timeout": 10,
                       **{k: v for k, v in extra.items() if k == "host_policy"}}
            assert directory.place("p", run.run_id, 1, 1.0, 64, message, 5000, 60000) == PLACED

            def done(run_id=run.run_id):
                (found,) = directory.placements([run_id])
                return found is not None and found.state == DONE

            await wait_until(done, 10, "the forged run's outcome")
            outcome = directory.take(run.run_id)
            assert outcome is not None and not outcome["ok"], outcome
            assert f"{REFUSED} p:" in outcome["error"] and why in outcome["error"], outcome
            assert "logs_tail" not in outcome["result"]
        directory.close()

    run_rig(containerd, namespace, redis_url, body)
