"""The floor on a namespace token's schedules and retries (CRONMAN_MIN_INTERVAL), with
auth on: through the app on the real store, and through a running ``cronman api``."""

from __future__ import annotations

from typing import Any

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from tests.support.api import http, job_spec, running_api


def every(seconds: float, name: str = "fast", **overrides: Any) -> dict[str, Any]:
    return job_spec(name, namespace="billing",
                    schedule={"kind": "interval", "every": seconds}, **overrides)


def cron(expr: str, name: str = "cron") -> dict[str, Any]:
    return job_spec(name, namespace="billing",
                    schedule={"kind": "cron", "cron": expr, "timezone": "UTC"})


@pytest.fixture
def api(store, database_url):
    """``api(**settings)``: a test client of the app with those settings, and tokens
    (a namespace token and an admin token: auth is required from then on)."""
    billing, _ = store.tokens.create_token("billing", ["billing"])
    admin, _ = store.tokens.create_token("admin", None)

    def make(**settings: Any) -> Any:
        client = make_app(Settings(database_url=database_url, **settings),
                          store=store).test_client()
        client.tenant = {"Authorization": f"Bearer {billing}"}
        client.admin = {"Authorization": f"Bearer {admin}"}
        return client

    return make


def error_of(resp: Any) -> dict[str, Any]:
    assert resp.status_code == 400, (resp.status_code, resp.get_data(as_text=True))
    error: dict[str, Any] = resp.get_json()["error"]
    return error


def test_a_namespace_token_cannot_go_under_one_second(api):
    client = api()
    error = error_of(client.post("/v1/jobs", json=every(0.001), headers=client.tenant))
    assert error["field"] == "schedule.every"
    assert error["message"] == ("must be at least 1 s for a namespace token: jobs fire at most "
                                "once every 1 s (CRONMAN_MIN_INTERVAL)")
    error_of(client.post("/v1/jobs", json=every(0.999), headers=client.tenant))
    assert client.post("/v1/jobs", json=every(1), headers=client.tenant).status_code == 201
    assert client.get("/v1/jobs", headers=client.tenant).get_json()["items"][0][
        "schedule"]["every"] == 1


def test_admin_tokens_and_an_api_without_auth_are_not_bound(api):
    client = api()
    assert client.post("/v1/jobs", json=every(0.001), headers=client.admin).status_code == 201
    off = api(auth="off")
    assert off.post("/v1/jobs", json=every(0.001, "no-auth")).status_code == 201


def test_the_operator_sets_the_floor(api):
    client = api(min_interval=30)
    error = error_of(client.post("/v1/jobs", json=every(10), headers=client.tenant))
    assert error["field"] == "schedule.every" and "at least 30 s" in error["message"]
    assert client.post("/v1/jobs", json=every(30), headers=client.tenant).status_code == 201
    none = api(min_interval=0)
    assert none.post("/v1/jobs", json=every(0.001, "unbound"),
                     headers=none.tenant).status_code == 201


def test_cron_with_seconds_fires_at_most_once_a_second_and_meets_a_higher_floor(api):
    client = api()
    assert client.post("/v1/jobs", json=cron("* * * * * *"),
                       headers=client.tenant).status_code == 201  # 1 s: at the floor
    strict = api(min_interval=30)
    error = error_of(strict.post("/v1/jobs", json=cron("*/10 * * * * *", "c10"),
                                 headers=strict.tenant))
    assert error["field"] == "schedule.cron" and "at least 30 s" in error["message"]
    # Two fires a second apart once a minute are under a 30 s floor too.
    error_of(strict.post("/v1/jobs", json=cron("0,1 * * * * *", "c01"), headers=strict.tenant))
    for i, expr in enumerate(("*/30 * * * * *", "* * * * *", "0 7 * * *")):
        assert strict.post("/v1/jobs", json=cron(expr, f"ok{i}"),
                           headers=strict.tenant).status_code == 201, expr


