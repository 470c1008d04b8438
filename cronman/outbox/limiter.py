"""The rate limit: which events go out alone and which wait for a digest. Pure.

The unit is a *group*: one rule, one job, one destination
(``rules.group_key``). Per group:

- an event with no message of its group in the last ``digest_interval``
  seconds goes out at once, alone;
- an event within ``digest_interval`` of the group's latest message goes
  into a digest due ``digest_interval`` after that message -- the digest
  still waiting if there is one, a new one otherwise.

So a job failing every minute under the default 900 s interval sends one
message for its first failure, then one digest every 15 minutes listing
what happened in between, and nothing once it is quiet (a recovery is an
event like the others: it ends the story in the next digest, or alone when
the group was quiet). A digest that is already being sent takes no more
events: they open the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from cronman.vocabulary import NotificationKind


@dataclass(frozen=True, slots=True)
class GroupState:
    """A group as the outbox holds it: its latest message, and its digest
    still open to more events (None when there is none, or when it is no
    longer pending)."""

    latest_id: str
    latest_due_at: datetime
    open_digest_id: str | None


@dataclass(frozen=True, slots=True)
class Incoming:
    """One new event of a group (in the order the events happened)."""

    group_key: str
    digest_interval: float


@dataclass(slots=True)
class NewMessage:
    """A message the plan creates: alone (``event``) or a digest."""

    id: str
    group_key: str
    kind: NotificationKind
    due_at: datetime
    first_event: int  # index into the incoming events: the event it was made for
    event_count: int = 1


@dataclass(slots=True)
class Plan:
    """What to write: new messages, events added to digests already stored,
    the message each incoming event belongs to, and the groups' new states."""

    messages: list[NewMessage] = field(default_factory=list)
    folded: dict[str, int] = field(default_factory=dict)  # stored digest id -> events added
    assigned: list[str] = field(default_factory=list)  # per incoming event: its message id
    groups: dict[str, GroupState] = field(default_factory=dict)


def plan(incoming: Sequence[Incoming], states: dict[str, GroupState], now: datetime,
         new_id: Callable[[], str]) -> Plan:
    """Place each incoming event in a message. ``states`` holds the stored
    state of the groups concerned (absent: a group with no message yet)."""
    out = Plan()
    made: dict[str, NewMessage] = {}
    for index, item in enumerate(incoming):
        key = item.group_key
        state = out.groups.get(key, states.get(key))
        if state is not None and state.open_digest_id is not None:
            digest_id = state.open_digest_id
            new = made.get(digest_id)
            if new is not None:
                new.event_count += 1
            else:
                out.folded[digest_id] = out.folded.get(digest_id, 0) + 1
            out.assigned.append(digest_id)
            out.groups[key] = state
            continue
        interval = timedelta(seconds=item.digest_interval)
        if state is not None and now < state.latest_due_at + interval:
            message = NewMessage(new_id(), key, NotificationKind.DIGEST,
                                 state.latest_due_at + interval, index)
            out.groups[key] = replace(state, latest_id=message.id,
                                      latest_due_at=message.due_at, open_digest_id=message.id)
        else:
            message = NewMessage(new_id(), key, NotificationKind.EVENT, now, index)
            out.groups[key] = GroupState(message.id, now, None)
        made[message.id] = message
        out.messages.append(message)
        out.assigned.append(message.id)
    return out
