"""The operator's side of ``GET /v1/jobs``: search by name or name prefix, the
order, and each job's last run.

- ``name``: the jobs of exactly that name (case-sensitive; one per namespace:
  with ``namespace``, at most one) -- how clients turn ``namespace/name`` into
  an id;
- ``name_prefix``: jobs whose name starts with it (case-sensitive);
- ``sort``: ``id`` (default; creation order) or ``name`` ((namespace, name)
  order, the dashboard's list); a cursor belongs to the order it came from;
- ``with_last_run=true``: each job carries ``last_run`` (as ``GET
  /v1/jobs/{id}`` does), read for the whole page at once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flask import Response, request

from cronman.api import validation as v
from cronman.api.common import json_response, reject_bad_strings
from cronman.api.names import NAME_MAX, NAME_RE
from cronman.api.serialize import job_json
from cronman.errors import ValidationError
from cronman.models import JobFilter
from cronman.timeutil import utcnow

QUERY_PARAMS = ("name", "name_prefix", "sort", "with_last_run")
SORTS = ("id", "name")


def list_answer(store: Any, flt: JobFilter, limit: int, cursor: str | None) -> Response:
    """A page of jobs for ``GET /v1/jobs`` with ``flt`` and the parameters above."""
    args = request.args
    name = args.get("name")
    if name is not None:  # one no job can have is refused, as a bad namespace is
        reject_bad_strings(name, "name")
        name = v.check_string(name, "name", max_len=NAME_MAX, pattern=NAME_RE,
                              what="name (letters, digits and . _ : / @ + -)")
    prefix = args.get("name_prefix") or None
    if prefix is not None:
        reject_bad_strings(prefix, "name_prefix")
        if len(prefix) > NAME_MAX:
            raise ValidationError(f"at most {NAME_MAX} characters", field="name_prefix")
    sort = args.get("sort", "id")
    if sort not in SORTS:
        raise ValidationError(f"must be one of {', '.join(SORTS)}", field="sort")
    raw = args.get("with_last_run")
    with_last_run = raw is not None and v.parse_bool_param(raw, "with_last_run")
    flt = replace(flt, name=name, name_prefix=prefix)
    if sort == "name":
        page = store.jobs.search_jobs(flt, limit, cursor)
    else:
        page = store.jobs.list_jobs(flt, limit, cursor)
    last = store.runs.last_runs([j.id for j in page.items]) if with_last_run else {}
    now = utcnow()
    return json_response({
        "items": [job_json(j, now=now, last_run=last.get(j.id), with_last_run=with_last_run)
                  for j in page.items],
        "next_cursor": page.next_cursor,
    })
