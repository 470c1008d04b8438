"""``/v1/namespaces/{ns}/signing-key``: a namespace's callback signing keys, and their rotation.

Each namespace signs its callbacks with its own key (:mod:`cronman.signing`),
derived from ``CRONMAN_SIGNING_SECRET`` and the namespace's generation, so
the receivers of one namespace hold nothing that verifies another's. ``GET``
shows the keys that sign now (current first; during a rotation's overlap
window the previous one too, with when it stops). ``POST .../rotate``
starts the next generation, which signs alongside the previous key until
``overlap`` seconds after the call (default a day, at most 30 days; 0
retires the previous key at once, for a key that leaked), then alone. Each
node picks a rotation up on its next poll of the generations (every
``CRONMAN_SYNC_POLL_INTERVAL``; longer while it cannot read the database)
and signs with the previous key alone until then: receivers must hold both
keys through the overlap. Rotating again inside a window retires the older
previous key at once (at most two keys sign: the newest and the one before).

A key can forge callbacks to the namespace's receivers: these calls need a
token that may write to the namespace (an admin token, or the namespace's
own that is not read-only), and answers are never cached.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, read_json
from cronman.api.context import api_context
from cronman.errors import Conflict, Forbidden, ValidationError
from cronman.signing_keys import (
    DEFAULT_OVERLAP,
    MAX_OVERLAP,
    KeyState,
    namespace_keys,
    overlap_end,
)
from cronman.timeutil import format_rfc3339, utcnow

bp = Blueprint("signing_keys", __name__, url_prefix="/v1/namespaces")

NO_STORE = {"Cache-Control": "no-store"}


def _secret(namespace: str) -> str:
    """The cluster secret, once the caller may hold the namespace's key."""
    v.check_namespace(namespace)
    who = principal()
    who.require(namespace, field="namespace")
    if who.read_only:
        raise Forbidden("a read-only token cannot read or rotate signing keys")
    secret = api_context().settings.signing_secret
    if not secret:
        raise Conflict("callbacks are not signed: CRONMAN_SIGNING_SECRET is not set")
    return secret


def keys_json(secret: str, state: KeyState) -> dict[str, Any]:
    return {
        "namespace": state.namespace,
        "generation": state.generation,
        "rotated_at": format_rfc3339(state.rotated_at) if state.rotated_at else None,
        "keys": [{"generation": k.generation, "key": k.key,
                  "signs_until": format_rfc3339(k.signs_until) if k.signs_until else None}
                 for k in namespace_keys(secret, state, time.time())],
    }


class SigningKey(ApiView):
    def get(self, namespace: str) -> Response:
        secret = _secret(namespace)
        state = api_context().store.signing_keys.state(namespace)
        return json_response(keys_json(secret, state), 200, NO_STORE)


class SigningKeyRotation(ApiView):
    def post(self, namespace: str) -> Response:
        secret = _secret(namespace)
        body = read_json(max_bytes=1024, required=False)
        obj = {} if body is None else v.require_object(body, None)
        for key in obj:
            if key != "overlap":
                raise ValidationError(f"unknown field {key!r}", field=key)
        overlap = DEFAULT_OVERLAP
        if obj.get("overlap") is not None:
            overlap = v.check_int(obj["overlap"], "overlap", lo=0, hi=int(MAX_OVERLAP))
        now = utcnow()
        state = api_context().store.signing_keys.rotate(
            namespace, now=now, previous_until=overlap_end(now, overlap))
        return json_response(keys_json(secret, state), 200, NO_STORE)


bp.add_url_rule("/<namespace>/signing-key", view_func=SigningKey.as_view("key"))
bp.add_url_rule("/<namespace>/signing-key/rotate",
                view_func=SigningKeyRotation.as_view("rotate"))
