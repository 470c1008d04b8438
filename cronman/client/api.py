"""``CronmanClient``: one method per call of the HTTP API (SPEC §5).

    from cronman.client import CronmanClient

    with CronmanClient("http://127.0.0.1:8080", token="cm_...") as api:
        job = api.create_job({"name": "digest", "schedule": {...}, "target": {...}})
        for run in api.iter_job_runs(job["id"], statuses=["failed"]):
            api.replay_run(run["id"])

A job is named by its id or as ``namespace/name`` (or a bare name with
``namespace=``) wherever a call takes one (:mod:`cronman.client.job_refs`);
a time is an aware ``datetime``, RFC 3339, ``now`` or relative to now
(``-1h``, ``-90m``, ``-7d``).

List calls come in two forms: ``list_*`` returns one ``Page`` (pass its
``next_cursor`` back), ``iter_*`` follows the cursors to the end. Every error
is an ``ApiError`` (see :mod:`cronman.client.errors`); 503 answers and
connection failures are retried with backoff (:class:`RetryPolicy`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, cast

from cronman.client.errors import ApiError, BulkCreateError
from cronman.client.job_refs import resolve_job
from cronman.client.limits import LimitCalls
from cronman.client.notifications import NotificationCalls
from cronman.client.queues import QueueCalls
from cronman.client.signing import SigningCalls
from cronman.client.tokens import TokenCalls
from cronman.client.transport import (
    DEFAULT_RETRY,
    Query,
    RetryPolicy,
    Transport,
    quote_segment,
)
from cronman.client.types import (
    Backfill,
    Cluster,
    HistoryEntry,
    Job,
    JobSpec,
    Page,
    Queue,
    Readiness,
    Run,
    RunItem,
    follow_pages,
)
from cronman.client.workflows import WorkflowCalls
from cronman.timeutil import format_rfc3339, relative_offset, utcnow

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0
# The API's limits: jobs per bulk request, items per page, fire times per /next.
BULK_MAX = 1000
PAGE_MAX = 1000
NEXT_MAX = 100

Labels = Mapping[str, str] | Iterable[str]
_JOBS_INDEX = re.compile(r"^jobs\[(\d+)\]")


class CronmanClient(NotificationCalls, TokenCalls, WorkflowCalls, SigningCalls, QueueCalls,
                    LimitCalls):
    """A synchronous client of the cronman API; safe to share between threads.

    The notification calls (rules, what was sent) come from ``NotificationCalls``,
    the API token calls (admin tokens only) from ``TokenCalls``, the workflow
    calls (a job's dependencies, exclusion calendars) from ``WorkflowCalls``,
    a namespace's callback signing keys from ``SigningCalls``, a worker's calls
    (claim, heartbeat, complete) from ``QueueCalls``.
    """

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = DEFAULT_RETRY,
                 pool_size: int = 8) -> None:
        self.url = url.rstrip("/")
        self._http = Transport(self.url, token, timeout=timeout, retry=retry,
                               pool_size=pool_size)

    @classmethod
    def from_env(cls, **kwargs: Any) -> CronmanClient:
        """A client for ``CRONMAN_URL`` (default http://127.0.0.1:8080) with ``CRONMAN_TOKEN``."""
        return cls(os.environ.get("CRONMAN_URL") or DEFAULT_URL,
                   os.environ.get("CRONMAN_TOKEN") or None, **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CronmanClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *,
                query: Query | None = None, timeout: float | None = None,
                retry: RetryPolicy | None = None, keyed: bool = False,
                idempotency_key: str | None = None,
                headers: Mapping[str, str] | None = None) -> Any:
        """One raw call (``path`` from the root, e.g. ``/v1/jobs``): the decoded JSON answer.

        ``timeout`` (seconds) and ``retry`` replace the client's for this call.
        ``keyed``: with an ``Idempotency-Key``, so that a retry after a lost
        connection is safe (the calls that make things send one);
        ``idempotency_key``: that key rather than a new one; ``headers``: more
        headers to send (a ``traceparent``).
        """
        return self._http.request(method, path, body, query=query, timeout=timeout,
                                  retry=retry, keyed=keyed, idempotency_key=idempotency_key,
                                  headers=headers)

    # -- jobs ------------------------------------------------------------------

    def create_job(self, spec: JobSpec | Mapping[str, Any], *,
                   idempotency_key: str | None = None) -> Job:
        """``POST /v1/jobs``; 409 (``ConflictError``) when the name is taken in its namespace.

        Every call that makes something sends an ``Idempotency-Key`` (a new
        one per call, so that its retries are safe); ``idempotency_key`` sends
        the caller's own: the same call made again with it, within 24 h,
        answers as the first did (one job), and the key with another request
        is refused (422 ``idempotency_key_reused``)."""
        return cast(Job, self.request("POST", "/v1/jobs", dict(spec), keyed=True,
                                      idempotency_key=idempotency_key))

    def create_jobs(self, specs: Sequence[JobSpec | Mapping[str, Any]], *,
                    chunk_size: int = BULK_MAX,
                    progress: Callable[[int], None] | None = None,
                    idempotency_key: str | None = None) -> list[Job]:
        """Create many jobs through ``POST /v1/jobs/bulk``, ``chunk_size`` at a time.

        Each chunk is all or nothing. A failing chunk raises ``BulkCreateError``
        whose ``field`` counts from the start of ``specs`` (``jobs[2041].name``)
        and whose ``created`` holds the jobs of the chunks before it.
        ``progress`` is called with the number of jobs each chunk created.
        ``idempotency_key`` (as ``create_job``'s): the key of a single
        request; with several, chunk ``n`` (from 1) sends ``KEY/n``, so that
        the same specs sent again with the key create only what the first
        call did not.
        """
        if not 1 <= chunk_size <= BULK_MAX:
            raise ValueError(f"chunk_size must be 1..{BULK_MAX}")
        created: list[Job] = []
        several = len(specs) > chunk_size
        for n, start in enumerate(range(0, len(specs), chunk_size), 1):
            chunk = [dict(s) for s in specs[start:start + chunk_size]]
            key = (f"{idempotency_key}/{n}" if several and idempotency_key is not None
                   else idempotency_key)
            try:
                answer = self.request("POST", "/v1/jobs/bulk", {"jobs": chunk}, keyed=True,
                                      idempotency_key=key)
            except ApiError as exc:
                raise BulkCreateError(exc.with_field(_renumber(exc.field, start)),
                                      created) from exc
            items = cast(list[Job], answer["items"])
            created += items
            if progress is not None:
                progress(len(items))
        return created

    def list_jobs(self, *, namespace: str | None = None, labels: Labels = (),
                  paused: bool | None = None, limit: int = 100,
                  cursor: str | None = None, name: str | None = None) -> Page[Job]:
        """One page of ``GET /v1/jobs`` (labels as ``{"team": "a"}`` or ``["team:a"]``;
        ``name``: exactly that name)."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if namespace is not None:
            query.append(("namespace", namespace))
        if name is not None:
            query.append(("name", name))
        query += [("label", label) for label in _label_filters(labels)]
        if paused is not None:
            query.append(("paused", "true" if paused else "false"))
        return self._page("/v1/jobs", query, cursor)

    def iter_jobs(self, *, namespace: str | None = None, labels: Labels = (),
                  paused: bool | None = None, page_size: int = PAGE_MAX) -> Iterator[Job]:
        """Every job matching the filters, page after page."""
        return follow_pages(lambda cursor: self.list_jobs(
            namespace=namespace, labels=labels, paused=paused, limit=page_size, cursor=cursor))

    def resolve_job(self, job: str, namespace: str | None = None) -> str:
        """The id of the job ``job`` names: an id (as it is), ``namespace/name``, or a
        name in ``namespace`` (or, without one, unique among the namespaces the
        token may read). ``NotFoundError`` names what was asked when there is none."""
        return resolve_job(self.request, job, namespace)

    def get_job(self, job: str, *, namespace: str | None = None) -> Job:
        """``GET /v1/jobs/{id}``: the job with its ``last_run``."""
        return cast(Job, self.request("GET", self._job(job, namespace)))

    def replace_job(self, job: str, spec: JobSpec | Mapping[str, Any], *,
                    version: int | None = None, namespace: str | None = None) -> Job:
        """``PUT``: the job becomes ``spec`` (omitted keys take their defaults).

        With ``version`` the API refuses the change (``ConflictError``) when the
        job is no longer at that version: someone changed it since it was read.
        Redacted secrets read from the API may be sent back as they are.
        """
        return cast(Job, self.request("PUT", self._job(job, namespace),
                                      _versioned(spec, version)))

    def update_job(self, job: str, changes: JobSpec | Mapping[str, Any], *,
                   version: int | None = None, namespace: str | None = None) -> Job:
        """``PATCH``: the top-level keys of ``changes`` replace the job's (``version`` as above)."""
        return cast(Job, self.request("PATCH", self._job(job, namespace),
                                      _versioned(changes, version)))

    def delete_job(self, job: str, *, namespace: str | None = None) -> None:
        """``DELETE``: no fire after the answer plus 2 s."""
        self.request("DELETE", self._job(job, namespace))

    def pause_job(self, job: str, *, namespace: str | None = None,
                  note: str | None = None) -> Job:
        """Pause; ``note`` (≤ 1024 characters) is shown with the job (``pause_note``)."""
        return cast(Job, self.request("POST", self._job(job, namespace) + "/pause",
                                      None if note is None else {"note": note}))

    def resume_job(self, job: str, *, namespace: str | None = None,
                   note: str | None = None) -> Job:
        """Resume (clears ``pause_reason`` and the failure count); 409 for a job
        that is done (its ``max_runs`` reached)."""
        return cast(Job, self.request("POST", self._job(job, namespace) + "/resume",
                                      None if note is None else {"note": note}))

    def trigger_job(self, job: str, *, namespace: str | None = None,
                    idempotency_key: str | None = None) -> Run:
        """Fire once now, outside the schedule: the new run (status ``claimed``);
        ``idempotency_key`` as ``create_job``'s (one run)."""
        return cast(Run, self.request("POST", self._job(job, namespace) + "/trigger",
                                      keyed=True, idempotency_key=idempotency_key))

    def next_fire_times(self, job: str, count: int = 10, *,
                        namespace: str | None = None) -> list[str]:
        """The job's next ``count`` (≤ 100) fire times, RFC 3339 UTC."""
        answer = self.request("GET", self._job(job, namespace) + "/next",
                              query=[("count", str(count))])
        return cast(list[str], answer["fire_times"])

    def backfill_job(self, job: str, since: str | datetime, until: str | datetime, *,
                     namespace: str | None = None,
                     idempotency_key: str | None = None) -> Backfill:
        """Fire every scheduled time in [since, until] that has no run yet (≤ 10,000).

        ``requested`` of the answer counts the runs made, ``fire_times`` the
        schedule's times in the range: the others already had runs.
        ``idempotency_key`` as ``create_job``'s; ``now`` and relative times
        are read by this clock at each call, so a repeat with the key needs
        fixed times to be the same request.
        """
        body = {"since": _time(since), "until": _time(until)}
        return cast(Backfill, self.request("POST", self._job(job, namespace) + "/backfill",
                                           body, keyed=True, idempotency_key=idempotency_key))

    def list_job_history(self, job: str, *, limit: int = 100, cursor: str | None = None,
                         namespace: str | None = None) -> Page[HistoryEntry]:
        """One page of a job's recorded changes, newest first (a deleted job's too, by id)."""
        return self._page(self._job(job, namespace) + "/history", [("limit", str(limit))],
                          cursor)

    def iter_job_history(self, job: str, *, page_size: int = PAGE_MAX,
                         namespace: str | None = None) -> Iterator[HistoryEntry]:
        """Every recorded change of a job, newest first."""
        job_id = self.resolve_job(job, namespace)
        return follow_pages(lambda cursor: self.list_job_history(job_id, limit=page_size,
                                                            cursor=cursor))

    # -- runs ------------------------------------------------------------------

    def list_job_runs(self, job: str, *, since: str | datetime | None = None,
                      until: str | datetime | None = None, statuses: Iterable[str] = (),
                      limit: int = 100, cursor: str | None = None,
                      namespace: str | None = None) -> Page[Run]:
        """One page of a job's runs, newest first."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if since is not None:
            query.append(("since", _time(since)))
        if until is not None:
            query.append(("until", _time(until)))
        query += [("status", s) for s in statuses]
        return self._page(self._job(job, namespace) + "/runs", query, cursor)

    def iter_job_runs(self, job: str, *, since: str | datetime | None = None,
                      until: str | datetime | None = None, statuses: Iterable[str] = (),
                      page_size: int = PAGE_MAX, namespace: str | None = None) -> Iterator[Run]:
        """Every run of a job matching the filters, newest first (a relative
        ``since``/``until`` is read once, so the pages cover one window)."""
        wanted = tuple(statuses)
        job_id = self.resolve_job(job, namespace)
        lo = None if since is None else _time(since)
        hi = None if until is None else _time(until)
        return follow_pages(lambda cursor: self.list_job_runs(
            job_id, since=lo, until=hi, statuses=wanted, limit=page_size, cursor=cursor))

    def list_runs(self, *, statuses: Iterable[str] = (), since: str | datetime | None = None,
                  until: str | datetime | None = None, namespace: str | None = None,
                  job_ids: Iterable[str] = (), target_kinds: Iterable[str] = (),
                  limit: int = 100, cursor: str | None = None) -> Page[RunItem]:
        """One page of ``GET /v1/runs``: runs across jobs, newest scheduled first,
        each with its job's ``job_name`` and ``namespace``.

        ``since``/``until`` take RFC 3339, an aware datetime, ``now`` or a time
        relative to now (``-1h``, ``-90m``, ``-1h30m``, ``-7d``; the API reads
        these by its clock); left out, the API reads from the oldest retained
        run to a day ahead. ``job_ids`` are jobs as every call names them (id,
        ``namespace/name``, or a name in ``namespace``). Filters of one kind are
        alternatives (any of the statuses), filters of different kinds all
        apply. The answer covers only the token's namespaces.
        """
        query: list[tuple[str, str]] = [("limit", str(limit))]
        query += [("status", s) for s in statuses]
        if since is not None:
            query.append(("since", _time(since, keep_relative=True)))
        if until is not None:
            query.append(("until", _time(until, keep_relative=True)))
        if namespace is not None:
            query.append(("namespace", namespace))
        query += [("job", self.resolve_job(j, namespace)) for j in job_ids]
        query += [("target_kind", k) for k in target_kinds]
        return self._page("/v1/runs", query, cursor)

    def iter_runs(self, *, statuses: Iterable[str] = (), since: str | datetime | None = None,
                  until: str | datetime | None = None, namespace: str | None = None,
                  job_ids: Iterable[str] = (), target_kinds: Iterable[str] = (),
                  page_size: int = PAGE_MAX) -> Iterator[RunItem]:
        """Every run across jobs matching the filters (``list_runs``), page after page.

        A relative ``since``/``until`` is read by the API on each page, so the
        window moves with the clock while the pages are fetched (give times for
        a fixed one); the cursor carries on where the previous page ended, so
        no run is seen twice.
        """
        filters: dict[str, Any] = {
            "statuses": tuple(statuses), "since": since, "until": until,
            "namespace": namespace,
            "job_ids": tuple(self.resolve_job(j, namespace) for j in job_ids),
            "target_kinds": tuple(target_kinds)}
        return follow_pages(lambda cursor: self.list_runs(**filters, limit=page_size,
                                                     cursor=cursor))

    def get_run(self, run_id: str) -> Run:
        return cast(Run, self.request("GET", _run(run_id)))

    def replay_run(self, run_id: str, *, idempotency_key: str | None = None) -> Run:
        """Dispatch a finished run's target again, as a new attempt of the same run;
        ``idempotency_key`` as ``create_job``'s (one new attempt)."""
        return cast(Run, self.request("POST", _run(run_id) + "/replay", keyed=True,
                                      idempotency_key=idempotency_key))

    def cancel_run(self, run_id: str, reason: str | None = None) -> Run:
        """Cancel a run in flight: a queued worker run ends at once, a held
        one's worker is asked to stop on its next heartbeat, a container run's
        node stops its container at its next lease renewal; 409 when the run
        already ended or nothing can stop it (a plain http request)."""
        body = {} if reason is None else {"reason": reason}
        return cast(Run, self.request("POST", _run(run_id) + "/cancel", body))

    # -- work queues -------------------------------------------------------------

    def list_queues(self, *, namespace: str | None = None, limit: int = 100,
                    cursor: str | None = None) -> Page[Queue]:
        """One page of ``GET /v1/queues``: depth, held runs, oldest wait, workers."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if namespace is not None:
            query.append(("namespace", namespace))
        return self._page("/v1/queues", query, cursor)

    def queues(self, *, namespace: str | None = None,
               page_size: int = PAGE_MAX) -> Iterator[Queue]:
        """Every work queue the token may see, page after page."""
        return follow_pages(lambda cursor: self.list_queues(
            namespace=namespace, limit=page_size, cursor=cursor))

    # -- service ---------------------------------------------------------------

    def cluster(self) -> Cluster:
        """The live scheduler nodes (membership) and worker agents."""
        return cast(Cluster, self.request("GET", "/v1/cluster"))

    def health(self) -> bool:
        """Whether the API process answers ``/healthz``."""
        answer = self.request("GET", "/healthz")
        return isinstance(answer, dict) and answer.get("status") == "ok"

    def readiness(self) -> Readiness:
        """``/readyz``: ready, or which dependency is unreachable (never raises for a 503)."""
        try:
            return cast(Readiness, self.request("GET", "/readyz"))
        except ApiError as exc:
            if exc.status != 503:
                raise
            return {"status": "unavailable", "checks": {},
                    "error": {"code": exc.code, "message": exc.message, "field": exc.field}}

    # -- helpers ---------------------------------------------------------------

    def _page(self, path: str, query: list[tuple[str, str]], cursor: str | None) -> Page[Any]:
        if cursor:
            query = [*query, ("cursor", cursor)]
        answer = self.request("GET", path, query=query)
        return Page(items=list(answer["items"]), next_cursor=answer.get("next_cursor"))

    def _job(self, job: str, namespace: str | None) -> str:
        """The path of the job ``job`` names (a name is looked up first)."""
        return "/v1/jobs/" + quote_segment(self.resolve_job(job, namespace))



def _run(run_id: str) -> str:
    return "/v1/runs/" + quote_segment(run_id)


def _versioned(spec: Mapping[str, Any], version: int | None) -> dict[str, Any]:
    body = dict(spec)
    if version is not None:
        body["version"] = version
    return body


def _time(value: str | datetime, *, keep_relative: bool = False) -> str:
    """A time as the API takes it: ``now`` and ``-1h`` become RFC 3339 by this
    clock, unless ``keep_relative`` (for the calls whose API reads them itself);
    any other string goes as it is (the API checks it)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime is ambiguous; give it a timezone")
        return value.isoformat()
    if not keep_relative:
        offset = relative_offset(value)
        if offset is not None:
            return format_rfc3339(utcnow() - offset) or ""
    return value


def _label_filters(labels: Labels) -> list[str]:
    if isinstance(labels, Mapping):
        return [f"{k}:{v}" for k, v in labels.items()]
    return list(labels)


def _renumber(field: str | None, offset: int) -> str | None:
    """``jobs[3].name`` of a chunk starting at ``offset`` as an index into the whole list."""
    if not field or not offset:
        return field
    return _JOBS_INDEX.sub(lambda m: f"jobs[{int(m.group(1)) + offset}]", field, count=1)
