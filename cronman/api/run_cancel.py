"""What an operator's cancel (``POST /v1/runs/{id}/cancel``, ``cronman.api.work``)
says: who asked, as the cancelled run's error names them, and why a run
cannot be cancelled (the 409's message)."""

from __future__ import annotations

from cronman.api.auth import Principal
from cronman.models import Job
from cronman.vocabulary import HttpCompletion, TargetKind


def cancelled_by(who: Principal) -> str:
    """``token ops-admin``; ``an operator (no token: auth is off)``."""
    if who.token_id is None:
        return "an operator (no token: auth is off)"
    return f"token {who.name or who.token_id}"


def not_cancellable(kind: str, job: Job | None) -> str:
    """Why a run in flight of this kind has nothing a cancel can stop."""
    target = job.target if job is not None else {}
    if kind == TargetKind.WORKER or (kind == TargetKind.HTTP
                                     and target.get("completion") == HttpCompletion.CALLBACK):
        return ("the run is not with its work queue yet (being handed over, or its request "
                "not answered yet): try again")
    if kind == TargetKind.HTTP:
        timeout = target.get("timeout")
        within = f" ({timeout:g} s)" if isinstance(timeout, int | float) else ""
        return (f"an http run cannot be cancelled: its request is sent and ends within the "
                f"target's timeout{within}; only an http run completed by callback can be")
    if kind == TargetKind.SQS:
        return "an sqs run cannot be cancelled: its message is sent in one call"
    return f"a {kind} run cannot be cancelled"
