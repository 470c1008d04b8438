"""Cross-site requests against a real ``cronman api`` (gunicorn) that needs no
token: a page on another site may make the browser send a "simple" POST
(``text/plain`` or a form, no preflight) or, through DNS rebinding, any
request naming a host of its own. Found by probing: a ``text/plain`` POST
from another origin created a container job that ran within 3 s.
"""

from __future__ import annotations

import http.client as http_client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from cronman.config import Settings
from cronman.models import JobFilter
from cronman.processes.api import make_app
from cronman.store import open_store
from cronman.store.migrate import upgrade
from tests.support.api import job_spec, running_api

pytestmark = pytest.mark.slow

EVIL = "https://evil.example"
ALLOWED = "https://console.example.org"


def send(base: str, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request with exactly these headers (Host too, when given)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http_client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    return resp.status, json.loads(raw) if raw.strip() else None


def spec_bytes(name: str) -> bytes:
    return json.dumps(job_spec(name)).encode()


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(base URL, database URL) of ``cronman api`` with CRONMAN_AUTH=off."""
    url = f"sqlite:///{tmp_path_factory.mktemp('xsite') / 'cronman.db'}"
    upgrade(url)
    with running_api(url, extra_env={"CRONMAN_AUTH": "off",
                                     "CRONMAN_ALLOWED_ORIGINS": ALLOWED + "/"}) as base:
        yield base, url


def job_names(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {j.name for j in store.jobs.list_jobs(JobFilter(), 1000, None).items}
    finally:
        store.close()


def test_a_simple_cross_site_post_writes_nothing(api):
    base, url = api
    # What a page elsewhere can send without a preflight: text/plain and forms.
    for content_type, body in (("text/plain", spec_bytes("xs-plain")),
                               ("application/x-www-form-urlencoded", b"name=xs-form"),
                               ("multipart/form-data; boundary=x", spec_bytes("xs-multi"))):
        status, err = send(base, "POST", "/v1/jobs", body,
                           {"Content-Type": content_type, "Origin": EVIL})
        assert status == 403, err
        assert err["error"]["code"] == "forbidden" and "cross-site" in err["error"]["message"]
        # Even from no browser at all, a body that does not say it is JSON is not read.
        status, err = send(base, "POST", "/v1/jobs", body, {"Content-Type": content_type})
        assert status == 415, err
        assert set(err["error"]) == {"code", "message", "field"}
        assert err["error"]["code"] == "unsupported_media_type"
    status, err = send(base, "POST", "/v1/jobs", spec_bytes("xs-none"))
    assert status == 415, err
    assert not {n for n in job_names(url) if n.startswith("xs-")}


@pytest.mark.parametrize("headers", [
    {"Origin": EVIL},
    {"Origin": "null"},  # sandboxed frames, data: pages
    {"Origin": "http://127.0.0.1"},  # another port of loopback is another origin
    {"Referer": EVIL + "/page.html"},  # no Origin: the Referer speaks for it
])
def test_a_foreign_origin_is_refused_on_every_write(api, headers):
    base, url = api
    status, job = send(base, "POST", "/v1/jobs", spec_bytes("xs-target"),
                       {"Content-Type": "application/json"})
    assert status == 201, job
    try:
        json_headers = {"Content-Type": "application/json", **headers}
        for method, path, body in (
                ("POST", "/v1/jobs", spec_bytes("xs-other")),
                ("PATCH", f"/v1/jobs/{job['id']}", b'{"priority": 5}'),
                ("PUT", f"/v1/jobs/{job['id']}", spec_bytes("xs-target")),
                ("POST", f"/v1/jobs/{job['id']}/trigger", None),
                ("POST", f"/v1/jobs/{job['id']}/pause", None),
                ("DELETE", f"/v1/jobs/{job['id']}", None)):
            status, err = send(base, method, path, body, json_headers)
            assert status == 403, (method, path, err)
        # Reads are not refused (a page elsewhere cannot read the answer anyway).
        status, got = send(base, "GET", f"/v1/jobs/{job['id']}", headers=headers)
        assert status == 200 and got["priority"] == 0 and got["paused"] is False
    finally:
        send(base, "DELETE", f"/v1/jobs/{job['id']}")


def test_the_api_s_own_origin_an_allowed_one_and_no_browser_are_accepted(api):
    base, _ = api
    port = base.rsplit(":", 1)[1]
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    for i, extra in enumerate((
            {},  # the CLI, the client, curl: no Origin, no Referer
            {"Origin": base},
            {"Referer": base + "/?view=jobs"},
            {"Origin": f"http://LOCALHOST:{port}", "Host": f"localhost:{port}"},
            {"Origin": ALLOWED},
            # Behind a TLS proxy on loopback: gunicorn takes the scheme from it.
            {"Origin": f"https://127.0.0.1:{port}", "X-Forwarded-Proto": "https"})):
        status, job = send(base, "POST", "/v1/jobs", spec_bytes(f"xs-ok-{i}"),
                           {**json_type, **extra})
        assert status == 201, (extra, job)
        assert send(base, "DELETE", f"/v1/jobs/{job['id']}", headers=extra)[0] == 204
    status, job = send(base, "POST", "/v1/jobs", spec_bytes("xs-plus-json"),
                       {"Content-Type": "application/merge-patch+json"})
    assert status == 201, job
    # X-Forwarded-Host is not trusted: it does not make another origin the API's own.
    status, _ = send(base, "POST", f"/v1/jobs/{job['id']}/pause", None,
                     {"Origin": EVIL, "X-Forwarded-Host": "evil.example"})
    assert status == 403


def test_a_foreign_host_name_is_refused_while_no_token_is_needed(api):
    """DNS rebinding: evil.example resolving to 127.0.0.1 makes the API
    same-origin with the attacker's page; its requests name evil.example."""
    base, _ = api
    port = base.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}"):
        for method, path in (("GET", "/v1/jobs"), ("GET", "/"), ("POST", "/v1/jobs")):
            status, err = send(base, method, path, spec_bytes("xs-rebind"),
                               {"Host": host, "Content-Type": "application/json"})
            assert status == 403, (host, method, path, err)
            assert "DNS rebinding" in err["error"]["message"]
    for host in (f"localhost:{port}", f"app.localhost:{port}", f"[::1]:{port}",
                 "console.example.org"):  # the host of an allowed origin
        status, _ = send(base, "GET", "/v1/jobs", headers={"Host": host})
        assert status == 200, host


