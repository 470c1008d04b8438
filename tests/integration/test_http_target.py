"""HttpTarget against a real local HTTP receiver (loopback only).

With the private-address guard on, every refusal is checked to leave the
machine silent: non-loopback addresses are only ever refused, never contacted.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronman.callbacks import (
    Delivery,
    Outcome,
    build_targets,
    dead_letter_delivery,
    validate_target,
)
from cronman.callbacks.dead_letter import validate_dead_letter
from cronman.callbacks.http import HttpTarget
from cronman.config import Settings
from cronman.ids import run_id_for
from cronman.receiver import InvalidCallback, verify_callback
from cronman.timeutil import format_rfc3339
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.raw_http import FLOOD_LIMIT, RawServer, flood
from tests.support.receiver import Receiver
from tests.support.signing import callback_verifies
from tests.support.waiting import wait_for

PRIVATE_OK = Settings(allow_private_targets=True)
GUARDED = Settings(allow_private_targets=False)
WHEN = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def make(url: str, **fields) -> dict:
    return validate_target({"kind": "http", "url": url, **fields})


def delivery(target: dict, *, job_id="job-1", when=WHEN, attempt=1,
             namespace="billing") -> Delivery:
    return Delivery(
        job_id=job_id,
        run_id=run_id_for(job_id, when),
        scheduled_for=when,
        attempt=attempt,
        target=target,
        namespace=namespace,
    )


def fire(settings: Settings, *deliveries: Delivery) -> list[Outcome]:
    """Deliver in order on one loop with one HttpTarget, then close it."""

    async def go():
        target = HttpTarget(settings)
        try:
            return [await target.deliver(d) for d in deliveries]
        finally:
            await target.close()

    return asyncio.run(go())


# -- what a receiver gets -----------------------------------------------------------


def test_request_carries_body_headers_and_a_verifiable_signature(rx):
    rx.reply("/digest", status=204)
    target = make(
        rx.url("/digest"),
        method="PUT",
        headers={"Content-Type": "application/json", "X-Token": "abc"},
        body='{"kind":"digest","ünï":"€"}',
    )
    d = delivery(target, attempt=2)
    [outcome] = fire(PRIVATE_OK.with_(signing_secret="s3cret"), d)
    assert outcome == Outcome(True, {"http_status": 204})

    [req] = rx.wait_for(1)
    assert req.method == "PUT" and req.path == "/digest"
    assert req.body == '{"kind":"digest","ünï":"€"}'.encode()
    assert req.header("Content-Type") == "application/json"
    assert req.header("X-Token") == "abc"
    assert req.header("Cronman-Job-Id") == "job-1"
    assert req.header("Cronman-Run-Id") == d.run_id
    assert req.header("Cronman-Scheduled-For") == "2026-11-22T07:00:00Z"
    assert req.header("Cronman-Attempt") == "2"
    assert req.header("User-Agent").startswith("cronman/")
    signature = req.header("Cronman-Signature")
    assert signature.startswith("t=") and signature.count(",v2=") == 1
    url = rx.url("/digest")
    assert callback_verifies("s3cret", "billing", req, url)
    assert not callback_verifies("wrong", "billing", req, url)
    assert not callback_verifies("s3cret", "other", req, url)  # another namespace's key
    assert not callback_verifies("s3cret", "billing", req, url + "?x")
    assert not callback_verifies("s3cret", "billing", replace(req, body=req.body + b"x"), url)


def test_fractional_scheduled_for_and_no_signature_without_secret(rx):
    when = datetime(2026, 11, 22, 7, 0, 0, 125000, tzinfo=UTC)
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/f"), method="GET"), when=when))
    assert outcome.ok
    [req] = rx.wait_for(1)
    assert req.method == "GET" and req.body == b""
    assert req.header("Cronman-Scheduled-For") == "2026-11-22T07:00:00.125Z"
    assert req.header("Cronman-Signature") is None


def test_signature_covers_an_empty_body(rx):
    fire(PRIVATE_OK.with_(signing_secret="k"), delivery(make(rx.url("/e"), method="DELETE")))
    [req] = rx.wait_for(1)
    assert req.method == "DELETE"
    assert req.body == b""
    assert callback_verifies("k", "billing", req, rx.url("/e"))


class _ToLoopback:
    """Resolves every name to one loopback port, whatever port the URL names."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def resolve(self, host: str, port: int) -> list:
        return [(socket.AF_INET, ("127.0.0.1", self.port))]


