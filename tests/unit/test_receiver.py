"""cronman.receiver: verification with the replay window, run-id deduplication,
the plain function, the WSGI middleware and the Flask decorator."""

from __future__ import annotations

import io
import json
import time

import pytest

from cronman.receiver import (
    ENVIRON_KEY,
    CallbackReceiver,
    Claim,
    InvalidCallback,
    MemoryDeduplicator,
    process_once,
    sqs_callback,
    verify_callback,
)
from cronman.signing import sign

SECRET = "s3cret"
BODY = b'{"kind":"digest"}'
URL = "https://billing.example.com/hook"


def headers(run_id="run-1", attempt=1, secret=SECRET, body=BODY, t=None, signed=True, url=URL,
            job_id="job-1", scheduled_for="2026-11-22T07:00:00Z"):
    out = {"Cronman-Job-Id": job_id, "Cronman-Run-Id": run_id,
           "Cronman-Scheduled-For": scheduled_for, "Cronman-Attempt": str(attempt)}
    if signed:
        out["Cronman-Signature"] = sign(secret, int(time.time() if t is None else t),
                                        job_id=job_id, run_id=run_id,
                                        scheduled_for=scheduled_for, url=url, body=body)
    return out


def test_verify_callback_reads_the_headers_in_any_case():
    h = {k.lower(): v for k, v in headers(attempt=2).items()}
    cb = verify_callback(SECRET, h, BODY, url=URL)
    assert (cb.job_id, cb.run_id, cb.attempt, cb.body) == ("job-1", "run-1", 2, BODY)
    assert verify_callback([b"old", SECRET], list(headers().items()), BODY,
                           url=URL).run_id == "run-1"


@pytest.mark.parametrize("header", ["Cronman-Job-Id", "Cronman-Run-Id", "Cronman-Scheduled-For"])
def test_a_signature_moved_to_other_ids_or_a_fire_time_is_refused(header):
    h = headers()
    h[header] = h[header] + "0"
    with pytest.raises(InvalidCallback) as exc:
        verify_callback(SECRET, h, BODY, url=URL)
    assert exc.value.status == 401


def test_a_signature_made_for_another_url_is_refused():
    with pytest.raises(InvalidCallback):
        verify_callback(SECRET, headers(url="https://attacker.example/hook"), BODY, url=URL)
    with pytest.raises(ValueError):
        verify_callback(SECRET, headers(), BODY, url=None)


@pytest.mark.parametrize("case", ["unsigned", "other-secret", "tampered", "stale", "future"])
def test_verify_callback_refuses(case):
    h = {"unsigned": headers(signed=False), "other-secret": headers(secret="nope"),
         "tampered": headers(), "stale": headers(t=time.time() - 301),
         "future": headers(t=time.time() + 301)}[case]
    body = BODY + b" " if case == "tampered" else BODY
    with pytest.raises(InvalidCallback) as exc:
        verify_callback(SECRET, h, body, url=URL)
    assert exc.value.status == 401


def test_missing_cronman_headers_are_a_400():
    h = headers()
    del h["Cronman-Run-Id"]
    with pytest.raises(InvalidCallback) as exc:
        verify_callback(SECRET, h, BODY, url=URL)
    assert exc.value.status == 400 and "Cronman-Run-Id" in exc.value.reason


def test_a_receiver_needs_a_secret_unless_told_otherwise():
    with pytest.raises(ValueError):
        CallbackReceiver(None)
    open_receiver = CallbackReceiver(None, allow_unsigned=True)
    assert open_receiver.handle(headers(signed=False), BODY, lambda cb: 1).status == 200


def test_memory_dedup_states_expiry_and_bound():
    now = [0.0]
    d = MemoryDeduplicator(max_entries=3, processing_ttl=10, done_ttl=100, clock=lambda: now[0])
    assert d.claim("a") is Claim.NEW
    assert d.claim("a") is Claim.IN_PROGRESS
    d.release("a")
    assert d.claim("a") is Claim.NEW
    d.complete("a")
    assert d.claim("a") is Claim.DONE
    assert d.claim("b") is Claim.NEW  # a holder that died: its claim expires
    now[0] = 11
    assert d.claim("b") is Claim.NEW
    for run in ("c", "d", "e"):
        d.claim(run)
        d.complete(run)
    assert len(d) == 3 and d.claim("a") is Claim.NEW  # the oldest was forgotten
    now[0] = 200
    assert d.claim("c") is Claim.NEW  # done_ttl passed


