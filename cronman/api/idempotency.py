"""``Idempotency-Key`` on the calls that make things (create, bulk create,
trigger, replay, backfill): a call repeated with the key answers as the first
did, so that a client may retry a POST whose answer it never got.

- The key is 1 to ``KEY_MAX`` printable ASCII characters (a 400 naming
  ``Idempotency-Key`` otherwise); keys are the caller's own: their scope is
  the token (or ``anonymous`` while the API needs none).
- The first call with a key runs, and its answer (status, body, ``Location``)
  is kept for ``TTL``; a repeat with the same method, path and body gets that
  answer again, with ``Idempotent-Replayed: true``. The same key with another
  request is a 422 ``idempotency_key_reused``.
- While the first call runs, a repeat is a 409 ``idempotency_in_progress``
  (try again); a call that held a key for more than ``STALE_AFTER`` without
  answering (its process died) is taken over.
- Only answers below 500 are kept: a call that raised or failed on the
  server gives its key back, and a retry runs again.

The keys live in the store (``cronman.store.idempotency``), so every API
process sees them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from flask import Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from cronman.api.common import principal
from cronman.api.context import api_context
from cronman.errors import Conflict, CronmanError, ValidationError
from cronman.timeutil import utcnow

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
KEY_MAX = 255
# Printable ASCII, not all spaces (a header's value loses its outer spaces).
KEY_PATTERN = "^[\\x20-\\x7e]*[\\x21-\\x7e][\\x20-\\x7e]*$"
_KEY_RE = re.compile(KEY_PATTERN)
TTL = timedelta(hours=24)
STALE_AFTER = timedelta(minutes=2)
# Headers of the first answer given again with it.
_KEPT_HEADERS = ("Location",)

F = TypeVar("F", bound=Callable[..., Response])


class KeyReused(CronmanError):
    code = "idempotency_key_reused"
    http_status = 422


class KeyInProgress(Conflict):
    code = "idempotency_in_progress"


def check_key(raw: str) -> str:
    """The header's key; 400 naming the header when it is no valid key."""
    if len(raw) > KEY_MAX or not _KEY_RE.match(raw):
        raise ValidationError(f"must be 1 to {KEY_MAX} printable ASCII characters, not all "
                              "spaces", field=HEADER)
    return raw


def request_hash(max_bytes: int) -> str:
    """sha256 of the request's method, path and body (read here, at most ``max_bytes``)."""
    request.max_content_length = max_bytes + 1
    body = request.get_data(cache=True)
    if len(body) > max_bytes:
        raise RequestEntityTooLarge()
    h = hashlib.sha256()
    for part in (request.method.encode(), request.path.encode(), body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def idempotent(max_bytes: int) -> Callable[[F], F]:
    """Make a view method answer repeats of a keyed call as it answered the first."""

    def wrap(view: F) -> F:
        @functools.wraps(view)
        def call(*args: Any, **kwargs: Any) -> Response:
            raw = request.headers.get(HEADER)
            if raw is None:
                return view(*args, **kwargs)
            key = check_key(raw)
            who = principal()
            scope = f"token:{who.token_id}" if who.token_id is not None else "anonymous"
            digest = request_hash(max_bytes)
            keys = api_context().store.idempotency
            now = utcnow()
            found = keys.claim(scope, key, digest, now, now + TTL, now - STALE_AFTER)
            if found is not None:
                if found.request_hash != digest:
                    raise KeyReused("this Idempotency-Key was used with another request "
                                    "(method, path or body); use a new key", field=HEADER)
                if found.status_code is None or found.body is None:
                    raise KeyInProgress("a call with this Idempotency-Key is in progress; "
                                        "try again shortly", field=HEADER)
                return _replayed(found.status_code, found.body)
            try:
                answer = view(*args, **kwargs)
            except BaseException:
                keys.release(scope, key)
                raise
            if answer.status_code >= 500:
                keys.release(scope, key)
                return answer
            kept = {name: answer.headers[name] for name in _KEPT_HEADERS if name in answer.headers}
            keys.keep(scope, key, answer.status_code, json.dumps(
                {"headers": kept, "body": answer.get_data(as_text=True)}))
            return answer

        return call  # type: ignore[return-value]

    return wrap


def _replayed(status: int, stored: str) -> Response:
    kept = json.loads(stored)
    resp = Response(kept["body"], status=status, mimetype="application/json")
    for name, value in kept["headers"].items():
        resp.headers[name] = value
    resp.headers[REPLAYED] = "true"
    return resp
