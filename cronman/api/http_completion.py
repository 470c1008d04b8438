"""An http target with ``"completion": "callback"`` needs ``CRONMAN_PUBLIC_URL``:
the base of the completion and heartbeat URLs its requests carry. A job
that asks for it on an API without one is refused when written (400 naming
``target.completion``), rather than failing at every fire."""

from __future__ import annotations

from typing import Any

from cronman.api.context import api_context
from cronman.errors import ValidationError
from cronman.vocabulary import HttpCompletion, TargetKind

NEEDS_PUBLIC_URL = ('"completion": "callback" needs CRONMAN_PUBLIC_URL (the URL receivers '
                    "reach this API at), which is not set")


def require_public_url(spec: dict[str, Any], prefix: str = "") -> None:
    """400 when the job's target completes by callback and no public URL is set."""
    target = spec.get("target") or {}
    if target.get("kind") != TargetKind.HTTP or \
            target.get("completion") != HttpCompletion.CALLBACK:
        return
    if api_context().settings.public_url:
        return
    where = f"{prefix}.target.completion" if prefix else "target.completion"
    raise ValidationError(NEEDS_PUBLIC_URL, field=where)
