"""The request bodies of the worker calls, declared once (validator and
OpenAPI schema): claim, heartbeat, complete, cancel (``cronman.api.work``)."""

from __future__ import annotations

from typing import Any

from cronman.api.job_fields import NAMESPACE
from cronman.callbacks.target_fields import (
    MAX_WORK_PAYLOAD_BYTES,
    WORK_QUEUE_PATTERN,
    json_size,
)
from cronman.errors import ValidationError
from cronman.fieldspec import Choice, Custom, Int, Num, Obj, Str
from cronman.logtail import LOG_TAIL_BYTES
from cronman.vocabulary import DEFAULT_NAMESPACE

MAX_WORKER_ID = 128
MAX_SLOTS = 1000
MAX_CLAIM_RUNS = 100
MAX_CLAIM_WAIT = 30
DEFAULT_CLAIM_WAIT = 20
MAX_PROGRESS = 1024
MAX_RESULT_BYTES = 64 * 1024
MAX_ERROR = 4096
MAX_REASON = 1024
MAX_TOKEN = 128
# Printable text: no control characters (a worker id is shown in tables and logs).
WORKER_ID_PATTERN = "^[^\\u0000-\\u001f\\u007f]{1,128}$"
TOKEN_PATTERN = "^[A-Za-z0-9_-]{1,128}$"
# Free text is stored: no NUL (refused in every body anyway, cronman.api.common).
NO_NUL_PATTERN = "^[^\\u0000]*$"
QUEUE_MESSAGE = "must be 1-64 letters, digits, '.', '_' or '-'"


def _text(max_len: int, **kw: Any) -> Str:
    return Str(max_len=max_len, pattern=NO_NUL_PATTERN, type_message="must be a string",
               pattern_message="must not contain NUL characters", nullable=True, **kw)


def _result(value: Any, key: str, out: dict[str, Any], ctx: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError("must be a JSON object", field=key)
    if json_size(value) > MAX_RESULT_BYTES:
        raise ValidationError(f"must be at most {MAX_RESULT_BYTES} bytes (64 KiB) encoded "
                              "as JSON", field=key)
    return value


LEASE_TOKEN = Str(min_len=1, max_len=MAX_TOKEN, pattern=TOKEN_PATTERN, required=True,
                  type_message="must be a string", empty_message="must not be empty",
                  pattern_message="is not a lease token (the claim's lease_token)",
                  description="the claim's lease_token")
QUEUE = Str(pattern=WORK_QUEUE_PATTERN, pattern_message=QUEUE_MESSAGE,
            type_message=QUEUE_MESSAGE)

CLAIM = Obj({
    "worker_id": Str(min_len=1, max_len=MAX_WORKER_ID, pattern=WORKER_ID_PATTERN,
                     required=True, type_message="must be a string",
                     pattern_message="must be 1-128 characters without control characters",
                     description="who claims: the worker's own stable name"),
    "namespace": NAMESPACE.but(nullable=True, default=DEFAULT_NAMESPACE, required=False),
    "wait": Num(lo=0, hi=MAX_CLAIM_WAIT, type_message="must be a number (seconds)",
                range_message="must be between {lo:g} and {hi:g} seconds", nullable=True,
                default=DEFAULT_CLAIM_WAIT,
                description="how long to wait for a run (the long-poll), at most "
                            "CRONMAN_CLAIM_WAIT_MAX"),
    "slots": Int(lo=1, hi=MAX_SLOTS, type_message="must be an integer",
                 range_message="must be between {lo} and {hi}", nullable=True, default=1,
                 description="how many runs the worker carries at once (its idle slots "
                             "count for capacity)"),
    "max": Int(lo=1, hi=MAX_CLAIM_RUNS, type_message="must be an integer",
               range_message="must be between {lo} and {hi}", nullable=True,
               description="take up to this many runs in one call: the answer is then "
                           "{\"claims\": [...]}, one claim per run, each with its own "
                           "lease token (without it: one run, the claim itself)"),
}, name="ClaimRequest", unknown_message="unknown field {key!r}")

HEARTBEAT = Obj({
    "lease_token": LEASE_TOKEN,
    "progress": _text(MAX_PROGRESS, description="what the worker is doing (shown on the run)"),
    "percent": Num(lo=0, hi=100, type_message="must be a number",
                   range_message="must be between {lo:g} and {hi:g}", nullable=True),
    "output": Obj({
        "stdout": _text(LOG_TAIL_BYTES, description="the tail of the run's stdout so far"),
        "stderr": _text(LOG_TAIL_BYTES, description="the tail of the run's stderr so far"),
    }, nullable=True, unknown_message="unknown field {key!r}",
        description="the run's output so far (each stream's last 4096 characters at most), "
                    "shown on the run while it runs"),
}, name="HeartbeatRequest", unknown_message="unknown field {key!r}")

COMPLETE = Obj({
    "lease_token": LEASE_TOKEN,
    "status": Choice(("succeeded", "failed"), message="must be one of: {choices}",
                     required=True),
    "result": Custom(_result, {"type": ["object", "null"],
                               "description": "at most 64 KiB encoded as JSON"}),
    "error": _text(MAX_ERROR),
}, name="CompleteRequest", unknown_message="unknown field {key!r}")

CANCEL = Obj({
    "reason": _text(MAX_REASON, description="said in the run's error"),
}, name="CancelRequest", unknown_message="unknown field {key!r}")

SEMANTIC_RULES: list[dict[str, str]] = [
    {"field": "result", "message": "bytes", "rule": "a result is at most 64 KiB as JSON"},
    {"field": "payload", "message": "bytes",
     "rule": f"a worker target's payload is at most {MAX_WORK_PAYLOAD_BYTES} bytes as JSON"},
]
