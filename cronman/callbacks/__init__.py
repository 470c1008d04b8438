"""Callback targets: validation of target objects and the targets that fire them.

- :func:`validate_target` / :func:`validate_dead_letter`: pure validation and
  normalisation (used by the API); importing this package does not import
  aiohttp or boto3.
- :func:`build_targets`: the :class:`TargetRegistry` a scheduler node's
  dispatcher fires through (``await registry.deliver(delivery)``).
- One module per kind: :mod:`.http`, :mod:`.sqs`; :mod:`.recording` is the
  in-process twin for tests; :mod:`.signing` signs and verifies callbacks;
  :mod:`.dead_letter` builds dead-letter deliveries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from cronman.callbacks.base import Delivery, Outcome, Target
from cronman.callbacks.dead_letter import dead_letter_delivery, run_record, validate_dead_letter
from cronman.callbacks.validation import TARGET_KINDS, validate_target
from cronman.config import Settings

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "Delivery",
    "Outcome",
    "Target",
    "TargetRegistry",
    "TARGET_KINDS",
    "build_targets",
    "dead_letter_delivery",
    "run_record",
    "validate_dead_letter",
    "validate_target",
]


class TargetRegistry(Mapping[str, Target]):
    """Targets by kind; ``deliver`` routes a delivery to the one for its target's kind."""

    def __init__(self, targets: Iterable[Target] = ()) -> None:
        self._targets: dict[str, Target] = {}
        for target in targets:
            self.register(target)

    def register(self, target: Target) -> None:
        """Add (or replace) the target of ``target.kind``."""
        self._targets[target.kind] = target

    def __getitem__(self, kind: str) -> Target:
        return self._targets[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Fire one attempt through the target of its kind; never raises for a delivery failure."""
        kind = delivery.target.get("kind")
        target = self._targets.get(kind) if isinstance(kind, str) else None
        if target is None:
            return Outcome(
                False,
                error=f"target kind {kind!r} is not available on this node",
                retryable=False,
            )
        return await target.deliver(delivery)

    async def close(self) -> None:
        """Close every target (their sessions, clients and thread pools)."""
        for target in list(self._targets.values()):
            await target.close()


def build_targets(
    settings: Settings,
    *,
    sqs_executor: ThreadPoolExecutor | None = None,
    extra: Iterable[Target] = (),
) -> TargetRegistry:
    """The targets of a scheduler node: http and sqs, plus ``extra`` (e.g. container).

    Call from the process that runs the dispatcher; the http target opens its
    session lazily on the loop that first uses it. ``extra`` targets replace
    built-in ones of the same kind (tests pass ``RecordingTarget`` here).
    """
    from cronman.callbacks.http import HttpTarget
    from cronman.callbacks.sqs import SqsTarget

    registry = TargetRegistry([HttpTarget(settings), SqsTarget(settings, executor=sqs_executor)])
    for target in extra:
        registry.register(target)
    return registry
