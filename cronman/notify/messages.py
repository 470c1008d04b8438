"""What a notification says: the webhook's JSON and the email's subject and text. Pure.

Webhook body (``Content-Type: application/json``)::

    {"id": "<notification id>", "kind": "event" | "digest",
     "event": "failed" | "lost" | "recovered" | "late" | "paused" | null (a digest),
     "job": {"id", "namespace", "name"}, "rule": "<rule key>",
     "event_count": 3, "events": [{"event", "run_id", "scheduled_for",
     "occurred_at", "detail"}, ...], "created_at", "due_at"}

``events`` lists the first ``MAX_LISTED`` events (``event_count`` has them
all). Receivers deduplicate on ``id`` (also the ``Cronman-Notification-Id``
header): a message whose sender died mid-send is sent again, as itself.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from cronman.outbox.records import EventRecord, Notification
from cronman.timeutil import format_rfc3339
from cronman.vocabulary import NotificationKind, NotifyEvent

MAX_LISTED = 100
SUBJECT_PREFIX = "[cronman]"


def event_json(event: EventRecord) -> dict[str, Any]:
    return {"event": event.event, "run_id": event.run_id,
            "scheduled_for": format_rfc3339(event.scheduled_for),
            "occurred_at": format_rfc3339(event.occurred_at), "detail": event.detail or {}}


def payload(note: Notification, events: Sequence[EventRecord]) -> dict[str, Any]:
    return {
        "id": note.id,
        "kind": note.kind,
        "event": note.event,
        "job": {"id": note.job_id, "namespace": note.namespace, "name": note.job_name},
        "rule": note.rule_key,
        "event_count": note.event_count,
        "events": [event_json(e) for e in events[:MAX_LISTED]],
        "created_at": format_rfc3339(note.created_at),
        "due_at": format_rfc3339(note.due_at),
    }


def webhook_body(note: Notification, events: Sequence[EventRecord]) -> bytes:
    return json.dumps(payload(note, events), separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _job(note: Notification) -> str:
    return f"{note.namespace}/{note.job_name}"


def _headline(event: EventRecord) -> str:
    detail = event.detail or {}
    scheduled = format_rfc3339(event.scheduled_for) or "-"
    if event.event == NotifyEvent.FAILED:
        return f"run failed (scheduled {scheduled}, attempt {detail.get('attempt')})"
    if event.event == NotifyEvent.LOST:
        return f"run lost (scheduled {scheduled})"
    if event.event == NotifyEvent.RECOVERED:
        failures = detail.get("failures", 1)
        return f"recovered after {failures} failure(s) (run scheduled {scheduled})"
    if event.event == NotifyEvent.PAUSED:
        return str(detail.get("reason") or "paused after consecutive failed runs")
    return f"not started {detail.get('late_after')} s after its time ({scheduled})"


def _count_text(events: Counter[str]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(events.items()))


def subject(note: Notification, events: Sequence[EventRecord]) -> str:
    if note.kind == NotificationKind.DIGEST:
        kinds = Counter(e.event for e in events)
        more = note.event_count - len(events)
        counted = _count_text(kinds) + (f", {more} more" if more > 0 else "")
        return f"{SUBJECT_PREFIX} {_job(note)}: {note.event_count} events ({counted})"
    if not events:
        return f"{SUBJECT_PREFIX} {_job(note)}: {note.event}"
    return f"{SUBJECT_PREFIX} {_job(note)}: {_headline(events[0])}"


def text(note: Notification, events: Sequence[EventRecord]) -> str:
    lines = [f"Job {_job(note)} (id {note.job_id})", ""]
    if note.kind == NotificationKind.DIGEST:
        lines.append(f"{note.event_count} events since the last message about this job "
                     "(rate limit of this notification rule):")
        lines.append("")
    for event in events[:MAX_LISTED]:
        lines.append(f"- {format_rfc3339(event.occurred_at)}  {event.event}: {_headline(event)}")
        detail = event.detail or {}
        if event.run_id:
            lines.append(f"  run {event.run_id}")
        if detail.get("error"):
            lines.append(f"  error: {detail['error']}")
    if note.event_count > min(len(events), MAX_LISTED):
        lines.append(f"... and {note.event_count - min(len(events), MAX_LISTED)} more")
    lines += ["", f"Notification {note.id}, rule {note.rule_key}."]
    return "\n".join(lines) + "\n"
