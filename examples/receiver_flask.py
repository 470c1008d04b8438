"""A Flask receiver: the ``@receiver.flask`` decorator verifies and deduplicates.

    pip install cronman flask redis
    CRONMAN_SIGNING_KEY=... REDIS_URL=redis://127.0.0.1:6379/0 python examples/receiver_flask.py

CRONMAN_SIGNING_KEY is your namespace's key (``GET
/v1/namespaces/{ns}/signing-key``; both, comma-separated, during a
rotation); CRONMAN_CALLBACK_URL the URL your jobs call, which their
signatures cover (behind a proxy, the public one; default
http://127.0.0.1:PORT/hook).

The view gets the verified ``callback``; it runs once per run id across
every process sharing the Redis (in memory, per process, without REDIS_URL).
Handled runs are appended as JSON lines to OUTPUT (or printed).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from flask import Flask

from cronman.receiver import Callback, CallbackReceiver, MemoryDeduplicator, RedisDeduplicator


def create_app() -> Flask:
    keys = [k.strip() for k in os.environ.get("CRONMAN_SIGNING_KEY", "").split(",") if k.strip()]
    if not keys:
        sys.exit("set CRONMAN_SIGNING_KEY (your namespace's: GET /v1/namespaces/NS/signing-key)")
    dedup: Any
    if os.environ.get("REDIS_URL"):
        import redis

        dedup = RedisDeduplicator(redis.Redis.from_url(os.environ["REDIS_URL"]))
    else:
        dedup = MemoryDeduplicator()
    port = int(os.environ.get("PORT", "9000"))
    # The URL the jobs call, never the one a request claims (its Host header).
    url = os.environ.get("CRONMAN_CALLBACK_URL") or f"http://127.0.0.1:{port}/hook"
    receiver = CallbackReceiver(keys, url=url, dedup=dedup)
    app = Flask(__name__)

    @app.post("/hook")
    @receiver.flask
    def hook(callback: Callback) -> tuple[str, int]:
        line = json.dumps({"run_id": callback.run_id, "job_id": callback.job_id,
                           "attempt": callback.attempt,
                           "body": callback.body.decode("utf-8", "replace")})
        path = os.environ.get("OUTPUT")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        else:
            print(line, flush=True)
        return "", 204

    return app


if __name__ == "__main__":
    create_app().run(host="127.0.0.1", port=int(os.environ.get("PORT", "9000")))
