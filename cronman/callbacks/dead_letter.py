"""Dead letters: the run record of a run that ended ``failed`` or ``lost``, sent to a target.

A job's ``dead_letter`` is an ``http`` or ``sqs`` target object (validated by
:func:`validate_dead_letter`). When a run ends ``failed`` or ``lost``, the
scheduler builds a :class:`Delivery` with :func:`dead_letter_delivery` and fires
it through the same targets as any run. The decisions:

- The body is always the run record as JSON (the run as ``GET /v1/runs/{id}``
  shows it, plus ``"job": {"id", "namespace", "name"}``); a dead-letter target
  therefore may not set a ``body``, and an http one may not use ``GET``.
- http: the request uses the target's method (default ``POST``) and headers,
  with ``Content-Type: application/json`` unless the target sets its own. It
  carries the usual ``Cronman-*`` headers of the failed run (same job id, run
  id and scheduled time), so receivers can deduplicate on the run id.
- sqs: the message attributes are those of the failed run; a FIFO queue
  deduplicates on the run id.
- A record too large for SQS (256 KiB) has its ``result`` replaced by
  ``{"truncated": true}`` and its ``error`` shortened, rather than being lost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronman.callbacks.base import Delivery
from cronman.callbacks.target_fields import (
    DEAD_LETTER,
    MAX_SQS_MESSAGE_BYTES,
    SQS_RESERVED_ATTRIBUTE_BYTES,
)
from cronman.models import Job, Run
from cronman.timeutil import format_rfc3339, parse_rfc3339
from cronman.vocabulary import DEAD_LETTER_KINDS

MAX_ERROR_CHARS = 4096

_RUN_FIELDS = (
    "id",
    "job_id",
    "scheduled_for",
    "status",
    "attempt",
    "node_id",
    "origin",
    "claimed_at",
    "started_at",
    "finished_at",
    "lateness_ms",
    "duration_ms",
    "result",
    "error",
    "skipped_before",
)


def validate_dead_letter(spec: Any) -> dict[str, Any]:
    """Validate and normalise a job's ``dead_letter`` target (http or sqs, no body).

    Fields in errors are relative to the dead-letter object.
    """
    out: dict[str, Any] = DEAD_LETTER.check(spec)
    return out


def run_record(run: Run, *, job: Job | None = None) -> dict[str, Any]:
    """The JSON-ready run record of ``run`` (SPEC §4), with the job's identity."""
    record: dict[str, Any] = {}
    for name in _RUN_FIELDS:
        value = getattr(run, name)
        record[name] = format_rfc3339(value) if isinstance(value, datetime) else value
    if job is not None:
        record["job"] = {"id": job.id, "namespace": job.namespace, "name": job.name}
    return record


def dead_letter_delivery(
    spec: Mapping[str, Any],
    record: Mapping[str, Any],
    *,
    namespace: str = "",
    job_name: str = "",
    attempt: int = 1,
) -> Delivery:
    """The Delivery that sends ``record`` (a run record) to the dead-letter target ``spec``.

    ``spec`` is the normalised dead-letter target; ``record`` must hold the run's
    ``id``, ``job_id`` and ``scheduled_for`` (RFC 3339 text or a datetime).
    """
    kind = spec.get("kind")
    if kind not in DEAD_LETTER_KINDS:
        raise ValueError(f"a dead-letter target is http or sqs, not {kind!r}")
    scheduled = record["scheduled_for"]
    if not isinstance(scheduled, datetime):
        scheduled = parse_rfc3339(scheduled)
    body = _encode(record)
    if kind == "sqs":
        attributes = spec.get("attributes") or {}
        room = MAX_SQS_MESSAGE_BYTES - SQS_RESERVED_ATTRIBUTE_BYTES
        room -= sum(len(k.encode()) + len(v.encode()) + 6 for k, v in attributes.items())
        body = _fit(record, body, room)
        target = dict(spec, body=body)
    else:
        headers = dict(spec.get("headers") or {})
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
        target = dict(spec, body=body, headers=headers)
        target["method"] = target.get("method") or "POST"
    return Delivery(
        job_id=str(record["job_id"]),
        run_id=str(record["id"]),
        scheduled_for=scheduled,
        attempt=attempt,
        target=target,
        namespace=namespace,
        job_name=job_name,
    )


def _encode(record: Mapping[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a run record")


def _fit(record: Mapping[str, Any], body: str, room: int) -> str:
    """``body``, or a shortened record that fits ``room`` bytes of UTF-8."""
    if len(body.encode("utf-8")) <= room:
        return body
    slim = dict(record)
    slim["result"] = {"truncated": True}
    error = slim.get("error")
    if isinstance(error, str) and len(error) > MAX_ERROR_CHARS:
        slim["error"] = error[:MAX_ERROR_CHARS] + "... (truncated)"
    body = _encode(slim)
    if len(body.encode("utf-8")) <= room:
        return body
    keep = {k: slim.get(k) for k in ("id", "job_id", "scheduled_for", "status", "attempt", "job")}
    keep["error"] = f"(run record too large for SQS; see GET /v1/runs/{keep['id']})"
    keep["result"] = {"truncated": True}
    return _encode(keep)
