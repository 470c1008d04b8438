"""The HTTP client under the http target, against real loopback servers, on both event loops.

Servers here misbehave on purpose (tests.support.raw_http): chunked answers,
kept-alive connections closed while idle, answers that stall or lie, TLS with
a certificate from the test's own CA. Every test runs on asyncio's loop and
on uvloop, the scheduler node's loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest
import trustme

from cronman import eventloop
from cronman.callbacks import Delivery, Outcome, validate_target
from cronman.callbacks.http import HttpTarget
from cronman.callbacks.httpclient import Address, HttpClient, HttpClientError, PreparedRequest
from cronman.callbacks.httpclient.connection import PROBE_IDLE_AFTER
from cronman.config import Settings
from cronman.ids import run_id_for
from tests.support.raw_http import (
    FLOOD_LIMIT,
    RawConnection,
    RawServer,
    flood,
    respond,
    serve_forever,
)
from tests.support.receiver import Receiver

PRIVATE_OK = Settings(allow_private_targets=True)
GUARDED = Settings(allow_private_targets=False)
WHEN = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        return eventloop.run(coro, request.param)

    return runner


def make(url: str, **fields: Any) -> dict[str, Any]:
    return validate_target({"kind": "http", "url": url, **fields})


def delivery(target: dict[str, Any], *, job_id: str = "job-1", attempt: int = 1) -> Delivery:
    return Delivery(job_id=job_id, run_id=run_id_for(job_id, WHEN), scheduled_for=WHEN,
                    attempt=attempt, target=target)


def fire(run: Run, settings: Settings, *deliveries: Delivery, pause: float = 0.0,
         block: float = 0.0, block_until: threading.Event | None = None,
         **target_options: Any) -> list[Outcome]:
    """Deliver in order with one HttpTarget; between deliveries, ``pause`` lets the loop
    run, ``block`` blocks it (so it cannot see what the server did meanwhile), and
    ``block_until`` keeps it blocked until that event is set as well."""

    async def go() -> list[Outcome]:
        target = HttpTarget(settings, **target_options)
        outcomes = []
        try:
            for i, d in enumerate(deliveries):
                if i:
                    await asyncio.sleep(pause)
                    time.sleep(block)
                    if block_until is not None:
                        assert block_until.wait(10), "the event never came"
                outcomes.append(await target.deliver(d))
            return outcomes
        finally:
            await target.close()

    result: list[Outcome] = run(go())
    return result


def chunked(*parts: bytes, headers: str = "") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    return f"HTTP/1.1 200 OK\r\n{headers}Transfer-Encoding: chunked\r\n\r\n".encode() + body


# -- keep-alive and the kinds of answers --------------------------------------------


def test_one_connection_carries_every_kind_of_answer(run):
    replies = {
        "/length": respond(200, b"hello"),
        "/chunked": chunked(b"hel", b"lo ", b"world"),
        "/no-content": respond(204, length=False),
        "/not-modified": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
        "/interim": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + respond(201, b"ok"),
        "/error": respond(503, b"busy", {"Retry-After": "1"}),
    }

    def handler(conn: RawConnection) -> None:
        while (req := conn.read_request()) is not None:
            conn.send(replies[req.path])

    with RawServer(handler) as server:
        paths = list(replies) + ["/length"]
        outcomes = fire(run, PRIVATE_OK, *(delivery(make(server.url(p))) for p in paths))
        assert server.connections == 1
        assert [r.path for r in server.requests] == paths
    assert [o.result.get("http_status") for o in outcomes] == [200, 200, 204, 304, 201, 503, 200]
    assert [o.result.get("response_snippet") for o in outcomes] == [
        "hello", "hello world", None, None, "ok", "busy", "hello"]
    assert [o.ok for o in outcomes] == [True, True, True, False, True, False, True]


def test_chunked_snippet_stops_at_1_kib(run):
    body = [bytes([65 + i % 26]) * 300 for i in range(10)]  # 3,000 bytes in 10 chunks
    with RawServer(serve_forever(chunked(*body))) as server:
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/big"))))
    assert outcome.ok
    assert outcome.result["response_snippet"] == b"".join(body)[:1024].decode()


def test_head_answer_has_no_body_and_the_connection_is_reused(run):
    def handler(conn: RawConnection) -> None:
        while (req := conn.read_request()) is not None:
            if req.method == "HEAD":
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            else:
                conn.send(respond(200, b"after"))

    async def go(url: str) -> list[tuple[int, bytes]]:
        client = HttpClient(guard=False)
        try:
            head = await client.request(PreparedRequest("HEAD", url), timeout=5)
            get = await client.request(PreparedRequest("GET", url), timeout=5)
            return [(head.status, head.body), (get.status, get.body)]
        finally:
            await client.close()

    with RawServer(handler) as server:
        assert run(go(server.url("/h"))) == [(200, b""), (200, b"after")]
        assert server.connections == 1


def test_close_delimited_body_and_connection_close_are_read_then_not_reused(run):
    replies = iter([
        b"HTTP/1.0 200 OK\r\n\r\nbody until the close",
        respond(200, b"last one", {"Connection": "close"}),
        respond(200, b"fresh"),
    ])

    def handler(conn: RawConnection) -> None:
        while conn.read_request() is not None:
            reply = next(replies)
            conn.send(reply)
            if b"Content-Length" not in reply or b"close" in reply:
                return  # the server closes

    with RawServer(handler) as server:
        outcomes = fire(run, PRIVATE_OK, *(delivery(make(server.url(f"/{i}"))) for i in range(3)))
        assert server.connections == 3
    assert [o.result["response_snippet"] for o in outcomes] == [
        "body until the close", "last one", "fresh"]


def test_a_body_longer_than_the_snippet_is_not_waited_for(run):
    # Headers and 2,000 bytes of a 100,000-byte body, then nothing: the snippet is
    # there, so the attempt ends now (and that connection is closed, not reused).
    def handler(conn: RawConnection) -> None:
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n" + b"e" * 2000)

    with RawServer(handler) as server:
        started = time.monotonic()
        outcomes = fire(run, PRIVATE_OK, *(delivery(make(server.url("/s"), timeout=5))
                                           for _ in range(2)))
        assert time.monotonic() - started < 2.5
        assert server.connections == 2
    for outcome in outcomes:
        assert outcome.error == "HTTP 500"
        assert outcome.result["response_snippet"] == "e" * 1024


# -- servers that close kept-alive connections ----------------------------------------


def _answer_then_close_after(
    idle: float, closed: threading.Event | None = None
) -> Callable[[RawConnection], None]:
    """Answers requests, closing the connection once it has been idle ``idle`` seconds
    after an answer (then sets ``closed``). The first request may take its time: on a
    busy machine the client can need longer than ``idle`` to send it."""

    def handler(conn: RawConnection) -> None:
        timeout = 10.0
        while conn.read_request(timeout=timeout) is not None:
            conn.send(respond(204, length=False))
            timeout = idle
        conn.sock.close()
        if closed is not None:
            closed.set()

    return handler


def test_server_closing_an_idle_connection_costs_nothing(run):
    with RawServer(_answer_then_close_after(0.2)) as server:
        target = make(server.url("/idle"))
        outcomes = fire(run, PRIVATE_OK, delivery(target), delivery(target, attempt=2),
                        pause=0.6)
        assert [o.ok for o in outcomes] == [True, True]
        assert server.connections == 2 and len(server.requests) == 2


def test_a_close_the_loop_has_not_seen_yet_is_caught_before_sending(run):
    # The loop is blocked while the server closes: the FIN sits unread when the next
    # request comes, and only the probe of the idle socket can tell.
    # The block outlasts PROBE_IDLE_AFTER, and the server's close, however late it comes.
    closed = threading.Event()
    with RawServer(_answer_then_close_after(0.2, closed)) as server:
        target = make(server.url("/idle"))
        outcomes = fire(run, PRIVATE_OK, delivery(target), delivery(target, attempt=2),
                        block=PROBE_IDLE_AFTER + 0.3, block_until=closed)
        assert [o.ok for o in outcomes] == [True, True], outcomes
        assert server.connections == 2 and len(server.requests) == 2


def test_a_request_that_was_sent_is_never_sent_again(run):
    # The server reads the second request and closes without answering: that is a
    # failed attempt (the dispatcher's retry policy decides), not a silent resend.
    def handler(conn: RawConnection) -> None:
        conn.read_request()
        conn.send(respond(204, length=False))
        conn.read_request()

    with RawServer(handler) as server:
        target = make(server.url("/once"))
        first, second = fire(run, PRIVATE_OK, delivery(target), delivery(target, attempt=2))
        time.sleep(0.2)
        assert first.ok
        assert not second.ok and second.retryable
        assert second.error == f"server 127.0.0.1:{server.port} disconnected before answering"
        assert len(server.requests) == 2 and server.connections == 1


def test_data_from_the_server_between_requests_retires_the_connection(run):
    def handler(conn: RawConnection) -> None:
        while conn.read_request() is not None:
            conn.send(respond(200, b"ok"))
            time.sleep(0.1)
            conn.send(respond(200, b"unasked"))

    with RawServer(handler) as server:
        target = make(server.url("/chatty"))
        outcomes = fire(run, PRIVATE_OK, delivery(target), delivery(target, attempt=2),
                        pause=0.4)
        assert [o.result["response_snippet"] for o in outcomes] == ["ok", "ok"]
        assert server.connections == 2


def test_an_answer_that_is_not_http_is_a_failed_attempt(run):
    with RawServer(serve_forever(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")) as server:
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/x"))))
    assert not outcome.ok and outcome.retryable
    assert outcome.error.startswith(f"invalid HTTP response from 127.0.0.1:{server.port}: ")


# -- slow servers ----------------------------------------------------------------------


def _stall(conn: RawConnection, first: bytes = b"") -> None:
    conn.read_request()
    conn.send(first)
    conn.wait_closed_by_client(5)


@pytest.mark.parametrize(
    "first",
    [b"", b"HTTP/1.1 200 OK\r\nContent-Le", b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\npart"],
    ids=["silent", "headers-cut", "body-cut"],
)
def test_a_stalled_answer_times_out(run, first):
    with RawServer(lambda conn: _stall(conn, first)) as server:
        started = time.monotonic()
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/slow"), timeout=0.5)))
        assert time.monotonic() - started < 2.0
    assert not outcome.ok and outcome.retryable
    assert outcome.error == "timeout after 0.5s"


@pytest.mark.parametrize(("timeout", "connect_timeout", "label"),
                         [(5, 0.4, "0.4s"), (0.5, 10.0, "0.5s")])
def test_a_stalled_tls_handshake_is_a_connect_timeout(run, timeout, connect_timeout, label):
    # A TCP server that never speaks TLS: the connect phase times out, after the
    # connect timeout or the target's, whichever is shorter.
    with RawServer(lambda conn: conn.wait_closed_by_client(5)) as server:
        url = f"https://127.0.0.1:{server.port}/"
        started = time.monotonic()
        [outcome] = fire(run, PRIVATE_OK, delivery(make(url, timeout=timeout)),
                         connect_timeout=connect_timeout)
        assert time.monotonic() - started < 2.0
    assert outcome.error == f"timeout after {label} (connecting to 127.0.0.1:{server.port})"


def test_a_cancelled_delivery_closes_its_connection(run):
    with RawServer(_stall) as server:

        async def go() -> int:
            target = HttpTarget(PRIVATE_OK)
            task = asyncio.create_task(target.deliver(delivery(make(server.url("/c")))))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            client = target._client.get(lambda: pytest.fail("the delivery made no client"))
            size = client.pool.size  # before close: the cancel itself closed it
            await target.close()
            return size

        assert run(go()) == 0
        deadline = time.monotonic() + 5
        while server.active and time.monotonic() < deadline:  # the server saw the close
            time.sleep(0.02)
        assert server.active == 0


def _answer_once_then_stall(conn: RawConnection) -> None:
    conn.read_request()
    conn.send(respond(204, length=False))
    _stall(conn)


def test_a_request_on_an_idle_connection_is_written_before_start_returns(run):
    # The dispatcher starts an attempt from its timer's callback: the request
    # must not wait for the loop to come round (a busy loop's turn is long).
    with RawServer(serve_forever(respond(200, b"ok"))) as server:
        target_obj = make(server.url("/at-once"))

        async def go() -> tuple[int, Outcome]:
            target = HttpTarget(PRIVATE_OK)
            try:
                assert (await target.deliver(delivery(target_obj))).ok
                answer = target.start(delivery(target_obj, attempt=2))
                # No await since: only a write made inside ``start`` can arrive.
                deadline = time.monotonic() + 5
                while len(server.requests) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen = len(server.requests)
                return seen, await answer
            finally:
                await target.close()

        seen, outcome = run(go())
    assert seen == 2
    assert outcome.ok and outcome.result == {"http_status": 200, "response_snippet": "ok"}
    assert server.connections == 1


def test_a_request_that_cannot_be_rendered_keeps_the_idle_connection(run, monkeypatch):
    with RawServer(serve_forever(respond(200, b"ok"))) as server:
        target_obj = make(server.url("/render"))

        async def go() -> tuple[Outcome, Outcome, int]:
            target = HttpTarget(PRIVATE_OK)
            try:
                assert (await target.deliver(delivery(target_obj))).ok
                render = PreparedRequest.render

                def broken(self, *args, **kwargs):
                    raise ValueError("header value not encodable")

                monkeypatch.setattr(PreparedRequest, "render", broken)
                failed = await target.deliver(delivery(target_obj, attempt=2))
                monkeypatch.setattr(PreparedRequest, "render", render)
                again = await target.deliver(delivery(target_obj, attempt=3))
                client = target._client.get(lambda: pytest.fail("no client"))
                return failed, again, client.pool.size
            finally:
                await target.close()

        failed, again, size = run(go())
    assert not failed.ok and "header value not encodable" in failed.error
    assert again.ok and size == 1
    assert server.connections == 1 and len(server.requests) == 2


def test_cancelling_a_request_started_at_once_closes_its_connection(run):
    with RawServer(_answer_once_then_stall) as server:
        target_obj = make(server.url("/c"))

        async def go() -> tuple[int, int]:
            target = HttpTarget(PRIVATE_OK)
            assert (await target.deliver(delivery(target_obj))).ok
            answer = target.start(delivery(target_obj, attempt=2))

            async def wait() -> Outcome:
                return await answer

            task = asyncio.create_task(wait())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            client = target._client.get(lambda: pytest.fail("the delivery made no client"))
            size = client.pool.size
            await target.close()
            return size, len(server.requests)

        size, requests = run(go())
        assert (size, requests) == (0, 2)
        deadline = time.monotonic() + 5
        while server.active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.active == 0


# -- answers too large: bounded head, body and time -------------------------------------

@pytest.mark.parametrize(("piece", "error"), [
    (b"a" * 65536, "answer headers over 64 KiB"),  # one header that never ends
    (b"X-Pad: " + b"b" * 8000 + b"\r\n", "answer headers over 64 KiB"),  # 9 fit in 64 KiB
    (b"X-Pad: c\r\n", "answer has over 100 headers"),
], ids=["one-endless-header", "big-headers", "many-headers"])
def test_an_answer_head_over_its_bound_fails_the_attempt(run, piece, error):
    sent: list[int] = []
    head = b"HTTP/1.1 200 OK\r\n" + (b"X-Endless: " if piece.startswith(b"a") else b"")
    with RawServer(flood(head, piece, sent)) as server:
        started = time.monotonic()
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/big"), timeout=10)))
        assert time.monotonic() - started < 3
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.02)
    assert not outcome.ok and outcome.retryable  # retried per the job's policy
    assert outcome.error == f"{error} from 127.0.0.1:{server.port}"
    assert sent and sent[0] < FLOOD_LIMIT  # the client stopped reading and closed


def test_a_400_mb_header_answer_keeps_the_client_within_20_mb(run):
    # The client in a process of its own, so its peak RSS is its own; the server
    # streams (it never holds more than one 64 KiB piece).
    sent: list[int] = []
    handler = flood(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 65536, sent, warm=True)
    with RawServer(handler) as server:
        child = subprocess.run(
            [sys.executable, "-m", "tests.support.answer_memory", server.url("/big"), "10"],
            capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(child.stdout)
    assert not report["ok"]
    assert report["error"] == f"answer headers over 64 KiB from 127.0.0.1:{server.port}"
    assert report["peak_kib"] - report["baseline_kib"] < 20 * 1024, report
    assert report["after_kib"] - report["baseline_kib"] < 20 * 1024, report
    assert report["seconds"] < 3, report


def test_an_endless_body_is_read_up_to_the_snippet_and_no_further(run):
    # The status decides; the body is read to the snippet's 1 KiB (plus what one
    # read of the socket holds), then the connection is closed.
    sent: list[int] = []
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"10000\r\n" + b"d" * 65536 + b"\r\n"
    with RawServer(flood(head, piece, sent)) as server:
        started = time.monotonic()
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/body"), timeout=10)))
        assert time.monotonic() - started < 3
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.02)
    assert outcome.ok
    assert outcome.result["response_snippet"] == "d" * 1024
    assert sent and sent[0] < FLOOD_LIMIT


def _drip(conn: RawConnection) -> None:
    """A header line every 50 ms, never the end of the head."""
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\n")
    for i in range(200):
        conn.send(b"X-Drip-%d: x\r\n" % i)
        time.sleep(0.05)


def test_a_head_that_drips_in_forever_times_out(run):
    # Under every size bound, never complete: the target's timeout ends it.
    with RawServer(_drip) as server:
        started = time.monotonic()
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/drip"), timeout=0.5)))
        assert time.monotonic() - started < 2.0
    assert not outcome.ok and outcome.retryable
    assert outcome.error == "timeout after 0.5s"


def test_a_head_just_within_the_bounds_is_an_answer(run):
    headers = "".join(f"X-H{i}: {'v' * 500}\r\n" for i in range(98))
    reply = f"HTTP/1.1 204 No Content\r\n{headers}Content-Length: 0\r\n\r\n".encode()
    with RawServer(serve_forever(reply)) as server:
        outcomes = fire(run, PRIVATE_OK, *(delivery(make(server.url("/fits")))
                                           for _ in range(2)))
        assert server.connections == 1  # kept alive: the counts start again per request
    assert [o.ok for o in outcomes] == [True, True]


def test_the_client_bounds_are_settable(run):
    # A client with bounds of its own (the webhook sender's client takes the defaults).
    reply = respond(204, headers={f"X-H{i}": "v" for i in range(5)})

    async def go() -> tuple[str, str]:
        errors = []
        for kwargs in ({"max_headers": 4}, {"max_header_bytes": 50}):
            client = HttpClient(guard=False, **kwargs)
            try:
                await client.request(PreparedRequest("GET", server.url("/")), timeout=5)
            except HttpClientError as exc:
                errors.append(str(exc))
            finally:
                await client.close()
        return errors[0], errors[1]

    with RawServer(serve_forever(reply)) as server:
        assert run(go()) == ("answer has over 4 headers", "answer headers over 50 bytes")


# -- redirects -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("location", ["absolute", "relative"])
def test_redirects_are_failed_attempts_never_followed(run, status, location):
    with Receiver() as rx:
        where = rx.url("/elsewhere") if location == "absolute" else "/elsewhere"
        rx.reply("/moved", status=status, headers={"Location": where})
        [outcome] = fire(run, PRIVATE_OK, delivery(make(rx.url("/moved"))))
        time.sleep(0.1)
        assert [r.path for r in rx.requests] == ["/moved"]
    assert not outcome.ok and outcome.retryable
    assert outcome.error == f"HTTP {status} redirect to {where} (redirects are not followed)"
    assert outcome.result == {"http_status": status, "location": where}


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_tls(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)
    return ctx


def _client_tls(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


def test_tls_with_a_trusted_certificate_sends_sni_and_keeps_alive(run, ca):
    tls = _server_tls(ca, "localhost")
    with RawServer(serve_forever(respond(200, b"secure")), tls=tls) as server:
        target = make(server.url("/s", host="localhost"))
        outcomes = fire(run, PRIVATE_OK, delivery(target), delivery(target, attempt=2),
                        ssl_context=_client_tls(ca))
        assert server.sni_names == ["localhost"]
        assert server.connections == 1
        assert server.requests[0].headers["host"] == f"localhost:{server.port}"
    assert [o.result for o in outcomes] == [{"http_status": 200, "response_snippet": "secure"}] * 2


def test_tls_refuses_a_certificate_from_an_unknown_ca(run, ca):
    tls = _server_tls(ca, "localhost")
    with RawServer(serve_forever(respond(200, b"secure")), tls=tls) as server:
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/s", host="localhost"))))
        time.sleep(0.1)
        assert server.requests == []
    assert not outcome.ok
    assert outcome.error.startswith(f"TLS certificate error for localhost:{server.port}: ")
    assert "certificate" in outcome.error.split(": ", 1)[1]


def test_tls_refuses_a_certificate_for_another_name(run, ca):
    tls = _server_tls(ca, "other.example")
    with RawServer(serve_forever(respond(200, b"secure")), tls=tls) as server:
        [outcome] = fire(run, PRIVATE_OK, delivery(make(server.url("/s", host="localhost"))),
                         ssl_context=_client_tls(ca))
        time.sleep(0.1)
        assert server.requests == []
        assert server.sni_names == ["localhost"]
    assert outcome.error.startswith(f"TLS certificate error for localhost:{server.port}: ")
    assert "localhost" in outcome.error.split(": ", 1)[1]  # the name that did not match


# -- the private-address guard at connect time -------------------------------------------


class ScriptedResolver:
    """Answers each lookup with the next list of addresses (a DNS server that changes its mind)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int) -> list[Address]:
        self.lookups.append(host)
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, (a, port))
                for a in self.answers.pop(0)]


