"""The ``/v1/jobs`` resources.

Create, bulk create, list, read, replace (PUT), merge (PATCH), delete, pause,
resume, trigger, next fire times (and which of them an exclusion calendar
skips), run history, backfill and the upstream and downstream jobs of jobs. Each write
is one store call, i.e. one transaction (a bulk request included).
"""

from __future__ import annotations

import random
import time
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, request
from werkzeug.routing import BaseConverter

from cronman.api import host_policies, job_policies, job_search, references
from cronman.api import validation as v
from cronman.api.changes import change
from cronman.api.common import (
    MAX_BODY_BYTES,
    MAX_BULK_BODY_BYTES,
    ApiView,
    json_response,
    principal,
    read_json,
    reject_bad_strings,
)
from cronman.api.context import api_context
from cronman.api.http_completion import require_public_url
from cronman.api.idempotency import idempotent
from cronman.api.names import ID_PATTERN, ID_RE
from cronman.api.requested_spans import requested_span
from cronman.api.runs import work_items
from cronman.api.schedule_floor import check_floor
from cronman.api.serialize import (
    edges_json,
    excluded_fire_times,
    job_definition,
    job_json,
    run_json,
)
from cronman.errors import Conflict, NotFound, ValidationError
from cronman.ids import new_job_id
from cronman.models import Job, JobFilter, RunFilter
from cronman.observability import logs, tracing
from cronman.redaction import restore_redacted, restore_redacted_notify
from cronman.schedules import Schedule, job_times
from cronman.store.dag import DependentsExist, dependents_message
from cronman.timeutil import format_rfc3339, utcnow
from cronman.vocabulary import BUFFERED_POLICIES, RUN_STATUSES, JobAction

bp = Blueprint("jobs", __name__, url_prefix="/v1/jobs")

LIST_LIMIT_DEFAULT = 100
LIST_LIMIT_MAX = 1000
NEXT_COUNT_DEFAULT = 10
NEXT_COUNT_MAX = 100
BACKFILL_MAX = 10_000
# PUT/PATCH without a version: how often a write lost to a concurrent one is
# applied again to the job as it then is, after a random pause of up to
# WRITE_BACKOFF * 2^attempt seconds (so that racing writers spread out).
WRITE_ATTEMPTS = 10
WRITE_BACKOFF = 0.005
# Job and run ids are UUIDs; anything else cannot exist (and must not reach SQL).


class IdConverter(BaseConverter):
    """``<id:job_id>``: a UUID-shaped path segment (so ``/v1/jobs/bulk`` is no job id)."""

    regex = ID_PATTERN


def _store() -> Any:
    return api_context().store


def _min_interval() -> float:
    floor: float = api_context().settings.min_interval
    return floor


def load_job(job_id: str) -> Job:
    """The live job ``job_id`` the caller may see; 404 / 403 otherwise."""
    job: Job | None = _store().jobs.get_job(job_id) if ID_RE.match(job_id) else None
    if job is None:
        raise NotFound(f"no job with id {job_id!r}")
    principal().require(job.namespace)
    return job


def store_spec(spec: dict[str, Any], job_id: str) -> dict[str, Any]:
    """A validated definition as the store takes it (with the id the schedule was parsed for)."""
    return {"id": job_id, **spec}


class JobCollection(ApiView):
    query_params = {"get": ("namespace", "label", "paused", "limit", "cursor",
                            *job_search.QUERY_PARAMS)}

    def get(self) -> Response:
        args = request.args
        namespace = args.get("namespace")
        if namespace is not None:
            v.check_namespace(namespace)
            principal().require(namespace, field="namespace")
        labels = v.parse_label_filter(args.getlist("label"))
        for key, value in labels:
            reject_bad_strings(key, "label")
            reject_bad_strings(value, "label")
        paused_raw = args.get("paused")
        paused = None if paused_raw is None else v.parse_bool_param(paused_raw, "paused")
        limit = v.parse_int_param(args.get("limit"), "limit", default=LIST_LIMIT_DEFAULT,
                                  lo=1, hi=LIST_LIMIT_MAX)
        cursor = args.get("cursor") or None
        if cursor is not None:
            reject_bad_strings(cursor, "cursor")
        flt = JobFilter(namespace=namespace, namespaces=principal().restriction(),
                        labels=labels, paused=paused)
        return job_search.list_answer(_store(), flt, limit, cursor)

    @idempotent(MAX_BODY_BYTES)
    def post(self) -> Response:
        body = read_json(max_bytes=MAX_BODY_BYTES)
        now = utcnow()
        job_id = new_job_id()
        spec, schedule = v.validate_job_parsed(body, job_id=job_id, now=now)
        principal().require(spec["namespace"], field="namespace")
        check_floor(spec, schedule, principal(), _min_interval())
        host_policies.enforce(spec, principal())
        require_public_url(spec)
        references.resolve(_store(), [references.Pending(job_id, spec)], principal())
        (job,) = _store().jobs.create_jobs([store_spec(spec, job_id)],
                                           change(JobAction.CREATE))
        return json_response(job_json(job, now=now, schedule=schedule), 201,
                             {"Location": f"/v1/jobs/{job.id}"})


