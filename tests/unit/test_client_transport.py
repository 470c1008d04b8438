"""The API client's HTTP layer against a real local server: retries, errors, bulk chunks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cronman.client import (
    BulkCreateError,
    ConflictError,
    CronmanClient,
    InvalidRequest,
    RetryPolicy,
    Unavailable,
)
from tests.support.api import free_port

FAST = RetryPolicy(attempts=4, backoff=0.01, max_backoff=0.05)
JOB_ID = "0190a1b2-c3d4-7e5f-8a9b-0123456789ab"


@contextmanager
def scripted(answers: list[tuple[int, dict | None]]) -> Iterator[tuple[str, list]]:
    """A server answering each request with the next (status, JSON body); logs requests."""
    seen: list[tuple[str, str, bytes]] = []
    script = list(answers)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, self.rfile.read(length)))
            status, body = script.pop(0) if script else (500, None)
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def unavailable():
    return 503, {"error": {"code": "store_unavailable", "message": "db down", "field": None}}


def test_503_is_retried_for_every_method_then_succeeds():
    job = {"id": "j1", "name": "a"}
    with scripted([unavailable(), unavailable(), (201, job)]) as (url, seen):
        assert CronmanClient(url, retry=FAST).create_job({"name": "a"}) == job
    assert [m for m, _, _ in seen] == ["POST"] * 3


def test_503_gives_up_after_the_attempts():
    with scripted([unavailable()] * 5) as (url, seen):
        with pytest.raises(Unavailable) as exc:
            CronmanClient(url, retry=FAST).get_job(JOB_ID)
    assert len(seen) == 4 and exc.value.code == "store_unavailable"


def test_connection_refused_is_retried_then_unavailable():
    sleeps = []
    client = CronmanClient(f"http://127.0.0.1:{free_port()}", retry=FAST)
    client._http._sleep = sleeps.append
    with pytest.raises(Unavailable) as exc:
        client.cluster()
    assert exc.value.status == 0 and "cannot reach" in str(exc.value)
    assert len(sleeps) == 3 and all(0 < s <= 0.05 for s in sleeps)


def test_errors_carry_code_message_and_field_and_are_not_retried():
    bad = (400, {"error": {"code": "invalid", "message": "unknown time zone",
                           "field": "schedule.timezone"}})
    with scripted([bad, (409, {"error": {"code": "conflict", "message": "changed",
                                         "field": "version"}})]) as (url, seen):
        client = CronmanClient(url, retry=FAST)
        with pytest.raises(InvalidRequest) as exc:
            client.create_job({})
        assert (exc.value.status, exc.value.code, exc.value.field) == (
            400, "invalid", "schedule.timezone")
        assert str(exc.value) == "HTTP 400: unknown time zone (schedule.timezone)"
        with pytest.raises(ConflictError):
            client.replace_job(JOB_ID, {"name": "a"}, version=3)
    assert len(seen) == 2 and json.loads(seen[1][2])["version"] == 3


def test_bulk_chunks_and_renumbers_the_failing_field():
    ok = [(201, {"items": [{"id": f"j{i}"} for i in range(2)]}) for _ in range(2)]
    bad = (400, {"error": {"code": "invalid", "message": "is required",
                           "field": "jobs[1].name"}})
    progress = []
    with scripted([*ok, bad]) as (url, seen):
        with pytest.raises(BulkCreateError) as exc:
            CronmanClient(url, retry=FAST).create_jobs(
                [{"name": str(i)} for i in range(5)], chunk_size=2, progress=progress.append)
    assert [len(json.loads(b)["jobs"]) for _, _, b in seen] == [2, 2, 1]
    assert exc.value.field == "jobs[5].name" and len(exc.value.created) == 4
    assert progress == [2, 2]


def test_pages_are_followed_and_queries_encoded():
    pages = [(200, {"items": [{"id": "a"}, {"id": "b"}], "next_cursor": "c/1"}),
             (200, {"items": [{"id": "c"}], "next_cursor": None})]
    with scripted(pages) as (url, seen):
        items = list(CronmanClient(url).iter_jobs(namespace="ns", labels={"team": "a b"},
                                                  page_size=2))
    assert [i["id"] for i in items] == ["a", "b", "c"]
    assert seen[0][1] == "/v1/jobs?limit=2&namespace=ns&label=team%3Aa+b"
    assert seen[1][1].endswith("&cursor=c%2F1")


def test_a_job_named_by_namespace_and_name_is_looked_up_once_then_called_by_id():
    page = {"items": [{"id": JOB_ID, "namespace": "examples", "name": "reports/daily"}],
            "next_cursor": None}
    with scripted([(200, page), (202, {"id": "r1"}), (200, {"fire_times": []})]) as (url, seen):
        client = CronmanClient(url, retry=FAST)
        assert client.trigger_job("examples/reports/daily") == {"id": "r1"}
        client.next_fires(JOB_ID.upper(), 3)  # an id: no lookup
    assert [(m, p) for m, p, _ in seen] == [
        ("GET", "/v1/jobs?name=reports%2Fdaily&limit=6&namespace=examples"),
        ("POST", f"/v1/jobs/{JOB_ID}/trigger"),
        ("GET", f"/v1/jobs/{JOB_ID.upper()}/next?count=3")]


def test_excerpts_of_answers_that_are_not_the_apis_json():
    from cronman.client.transport import EXCERPT_CHARS, excerpt

    page = b"<html><head><title>502 Bad\n  Gateway</title></head><body>" + b"x" * 5000
    assert excerpt(page, "text/html") == "502 Bad Gateway (an HTML page, not the API's JSON)"
    untitled = (b"<html><head><style>p {}</style></head><body><h1>Service &amp; "
                b"co</h1>\n<p>down</p><script>x()</script></body></html>")
    assert excerpt(untitled) == "Service & co down (an HTML page, not the API's JSON)"
    text = excerpt(b"plain " * 100, "text/plain")
    assert len(text) == EXCERPT_CHARS and text.endswith("…") and "\n" not in text


@contextmanager
def dropping_first() -> Iterator[tuple[str, list]]:
    """A server that reads each request and closes the connection without an
    answer the first time (the answer lost), then answers 201; logs the
    requests' method, path and Idempotency-Key."""
    seen: list[tuple[str, str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
            if len(seen) == 1:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            data = json.dumps({"id": JOB_ID, "name": "x"}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_keyed_post_whose_answer_was_lost_is_sent_again_with_the_same_key():
    with dropping_first() as (url, seen):
        client = CronmanClient(url, retry=FAST)
        assert client.create_job({"name": "x"})["id"] == JOB_ID
    assert len(seen) == 2 and seen[0] == seen[1]
    key = seen[0][2]
    assert key and len(key) == 32
    with dropping_first() as (url, seen):
        CronmanClient(url, retry=FAST).trigger_job(JOB_ID)
    assert len(seen) == 2 and seen[0][2] == seen[1][2] != key  # a new key per call
    with dropping_first() as (url, seen):  # a key of the caller's own, on every attempt
        CronmanClient(url, retry=FAST).replay_run("run-1", idempotency_key="mine")
    assert [k for _, _, k in seen] == ["mine", "mine"]


def test_a_post_without_a_key_is_not_sent_again_after_a_lost_answer():
    with dropping_first() as (url, seen):
        with pytest.raises(Unavailable) as err:
            CronmanClient(url, retry=FAST).pause_job(JOB_ID, note="n")
    assert len(seen) == 1 and seen[0][2] is None
    assert "may have been applied" in str(err.value)