@pytest.mark.parametrize("spelling", [
    "http://127.0.0.1:{port}",  # no path: "/" is sent
    "http://LocalHost:{port}/hook",  # the host is sent in lower case
    "http://h.example:80/hook",  # the default port is not sent
    "http://127.0.0.1:{port}/hook?#frag",  # nor an empty query, nor the fragment
    "http://127.0.0.1:{port}/caf\u00e9?q=\u00e9",  # the path and query percent-encoded
])
def test_the_receiver_helper_verifies_the_url_as_the_job_spells_it(spelling):
    """The signature covers the URL's canonical form (the one on the wire): a receiver
    given the job's URL, and one taking the request's own (FROM_REQUEST), both verify."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from cronman.receiver import CallbackReceiver
    from cronman.signing import namespace_key

    class Quiet(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002
            pass

    key = namespace_key("s3cret", "billing")
    seen: list[tuple[dict, bytes, int]] = []
    from_request = CallbackReceiver(key, url=CallbackReceiver.FROM_REQUEST)

    def app(environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        status: list[str] = []
        inner = from_request.wsgi(lambda e, s: s("204 No Content", []) or [b""])
        result = b"".join(inner({**environ, "wsgi.input": io.BytesIO(body)},
                                lambda st, h, exc=None: status.append(st)))
        hdrs = {k[5:].replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
        seen.append((hdrs, body, int(status[0].split()[0])))
        start_response("204 No Content", [])
        return [result[:0]]

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = spelling.format(port=server.server_port)
        settings = PRIVATE_OK.with_(signing_secret="s3cret")

        async def go() -> Outcome:
            target = HttpTarget(settings, resolver=_ToLoopback(server.server_port))
            try:
                return await target.deliver(delivery(make(url, body="{}")))
            finally:
                await target.close()

        assert asyncio.run(go()).ok
    finally:
        server.shutdown()
        server.server_close()
    [(hdrs, body, from_request_status)] = seen
    assert from_request_status == 204
    assert verify_callback(key, hdrs, body, url=url).job_id == "job-1"
    assert CallbackReceiver(key, url=url).verify(hdrs, body).job_id == "job-1"
    with pytest.raises(InvalidCallback):
        verify_callback(key, hdrs, body, url=url.replace("http://", "https://"))


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_any_2xx_is_success(rx, status):
    rx.reply("/ok", status=status, body="fine" if status != 204 else b"")
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/ok"))))
    assert outcome.ok and outcome.result["http_status"] == status


# -- failures -------------------------------------------------------------------------


def test_500_fails_with_status_and_snippet(rx):
    rx.reply("/boom", status=500, body='{"error":"database on fire"}')
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/boom"))))
    assert not outcome.ok and outcome.retryable
    assert outcome.error == "HTTP 500"
    assert outcome.result == {
        "http_status": 500,
        "response_snippet": '{"error":"database on fire"}',
    }


@pytest.mark.parametrize("status", [400, 404, 429, 503])
def test_non_2xx_fails(rx, status):
    rx.reply("/no", status=status, body="nope")
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/no"))))
    assert not outcome.ok and outcome.error == f"HTTP {status}"


def test_snippet_is_capped_at_1_kib_of_a_1_mib_answer(rx):
    rx.reply("/huge", status=200, body=b"x" * (1024 * 1024))
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/huge"))))
    assert outcome.ok
    assert outcome.result["response_snippet"] == "x" * 1024


def test_snippet_of_invalid_utf8_is_replaced_not_an_error(rx):
    rx.reply("/bin", status=502, body=b"\xff\xfe bad")
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/bin"))))
    assert outcome.result["response_snippet"] == "\ufffd\ufffd bad"


def test_timeout_fails_with_timeout_message(rx):
    rx.reply("/slow", status=204, delay=3.0)
    started = time.monotonic()
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/slow"), timeout=0.5)))
    elapsed = time.monotonic() - started
    assert not outcome.ok and outcome.retryable
    assert outcome.error == "timeout after 0.5s"
    assert elapsed < 2.5


def test_redirect_is_not_followed(rx):
    rx.reply("/moved", status=302, headers={"Location": rx.url("/elsewhere")})
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/moved"))))
    assert not outcome.ok
    assert "302" in outcome.error and rx.url("/elsewhere") in outcome.error
    assert outcome.result["http_status"] == 302
    assert outcome.result["location"] == rx.url("/elsewhere")
    time.sleep(0.1)
    assert rx.requests_for("/elsewhere") == []
    assert len(rx.requests_for("/moved")) == 1


def test_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now.
    [outcome] = fire(PRIVATE_OK, delivery(make(f"http://127.0.0.1:{port}/")))
    assert not outcome.ok and outcome.retryable
    assert outcome.error == f"connection refused: 127.0.0.1:{port}"


def test_dns_failure_is_a_clear_failed_attempt():
    [outcome] = fire(PRIVATE_OK, delivery(make("http://no-such-host.invalid/")))
    assert not outcome.ok and outcome.retryable
    assert outcome.error.startswith("DNS lookup failed for no-such-host.invalid")


# -- private-address guard -----------------------------------------------------------


def test_guard_refuses_loopback_literal_and_nothing_is_sent(rx):
    [outcome] = fire(GUARDED, delivery(make(rx.url("/x"))))
    assert not outcome.ok and not outcome.retryable
    assert outcome.error == (
        "target resolves to a loopback address 127.0.0.1; "
        "set CRONMAN_ALLOW_PRIVATE_TARGETS=true to allow"
    )
    time.sleep(0.1)
    assert rx.requests == []


def test_guard_refuses_a_name_resolving_to_loopback_at_connect_time(rx):
    target = make(f"http://localhost:{rx.port}/x")
    # Twice: the second lookup may come from the client's DNS cache and must be refused too.
    outcomes = fire(GUARDED, delivery(target), delivery(target, attempt=2))
    for outcome in outcomes:
        assert not outcome.ok and not outcome.retryable
        assert "loopback address" in outcome.error
        assert "CRONMAN_ALLOW_PRIVATE_TARGETS=true" in outcome.error
    time.sleep(0.1)
    assert rx.requests == []


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://[::1]:{port}/", "loopback address ::1"),
        ("http://[::ffff:127.0.0.1]:{port}/", "loopback address ::ffff:127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata address 169.254.169.254"),
        ("http://[fd00:ec2::254]/", "cloud metadata address fd00:ec2::254"),
        ("http://10.0.0.1/", "private address 10.0.0.1"),
        ("http://192.168.1.1:8080/", "private address 192.168.1.1"),
        ("http://100.64.0.1/", "CGNAT (shared) address 100.64.0.1"),
        ("http://0.0.0.0:{port}/", "unspecified address 0.0.0.0"),
        ("http://[fe80::1]/", "link-local address fe80::1"),
    ],
)
def test_guard_refuses_ip_literals_before_any_connection(rx, url, needle):
    started = time.monotonic()
    [outcome] = fire(GUARDED, delivery(make(url.format(port=rx.port), timeout=30)))
    assert not outcome.ok and not outcome.retryable
    assert needle in outcome.error
    # Refused up front: no connection attempt (which could hang for the 30 s timeout).
    assert time.monotonic() - started < 5
    assert rx.requests == []


def test_allow_private_targets_lets_loopback_through(rx):
    outcomes = fire(
        PRIVATE_OK,
        delivery(make(rx.url("/lit"))),
        delivery(make(f"http://localhost:{rx.port}/name")),
    )
    assert [o.ok for o in outcomes] == [True, True]
    assert {r.path for r in rx.wait_for(2)} == {"/lit", "/name"}


# -- client behaviour ------------------------------------------------------------------


def test_connections_are_pooled_and_reused(rx):
    target = make(rx.url("/pool"))
    outcomes = fire(PRIVATE_OK, *(delivery(target, attempt=n) for n in range(1, 6)))
    assert all(o.ok for o in outcomes)
    assert len({r.client for r in rx.wait_for(5)}) == 1


def test_many_in_flight_at_once(rx):
    rx.reply("/c", status=204, delay=0.2)
    target = make(rx.url("/c"))

    async def go():
        http = HttpTarget(PRIVATE_OK)
        try:
            started = time.monotonic()
            outcomes = await asyncio.gather(
                *(http.deliver(delivery(target, job_id=f"j{i}")) for i in range(40))
            )
            return outcomes, time.monotonic() - started
        finally:
            await http.close()

    outcomes, elapsed = asyncio.run(go())
    assert all(o.ok for o in outcomes)
    assert len({r.header("Cronman-Run-Id") for r in rx.wait_for(40)}) == 40
    # Concurrent, not 40 x 0.2 s: counted at the receiver, not timed (a busy
    # machine slows the start of each request, not their overlap).
    assert rx.max_in_flight_for("/c") >= 20, rx.max_in_flight_for("/c")
    assert elapsed < 6.0


def test_cookies_are_not_carried_between_requests(rx):
    rx.reply("/set", status=200, headers={"Set-Cookie": "session=abc; Path=/"})
    fire(PRIVATE_OK, delivery(make(rx.url("/set"))), delivery(make(rx.url("/next"))))
    assert rx.wait_for(2)[1].header("Cookie") is None


def test_proxy_environment_is_ignored(rx, monkeypatch):
    # A proxy would bypass the private-address guard: the client never uses one.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    [outcome] = fire(PRIVATE_OK, delivery(make(rx.url("/direct"))))
    assert outcome.ok


def test_an_invalid_target_object_is_a_failed_outcome():
    [outcome] = fire(PRIVATE_OK, delivery({"kind": "http"}))
    assert not outcome.ok and not outcome.retryable
    assert "invalid http target" in outcome.error


# -- through the registry, and dead letters ------------------------------------------


def test_registry_and_dead_letter_over_http(rx):
    dl_spec = validate_dead_letter({"kind": "http", "url": rx.url("/dlq")})
    record = {
        "id": run_id_for("job-9", WHEN),
        "job_id": "job-9",
        "scheduled_for": "2026-11-22T07:00:00Z",
        "status": "failed",
        "attempt": 3,
        "error": "HTTP 503",
        "result": {"http_status": 503},
    }

    async def go():
        registry = build_targets(PRIVATE_OK.with_(signing_secret="k"))
        try:
            return await registry.deliver(dead_letter_delivery(dl_spec, record,
                                                                namespace="billing"))
        finally:
            await registry.close()

    outcome = asyncio.run(go())
    assert outcome.ok
    [req] = rx.wait_for(1)
    assert req.method == "POST"
    assert req.header("Content-Type") == "application/json"
    assert json.loads(req.body) == record
    assert req.header("Cronman-Run-Id") == record["id"]
    assert callback_verifies("k", "billing", req, dl_spec["url"])


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_a_node_fed_400_mb_of_headers_fails_the_attempt_and_keeps_its_memory(tmp_path):
    # The real node (standalone: one process), a job whose target streams headers
    # without end: each attempt fails with the bound's error, retried per the job's
    # policy, and the node's peak RSS stays where it was.
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    sent: list[int] = []
    handler = flood(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 65536, sent, warm=True)
    with Receiver() as rx, RawServer(handler) as server, Processes(tmp_path) as procs:
        sa = procs.standalone(db)
        status, warm, _ = http("POST", f"{sa.url}/v1/jobs", {
            "name": "warm", "schedule": {"kind": "interval", "every": 1},
            "target": {"kind": "http", "url": rx.url("/warm")}})
        assert status == 201, warm
        rx.wait_for(2, timeout=10, path="/warm")
        baseline = _peak_rss_kib(sa.pid)
        status, job, _ = http("POST", f"{sa.url}/v1/jobs", {
            "name": "flood", "schedule": {"kind": "once", "at": format_rfc3339(
                datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2))},
            "target": {"kind": "http", "url": server.url("/big"), "timeout": 10},
            "retry": {"max_attempts": 3, "min_backoff": 0.5, "max_backoff": 0.5}})
        assert status == 201, job

        def failed():
            _, page, _ = http("GET", f"{sa.url}/v1/jobs/{job['id']}/runs")
            return [r for r in page["items"] if r["status"] == "failed"]

        run = wait_for(failed, 20, "the flooded run failed")[0]
        peak = _peak_rss_kib(sa.pid)
        assert sa.running()
    assert peak - baseline < 20 * 1024, (baseline, peak, run["error"])
    assert run["error"] == f"answer headers over 64 KiB from 127.0.0.1:{server.port}"
    assert run["attempt"] == 3
    assert len(sent) == 3 and max(sent) < FLOOD_LIMIT
