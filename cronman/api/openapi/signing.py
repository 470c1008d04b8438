"""The OpenAPI description of ``/v1/namespaces/{ns}/signing-key`` (merged by
``openapi``): each namespace's callback signing keys (``cronman.api.signing_keys``)."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi.parts import JSON, NAMESPACE, TIME, nullable, obj, ok, op, ref
from cronman.signing_keys import DEFAULT_OVERLAP, MAX_OVERLAP

NOT_ALLOWED = {"description": "the token has no access to the namespace, or is read-only",
               "content": {JSON: {"schema": ref("Error")}}}
UNSIGNED = {"description": "callbacks are not signed (CRONMAN_SIGNING_SECRET is not set)",
            "content": {JSON: {"schema": ref("Error")}}}
NAMESPACE_PARAM = {"name": "namespace", "in": "path", "required": True, "schema": NAMESPACE}
ROTATION = (
    "The new key does not sign at once everywhere: each scheduler node picks the rotation "
    "up on its next poll of the key generations (every CRONMAN_SYNC_POLL_INTERVAL, 2 s by "
    "default; longer while it cannot read the database) and signs with the previous key "
    "alone until then; from then until the overlap ends (`signs_until`) with both keys (two "
    "`v2=` values), then with the new key alone. Give receivers the new key alongside the "
    "previous one and hold both until `signs_until`: a receiver switched to the new key "
    "alone straight after the rotation refuses callbacks from nodes that have not reloaded. "
    "Rotating again inside the overlap window drops the older previous key at once (at most "
    "two keys sign: the newest and the one before it); `overlap` 0 retires the previous key "
    "at once, for a key that leaked.")


def schemas() -> dict[str, Any]:
    key = obj({
        "generation": {"type": "integer", "minimum": 0},
        "key": {"type": "string", "pattern": "^[0-9a-f]{64}$",
                "description": "the HMAC-SHA256 key (its ASCII bytes) of the v2 signatures"},
        "signs_until": {**nullable(TIME),
                        "description": "null: the current key; else the previous one, "
                                       "signing alongside until then"},
    }, ("generation", "key", "signs_until"))
    return {
        "SigningKeys": obj({
            "namespace": NAMESPACE,
            "generation": {"type": "integer", "minimum": 0},
            "rotated_at": nullable(TIME),
            "keys": {"type": "array", "items": key, "minItems": 1, "maxItems": 2,
                     "description": "the keys that sign now, current first"},
        }, ("namespace", "generation", "rotated_at", "keys"),
            description="A namespace's callback signing keys (Cronman-Signature v2)"),
        "SigningKeyRotate": obj({
            "overlap": {"type": ["integer", "null"], "minimum": 0,
                        "maximum": int(MAX_OVERLAP), "default": int(DEFAULT_OVERLAP),
                        "description": "seconds, from this call, the previous key keeps "
                                       "signing alongside the new one (nodes start signing "
                                       "with the new key on their next poll)"},
        }, description="A rotation"),
    }


def paths() -> dict[str, Any]:
    denied = {"403": NOT_ALLOWED, "409": UNSIGNED}
    return {
        "/v1/namespaces/{namespace}/signing-key": {
            "get": op("getSigningKey", "The namespace's signing keys (a token that may "
                      "write to it; never cached)",
                      ok("200", "SigningKeys", "the keys that sign now"), "400",
                      [NAMESPACE_PARAM], extra=denied),
        },
        "/v1/namespaces/{namespace}/signing-key/rotate": {
            "post": {**op("rotateSigningKey", "Start the namespace's next signing key; the "
                          "previous one signs alongside for the overlap window",
                          ok("200", "SigningKeys", "the keys that sign now"), "400 413",
                          [NAMESPACE_PARAM], body="SigningKeyRotate", extra=denied),
                     "description": ROTATION},
        },
    }
