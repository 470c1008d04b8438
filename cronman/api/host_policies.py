"""What a namespace's runs may ask of their host (``cronman.host_policy``).

- ``enforce``: a job written with a namespace token may ask of its host only
  what the namespace's grant allows (403 naming the field: ``target.user``,
  ``target.network``). Admin tokens, and the API while auth is off or open,
  are the operator: they may write anything (its runs still need the grant).
- ``GET /v1/namespaces/{namespace}/host-policy``: the namespace's grant (any
  token of the namespace); ``PUT`` sets it, ``DELETE`` drops it (the
  operator's default, ``CRONMAN_HOST_POLICY``, applies again): admin tokens
  only, as for ``/v1/tokens``. A grant holds only the keys the PUT gave; the
  others follow the live default (``host_policy.over``). A grant narrowed
  later does not change stored jobs, but their runs are checked again: the
  scheduler node refuses a run its namespace's grant does not allow, and
  every worker agent checks it against the grant and its own policy.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from cronman import host_policy
from cronman.api import validation as v
from cronman.api.auth import Principal
from cronman.api.common import ApiView, json_response, principal, read_json, require_admin
from cronman.api.context import api_context
from cronman.errors import Forbidden
from cronman.host_policy import HostPolicy

bp = Blueprint("host_policies", __name__, url_prefix="/v1/namespaces")

#: Target kinds that run on a host of ours (worker targets will join them).
HOST_TARGET_KINDS = ("container",)
ADMIN_ONLY = "granting a namespace a host policy"


def grant(namespace: str) -> HostPolicy:
    """The namespace's policy: its own grant over the operator's default."""
    return _lookup(namespace)[0]


def _lookup(namespace: str) -> tuple[HostPolicy, dict[str, Any] | None]:
    ctx = api_context()
    own = ctx.store.host_policies.get(namespace)
    return host_policy.over(own, ctx.settings.host_policy_default), own


def enforce(spec: dict[str, Any], who: Principal, prefix: str = "") -> None:
    """403 naming the field when a namespace token's job asks more of its
    host than its namespace's grant allows."""
    target = spec.get("target") or {}
    if who.is_admin or target.get("kind") not in HOST_TARGET_KINDS:
        return
    refused = grant(spec["namespace"]).refusals(target)
    if refused:
        field, why = refused[0]
        where = f"{prefix}.target.{field}" if prefix else f"target.{field}"
        raise Forbidden(f"{why}; namespace {spec['namespace']!r}", field=where)


def policy_json(namespace: str) -> dict[str, Any]:
    policy, own = _lookup(namespace)
    return {"namespace": namespace, **policy.to_dict(), "default": own is None,
            "granted": own or {}}


class HostPolicyItem(ApiView):
    def get(self, namespace: str) -> Response:
        v.check_namespace(namespace)
        principal().require(namespace, field="namespace")
        return json_response(policy_json(namespace))

    def put(self, namespace: str) -> Response:
        who = require_admin(ADMIN_ONLY)
        v.check_namespace(namespace)
        grant_keys = host_policy.grant_keys(read_json())
        api_context().store.host_policies.put(namespace, grant_keys, by=who.token_id)
        return json_response(policy_json(namespace))

    def delete(self, namespace: str) -> Response:
        require_admin(ADMIN_ONLY)
        v.check_namespace(namespace)
        api_context().store.host_policies.delete(namespace)
        return Response(status=204)


bp.add_url_rule("/<namespace>/host-policy", view_func=HostPolicyItem.as_view("host_policy"))
