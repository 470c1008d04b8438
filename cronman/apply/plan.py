"""What an apply would do: the comparison of definitions with live jobs (no writes)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from cronman.apply import normalize
from cronman.apply.labels import (
    DIGEST_LABEL,
    MANAGED_LABEL,
    MANAGED_VALUE,
    RESERVED_LABELS,
    definition_digest,
    is_managed,
)
from cronman.client.types import Job
from cronman.vocabulary import DEFAULT_NAMESPACE

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# What an update changes when only the digest shows it (a secret value).
REDACTED_CHANGE = "a redacted value"
# Keys the API assigns; a definition exported from the API may carry them.
SERVER_KEYS = ("id", "version", "created_at", "updated_at", "next_fire_at", "last_run",
               "state", "pause_reason", "pause_note", "failure_streak", "runs_done",
               "runs_left", "done_at", "paused_at", "buffered")
# The definition keys the API shows (SPEC §3), in the API's order.
DEFINITION_KEYS = ("name", "namespace", "schedule", "target", "retry", "misfire", "delivery",
                   "concurrency", "priority", "start_at", "end_at", "jitter", "paused",
                   "labels", "dead_letter", "notify", "depends_on", "calendars",
                   "buffer_limit", "pause_after_failures", "max_runs")


@dataclass(frozen=True)
class PlanError:
    """A definition the API would refuse: where it is, and the field."""

    source: str
    message: str
    field: str | None = None

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        return f"{self.source}: {self.message}{where}"


@dataclass(frozen=True)
class Change:
    """One job to create, update or delete (``live`` is None for a create)."""

    action: str  # "create" | "update" | "delete"
    namespace: str
    name: str
    source: str | None = None
    spec: dict[str, Any] | None = None  # what is sent (creates and updates)
    live: Job | None = None
    fields: tuple[str, ...] = ()  # the top-level keys that differ (updates)
    before: dict[str, Any] | None = None  # the visible definitions compared (updates)
    after: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def diff(self) -> str:
        """A unified diff (YAML) of what the change does; secrets redacted."""
        if self.action == "delete":
            return ""
        if self.action == "create":
            assert self.spec is not None
            return yaml_diff({}, _shown_spec(self.spec), "(none)", self.source or "")
        assert self.before is not None and self.after is not None and self.live is not None
        text = yaml_diff(_without_digest(self.before), _without_digest(self.after),
                     f"live {self.key} (version {self.live['version']})", self.source or "")
        return text or ("  (only the applied digest differs: a value the API shows only "
                        "redacted -- a target header or env value -- changed)")


@dataclass
class Plan:
    creates: list[Change] = field(default_factory=list)
    updates: list[Change] = field(default_factory=list)
    deletes: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    errors: list[PlanError] = field(default_factory=list)

    @property
    def changes(self) -> list[Change]:
        return [*self.creates, *self.updates, *self.deletes]

    def summary(self) -> str:
        return (f"{len(self.creates)} to create, {len(self.updates)} to update, "
                f"{len(self.deletes)} to delete, {len(self.unchanged)} unchanged")


@dataclass(frozen=True)
class Desired:
    source: str
    namespace: str
    name: str
    spec: dict[str, Any]  # with apply's labels


def desired_definitions(definitions: Iterable[tuple[str, Mapping[str, Any]]], *,
                        default_namespace: str = DEFAULT_NAMESPACE
                        ) -> tuple[list[Desired], list[PlanError]]:
    """Each (source, spec) made ready to send: namespace set, apply's labels added."""
    out: list[Desired] = []
    errors: list[PlanError] = []
    seen: dict[tuple[str, str], str] = {}
    for source, raw in definitions:
        spec = {k: v for k, v in raw.items() if k not in SERVER_KEYS}
        namespace = spec.get("namespace") or default_namespace
        spec["namespace"] = namespace
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            errors.append(PlanError(source, "is required", "name"))
            continue
        if not isinstance(namespace, str):
            errors.append(PlanError(source, "must be a string", "namespace"))
            continue
        labels = spec.get("labels")
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            errors.append(PlanError(source, "must be an object", "labels"))
            continue
        reserved = [k for k in RESERVED_LABELS if k in labels]
        if reserved:
            errors.append(PlanError(source, "is set by apply; leave it out",
                                    f"labels.{reserved[0]}"))
            continue
        key = (namespace, name)
        if key in seen:
            errors.append(PlanError(source, f"{namespace}/{name} is also defined in "
                                            f"{seen[key]}", "name"))
            continue
        seen[key] = source
        digest = definition_digest(spec)
        spec["labels"] = {**labels, MANAGED_LABEL: MANAGED_VALUE, DIGEST_LABEL: digest}
        out.append(Desired(source, namespace, name, spec))
    return out, errors