def test_with_tokens_a_foreign_host_is_a_proxy_s_business(tmp_path):
    """Once tokens are needed, a rebound page has none: any Host is served
    (a reverse proxy may name the API as it likes); writes still need the origin."""
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    store = open_store(url, settings=Settings(database_url=url))
    try:
        token, _ = store.tokens.create_token("admin", None)
    finally:
        store.close()
    with running_api(url) as base:
        bearer = {"Authorization": f"Bearer {token}", "Host": "cron.example.net"}
        assert send(base, "GET", "/v1/jobs", headers=bearer)[0] == 200
        ok = {**bearer, "Content-Type": "application/json", "Origin": "http://cron.example.net"}
        assert send(base, "POST", "/v1/jobs", spec_bytes("proxied"), ok)[0] == 201
        status, _ = send(base, "POST", "/v1/jobs", spec_bytes("evil"), {**ok, "Origin": EVIL})
        assert status == 403


def test_a_console_on_an_allowed_origin_gets_cors_answers(tmp_path):
    """With tokens needed: an allowed origin's preflight is answered before
    any token is asked for, and its answers are readable; others get no CORS."""
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    store = open_store(url, settings=Settings(database_url=url))
    try:
        token, _ = store.tokens.create_token("admin", None)
    finally:
        store.close()
    with running_api(url, extra_env={"CRONMAN_ALLOWED_ORIGINS": ALLOWED}) as base:
        host, port = base.removeprefix("http://").split(":")
        ask = {"Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}

        def raw(method, path, headers, body=None):
            conn = http_client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}
            finally:
                conn.close()

        status, headers = raw("OPTIONS", "/v1/jobs", {"Origin": ALLOWED, **ask})
        assert status == 204
        assert headers["access-control-allow-origin"] == ALLOWED
        assert "POST" in headers["access-control-allow-methods"]
        assert {"authorization", "content-type"} <= {
            h.strip().lower() for h in headers["access-control-allow-headers"].split(",")}
        status, headers = raw("OPTIONS", "/v1/jobs", {"Origin": EVIL, **ask})
        assert status == 401 and "access-control-allow-origin" not in headers
        bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        status, headers = raw("POST", "/v1/jobs", {**bearer, "Origin": ALLOWED},
                              spec_bytes("from-the-console"))
        assert status == 201 and headers["access-control-allow-origin"] == ALLOWED
        assert "Location" in headers["access-control-expose-headers"]
        status, headers = raw("GET", "/v1/jobs", {**bearer, "Origin": EVIL})
        assert status == 200 and "access-control-allow-origin" not in headers


