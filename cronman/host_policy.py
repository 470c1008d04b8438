"""What a run may ask of the host it runs on (an operator's policy).

A ``HostPolicy`` says what the runs of a namespace (or, on a worker agent,
any run it is handed) may ask of their host:

- ``root``: run as root -- user ``root``, uid 0 or gid 0. Off by default: a
  run names a non-root user, or runs as ``DEFAULT_UID:DEFAULT_GID`` (nobody).
- ``networks``: the network modes a run may ask for. Default ``none`` only
  (loopback of its own); ``host`` shares the host's network, its loopback
  services included, past the private-address guard.
- ``process``: whether its runs may go to a ``process`` worker agent, which
  runs the command directly on the agent's host with no isolation at all
  (no network namespace, the host's filesystem). Off by default.

There are no privileged containers, added capabilities or mounts to ask for:
a container target has no such fields (unknown fields are refused).

The same type is checked in two places: by the API against the caller's
namespace grant (``CRONMAN_HOST_POLICY``, or the grant an admin token set
for the namespace), and by every worker agent against its own
(``CRONMAN_AGENT_HOST_POLICY``), whatever the run's stored definition says.
``refusals`` works on any target that may name ``user`` and ``network`` (worker
targets will, too). Pure: the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cronman.errors import ValidationError

#: The user a run runs as when its target names none (``nobody``).
DEFAULT_UID = 65534
DEFAULT_GID = 65534
NETWORKS = ("none", "host")
KEYS = ("root", "networks", "process")


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """What a run may ask of its host (see the module docstring)."""

    root: bool = False
    networks: frozenset[str] = field(default_factory=lambda: frozenset({"none"}))
    process: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "networks": sorted(self.networks), "process": self.process}

    def refusals(self, target: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(field, why) for each thing ``target`` asks that this policy refuses."""
        out: list[tuple[str, str]] = []
        user = target.get("user")
        if not self.root and asks_root(user):
            out.append(("user", f"{user!r} runs as root, which the host policy does not "
                                "allow (ask an operator for a grant, or name a non-root uid)"))
        network = target.get("network") or "none"
        if network not in self.networks:
            out.append(("network", f"network {network!r} is not allowed by the host policy "
                                   f"(allowed: {', '.join(sorted(self.networks)) or 'none'})"))
        return out


DEFAULT = HostPolicy()
#: Everything allowed: what an admin token (or an API without auth) may ask.
UNRESTRICTED = HostPolicy(root=True, networks=frozenset(NETWORKS), process=True)


def asks_root(user: Any) -> bool:
    """Whether a target's ``user`` runs as root (uid 0 or gid 0)."""
    if user is None:
        return False
    text = str(user).strip()
    if text == "root":
        return True
    uid, _, gid = text.partition(":")
    return any(part.isdigit() and int(part) == 0 for part in (uid, gid))


def from_dict(value: Any, *, base: HostPolicy = DEFAULT) -> HostPolicy:
    """A policy from its JSON form; keys left out keep ``base``'s values.
    ``ValidationError`` naming the key for anything else."""
    if not isinstance(value, dict):
        raise ValidationError("must be an object with root, networks and process")
    for key in value:
        if key not in KEYS:
            raise ValidationError(f"unknown field {key!r} (allowed: {', '.join(KEYS)})",
                                  field=str(key))
    root = value.get("root", base.root)
    process = value.get("process", base.process)
    for name, flag in (("root", root), ("process", process)):
        if not isinstance(flag, bool):
            raise ValidationError("must be true or false", field=name)
    networks = value.get("networks", sorted(base.networks))
    if not isinstance(networks, list) or not all(isinstance(n, str) for n in networks):
        raise ValidationError("must be a list of network modes", field="networks")
    for i, name in enumerate(networks):
        if name not in NETWORKS:
            raise ValidationError(f"must be one of: {', '.join(NETWORKS)}",
                                  field=f"networks[{i}]")
        if name in networks[:i]:
            raise ValidationError(f"{name!r} is listed twice", field=f"networks[{i}]")
    return HostPolicy(root=root, networks=frozenset(networks), process=process)


def parse(text: str | None, *, name: str, base: HostPolicy = DEFAULT) -> HostPolicy:
    """A policy from an environment variable's JSON (unset or empty: ``base``);
    ``ValueError`` naming the variable when it cannot be read."""
    if not text or not text.strip():
        return base
    try:
        return from_dict(json.loads(text), base=base)
    except (ValueError, ValidationError) as exc:
        why = exc.message if isinstance(exc, ValidationError) else str(exc)
        where = f" ({exc.field})" if isinstance(exc, ValidationError) and exc.field else ""
        raise ValueError(f"{name}: {why}{where}") from None