def test_a_cron_s_tight_spot_anywhere_in_its_cycle_is_found(api):
    """Found in review: only 16 fires were sampled, so from :00 this cron's gaps
    all seemed 3 s, yet it fires at :56 and :57 of every minute."""
    client = api(min_interval=3)
    for i, expr in enumerate(("0-54/3,56,57 * * * * *", "0,59 * * * * *",
                              "0,59 0,59 0,23 * * *")):
        error = error_of(client.post("/v1/jobs", json=cron(expr, f"tight{i}"),
                                     headers=client.tenant))
        assert error["field"] == "schedule.cron" and "at least 3 s" in error["message"]
    for i, expr in enumerate(("*/3 * * * * *", "0-57/3 * * * * *")):
        assert client.post("/v1/jobs", json=cron(expr, f"even{i}"),
                           headers=client.tenant).status_code == 201, expr
    # Minutes 58 and 59 of each hour: a minute apart, under a 90 s floor.
    strict = api(min_interval=90)
    error = error_of(strict.post("/v1/jobs", json=cron("0 0-58/2,59 * * * *", "m59"),
                                 headers=strict.tenant))
    assert error["field"] == "schedule.cron" and "at least 90 s" in error["message"]
    assert strict.post("/v1/jobs", json=cron("0 */2 * * * *", "every2m"),
                       headers=strict.tenant).status_code == 201


def test_retries_back_to_back_are_under_the_floor(api):
    client = api()
    fast_retry = every(60, retry={"max_attempts": 100, "min_backoff": 0, "max_backoff": 0})
    error = error_of(client.post("/v1/jobs", json=fast_retry, headers=client.tenant))
    assert error["field"] == "retry.min_backoff"
    assert "retry at most once every 1 s" in error["message"]
    once = every(60, "no-retry", retry={"max_attempts": 1, "min_backoff": 0, "max_backoff": 0})
    assert client.post("/v1/jobs", json=once, headers=client.tenant).status_code == 201
    assert client.post("/v1/jobs", json=fast_retry, headers=client.admin).status_code == 201
    # A raised floor asks no more of retries than the default backoff (1 s).
    strict = api(min_interval=30)
    default_retry = every(60, "default-retry")
    assert strict.post("/v1/jobs", json=default_retry, headers=strict.tenant).status_code == 201
    half = every(60, "half", retry={"max_attempts": 3, "min_backoff": 0.5, "max_backoff": 9})
    assert error_of(strict.post("/v1/jobs", json=half, headers=strict.tenant))["field"] == \
        "retry.min_backoff"


def test_bulk_names_the_job(api):
    client = api()
    resp = client.post("/v1/jobs/bulk", json={"jobs": [every(5, "a"), every(0.01, "b")]},
                       headers=client.tenant)
    assert error_of(resp)["field"] == "jobs[1].schedule.every"
    assert client.get("/v1/jobs", headers=client.tenant).get_json()["items"] == []


def test_a_change_is_checked_and_a_kept_schedule_is_not(api):
    client = api()
    created = client.post("/v1/jobs", json=every(0.5, "legacy"), headers=client.admin)
    job = created.get_json()
    path = f"/v1/jobs/{job['id']}"
    # The operator's job below the floor: a tenant may still change its labels.
    resp = client.patch(path, json={"labels": {"team": "b"}}, headers=client.tenant)
    assert resp.status_code == 200, resp.get_json()
    error = error_of(client.patch(path, json={"schedule": {"kind": "interval", "every": 0.2}},
                                  headers=client.tenant))
    assert error["field"] == "schedule.every"
    assert client.patch(path, json={"schedule": {"kind": "interval", "every": 2}},
                        headers=client.tenant).status_code == 200
    error_of(client.patch(path, json={"schedule": {"kind": "interval", "every": 0.5}},
                          headers=client.tenant))


def test_a_running_api_reads_cronman_min_interval(store, database_url):
    token, _ = store.tokens.create_token("billing", ["billing"])
    env = {"CRONMAN_AUTH": "required", "CRONMAN_MIN_INTERVAL": "5"}
    with running_api(database_url, extra_env=env) as base:
        status, body, _ = http("POST", base + "/v1/jobs", every(0.001), token=token)
        assert status == 400, body
        assert body["error"]["field"] == "schedule.every"
        assert "at least 5 s" in body["error"]["message"]
        status, body, _ = http("POST", base + "/v1/jobs", every(5), token=token)
        assert status == 201, body


def test_the_floor_is_a_setting_with_bounds():
    assert Settings.from_env(environ={"CRONMAN_MIN_INTERVAL": "2.5"}).min_interval == 2.5
    assert Settings().min_interval == 1.0
    with pytest.raises(ValueError, match="CRONMAN_MIN_INTERVAL"):
        Settings(min_interval=-1)
