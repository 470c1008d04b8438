"""Limits in ``jobs apply``: the comparison of limit definitions with the
live limits, and carrying the plan out through the API client.

A document with a ``match`` key is a limit (``{name, match, rate, burst,
concurrency}``, as ``cronman limits create -f`` takes); apply writes
``managed_by: apply`` on the limits it makes, and prunes only those. Limits
are cluster-wide (no namespace), so pruning them is scoped by the files: with
prune, the managed limits no definition names are deleted when the files
define limits at all (or when asked to, the files holding none). A limit
counts as unchanged when its JSON form, once the API's parsing normalises
both (the host's case, a rate as a number), equals the live one's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cronman.apply.labels import MANAGED_VALUE
from cronman.apply.plan import PlanError, yaml_diff
from cronman.client import ApiError, ConflictError, CronmanClient, NotFoundError
from cronman.errors import ValidationError
from cronman.limits import STATE_KEYS, parse_limit

MATCH_KEY = "match"
MANAGED_KEY = "managed_by"


def is_limit(spec: Mapping[str, Any]) -> bool:
    return MATCH_KEY in spec


@dataclass(frozen=True)
class LimitChange:
    """One limit to create, update or delete (``live`` is None for a create)."""

    action: str  # "create" | "update" | "delete"
    name: str
    source: str | None = None
    spec: dict[str, Any] | None = None  # what is sent (creates and updates)
    live: dict[str, Any] | None = None
    fields: tuple[str, ...] = ()  # the keys that differ (updates)
    namespace: str | None = None  # limits have none (a change's common shape)

    @property
    def key(self) -> str:
        return f"limit {self.name}"

    def diff(self) -> str:
        if self.action == "delete":
            return ""
        assert self.spec is not None
        before = _shown(self.live) if self.live is not None else {}
        where = ("(none)" if self.live is None
                 else f"live limit {self.name} (version {self.live.get('version')})")
        return yaml_diff(before, _shown(self.spec), where, self.source or "")


@dataclass
class LimitPlan:
    creates: list[LimitChange] = field(default_factory=list)
    updates: list[LimitChange] = field(default_factory=list)
    deletes: list[LimitChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    errors: list[PlanError] = field(default_factory=list)

    @property
    def changes(self) -> list[LimitChange]:
        return [*self.creates, *self.updates, *self.deletes]

    def summary(self) -> str:
        return (f"limits: {len(self.creates)} to create, {len(self.updates)} to update, "
                f"{len(self.deletes)} to delete, {len(self.unchanged)} unchanged")

    def after(self, live: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The limits as they would be once the plan is carried out."""
        out = {item["name"]: {k: v for k, v in item.items() if k not in STATE_KEYS}
               for item in live}
        for change in [*self.creates, *self.updates]:
            assert change.spec is not None
            out[change.name] = change.spec
        for change in self.deletes:
            out.pop(change.name, None)
        return [out[name] for name in sorted(out)]


def _normal(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The limit's JSON form as the API would store it (``ValidationError``)."""
    return parse_limit({k: v for k, v in spec.items() if k not in STATE_KEYS}).to_dict()


def _shown(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in STATE_KEYS}


def make_limit_plan(definitions: Sequence[tuple[str, Mapping[str, Any]]],
                    live: Iterable[Mapping[str, Any]], *, prune: bool) -> LimitPlan:
    """Compare the limit ``definitions`` (source, spec) with the ``live`` limits;
    with ``prune``, the managed limits no definition names are deleted."""
    plan = LimitPlan()
    live_by_name = {item["name"]: dict(item) for item in live}
    seen: dict[str, str] = {}
    for source, raw in definitions:
        if MANAGED_KEY in raw:
            plan.errors.append(PlanError(source, "is set by apply; leave it out", MANAGED_KEY))
            continue
        spec = {**_shown(raw), MANAGED_KEY: MANAGED_VALUE}
        try:
            wanted = _normal(spec)
        except ValidationError as exc:
            plan.errors.append(PlanError(source, exc.message, exc.field))
            continue
        name = wanted["name"]
        if name in seen:
            plan.errors.append(PlanError(source, f"limit {name} is also defined in "
                                                 f"{seen[name]}", "name"))
            continue
        seen[name] = source
        current = live_by_name.get(name)
        if current is None:
            plan.creates.append(LimitChange("create", name, source, wanted))
            continue
        before = _normal(current)
        if before == wanted:
            plan.unchanged.append(name)
            continue
        fields = tuple(k for k in sorted({*before, *wanted}) if before.get(k) != wanted.get(k))
        plan.updates.append(LimitChange("update", name, source, wanted, current, fields))
    if prune:
        for name, current in sorted(live_by_name.items()):
            if name not in seen and current.get(MANAGED_KEY) == MANAGED_VALUE:
                plan.deletes.append(LimitChange("delete", name, live=current))
    return plan


@dataclass(frozen=True)
class LimitOutcome:
    """What became of one limit change (the statuses of ``apply.Outcome``)."""

    change: LimitChange
    status: str
    error: ApiError | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("created", "updated", "deleted")

    @property
    def job_id(self) -> None:
        return None


def execute_limits(client: CronmanClient, changes: Sequence[LimitChange]
                   ) -> list[LimitOutcome]:
    """Carry out ``changes`` in order; an update names the version compared
    (changed meanwhile: a conflict, never an overwrite)."""
    return [_carry_out(client, change) for change in changes]


def _carry_out(client: CronmanClient, change: LimitChange) -> LimitOutcome:
    done = {"create": "created", "update": "updated", "delete": "deleted"}[change.action]
    try:
        if change.action == "create":
            assert change.spec is not None
            client.create_limit(change.spec)
        elif change.action == "update":
            assert change.spec is not None and change.live is not None
            client.replace_limit(change.name, {**change.spec,
                                               "version": change.live["version"]})
        else:
            assert change.live is not None
            current = client.get_limit(change.name)
            if (current.get("version") != change.live.get("version")
                    or current.get(MANAGED_KEY) != MANAGED_VALUE):
                return LimitOutcome(change, "conflict", ConflictError(
                    409, "conflict", f"the limit changed since it was read (version "
                                     f"{current.get('version')}); not deleted"))
            client.delete_limit(change.name)
    except ConflictError as exc:
        return LimitOutcome(change, "conflict", exc)
    except NotFoundError as exc:
        if change.action == "delete":  # gone already: what prune wanted
            return LimitOutcome(change, done)
        return LimitOutcome(change, "failed", exc)
    except ApiError as exc:
        return LimitOutcome(change, "failed", exc)
    return LimitOutcome(change, done)
