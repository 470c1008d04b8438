"""The target schemas of ``/openapi.json``: HTTP, SQS and container targets
and the dead-letter targets, derived from their declarations
(:mod:`cronman.callbacks.target_fields`)."""

from __future__ import annotations

from typing import Any

from cronman.callbacks.target_fields import DEAD_LETTER, TARGET

TARGETS: dict[str, Any] = {v.name or "": v.definition() for v in TARGET.variants}
DEAD_LETTER_TARGETS: dict[str, Any] = {v.name or "": v.definition()
                                       for v in DEAD_LETTER.variants}
