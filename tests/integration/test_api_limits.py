"""``/v1/limits``, ``/v1/namespaces/{ns}/quotas`` and ``/v1/forecast``
through the API on SQLite and PostgreSQL: admin tokens only for limits and
for setting quotas (403 for a namespace token, 401 without one), 400 naming
the field, ``max_jobs`` refused at create with ``quota_exceeded``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, utcnow
from tests.support.api import job_spec


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


@pytest.fixture
def client(store, database_url):
    return make_app(Settings(database_url=database_url, auth="required"),
                    store=store).test_client()


@pytest.fixture
def tokens(store):
    pay, _ = store.tokens.create_token("pay", ["pay"])
    admin, _ = store.tokens.create_token("admin", None)
    return {"pay": auth(pay), "admin": auth(admin)}


BILLING = {"name": "billing", "match": {"host": "billing.internal"}, "rate": 100,
           "concurrency": 20}


def test_limits_are_made_read_replaced_and_deleted_by_admin_tokens(client, tokens):
    h = tokens["admin"]
    resp = client.post("/v1/limits", json=BILLING, headers=h)
    assert resp.status_code == 201, resp.get_json()
    assert resp.headers["Location"] == "/v1/limits/billing"
    assert resp.get_json() == {**BILLING, "rate": 100.0, "version": 1}
    error_of(client.post("/v1/limits", json=BILLING, headers=h), 409)
    listed = client.get("/v1/limits", headers=h).get_json()["items"]
    assert [x["name"] for x in listed] == ["billing"]
    resp = client.put("/v1/limits/billing", json={
        "match": {"label": "team:pay"}, "concurrency": 5, "version": 1}, headers=h)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json() == {"name": "billing", "match": {"label": "team:pay"},
                               "concurrency": 5, "version": 2}
    err = error_of(client.put("/v1/limits/billing", json={
        "match": {"label": "team:pay"}, "concurrency": 6, "version": 1}, headers=h), 409)
    assert err["field"] == "version"
    assert client.get("/v1/limits/billing", headers=h).get_json()["version"] == 2
    assert client.delete("/v1/limits/billing", headers=h).status_code == 204
    error_of(client.get("/v1/limits/billing", headers=h), 404)
    error_of(client.delete("/v1/limits/billing", headers=h), 404)


def test_limits_need_an_admin_token(client, tokens):
    for method, path in (("get", "/v1/limits"), ("post", "/v1/limits"),
                         ("get", "/v1/limits/billing"), ("put", "/v1/limits/billing"),
                         ("delete", "/v1/limits/billing")):
        call = getattr(client, method)
        body = {"json": BILLING} if method in ("post", "put") else {}
        assert error_of(call(path, headers=tokens["pay"], **body), 403)["code"] == "forbidden"
        assert error_of(call(path, **body), 401)["code"] == "unauthorized"


@pytest.mark.parametrize(("body", "field"), [
    ({**BILLING, "name": "Bad Name"}, "name"),
    ({**BILLING, "name": "quota:pay"}, "name"),
    ({k: v for k, v in BILLING.items() if k != "match"}, "match"),
    ({**BILLING, "match": {"host": "a", "label": "b:c"}}, "match"),
    ({**BILLING, "match": {"url": "x"}}, "match.url"),
    ({**BILLING, "match": {"host": "http://billing/"}}, "match.host"),
    ({**BILLING, "match": {"label": "nocolon"}}, "match.label"),
    ({**BILLING, "rate": 0}, "rate"),
    ({**BILLING, "rate": "fast"}, "rate"),
    ({**BILLING, "concurrency": 1.5}, "concurrency"),
    ({**BILLING, "concurrency": 0}, "concurrency"),
    ({"name": "x", "match": {"host": "a"}}, "rate"),
    ({"name": "x", "match": {"host": "a"}, "concurrency": 1, "burst": 3}, "burst"),
    ({**BILLING, "extra": 1}, "extra"),
    ({**BILLING, "version": 3}, "version"),
])
def test_a_bad_limit_is_a_400_naming_the_field(client, tokens, body, field):
    err = error_of(client.post("/v1/limits", json=body, headers=tokens["admin"]), 400)
    assert err["field"] == field, err


def test_max_jobs_is_refused_at_create_naming_the_quota(client, tokens, store):
    admin, pay = tokens["admin"], tokens["pay"]
    err = error_of(client.put("/v1/namespaces/pay/quotas", json={"max_jobs": 2},
                              headers=pay), 403)
    assert err["code"] == "forbidden"
    resp = client.put("/v1/namespaces/pay/quotas", json={"max_jobs": 2, "concurrent_runs": 5},
                      headers=admin)
    assert resp.status_code == 200, resp.get_json()
    got = client.get("/v1/namespaces/pay/quotas", headers=pay).get_json()
    assert got == {"namespace": "pay", "max_jobs": 2, "fires_per_second": None,
                   "burst": None, "concurrent_runs": 5, "default": False}
    assert client.post("/v1/jobs", json=job_spec("a", namespace="pay"),
                       headers=pay).status_code == 201
    err = error_of(client.post("/v1/jobs/bulk", json={"jobs": [
        job_spec("b", namespace="pay"), job_spec("c", namespace="pay")]}, headers=pay), 403)
    assert err["code"] == "quota_exceeded" and "max_jobs" in err["message"], err
    assert err["field"] == "namespace"
    assert client.post("/v1/jobs", json=job_spec("b", namespace="pay"),
                       headers=pay).status_code == 201
    err = error_of(client.post("/v1/jobs", json=job_spec("c", namespace="pay"),
                               headers=pay), 403)
    assert err["code"] == "quota_exceeded" and "max_jobs (2)" in err["message"], err
    # The quota's concurrency is a limit the nodes read.
    [limit] = store.limits.all_limits()
    assert (limit.name, limit.kind, limit.value, limit.concurrency) == (
        "quota:pay", "namespace", "pay", 5)
    assert client.delete("/v1/namespaces/pay/quotas", headers=admin).status_code == 204
    assert client.post("/v1/jobs", json=job_spec("c", namespace="pay"),
                       headers=pay).status_code == 201
    assert client.get("/v1/namespaces/pay/quotas", headers=pay).get_json()["default"] is True


@pytest.mark.parametrize(("body", "field"), [
    ({"max_jobs": -1}, "max_jobs"), ({"max_jobs": "many"}, "max_jobs"),
    ({"fires_per_second": 0}, "fires_per_second"), ({"burst": 3}, "burst"),
    ({"concurrent_runs": 0}, "concurrent_runs"), ({"jobs": 3}, "jobs"),
    ({"namespace": "other"}, "namespace"),
])
def test_a_bad_quota_is_a_400_naming_the_field(client, tokens, body, field):
    err = error_of(client.put("/v1/namespaces/pay/quotas", json=body,
                              headers=tokens["admin"]), 400)
    assert err["field"] == field, err


def test_the_forecast_shows_the_herd_and_where_a_limit_holds_it_back(client, tokens):
    admin, pay = tokens["admin"], tokens["pay"]
    hour = (utcnow() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    jobs = [job_spec(f"top-{i}", namespace="pay", schedule={
        "kind": "cron", "cron": "0 * * * *", "timezone": "UTC"},
        target={"kind": "http", "url": "http://billing.internal/hook"}) for i in range(250)]
    # Anchored half a minute off the hour, so the steady jobs never share its second.
    steady = {"kind": "interval", "every": 60,
              "anchor": format_rfc3339(hour - timedelta(hours=1, seconds=30))}
    jobs += [job_spec(f"steady-{i}", namespace="ops", schedule=steady) for i in range(10)]
    resp = client.post("/v1/jobs/bulk", json={"jobs": jobs}, headers=admin)
    assert resp.status_code == 201, resp.get_json()
    assert client.post("/v1/limits", json=BILLING, headers=admin).status_code == 201
    since = format_rfc3339(hour - timedelta(minutes=1))
    until = format_rfc3339(hour + timedelta(minutes=1))
    body = client.get(f"/v1/forecast?from={since}&to={until}&top=3", headers=admin).get_json()
    assert body["jobs"] == 260
    assert body["peak"] == {"at": format_rfc3339(hour), "fires": 250}
    top = body["seconds"][0]
    assert top["namespaces"] == {"pay": 250} and top["hosts"] == {"billing.internal": 250}
    assert body["fires"] == 250 + 10 * 2
    [billing] = body["limits"]
    assert billing["name"] == "billing" and billing["peak_per_second"] == 250
    assert billing["seconds_held"] == 2 and billing["max_waiting"] == 150
    assert [r["waiting"] for r in body["held"]] == [150, 50]
    # A namespace token sees its own jobs only, and no other namespace.
    mine = client.get(f"/v1/forecast?from={since}&to={until}", headers=pay).get_json()
    assert mine["jobs"] == 250 and set(mine["namespaces"]) == {"pay"}
    err = error_of(client.get("/v1/forecast?namespace=ops", headers=pay), 403)
    assert err["field"] == "namespace"
    err = error_of(client.get("/v1/forecast?from=%2B2h&to=%2B1h", headers=admin), 400)
    assert err["field"] == "to"
    err = error_of(client.get("/v1/forecast?to=%2B30h", headers=admin), 400)
    assert err["field"] == "to"
    err = error_of(client.get("/v1/forecast?from=soon", headers=admin), 400)
    assert err["field"] == "from"
    err = error_of(client.get("/v1/forecast?top=0", headers=admin), 400)
    assert err["field"] == "top"
    err = error_of(client.get("/v1/forecast?window=1", headers=admin), 400)
    assert err["field"] == "window"
    # A proposal's body keys are of their type: never null, ``top`` an integer.
    for body, field in (({"to": None}, "to"), ({"from": 5}, "from"), ({"top": "3"}, "top"),
                        ({"top": True}, "top"), ({"namespace": None}, "namespace")):
        err = error_of(client.post("/v1/forecast", json=body, headers=admin), 400)
        assert err["field"] == field, (body, err)
    assert client.post("/v1/forecast", json={"to": "+1h", "top": 3},
                       headers=admin).status_code == 200


@pytest.mark.redis
def test_a_limit_shows_its_usage_now_from_the_shared_counters(store, database_url, redis_url):
    import asyncio
    import uuid

    from cronman.coordination.limit_counters import Ask
    from cronman.coordination.redis_limits import RedisLimitCounters
    from cronman.limits import parse_limit
    from cronman.scheduler.dispatch.limit_book import spec_of

    settings = Settings(database_url=database_url, auth="required", redis_url=redis_url,
                        redis_key_prefix=f"cmu-{uuid.uuid4().hex[:10]}")
    client = make_app(settings, store=store).test_client()
    admin, _ = store.tokens.create_token("admin", None)
    assert client.post("/v1/limits", json=BILLING, headers=auth(admin)).status_code == 201
    node = RedisLimitCounters(settings)
    try:
        async def take():
            await node.restore("n1", [], 5000)
            return await node.take("n1", [spec_of(parse_limit(BILLING))],
                                   [Ask("r1/1", (0,)), Ask("r2/1", (0,))],
                                   lease_ms=5000, margin_ms=0)

        assert all(a.granted for a in asyncio.run(take()))
        got = client.get("/v1/limits/billing", headers=auth(admin)).get_json()
        assert got["usage"] == {"in_flight": 2, "starts_in_window": 2}
    finally:
        node.close()


def test_a_limit_shows_the_attempts_waiting_on_it_now(client, tokens, store):
    from datetime import timedelta

    from tests.support.store_data import base_time, make_run
    from tests.support.store_data import job_spec as stored_spec

    admin = tokens["admin"]
    assert client.post("/v1/limits", json=BILLING, headers=admin).status_code == 201
    (job,) = store.jobs.create_jobs([stored_spec("held")])
    t0 = base_time()
    waiting = {"limit": {"name": "billing", "reason": "waiting on limit billing: 50 of 50 "
                         "in flight", "since": "2026-12-02T09:00:00Z"}}
    store.runs.claim_runs([
        make_run(job.id, t0, status="running", gate=waiting),
        make_run(job.id, t0 + timedelta(seconds=1), status="running", gate=waiting),
        # Started after its wait, and one ended while waiting: neither waits now.
        make_run(job.id, t0 + timedelta(seconds=2), status="running",
                 gate={"limit": {"name": "billing", "waited_ms": 840}}),
        make_run(job.id, t0 + timedelta(seconds=3), status="skipped", gate=waiting),
    ])
    [item] = client.get("/v1/limits", headers=admin).get_json()["items"]
    assert (item["name"], item["waiting"], item["usage"]) == ("billing", 2, None)
    assert client.get("/v1/limits/billing", headers=admin).get_json()["waiting"] == 2