def test_process_once_releases_on_failure():
    d = MemoryDeduplicator()
    with pytest.raises(RuntimeError):
        process_once(d, "r", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert process_once(d, "r", lambda: 42) == (Claim.NEW, 42)
    assert process_once(d, "r", lambda: 43) == (Claim.DONE, None)


def test_handle_deduplicates_and_a_failed_handler_is_retried():
    receiver = CallbackReceiver(SECRET, url=URL, dedup=MemoryDeduplicator())
    handled = []

    def handler(cb):
        if cb.attempt == 1:
            raise RuntimeError("first attempt fails")
        handled.append(cb.run_id)
        return "ok"

    with pytest.raises(RuntimeError):
        receiver.handle(headers(attempt=1), BODY, handler)
    reply = receiver.handle(headers(attempt=2), BODY, handler)
    assert reply.status == 200 and reply.result == "ok" and reply.body == {"run_id": "run-1"}
    again = receiver.handle(headers(attempt=3), BODY, handler)
    assert again.status == 200 and again.body["duplicate"] is True
    assert handled == ["run-1"]
    assert receiver.handle(headers(secret="x"), BODY, handler).status == 401


def _call(app, hdrs, body=BODY, environ=None):
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/hook", "CONTENT_LENGTH": str(len(body)),
           "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http",
           "SERVER_NAME": "rx.local", "SERVER_PORT": "8080"}
    env.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in hdrs.items()})
    env.update(environ or {})
    environ = env
    seen = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(response_headers)

    result = app(environ, start_response)
    try:
        data = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    return seen["status"], data, seen["headers"]


def _no_content(environ, start_response):
    start_response("204 No Content", [])
    return [b""]


def test_a_receiver_needs_the_url_its_jobs_call():
    with pytest.raises(ValueError, match="url= is required"):
        CallbackReceiver(SECRET, dedup=MemoryDeduplicator())
    with pytest.raises(ValueError, match="scheme"):
        CallbackReceiver(SECRET, url="ftp://billing.example.com/hook")
    # Unsigned (a cronman that signs nothing): there is no signature to bind to a URL.
    assert CallbackReceiver(None, allow_unsigned=True).url is None


def test_a_callback_replayed_with_another_host_header_is_refused():
    """Captured at low.example's receiver (same namespace, so same key), sent to billing's
    with ``Host: low.example``: billing's receiver checks its own URL, not the Host's."""
    low = "https://low.example/hook"
    wrapped = CallbackReceiver(SECRET, url="https://billing.example/hook").wsgi(_no_content)
    captured = headers(url=low)
    replay = {**captured, "Host": "low.example"}
    environ_extra = {"wsgi.url_scheme": "https", "SERVER_PORT": "443"}
    assert _call(wrapped, replay, environ=environ_extra)[0] == 401
    assert _call(wrapped, headers(url="https://billing.example/hook"),
                 environ=environ_extra)[0] == 204


@pytest.mark.parametrize("spelling", [
    "https://Billing.Example.COM:443/hook", "HTTPS://billing.example.com/hook#top",
    "https://billing.example.com:443/hook?"])
def test_the_configured_url_may_be_any_spelling_of_the_one_signed(spelling):
    assert _call(CallbackReceiver(SECRET, url=spelling).wsgi(_no_content), headers())[0] == 204
    assert CallbackReceiver(SECRET, url=spelling).verify(headers(), BODY).run_id == "run-1"


@pytest.mark.parametrize(("signed_for", "environ"), [
    ("http://127.0.0.1:9000", {"HTTP_HOST": "127.0.0.1:9000", "PATH_INFO": "/"}),
    ("http://LocalHost:9000/hook", {"HTTP_HOST": "localhost:9000"}),
    ("http://h.example:80/hook", {"HTTP_HOST": "h.example"}),
    ("http://rx.local:8080/hook#frag", {"HTTP_HOST": "rx.local:8080"}),
    # wsgiref's PATH_INFO: the raw path's bytes, %-decoded, as latin-1.
    ("http://rx.local:8080/caf\u00e9", {"HTTP_HOST": "rx.local:8080",
                                        "PATH_INFO": "/caf\u00c3\u00a9"}),
    # gunicorn's RAW_URI: the request target as sent.
    ("http://rx.local:8080/caf\u00e9?q=1", {"HTTP_HOST": "rx.local:8080",
                                            "RAW_URI": "/caf%C3%A9?q=1"}),
])
def test_from_request_checks_the_url_the_request_was_sent_to(signed_for, environ):
    wrapped = CallbackReceiver(SECRET, url=CallbackReceiver.FROM_REQUEST).wsgi(_no_content)
    assert _call(wrapped, headers(url=signed_for), environ=environ)[0] == 204
    other = signed_for.replace("http://", "https://")
    assert _call(wrapped, headers(url=other), environ=environ)[0] == 401


