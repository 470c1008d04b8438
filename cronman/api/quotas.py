"""``/v1/namespaces/{namespace}/quotas``: a namespace's quota
(``cronman.limits.Quota``).

- ``max_jobs``: a create (single or bulk) that would take the namespace's
  live jobs past it is refused, 403 ``quota_exceeded`` naming the quota
  (``enforce_max_jobs``). Checked at create, not in the insert's
  transaction: two creates at the same moment may both pass.
- ``fires_per_second`` (with an optional ``burst``) and ``concurrent_runs``:
  the namespace's fires are held to them cluster-wide, as a limit named
  ``quota:<namespace>`` keyed by the namespace (``/v1/limits``' machinery).

``GET``: any token of the namespace; ``PUT`` (the bounds given, the others
unbounded) and ``DELETE``: admin tokens only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from flask import Blueprint, Response

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, read_json, require_admin
from cronman.api.context import api_context
from cronman.errors import QuotaExceeded
from cronman.limits import Quota, parse_quota

bp = Blueprint("quotas", __name__, url_prefix="/v1/namespaces")

ADMIN_ONLY = "setting a namespace's quota"


def quota_json(namespace: str, quota: Quota | None) -> dict[str, Any]:
    return {**(quota or Quota(namespace)).to_dict(), "default": quota is None}


def enforce_max_jobs(namespaces: Iterable[str], prefix: str = "") -> None:
    """403 ``quota_exceeded`` when creating jobs in ``namespaces`` (one entry
    per job) takes one past its ``max_jobs``."""
    limits = api_context().store.limits
    for namespace, adding in Counter(namespaces).items():
        quota = limits.get_quota(namespace)
        if quota is None or quota.max_jobs is None:
            continue
        live = limits.live_jobs(namespace)
        if live + adding > quota.max_jobs:
            raise QuotaExceeded(
                f"namespace {namespace!r} is at its quota max_jobs ({quota.max_jobs}): "
                f"{live} live jobs, {adding} more asked for",
                field=f"{prefix}namespace" if prefix else "namespace")


class QuotaItem(ApiView):
    def get(self, namespace: str) -> Response:
        v.check_namespace(namespace)
        principal().require(namespace, field="namespace")
        return json_response(quota_json(namespace,
                                        api_context().store.limits.get_quota(namespace)))

    def put(self, namespace: str) -> Response:
        who = require_admin(ADMIN_ONLY)
        v.check_namespace(namespace)
        quota = parse_quota(namespace, read_json())
        api_context().store.limits.put_quota(quota, by=who.token_id)
        return json_response(quota_json(namespace, quota))

    def delete(self, namespace: str) -> Response:
        require_admin(ADMIN_ONLY)
        v.check_namespace(namespace)
        api_context().store.limits.delete_quota(namespace)
        return Response(status=204)


bp.add_url_rule("/<namespace>/quotas", view_func=QuotaItem.as_view("quotas"))