class JobBulk(ApiView):
    @idempotent(MAX_BULK_BODY_BYTES)
    def post(self) -> Response:
        body = read_json(max_bytes=MAX_BULK_BODY_BYTES)
        items = v.validate_bulk(body)
        now = utcnow()
        specs = []
        schedules = []
        seen: dict[tuple[str, str], int] = {}
        who = principal()
        for i, item in enumerate(items):
            job_id = new_job_id()
            spec, schedule = v.validate_job_parsed(item, job_id=job_id, now=now,
                                                   prefix=f"jobs[{i}]")
            schedules.append(schedule)
            who.require(spec["namespace"], field=f"jobs[{i}].namespace")
            check_floor(spec, schedule, who, _min_interval(), prefix=f"jobs[{i}]")
            host_policies.enforce(spec, who, f"jobs[{i}]")
            require_public_url(spec, f"jobs[{i}]")
            key = (spec["namespace"], spec["name"])
            if key in seen:
                raise Conflict(f"name {spec['name']!r} given twice in namespace "
                               f"{spec['namespace']!r} (also jobs[{seen[key]}])",
                               field=f"jobs[{i}].name")
            seen[key] = i
            specs.append(store_spec(spec, job_id))
        references.resolve(_store(), [references.Pending(s["id"], s, f"jobs[{i}]")
                                      for i, s in enumerate(specs)], who)
        try:
            jobs = _store().jobs.create_jobs(specs, change(JobAction.CREATE))
        except Conflict as exc:
            if len(specs) == 1 and exc.field == "name":
                raise Conflict(exc.message, field="jobs[0].name") from None
            raise
        return json_response({"items": [job_json(j, now=now, schedule=s)
                                        for j, s in zip(jobs, schedules, strict=True)]}, 201)


def _replacement(job: Job, body: Any, *, merge: bool
                 ) -> tuple[dict[str, Any], Schedule, dict[str, Any]]:
    """The validated new definition of ``job`` from a PUT (or, merged, PATCH)
    body, its schedule, and the changes to write: the whole definition for a
    PUT, only the keys it names for a PATCH."""
    obj = v.require_object(body, None)
    v.check_read_only(obj, job_id=job.id, version=job.version, created_at=job.created_at)
    given = v.strip_read_only(obj)
    named = [key for key in given if key in v.DEFINITION_KEYS]
    if merge:
        given = {**job_definition(job), **given}
    if "target" in given:
        given["target"] = restore_redacted(given["target"], job.target, "target")
    if "dead_letter" in given:
        given["dead_letter"] = restore_redacted(given["dead_letter"], job.dead_letter,
                                                "dead_letter")
    if "notify" in given:
        given["notify"] = restore_redacted_notify(given["notify"], job.notify)
    now = utcnow()
    spec, schedule = v.validate_job_parsed(given, job_id=job.id, now=now,
                                           created_at=job.created_at,
                                           previous_schedule=job.schedule)
    principal().require(spec["namespace"], field="namespace")
    check_floor(spec, schedule, principal(), _min_interval(),
                previous={"schedule": job.schedule, "retry": job.retry})
    host_policies.enforce(spec, principal())
    require_public_url(spec)
    references.resolve(_store(), [references.Pending(job.id, spec)], principal())
    changes = {key: spec[key] for key in named} if merge else dict(spec)
    changes.update(job_policies.replacement_changes(job, spec, now))
    return spec, schedule, changes


