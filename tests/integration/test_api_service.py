"""Error format of unknown routes, health and readiness, metrics, cluster, dashboard."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from cronman.api.cluster import AGENTS_KEY
from cronman.config import Settings
from cronman.coordination.agents import AgentInfo, Capacity
from cronman.coordination.agents_memory import InProcessAgentDirectory
from cronman.coordination.base import NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.coordination.redis import RedisCoordinator
from cronman.ids import run_id_for
from cronman.models import Run
from cronman.processes.api import make_app
from cronman.timeutil import utcnow
from tests.support.api import free_port, job_spec
from tests.support.databases import PG_HOST, PG_PORT


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url), store=store)


@pytest.fixture
def client(app):
    return app.test_client()


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    assert resp.mimetype == "application/json"
    err = resp.get_json()["error"]
    assert set(err) == {"code", "message", "field"}
    return err


def test_unknown_routes_and_methods_answer_in_the_error_format(client):
    assert error_of(client.get("/v1/nothing"), 404)["code"] == "not_found"
    assert error_of(client.get("/v1/jobs/"), 404)["code"] == "not_found"
    assert error_of(client.get("/favicon.ico"), 404)["code"] == "not_found"
    resp = client.delete("/v1/jobs")
    assert error_of(resp, 405)["code"] == "method_not_allowed"
    assert set(resp.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}
    error_of(client.put("/healthz"), 405)
    error_of(client.get("/v1/jobs/bulk/x"), 404)


def test_healthz_and_readyz(client, database_url):
    assert client.get("/healthz").get_json() == {"status": "ok"}
    resp = client.get("/readyz")
    assert resp.status_code == 200
    body = resp.get_json()
    member = body.pop("database_member")
    if database_url.startswith("sqlite"):
        assert member is None
    else:  # the host:port libpq connected to (the primary under Patroni)
        assert member["member"] == f"{PG_HOST}:{PG_PORT}" and member["since"].endswith("Z")
    assert body == {
        "status": "ready", "checks": {"database": "ok", "redis": "not configured"},
        "auth": {"mode": "open", "reason": "no API token has been created yet and the API "
                 "listens on loopback only; creating a token requires one for good"}}


@pytest.mark.redis
def test_readyz_with_redis(store, database_url, redis_url):
    settings = Settings(database_url=database_url, redis_url=redis_url)
    app = make_app(settings, store=store)  # Redis coordinator from the settings
    body = app.test_client().get("/readyz").get_json()
    assert body["checks"] == {"database": "ok", "redis": "ok"}
    down = Settings(database_url=database_url, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    coordinator = RedisCoordinator(down)
    try:
        resp = make_app(down, store=store, coordinator=coordinator).test_client().get("/readyz")
        assert resp.status_code == 503
        assert resp.get_json()["checks"]["redis"] != "ok"
        assert resp.get_json()["error"]["code"] == "unavailable"
    finally:
        coordinator.close()


def test_standalone_readyz_does_not_claim_redis(store, database_url):
    """The in-process coordinator of `cronman standalone` is no Redis."""
    app = make_app(Settings(database_url=database_url), store=store,
                     coordinator=InProcessCoordinator(ttl=30.0))
    body = app.test_client().get("/readyz").get_json()
    assert body["checks"]["redis"] == "not configured"


def test_readiness_checks_registered_by_the_process(app, client):
    from cronman.api.health import add_readiness_check

    problem: list[str] = []
    add_readiness_check(app, "run_writes", lambda: problem[0] if problem else None)
    assert client.get("/readyz").get_json()["checks"]["run_writes"] == "ok"
    problem.append("stuck for 42 s: integer out of range")
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["checks"]["run_writes"] == "stuck for 42 s: integer out of range"
    assert "run_writes: stuck for 42 s" in resp.get_json()["error"]["message"]


def test_readyz_when_the_database_is_down():
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/none"
    app = make_app(Settings(database_url=url))
    client = app.test_client()
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["checks"]["database"] != "ok"
    assert client.get("/healthz").status_code == 200
    # Any data call answers 503 in the error format, not a 500.
    assert error_of(client.get("/v1/jobs"), 503)["code"] == "store_unavailable"


def test_metrics(client):
    client.post("/v1/jobs", json=job_spec())
    client.post("/v1/jobs", json=job_spec())  # 409
    client.get("/v1/jobs/0190a1b2-c3d4-7e5f-8a9b-0123456789ab")
    client.get("/no/such/route")
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.content_type.startswith("text/plain")
    text = resp.get_data(as_text=True)

    def value(pattern):
        m = re.search(pattern + r" ([0-9.e+]+)", text)
        assert m, pattern
        return float(m.group(1))

    assert value(r'cronman_api_requests_total\{method="POST",route="/v1/jobs",status="201"\}') == 1
    assert value(r'cronman_api_requests_total\{method="POST",route="/v1/jobs",status="409"\}') == 1
    assert value(r'cronman_api_requests_total\{method="GET",route="/v1/jobs/\{job_id\}",'
                 r'status="404"\}') == 1
    assert value(r'cronman_api_requests_total\{method="GET",route="unmatched",'
                 r'status="404"\}') == 1
    assert value(r'cronman_api_request_duration_seconds_count\{method="POST",'
                 r'route="/v1/jobs"\}') == 2
    assert value(r"cronman_jobs") == 1


def test_cluster_without_a_coordinator(client, database_url):
    body = client.get("/v1/cluster").get_json()
    member = body.pop("database_member")  # the API process's own connection, as on /readyz
    if database_url.startswith("sqlite"):
        assert member is None
    else:
        assert member["member"] == f"{PG_HOST}:{PG_PORT}" and member["since"].endswith("Z")
    assert body == {"replicas": 2, "nodes": [], "agents": [], "queues": []}


def test_cluster_from_the_coordinator(store, database_url):
    coordinator = InProcessCoordinator(ttl=30)
    started = utcnow() - timedelta(minutes=5)
    for i, stats in enumerate([{"owned_jobs": 10, "fires_last_minute": 4, "lock_wins": 3,
                                "lock_losses": 1, "backlog": 120, "held_back": 7, "behind_ms": 2500,
                                "saturation_pct": 100}, {}]):
        coordinator.join(NodeInfo(id=f"sched-{i}", address=f"10.0.0.{i}:9000",
                                  started_at=started, stats=stats))
    app = make_app(Settings(database_url=database_url, replicas=3), store=store,
                     coordinator=coordinator)
    body = app.test_client().get("/v1/cluster").get_json()
    assert body["replicas"] == 3 and body["agents"] == []
    first, second = body["nodes"]
    assert first["id"] == "sched-0" and first["address"] == "10.0.0.0:9000"
    assert first["started_at"].endswith("Z") and first["last_heartbeat"].endswith("Z")
    assert 0 <= first["heartbeat_age_s"] < 5
    assert (first["owned_jobs"], first["fires_last_minute"], first["lock_wins"],
            first["lock_losses"]) == (10, 4, 3, 1)
    assert (second["owned_jobs"], second["lock_wins"]) == (0, 0)
    # Alive but 2.5 s behind: overloaded, not down.
    assert (first["state"], first["backlog"], first["held_back"], first["behind_ms"],
            first["saturation_pct"]) == ("overloaded", 120, 7, 2500, 100)
    assert second["state"] == "ok"
    coordinator.leave("sched-1")
    assert [n["id"] for n in app.test_client().get("/v1/cluster").get_json()["nodes"]] == [
        "sched-0"]


def test_cluster_shows_a_token_only_the_running_runs_of_its_namespaces(app, client, store):
    """Found by probing: /v1/cluster listed every namespace's running runs to any token."""
    now = utcnow()
    run_ids = {}
    for ns in ("billing", "search"):
        job = client.post("/v1/jobs", json=job_spec(f"{ns}-box", namespace=ns)).get_json()
        run = Run(id=run_id_for(job["id"], now), job_id=job["id"], scheduled_for=now,
                  status="claimed", attempt=1, node_id="n1", claimed_at=now,
                  lease_expires_at=now + timedelta(minutes=1))
        assert store.runs.claim_runs([run]) == {run.id}
        run_ids[ns] = run.id
    directory = InProcessAgentDirectory()
    directory.agent_heartbeat(AgentInfo(
        id="worker-1", capacity=Capacity(4, 2048, 8), labels={}, address="host-1",
        runtime="process", running=[run_ids["billing"], run_ids["search"], "gone-run"]),
        30_000)
    app.extensions[AGENTS_KEY] = directory
    billing, _ = store.tokens.create_token("billing", ["billing"])
    admin, _ = store.tokens.create_token("admin", None)

    def agent(token):
        resp = client.get("/v1/cluster", headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 200, resp.get_json()
        (one,) = resp.get_json()["agents"]
        return one

    mine = agent(billing)
    assert mine["running_runs"] == [run_ids["billing"]]
    assert run_ids["search"] not in str(mine)
    assert mine["running"] == 3  # the agent's count, as slots_used says anyway
    assert agent(admin)["running_runs"] == [run_ids["billing"], run_ids["search"], "gone-run"]
    assert store.runs.get_runs([run_ids["search"], "gone-run", run_ids["search"]]) == {
        run_ids["search"]: store.runs.get_run(run_ids["search"])}


@pytest.mark.redis
def test_cluster_from_redis(store, database_url, redis_url):
    settings = Settings(database_url=database_url, redis_url=redis_url, node_id="n1")
    node = RedisCoordinator(settings)
    try:
        node.join(NodeInfo(id="n1", address="127.0.0.1:1", started_at=utcnow(),
                           stats={"owned_jobs": 2}))
        app = make_app(settings, store=store)
        nodes = app.test_client().get("/v1/cluster").get_json()["nodes"]
        assert [(n["id"], n["owned_jobs"]) for n in nodes] == [("n1", 2)]
    finally:
        node.leave("n1")
        node.close()


def test_dashboard_is_self_contained(client):
    """The page and every file it loads come from this API; no inline script."""
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    html = resp.get_data(as_text=True)
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
    sources = re.findall(r"""(?:src|href)=["']([^"'#]+)""", html)
    assert "ui/app.js" in sources
    seen, queue = set(), [s for s in sources if s.startswith("ui/")]
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        asset = client.get("/" + path)
        assert asset.status_code == 200, path
        text = asset.get_data(as_text=True)
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), path
        assert "@import" not in text and ".innerHTML" not in text, path
        base = path.rsplit("/", 1)[0]
        for rel in re.findall(r"""from\s+["'](\.{1,2}/[^"']+)["']""", text):
            parts = base.split("/")
            for piece in rel.split("/"):
                if piece == "..":
                    parts.pop()
                elif piece != ".":
                    parts.append(piece)
            queue.append("/".join(parts))
    assert {"ui/app.js", "ui/api.js", "ui/charts.js", "ui/views/jobs.js",
            "ui/views/cluster.js"} <= seen
    assert client.get("/ui/../wsgi.py").status_code == 404