def test_rebinding_to_a_private_address_is_refused_when_connecting(run):
    with RawServer(serve_forever(respond(204, length=False))) as server:
        # The job was accepted with a host name; at delivery time it resolves to the
        # loopback address the server listens on, then to a private one.
        target = make(f"http://rebind.example:{server.port}/x")
        resolver = ScriptedResolver(["127.0.0.1"], ["10.0.0.7", "127.0.0.1"])
        outcomes = fire(run, GUARDED, delivery(target), delivery(target, attempt=2),
                        resolver=resolver)
        assert resolver.lookups == ["rebind.example"] * 2  # checked at each connect
        time.sleep(0.1)
        assert server.connections == 0
    assert [o.retryable for o in outcomes] == [False, False]
    assert outcomes[0].error == ("target resolves to a loopback address 127.0.0.1; "
                                 "set CRONMAN_ALLOW_PRIVATE_TARGETS=true to allow")
    assert outcomes[1].error.startswith("target resolves to a private address 10.0.0.7;")


def test_the_resolved_address_is_the_one_connected_to(run):
    # Guard off: the scripted answer is used as is (and the Host header keeps the name).
    with RawServer(serve_forever(respond(204, length=False))) as server:
        target = make(f"http://rebind.example:{server.port}/x")
        [outcome] = fire(run, PRIVATE_OK, delivery(target),
                         resolver=ScriptedResolver(["127.0.0.1"]))
        assert outcome.ok
        assert server.requests[0].headers["host"] == f"rebind.example:{server.port}"