class JobItem(ApiView):
    query_params = {"delete": ("force",)}

    def get(self, job_id: str) -> Response:
        job = load_job(job_id)
        last = _store().runs.last_runs([job.id]).get(job.id)
        buffered = (_store().runs.count_buffered(job.id)
                    if job.concurrency in BUFFERED_POLICIES else 0)
        return json_response(job_json(job, now=utcnow(), last_run=last, with_last_run=True,
                                      buffered=buffered))

    def put(self, job_id: str) -> Response:
        return self._replace(job_id, merge=False)

    def patch(self, job_id: str) -> Response:
        return self._replace(job_id, merge=True)

    def delete(self, job_id: str) -> Response:
        raw = request.args.get("force")
        force = False if raw is None else v.parse_bool_param(raw, "force")
        load_job(job_id)
        try:
            deleted = _store().jobs.delete_job(job_id, change(JobAction.DELETE), force=force)
        except DependentsExist as exc:  # name only the dependents the caller may see
            who = principal()
            seen = [d for d in exc.dependents if who.allows(d[0])]
            raise Conflict(dependents_message(seen, exc.more, len(exc.dependents) - len(seen)),
                           field="force") from None
        if not deleted:
            raise NotFound(f"no job with id {job_id!r}")
        return Response(status=204)

    def _replace(self, job_id: str, *, merge: bool) -> Response:
        """PUT/PATCH: validated against the job as read, written only if it is
        still that version (``WHERE version = :v``). A body with ``version``
        gets 409 when another write came first; without, the body is applied
        again to the job as it now is (a concurrent pause stays paused)."""
        body = read_json(max_bytes=MAX_BODY_BYTES)
        sent_version = body.get("version") if isinstance(body, dict) else None
        for attempt in range(WRITE_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, WRITE_BACKOFF * 2 ** min(attempt, 5)))
            job = load_job(job_id)
            _, schedule, changes = _replacement(job, body, merge=merge)
            expected = job.version if sent_version is None else int(sent_version)
            try:
                updated = _store().jobs.update_job(
                    job.id, changes, expected_version=expected,
                    change=change(JobAction.PATCH if merge else JobAction.UPDATE))
            except Conflict as exc:
                if sent_version is not None or exc.field != "version":
                    raise
                continue
            return json_response(job_json(updated, now=utcnow(), schedule=schedule))
        raise Conflict(f"the job changed {WRITE_ATTEMPTS} times while this write was "
                       "applied to it; try again", field="version")


class JobPause(ApiView):
    """Pause or resume, with an optional ``{"note"}`` (``job_policies``)."""

    paused = True

    def post(self, job_id: str) -> Response:
        note = job_policies.read_note(read_json(max_bytes=MAX_BODY_BYTES, required=False))
        job = load_job(job_id)
        changes = (job_policies.pause_changes(job, note, utcnow()) if self.paused
                   else job_policies.resume_changes(job, note))
        if job.paused != self.paused or any(getattr(job, k) != val for k, val in changes.items()):
            job = _store().jobs.update_job(job.id, changes, change=change(
                JobAction.PAUSE if self.paused else JobAction.RESUME, note=note))
        return json_response(job_json(job, now=utcnow()))


class JobResume(JobPause):
    paused = False


class JobTrigger(ApiView):
    route = "/v1/jobs/{job_id}/trigger"

    @idempotent(MAX_BODY_BYTES)
    def post(self, job_id: str) -> Response:
        traces = tracing.active()
        started_ns = time.time_ns() if traces is not None else 0
        job = load_job(job_id)
        try:
            run = _store().runs.request_trigger(job, utcnow(), change(JobAction.TRIGGER))
        except Conflict as exc:  # a fire at this very millisecond exists already
            raise Conflict(exc.message) from None
        if traces is not None:  # the root of the run's trace
            trace_id, span_id = traces.run_log_ids(run.id, requested=True)
            logs.bind(job_id=job.id, run_id=run.id, trace_id=trace_id, span_id=span_id)
            requested_span(traces, self.route, job, [run.id], started_ns)
        return json_response(run_json(run), 202)


