"""The OpenAPI description of ``/v1/namespaces/{ns}/signing-key`` (merged by
``openapi``): each namespace's callback signing keys (``cronman.api.signing_keys``)."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi_parts import JSON, NAMESPACE, TIME, nullable, obj, ok, op, ref
from cronman.signing_keys import DEFAULT_OVERLAP, MAX_OVERLAP

NOT_ALLOWED = {"description": "the token has no access to the namespace, or is read-only",
               "content": {JSON: {"schema": ref("Error")}}}
UNSIGNED = {"description": "callbacks are not signed (CRONMAN_SIGNING_SECRET is not set)",
            "content": {JSON: {"schema": ref("Error")}}}
NAMESPACE_PARAM = {"name": "namespace", "in": "path", "required": True, "schema": NAMESPACE}


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
                        "description": "seconds the previous key keeps signing alongside"},
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
            "post": op("rotateSigningKey", "Start the namespace's next signing key; the "
                       "previous one signs alongside for the overlap window",
                       ok("200", "SigningKeys", "the keys that sign now"), "400 413",
                       [NAMESPACE_PARAM], body="SigningKeyRotate", extra=denied),
        },
    }