def test_the_access_log_keeps_no_secret_of_a_url(tmp_path):
    """Found by probing: the opt-in access log recorded query strings whole,
    so a token passed as ``?token=`` (which the API refuses: a 400) was kept."""
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    log = tmp_path / "api.log"
    with running_api(url, log_path=log, extra_args=("--access-log",)) as base:
        status, _ = send(base, "GET", "/v1/jobs?limit=5&token=tok-SECRET-1&api_key=SECRET-2",
                         headers={"Referer": f"{base}/?access_token=SECRET-3&view=jobs",
                                  "Authorization": "Bearer SECRET-4"})
        assert status in (400, 401)  # ?token= is no way to authenticate
        send(base, "GET", "/healthz?x=1")
    text = log.read_text()
    assert "GET /v1/jobs?limit=5&token=***&api_key=*** HTTP/1.1" in text, text
    assert "access_token=***&view=jobs" in text and "/healthz?x=1" in text
    assert "SECRET" not in text


def exposed_client(tmp_path, **settings: Any) -> Any:
    """The app with CRONMAN_AUTH=off listening beyond loopback (a container's
    ``0.0.0.0:8080``), on a real SQLite store."""
    tmp_path.mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'cronman.db'}"
    upgrade(url)
    full = Settings(database_url=url, **{"auth": "off", "api_bind": "0.0.0.0:8080", **settings})
    return make_app(full, store=open_store(url, settings=full)).test_client()


CONTAINER_JOB = job_spec("xs-container", target={"kind": "container", "image": "alpine",
                                                 "command": ["sh", "-c", "id"]})


def test_dns_rebinding_is_refused_with_auth_off_beyond_loopback(tmp_path):
    """Found in review: with auth off the Host check only applied on loopback, so
    a page at http://evil.example:8080 whose name rebinds to the API's address
    sent a Host (and an Origin) of its own and created a container job."""
    client = exposed_client(tmp_path)
    for method in ("POST", "GET"):
        resp = client.open("/v1/jobs", method=method, json=CONTAINER_JOB,
                           headers={"Host": "evil.example:8080",
                                    "Origin": "http://evil.example:8080"})
        assert resp.status_code == 403, resp.get_data(as_text=True)
        message = resp.get_json()["error"]["message"]
        assert "DNS rebinding" in message and "CRONMAN_ALLOWED_HOSTS" in message
        assert "'evil.example'" in message
    assert client.get("/v1/jobs").get_json()["items"] == []
    # An address is no name an attacker can rebind: a page with that origin is
    # this API's own (the console at http://10.0.0.5:8080, a probe by pod IP).
    for i, host in enumerate(("10.0.0.5:8080", "[fd00::5]:8080", "localhost:8080",
                              "127.0.0.1:8080")):
        resp = client.post("/v1/jobs", json=job_spec(f"xs-ip-{i}"),
                           headers={"Host": host, "Origin": f"http://{host}"})
        assert resp.status_code == 201, (host, resp.get_data(as_text=True))


def test_the_names_an_open_api_answers_to_are_listed(tmp_path):
    """CRONMAN_ALLOWED_HOSTS: the DNS names an API that needs no token is reached by."""
    client = exposed_client(tmp_path, allowed_hosts="cronman, cron.internal.example.")
    for i, host in enumerate(("cronman:8080", "CRON.internal.example",
                              "cron.internal.example.:8080")):
        resp = client.post("/v1/jobs", json=job_spec(f"xs-named-{i}"),
                           headers={"Host": host, "Origin": f"http://{host.lower()}"})
        assert resp.status_code == 201, (host, resp.get_data(as_text=True))
    for host in ("evil.example", "sub.cronman", "cronman.evil.example"):
        assert client.get("/v1/jobs", headers={"Host": host}).status_code == 403, host
    # The bind's own name counts too: the operator gave it.
    named = exposed_client(tmp_path / "named", api_bind="api.internal:8080")
    assert named.get("/v1/jobs", headers={"Host": "api.internal:8080"}).status_code == 200
    assert named.get("/v1/jobs", headers={"Host": "evil.example:8080"}).status_code == 403
