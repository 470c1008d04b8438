"""Callback targets: validation of target objects and the targets that fire them.

- :func:`validate_target` / :func:`validate_dead_letter`: pure validation and
  normalisation (used by the API); importing this package does not import
  the HTTP client or boto3.
- :func:`build_targets`: the :class:`TargetRegistry` a scheduler node's
  dispatcher fires through (``registry.route(delivery)``, awaited by the
  attempt's task; a target's ``start`` may already have sent by then;
  ``deliver`` is the same as a coroutine of its own).
- One module per kind: :mod:`.http` (over the :mod:`.httpclient` package), :mod:`.sqs`, :mod:`.container` (runs
  handed to worker agents through an ``AgentDirectory``), :mod:`.worker` (runs handed
  to a work queue of the store, which every scheduler node registers); :mod:`.recording` is the
  in-process twin for tests; :mod:`.signing` signs and verifies callbacks;
  :mod:`.dead_letter` builds dead-letter deliveries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from cronman.callbacks.base import Answered, Delivery, Outcome, Target
from cronman.callbacks.dead_letter import dead_letter_delivery, run_record, validate_dead_letter
from cronman.callbacks.validation import validate_target
from cronman.config import Settings
from cronman.host_policy import HostPolicy
from cronman.signing_keys import NamespaceSigners
from cronman.vocabulary import TARGET_KINDS, TargetKind

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from cronman.coordination.agents import AgentDirectory

NO_AGENT_ERROR = ("container targets need a worker agent (cronman agent); "
                  "none is available to this scheduler")

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

    def __init__(self, targets: Iterable[Target] = (),
                 signers: NamespaceSigners | None = None) -> None:
        # The namespaces' signing keys the http target signs with; the node
        # keeps their rotations current.
        self.signers = signers or NamespaceSigners(None)
        self._targets: dict[str, Target] = {}
        self._starts: dict[str, Callable[[Delivery], Awaitable[Outcome]]] = {}
        for target in targets:
            self.register(target)

    def register(self, target: Target) -> None:
        """Add (or replace) the target of ``target.kind``."""
        self._targets[target.kind] = target
        self._starts[target.kind] = getattr(target, "start", target.deliver)

    def __getitem__(self, kind: str) -> Target:
        return self._targets[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    async def deliver(self, delivery: Delivery) -> Outcome:
        """Fire one attempt through the target of its kind; never raises for a delivery failure."""
        return await self.route(delivery)

    def route(self, delivery: Delivery) -> Awaitable[Outcome]:
        """``deliver``, not yet awaited: the target's ``start`` (which may send
        before it returns) or its own coroutine; the dispatcher awaits it
        without a frame of this registry in between."""
        kind = delivery.target.get("kind")
        start = self._starts.get(kind) if isinstance(kind, str) else None
        if start is None:
            error = (NO_AGENT_ERROR if kind == TargetKind.CONTAINER
                     else f"target kind {kind!r} is not available on this node")
            return Answered(Outcome(False, error=error, retryable=False))
        return start(delivery)

    def hand_back(self) -> None:
        """The node stops: targets whose work outlives it leave it running
        for whoever takes its runs over (see ``Target.hand_back``)."""
        for target in self._targets.values():
            target.hand_back()

    def pool_limit(self) -> int | None:
        """The smallest of the targets' pool limits (None: none has one)."""
        limits = [t.pool_limit for t in self._targets.values() if t.pool_limit]
        return min(limits) if limits else None

    async def close(self) -> None:
        """Close every target (their sessions, clients and thread pools)."""
        for target in list(self._targets.values()):
            await target.close()


def build_targets(
    settings: Settings,
    *,
    sqs_executor: ThreadPoolExecutor | None = None,
    agents: AgentDirectory | None = None,
    extra: Iterable[Target] = (),
    grants: Callable[[str], HostPolicy] | None = None,
) -> TargetRegistry:
    """The targets of a scheduler node: http and sqs, container when ``agents``
    (the directory worker agents are members of) is given, plus ``extra``.
    ``grants`` gives a namespace's host policy grant (default: the operator's,
    ``CRONMAN_HOST_POLICY``, for every namespace).

    Call from the process that runs the dispatcher; the http target opens its
    session lazily on the loop that first uses it. ``extra`` targets replace
    built-in ones of the same kind (tests pass ``RecordingTarget`` here).
    """
    from cronman.callbacks.http import HttpTarget
    from cronman.callbacks.sqs import SqsTarget

    signers = NamespaceSigners(settings.signing_secret)
    registry = TargetRegistry([HttpTarget(settings, signers=signers),
                               SqsTarget(settings, executor=sqs_executor)], signers)
    if agents is not None:
        from cronman.callbacks.container import ContainerTarget

        registry.register(ContainerTarget(agents, settings, grants=grants))
    for target in extra:
        registry.register(target)
    return registry
