"""A callback receiver with the standard library only (and ``pip install cronman``).

Verifies each callback's signature, handles each run once (duplicates --
retries, re-dispatches, replays of a handled run -- are answered 200 without
handling), and appends one JSON line per handled run to OUTPUT (or stdout).

    CRONMAN_SIGNING_KEY=... PORT=9000 python examples/receiver_wsgi.py

Settings (environment): CRONMAN_SIGNING_KEY (required: your namespace's key,
``GET /v1/namespaces/{ns}/signing-key``; during a rotation both keys,
comma-separated), CRONMAN_CALLBACK_URL (the URL your jobs call, which their
signatures cover: behind a proxy, the public one; default
http://127.0.0.1:PORT/hook), PORT (default
9000), OUTPUT (a file), REDIS_URL (deduplicate in Redis, shared by every
process; needs the ``redis`` package), FAIL_FIRST=1 (answer 500 to the first
attempt of every run, to see a retry handled).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from cronman.receiver import ENVIRON_KEY, Callback, CallbackReceiver, MemoryDeduplicator

_lock = threading.Lock()


def deduplicator() -> Any:
    url = os.environ.get("REDIS_URL")
    if url:
        import redis  # the receiver's own dependency, not cronman's

        from cronman.receiver import RedisDeduplicator

        return RedisDeduplicator(redis.Redis.from_url(url))
    return MemoryDeduplicator(max_entries=100_000)


def record(callback: Callback) -> None:
    line = json.dumps({"run_id": callback.run_id, "job_id": callback.job_id,
                       "scheduled_for": callback.scheduled_for, "attempt": callback.attempt,
                       "body": callback.body.decode("utf-8", "replace")})
    path = os.environ.get("OUTPUT")
    with _lock:
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        else:
            print(line, flush=True)


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    callback: Callback = environ[ENVIRON_KEY]
    if os.environ.get("FAIL_FIRST") == "1" and callback.attempt == 1:
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
        return [b"failing the first attempt on purpose\n"]
    record(callback)
    start_response("204 No Content", [])
    return []


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main() -> None:
    keys = [k.strip() for k in os.environ.get("CRONMAN_SIGNING_KEY", "").split(",") if k.strip()]
    if not keys:
        sys.exit("set CRONMAN_SIGNING_KEY (your namespace's: GET /v1/namespaces/NS/signing-key)")
    port = int(os.environ.get("PORT", "9000"))
    # The URL the jobs call, never the one a request claims (its Host header).
    url = os.environ.get("CRONMAN_CALLBACK_URL") or f"http://127.0.0.1:{port}/hook"
    receiver = CallbackReceiver(keys, url=url, dedup=deduplicator())
    server = make_server("127.0.0.1", port, receiver.wsgi(app), ThreadingWSGIServer,
                         QuietHandler)
    print(f"listening on http://127.0.0.1:{server.server_port}/ for callbacks to {url}",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
