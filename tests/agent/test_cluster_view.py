"""Agents in ``GET /v1/cluster`` and ``cronman cluster``: heartbeat age,
capacity used/free and running runs (Redis directory, as an agent writes it)."""

from __future__ import annotations

import uuid

import pytest

from cronman.cli.output import cluster_text
from cronman.config import Settings
from cronman.coordination.agents import AgentInfo, Capacity
from cronman.coordination.agents_redis import RedisAgentDirectory
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.store.migrate import upgrade

pytestmark = [pytest.mark.redis]


def test_agents_with_capacity_used_and_free(tmp_path, redis_url):
    db = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(db)
    store = open_store(db)
    settings = Settings(database_url=db, redis_url=redis_url,
                        redis_key_prefix=f"t{uuid.uuid4().hex[:8]}")
    directory = RedisAgentDirectory(settings)
    try:
        directory.agent_heartbeat(AgentInfo(
            id="worker-1", capacity=Capacity(4, 2048, 8), labels={"zone": "a"},
            address="host-1", runtime="containerd", running=["run-1"]), 30_000)
        assert directory.place("worker-1", "run-1", 1, 1.5, 512, {"kind": "start"}, 5000,
                               60000) == "placed"
        app = make_app(settings, store=store)
        body = app.test_client().get("/v1/cluster").get_json()
        (agent,) = body["agents"]
        assert agent["id"] == "worker-1" and agent["runtime"] == "containerd"
        assert agent["labels"] == "zone=a" and agent["address"] == "host-1"
        assert 0 <= agent["heartbeat_age_s"] < 5 and agent["last_heartbeat"].endswith("Z")
        assert (agent["cpu"], agent["cpu_used"], agent["cpu_free"]) == (4, 1.5, 2.5)
        assert (agent["memory_mb_used"], agent["memory_mb_free"]) == (512, 1536)
        assert (agent["slots_used"], agent["slots_free"]) == (1, 7)
        assert agent["running"] == 1 and agent["running_runs"] == ["run-1"]
        text = cluster_text(body)
        assert "WORKER-1" not in text and "worker-1" in text and "CPU_FREE" in text
        directory.agent_leave("worker-1")
        assert app.test_client().get("/v1/cluster").get_json()["agents"] == []
    finally:
        directory.close()
        store.close()