def make_plan(desired: Sequence[Desired], live: Iterable[Job], *,
              prune_namespaces: Iterable[str] = (),
              prune_selector: Mapping[str, str] | None = None) -> Plan:
    """Compare ``desired`` with the ``live`` jobs of their namespaces.

    ``live`` must hold every job of each namespace ``desired`` names (and of
    each prune namespace). With ``prune_namespaces``, the jobs there that
    apply manages (and that match ``prune_selector``) but no definition
    names are deleted.
    """
    plan = Plan()
    live_by_key = {(j["namespace"], j["name"]): j for j in live}
    for d in desired:
        current = live_by_key.get((d.namespace, d.name))
        try:
            if current is None:
                normalize.check_new(d.spec)
                plan.creates.append(Change("create", d.namespace, d.name, d.source, d.spec))
                continue
            spec = keep_live_values(d.spec, current)
            visible = normalize.visible_definition(with_ids(spec, live_by_key), current)
        except normalize.ValidationError as exc:
            plan.errors.append(PlanError(d.source, exc.message, exc.field))
            continue
        before = {k: current.get(k) for k in DEFINITION_KEYS}
        if all(visible.get(k) == before.get(k) for k in DEFINITION_KEYS):
            plan.unchanged.append(f"{d.namespace}/{d.name}")
            continue
        shown_before, shown_after = _without_digest(before), _without_digest(visible)
        fields = tuple(k for k in DEFINITION_KEYS
                       if shown_after.get(k) != shown_before.get(k)) or (REDACTED_CHANGE,)
        plan.updates.append(Change("update", d.namespace, d.name, d.source, spec, current,
                                   fields, before, visible))
    wanted = {(d.namespace, d.name) for d in desired}
    selector = dict(prune_selector or {})
    prune = set(prune_namespaces)
    for job in live_by_key.values():
        key = (job["namespace"], job["name"])
        if job["namespace"] not in prune or key in wanted or not is_managed(job["labels"]):
            continue
        if any(job["labels"].get(k) != v for k, v in selector.items()):
            continue
        plan.deletes.append(Change("delete", job["namespace"], job["name"], live=job))
    plan.deletes.sort(key=lambda c: c.key)
    return plan


def with_ids(spec: dict[str, Any], live: Mapping[tuple[str, str], Job]) -> dict[str, Any]:
    """``spec`` with the job references of its ``depends_on`` and ``after``
    schedule that name a live job by name (``namespace/name``, or a name in
    its namespace) replaced by that job's id, as the API stores them: an
    unchanged definition compares equal to its job."""
    namespace = spec.get("namespace")

    def resolve(ref: Any) -> Any:
        if not isinstance(ref, str):
            return ref
        ns, sep, name = ref.partition("/")
        job = live.get((ns, name) if sep else (namespace or "", ref))
        return job["id"] if job is not None else ref

    out = dict(spec)
    deps = spec.get("depends_on")
    if isinstance(deps, list):
        out["depends_on"] = [{**d, "job": resolve(d.get("job"))} if isinstance(d, dict) else d
                             for d in deps]
    schedule = spec.get("schedule")
    if (isinstance(schedule, dict) and schedule.get("kind") == "after"
            and isinstance(schedule.get("jobs"), list)):
        out["schedule"] = {**schedule, "jobs": [resolve(r) for r in schedule["jobs"]]}
    return out


def keep_live_values(spec: dict[str, Any], live: Job) -> dict[str, Any]:
    """``spec`` with two live values kept where the definition names none.

    - An interval schedule without ``anchor`` is anchored when the job is
      made; the live anchor is kept, so neither the comparison nor an update
      moves the phase of the job's fire times.
    - ``paused``: pausing is an operator's switch (an incident, a
      migration), so a definition that does not say ``paused`` leaves it
      as it is; one that does decides it.
    """
    out = spec
    schedule, current = spec.get("schedule"), live.get("schedule") or {}
    if (isinstance(schedule, dict) and schedule.get("kind") == "interval"
            and "anchor" not in schedule and current.get("kind") == "interval"
            and current.get("anchor")):
        out = {**out, "schedule": {**schedule, "anchor": current["anchor"]}}
    if "paused" not in spec:
        out = {**out, "paused": bool(live.get("paused"))}
    return out


def _shown_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    return _without_digest(normalize.shown(spec))


def _without_digest(definition: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(definition)
    labels = out.get("labels")
    if isinstance(labels, dict):
        out["labels"] = {k: v for k, v in labels.items() if k != DIGEST_LABEL}
    return out


def yaml_diff(before: Mapping[str, Any], after: Mapping[str, Any], from_name: str,
              to_name: str) -> str:
    a = _yaml(before) if before else []
    b = _yaml(after)
    lines = difflib.unified_diff(a, b, fromfile=from_name, tofile=to_name, lineterm="", n=2)
    return "\n".join(lines)


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _yaml(value: Mapping[str, Any]) -> list[str]:
    """YAML lines: top-level keys in the API's order, nested ones sorted (as the API sends)."""
    ordered = {k: _sorted(v) for k, v in value.items()}
    text: str = yaml.dump(ordered, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                          default_flow_style=False, width=100)
    return text.splitlines()
