"""Signatures bound to their namespace and context (issue 35, item 5), end to end.

A real `cronman standalone` fires at real receivers running the receiver helper
(``CallbackReceiver`` under a WSGI server): each namespace signs with its own key,
read from the API; a callback captured by namespace A's receiver is refused by
namespace B's, and refused by A's own once its job id, run id, fire time or URL
is changed; a rotation signs with both keys during its overlap window, then
with the new key alone.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from cronman.receiver import CallbackReceiver, MemoryDeduplicator, verify_callback
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

SECRET = "cluster-signing-secret"
PAYMENT = '{"event":"payment.approved"}'


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class KeyedReceiver:
    """A WSGI server whose paths are each guarded by a ``CallbackReceiver``."""

    server: WSGIServer
    guards: dict[str, CallbackReceiver] = field(default_factory=dict)
    seen: list[Captured] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def url(self, path: str) -> str:
        return self.base + path

    def guard(self, path: str, key: str | list[str]) -> None:
        self.guards[path] = CallbackReceiver(key, url=self.url(path), dedup=MemoryDeduplicator())

    def app(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items()
                   if k.startswith("HTTP_")}
        reply = self.guards[path].handle(headers, body, lambda cb: None)
        self.seen.append(Captured(path, headers, body, reply.status))
        start_response(f"{reply.status} X", [("Content-Type", "application/json")])
        return [reply.json]

    def statuses(self, path: str) -> list[int]:
        return [c.status for c in self.seen if c.path == path]


@contextmanager
def keyed_receiver() -> Iterator[KeyedReceiver]:
    holder: list[KeyedReceiver] = []
    server = make_server("127.0.0.1", 0, lambda e, s: holder[0].app(e, s),
                         handler_class=_Quiet)
    rx = KeyedReceiver(server)
    holder.append(rx)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rx
    finally:
        server.shutdown()
        server.server_close()


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def keys(api: str, namespace: str) -> dict[str, Any]:
    status, body, hdrs = http("GET", f"{api}/v1/namespaces/{namespace}/signing-key")
    assert status == 200, body
    assert hdrs.get("Cache-Control") == "no-store"
    return body  # type: ignore[no-any-return]


def make_job(api: str, namespace: str, name: str, url: str, **extra: Any) -> dict[str, Any]:
    status, job, _ = http("POST", f"{api}/v1/jobs", {
        "name": name, "namespace": namespace,
        "schedule": {"kind": "interval", "every": 1},
        "target": {"kind": "http", "url": url, "body": PAYMENT},
        "retry": {"max_attempts": 1}, **extra})
    assert status == 201, job
    return job  # type: ignore[no-any-return]


def test_a_signature_from_one_namespace_is_refused_by_another_receiver(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    with keyed_receiver() as rx, Processes(tmp_path) as procs:
        api = procs.standalone(db, env={"CRONMAN_SIGNING_SECRET": SECRET}).url  # type: ignore[attr-defined]
        alpha, beta = keys(api, "alpha"), keys(api, "beta")
        key_a, key_b = alpha["keys"][0]["key"], beta["keys"][0]["key"]
        assert key_a != key_b and SECRET not in (key_a, key_b)
        rx.guard("/alpha", key_a)
        rx.guard("/alpha-other", key_a)  # the same tenant's key, another URL
        rx.guard("/beta", key_b)
        make_job(api, "alpha", "mine", rx.url("/alpha"))
        beta_job = make_job(api, "beta", "theirs", rx.url("/beta"))
        # The attacker's job, in its own namespace, calling the victim's receiver directly.
        make_job(api, "alpha", "at-beta", rx.url("/beta"))

        wait_for(lambda: 200 in rx.statuses("/alpha"), 15, "alpha's callback verified")
        wait_for(lambda: rx.statuses("/beta").count(200) >= 2, 15, "beta's callbacks")
        captured = next(c for c in rx.seen if c.path == "/alpha" and c.status == 200)
        from_alpha = [c for c in rx.seen if c.path == "/beta"
                      and c.headers["Cronman-Job-Id"] != beta_job["id"]]
        assert from_alpha and all(c.status == 401 for c in from_alpha)
        assert all(c.status == 200 for c in rx.seen if c.path == "/beta"
                   and c.headers["Cronman-Job-Id"] == beta_job["id"])

        # Replayed to the other tenant's receiver (fresh, within the tolerance): refused.
        fresh = {**captured.headers, "Cronman-Run-Id": captured.headers["Cronman-Run-Id"]}
        assert post(rx.url("/beta"), captured.body, fresh) == 401
        # Replayed to the same tenant's receiver for another URL: refused.
        assert post(rx.url("/alpha-other"), captured.body, captured.headers) == 401
        # Another job id, run id or fire time under the same signature: refused.
        for name, value in (("Cronman-Job-Id", beta_job["id"]),
                            ("Cronman-Run-Id", "00000000-0000-4000-8000-000000000000"),
                            ("Cronman-Scheduled-For", "2030-01-01T00:00:00Z")):
            assert post(rx.url("/alpha"), captured.body, {**captured.headers, name: value}) \
                == 401, name
        # The genuine one again: a duplicate (verified, not handled twice).
        assert post(rx.url("/alpha"), captured.body, captured.headers) == 200


def test_a_rotation_signs_with_both_keys_during_its_overlap_then_the_new_one_alone(tmp_path):
    db = f"sqlite:///{tmp_path / 'cronman.db'}"
    env = {"CRONMAN_SIGNING_SECRET": SECRET, "CRONMAN_SYNC_POLL_INTERVAL": "0.5"}
    with keyed_receiver() as rx, Processes(tmp_path) as procs:
        api = procs.standalone(db, env=env).url  # type: ignore[attr-defined]
        old = keys(api, "alpha")["keys"][0]["key"]
        rx.guard("/hook", [old])
        make_job(api, "alpha", "ticking", rx.url("/hook"))
        wait_for(lambda: 200 in rx.statuses("/hook"), 15, "a verified callback")

        overlap = 6
        status, rotated, _ = http("POST", f"{api}/v1/namespaces/alpha/signing-key/rotate",
                                  {"overlap": overlap})
        assert status == 200, rotated
        rotated_at = time.time()
        assert rotated["generation"] == 1
        new, previous = rotated["keys"]
        assert previous["key"] == old and previous["signs_until"] is not None
        assert new["signs_until"] is None and new["key"] != old
        assert keys(api, "alpha")["keys"] == rotated["keys"]

        def sent_after(t: float) -> list[Captured]:
            return [c for c in rx.seen if float(c.headers["Cronman-Signature"]
                                                .split(",")[0][2:]) > t]

        def verifies(c: Captured, key: str) -> bool:
            try:
                verify_callback(key, c.headers, c.body, url=rx.url("/hook"))
                return True
            except Exception:
                return False

        # Within the overlap: two v2 values; the old key and the new key both verify.
        during = wait_for(lambda: [c for c in sent_after(rotated_at + 1)
                                   if c.headers["Cronman-Signature"].count("v2=") == 2],
                          10, "a callback signed with both keys")
        assert verifies(during[0], old) and verifies(during[0], new["key"])
        assert during[0].status == 200  # the receiver holding only the old key accepts it

        # After it: the new key alone; the old key no longer verifies.
        after = wait_for(lambda: sent_after(rotated_at + overlap + 1), 20,
                         "a callback after the overlap")
        assert after[0].headers["Cronman-Signature"].count("v2=") == 1
        assert verifies(after[0], new["key"]) and not verifies(after[0], old)
        assert after[0].status == 401
