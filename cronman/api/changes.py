"""The ``ChangeContext`` of a job change made through the API: who (the
request's token, or ``anonymous`` when the API runs without authentication),
through which request, and the definition as the history records it -- the
job as the API shows it, secrets redacted by the API's own rendering."""

from __future__ import annotations

from typing import Any

from cronman.api.common import principal
from cronman.api.request_ids import request_id
from cronman.api.serialize import job_json
from cronman.models import Job
from cronman.store.records import ChangeContext
from cronman.timeutil import utcnow
from cronman.vocabulary import ANONYMOUS_ACTOR, JobAction

# Keys of the API's job answer that describe the moment, not the definition
# (the policies' counts move with every run, unrecorded; ``state`` and
# ``paused_at`` follow ``paused`` and ``done_at``).
_NOT_DEFINITION = ("next_fire_at", "last_run", "state", "failure_streak", "runs_done",
                   "runs_left", "paused_at", "buffered")


def recorded_definition(job: Job) -> dict[str, Any]:
    """The job as the API shows it (secrets redacted), as the history keeps it."""
    out = job_json(job, now=utcnow())
    for key in _NOT_DEFINITION:
        out.pop(key, None)
    return out


def change(action: JobAction, **details: Any) -> ChangeContext:
    """The context of a change the current request makes."""
    who = principal()
    return ChangeContext(
        action=action,
        describe=recorded_definition,
        actor_token_id=who.token_id,
        actor_name=ANONYMOUS_ACTOR if who.token_id is None else (who.name or who.token_id),
        request_id=request_id(),
        details=details,
    )