class JobNext(ApiView):
    query_params = {"get": ("count",)}

    def get(self, job_id: str) -> Response:
        count = v.parse_int_param(request.args.get("count"), "count",
                                  default=NEXT_COUNT_DEFAULT, lo=1, hi=NEXT_COUNT_MAX)
        job = load_job(job_id)
        times = job_times(job).fire_times(utcnow(), count)
        excluded = excluded_fire_times(_store(), job, times)
        return json_response({"fire_times": [_fmt(t) for t in times],
                              "excluded": [{"fire_time": _fmt(t), "calendar": name}
                                           for t, name in excluded]})


class JobDependencies(ApiView):
    def get(self, job_id: str) -> Response:
        """The job's upstream jobs (it depends on them or is fired after them)
        and downstream jobs (they depend on it or are fired after it)."""
        job = load_job(job_id)
        upstream, downstream = _store().dependencies.edges(job.id)
        return json_response({"upstream": edges_json(upstream, principal()),
                              "downstream": edges_json(downstream, principal())})


class JobRuns(ApiView):
    query_params = {"get": ("since", "until", "status", "limit", "cursor")}

    def get(self, job_id: str) -> Response:
        args = request.args
        since = v.parse_time_param(args.get("since"), "since")
        until = v.parse_time_param(args.get("until"), "until")
        statuses: list[str] = []
        for raw in args.getlist("status"):
            for status in raw.split(","):
                status = status.strip()
                if not status:
                    continue
                if status not in RUN_STATUSES:
                    raise ValidationError(
                        f"unknown status {status!r}; one of {', '.join(RUN_STATUSES)}",
                        field="status")
                if status not in statuses:
                    statuses.append(status)
        limit = v.parse_int_param(args.get("limit"), "limit", default=LIST_LIMIT_DEFAULT,
                                  lo=1, hi=LIST_LIMIT_MAX)
        cursor = args.get("cursor") or None
        if cursor is not None:
            reject_bad_strings(cursor, "cursor")
        job = load_job(job_id)
        flt = RunFilter(since=since, until=until, statuses=tuple(statuses))
        store = _store()
        page = store.runs.list_runs(job.id, flt, limit, cursor)
        items = work_items(store, page.items)
        return json_response({"items": [run_json(r, items.get(r.id)) for r in page.items],
                              "next_cursor": page.next_cursor})


class JobBackfill(ApiView):
    route = "/v1/jobs/{job_id}/backfill"

    @idempotent(MAX_BODY_BYTES)
    def post(self, job_id: str) -> Response:
        traces = tracing.active()
        started_ns = time.time_ns() if traces is not None else 0
        body = read_json(max_bytes=MAX_BODY_BYTES)
        job = load_job(job_id)
        since, until = v.validate_backfill(body, now=utcnow())
        times = job_times(job).fire_times_between(since, until, BACKFILL_MAX + 1)
        if len(times) > BACKFILL_MAX:
            raise ValidationError(
                f"the range holds more than {BACKFILL_MAX} fire times; backfill it in parts",
                field="until")
        requested = _store().runs.request_backfill(
            job, times, change(JobAction.BACKFILL, since=_fmt(since), until=_fmt(until))
        ) if times else []
        if traces is not None and requested:  # the root of each new run's trace
            requested_span(traces, self.route, job, requested, started_ns)
        return json_response({"requested": len(requested), "fire_times": len(times)}, 202)


def _fmt(t: datetime) -> str:
    return format_rfc3339(t) or ""


def _register() -> None:
    bp.add_url_rule("", view_func=JobCollection.as_view("collection"))
    bp.add_url_rule("/bulk", view_func=JobBulk.as_view("bulk"))
    bp.add_url_rule("/<id:job_id>", view_func=JobItem.as_view("item"))
    bp.add_url_rule("/<id:job_id>/pause", view_func=JobPause.as_view("pause"))
    bp.add_url_rule("/<id:job_id>/resume", view_func=JobResume.as_view("resume"))
    bp.add_url_rule("/<id:job_id>/trigger", view_func=JobTrigger.as_view("trigger"))
    bp.add_url_rule("/<id:job_id>/next", view_func=JobNext.as_view("next"))
    bp.add_url_rule("/<id:job_id>/runs", view_func=JobRuns.as_view("runs"))
    bp.add_url_rule("/<id:job_id>/dependencies", view_func=JobDependencies.as_view("deps"))
    bp.add_url_rule("/<id:job_id>/backfill", view_func=JobBackfill.as_view("backfill"))


_register()
