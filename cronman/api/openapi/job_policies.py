"""The OpenAPI parts of the job policies: the ``Idempotency-Key`` header of the
calls that make things, and the note a pause or a resume may carry."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from cronman.api.idempotency import HEADER, KEY_MAX, KEY_PATTERN, REPLAYED, TTL
from cronman.api.job_policies import NOTE_BODY
from cronman.api.openapi.parts import JSON, ref, resp

# (path, method) of the calls that take an Idempotency-Key.
KEYED = (("/v1/jobs", "post"), ("/v1/jobs/bulk", "post"), ("/v1/jobs/{job_id}/trigger", "post"),
         ("/v1/runs/{run_id}/replay", "post"), ("/v1/jobs/{job_id}/backfill", "post"))
NOTED = ("/v1/jobs/{job_id}/pause", "/v1/jobs/{job_id}/resume")

IDEMPOTENCY_KEY = {
    "name": HEADER, "in": "header", "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": KEY_MAX, "pattern": KEY_PATTERN},
    "description": (f"a repeat of this call with the same key and the same request answers "
                    f"the first answer (for {int(TTL.total_seconds() // 3600)} h, with "
                    f"`{REPLAYED}: true`); the same key with another request is a 422 "
                    "(idempotency_key_reused); while the first call runs, a 409 "
                    "(idempotency_in_progress)"),
}
KEY_REUSED = {"description": "the Idempotency-Key was used with another request",
              "content": {JSON: {"schema": ref("Error")}}}


def schemas() -> dict[str, Any]:
    return {"PauseNote": NOTE_BODY.definition()}


def decorate(paths: dict[str, Any]) -> dict[str, Any]:
    """The core paths with the keyed calls' header and the pause and resume notes."""
    out = deepcopy(paths)
    for path, method in KEYED:
        op = out[path][method]
        op["parameters"] = [*op.get("parameters", ()), IDEMPOTENCY_KEY]
        for status in ("400", "409"):
            op["responses"].setdefault(status, resp(status))
        op["responses"]["422"] = KEY_REUSED
    for path in NOTED:
        op = out[path]["post"]
        op["requestBody"] = {"required": False, "content": {JSON: {"schema": ref("PauseNote")}}}
        for status in ("400", "409", "413", "415"):
            op["responses"].setdefault(status, resp(status))
    return out
