"""``GET /v1/runs`` (runs across jobs) and ``GET /v1/stats/runs`` (the run
history per time step, for plots): the operator's questions.

Both read only what the caller's token may see (runs of jobs in its
namespaces) and both bound ``scheduled_for`` on every call: ``since``
defaults to the start of the retained history (runs) or an hour ago
(stats), ``until`` to a day from now (runs; no run is scheduled further
ahead than a claim's lead) or now (stats); times older than the
retention are cut to it, and an ``until`` beyond a day from now to that. ``since``/``until`` take RFC 3339 or a time
relative to now (``-1h``; see ``timeparams``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, reject_bad_strings
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.names import ID_RE
from cronman.api.runs import work_items
from cronman.api.serialize import run_json
from cronman.api.timeparams import parse_time_or_relative
from cronman.errors import ValidationError
from cronman.models import Job, Run, RunSearch, RunStatsBucket, RunStatsQuery
from cronman.store.work_records import WorkItem
from cronman.timeutil import format_rfc3339, utcnow
from cronman.vocabulary import RUN_STATUSES, TARGET_KINDS

bp = Blueprint("run_search", __name__, url_prefix="/v1")

JOB_FILTER_MAX = 100
FUTURE_HORIZON = timedelta(days=1)
STATS_DEFAULT_WINDOW = timedelta(hours=1)
STATS_TARGET_STEPS = 120
STATS_MAX_STEPS = 1440
STATS_MAX_STEP = 86_400
# Steps a plot reads well at (seconds); an automatic step is the first that
# gives at most STATS_TARGET_STEPS steps.
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800,
              21_600, 43_200, 86_400)


def parse_choices(name: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """A repeatable, comma-separated query parameter of known words."""
    out: list[str] = []
    for raw in request.args.getlist(name):
        for word in raw.split(","):
            word = word.strip()
            if not word:
                continue
            if word not in choices:
                raise ValidationError(f"unknown {name} {word!r}; one of {', '.join(choices)}",
                                      field=name)
            if word not in out:
                out.append(word)
    return tuple(out)


def parse_namespace() -> str | None:
    namespace = request.args.get("namespace")
    if namespace is not None:
        v.check_namespace(namespace)
        principal().require(namespace, field="namespace")
    return namespace


def history_start(now: datetime) -> datetime:
    """The oldest instant the retained history can hold (whole days are dropped)."""
    days = api_context().settings.history_retention_days + 1
    return now - timedelta(days=days)


def run_item(run: Run, job: Job | None, work: WorkItem | None = None) -> dict[str, Any]:
    """A run with its job's name and namespace (None when the job row is gone)
    and, while it is with a work queue, its item."""
    out = run_json(run, work)
    out["job_name"] = None if job is None else job.name
    out["namespace"] = None if job is None else job.namespace
    return out


class RunSearchView(ApiView):
    query_params = {"get": ("status", "since", "until", "namespace", "job", "target_kind",
                            "limit", "cursor")}

    def get(self) -> Response:
        args = request.args
        now = utcnow()
        statuses = parse_choices("status", tuple(s.value for s in RUN_STATUSES))
        kinds = parse_choices("target_kind", tuple(k.value for k in TARGET_KINDS))
        floor = history_start(now)
        since = parse_time_or_relative(args.get("since"), "since", now=now) or floor
        until = parse_time_or_relative(args.get("until"), "until", now=now)
        until = min(until or now + FUTURE_HORIZON, now + FUTURE_HORIZON)
        since = max(since, floor)
        namespace = parse_namespace()
        job_ids = []
        for raw in args.getlist("job"):
            for job_id in raw.split(","):
                job_id = job_id.strip()
                if not ID_RE.match(job_id):
                    raise ValidationError(f"not a job id: {job_id!r}", field="job")
                job_ids.append(job_id)
        if len(job_ids) > JOB_FILTER_MAX:
            raise ValidationError(f"at most {JOB_FILTER_MAX} job ids", field="job")
        limit = v.parse_int_param(args.get("limit"), "limit", default=LIST_LIMIT_DEFAULT,
                                  lo=1, hi=LIST_LIMIT_MAX)
        cursor = args.get("cursor") or None
        if cursor is not None:
            reject_bad_strings(cursor, "cursor")
        query = RunSearch(since=since, until=until, statuses=statuses, namespace=namespace,
                          namespaces=principal().restriction(), job_ids=tuple(job_ids),
                          target_kinds=kinds)
        store = api_context().store
        page = store.runs.search_runs(query, limit, cursor)
        jobs = {j.id: j for j in store.jobs.get_jobs(sorted({r.job_id for r in page.items}))}
        items = work_items(store, page.items)
        return json_response({"items": [run_item(r, jobs.get(r.job_id), items.get(r.id))
                                        for r in page.items],
                              "next_cursor": page.next_cursor})


def choose_step(window_seconds: float, asked: int | None) -> int:
    """The step of a stats answer: the one asked for, widened when the window
    would hold more than STATS_MAX_STEPS; else a NICE_STEPS one."""
    if asked is not None:
        need = math.ceil(window_seconds / STATS_MAX_STEPS)
        if asked >= need:
            return asked
        return next((s for s in NICE_STEPS if s >= need), need)
    want = window_seconds / STATS_TARGET_STEPS
    return next((s for s in NICE_STEPS if s >= want), NICE_STEPS[-1])


def _epoch(t: datetime) -> float:
    return t.timestamp()


def stats_window(since: datetime, until: datetime, step: int) -> tuple[datetime, datetime]:
    """[since, until) widened to whole steps (steps are aligned on the Unix epoch)."""
    lo = math.floor(_epoch(since) / step) * step
    hi = math.ceil(_epoch(until) / step) * step
    return datetime.fromtimestamp(lo, UTC), datetime.fromtimestamp(max(hi, lo), UTC)


def bucket_json(start: datetime, step: int, b: RunStatsBucket | None) -> dict[str, Any]:
    fires = b.fires if b else 0
    return {
        "t": format_rfc3339(start),
        "fires": fires,
        "fires_per_s": round(fires / step, 3),
        "failures": b.failures if b else 0,
        "lateness_p50_ms": b.lateness_p50_ms if b else None,
        "lateness_p99_ms": b.lateness_p99_ms if b else None,
    }


class RunStats(ApiView):
    query_params = {"get": ("since", "until", "step", "namespace")}

    def get(self) -> Response:
        args = request.args
        now = utcnow()
        since = parse_time_or_relative(args.get("since"), "since", now=now)
        until = parse_time_or_relative(args.get("until"), "until", now=now) or now
        since = max(since or now - STATS_DEFAULT_WINDOW, history_start(now))
        until = min(until, now + FUTURE_HORIZON)
        asked = None
        if args.get("step") is not None:
            asked = v.parse_int_param(args.get("step"), "step", default=60, lo=1,
                                      hi=STATS_MAX_STEP)
        namespace = parse_namespace()
        empty = until <= since
        until = max(until, since)
        step = choose_step((until - since).total_seconds(), asked)
        lo, hi = stats_window(since, until, step)
        if empty:
            hi = lo
        buckets: dict[datetime, RunStatsBucket] = {}
        if hi > lo:
            query = RunStatsQuery(since=lo, until=hi, step_seconds=step, namespace=namespace,
                                  namespaces=principal().restriction())
            buckets = {b.start: b for b in api_context().store.runs.run_stats(query)}
        count = int((hi - lo).total_seconds() // step)
        steps = [lo + timedelta(seconds=i * step) for i in range(count)]
        return json_response({
            "since": format_rfc3339(lo),
            "until": format_rfc3339(hi),
            "step_seconds": step,
            "namespace": namespace,
            "buckets": [bucket_json(t, step, buckets.get(t)) for t in steps],
        })


bp.add_url_rule("/runs", view_func=RunSearchView.as_view("runs"))
bp.add_url_rule("/stats/runs", view_func=RunStats.as_view("run_stats"))
