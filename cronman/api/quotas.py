"""``/v1/namespaces/{namespace}/quotas``: a namespace's quota
(``cronman.limits.Quota``).

- ``max_jobs``: a create (single or bulk) that would take the namespace's
  live jobs past it is refused, 403 ``quota_exceeded`` naming the quota.
  The store checks it in the insert's transaction, under a lock per
  namespace (``cronman.store.limits.hold_max_jobs``): creates racing from
  several API processes cannot pass it together.
- ``fires_per_second`` (with an optional ``burst``) and ``concurrent_runs``:
  the namespace's fires are held to them cluster-wide, as a limit named
  ``quota:<namespace>`` keyed by the namespace (``/v1/limits``' machinery).

``GET``: any token of the namespace; ``PUT`` (the bounds given, the others
unbounded) and ``DELETE``: admin tokens only.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal, read_json, require_admin
from cronman.api.context import api_context
from cronman.limits import Quota, parse_quota

bp = Blueprint("quotas", __name__, url_prefix="/v1/namespaces")

ADMIN_ONLY = "setting a namespace's quota"


def quota_json(namespace: str, quota: Quota | None) -> dict[str, Any]:
    return {**(quota or Quota(namespace)).to_dict(), "default": quota is None}


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
