"""Resolving a job definition's references before it is stored.

The upstream jobs of ``depends_on`` and of an ``after`` schedule may be given
as a job id, ``namespace/name`` or a name in the job's own namespace; they
are stored as ids (a renamed upstream stays the same upstream). Jobs of the
same request (a bulk create) may name each other. Exclusion calendars are
stored by name and must exist. Both follow token scopes: a reference by
name into a namespace outside the caller's token is a 403 naming it (the
caller named it; whether the job exists is not looked up); a job id of such
a namespace is a 400, as an id no job has.

What a reference names is checked here, against the store; the store checks
it again in the transaction that writes the job (an upstream deleted
meanwhile, a cycle: :mod:`cronman.store.dag`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cronman.api.auth import Principal
from cronman.api.names import NAME_MAX, NAME_RE, NAMESPACE_MAX, NAMESPACE_RE
from cronman.errors import ValidationError
from cronman.schedules.after import JOB_ID_RE
from cronman.schedules.calendars import reference_key as calendar_key


@dataclass
class Pending:
    """One definition of a request: its id, its validated spec (changed in
    place), and the prefix of its error fields (``jobs[3]``, or "")."""

    job_id: str
    spec: dict[str, Any]
    prefix: str = ""


def _field(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix else path


def _name_key(ref: str, namespace: str) -> tuple[str, str] | None:
    """(namespace, name) a name reference means, or None if it cannot name a job."""
    ns, sep, name = ref.partition("/")
    if not sep:
        ns, name = namespace, ref
    if (not ns or len(ns) > NAMESPACE_MAX or NAMESPACE_RE.match(ns) is None or not name
            or len(name) > NAME_MAX or NAME_RE.match(name) is None):
        return None
    return ns, name


def _job_refs(spec: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """(reference, field, container, key) of each job reference in ``spec``."""
    out: list[tuple[str, str, Any, Any]] = []
    for i, entry in enumerate(spec.get("depends_on") or ()):
        out.append((entry["job"], f"depends_on[{i}].job", entry, "job"))
    schedule = spec.get("schedule") or {}
    if schedule.get("kind") == "after":
        jobs = schedule["jobs"]
        for i, ref in enumerate(jobs):
            out.append((ref, f"schedule.jobs[{i}]", jobs, i))
    return out


def resolve(store: Any, items: Sequence[Pending], who: Principal) -> None:
    """Replace every job reference of ``items`` by the id it names and check
    their calendars; ``ValidationError``/``Forbidden`` naming the field."""
    batch = {(p.spec["namespace"], p.spec["name"]): p.job_id for p in items}
    ids: set[str] = set()
    names: set[tuple[str, str]] = set()
    for p in items:
        for ref, _, _, _ in _job_refs(p.spec):
            if JOB_ID_RE.match(ref):
                ids.add(ref.lower())
            else:
                key = _name_key(ref, p.spec["namespace"])
                if key is not None and key not in batch:
                    names.add(key)
    by_id = {job.id: job for job in store.jobs.get_jobs(sorted(ids))
             if job.deleted_at is None} if ids else {}
    by_name = store.dependencies.find_jobs(sorted(names)) if names else {}
    batch_ids = {job_id: key[0] for key, job_id in batch.items()}
    for p in items:
        namespace = p.spec["namespace"]
        for ref, path, container, key in _job_refs(p.spec):
            field = _field(p.prefix, path)
            found_ns: str | None = None
            found_id: str | None = None
            if JOB_ID_RE.match(ref):
                job = by_id.get(ref.lower())
                # A job the caller may not see is as unknown as one that does
                # not exist: a 403 naming its namespace would tell them apart.
                if job is not None and who.allows(job.namespace):
                    found_id, found_ns = job.id, job.namespace
                elif ref.lower() in batch_ids:
                    found_id, found_ns = ref.lower(), batch_ids[ref.lower()]
            else:
                name_key = _name_key(ref, namespace)
                if name_key is not None:  # the scope first: say nothing of other namespaces
                    who.require(name_key[0], field=field)
                if name_key is not None and name_key in batch:
                    found_id, found_ns = batch[name_key], name_key[0]
                elif name_key is not None and name_key in by_name:
                    found_id, found_ns = by_name[name_key].id, name_key[0]
            if found_id is None or found_ns is None:
                raise ValidationError(f"{ref!r} names no job: give a job id, namespace/name, "
                                      "or a name in this job's namespace", field=field)
            if found_id == p.job_id:
                raise ValidationError("a job cannot depend on itself", field=field)
            who.require(found_ns, field=field)
            container[key] = found_id
        schedule = p.spec.get("schedule") or {}
        if schedule.get("kind") == "after":
            schedule["jobs"] = list(dict.fromkeys(schedule["jobs"]))
        _check_calendars(store, p, who)


def _check_calendars(store: Any, p: Pending, who: Principal) -> None:
    for i, ref in enumerate(p.spec.get("calendars") or ()):
        field = _field(p.prefix, f"calendars[{i}]")
        namespace, name = calendar_key(ref, p.spec["namespace"])
        who.require(namespace, field=field)
        if store.calendars.get_by_name(namespace, name) is None:
            raise ValidationError(f"{ref!r} names no calendar in namespace {namespace!r}",
                                  field=field)