def test_a_failed_lookup_is_a_clear_failed_attempt(run):
    class Failing:
        async def resolve(self, host: str, port: int) -> list[Address]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    [outcome] = fire(run, GUARDED, delivery(make("http://nowhere.example/")), resolver=Failing())
    assert outcome.error == "DNS lookup failed for nowhere.example: Name or service not known"
    assert outcome.retryable


# -- pool bounds ---------------------------------------------------------------------------


def _slow(delay: float) -> Callable[[RawConnection], None]:
    def handler(conn: RawConnection) -> None:
        while conn.read_request() is not None:
            time.sleep(delay)
            conn.send(respond(204, length=False))

    return handler


def test_the_pool_never_holds_more_connections_than_its_limit(run):
    with RawServer(_slow(0.2)) as server:
        target = make(server.url("/p"), timeout=10)

        async def go() -> list[Outcome]:
            http = HttpTarget(PRIVATE_OK, pool_limit=2)
            assert http.pool_limit == 2  # what the dispatcher bounds its in-flight attempts by
            try:
                return await asyncio.gather(
                    *(http.deliver(delivery(target, job_id=f"j{i}")) for i in range(6)))
            finally:
                await http.close()

        outcomes = run(go())
        assert all(o.ok for o in outcomes)
        assert len(server.requests) == 6
        assert server.connections == 2 and server.max_active == 2


def test_a_full_pool_closes_an_idle_connection_of_another_origin(run):
    with RawServer(serve_forever(respond(204, length=False))) as server:
        outcomes = fire(run, PRIVATE_OK, delivery(make(server.url("/a"))),
                        delivery(make(server.url("/b", host="localhost"))),
                        pool_limit=1)
        assert [o.ok for o in outcomes] == [True, True]
        assert server.connections == 2
        deadline = time.monotonic() + 5
        while server.active > 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.active == 0  # the first was closed to make room; close() took the second


def test_waiting_for_a_free_connection_counts_against_the_timeout(run):
    with RawServer(_slow(1.0)) as server:

        async def go() -> list[Outcome]:
            http = HttpTarget(PRIVATE_OK, pool_limit=1)
            try:
                slow = asyncio.create_task(http.deliver(delivery(make(server.url("/1")))))
                await asyncio.sleep(0.1)
                quick = await http.deliver(delivery(make(server.url("/2"), timeout=0.3)))
                return [await slow, quick]
            finally:
                await http.close()

        slow, quick = run(go())
    assert slow.ok
    assert quick.error == "timeout after 0.3s (waiting for a free connection; pool limit 1)"