def test_from_request_needs_a_url_per_call_and_a_bad_host_is_a_400():
    receiver = CallbackReceiver(SECRET, url=CallbackReceiver.FROM_REQUEST)
    with pytest.raises(ValueError):
        receiver.verify(headers(), BODY)
    assert receiver.verify(headers(), BODY, url="https://BILLING.example.com/hook").run_id
    status, data, _ = _call(receiver.wsgi(_no_content), headers(),
                            environ={"HTTP_HOST": "a:b:c"})
    assert status == 400 and b"URL" in data


def test_wsgi_middleware():
    calls = []

    def app(environ, start_response):
        cb = environ[ENVIRON_KEY]
        assert environ["wsgi.input"].read() == BODY  # the body is still there for the app
        calls.append(cb.attempt)
        status = "500 Oops" if cb.attempt == 1 else "204 No Content"
        start_response(status, [])
        return [b""]

    wrapped = CallbackReceiver(SECRET, url=URL, dedup=MemoryDeduplicator()).wsgi(app)
    assert _call(wrapped, headers(attempt=1))[0] == 500  # released: the retry is handled
    assert _call(wrapped, headers(attempt=2))[0] == 204
    status, data, _ = _call(wrapped, headers(attempt=3))
    assert status == 200 and json.loads(data)["duplicate"] is True
    assert calls == [1, 2]
    status, data, _ = _call(wrapped, headers(t=time.time() - 3600))
    assert status == 401 and b"stale" in data


def test_wsgi_in_progress_answers_409_with_retry_after():
    dedup = MemoryDeduplicator()
    dedup.claim("run-1")

    def app(environ, start_response):  # pragma: no cover - never reached
        raise AssertionError

    status, _, hdrs = _call(CallbackReceiver(SECRET, url=URL, dedup=dedup).wsgi(app), headers())
    assert status == 409 and hdrs["Retry-After"]


def test_flask_decorator():
    from flask import Flask

    receiver = CallbackReceiver(SECRET, url=CallbackReceiver.FROM_REQUEST,
                                dedup=MemoryDeduplicator())
    app = Flask(__name__)
    local = "http://localhost/hook"
    handled = []

    @app.post("/hook")
    @receiver.flask
    def hook(callback):
        handled.append((callback.run_id, callback.body))
        return "", 204

    client = app.test_client()
    assert client.post("/hook", data=BODY, headers=headers(url=local)).status_code == 204
    dup = client.post("/hook", data=BODY, headers=headers(attempt=2, url=local))
    assert dup.status_code == 200 and dup.get_json()["duplicate"] is True
    bad = client.post("/hook", data=BODY + b"x", headers=headers(run_id="run-2", url=local))
    assert bad.status_code == 401
    other = client.post("/hook", data=BODY, headers=headers(run_id="run-3", url=URL))
    assert other.status_code == 401  # signed for another URL
    assert handled == [("run-1", BODY)]


def test_sqs_callback_reads_the_attributes():
    message = {"Body": '{"x":1}', "ReceiptHandle": "rh", "MessageAttributes": {
        "cronman-job-id": {"DataType": "String", "StringValue": "job-1"},
        "cronman-run-id": {"DataType": "String", "StringValue": "run-9"},
        "cronman-scheduled-for": {"DataType": "String", "StringValue": "2026-11-22T07:00:00Z"}}}
    cb = sqs_callback(message)
    assert (cb.job_id, cb.run_id, cb.body) == ("job-1", "run-9", b'{"x":1}')
    del message["MessageAttributes"]["cronman-run-id"]
    with pytest.raises(InvalidCallback, match="cronman-run-id"):
        sqs_callback(message)
    with pytest.raises(InvalidCallback):
        sqs_callback({"Body": "x"})
