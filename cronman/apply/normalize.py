"""A definition in the form the API would store and show it, for comparison.

The API's own validation (pure, no I/O) normalises the definition with the
live job's id, creation time and schedule -- so defaults, the interval
anchor, hashed ``H`` fields and a past ``once`` schedule come out exactly as
the API would make them -- and its own redaction hides secrets the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronman.api.serialize import job_definition
from cronman.api.validation import validate_job_parsed
from cronman.errors import ValidationError
from cronman.ids import new_job_id
from cronman.models import Job
from cronman.notify.rules import redact_notify
from cronman.redaction import redact_target, redact_value
from cronman.timeutil import parse_rfc3339, utcnow

__all__ = ["ValidationError", "check_new", "visible_definition", "shown"]

# The definition keys of the API's job JSON (SPEC §3), compared one by one.
SECRET_KEYS = ("target", "dead_letter")


def check_new(spec: Mapping[str, Any], now: datetime | None = None) -> None:
    """Raise ``ValidationError`` (field named) when the API would refuse ``spec`` as new."""
    validate_job_parsed(dict(spec), job_id=new_job_id(), now=now or utcnow())


def visible_definition(spec: Mapping[str, Any], live: Mapping[str, Any],
                       now: datetime | None = None) -> dict[str, Any]:
    """``spec`` as the API would show it after a PUT onto ``live`` (secrets redacted)."""
    created_at = parse_rfc3339(live["created_at"])
    normal, _ = validate_job_parsed(dict(spec), job_id=live["id"], now=now or utcnow(),
                                    created_at=created_at,
                                    previous_schedule=live.get("schedule"))
    job = Job(id=live["id"], version=live["version"], created_at=created_at,
              updated_at=created_at, **normal)
    return shown(job_definition(job))


def shown(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A definition with its secrets redacted as the API shows them."""
    out = dict(definition)
    for key in SECRET_KEYS:
        if isinstance(out.get(key), Mapping):
            out[key] = redact_target(out[key])
    if isinstance(out.get("notify"), list):
        out["notify"] = redact_notify(out["notify"], redact_value)
    return out
