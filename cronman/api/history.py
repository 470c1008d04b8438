"""``GET /v1/jobs/{id}/history``: who changed a job, when, through which request, and how.

A list answer like every other (``items``, ``next_cursor``; ``limit`` ≤ 1000),
newest change first. A deleted job keeps its history: the namespace checked
against the caller's token is the job's, or for a deleted job the one of its
latest recorded change.
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, reject_bad_strings
from cronman.api.context import api_context
from cronman.api.jobs import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from cronman.api.names import ID_RE
from cronman.errors import NotFound

bp = Blueprint("history", __name__, url_prefix="/v1/jobs")


class JobHistory(ApiView):
    query_params = {"get": ("limit", "cursor")}

    def get(self, job_id: str) -> Response:
        limit = v.parse_int_param(request.args.get("limit"), "limit",
                                  default=LIST_LIMIT_DEFAULT, lo=1, hi=LIST_LIMIT_MAX)
        cursor = request.args.get("cursor") or None
        if cursor is not None:
            reject_bad_strings(cursor, "cursor")
        store = api_context().store
        if not ID_RE.match(job_id):
            raise NotFound(f"no job with id {job_id!r}")
        job = store.jobs.get_job(job_id)
        namespace = job.namespace if job is not None else store.history.job_namespace(job_id)
        if namespace is None:
            raise NotFound(f"no job with id {job_id!r}")
        principal().require(namespace)
        page = store.history.list_history(job_id, limit, cursor)
        return json_response({"items": [e.to_json() for e in page.items],
                              "next_cursor": page.next_cursor})


bp.add_url_rule("/<id:job_id>/history", view_func=JobHistory.as_view("history"))
