"""The OpenAPI description of ``/v1/namespaces/{namespace}/host-policy``
(merged by ``openapi``): what a namespace's runs may ask of their host
(``cronman.api.host_policies``)."""

from __future__ import annotations

from typing import Any

from cronman.api.openapi.parts import JSON, NAMESPACE, obj, ok, op, ref
from cronman.host_policy import NETWORKS

NOT_ADMIN = {"description": "not an admin token (or a read-only one)",
             "content": {JSON: {"schema": ref("Error")}}}
NO_ADMIN_TOKEN = {"description": "no token: setting a grant needs an admin token, whatever "
                                 "the auth state", "content": {JSON: {"schema": ref("Error")}}}
NAMESPACE_PARAM = {"name": "namespace", "in": "path", "required": True, "schema": NAMESPACE}


def schemas() -> dict[str, Any]:
    fields = {
        "root": {"type": "boolean", "description": "runs may run as root (user root, uid 0 "
                                                   "or gid 0); default false"},
        "networks": {"type": "array", "uniqueItems": True,
                     "items": {"type": "string", "enum": list(NETWORKS)},
                     "description": "the network modes runs may ask for; default [none]"},
        "process": {"type": "boolean",
                    "description": "runs may go to a process worker agent, which runs the "
                                   "command on its host without isolation; default false"},
    }
    return {
        "HostPolicyGrant": obj(fields, description="What the namespace's runs may ask of "
                                                   "their host. Only the keys given are "
                                                   "stored (a PUT replaces the grant); keys "
                                                   "left out follow the operator's live "
                                                   "default (CRONMAN_HOST_POLICY), so a "
                                                   "later change of it reaches them"),
        "HostPolicy": obj({"namespace": NAMESPACE, **fields,
                           "default": {"type": "boolean",
                                       "description": "true: the namespace has no grant of "
                                                      "its own, the operator's default applies"},
                           "granted": {"type": "object",
                                       "description": "the keys the namespace's own grant "
                                                      "sets (the others are the default's)"}},
                          ("namespace", "root", "networks", "process", "default", "granted")),
    }


def paths() -> dict[str, Any]:
    denied = {"401": NO_ADMIN_TOKEN, "403": NOT_ADMIN}
    return {
        "/v1/namespaces/{namespace}/host-policy": {
            "get": op("getHostPolicy", "What the namespace's runs may ask of their host",
                      ok("200", "HostPolicy", "the namespace's grant"), "400 403",
                      [NAMESPACE_PARAM]),
            "put": op("putHostPolicy", "Grant the namespace what its runs may ask of their "
                      "host (admin tokens only)", ok("200", "HostPolicy", "the grant set"),
                      "400 413", [NAMESPACE_PARAM], body="HostPolicyGrant", extra=denied),
            "delete": op("deleteHostPolicy", "Drop the namespace's grant: the operator's "
                         "default applies again (admin tokens only)",
                         ok("204", None, "dropped (or there was none)"), "400",
                         [NAMESPACE_PARAM], extra=denied),
        },
    }
